"""vllm-ascend 0.30 (cell ascend-0.30.0 only): multi-group models built as vLLM plans them
(one backing, KV cache groups overlaid), and the worker's budget step that decides it.

Stock 0.30 gives each layer of a multi-group model a private buffer and its worker scales the
KV cache budget down so that they fit (``NPUWorker._scale_kv_cache_memory_for_multi_group``).
The plugin leaves the budget whole only where it will build the overlay, in the form stock
itself gives the layers of the overlays it builds (step3p5 / step3p7: K|V interleaved per
kernel block in each layer's region), and compares byte for byte with that stock build.
"""

from __future__ import annotations

import copy
import logging
import sys
from types import SimpleNamespace

import pytest
import kv_compare as kc
import runner_factory as rf

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.platforms.ascend.worker_budget import OVERLAY_BUDGET, MultiGroupBudgetAdapter
from vllm_kv_strategies.errors import UnscaledBudgetError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's multi-group budget only")

N = 8


def gpt_oss_like(block_size: int = 128):
    """gpt-oss-like: sliding (128) / full alternating, 8 KV heads x 64, bf16: 2 groups of 3."""
    return rf.gqa_model("gpt-oss-like", num_blocks=N, num_layers=6, num_kv_heads=8, head_dim=64, block_size=block_size,
                        layer_types=["sliding_attention", "full_attention"] * 3, sliding_window=128, max_model_len=1024)


def gemma3_like():
    """Gemma-3-like: 5 sliding (256) : 1 full, 16 KV heads x 128, bf16."""
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    return rf.gqa_model("gemma-3-like", num_blocks=N, num_layers=12, num_kv_heads=16, head_dim=128,
                        layer_types=kinds * 2, sliding_window=256, max_model_len=1024)


MODELS = {"gpt-oss-like": gpt_oss_like, "gemma-3-like": gemma3_like, "gpt-oss-like block 256": lambda: gpt_oss_like(256)}


@pytest.fixture
def patched_runner():
    """NPUModelRunner patched by the plugin, as register() leaves it (restored afterwards)."""
    module = sys.modules[rf.NPUModelRunner.__module__]
    adapter = AscendAdapter()
    adapter.patch(module)
    yield
    adapter.unpatch(module)


def stock_scale():
    from vllm_ascend.worker.worker import NPUWorker

    return patching.original(NPUWorker, "_scale_kv_cache_memory_for_multi_group")


def worker_of(mk, runner):
    """What the worker's budget step reads: its runner, config and the model's specs."""
    return SimpleNamespace(model_runner=runner, vllm_config=runner.vllm_config,
                           model_config=runner.vllm_config.model_config, get_kv_cache_spec=lambda: dict(mk.specs))


def build(mk, runner, overlay_budget=False):
    """The plugin's build on ``runner``; ``overlay_budget``: as after its worker left the budget whole."""
    if overlay_budget:
        vars(runner)[OVERLAY_BUDGET] = True
    return kc.plugin_init(runner, mk.kv_cache_config)


def stock_overlay(mk, transfer=False):
    """Stock's own overlay of the same config: the step3p5 path (one backing, each layer a region)."""
    return kc.stock_init(mk.make_runner(model_type="step3p5", kv_transfer=transfer), mk.kv_cache_config)


storages = kc.storages


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("model", MODELS)
def test_overlay_equals_stocks_own_overlay(model, transfer):
    mk = MODELS[model]()
    ours = build(mk, mk.make_runner(model_type="gpt_oss", kv_transfer=transfer), overlay_budget=True)
    assert kc.layout_signature(ours) == kc.layout_signature(stock_overlay(mk, transfer))
    backing = mk.kv_cache_config.kv_cache_tensors[0].size
    # one backing of exactly the config's size (2 MiB alignment with a transfer config, as stock)
    (nbytes,) = storages(ours).values()
    assert nbytes == backing + (2 * 1024 * 1024 if transfer else 0)
    # layer l of every group shares region l; K block b at b * page, V half a kernel block later
    first = min(k.storage_offset() for k, _ in ours.values())  # element 0 of the backing (after alignment)
    for tensor in mk.kv_cache_config.kv_cache_tensors:
        for index, name in enumerate(tensor.layers):
            k, v = ours[name]
            r = mk.specs[name].block_size // k.shape[1]  # kernel blocks per block
            assert (k.storage_offset() - first) * k.element_size() == tensor.offset + index * tensor.layer_stride
            assert k.stride(0) * k.element_size() * r == tensor.block_stride
            assert (v.storage_offset() - k.storage_offset()) * k.element_size() * 2 * r == tensor.block_stride


@pytest.mark.parametrize("model,scale", [("gpt-oss-like", 0.5), ("gemma-3-like", 1 / 6)])
def test_budget_left_unscaled_only_where_the_plugin_builds_the_overlay(model, scale, patched_runner, kv_log):
    mk = MODELS[model]()
    budget = 1 << 30
    runner = mk.make_runner(model_type="gpt_oss")
    assert stock_scale()(worker_of(mk, runner), budget) == int(budget * scale)
    # the plugin's own records (kv_log): an earlier test's vLLM logging set-up may stop them reaching the root
    assert MultiGroupBudgetAdapter().scale(stock_scale(), worker_of(mk, runner), budget) == budget
    assert vars(runner)[OVERLAY_BUDGET] is True
    assert any(f"stock scales it by {scale:.4f}" in r.getMessage() for r in kv_log.records)
    # the build that follows is the overlay: one backing of the config's size
    ours = build(mk, runner)
    assert list(storages(ours).values()) == [mk.kv_cache_config.kv_cache_tensors[0].size]


def test_budget_stays_scaled_where_the_plugin_refuses(patched_runner, caplog):
    """Paged-attention kernels need contiguous K/V (no overlay): stock's scale stays, nothing is
    marked, and the build is stock's per-layer form (2 x the plan's backing, the scaled budget)."""
    mk = gpt_oss_like()
    runner = mk.make_runner(model_type="gpt_oss", paged_attention=True)
    with caplog.at_level(logging.WARNING):
        assert MultiGroupBudgetAdapter().scale(stock_scale(), worker_of(mk, runner), 1 << 30) == 1 << 29
    assert OVERLAY_BUDGET not in vars(runner)
    assert "paged-attention kernels need contiguous K/V caches" in caplog.text
    ours = build(mk, runner)
    n = mk.kv_cache_config.num_blocks
    assert sum(storages(ours).values()) == n * sum(s.page_size_bytes for s in mk.specs.values())


def test_budget_stays_scaled_for_a_runner_the_plugin_does_not_build():
    mk = gpt_oss_like()
    runner = mk.make_runner(model_type="gpt_oss")
    assert not patching.is_patched(rf.NPUModelRunner)
    assert MultiGroupBudgetAdapter().scale(stock_scale(), worker_of(mk, runner), 1 << 30) == 1 << 29
    assert OVERLAY_BUDGET not in vars(runner)


def test_no_fallback_after_the_budget_was_left_unscaled(monkeypatch):
    """Unscaled, then the overlay is refused (here: paged attention): an error naming why, in
    auto too; stock's private buffers (2 x the budget) are never allocated."""
    monkeypatch.setattr("vllm_kv_strategies.envs.KV_STRATEGIES", "auto")
    mk = gpt_oss_like()
    runner = mk.make_runner(model_type="gpt_oss", paged_attention=True)
    with pytest.raises(UnscaledBudgetError, match=r"left the budget unscaled .*paged-attention.* 12582912 bytes for a 6291456-byte plan"):
        build(mk, runner, overlay_budget=True)
    assert runner.kv_caches == []


def test_kv_cache_memory_bytes_builds_the_overlay():
    """--kv-cache-memory-bytes: stock's worker never scales the budget (its private buffers would
    need 2 x it); the plugin builds the overlay within it."""
    mk = gpt_oss_like()
    runner = mk.make_runner(model_type="gpt_oss")
    runner.vllm_config.cache_config.kv_cache_memory_bytes = mk.kv_cache_config.kv_cache_tensors[0].size
    ours = build(mk, runner)
    assert list(storages(ours).values()) == [mk.kv_cache_config.kv_cache_tensors[0].size]


def test_budget_step_on_a_runner_before_its_attention_groups(patched_runner):
    """At the budget step the worker's runner has no attention groups, no kernel block
    sizes and no ``kv_cache_config`` yet (``initialize_kv_cache`` sets them; vLLM's
    ``_kv_cache_spec_attn_group_iterator`` raises AttributeError without the last): the
    backends come from the layers and the decision is the same."""
    mk = gpt_oss_like()
    runner = mk.make_runner(model_type="gpt_oss")
    runner.attn_groups = []
    vars(runner).pop("kernel_block_sizes", None)
    vars(runner).pop("kv_cache_config")
    assert MultiGroupBudgetAdapter().scale(stock_scale(), worker_of(mk, runner), 1 << 30) == 1 << 30
    assert vars(runner)[OVERLAY_BUDGET] is True


HYBRIDS = {
    "hybrid 2 Mamba + 2 full": lambda: __import__("stock_cases_030").hybrid(),
    "Qwen3-Next-80B-A3B TP4": lambda: rf.qwen3_next(tp=4, num_blocks=N),
}


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("model", HYBRIDS)
def test_hybrid_equals_stock(model, transfer):
    """Hybrids (stock overlays them itself, its worker leaving the budget whole): one backing,
    attention and Mamba layer j in region j, attention K|V interleaved per kernel block, the
    states page by page ([conv | ssm | pad]); byte for byte as stock, no budget flag needed."""
    mk = HYBRIDS[model]()
    stock_runner = mk.make_runner(kv_transfer=transfer)
    config = copy.deepcopy(mk.kv_cache_config)
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")(
        stock_runner, config, **rf.stock_kwargs(stock_runner, config))
    runner = mk.make_runner(kv_transfer=transfer)
    ours = build(mk, runner)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert [type(ours[n]) for n in sorted(ours)] == [type(stock[n]) for n in sorted(stock)]
    (nbytes,) = storages(ours).values()
    assert nbytes == mk.kv_cache_config.kv_cache_tensors[0].size + (2 * 1024 * 1024 if transfer else 0)
    assert runner.hybrid_with_attn_and_mamba is stock_runner.hybrid_with_attn_and_mamba is True


@pytest.mark.parametrize("model", ["gpt-oss-like", "hybrid"])
def test_each_half_builds_the_overlay(model):
    """``_allocate_kv_cache_tensors`` then ``_reshape_kv_cache_tensors`` (as stock's
    ``initialize_kv_cache_tensors`` calls them) give the whole build's layout: one backing, each
    layer's raw buffer its region."""
    mk = gpt_oss_like() if model == "gpt-oss-like" else HYBRIDS["hybrid 2 Mamba + 2 full"]()
    adapter, runner = AscendAdapter(), mk.make_runner(model_type="gpt_oss")
    vars(runner)[OVERLAY_BUDGET] = True
    config = copy.deepcopy(mk.kv_cache_config)
    raws = adapter.allocate_kv_cache_tensors(patching.original(rf.NPUModelRunner, "_allocate_kv_cache_tensors"), runner, config)
    assert len({raw.untyped_storage().data_ptr() for raw in raws.values()}) == 1
    n = config.num_blocks
    assert sorted(raw.numel() for raw in raws.values()) == sorted(n * s.page_size_bytes for s in mk.specs.values())
    halves = adapter.reshape_kv_cache_tensors(patching.original(rf.NPUModelRunner, "_reshape_kv_cache_tensors"), runner,
                                              config, raws, rf.kernel_block_sizes(runner, config))
    whole = build(mk, mk.make_runner(model_type="gpt_oss"), overlay_budget=True)
    assert kc.layout_signature(halves) == kc.layout_signature(whole)


def test_budget_stays_scaled_on_ascend_model_runner_v2_when_its_allocation_is_stock(patched_runner, caplog):
    """Ascend's Model Runner V2 whose allocation (``vllm_ascend.worker.v2.attn_utils``) the plugin
    did not patch gives every layer private buffers: the budget is stock's, and the warning names
    the V2 runner. (With it patched the plugin builds vLLM's overlay there too:
    tests/ascend/test_budget_030.py.)"""
    import vllm_ascend.worker.v2.model_runner as v2

    mk = gpt_oss_like()
    runner = object.__new__(v2.NPUModelRunner)
    runner.vllm_config = mk.make_runner().vllm_config
    with caplog.at_level(logging.WARNING):
        assert MultiGroupBudgetAdapter().scale(stock_scale(), worker_of(mk, runner), 1 << 30) == 1 << 29
    assert OVERLAY_BUDGET not in vars(runner)
    assert "NPUModelRunner (Ascend V2)'s KV cache build is not the plugin's (it stays stock)" in caplog.text
