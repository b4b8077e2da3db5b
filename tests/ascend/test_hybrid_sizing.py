"""Hybrid attention + Mamba models at exactly their budget on vllm-ascend 0.11 / 0.13 (issue 13,
route (a')), and nothing changed on 0.18 / 0.23. Runs in every Ascend cell.

0.11 / 0.13 size a hybrid's attention page to the padded Mamba page (Qwen3-Next-80B TP4: block
384, K page 196,608, Mamba 274,432 padded to 393,216). The attention layer's contiguous K and V
then cannot share a tensor's bytes with the Mamba states block by block, and it gets buffers of
its own: 2x the planner's budget (stock 0.11 allocates 4x). The plugin therefore does two things:

* **sizing** (front-end process, ``HybridAttentionMambaModelConfig.verify_and_update_config``,
  ``platforms.ascend.targets.HYBRID_SIZING``): vllm-ascend's sizing runs first, then the block becomes
  ssm bytes / K bytes per token (a K page is the ssm state, a multiple of the 128-token kernel
  block: TP1 1024, TP4 512, TP8 256) and the Mamba page is padded to 2 K pages;
* **layout** (workers, ``platforms.ascend.layout.hybrid_kv.states_in_kv_page``): K at ``[0, N*K)``, V at
  ``[N*K, 2N*K)``, ssm block j = K block j, conv block j in the first conv bytes of V block j
  (a strided conv view, block stride one K page). Decided from the ``KVCacheConfig`` alone, and
  proved by the same block-consistency check (``crosses_blocks``) as 0.18's layout.

**Capacity is compared at equal bytes allocated.** The (a') pages are larger, so at an equal
*planner budget* the plugin has fewer blocks than stock (TP4 at 256 MiB: 42 against 56; the same
21,504 tokens; TP1: 10,240 tokens against 10,880), but stock allocates 2x (0.13) or 4x (0.11)
that budget and the plugin exactly it. At equal bytes allocated the plugin has more blocks and
more tokens at every TP (:func:`test_capacity_at_equal_bytes_allocated`).

**Route (b)** (a block-consistent layout at today's sizing) is refused: the ATB cache write takes
contiguous K/V caches only, and at today's sizing no contiguous K/V places an ssm block inside
the attention block of its own index. The issue's toy (Qwen3-Next TP4 as 0.13 sizes it, N = 2,
budget 9,437,184) stays at today's layout, 18,874,368 (:func:`test_route_b_refused_at_todays_sizing`).

On vllm-ascend 0.30 there is no hybrid sizing of vllm-ascend's own: vLLM 0.30's
``Platform._align_hybrid_block_size`` sizes hybrids (attention block = 128 x cdiv(Mamba page,
128 x K+V bytes per token), the Mamba page padded to the attention page: the numbers 0.11 / 0.13
size to), the plugin installs no sizing, and it refuses 0.30's hybrid backing by name (stock
builds it), so the layout tests of hybrids are skipped there (``HYBRID_030``).

Expected numbers come from the research memo (notes/issue13.md) and were recomputed here with
each release's own sizing and vLLM planner.
"""

from __future__ import annotations

import importlib
import logging
import math

import pytest
import torch
import runner_factory as rf
from kv_compare import plugin_init, stock_init, storages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

import vllm_kv_strategies
from vllm_kv_strategies import platforms, patching
from vllm_kv_strategies.platforms.ascend.runner import TRANSFER_ALIGNMENT, AscendAdapter
from vllm_kv_strategies.platforms.ascend.sizing import HybridSizingAdapter
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import BeyondConfigError, KVCacheLayoutError, StockWouldCorruptError
from vllm_kv_strategies.platforms.ascend.layout.buffers import shares_block_consistently
from vllm_kv_strategies.platforms.ascend.layout.hybrid_kv import kv_block_sizing, states_in_kv_page
from vllm_kv_strategies.core.plan import plan_kv_cache
from vllm_kv_strategies.core.strategies import ModelDims, PagePart

R = rf.RELEASE
SIZED = R in ((0, 11), (0, 13))
needs_sizing = pytest.mark.skipif(
    not SIZED, reason="the plugin resizes hybrid pages on vllm-ascend 0.11 / 0.13 only (0.18+ size K page == ssm state themselves)"
)
only_legacy_sizing = pytest.mark.skipif(
    not SIZED, reason="0.18+ never size the attention page to the padded Mamba page (page = 2 K pages + conv)"
)
#: Skip reason on vllm-ascend 0.30.
HYBRID_030 = (
    "vllm-ascend 0.30: a hybrid (Mamba + attention) config is one page-strided backing, which the plugin "
    "builds as stock (tests/ascend/test_overlay_030.py), not 0.23's form these tests check, and 0.30 has "
    "no vllm-ascend hybrid sizing (vLLM's _align_hybrid_block_size)"
)
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
MiB = 1 << 20
#: Stock bytes allocated / the planner's budget for hybrid tensors (attention K/V of their own;
#: 0.11 also one buffer per GDN layer).
STOCK_FACTOR = {(0, 11): 4, (0, 13): 2}.get(R, 1)

MODELS = {"qwen3_next": rf.qwen3_next, "qwen35_style": rf.qwen35_style}
#: (model, tp) -> (attention block tokens, Mamba page padded bytes) from each sizing.
STOCK_SIZING_0_11_0_13 = {
    ("qwen3_next", 1): (640, 1_310_720),
    ("qwen3_next", 4): (384, 393_216),
    ("qwen3_next", 8): (256, 262_144),
    ("qwen35_style", 1): (384, 1_572_864),
    ("qwen35_style", 4): (384, 393_216),
    ("qwen35_style", 8): (256, 262_144),
}
PLUGIN_SIZING_0_11_0_13 = {  # K page == ssm state; Mamba page = 2 K pages
    ("qwen3_next", 1): (1024, 2_097_152),
    ("qwen3_next", 4): (512, 524_288),
    ("qwen3_next", 8): (256, 262_144),  # stock already sizes K page == ssm state here
    ("qwen35_style", 1): (512, 2_097_152),
    ("qwen35_style", 4): (512, 524_288),
    ("qwen35_style", 8): (256, 262_144),
}
STOCK_SIZING_0_18 = {  # K page == ssm state; Mamba page (and attention page) = 2 K pages + conv
    ("qwen3_next", 1): (1024, 2_146_304),
    ("qwen3_next", 4): (512, 536_576),
    ("qwen3_next", 8): (256, 268_288),
    ("qwen35_style", 1): (512, 2_146_304),
    ("qwen35_style", 4): (512, 536_576),
    ("qwen35_style", 8): (256, 268_288),
}
CASES = list(PLUGIN_SIZING_0_11_0_13)
#: (model, tp) -> (tensors, bytes per tensor) of the plugin-sized config at N = 2 (0.11 / 0.13).
TENSORS_AT_2 = {
    ("qwen3_next", 1): (12, 4_194_304),
    ("qwen3_next", 4): (12, 1_048_576),
    ("qwen3_next", 8): (12, 524_288),
    ("qwen35_style", 1): (8, 4_194_304),
    ("qwen35_style", 4): (8, 1_048_576),
    ("qwen35_style", 8): (8, 524_288),
}


def build(model: str, tp: int, **kwargs):
    return MODELS[model](tp=tp, **kwargs)


def offset(t: torch.Tensor) -> int:
    return t.data_ptr() - t.untyped_storage().data_ptr()


def block_owners(views, num_blocks: int, nbytes: int) -> torch.Tensor:
    """For one layer's views of one storage of ``nbytes``: the block index each byte belongs to
    (-1: none). Kernel blocks count as part of their logical block; a byte in two views of the
    layer is an error."""
    owner = torch.full((nbytes,), -1, dtype=torch.int32)
    for view in views:
        per_block = view.shape[0] // num_blocks
        for kb in range(view.shape[0]):
            block = view[kb]
            assert block.is_contiguous(), (tuple(view.shape), view.stride())
            start = offset(block)
            span = owner[start : start + block.numel() * block.element_size()]
            assert bool((span == -1).all()), "two parts of one layer share bytes"
            span.fill_(kb // per_block)
    return owner


def assert_block_consistent(kv: dict, config, tensors=None) -> int:
    """Every byte that two layers of one ``KVCacheTensor`` share belongs to the same block index
    in both (the block pool gives a block to one group at a time), and each tensor is one
    storage. Returns the bytes an attention and a Mamba layer share, summed over the tensors
    checked (all, or ``tensors``)."""
    shared = 0
    for tid, tensor in enumerate(config.kv_cache_tensors):
        if tensors is not None and tid not in tensors:
            continue
        layers = list(tensor.shared_by)
        ptrs = {t.untyped_storage().data_ptr() for name in layers for t in kv[name]}
        assert len(ptrs) == 1, f"tensor {tid}: {len(ptrs)} storages"
        nbytes = kv[layers[0]][0].untyped_storage().nbytes()
        owners = {name: block_owners(kv[name], config.num_blocks, nbytes) for name in layers}
        for i, a in enumerate(layers):
            for b in layers[i + 1 :]:
                both = (owners[a] >= 0) & (owners[b] >= 0)
                assert bool((owners[a][both] == owners[b][both]).all()), f"tensor {tid}: {a} and {b} cross blocks"
        attn = [x for x in layers if isinstance(kv[x], tuple)]
        mamba = [x for x in layers if isinstance(kv[x], list)]
        if attn and mamba:
            shared += int(((owners[attn[0]] >= 0) & (owners[mamba[0]] >= 0)).sum())
    return shared


def messages(log, level=logging.INFO) -> list[str]:
    """The plugin's messages at exactly ``level`` (``kv_log``: tests/plugin_fixtures.py)."""
    return log.at(level)


# -- the declaration --------------------------------------------------------------------------


@pytest.mark.parametrize("release", ["0.11.0", "0.13.0", "0.18.0", "0.23.0", "0.13.0+cpu", "0.12.0", "0.17.0"])
def test_sizing_is_declared_for_0_11_and_0_13_only(release):
    sized = release.split("+")[0] in ("0.11.0", "0.13.0")
    assert (facts.hybrid_sizing_target(release) is facts.HYBRID_SIZING) is sized
    assert facts.targets(release) == ((facts.target(release), facts.HYBRID_SIZING) if sized else (facts.target(release),))


def test_installed_release_targets():
    assert platforms.targets("ascend") == facts.targets()
    assert (facts.HYBRID_SIZING in platforms.targets("ascend")) is SIZED
    target = facts.HYBRID_SIZING
    assert target.why and target.mirrors and target.remove_when and "0.18" in target.mirrors


@needs_sizing
def test_declared_attribute_is_vllm_ascends_classmethod_on_vllms_class():
    """The declared module is where the release defines the sizing; the attribute resolves to
    vLLM's HybridAttentionMambaModelConfig, which holds vllm-ascend's classmethod; the kernel block
    size the sizing rounds to is the release's attention backend's."""
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig

    module = importlib.import_module(facts.HYBRID_SIZING.module)
    owner, name = patching.owner_and_name(module, facts.HYBRID_SIZING.attributes[0])
    assert owner is HybridAttentionMambaModelConfig and name == "verify_and_update_config"
    stock = patching.original(owner, name)
    assert isinstance(stock, classmethod) and stock.__func__.__module__ == facts.HYBRID_SIZING.module
    assert facts.HYBRID_KERNEL_BLOCK_SIZE == facts.kernel_block_size(rf.AscendAttentionBackend) == 128


# -- sizing on the release's real HybridAttentionMambaModelConfig -------------------------------


@pytest.mark.parametrize("model,tp", CASES, ids=[f"{m}-tp{t}" for m, t in CASES])
def test_sizing(model, tp, kv_log):
    stock = build(model, tp, num_blocks=2).notes
    ours = build(model, tp, num_blocks=2, plugin_sizing=True).notes
    got = lambda notes: (notes["attn_block_size"], notes["mamba_page_size_padded"])  # noqa: E731
    if SIZED:
        assert got(stock) == STOCK_SIZING_0_11_0_13[model, tp]
        assert got(ours) == PLUGIN_SIZING_0_11_0_13[model, tp]
        conv, ssm = (math.prod(s) * 2 for s in ours["mamba_shapes"])  # bf16 states
        assert ours["mamba_page_size_padded"] == 2 * ssm and conv <= ssm
        changed = got(stock) != got(ours)
        [line] = [m for m in messages(kv_log) if "hybrid page sizing" in m]
        if changed:
            assert line.startswith(
                f"kv_strategies: hybrid page sizing: attention block {stock['attn_block_size']} -> "
                f"{ours['attn_block_size']} tokens, Mamba page padded {stock['mamba_page_size_padded']} -> "
                f"{ours['mamba_page_size_padded']} bytes (K page = ssm state = {ssm} bytes)"
            ), line
        else:
            assert "already puts a K page on the ssm state" in line
    elif R >= (0, 30):  # no patch; vLLM 0.30's _align_hybrid_block_size: 0.11 / 0.13's numbers
        assert got(stock) == got(ours) == STOCK_SIZING_0_11_0_13[model, tp]
        assert not [m for m in messages(kv_log) if "hybrid page sizing" in m]
    else:  # 0.18 / 0.23: no patch, their own K page == ssm sizing
        assert got(stock) == got(ours) == STOCK_SIZING_0_18[model, tp]
        assert not [m for m in messages(kv_log) if "hybrid page sizing" in m]


@needs_sizing
def test_register_installs_the_sizing_and_unregister_restores_it(monkeypatch, kv_log):
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig as Hybrid

    vllm_kv_strategies.unregister()
    saved = Hybrid.__dict__["verify_and_update_config"]
    try:
        monkeypatch.setenv("KV_STRATEGIES", "auto")
        vllm_kv_strategies.register()  # the module is imported already: patched now
        patched = Hybrid.__dict__["verify_and_update_config"]
        assert patched is not saved and isinstance(patched, classmethod)
        assert patched.__func__.__wrapped__ is saved
        vllm_kv_strategies.register()  # a repeat is a no-op
        assert Hybrid.__dict__["verify_and_update_config"] is patched
        assert any(
            m.startswith(f"kv_strategies: patched {facts.HYBRID_SIZING.module}.{{") for m in messages(kv_log)
        ), messages(kv_log)
        notes = rf.qwen3_next(tp=4, num_blocks=2).notes  # whatever is installed on the class runs
        assert (notes["attn_block_size"], notes["mamba_page_size_padded"]) == (512, 524_288)
        vllm_kv_strategies.unregister()
        assert Hybrid.__dict__["verify_and_update_config"] is saved  # identity, not a copy
        notes = rf.qwen3_next(tp=4, num_blocks=2).notes
        assert (notes["attn_block_size"], notes["mamba_page_size_padded"]) == (384, 393_216)
    finally:
        vllm_kv_strategies.unregister()
    assert Hybrid.__dict__["verify_and_update_config"] is saved


@needs_sizing
def test_off_installs_no_sizing(monkeypatch):
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig as Hybrid

    vllm_kv_strategies.unregister()
    saved = Hybrid.__dict__["verify_and_update_config"]
    monkeypatch.setenv("KV_STRATEGIES", "off")
    try:
        vllm_kv_strategies.register()
        assert Hybrid.__dict__["verify_and_update_config"] is saved
        notes = rf.qwen3_next(tp=4, num_blocks=2).notes
        assert (notes["attn_block_size"], notes["mamba_page_size_padded"]) == (384, 393_216)
    finally:
        vllm_kv_strategies.unregister()


@needs_sizing
def test_observe_keeps_stock_sizing(monkeypatch):
    """``observe`` (stock builds, the plugin only describes) must not change the sizing."""
    monkeypatch.setenv("KV_STRATEGIES", "observe")
    assert HybridSizingAdapter.observing()
    notes = rf.qwen3_next(tp=4, num_blocks=2, plugin_sizing=True).notes
    assert (notes["attn_block_size"], notes["mamba_page_size_padded"]) == (384, 393_216)


@needs_sizing
@pytest.mark.parametrize("user_block", [128, 384, 640])
def test_a_block_size_the_user_set_is_left_to_vllm_ascend(user_block, kv_log):
    """vllm-ascend raises a user block that is too small (to 384 at TP4) and keeps a larger one."""
    notes = rf.qwen3_next(tp=4, num_blocks=2, block_size=user_block, plugin_sizing=True).notes
    block = max(user_block, 384)
    assert notes["attn_block_size"] == block
    assert notes["mamba_page_size_padded"] == block * 1024  # attention page = block x 2 x 512 bytes
    [line] = [m for m in messages(kv_log) if "hybrid page sizing" in m]
    assert f"the block size was set by the user ({user_block} tokens)" in line


@needs_sizing
def test_other_model_types_and_stock_only_configs_keep_stock_sizing(monkeypatch, kv_log):
    """The sizing is limited to model types whose kernels were checked (``qwen3_next``; the
    platform resets other hybrids to 128 anyway) and to plain K/V pages (
    ``platforms.ascend.facts.sizing_refusal``)."""

    def sized(**kwargs):
        notes = rf.qwen3_next(tp=4, num_blocks=2, plugin_sizing=True, **kwargs).notes
        return notes["attn_block_size"], notes["mamba_page_size_padded"]

    assert sized() == (512, 524_288)
    assert sized(hf_overrides={"model_type": "granitemoehybrid"}) == (384, 393_216)
    assert "model type 'granitemoehybrid' is not one whose kernels were checked (qwen3_next)" in messages(kv_log)[-1]
    assert sized(additional_config={"kv_cache_dtype": "int8"}) == (384, 393_216)
    assert "the sizing is defined for plain K/V pages, not an int8 KV cache in the BSH layout" in messages(kv_log)[-1]
    monkeypatch.setattr(facts, "built_for_310p", lambda: True)
    assert sized() == (384, 393_216)
    assert "the 310P build (NZ format) is not handled" in messages(kv_log)[-1]
    assert not messages(kv_log, logging.WARNING)


@needs_sizing
def test_a_block_size_the_kernels_cannot_take_keeps_stock_with_one_warning(kv_log):
    """32 KV heads of 256 at TP1: 16,384 K bytes per token, ssm 1,048,576 bytes = 64 tokens, not a
    multiple of the 128-token kernel block: vllm-ascend's sizing (block 128) stays, one warning."""
    for _ in range(2):
        notes = rf.qwen3_next(tp=1, num_blocks=2, num_key_value_heads=32, plugin_sizing=True).notes
        assert (notes["attn_block_size"], notes["mamba_page_size_padded"]) == (128, 4_194_304)
    [warning] = messages(kv_log, logging.WARNING)
    assert "hybrid page sizing left as vllm-ascend sets it (attention block 128 tokens" in warning
    assert "state ssm of 1048576 bytes holds 64 tokens of 16384 K bytes, not a whole number of 128-token kernel blocks" in warning


@needs_sizing
def test_an_unexpected_sizing_error_warns_in_auto_and_raises_in_on(monkeypatch, kv_log):
    from vllm_kv_strategies.platforms.ascend import sizing as ascend_sizing

    def broken(vllm_config):
        raise RuntimeError("model class without Mamba state shapes")

    monkeypatch.setattr(ascend_sizing, "mamba_states", broken)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    notes = rf.qwen3_next(tp=4, num_blocks=2, plugin_sizing=True).notes
    assert (notes["attn_block_size"], notes["mamba_page_size_padded"]) == (384, 393_216)
    [warning] = messages(kv_log, logging.WARNING)
    assert "hybrid page sizing left as vllm-ascend sets it: RuntimeError('model class without Mamba state shapes')" in warning
    monkeypatch.setenv("KV_STRATEGIES", "on")
    with pytest.raises(RuntimeError, match="without Mamba state shapes"):
        rf.qwen3_next(tp=4, num_blocks=2, plugin_sizing=True)


def test_kv_block_sizing_rules():
    conv, ssm = PagePart("conv", BF16, (3, 2048)), PagePart("ssm", BF16, (8, 128, 128))
    assert kv_block_sizing(512, (conv, ssm), 128) == (512, 524_288)
    assert kv_block_sizing(1024, (conv, ssm), 128) == (256, 524_288)
    with pytest.raises(KVCacheLayoutError, match="ssm of 262144 bytes holds 2048 tokens of 128 K bytes, not a whole number of 3072-token"):
        kv_block_sizing(128, (conv, ssm), 3072)
    with pytest.raises(KVCacheLayoutError, match=r"holds 341\.333 tokens of 768 K bytes"):
        kv_block_sizing(768, (conv, ssm), 128)
    # three states: the last of the two largest is the K block, the others (274,432) overflow V
    with pytest.raises(KVCacheLayoutError, match="other states take 274432 bytes, more than a 262144-byte V block"):
        kv_block_sizing(512, (conv, ssm, PagePart("ssm2", BF16, (8, 128, 128))), 128)
    with pytest.raises(KVCacheLayoutError, match="1 state"):
        kv_block_sizing(512, (ssm,), 128)
    odd = PagePart("conv", FP32, (1, 3))  # 12 bytes: the ssm (bf16) after it is fine, a state after it is not
    assert kv_block_sizing(512, (odd, ssm), 128) == (512, 524_288)
    with pytest.raises(KVCacheLayoutError, match="state x .* would not be aligned"):
        kv_block_sizing(512, (PagePart("w", BF16, (3,)), PagePart("x", FP32, (2,)), ssm), 128)


# -- engine-core plan and worker layout -------------------------------------------------------


@needs_sizing
@pytest.mark.parametrize("kv_transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("model,tp", CASES, ids=[f"{m}-tp{t}" for m, t in CASES])
def test_plan_and_layout_agree_at_exactly_the_budget(model, tp, kv_transfer):
    """vLLM's planner on the resized specs gives the memo's tensors; the workers put every tensor
    in one buffer with the states inside its K/V blocks; allocated == the budget (+ exactly 2 MiB
    per raw buffer with kv_transfer_config, each 2 MiB aligned). Stock vllm-ascend builds the same
    config too (a worker falling back in ``auto``) at 2x (0.13) / 4x (0.11) of it, as it does at
    its own sizing."""
    mk = build(model, tp, num_blocks=2, plugin_sizing=True)
    config = mk.kv_cache_config
    count, size = TENSORS_AT_2[model, tp]
    assert [t.size for t in config.kv_cache_tensors] == [size] * count
    assert [len(t.shared_by) for t in config.kv_cache_tensors] == [4] * count  # 1 attention + 3 GDN
    budget = count * size
    block, padded = PLUGIN_SIZING_0_11_0_13[model, tp]
    k_page = padded // 2
    runner = mk.make_runner(kv_transfer=kv_transfer)
    decided = AscendAdapter().plan_runner(runner, config)
    assert decided.hybrid
    assert [(lo.single, lo.kv_page, lo.buffer_bytes) for lo in decided.layouts] == [(True, k_page, (size,))] * count
    attn_spec = config.kv_cache_groups[0].kv_cache_spec
    assert (attn_spec.block_size, attn_spec.page_size_bytes) == (block, padded)
    ours = plugin_init(runner, config)
    got = storages(ours)
    assert len(got) == count
    if kv_transfer:  # one raw buffer per tensor, 2 MiB aligned (K starts it), 2 MiB over
        assert sum(got.values()) == budget + count * TRANSFER_ALIGNMENT
        starts = {p: min(t.data_ptr() for v in ours.values() for t in v if t.untyped_storage().data_ptr() == p) for p in got}
        assert all(start % TRANSFER_ALIGNMENT == 0 for start in starts.values())
    else:
        assert sum(got.values()) == budget  # allocated / required = 1.000
    shared = assert_block_consistent(ours, config, tensors={0})
    conv = math.prod(mk.notes["mamba_shapes"][0]) * 2
    assert shared == 2 * (k_page + conv)  # N = 2 blocks of (ssm in K) + (conv in V)
    if kv_transfer:
        return
    stock = stock_init(mk.make_runner(), config)
    for name in ours:  # the same shapes and dtypes as stock; attention strides too
        assert [(t.shape, t.dtype) for t in ours[name]] == [(t.shape, t.dtype) for t in stock[name]], name
        if isinstance(ours[name], tuple):
            assert [t.stride() for t in ours[name]] == [t.stride() for t in stock[name]], name
    assert sum(storages(stock).values()) == STOCK_FACTOR * budget


@needs_sizing
@pytest.mark.parametrize("num_spec", [1, 3])
def test_mtp_draft_layer_and_its_larger_conv_state(num_spec):
    """Qwen3-Next TP4 with one MTP draft attention layer and ``num_spec`` speculative tokens, as
    the plugin sizes it (block 512, Mamba page 524,288; the conv state grows to (3 + num_spec,
    2048): 16,384 or 24,576 bytes, still inside a V block). vLLM's planner gives 13 tensors of
    1,048,576 at N = 2 (one serves the draft layer alone): budget 13,631,488, allocated exactly."""
    attn = FullAttentionSpec(block_size=512, num_kv_heads=1, head_size=256, dtype=BF16)
    shapes = ((3 + num_spec, 2048), (8, 128, 128))
    states = tuple(PagePart(n, BF16, s) for n, s in zip(("conv", "ssm"), shapes))
    assert kv_block_sizing(512, states, 128) == (512, 524_288)
    mamba = rf._spec(
        MambaSpec, block_size=512, shapes=shapes, dtypes=(BF16, BF16), page_size_padded=524_288,
        mamba_type=rf.gdn_mamba_type(), num_speculative_blocks=num_spec, mamba_cache_mode="none",
    )
    specs = {f"model.layers.{i}.self_attn.attn": attn for i in range(3, 48, 4)}
    specs["model.mtp.layers.0.self_attn.attn"] = attn
    specs.update({f"model.layers.{i}.linear_attn": mamba for i in range(48) if (i + 1) % 4})
    config = rf.build_kv_cache_config(specs, 2, max_model_len=512)
    assert [t.size for t in config.kv_cache_tensors] == [1_048_576] * 13
    assert sorted(len(t.shared_by) for t in config.kv_cache_tensors) == [1] + [4] * 12
    kv = plugin_init(rf.make_runner(config, model_type="qwen3_next"), config)
    assert sum(storages(kv).values()) == 13_631_488
    assert assert_block_consistent(kv, config) == 12 * 2 * (262_144 + math.prod(shapes[0]) * 2)


@needs_sizing
def test_exact_offsets_of_the_toy():
    """Qwen3-Next TP4, N = 2, plugin sizing (block 512, K page 262,144 = ssm, conv 12,288):
    12 tensors of 1,048,576. Per tensor: block 0: K and ssm [0, 262,144), V [524,288, 786,432),
    conv [524,288, 536,576); block 1: K and ssm [262,144, 524,288), V [786,432, 1,048,576),
    conv [786,432, 798,720). Attention views are split into 128-token kernel blocks."""
    mk = rf.qwen3_next(tp=4, num_blocks=2, plugin_sizing=True)
    config = mk.kv_cache_config
    assert sum(t.size for t in config.kv_cache_tensors) == 12_582_912
    kv = plugin_init(mk.make_runner(), config)
    tensor = config.kv_cache_tensors[0]
    attn = next(n for n in tensor.shared_by if "self_attn" in n)
    gdn = [n for n in tensor.shared_by if "linear_attn" in n]
    k, v = kv[attn]
    assert (tuple(k.shape), k.stride(), k.dtype, offset(k)) == ((8, 128, 1, 256), (32768, 256, 256, 1), BF16, 0)
    assert (tuple(v.shape), v.stride(), v.dtype, offset(v)) == ((8, 128, 1, 256), (32768, 256, 256, 1), BF16, 524_288)
    for name in gdn:
        conv, ssm = kv[name]
        assert (tuple(ssm.shape), ssm.stride(), ssm.is_contiguous(), offset(ssm)) == ((2, 8, 128, 128), (131072, 16384, 128, 1), True, 0)
        assert (tuple(conv.shape), conv.stride(), conv.is_contiguous(), offset(conv)) == ((2, 3, 2048), (131072, 2048, 1), False, 524_288)
        assert ssm.data_ptr() == k.data_ptr() and conv.data_ptr() == v.data_ptr()
        assert ssm.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
    span = lambda t: (offset(t), offset(t) + t.numel() * t.element_size())  # noqa: E731
    conv, ssm = kv[gdn[0]]
    per_block = 512 // 128  # kernel blocks per block
    for j, (k_range, v_range, conv_range) in enumerate(
        [((0, 262_144), (524_288, 786_432), (524_288, 536_576)), ((262_144, 524_288), (786_432, 1_048_576), (786_432, 798_720))]
    ):
        assert (span(k[j * per_block])[0], span(k[(j + 1) * per_block - 1])[1]) == k_range
        assert (span(v[j * per_block])[0], span(v[(j + 1) * per_block - 1])[1]) == v_range
        assert span(ssm[j]) == k_range and span(conv[j]) == conv_range
    # writing ssm block 1 is reading K block 1, and nothing else
    ssm[1].fill_(1.0)
    assert bool((k[4:8] == 1.0).all()) and int(torch.count_nonzero(k[:4])) == 0 and int(torch.count_nonzero(v)) == 0
    assert all(bool((kv[n][1][1] == 1.0).all()) for n in gdn)


@needs_sizing
def test_placement_is_the_proof_breaking_it_is_caught():
    """The same tensors with the states placed the old way (state after state, or page-interleaved
    on 0.11) cross blocks; only the (a') placement passes ``crosses_blocks``."""
    mk = rf.qwen3_next(tp=4, num_blocks=2, plugin_sizing=True)
    plan = plan_kv_cache(mk.kv_cache_config, ModelDims())
    layers, size = tuple(plan.layers_of(0)), mk.kv_cache_config.kv_cache_tensors[0].size
    k_page = states_in_kv_page(layers)
    assert k_page == 262_144
    assert shares_block_consistently(layers, 2, size, False, k_page)
    assert not shares_block_consistently(layers, 2, size, False)
    assert not shares_block_consistently(layers, 2, size, True)
    assert not shares_block_consistently(layers, 2, size, False, k_page // 2)  # a wrong K page


# -- today's sizing: the documented refusal ---------------------------------------------------


@only_legacy_sizing
@pytest.mark.parametrize("how", ["stock sizing", "user block 384"])
def test_route_b_refused_at_todays_sizing(how, monkeypatch):
    """The issue's toy: Qwen3-Next TP4 as 0.13 sizes it (block 384, Mamba page padded to 393,216,
    12 tensors of 786,432, N = 2): budget 9,437,184. A K page (196,608) is not the ssm state
    (262,144), so no contiguous K/V places the states block-consistently (route (b) would need
    K/V with a 393,216-byte block stride, which the ATB cache write refuses: docs/layouts.md, "Ascend").
    It reaches a worker when the sizing did not run (stock in the front-end, or a block size the
    user set). Mamba buffer + K/V of their own would be 18,874,368 (2.000x the config), so the
    plugin refuses it by name before allocating (BeyondConfigError, issue 22: never beyond the
    config); auto builds stock's layout (18,874,368 on 0.13, 37,748,736 on 0.11: what the user
    gets without the plugin)."""
    kwargs = {"block_size": 384, "plugin_sizing": True} if how == "user block 384" else {}
    mk = rf.qwen3_next(tp=4, num_blocks=2, **kwargs)
    config = mk.kv_cache_config
    assert (mk.notes["attn_block_size"], mk.notes["mamba_page_size_padded"]) == (384, 393_216)
    assert [t.size for t in config.kv_cache_tensors] == [786_432] * 12
    assert sum(t.size for t in config.kv_cache_tensors) == 9_437_184
    plan = plan_kv_cache(config, ModelDims())
    layers = tuple(plan.layers_of(0))
    assert states_in_kv_page(layers) is None
    assert not any(shares_block_consistently(layers, 2, 786_432, il) for il in (False, True))
    with pytest.raises(BeyondConfigError, match="would take 1572864 bytes where the config planned 786432"):
        AscendAdapter().plan_runner(mk.make_runner(), config)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    ours = plugin_init(mk.make_runner(), config)
    stock = stock_init(mk.make_runner(), config)
    assert sum(storages(ours).values()) == sum(storages(stock).values()) == {(0, 11): 37_748_736, (0, 13): 18_874_368}[R]


# -- capacity ---------------------------------------------------------------------------------


@needs_sizing
@pytest.mark.parametrize(
    "tp,ours_blocks,ours_tokens,stock_blocks,stock_tokens,equal_bytes_blocks",
    [
        # 256 MiB per device. Plugin: budget = allocated. Stock: N at the same budget allocates
        # STOCK_FACTOR x; "equal bytes" gives stock the largest budget whose allocation is <= ours.
        (1, 10, 10_240, 17, 10_880, {(0, 13): 8, (0, 11): 4}),
        (4, 42, 21_504, 56, 21_504, {(0, 13): 28, (0, 11): 14}),
        (8, 85, 21_760, 85, 21_760, {(0, 13): 42, (0, 11): 21}),
    ],
    ids=["tp1", "tp4", "tp8"],
)
def test_capacity_at_equal_bytes_allocated(tp, ours_blocks, ours_tokens, stock_blocks, stock_tokens, equal_bytes_blocks):
    """num_blocks and tokens from vLLM's planner (available memory -> num_blocks) for both
    sizings. At an equal planner budget the plugin's larger pages give fewer blocks (TP1 also
    fewer tokens, 10,240 against 10,880, from rounding 10.67 blocks down) but it allocates a half
    (0.13) or a quarter (0.11) of stock's bytes; at equal bytes allocated it has more blocks and
    more tokens at every TP. Bytes allocated: the plugin == budget and stock == STOCK_FACTOR x
    budget, as test_plan_and_layout_agree_at_exactly_the_budget measures on these configs."""
    memory = 256 * MiB
    ours = rf.qwen3_next(tp=tp, available_memory=memory, plugin_sizing=True)
    stock = rf.qwen3_next(tp=tp, available_memory=memory)
    ours_bytes = sum(t.size for t in ours.kv_cache_config.kv_cache_tensors)
    stock_budget = sum(t.size for t in stock.kv_cache_config.kv_cache_tensors)
    assert (ours.kv_cache_config.num_blocks, ours.kv_cache_config.num_blocks * ours.notes["attn_block_size"]) == (ours_blocks, ours_tokens)
    assert (stock.kv_cache_config.num_blocks, stock.kv_cache_config.num_blocks * stock.notes["attn_block_size"]) == (stock_blocks, stock_tokens)
    assert ours_bytes <= memory and ours_bytes / (STOCK_FACTOR * stock_budget) <= 1 / STOCK_FACTOR
    # stock at equal bytes allocated: the budget whose STOCK_FACTOR x is ours
    equal = rf.qwen3_next(tp=tp, available_memory=ours_bytes // STOCK_FACTOR)
    n = equal.kv_cache_config.num_blocks
    assert n == equal_bytes_blocks[R]
    assert STOCK_FACTOR * sum(t.size for t in equal.kv_cache_config.kv_cache_tensors) <= ours_bytes
    assert ours_blocks > n and ours_tokens > n * equal.notes["attn_block_size"]


# -- property: random hybrids with the (a') sizing --------------------------------------------

DTYPES = (BF16, FP16, FP32)


@st.composite
def kv_sized_hybrid(draw):
    """A GDN-like hybrid sized by :func:`kv_block_sizing` (128-token kernel blocks): attention
    heads / head size / dtype, an ssm state of K page bytes (K bytes per token x 128 x m) in any
    dtype and shape, a conv state of any dtype that fits a V block; 1-3 attention layers and 1-3
    Mamba layers per attention layer; N = 1-3 blocks; kv_transfer_config or not."""
    heads, head, dtype = draw(st.sampled_from((1, 2))), draw(st.sampled_from((32, 64))), draw(st.sampled_from((BF16, FP16)))
    k_token = heads * head * dtype.itemsize
    m = draw(st.integers(1, 2))
    ssm_dtype = draw(st.sampled_from(DTYPES))
    elems = k_token * 128 * m // ssm_dtype.itemsize
    a = draw(st.sampled_from([d for d in (1, 2, 4, 8) if elems % d == 0]))
    ssm = (a, elems // a // 16, 16) if (elems // a) % 16 == 0 else (a, elems // a)
    conv_dtype = draw(st.sampled_from(DTYPES))
    width = draw(st.integers(1, 4))
    channels = draw(st.integers(1, k_token * 128 * m // (width * conv_dtype.itemsize)))  # fits a V block
    return dict(
        heads=heads, head=head, dtype=dtype, ssm=(ssm, ssm_dtype), conv=((width, channels), conv_dtype),
        attn_layers=draw(st.integers(1, 3)), ratio=draw(st.integers(1, 3)), num_blocks=draw(st.integers(1, 3)),
        kv_transfer=draw(st.booleans()),
    )


@pytest.mark.skipif(R >= (0, 30), reason=HYBRID_030)
@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=kv_sized_hybrid())
def test_random_kv_sized_hybrids_are_block_consistent_at_exactly_the_budget(case):
    """Random hybrids sized K page == largest state, Mamba page = 2 K pages, planned by this
    release's vLLM planner: every tensor one buffer, allocated == budget (+ 2 MiB per buffer with
    kv_transfer), every byte two layers share in the same block index of both. Runs on every
    release: the layout is decided from the KVCacheConfig alone."""
    (conv_shape, conv_dtype), (ssm_shape, ssm_dtype) = case["conv"], case["ssm"]
    states = (PagePart("conv", conv_dtype, conv_shape), PagePart("ssm", ssm_dtype, ssm_shape))
    k_token = case["heads"] * case["head"] * case["dtype"].itemsize
    block, padded = kv_block_sizing(k_token, states, 128)
    attn = FullAttentionSpec(block_size=block, num_kv_heads=case["heads"], head_size=case["head"], dtype=case["dtype"])
    mamba = rf._spec(
        MambaSpec, block_size=block * 4, shapes=(conv_shape, ssm_shape), dtypes=(conv_dtype, ssm_dtype),
        page_size_padded=padded, mamba_type=rf.gdn_mamba_type(), mamba_cache_mode="none", num_speculative_blocks=0,
    )
    assert attn.page_size_bytes == mamba.page_size_bytes == padded
    per = case["ratio"] + 1
    layers = case["attn_layers"] * per
    specs = {f"model.layers.{i}.self_attn.attn": attn for i in range(layers) if i % per == per - 1}
    specs.update({f"model.layers.{i}.linear_attn": mamba for i in range(layers) if i % per != per - 1})
    config = rf.build_kv_cache_config(specs, case["num_blocks"], max_model_len=block * 4)
    runner = rf.make_runner(config, kv_transfer=case["kv_transfer"], model_type="qwen3_next")
    kv = plugin_init(runner, config)
    budget = sum(t.size for t in config.kv_cache_tensors)
    got = storages(kv)
    assert len(got) == len(config.kv_cache_tensors)
    assert sum(got.values()) == budget + (len(got) * TRANSFER_ALIGNMENT if case["kv_transfer"] else 0)
    hybrid_tensors = [
        t for t in config.kv_cache_tensors if {"self_attn" in n for n in t.shared_by} == {True, False}
    ]
    shared = assert_block_consistent(kv, config)
    conv_bytes = math.prod(conv_shape) * conv_dtype.itemsize
    assert shared == len(hybrid_tensors) * case["num_blocks"] * (padded // 2 + conv_bytes)


@pytest.mark.skipif(R >= (0, 30), reason=HYBRID_030)
@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(heads=st.sampled_from((1, 2)), conv_channels=st.integers(64, 512), num_blocks=st.integers(1, 3))
def test_random_hybrids_at_0_13_style_sizing_are_refused_before_exceeding_the_config(heads, conv_channels, num_blocks):
    """Sized the 0.11 / 0.13 way (attention page = 128-token multiple >= Mamba page, Mamba padded
    to it) with a K page that is not the ssm state: never laid out inside K/V; K/V of their own
    would be 2x the budget, so the plugin refuses by name before allocating (StockWouldCorruptError
    where stock shares the tensor, 0.18+; BeyondConfigError on 0.11 / 0.13)."""
    dtype, k_token = BF16, heads * 64 * 2
    ssm_shape = (2, 64, 48)  # 12,288 bytes: never 128 x k_token
    conv_shape = (3, conv_channels)
    mamba_bytes = (math.prod(ssm_shape) + math.prod(conv_shape)) * 2
    block = 128 * -(-mamba_bytes // (128 * 2 * k_token))
    attn = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=64, dtype=dtype)
    mamba = rf._spec(
        MambaSpec, block_size=block * 4, shapes=(conv_shape, ssm_shape), dtypes=(dtype, dtype),
        page_size_padded=attn.page_size_bytes, mamba_type=rf.gdn_mamba_type(), mamba_cache_mode="none",
    )
    specs = {"model.layers.3.self_attn.attn": attn, **{f"model.layers.{i}.linear_attn": mamba for i in range(3)}}
    config = rf.build_kv_cache_config(specs, num_blocks, max_model_len=block * 4)
    plan = plan_kv_cache(config, ModelDims())
    assert states_in_kv_page(tuple(plan.layers_of(0))) is None
    size = config.kv_cache_tensors[0].size
    error = StockWouldCorruptError if facts.stock_shares_hybrid_tensors() else BeyondConfigError
    with pytest.raises(error, match=f"would take {2 * size} bytes where the config planned {size}"):
        AscendAdapter().plan_runner(rf.make_runner(config, model_type="qwen3_next"), config)
