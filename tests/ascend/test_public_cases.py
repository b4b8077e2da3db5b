"""The public vllm-ascend failure cases C01-C08 (../shared/cases/ascend-kv-cases.md)
as tests of the Ascend adapter, with the exact expected bytes, shapes and offsets.

Each case builds its ``KVCacheConfig`` by hand from real vLLM / vllm-ascend spec
classes (the tensors and groups the case describes) and runs the adapter's
``initialize_kv_cache_tensors`` on a real ``NPUModelRunner`` made by
``runner_factory.make_runner``, on every release of the support matrix. Cases whose
spec form a release cannot express are skipped there with the reason: T-HYB needs
``page_size_padded`` on attention specs (vLLM 0.18+; 0.11 / 0.13 hybrids are in
test_compare_stock), K/V of different widths need ``head_size_v`` (0.18+), and
``sparse_head_dim`` needs vllm-ascend's MLA spec (0.18+; the 0.11 / 0.13 legacy
sparse form is in test_compat_ascend).

On vllm-ascend 0.30 the configs are vLLM 0.30's strided form (``factory_030.kvt``) and every
layer gets private buffers (stock and the plugin): the cases about several layers sharing one
tensor are skipped there with the reason, the others assert 0.30's layouts and compare them
with stock's where stock builds them.
"""

from __future__ import annotations

import copy

import pytest
import torch
import runner_factory as rf
import dataclasses
import factory_030
import kv_compare
from factory_030 import kvt
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    SlidingWindowSpec,
)

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.platforms.ascend.runner import TRANSFER_ALIGNMENT, AscendAdapter
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError

BF16, FP32 = torch.bfloat16, torch.float32
MiB2 = TRANSFER_ALIGNMENT
GDN = rf.gdn_mamba_type()
_ATTN_FIELDS = {f.name for f in dataclasses.fields(FullAttentionSpec)}
needs_padded_attention = pytest.mark.skipif(
    "page_size_padded" not in _ATTN_FIELDS, reason="no page_size_padded on attention specs before vLLM 0.18"
)
needs_sparse_spec = pytest.mark.skipif(
    rf.LEGACY_SPARSE, reason="no sparse_head_dim MLA spec before vllm-ascend 0.18 (legacy form: test_compat_ascend)"
)
ON_030 = rf.RELEASE >= (0, 30)
#: Skip reasons on vllm-ascend 0.30 (one per reason).
NO_SHARED_BY_030 = (
    "vllm-ascend 0.30: vLLM 0.30's KVCacheTensor has no shared_by: layers never share a tensor's "
    "buffers, stock and the plugin give each layer private num_blocks x page buffers "
    "(test_compare_stock checks that)"
)
HYBRID_REFUSED_030 = (
    "vllm-ascend 0.30: these cases pad the attention page to the Mamba page (T-HYB), which 0.30 "
    "refuses by name before allocating (stock's trim path, [pad | K all | V all] per region, is not "
    "block by block); unpadded hybrids are built as stock's one page-strided backing "
    "(test_hybrid_backing_is_stocks_030, tests/ascend/test_overlay_030.py)"
)
NO_SPARSE_HEAD_DIM_030 = (
    "vllm-ascend 0.30's AscendMLAAttentionSpec has no sparse_head_dim: the SFA indexer is its own "
    "layer's AscendSFAIndexerCacheSpec, which the sfa_indexer kind builds as stock (tests/ascend/test_sfa_030.py)"
)
LAYER_BYTES_FROM_PAGES_030 = (
    "vllm-ascend 0.30: a layer's bytes are num_blocks x its own page (stock's "
    "_allocate_kv_cache_tensors, the plugin's private_layer_config), not a share of the tensor's "
    "size, so there is no tensor for a page to give too few blocks of"
)
NO_SMALL_BLOCKS_030 = (
    "vllm-ascend 0.30: vLLM's prepare_kernel_block_sizes (stock initialize_kv_cache, before the KV "
    "cache is built) raises 'No common block size for 16' for the Ascend attention backend's "
    "128-token kernel blocks: no runner reaches initialize_kv_cache_tensors with such blocks"
)
skip_030 = lambda reason: pytest.mark.skipif(ON_030, reason=reason)  # noqa: E731

#: The release's MLA spec class (vllm-ascend's from 0.18, vLLM's before).
MLA_SPEC = rf.AscendMLAAttentionSpec or rf.MLAAttentionSpec


def init(config: KVCacheConfig, **runner_kw):
    runner = rf.make_runner(config, **runner_kw)
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    return runner, AscendAdapter().initialize_kv_cache_tensors(stock, runner, copy.deepcopy(config))


def offset(view: torch.Tensor) -> int:
    """Byte offset of a view inside its allocation."""
    return view.data_ptr() - view.untyped_storage().data_ptr()


def layout(view: torch.Tensor):
    return tuple(view.shape), view.dtype, offset(view), view.numel() * view.element_size()


def allocated(kv_caches: dict) -> int:
    seen = {}
    for value in kv_caches.values():
        for t in value:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


L = "model.layers.{}.linear_attn".format
A = "model.layers.{}.self_attn.attn".format


def t_hyb(tensors_reversed: bool = False) -> KVCacheConfig:
    # T-HYB (cases file): attention K page A = 16384, padded page 34304 = 2A + conv 1536.
    ATTN = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16, page_size_padded=34304)
    MAMBA = MambaSpec(
        block_size=128, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, BF16), page_size_padded=34304, mamba_type=GDN
    )
    groups = [
        KVCacheGroupSpec([A(3), A(7)], ATTN),
        KVCacheGroupSpec([L(0), L(1)], MAMBA),
        KVCacheGroupSpec([L(2), L(4)], MAMBA),
        KVCacheGroupSpec([L(5), L(6)], MAMBA),
    ]
    tensors = [
        KVCacheTensor(size=137216, shared_by=[A(3), L(0), L(2), L(5)]),
        KVCacheTensor(size=137216, shared_by=[A(7), L(1), L(4), L(6)]),
    ]
    if tensors_reversed:
        tensors.reverse()
    return KVCacheConfig(num_blocks=4, kv_cache_tensors=tensors, kv_cache_groups=groups)


@skip_030(HYBRID_REFUSED_030)
@needs_padded_attention
def test_c01_hybrid_tensor_allocated_once_and_shared():
    _, kv = init(t_hyb())
    assert allocated(kv) == 274432  # v0.11.0rc0 used 1,097,728; after PR #3760 548,864
    storages = [{t.untyped_storage().data_ptr() for t in kv[n]} for n in (A(3), L(0), L(2), L(5))]
    assert all(s == storages[0] for s in storages) and len(storages[0]) == 1
    other = {t.untyped_storage().data_ptr() for n in (A(7), L(1), L(4), L(6)) for t in kv[n]}
    assert len(other) == 1 and other.isdisjoint(storages[0])


@skip_030(HYBRID_REFUSED_030)
@needs_padded_attention
@pytest.mark.parametrize("reverse", [False, True], ids=["tensor-order", "reversed"])
def test_c02_region_layout_and_block_consistent_aliasing(reverse):
    _, kv = init(t_hyb(tensors_reversed=reverse))
    for mamba in (L(0), L(2), L(5)):
        conv, ssm = kv[mamba]
        assert layout(conv) == ((4, 3, 256), BF16, 0, 6144)
        assert layout(ssm) == ((4, 2, 64, 64), BF16, 6144, 65536)
    k, v = kv[A(3)]
    assert layout(k) == ((4, 128, 1, 64), BF16, 6144, 65536)
    assert layout(v) == ((4, 128, 1, 64), BF16, 71680, 65536)
    assert offset(v) + 65536 == 137216
    # K block j and ssm block j occupy the same 16384-byte slot.
    for j in range(4):
        assert k[j].data_ptr() == kv[L(0)][1][j].data_ptr()


@skip_030(HYBRID_REFUSED_030)
@needs_padded_attention
def test_c02_unpadded_attention_page_is_refused_not_rounded():
    attn = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)  # page 32768
    config = t_hyb()
    config.kv_cache_groups[0] = KVCacheGroupSpec([A(3), A(7)], attn)
    with pytest.raises(KVCacheLayoutError, match=r"137216 bytes .* 32768-byte pages \(4\.1875\)"):
        init(config)


def test_c03_mamba_states_with_mixed_dtypes_placed_by_bytes():
    spec = MambaSpec(
        block_size=128, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, FP32), mamba_type=GDN
    )
    assert spec.page_size_bytes == 34304
    config = KVCacheConfig(4, [kvt(137216, [L(0)], 4)], [KVCacheGroupSpec([L(0)], spec)])
    _, kv = init(config)
    conv, ssm = kv[L(0)]
    if facts.mamba_states_interleaved():  # 0.11: block j of each state in page j (34304 bytes)
        assert layout(conv) == ((4, 3, 256), BF16, 0, 6144) and conv.stride(0) == 34304 // 2
        assert layout(ssm) == ((4, 2, 64, 64), FP32, 1536, 131072) and ssm.stride(0) == 34304 // 4
    else:  # state after state
        assert layout(conv) == ((4, 3, 256), BF16, 0, 6144) and conv.is_contiguous()
        assert layout(ssm) == ((4, 2, 64, 64), FP32, 6144, 131072) and ssm.is_contiguous()
    assert ssm.data_ptr() % 4 == 0
    assert allocated(kv) == 137216
    if ON_030:  # one buffer, state after state, as stock 0.30
        _, stock, _, ours = factory_030.stock_and_plugin(config)
        assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)


@pytest.mark.parametrize("names", [("model.layers.0.attn.attn", "model.layers.1.attn.attn"), ("model.layers.0.attention.attn", "model.layers.1.foo")])
def test_c04_dispatch_by_spec_not_by_layer_name(names):
    spec = FullAttentionSpec(block_size=128, num_kv_heads=8, head_size=64, dtype=BF16)
    assert spec.page_size_bytes == 262144
    config = KVCacheConfig(
        8, [kvt(2097152, [names[0]], 8), kvt(2097152, [names[1]], 8)], [KVCacheGroupSpec(list(names), spec)]
    )
    _, kv = init(config)
    assert set(kv) == set(names)
    for name in names:
        assert [layout(t)[:2] + (layout(t)[3],) for t in kv[name]] == [((8, 128, 8, 64), BF16, 1048576)] * 2
    assert allocated(kv) == 4194304
    if ON_030:  # K|V interleaved per 128-token kernel block in one buffer per layer, as stock 0.30
        for name in names:
            k, v = kv[name]
            assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
            assert (k.stride(0), offset(k), offset(v)) == (131072, 0, 131072)
        _, stock, _, ours = factory_030.stock_and_plugin(config)
        assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)


def test_c04_mamba_layer_named_mixer():
    spec = MambaSpec(
        block_size=128, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, FP32), mamba_type=GDN
    )
    config = KVCacheConfig(4, [kvt(137216, ["model.layers.2.mixer"], 4)], [KVCacheGroupSpec(["model.layers.2.mixer"], spec)])
    _, kv = init(config)
    assert [layout(t)[0] for t in kv["model.layers.2.mixer"]] == [(4, 3, 256), (4, 2, 64, 64)]
    if ON_030:  # stock 0.30 still picks Mamba layers by name ("linear_attn"), so it fails on this one
        conv, ssm = kv["model.layers.2.mixer"]
        assert (layout(conv), layout(ssm)) == (((4, 3, 256), BF16, 0, 6144), ((4, 2, 64, 64), FP32, 6144, 131072))
        assert allocated(kv) == 137216
        runner = rf.make_runner(config)
        with pytest.raises(AssertionError, match="Some layers are not correctly initialized"):
            kv_compare.stock_init(runner, config)


@pytest.mark.parametrize("transfer", [True, False], ids=["kv_transfer", "plain"])
def test_c05_prefill_decode_alignment(transfer):
    spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=128, dtype=BF16)
    assert spec.page_size_bytes == 65536
    config = KVCacheConfig(10, [kvt(655360, [A(0)], 10)], [KVCacheGroupSpec([A(0)], spec)])
    _, kv = init(config, kv_transfer=transfer)
    k, v = kv[A(0)]
    for t in (k, v):
        assert (tuple(t.shape), t.dtype, t.numel() * 2) == ((10, 128, 1, 128), BF16, 327680)
    if ON_030:  # one buffer, K|V interleaved per kernel block (V half a 65536-byte block after K)
        assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
        assert k.stride(0) * 2 == 65536 and v.data_ptr() - k.data_ptr() == 32768
        assert k.data_ptr() % MiB2 == 0 if transfer else True
        assert allocated(kv) == 655360 + (MiB2 if transfer else 0)
        _, stock, _, ours = factory_030.stock_and_plugin(config, kv_transfer=transfer)
        assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)
        return
    assert_separate_aligned_kv(kv, k, v, transfer)


def assert_separate_aligned_kv(kv, k, v, transfer):
    """K and V of 327,680 bytes each in storages of their own, each 2 MiB aligned with KV transfer."""
    assert k.untyped_storage().data_ptr() != v.untyped_storage().data_ptr()
    if transfer:
        assert k.data_ptr() % MiB2 == 0 and v.data_ptr() % MiB2 == 0
        assert allocated(kv) == 2 * (327680 + MiB2)
    else:
        assert allocated(kv) == 655360


@pytest.mark.skipif(not ON_030, reason="vllm-ascend 0.30's paged-attention form (separate K and V)")
@pytest.mark.parametrize("transfer", [True, False], ids=["kv_transfer", "plain"])
def test_c05_paged_attention_k_and_v_each_aligned_030(transfer):
    spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=128, dtype=BF16)
    config = KVCacheConfig(10, [kvt(655360, [A(0)], 10)], [KVCacheGroupSpec([A(0)], spec)])
    _, kv = init(config, kv_transfer=transfer, paged_attention=True)
    k, v = kv[A(0)]
    for t in (k, v):
        assert (tuple(t.shape), t.dtype, t.numel() * 2, t.is_contiguous()) == ((10, 128, 1, 128), BF16, 327680, True)
    assert_separate_aligned_kv(kv, k, v, transfer)
    _, stock, _, ours = factory_030.stock_and_plugin(config, kv_transfer=transfer, paged_attention=True)
    assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)


def test_c06_mla_latent_split_into_nope_and_rope():
    spec = MLA_SPEC(block_size=128, num_kv_heads=1, head_size=576, dtype=BF16)
    assert spec.page_size_bytes == 147456
    config = KVCacheConfig(
        16, [kvt(2359296, [A(0)], 16), kvt(2359296, [A(1)], 16)], [KVCacheGroupSpec([A(0), A(1)], spec)]
    )
    _, kv = init(config, mla_dims=(512, 64))
    for name in (A(0), A(1)):
        nope, rope = kv[name]
        assert (tuple(nope.shape), nope.dtype, nope.numel() * 2) == ((16, 128, 1, 512), BF16, 2097152)
        assert (tuple(rope.shape), rope.dtype, rope.numel() * 2) == ((16, 128, 1, 64), BF16, 262144)
    assert allocated(kv) == 4718592
    if ON_030:  # nope and rope in buffers of their own, as stock 0.30
        nope, rope = kv[A(0)]
        assert nope.untyped_storage().data_ptr() != rope.untyped_storage().data_ptr()
        _, stock, _, ours = factory_030.stock_and_plugin(config, mla_dims=(512, 64))
        assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)


@skip_030(LAYER_BYTES_FROM_PAGES_030)
def test_c06_kv_style_page_gives_too_few_blocks():
    kv_style = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=BF16)
    assert kv_style.page_size_bytes == 294912
    config = KVCacheConfig(16, [KVCacheTensor(2359296, [A(0)])], [KVCacheGroupSpec([A(0)], kv_style)])
    with pytest.raises(KVCacheLayoutError, match=r"num_blocks 16 .* 294912-byte pages \(8\)"):
        init(config)


def sparse_spec(block: int, split: tuple[int, int, int]):
    return rf.AscendMLAAttentionSpec(
        block_size=block, num_kv_heads=1, head_size=sum(split), dtype=BF16, sparse_head_dim=split
    )


@skip_030(NO_SPARSE_HEAD_DIM_030)
@needs_sparse_spec
def test_c07_sparse_mla_indexer_share():
    spec = sparse_spec(128, (512, 64, 128))
    assert spec.page_size_bytes == 180224
    config = KVCacheConfig(8, [KVCacheTensor(1441792, [A(0)])], [KVCacheGroupSpec([A(0)], spec)])
    _, kv = init(config, mla_dims=(512, 64), index_head_dim=128)
    nope, rope, idx = kv[A(0)]
    assert (tuple(nope.shape), nope.numel() * 2) == ((8, 128, 1, 512), 1048576)
    assert (tuple(rope.shape), rope.numel() * 2) == ((8, 128, 1, 64), 131072)
    assert (tuple(idx.shape), idx.numel() * 2) == ((8, 128, 1, 128), 262144)
    assert allocated(kv) == 1441792


@skip_030(NO_SPARSE_HEAD_DIM_030)
@needs_sparse_spec
def test_c08_sparse_layers_without_indexer_get_no_indexer_buffer():
    # 128-token blocks: two KV cache groups make the runner split blocks into its 128-token kernel blocks
    shared_idx, own_idx = sparse_spec(128, (512, 64, 0)), sparse_spec(128, (512, 64, 128))
    assert (shared_idx.page_size_bytes, own_idx.page_size_bytes) == (147456, 180224)
    config = KVCacheConfig(
        2,
        [KVCacheTensor(360448, [A(0)]), KVCacheTensor(294912, [A(1)])],
        [KVCacheGroupSpec([A(0)], own_idx), KVCacheGroupSpec([A(1)], shared_idx)],
    )
    _, kv = init(config, mla_dims=(512, 64), index_head_dim=128)
    assert [(tuple(t.shape), t.numel() * 2) for t in kv[A(1)]] == [((2, 128, 1, 512), 262144), ((2, 128, 1, 64), 32768)]
    assert [(tuple(t.shape), t.numel() * 2) for t in kv[A(0)]] == [
        ((2, 128, 1, 512), 262144),
        ((2, 128, 1, 64), 32768),
        ((2, 128, 1, 128), 65536),
    ]
    assert allocated(kv) == 360448 + 294912


@skip_030(NO_SHARED_BY_030)
def test_attention_layers_with_equal_bytes_per_part_share_a_tensor_each_in_its_own_shape():
    """What must match between layers aliasing a buffer is the bytes per block of each part,
    not the shape (N2 of never-worse-than-stock.md is the full-size case)."""
    wide = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=128, dtype=BF16)  # K, V 32768 per block
    narrow = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=BF16)  # K, V 32768 per block
    config = KVCacheConfig(
        2, [KVCacheTensor(131072, [A(0), A(1)])], [KVCacheGroupSpec([A(0)], wide), KVCacheGroupSpec([A(1)], narrow)]
    )
    _, kv = init(config)
    assert [tuple(t.shape) for t in kv[A(0)]] == [(2, 128, 1, 128)] * 2
    assert [tuple(t.shape) for t in kv[A(1)]] == [(2, 128, 2, 64)] * 2
    assert [t.data_ptr() for t in kv[A(0)]] == [t.data_ptr() for t in kv[A(1)]]
    assert allocated(kv) == 131072


@skip_030(NO_SHARED_BY_030)
def test_attention_layers_whose_parts_differ_in_bytes_cannot_share_a_tensor():
    """Different bytes per block would put block j of one layer over block k != j of the
    other; from 0.13 stock aliases them anyway, so it is an error in every mode there."""
    from vllm_kv_strategies.errors import StockWouldCorruptError

    wide = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=128, dtype=BF16)  # K 32768 per block
    narrow = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)  # K 16384 per block
    config = KVCacheConfig(
        2, [KVCacheTensor(131072, [A(0), A(1)])], [KVCacheGroupSpec([A(0)], wide), KVCacheGroupSpec([A(1)], narrow)]
    )
    error = StockWouldCorruptError if rf.RELEASE >= (0, 13) else KVCacheLayoutError
    with pytest.raises(error, match="differ in bytes per block") as info:
        init(config)
    assert A(0) in str(info.value) and A(1) in str(info.value) and "32768" in str(info.value)


@skip_030(NO_SMALL_BLOCKS_030)
def test_a_block_below_the_kernel_block_is_refused_before_allocating(monkeypatch):
    """N5 of never-worse-than-stock.md at small size: with two KV cache groups the runner views
    blocks in 128-token kernel blocks; 16-token blocks fit no such view."""
    full = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=64)
    config = KVCacheConfig(
        4, [KVCacheTensor(16384, [A(0), A(1)])], [KVCacheGroupSpec([A(0)], full), KVCacheGroupSpec([A(1)], swa)]
    )
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(KVCacheLayoutError, match=r"block size 16 tokens cannot be viewed in the attention backend's 128-token kernel blocks"):
        init(config)


def test_runner_only_and_kv_sharing_layers_get_no_buffer_of_their_own():
    # 0.30: 128-token blocks (the Ascend backend's only kernel block size, see NO_SMALL_BLOCKS_030)
    block = 128 if ON_030 else 16
    spec = FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=64, dtype=BF16)  # 256 bytes a token
    config = KVCacheConfig(2, [kvt(2 * 256 * block, [A(0)], 2)], [KVCacheGroupSpec([A(0), A(1)], spec)])
    runner, kv = init(config, runner_only_attn_layers=[A(1)], shared_kv_cache_layers={A(2): A(0)})
    assert set(kv) == {A(0), A(2)}
    assert kv[A(2)] is kv[A(0)]
    assert allocated(kv) == 2 * 256 * block
    if ON_030:
        _, stock, _, ours = factory_030.stock_and_plugin(
            config, runner_only_attn_layers=[A(1)], shared_kv_cache_layers={A(2): A(0)}
        )
        assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)


@skip_030(NO_SHARED_BY_030)
def test_full_and_sliding_window_layers_of_different_groups_share_k_and_v():
    full = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)
    swa = SlidingWindowSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=64)
    config = KVCacheConfig(
        4, [KVCacheTensor(131072, [A(0), A(1)])], [KVCacheGroupSpec([A(0)], full), KVCacheGroupSpec([A(1)], swa)]
    )
    _, kv = init(config)
    assert [t.data_ptr() for t in kv[A(0)]] == [t.data_ptr() for t in kv[A(1)]]
    assert allocated(kv) == 131072


@skip_030("vllm-ascend 0.30 builds K and V of different widths in its own forms: test_k_and_v_of_different_widths_030")
@pytest.mark.skipif("head_size_v" not in _ATTN_FIELDS, reason="no head_size_v before vLLM 0.18")
def test_k_and_v_of_different_widths_split_exactly():
    # Stock splits the tensor with float factors (5/3 and 5/2 here) and loses a byte.
    spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=192, head_size_v=128, dtype=BF16)
    assert spec.page_size_bytes == 128 * (192 + 128) * 2 == 81920
    config = KVCacheConfig(3, [KVCacheTensor(245760, [A(0)])], [KVCacheGroupSpec([A(0)], spec)])
    _, kv = init(config)
    k, v = kv[A(0)]
    assert (tuple(k.shape), k.numel() * 2) == ((3, 128, 1, 192), 147456)
    assert (tuple(v.shape), v.numel() * 2) == ((3, 128, 1, 128), 98304)
    assert allocated(kv) == 245760


@pytest.mark.skipif(not ON_030, reason="vllm-ascend 0.30's forms of K and V of different widths")
def test_k_and_v_of_different_widths_030(monkeypatch):
    """Stock 0.30 puts unequal K and V one after the other in one buffer where it would interleave
    them (not PA); the plugin does not build that form and refuses it, naming the head sizes,
    before allocating. Under paged attention stock asserts; the plugin builds private K and V."""
    spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=192, head_size_v=128, dtype=BF16)
    config = KVCacheConfig(3, [kvt(245760, [A(0)], 3)], [KVCacheGroupSpec([A(0)], spec)])
    stock = kv_compare.stock_init(rf.make_runner(config), config)
    k, v = stock[A(0)]
    assert (layout(k), layout(v)) == (((3, 128, 1, 192), BF16, 0, 147456), ((3, 128, 1, 128), BF16, 147456, 98304))
    with monkeypatch.context() as m:
        m.setattr(torch, "zeros", lambda *a, **k: pytest.fail("allocated"))
        with pytest.raises(ValueError, match=r"head sizes 192/128; only 5-D \(2, \.\.\.\) K\|V of equal head sizes"):
            kv_compare.plugin_init(rf.make_runner(config), config)
    with pytest.raises(AssertionError):
        kv_compare.stock_init(rf.make_runner(config, paged_attention=True), config)
    kv = kv_compare.plugin_init(rf.make_runner(config, paged_attention=True), config)
    k, v = kv[A(0)]
    assert (layout(k), layout(v)) == (((3, 128, 1, 192), BF16, 0, 147456), ((3, 128, 1, 128), BF16, 0, 98304))
    assert allocated(kv) == 245760


@pytest.mark.skipif(not ON_030, reason="vllm-ascend 0.30's strided hybrid backing")
def test_hybrid_backing_is_stocks_030(monkeypatch):
    """An unpadded hybrid: stock's one backing, layer j of each kind in region j, byte for byte;
    T-HYB (attention page padded to the Mamba page: stock's trim path aliases blocks of different
    indices) is refused in every mode before anything is allocated."""
    from vllm_kv_strategies.errors import StockWouldCorruptError

    import copy

    import stock_cases_030

    mk = stock_cases_030.hybrid()
    stock = kv_compare.stock_init(mk.make_runner(), copy.deepcopy(mk.kv_cache_config))
    ours = kv_compare.plugin_init(mk.make_runner(), copy.deepcopy(mk.kv_cache_config))
    assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)
    assert {t.untyped_storage().nbytes() for v in ours.values() for t in v} == {mk.kv_cache_config.kv_cache_tensors[0].size}
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: pytest.fail("allocated"))
    toy = rf.t_hyb_toy()
    with pytest.raises(StockWouldCorruptError, match=r"\[padding \| K of all its blocks \| V of all its blocks\]"):
        kv_compare.plugin_init(toy.make_runner(), toy.kv_cache_config)
