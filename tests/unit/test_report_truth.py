"""What the report says is what happened (issue 22, items 2 and 5), on real
vLLM specs, configs from vLLM's own planner and CPU tensors built by vLLM's
stock code through the upstream adapters, V1 and V2:

* who built it: vLLM's allocation, checked by the plugin (never "the plugin
  built" on upstream runners), the stock fallback with its reason, observe;
* each layer labelled by its own spec when vLLM's hybrid KV cache manager is
  off (a Gemma-3-like sliding + full model merged into one windowed group);
* aliases and ``views[].bytes`` from the bytes the views address: an MLA
  model's 27 layers in one block-outer tensor share none;
* padding named for what it is; capacity in vLLM's terms.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch
from test_upstream_adapter import BF16, UnclassifiedSpec, build, dense, make_config, run_both, version  # noqa: F401
from upstream_harness import Layer, plan_config
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

from vllm_kv_strategies import report as report_mod
from vllm_kv_strategies.report import render, schema
from vllm_kv_strategies.core.plan import plan_kv_cache

MIB2 = 2 * 1024 * 1024


def latest(directory) -> dict:
    data = json.loads((directory / "kv_cache_report.latest.rank0.json").read_text())
    schema.validate(data)
    return data


# -- item 2: who built it ---------------------------------------------------------------------------


def test_upstream_report_says_vllm_built_and_the_plugin_checked(monkeypatch, tmp_path, kv_log, version):
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    monkeypatch.setenv("KV_STRATEGIES", "on")
    run_both(dense(n=4), version=version)
    data = latest(tmp_path)
    assert data["built_by"] == "vllm_checked"  # schema 2 said "plugin"
    assert (data["fallback_reason"], data["mode"]) == (None, "on")
    assert data["totals"]["layers_per_strategy"] == {"full_attention": 4}  # the plan it checked
    line = kv_log.summary()
    assert line.startswith("kv_strategies: rank 0: vLLM built and the plugin checked 4 layers (full_attention=4) in 1 raw buffer; ")
    assert " built 4 layers" not in line.replace("checked 4 layers", "")
    shown = render.describe(report_mod.load(next(tmp_path.glob("kv_cache_report.2*.json"))), "r")
    assert "built by vLLM, checked by the plugin (KV_STRATEGIES=on)" in shown


def test_upstream_fallback_report_says_stock_and_why(monkeypatch, tmp_path, kv_log, version):
    spec = UnclassifiedSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    run_both({f"model.layers.{i}.self_attn.attn": spec for i in range(2)}, version=version)
    data = latest(tmp_path)
    assert data["built_by"] == "stock_fallback"
    assert "UnclassifiedSpec" in data["fallback_reason"] and "model.layers.0.self_attn.attn" in data["fallback_reason"]
    line = kv_log.summary()
    assert line.startswith("kv_strategies: rank 0: stock built 2 layers (full_attention=2) in 1 raw buffer; ")
    assert line.endswith(f"; the plugin fell back to stock: {data['fallback_reason']}")
    shown = render.describe(data, "r")
    assert f"built by stock vLLM (the plugin fell back: {data['fallback_reason']}; KV_STRATEGIES=auto)" in shown


def test_upstream_observe_report_says_stock_observed(monkeypatch, tmp_path, kv_log, version):
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    monkeypatch.setenv("KV_STRATEGIES", "observe")
    run_both(dense(n=2), version=version)
    data = latest(tmp_path)
    assert data["built_by"] == "stock_observed"
    assert (data["fallback_reason"], data["totals"]["layers_per_strategy"]) == (None, {})
    assert kv_log.summary().startswith("kv_strategies: rank 0: stock built 2 layers (full_attention=2) in 1 raw buffer; ")
    assert "built by stock vLLM (observed; KV_STRATEGIES=observe)" in render.describe(data, "r")


# -- item 5: labels per layer's own spec --------------------------------------------------------------


def gemma3_like(n: int = 6, window: int = 512) -> tuple[dict, dict]:
    """Specs and attention modules of a Gemma-3-like model: every sixth layer global, the rest
    sliding (vLLM's ``Attention`` sets ``sliding_window`` per layer)."""
    specs, modules = {}, {}
    for i in range(n):
        name = f"model.layers.{i}.self_attn.attn"
        own = None if i % 6 == 5 else window
        specs[name] = (FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16) if own is None else
                       SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=own))
        modules[name] = Layer()
        modules[name].sliding_window = own
    return specs, modules


def test_hybrid_manager_off_labels_each_layer_by_its_own_window(monkeypatch, tmp_path, kv_log, version):
    specs, modules = gemma3_like()
    vllm_config, _ = make_config(specs, "LBHNC", 1 << 22)
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True
    config = plan_config(vllm_config, specs, 1 << 22)
    [group] = config.kv_cache_groups  # vLLM merged them: one group, its spec windowed
    assert (type(group.kv_cache_spec).__name__, group.kv_cache_spec.sliding_window) == ("FullAttentionSpec", 512)
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    build(version, vllm_config, config, list(specs), None, plugin=True, forward_context=modules)
    data = latest(tmp_path)
    kinds = {name: entry["kind"] for name, entry in data["layers"].items()}
    assert kinds["model.layers.5.self_attn.attn"] == "full_attention"
    assert {kinds[f"model.layers.{i}.self_attn.attn"] for i in range(5)} == {"full_attention/sliding_window"}
    [g] = data["kv_cache"]["groups"]
    assert [(s["kind"], s["sliding_window"], s["layers"]) for s in g["specs"]] == [
        ("full_attention/sliding_window", 512, [f"model.layers.{i}.self_attn.attn" for i in range(5)]),
        ("full_attention", None, ["model.layers.5.self_attn.attn"]),
    ]
    assert data["totals"]["layers_per_kind"] == {"full_attention": 1, "full_attention/sliding_window": 5}
    assert "checked 6 layers (full_attention=1, full_attention/sliding_window=5; strategies full_attention=6)" in kv_log.summary()


# -- item 5: aliases and bytes from the bytes addressed ---------------------------------------------


def test_mla_block_outer_layers_share_no_byte(monkeypatch, tmp_path, version):
    """27 MLA layers of 18,432-byte pages in one block-outer tensor of 4 blocks: each view addresses
    4 pages (73,728 bytes) spread over 1,511,424 bytes, between the other layers' pages."""
    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=BF16)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(27)}
    hf = SimpleNamespace(model_type="deepseek_v2", kv_lora_rank=512, qk_rope_head_dim=64)
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    config, _, (_, kv) = run_both(specs, "BLHNC", memory=27 * 4 * 18432, hf_config=hf, version=version)
    assert config.num_blocks == 4 and config.kv_cache_tensors[0].block_stride == 27 * 18432
    data = latest(tmp_path)
    for name, entry in data["layers"].items():
        [view] = entry["views"]
        assert view["bytes"] == 73728, (name, view)
        assert entry["aliases"] == [], name
    assert data["totals"]["bytes_allocated"] == data["totals"]["bytes_required"] == 27 * 73728


def test_aliases_and_bytes_of_interleaved_views():
    """Hand-made views of one buffer: interleaved pages share nothing, a view over both shares with
    each, K and V halves of one page are told apart, and a broadcast dimension counts once."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)  # 4,096 B/block
    names = [f"model.layers.{i}.self_attn.attn" for i in range(3)]
    raw = torch.zeros(4 * 2 * 4096, dtype=torch.int8)
    pages = raw.view(BF16).view(4, 2, 2, 16, 64)  # block, layer, K/V, token, head
    kv = {names[0]: pages[:, 0], names[1]: pages[:, 1], names[2]: (pages[:, 0, 0], pages[:, 0, 1, :1].expand(4, 16, 64))}
    cfg = KVCacheConfig(num_blocks=4, kv_cache_groups=[KVCacheGroupSpec(names, spec)],
                        kv_cache_tensors=[KVCacheTensor(size=raw.numel(), layers=names, layer_stride=4096, block_stride=8192)])
    data = report_mod.build_report(None, kv, kv_cache_config=cfg, mode="observe", strided=False)
    layers = data["layers"]
    assert [v["bytes"] for v in layers[names[0]]["views"]] == [4 * 4096]  # extent 4096 + 3 x 8192
    assert [v["bytes"] for v in layers[names[2]]["views"]] == [4 * 2048, 4 * 128]  # K; V's token 0 broadcast
    assert layers[names[0]]["aliases"] == [names[2]]
    assert layers[names[1]]["aliases"] == []
    assert layers[names[2]]["aliases"] == [names[0]]


# -- item 5: padding named for what it is ------------------------------------------------------------


def test_transfer_alignment_and_unused_bytes_are_told_apart():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)
    names = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    n = 4 * 4096
    tensors = [KVCacheTensor(size=n, layers=[name], layer_stride=n, block_stride=4096) for name in names]
    cfg = KVCacheConfig(num_blocks=4, kv_cache_tensors=tensors, kv_cache_groups=[KVCacheGroupSpec(names, spec)])
    aligned_raw = torch.zeros(n + MIB2, dtype=torch.int8)
    skip = -aligned_raw.data_ptr() % MIB2
    kv = {names[0]: aligned_raw[skip:skip + n].view(BF16).view(4, 2, 16, 64),  # as an aligned KV-transfer buffer
          names[1]: torch.zeros(n + 1024, dtype=torch.int8)[1024:].view(BF16).view(4, 2, 16, 64)}  # an unused prefix
    t = report_mod.build_report(plan_kv_cache(cfg), kv, strided=False)["totals"]
    assert (t["bytes_allocated"], t["bytes_required"]) == (2 * n + MIB2 + 1024, 2 * n)
    assert (t["alignment_padding"], t["unused_bytes"], t["duplicated_bytes"]) == (MIB2, 1024, 0)
    line = report_mod.KVCacheSummary(**t).line()
    assert f"required {2 * n:,}, alignment padding {MIB2:,}, unused 1,024, duplicated 0);" in line


def test_a_buffer_behind_empty_views_is_unused():
    """A view of no block (stock vllm-ascend's views of a block size under its kernel's) addresses
    nothing: its buffer's bytes are unused, not duplicated."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)
    name = "model.layers.0.self_attn.attn"
    cfg = KVCacheConfig(num_blocks=1, kv_cache_groups=[KVCacheGroupSpec([name], spec)],
                        kv_cache_tensors=[KVCacheTensor(size=4096, layers=[name], layer_stride=4096, block_stride=4096)])
    kv = {name: torch.zeros(4096, dtype=torch.int8).view(BF16)[:0].view(0, 2, 16, 64)}
    data = report_mod.build_report(None, kv, kv_cache_config=cfg, mode="observe", strided=False)
    t = data["totals"]
    assert (data["layers"][name]["views"][0]["bytes"], t["bytes_allocated"]) == (0, 4096)
    assert (t["alignment_padding"], t["unused_bytes"], t["duplicated_bytes"]) == (0, 4096, 0)


# -- item 5: capacity in vLLM's terms ----------------------------------------------------------------


def test_capacity_is_vllms_with_its_concurrency(monkeypatch, tmp_path, kv_log, version):
    """Sliding + full (hybrid manager on): vLLM's capacity counts each group's blocks per request
    (the window caps the sliding ones); num_blocks x block size is only the pool's token slots."""
    from vllm.v1.core import kv_cache_utils

    specs, modules = gemma3_like(12, window=64)
    vllm_config, config = make_config(specs, "LBHNC", 1 << 22)
    object.__setattr__(vllm_config, "model_config", SimpleNamespace(**vars(vllm_config.model_config), max_model_len=1024))
    vllm_config.scheduler_config.max_num_batched_tokens = 64  # a sliding request then holds 63 + 64 tokens, not 1024
    config = plan_config(vllm_config, specs, 1 << 22)
    assert len(config.kv_cache_groups) > 1
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    build(version, vllm_config, copy.deepcopy(config), list(specs), None, plugin=True, forward_context=modules)
    data = latest(tmp_path)
    t = data["totals"]
    per_group = {(g["specs"][0]["kind"], g["token_slots"], g["blocks_per_request"]) for g in data["kv_cache"]["groups"]}
    full = [p for p in per_group if p[0] == "full_attention"]
    assert full == [("full_attention", config.num_blocks * 16, 1024 // 16)]  # a 1024-token request: 64 blocks
    assert {(k, slots) for k, slots, _ in per_group} == {("full_attention", config.num_blocks * 16), ("sliding_window", config.num_blocks * 16)}
    # the window caps them (vLLM 0.32: cdiv(63 + 64, 16) + 1 = 9 blocks)
    assert all(0 < n < 64 for k, _, n in per_group if k == "sliding_window"), per_group
    if hasattr(kv_cache_utils, "get_kv_cache_capacity"):
        tokens, concurrency = kv_cache_utils.get_kv_cache_capacity(vllm_config, config)
    else:
        concurrency = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vllm_config, config)
        tokens = int(concurrency * 1024)
    assert (t["tokens"], t["max_concurrency"], t["max_model_len"]) == (tokens, concurrency, 1024)
    assert t["token_slots"] == config.num_blocks * 16 != t["tokens"]
    assert kv_log.summary().endswith(
        f"num_blocks {config.num_blocks:,} ({config.num_blocks * 16:,} token slots); capacity {tokens:,} tokens, "
        f"max concurrency {concurrency:,.2f}x for 1,024-token requests (vLLM's)")


def addressed(view: torch.Tensor) -> set[tuple[int, int]]:
    """Every (storage, byte) a view addresses, enumerated element by element."""
    offsets = torch.full(tuple(view.shape), view.storage_offset(), dtype=torch.int64)
    for dim, (n, stride) in enumerate(zip(view.shape, view.stride())):
        shape = [1] * view.dim()
        shape[dim] = n
        offsets = offsets + (torch.arange(n, dtype=torch.int64) * stride).view(shape)
    size, ptr = view.element_size(), view.untyped_storage().data_ptr()
    return {(ptr, int(o) * size + b) for o in offsets.flatten().tolist() for b in range(size)}


def views_of(value) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else [t for v in value for t in views_of(v)]


MAMBA = MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, torch.float32))
MLA = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=BF16)
MAMBA_HF = SimpleNamespace(model_type="deepseek_v2", kv_lora_rank=512, qk_rope_head_dim=64)


@pytest.mark.parametrize(("specs", "layout", "hf"), [
    pytest.param(dense(n=3), "LBHNC", None, id="dense-layer-outer"),
    pytest.param(dense(n=3), "BLHNC", None, id="dense-block-outer"),
    pytest.param({f"model.layers.{i}.self_attn.attn": MLA for i in range(3)}, "BLHNC", MAMBA_HF, id="mla-block-outer"),
    pytest.param(gemma3_like(6, window=32)[0], "BLHNC", None, id="sliding-full-block-outer"),
    pytest.param(gemma3_like(6, window=32)[0], "LBHNC", None, id="sliding-full-overlay"),
    pytest.param({**{f"model.layers.{i}.linear_attn": MAMBA for i in (0, 1, 2)},
                  "model.layers.3.self_attn.attn": FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)},
                 "LBHNC", None, id="mamba-attention-overlay"),
])
def test_bytes_and_aliases_equal_the_bytes_enumerated(monkeypatch, tmp_path, version, specs, layout, hf):
    """Against every byte each view addresses, enumerated: ``views[].bytes`` is its count and
    ``aliases`` the layers sharing one, on the layouts vLLM's planner makes."""
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    _, _, (_, kv) = run_both(specs, layout, memory=1 << 17, hf_config=hf, version=version)
    data = latest(tmp_path)
    owned = {name: [addressed(v) for v in views_of(value)] for name, value in kv.items()}
    for name, sets in owned.items():
        assert [v["bytes"] for v in data["layers"][name]["views"]] == [len(s) for s in sets], name
        mine = set().union(*sets)
        expected = sorted(other for other, theirs in owned.items() if other != name and mine & set().union(*theirs))
        assert data["layers"][name]["aliases"] == expected, name
