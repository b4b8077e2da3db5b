"""vllm-ascend 0.30 (cell ascend-0.30.0 only): the plugin against stock 0.30's
``NPUModelRunner`` on vLLM 0.30's strided ``KVCacheTensor``, configs planned by
vllm-ascend's patched planner (runner_factory).

* what the plugin builds, byte for byte as stock: dense full attention in both
  stock forms (one buffer per layer with K|V interleaved per kernel block;
  separate contiguous K and V where the PA kernels need them), kernel blocks
  split as stock passes them, sliding window beside full attention (two
  groups, every layer private), MLA nope / rope, Mamba states after each
  other, with and without KV transfer (2 MiB aligned buffers);
* what it refuses by name before allocating (stock builds it): padded attention pages, sparse attention and
  every feature :func:`~vllm_kv_strategies.platforms.ascend.strided.unbuilt_layout_reason`
  names;
* stock's new arguments (``kernel_block_sizes``, ``kv_cache_allocation_context``)
  reach stock on the fallback, and the plugin allocates inside sleep mode's
  pool as stock does.

Ascend's Model Runner V2: test_ascend_030_v2.py.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from types import SimpleNamespace

import pytest
import torch
import kv_compare as kc
import runner_factory as rf
import stock_cases_030 as cases

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend import allocate as ascend_alloc
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import UnsupportedSpecError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's strided KVCacheTensor form only")

#: (case, make_runner arguments), every case stock 0.30 builds and the plugin builds too.
BUILT = [(name, build, kw) for name, build, kw in cases.CASES if not name.startswith(("hybrid", "Mamba only, mixer"))]


def stock_build(mk, transfer=False, **kw):
    runner = mk.make_runner(kv_transfer=transfer, **kw)
    config = copy.deepcopy(mk.kv_cache_config)
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    return runner, stock(runner, config, **rf.stock_kwargs(runner, config))


def plugin_build(mk, transfer=False, **kw):
    runner = mk.make_runner(kv_transfer=transfer, **kw)
    config = copy.deepcopy(mk.kv_cache_config)
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    return runner, AscendAdapter().initialize_kv_cache_tensors(stock, runner, config, **rf.stock_kwargs(runner, config))


def views(value):
    return [value] if isinstance(value, torch.Tensor) else list(value)


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize(("name", "build", "kw"), BUILT, ids=[c[0] for c in BUILT])
def test_plugin_equals_stock(name, build, kw, transfer):
    mk = build()
    stock_runner, stock = stock_build(mk, transfer, **kw)
    runner, ours = plugin_build(mk, transfer, **kw)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert [type(ours[name]) for name in sorted(ours)] == [type(stock[name]) for name in sorted(stock)]
    # every layer owns its storages, of num_blocks x page bytes in all, as stock 0.30 allocates them
    n = mk.kv_cache_config.num_blocks
    owner = {}
    for layer, value in ours.items():
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in views(value)}
        assert not storages.keys() & owner.keys(), f"{layer} shares a storage with {owner}"
        owner.update(dict.fromkeys(storages, layer))
        if not transfer:
            assert sum(storages.values()) == n * mk.specs[layer].page_size_bytes
        else:  # each buffer's first view byte on a 2 MiB boundary (stock over-allocates 2 MiB and slices)
            first = {}
            for t in views(value):
                ptr = t.untyped_storage().data_ptr()
                first[ptr] = min(first.get(ptr, t.data_ptr()), t.data_ptr())
            assert all(p % 2**21 == 0 for p in first.values()), first
    # bound as vLLM 0.30 binds (the cache itself), in stock's order
    for layer, value in ours.items():
        assert runner.compilation_config.static_forward_context[layer].kv_cache is value
    assert [kc.layout_signature({"x": v})[0][0][1] for v in runner.kv_caches] == [
        kc.layout_signature({"x": v})[0][0][1] for v in stock_runner.kv_caches
    ]
    assert runner.hybrid_with_attn_and_mamba is False


def test_dense_interleaved_kv_exact_views():
    """One buffer of N x page per layer; K and V of kernel block b at b x page and b x page + page / 2."""
    mk = cases.dense()
    _, ours = plugin_build(mk)
    k, v = ours["model.layers.0.self_attn.attn"]
    assert (k.shape, k.stride(), k.dtype) == ((8, 128, 2, 64), (32768, 128, 64, 1), torch.bfloat16)
    assert (v.shape, v.stride()) == ((8, 128, 2, 64), (32768, 128, 64, 1))
    assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert k.untyped_storage().nbytes() == 8 * 65536 == 524288
    assert (v.data_ptr() - k.data_ptr(), k[1].data_ptr() - k.data_ptr()) == (32768, 65536)
    assert not k.is_contiguous() and not v.is_contiguous()


def test_paged_attention_form_is_separate_contiguous_kv():
    _, ours = plugin_build(cases.dense(), paged_attention=True)
    k, v = ours["model.layers.0.self_attn.attn"]
    assert k.is_contiguous() and v.is_contiguous()
    assert k.untyped_storage().data_ptr() != v.untyped_storage().data_ptr()
    assert (k.shape, k.untyped_storage().nbytes(), v.untyped_storage().nbytes()) == ((8, 128, 2, 64), 262144, 262144)


def test_kernel_blocks_are_split_as_stock_passes_them():
    """Block 256 in stock's 128-token kernel blocks: 2 x N rows of 128 tokens, pitch page / 2."""
    _, ours = plugin_build(cases.dense(256))
    k, v = ours["model.layers.0.self_attn.attn"]
    assert (k.shape, k.stride(), v.data_ptr() - k.data_ptr()) == ((16, 128, 2, 64), (32768, 128, 64, 1), 32768)


def test_a_mamba_layer_not_named_linear_attn_is_built_where_stock_fails():
    """Stock 0.30 finds Mamba layers by the substring ``linear_attn``: a ``mixer`` layer gets no
    buffer and stock's own check fails; the plugin builds it from its spec, states after each other."""
    mk = cases.mamba("model.layers.{i}.mixer")
    with pytest.raises(AssertionError, match="Some layers are not correctly initialized"):
        stock_build(mk)
    _, ours = plugin_build(mk)
    conv, ssm = ours["model.layers.0.mixer"]
    assert (conv.shape, ssm.shape, ssm.storage_offset() * 2) == ((8, 3, 256), (8, 2, 64, 64), 8 * 3 * 256 * 2)
    assert conv.untyped_storage().nbytes() == 8 * 17920


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_padded_hybrid_stock_would_corrupt_is_refused_in_every_mode(mode, monkeypatch, kv_log):
    """Stock's trim path lays a padded attention page out as [pad | K all | V all] in the region a
    Mamba layer holds page by page: blocks of different indices alias (stock's own build shows
    it). One policy with KDA beside MLA: StockWouldCorruptError in every mode, naming the layers
    and the bytes, before anything is allocated."""
    from vllm_kv_strategies.errors import StockWouldCorruptError

    monkeypatch.setenv("KV_STRATEGIES", mode)
    mk = rf.t_hyb_toy()
    _, kv = stock_build(mk)
    assert kc.block_conflicts(kv, mk.kv_cache_config)  # stock's own build aliases blocks of different indices
    runner = mk.make_runner()
    error = kc.refused_before_allocating(runner, mk.kv_cache_config, StockWouldCorruptError, monkeypatch)
    assert str(error) == (
        "the plugin refuses a hybrid KV cache whose attention layer 'model.layers.3.self_attn.attn' (FullAttentionSpec) "
        "stock 0.30 lays out as [padding | K of all its blocks | V of all its blocks] (its page padded to the Mamba "
        "page), over bytes [0, 137216) of the backing that 'model.layers.0.linear_attn' (MambaSpec) holds page by "
        "page: with 4 blocks, block j of one aliases block k != j of the other, so stock would corrupt the KV cache"
    )
    assert runner.kv_caches == [] and kv_log.at(logging.WARNING) == []


def test_padded_pages_outside_a_hybrid_are_refused_by_name_before_allocating(monkeypatch):
    mk = cases.padded_dense()
    runner = mk.make_runner()
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *a: pytest.fail("allocated before refusing"))
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    with pytest.raises(UnsupportedSpecError, match=r"padded attention pages of FullAttentionSpec \(FullAttentionSpec\)"):
        AscendAdapter().initialize_kv_cache_tensors(stock, runner, copy.deepcopy(mk.kv_cache_config),
                                                   **rf.stock_kwargs(runner, mk.kv_cache_config))


class Pool(contextlib.AbstractContextManager):
    """Stands in for sleep mode's allocation pool: records entries and what ran inside."""

    def __init__(self):
        self.active, self.entered, self.inside = False, 0, []

    def __enter__(self):
        self.active, self.entered = True, self.entered + 1
        return self

    def __exit__(self, *exc):
        self.active = False


def test_auto_fallback_hands_stock_every_argument(monkeypatch, kv_log):
    """In auto a refused config is stock's exactly, with one warning naming why, and stock
    gets kernel_block_sizes and kv_cache_allocation_context as its caller passed them."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    mk = cases.padded_dense()
    _, want = stock_build(mk)
    runner = mk.make_runner()
    config = copy.deepcopy(mk.kv_cache_config)
    pool, seen = Pool(), {}
    original = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")

    def stock(runner, config, *args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return original(runner, config, *args, **kwargs)

    kw = {"kernel_block_sizes": rf.kernel_block_sizes(runner, config), "kv_cache_allocation_context": pool}
    got = AscendAdapter().initialize_kv_cache_tensors(stock, runner, config, **kw)
    assert kc.layout_signature(got) == kc.layout_signature(want)
    assert seen == {"args": (), "kwargs": kw} and pool.entered == 1
    [warning] = kv_log.at(logging.WARNING)
    assert warning.startswith("kv_strategies: falling back to stock KV cache for all layers: the strategies do not "
                              "build the vllm-ascend 0.30 layouts of padded attention pages of FullAttentionSpec")


def test_the_plugin_allocates_inside_sleep_modes_pool(monkeypatch):
    """Every raw buffer the plugin allocates is allocated inside kv_cache_allocation_context."""
    mk = cases.sliding()
    runner = mk.make_runner()
    pool = Pool()
    real = ascend_alloc.allocate_bytes

    def allocate(nbytes, device, layer):
        pool.inside.append((layer, pool.active))
        return real(nbytes, device, layer)

    monkeypatch.setattr(ascend_alloc, "allocate_bytes", allocate)
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    config = copy.deepcopy(mk.kv_cache_config)
    AscendAdapter().initialize_kv_cache_tensors(
        stock, runner, config, kernel_block_sizes=rf.kernel_block_sizes(runner, config), kv_cache_allocation_context=pool
    )
    # full layers: one K|V buffer each; sliding window layers: K and V each
    assert len(pool.inside) == 6 and all(active for _, active in pool.inside)
    assert pool.entered == 1 and not pool.active


# -- named refusals, from real spec and config objects ---------------------------------------


def _config(specs, tensors=None):
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    names = list(specs)
    page = next(iter(specs.values())).page_size_bytes
    tensors = tensors or [KVCacheTensor(size=4 * page * len(names), layers=names, layer_stride=4 * page,
                                        block_stride=page, offset=0)]
    groups = [KVCacheGroupSpec([n], s) for n, s in specs.items()]
    return KVCacheConfig(num_blocks=4, kv_cache_tensors=tensors, kv_cache_groups=groups)


def _attn(**fields):
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, **fields)


PLAIN_RUNNER = SimpleNamespace(model_config=SimpleNamespace(hf_text_config=SimpleNamespace(model_type="llama")))


@pytest.mark.parametrize(
    ("runner", "specs", "named"),
    [
        (SimpleNamespace(c8_cache_dtype=torch.float8_e4m3fn),
         {"a.attn": rf.AscendMLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=656, dtype=torch.int8,
                                              cache_sparse_sfa_c8=True)},
         "packed SFA C8 main caches of another dtype than the runner's c8_cache_dtype torch.float8_e4m3fn"),
        (SimpleNamespace(use_compress=True), {"a.attn": _attn()}, "compressed KV cache (use_compress)"),
        (SimpleNamespace(ascend_config=SimpleNamespace(xlite_graph_config=SimpleNamespace(enabled=True))),
         {"a.attn": _attn()}, "xlite graphs"),
        (PLAIN_RUNNER, {"a.attn": _attn(state_content_bytes=2 * 64 * 2 + 8)},
         "packed pages of FullAttentionSpec (state_content_bytes) outside C8 MXFP attention"),
        (PLAIN_RUNNER, {"a.attn": _attn(page_size_padded=_attn().page_size_bytes * 2)},
         "padded attention pages of FullAttentionSpec"),
    ],
)
def test_unbuilt_layouts_are_named(runner, specs, named):
    reason = facts.unbuilt_layout_reason(runner, _config(specs))
    assert reason == f"vllm-ascend 0.30 layouts of {named} ({', '.join(sorted({type(s).__name__ for s in specs.values()}))}) yet; stock builds them"


def test_zero_stride_and_host_resident_tensors_are_named():
    """Zero-stride tensors without a layerwise-reuse connector are refused as such; host-resident
    tensors as sparse KV offload (test_refused_030 has the configs stock builds)."""
    from vllm.v1.kv_cache_interface import KVCacheTensor

    spec = _attn()
    page = spec.page_size_bytes
    zero = KVCacheTensor(size=4 * page, layers=["a.attn", "b.attn"], layer_stride=0, block_stride=page, offset=0)
    reason = facts.unbuilt_layout_reason(PLAIN_RUNNER, _config({"a.attn": spec, "b.attn": spec}, [zero]))
    assert reason == "vllm-ascend 0.30 layouts of layers aliasing one zero-stride tensor (FullAttentionSpec) yet; stock builds them"
    host = dataclasses.replace(zero, layer_stride=4 * page, host_resident=True)
    reason = facts.unbuilt_layout_reason(PLAIN_RUNNER, _config({"a.attn": spec, "b.attn": spec}, [host]))
    assert reason.startswith("vllm-ascend 0.30 layout of sparse KV offload (")


def test_a_plain_strided_config_is_built_and_the_shared_by_form_is_not_judged():
    assert facts.unbuilt_layout_reason(PLAIN_RUNNER, _config({"a.attn": _attn()})) is None
    legacy = SimpleNamespace(kv_cache_tensors=[SimpleNamespace(size=1, shared_by=["a"])], kv_cache_groups=[])
    assert facts.unbuilt_layout_reason(PLAIN_RUNNER, legacy) is None


def test_private_layer_config_gives_each_layer_num_blocks_pages():
    spec = _attn()
    config = _config({"a.attn": spec, "b.attn": spec})
    private = facts.private_layer_config(config)
    assert [(t.layers, t.size, t.offset) for t in private.kv_cache_tensors] == [
        (["a.attn"], 4 * spec.page_size_bytes, 0), (["b.attn"], 4 * spec.page_size_bytes, 0)]
    assert [t.layers for t in config.kv_cache_tensors] == [["a.attn", "b.attn"]]  # the config given is not changed
