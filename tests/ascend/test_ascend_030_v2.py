"""vllm-ascend 0.30's own Model Runner V2 (cell ascend-0.30.0 only): the plugin's V2 adapter
against stock V2's ``allocate_kv_cache_main`` (factory_030_v2), on configs from vllm-ascend's
patched planner.

* built byte for byte as stock V2 (storages and aliasing, offsets, strides, shapes, dtypes,
  with and without KV transfer): dense full attention (K|V interleaved per kernel block; the
  PA form's separate K and V), kernel blocks of 128 in blocks of 256, sliding window beside
  full attention, MLA nope / rope, hybrids on one backing (plain and padded attention pages),
  and the published models of the Ascend zoo (zoo_models);
* DeepSeek V3.2's sparse attention (SFA) on V2 (configs from runner_factory.deepseek_v32): the
  indexer ``(k,)`` / ``(k, scale)`` in one raw buffer (bf16, LI C8, LI C4), the packed SFA C8 /
  TurboQuant main caches ``(k,)``, and decode context parallelism (DCP-replicated indexers, dense
  attention as separate K and V), each stock-equal and built by the plugin where it refused them;
* refused by name before anything is allocated, stock building it in ``auto`` with one
  warning: a Mamba-only model (stock V2 aliases its layers), V2's model-wide branches
  (KVPP, FA quant, DeepSeek V4, layerwise reuse), packed SFA main caches V2 does not view as the
  strategy (no SFA in the model config: stock V2 raises; another dtype) and spec classes it does
  not build;
* the seam: ``allocate_kv_cache_main`` looks both functions up at call time; ``auto`` patches
  V2 only where its code is 0.30.0rc2's; the runner wrapper warns only when the patched
  allocation did not run; logs and reports say who built the cache.
"""

from __future__ import annotations

import logging
import types
from types import SimpleNamespace

import factory_030_v2 as f2
import kv_compare as kc
import pytest
import runner_factory as rf
import stock_cases_030 as cases
import torch
import zoo_models as zm

import vllm_kv_strategies
from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend import allocate as ascend_alloc
from vllm_kv_strategies.platforms.ascend.runner_v2 import AscendV2Adapter, AscendV2AllocationAdapter
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.platforms.ascend import releases as ascend_releases, v2_layout as ascend_v2
from vllm_kv_strategies.errors import StockWouldFailError, UnsupportedSpecError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's Model Runner V2 only")

#: (case, config builder, make_runner arguments): every case stock V2 builds and the plugin builds too.
BUILT = [(n, b, kw) for n, b, kw in cases.CASES if not n.startswith("Mamba only")]
BUILT.append(("hybrid, padded attention pages", f2.padded_hybrid, {}))


def views(value):
    return [value] if isinstance(value, torch.Tensor) else list(value)


def first_bytes(kv):
    """storage -> the lowest data_ptr any view of it starts at."""
    out = {}
    for value in kv.values():
        for t in views(value):
            ptr = t.untyped_storage().data_ptr()
            out[ptr] = min(out.get(ptr, t.data_ptr()), t.data_ptr())
    return out


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize(("name", "build", "kw"), BUILT, ids=[c[0] for c in BUILT])
def test_plugin_equals_stock_v2(name, build, kw, transfer, kv_log):
    mk = build()
    stock = f2.stock_v2(mk, kv_transfer=transfer, **kw)
    ours = f2.plugin_v2(mk, kv_transfer=transfer, **kw)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert {n: type(v) for n, v in ours.items()} == {n: type(v) for n, v in stock.items()}
    assert {n: [t.is_contiguous() for t in v] for n, v in ours.items()} == {
        n: [t.is_contiguous() for t in v] for n, v in stock.items()}
    if transfer:  # every allocation's first view byte on a 2 MiB boundary, as stock's _align_memory
        assert all(p % 2**21 == 0 for p in first_bytes(ours).values())
    [line] = [m for m in kv_log.at(logging.INFO) if ": built " in m or "stock built" in m]
    assert line.startswith(f"kv_strategies: rank 0: built {len(mk.specs)} layers")


def test_dense_is_one_buffer_per_layer_k_and_v_interleaved():
    """N x page per layer (the config's overlay of the layers is not followed, as stock V2);
    K and V of kernel block b at b x page and b x page + page / 2."""
    mk = cases.dense()
    ours = f2.plugin_v2(mk)
    k, v = ours["model.layers.0.self_attn.attn"]
    assert (k.shape, k.stride(), k.dtype) == ((8, 128, 2, 64), (32768, 128, 64, 1), torch.bfloat16)
    assert k.untyped_storage().nbytes() == 8 * 65536 == 524288
    assert (v.data_ptr() - k.data_ptr(), k[1].data_ptr() - k.data_ptr()) == (32768, 65536)
    other = ours["model.layers.1.self_attn.attn"][0]
    assert other.untyped_storage().data_ptr() != k.untyped_storage().data_ptr()


def test_padded_hybrid_pitch_is_the_physical_page():
    """Attention page 16384 padded to 17920: each K|V kernel block 17920 bytes apart, 1536 bytes
    of padding after V; the Mamba states of the same block index alias it (one group at a time)."""
    ours = f2.plugin_v2(f2.padded_hybrid())
    k, v = ours["model.layers.1.self_attn.attn"]
    conv, ssm = ours["model.layers.0.linear_attn"]
    assert (k.shape, k.stride(), v.data_ptr() - k.data_ptr()) == ((8, 128, 1, 32), (8960, 32, 32, 1), 8192)
    assert (k[1].data_ptr() - k.data_ptr(), conv[1].data_ptr() - conv.data_ptr()) == (17920, 17920)
    assert (conv.data_ptr(), ssm.data_ptr() - conv.data_ptr()) == (k.data_ptr(), 1536)
    layer3 = ours["model.layers.3.self_attn.attn"][0]
    assert layer3.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
    assert (layer3.data_ptr() - k.data_ptr(), k.untyped_storage().nbytes()) == (8 * 17920, 2 * 8 * 17920)


def test_the_plugin_allocates_nothing_for_what_it_refuses(monkeypatch):
    """A Mamba-only model: stock V2 gives both layers of the tensor the same states (the
    plugin's refusal names it), nothing is allocated by the plugin before it refuses."""
    mk = cases.mamba()
    stock = f2.stock_v2(mk)
    a, b = stock["model.layers.0.linear_attn"], stock["model.layers.1.linear_attn"]
    assert [t.data_ptr() for t in a] == [t.data_ptr() for t in b]  # stock V2 aliases the two layers
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *a: pytest.fail("allocated before refusing"))
    with pytest.raises(UnsupportedSpecError, match=r"the strategies do not build the Ascend Model Runner V2 layouts "
                       r"of a Mamba-only model \(stock V2 gives every layer of a KV cache tensor the same states\)"):
        f2.plugin_v2(mk)


def test_auto_falls_back_to_stock_with_one_warning_and_reports_stock(monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    mk = cases.mamba()
    want = f2.stock_v2(mk)
    got = f2.plugin_v2(mk)
    assert kc.layout_signature(got) == kc.layout_signature(want)
    [warning] = kv_log.at(logging.WARNING)
    assert warning.startswith("kv_strategies: falling back to stock KV cache for all layers: the strategies do "
                              "not build the Ascend Model Runner V2 layouts of a Mamba-only model")
    assert [m for m in kv_log.at(logging.INFO) if "built" in m][0].startswith("kv_strategies: rank 0: stock built 2 layers")


def test_observe_leaves_stock_and_reports_it(monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "observe")
    mk = cases.sliding()
    assert kc.layout_signature(f2.plugin_v2(mk)) == kc.layout_signature(f2.stock_v2(mk))
    assert any(m.startswith("kv_strategies: rank 0: stock built 4 layers") for m in kv_log.at(logging.INFO))


def test_hybrid_strides_stock_v2_raises_on_are_refused_in_every_mode(monkeypatch):
    import dataclasses

    mk = cases.hybrid()
    tensors = [dataclasses.replace(t, layer_stride=t.layer_stride * 2) for t in mk.kv_cache_config.kv_cache_tensors]
    mk.kv_cache_config = dataclasses.replace(mk.kv_cache_config, kv_cache_tensors=tensors)
    with pytest.raises(ValueError, match="Ascend hybrid KV cache requires contiguous per-layer views"):
        f2.stock_v2(mk)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    with pytest.raises(StockWouldFailError, match=r"of KV cache tensor 0: layer_stride 524288, block_stride 32768; the hybrid "
                       r"backing needs num_blocks 8 x page 32768 = 262144 and 32768"):
        f2.plugin_v2(mk)


def _config(specs):
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    page = next(iter(specs.values())).page_size_bytes
    tensors = [KVCacheTensor(size=4 * page, layers=[n], layer_stride=4 * page, block_stride=page, offset=0) for n in specs]
    return KVCacheConfig(num_blocks=4, kv_cache_tensors=tensors, kv_cache_groups=[KVCacheGroupSpec([n], s) for n, s in specs.items()])


def _vllm_config(**over):
    config = f2.v2_runner(cases.dense()).vllm_config
    for path, value in over.items():
        owner, _, name = path.rpartition(".")
        target = config
        for part in owner.split(".") if owner else ():
            target = getattr(target, part)
        object.__setattr__(target, name, value)
    return config


@pytest.mark.parametrize(
    ("over", "named"),
    [
        ({"model_config.hf_config": SimpleNamespace(compress_ratios=[1])}, "DeepSeek V4 KV cache"),
    ],
)
def test_model_wide_branches_are_named(over, named):
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    spec = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    reason = ascend_v2.unbuilt_reason(_vllm_config(**over), _config({"a.attn": spec}))
    assert reason == f"Ascend Model Runner V2 layouts of {named} (FullAttentionSpec) yet; stock builds them"


@pytest.mark.parametrize(
    ("module", "probe", "named"),
    [
        ("vllm_ascend.worker.v2.attn_utils", "enable_fa_quant", "quantised attention KV cache (FA quant)"),
        ("vllm_ascend.worker.v2.attn_utils", "get_layerwise_reuse_config", "layerwise KV cache reuse"),
        ("vllm_ascend.worker.v2.attn_utils", "_is_dsv4_model", "DeepSeek V4 KV cache"),
    ],
)
def test_branches_vllm_ascend_probes_are_named(module, probe, named, monkeypatch):
    """V2's model-wide branches, asked of vllm-ascend's own probes (forced true here) where V2's
    ``_allocate_kv_cache`` looks them up: its module's globals, not the modules that define them."""
    import importlib

    from vllm.v1.kv_cache_interface import FullAttentionSpec

    monkeypatch.setattr(importlib.import_module(module), probe, lambda *a, **k: True)
    spec = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    reason = ascend_v2.unbuilt_reason(_vllm_config(), _config({"a.attn": spec}))
    assert reason == f"Ascend Model Runner V2 layouts of {named} (FullAttentionSpec) yet; stock builds them"


def test_kvpp_is_named(monkeypatch):
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm_ascend.ascend_config import KVPPConfig

    config = _vllm_config()  # made before the probe is forced (AscendConfig reads it too)
    monkeypatch.setattr(KVPPConfig, "from_vllm_config", classmethod(lambda cls, c: SimpleNamespace(size=2)))
    spec = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    assert ascend_v2.unbuilt_reason(config, _config({"a.attn": spec})).startswith(
        "Ascend Model Runner V2 layouts of KVPP (FullAttentionSpec)")


def test_tensor_forms_it_does_not_build_are_named():
    """MLA in a hybrid backing, a tensor mixing spec classes, padded pages of separate K/V."""
    import dataclasses

    from vllm.v1.kv_cache_interface import KVCacheTensor, SlidingWindowSpec

    config = _vllm_config()
    mla = rf.AscendMLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    mamba = cases._mamba_spec(page_size_padded=mla.page_size_bytes)
    assert "MLA in a hybrid backing" in ascend_v2.unbuilt_reason(config, _config({"a.attn": mla, "b.mixer": mamba}))
    full = cases.dense().specs["model.layers.0.self_attn.attn"]
    swa = SlidingWindowSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, sliding_window=256)
    mixed = _config({"a.attn": full, "b.attn": swa})
    page = full.page_size_bytes
    mixed = dataclasses.replace(mixed, kv_cache_tensors=[KVCacheTensor(size=8 * page, layers=["a.attn", "b.attn"],
                                                                        layer_stride=4 * page, block_stride=page, offset=0)])
    assert "a KV cache tensor of several spec classes (FullAttentionSpec, SlidingWindowSpec)" in ascend_v2.unbuilt_reason(config, mixed)
    padded = dataclasses.replace(swa, page_size_padded=2 * swa.page_size_bytes)
    assert "padded pages of separate K/V (SlidingWindowSpec)" in ascend_v2.unbuilt_reason(config, _config({"a.attn": padded}))


def test_spec_classes_and_fields_it_does_not_build_are_named():
    from vllm.v1.kv_cache_interface import CrossAttentionSpec, FullAttentionSpec

    config = _vllm_config()
    cross = CrossAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    assert ascend_v2.unbuilt_reason(config, _config({"a.attn": cross})) == (
        "Ascend Model Runner V2 layouts of CrossAttentionSpec (CrossAttentionSpec) yet; stock builds them")
    mxfp = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, state_content_bytes=264)
    assert "FullAttentionSpec with state_content_bytes" in ascend_v2.unbuilt_reason(config, _config({"a.attn": mxfp}))
    plain = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    assert ascend_v2.unbuilt_reason(config, _config({"a.attn": plain})) is None
    assert "KV cache groups without a kernel block size (0 sizes)" in ascend_v2.unbuilt_reason(config, _config({"a.attn": plain}), [])


@pytest.mark.parametrize("model", list(zm.MODELS), ids=list(zm.MODELS))
def test_zoo_on_v2_is_stock_equal(model, monkeypatch, kv_log):
    """Published models' KV caches (zoo_models, TP 1) through V2 in ``auto``: the plugin builds
    every one stock-equal, DeepSeek-V3.2-Exp (sparse MLA + indexer) included, with no fallback."""
    reason = zm.MODELS[model].unsupported()
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    mk = zm.MODELS[model].build(1)
    assert kc.layout_signature(f2.plugin_v2(mk)) == kc.layout_signature(f2.stock_v2(mk))
    assert [m for m in kv_log.at(logging.WARNING) if "falling back" in m] == []
    assert any(m.startswith(f"kv_strategies: rank 0: built {len(mk.specs)} layers") for m in kv_log.at(logging.INFO))


# -- the seam, the release gate, the runner wrapper -------------------------------------------


def test_allocate_kv_cache_main_looks_both_functions_up_at_call_time():
    module = f2.attn_utils()
    names = set(module.allocate_kv_cache_main.__code__.co_names)
    assert {"_allocate_kv_cache", "_reshape_kv_cache_v2"} <= names
    assert module.allocate_kv_cache_main.__globals__ is vars(module)
    import vllm.v1.worker.gpu.model_runner as gpu_runner  # what vLLM's init_kv_cache calls

    assert gpu_runner.init_kv_cache.__globals__["allocate_kv_cache"] is module.allocate_kv_cache_main


def test_v2_is_fingerprinted_as_0_30_0rc2_and_a_changed_install_stays_stock_in_auto(monkeypatch, kv_log):
    module = f2.attn_utils()
    assert ascend_releases.v2_code_mismatch(module, "0.30.0rc2") is None
    assert ascend_releases.v2_code_mismatch(module, "0.30.0rc1") == (
        "the Ascend Model Runner V2 KV cache functions of vllm-ascend 0.30.0rc1 were never fingerprinted")
    changed = types.ModuleType(module.__name__)
    changed.__file__ = __file__  # another source: not the published functions
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    assert AscendV2AllocationAdapter().patch(changed) is False
    [warning] = kv_log.at(logging.WARNING)
    assert "are not those published as vllm-ascend 0.30.0rc2 (9b1ccc589dd6a228)" in warning
    assert warning.endswith("NPUModelRunner (Ascend V2) stays stock (KV_STRATEGIES=on patches it anyway)")


def test_runner_wrapper_warns_only_when_the_patched_allocation_did_not_run(monkeypatch, kv_log):
    import vllm_ascend.worker.v2.model_runner as v2

    calls = []

    def stock(self, kv_cache_config, kv_cache_allocation_context=None):
        calls.append((kv_cache_config, kv_cache_allocation_context))
        if kv_cache_config == "through the seam":  # as vLLM's init_kv_cache calls it
            mk = cases.dense()
            f2.allocate_main(f2.v2_runner(mk), mk.kv_cache_config)

    monkeypatch.setattr(v2.NPUModelRunner, "initialize_kv_cache", stock)
    adapter = AscendV2Adapter()
    assert adapter.patch(v2)
    try:
        runner = object.__new__(v2.NPUModelRunner)
        with f2.plugin_patched():
            runner.initialize_kv_cache("through the seam")
            assert kv_log.at(logging.WARNING) == []
            runner.initialize_kv_cache("around it", kv_cache_allocation_context="pool")
    finally:
        assert adapter.unpatch(v2)
    assert calls == [("through the seam", None), ("around it", "pool")]
    assert kv_log.at(logging.WARNING) == [
        "kv_strategies: NPUModelRunner (Ascend Model Runner V2) built its KV cache without "
        f"{facts.ASCEND_V2_ALLOCATION.describe()}: the plugin did nothing in this worker"
    ]


def test_auto_patches_v1_and_both_v2_targets_of_0_30(monkeypatch, kv_log):
    import vllm_ascend.worker.v2.model_runner as v2
    import vllm_ascend.worker.worker as worker

    vllm_kv_strategies.unregister()
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    try:
        vllm_kv_strategies.register()
        assert patching.is_patched(rf.NPUModelRunner) and patching.is_patched(v2.NPUModelRunner)
        assert patching.is_patched(f2.attn_utils()) and patching.is_patched(worker.NPUWorker)
        patched = [m for m in kv_log.at(logging.INFO) if m.startswith("kv_strategies: patched")]
        assert patched == [
            f"kv_strategies: patched {facts.SPLIT_INIT.describe()} (NPUModelRunner)",
            f"kv_strategies: patched {facts.ASCEND_V2_ALLOCATION.describe()} (NPUModelRunner (Ascend V2))",
            f"kv_strategies: patched {facts.ASCEND_V2.describe()} (NPUModelRunner (Ascend V2))",
            f"kv_strategies: patched {facts.MULTI_GROUP_BUDGET.describe()} (NPUWorker (multi-group KV cache budget))",
        ]
    finally:
        vllm_kv_strategies.unregister()
    assert not patching.is_patched(v2.NPUModelRunner) and not patching.is_patched(f2.attn_utils())
    assert not patching.is_patched(worker.NPUWorker)


class Pool:
    """Stands in for sleep mode's allocation pool: records whether allocations ran inside it."""

    def __init__(self):
        self.active, self.inside = False, []

    def __enter__(self):
        self.active = True

    def __exit__(self, *exc):
        self.active = False


def test_vllm_init_kv_cache_builds_binds_and_allocates_inside_the_pool(monkeypatch, tmp_path, kv_log):
    """vLLM's own ``init_kv_cache`` (as Ascend V2's ``initialize_kv_cache`` calls it): the plugin's
    buffers are allocated inside ``kv_cache_allocation_context``, every layer is bound to its
    cache by Ascend's binder, and the report names the V2 runner and the plugin."""
    import json

    import vllm.v1.worker.gpu.model_runner as gpu_runner
    from vllm.config import set_current_vllm_config

    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    mk = cases.sliding()
    runner = f2.v2_runner(mk)
    pool, real = Pool(), ascend_alloc.allocate_bytes

    def allocate(nbytes, device, layer):
        pool.inside.append(pool.active)
        return real(nbytes, device, layer)

    monkeypatch.setattr(ascend_alloc, "allocate_bytes", allocate)
    forward_context = runner.vllm_config.compilation_config.static_forward_context
    kernel = rf.kernel_block_sizes(runner, mk.kv_cache_config)
    with f2.plugin_patched(), set_current_vllm_config(runner.vllm_config):
        kv = gpu_runner.init_kv_cache(forward_context, mk.kv_cache_config, runner.device, kernel, runner.vllm_config,
                                      kv_cache_allocation_context=pool)
    assert kc.layout_signature(kv) == kc.layout_signature(f2.stock_v2(mk))
    assert len(pool.inside) == 6 and all(pool.inside)  # full layers: one K|V buffer each; sliding: K and V each
    assert all(forward_context[name].kv_cache is value for name, value in kv.items())
    path = tmp_path / "kv_cache_report.latest.rank0.json"
    report = json.loads(path.read_text())
    assert (report["built_by"], report["runner"]) == ("plugin", "NPUModelRunner (Ascend V2)")
    assert report["totals"]["bytes_allocated"] == 2 * 524288 + 4 * 262144


def test_cross_layer_kv_sharing_layers_alias_their_target():
    """A layer that reuses another's KV cache (in the forward context and its target's KV cache
    group, as V2's ``init_attn_backend`` adds it, in no tensor) gets its target's views, as stock
    V2 aliases it."""
    import dataclasses

    mk, shared = cases.dense(), {"model.layers.2.self_attn.attn": "model.layers.0.self_attn.attn"}
    [group] = mk.kv_cache_config.kv_cache_groups
    group = dataclasses.replace(group, layer_names=[*group.layer_names, "model.layers.2.self_attn.attn"])
    mk.kv_cache_config = dataclasses.replace(mk.kv_cache_config, kv_cache_groups=[group])
    stock = f2.stock_v2(mk, shared)
    ours = f2.plugin_v2(mk, shared)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert ours["model.layers.2.self_attn.attn"] is ours["model.layers.0.self_attn.attn"]


# -- DeepSeek V3.2's sparse attention (SFA) and decode context parallelism on V2 --------------

INDEXER, MAIN, MiB2 = "model.layers.0.self_attn.indexer.k_cache", "model.layers.0.self_attn.attn", 2 * 1024 * 1024
BF16, I8, U8, F16 = torch.bfloat16, torch.int8, torch.uint8, torch.float16
LATENT = [((4, 128, 1, 512), BF16), ((4, 128, 1, 64), BF16)]  # the bf16 MLA main cache: nope, rope
#: variant -> (deepseek_v32 arguments (4 blocks), the indexer's views (shape, dtype, byte offset in its one
#: raw buffer), the main cache's views (shape, dtype)); as stock V2 builds them (LI C8: an fp16 scale per
#: token after 4 x 128 x 128 int8 keys; LI C4: e8m0 pairs after uint8 keys of half the head; DCP r: r
#: indexer sub-blocks per block; packed rows: 656 = 512 C8 + 64 bf16 + 4 fp32, 386 = 256 + 64 bf16 + 1 fp16)
SFA = {
    "bf16": ({}, [((4, 128, 1, 128), BF16, 0)], LATENT),
    "LI C8": ({"li_c8": True}, [((4, 128, 1, 128), I8, 0), ((4, 128, 1, 1), F16, 4 * 128 * 128)], LATENT),
    "LI C4": ({"li_c4": True}, [((4, 128, 1, 64), U8, 0), ((4, 128, 1, 2, 2), torch.float8_e8m0fnu, 4 * 128 * 64)], LATENT),
    "SFA C8 int8": ({"sfa_c8": True}, [((4, 128, 1, 128), BF16, 0)], [((4, 128, 1, 656), I8)]),
    "SFA C8 fp8": ({"sfa_c8": "fp8"}, [((4, 128, 1, 128), BF16, 0)], [((4, 128, 1, 656), torch.float8_e4m3fn)]),
    "TurboQuant": ({"turboquant": True}, [((4, 128, 1, 128), BF16, 0)], [((4, 128, 1, 386), I8)]),
    "SFA C8 + LI C8": ({"sfa_c8": True, "li_c8": True}, [((4, 128, 1, 128), I8, 0), ((4, 128, 1, 1), F16, 65536)],
                       [((4, 128, 1, 656), I8)]),
    "SFA C8, block 256": ({"sfa_c8": True, "block_size": 256}, [((4, 256, 1, 128), BF16, 0)], [((8, 128, 1, 656), I8)]),
    "DCP 2, LI C8": ({"rep": 2, "li_c8": True}, [((8, 128, 1, 128), I8, 0), ((8, 128, 1, 1), F16, 8 * 128 * 128)], LATENT),
    "DCP 4, LI C4": ({"rep": 4, "li_c4": True},
                     [((16, 128, 1, 64), U8, 0), ((16, 128, 1, 2, 2), torch.float8_e8m0fnu, 16 * 128 * 64)], LATENT),
    "DCP 2, SFA C8": ({"rep": 2, "sfa_c8": True}, [((8, 128, 1, 128), BF16, 0)], [((4, 128, 1, 656), I8)]),
}


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("variant", SFA)
def test_sparse_attention_equals_stock_v2(variant, transfer):
    """Every layer stock-equal (storages, aliasing, offsets, strides, shapes, dtypes, bytes); the
    indexer's key and scale views of one raw buffer of num_blocks pages, the main cache's own
    buffers (a packed one: one ``(k,)`` view); with KV transfer each allocation 2 MiB-aligned."""
    kwargs, indexer_views, main_views = SFA[variant]
    mk = rf.deepseek_v32(num_blocks=4, num_layers=3, **kwargs)
    stock, ours = f2.stock_v2(mk, kv_transfer=transfer), f2.plugin_v2(mk, kv_transfer=transfer)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert {n: type(v) for n, v in ours.items()} == {n: type(v) for n, v in stock.items()} == dict.fromkeys(mk.specs, tuple)
    indexer, main = ours[INDEXER], ours[MAIN]
    assert [(tuple(t.shape), t.dtype, t.data_ptr() - indexer[0].data_ptr()) for t in indexer] == indexer_views
    assert {t.untyped_storage().nbytes() for t in indexer} == {4 * mk.specs[INDEXER].page_size_bytes + (MiB2 if transfer else 0)}
    assert [(tuple(t.shape), t.dtype) for t in main] == main_views
    assert indexer[0].untyped_storage().data_ptr() not in {t.untyped_storage().data_ptr() for t in main}
    if len(main) == 1:  # packed: one buffer of num_blocks pages
        assert main[0].untyped_storage().nbytes() == 4 * mk.specs[MAIN].page_size_bytes + (MiB2 if transfer else 0)
    if transfer:
        assert all(p % MiB2 == 0 for p in first_bytes(ours).values())


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
def test_dense_attention_under_dcp_is_separate_k_and_v_as_stock_v2(transfer):
    """V2 interleaves K|V of plain full attention only without DCP (its DCP guard): with it each
    layer gets separate contiguous K and V buffers, as stock V2."""
    mk = rf.qwen3_8b(tp=4)
    stock = f2.stock_v2(mk, dcp_size=2, kv_transfer=transfer)
    ours = f2.plugin_v2(mk, dcp_size=2, kv_transfer=transfer)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    k, v = ours[MAIN]
    assert k.is_contiguous() and v.is_contiguous() and k.untyped_storage().data_ptr() != v.untyped_storage().data_ptr()
    assert len(kc.storages(ours)) == 2 * len(mk.specs)
    interleaved = f2.plugin_v2(mk, kv_transfer=transfer)  # control: without DCP, one K|V buffer per layer
    assert not interleaved[MAIN][0].is_contiguous() and len(kc.storages(interleaved)) == len(mk.specs)


def test_hybrid_under_dcp_equals_stock_v2():
    """V2's hybrid backing does not depend on DCP; the plugin's neither: one backing of the tensor size."""
    mk = rf.qwen3_next(tp=4)
    ours = f2.plugin_v2(mk, dcp_size=2)
    assert kc.layout_signature(ours) == kc.layout_signature(f2.stock_v2(mk, dcp_size=2))
    assert list(kc.storages(ours).values()) == [mk.kv_cache_config.kv_cache_tensors[0].size]


#: former V2 refusal -> (its config, make_runner arguments, the report's layers per strategy)
FORMER_REFUSALS = {
    "sparse attention (SFA), AscendSFAIndexerCacheSpec": (lambda: rf.deepseek_v32(num_blocks=4, num_layers=3), {},
                                                          {"mla": 3, "sfa_indexer": 3}),
    "packed SFA C8 main caches": (lambda: rf.deepseek_v32(num_blocks=4, num_layers=3, sfa_c8=True), {},
                                  {"sfa_packed": 3, "sfa_indexer": 3}),
    "TurboQuant main caches": (lambda: rf.deepseek_v32(num_blocks=4, num_layers=3, turboquant=True), {},
                               {"sfa_packed": 3, "sfa_indexer": 3}),
    "decode context parallelism, dense": (lambda: rf.qwen3_8b(tp=4), {"dcp_size": 2}, {"full_attention": 36}),
    "decode context parallelism, DCP-replicated LI C8 indexers": (
        lambda: rf.deepseek_v32(num_blocks=4, num_layers=3, rep=2, li_c8=True), {}, {"mla": 3, "sfa_indexer": 3}),
}


@pytest.mark.parametrize("former", FORMER_REFUSALS)
def test_former_v2_refusals_are_built_by_the_plugin(former, monkeypatch, tmp_path, kv_log):
    """Refused by name on V2 before (``sparse attention (SFA)``, ``AscendSFAIndexerCacheSpec``,
    ``cache_sparse_sfa_c8`` / ``cache_sparse_sfa_turboquant``, ``decode context parallelism``):
    in ``auto`` the plugin builds them now, no fallback, the report saying so."""
    import json

    from vllm_kv_strategies.report import schema

    build, runner_kwargs, strategies = FORMER_REFUSALS[former]
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    mk = build()
    assert ascend_v2.unbuilt_reason(f2.v2_runner(mk, **runner_kwargs).vllm_config, mk.kv_cache_config) is None
    f2.plugin_v2(mk, **runner_kwargs)
    data = json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text())
    schema.validate(data)
    assert (data["built_by"], data["fallback_reason"], data["runner"]) == ("plugin", None, "NPUModelRunner (Ascend V2)")
    assert data["totals"]["layers_per_strategy"] == strategies
    assert kv_log.at(logging.WARNING) == []


def _changed_v2_config(monkeypatch, cache_dtype=None):
    """V2's config without what makes ``enable_sfa`` true (``index_topk``), or with another
    ``--kv-cache-dtype``, for the runners f2 makes from now on."""
    real = f2.sparse_and_dcp

    def changed(runner, specs):
        real(runner, specs)
        if cache_dtype is None:
            del runner.vllm_config.model_config.hf_text_config.index_topk
        else:
            object.__setattr__(runner.vllm_config.cache_config, "cache_dtype", cache_dtype)

    monkeypatch.setattr(f2, "sparse_and_dcp", changed)


def test_packed_main_caches_without_sfa_in_the_model_config_stay_refused_stock_v2_raises(monkeypatch):
    """A packed SFA C8 spec in a model config without sparse attention: stock V2 splits it as MLA
    (nope, rope) and raises; the plugin refuses it by name before allocating."""
    _changed_v2_config(monkeypatch)
    mk = rf.deepseek_v32(num_blocks=4, num_layers=3, sfa_c8=True)
    with pytest.raises(ValueError, match=r"KV cache for model.layers.0.self_attn.attn is not a whole number of pages"):
        f2.stock_v2(mk)
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *a: pytest.fail("allocated before refusing"))
    with pytest.raises(UnsupportedSpecError, match=r"the strategies do not build the Ascend Model Runner V2 layouts of "
                       r"packed SFA main caches without sparse attention \(SFA\) in the model config \(stock V2 splits "
                       r"them as MLA\) \(AscendMLAAttentionSpec, AscendSFAIndexerCacheSpec\)"):
        f2.plugin_v2(mk)


def test_packed_main_caches_v2_views_in_another_dtype_fall_back_to_stock(monkeypatch, kv_log):
    """An int8 packed SFA C8 spec with ``--kv-cache-dtype fp8``: stock V2 views it in fp8, not the
    spec's dtype the strategy lays out; refused by name, stock builds it in ``auto``."""
    _changed_v2_config(monkeypatch, cache_dtype="fp8")
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    mk = rf.deepseek_v32(num_blocks=4, num_layers=3, sfa_c8=True)
    stock = f2.stock_v2(mk)
    assert stock[MAIN][0].dtype == torch.float8_e4m3fn and mk.specs[MAIN].dtype == torch.int8
    assert kc.layout_signature(f2.plugin_v2(mk)) == kc.layout_signature(stock)
    [warning] = kv_log.at(logging.WARNING)
    assert ("the strategies do not build the Ascend Model Runner V2 layouts of packed SFA main caches of torch.int8 "
            "viewed in the --kv-cache-dtype 'fp8' (torch.float8_e4m3fn)") in warning
