"""Each built-in strategy on real vLLM KV cache spec objects.

Every expected byte count is worked out by hand in the test (elements x
element size), never by calling the formula under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVQuantMode,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    SparseCacheRole,
)
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.core.strategies import (
    FullAttentionStrategy,
    HiddenStateStrategy,
    KVCacheStrategy,
    LayoutFamily,
    MambaStrategy,
    MLAStrategy,
    ModelDims,
    PagePart,
    SparseMLAStrategy,
)

BF16, FP16, FP32, U8 = torch.bfloat16, torch.float16, torch.float32, torch.uint8
FP8 = torch.float8_e4m3fn
NO_DIMS = ModelDims()
DEEPSEEK = ModelDims(kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128)


def parts_table(parts):
    return [(p.name, p.dtype, p.shape, p.nbytes) for p in parts]


# ---------------------------------------------------------------------------
# PagePart / ModelDims
# ---------------------------------------------------------------------------


def test_page_part_bytes_are_elements_times_itemsize():
    assert PagePart("k", BF16, (16, 8, 128)).nbytes == 32768  # 16384 elements x 2
    assert PagePart("ssm", FP32, (2, 64, 64)).nbytes == 32768  # 8192 x 4
    assert PagePart("x", U8, (64, 1, 132)).nbytes == 8448
    assert PagePart("empty", BF16, (64, 1, 0)).nbytes == 0


def test_model_dims_from_objects_keeps_ints_only():
    hf = SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128)
    assert ModelDims.from_objects(hf) == DEEPSEEK
    # A llama-style config has none of them; a non-int value is not a width.
    assert ModelDims.from_objects(SimpleNamespace(hidden_size=4096)) == NO_DIMS
    assert ModelDims.from_objects(SimpleNamespace(kv_lora_rank="512")) == NO_DIMS


def test_strategy_interface_is_abstract():
    with pytest.raises(TypeError):
        KVCacheStrategy()  # type: ignore[abstract]


# ---------------------------------------------------------------------------
# Full attention (also sliding window and chunked local)
# ---------------------------------------------------------------------------

FULL_CASES = [
    pytest.param(
        FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=BF16),
        [("k", BF16, (16, 8, 128), 32768), ("v", BF16, (16, 8, 128), 32768)],
        65536,
        id="full-bf16",
    ),
    pytest.param(
        # K and V head sizes differ: 192 vs 128.
        FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=192, head_size_v=128, dtype=FP16),
        [("k", FP16, (16, 4, 192), 24576), ("v", FP16, (16, 4, 128), 16384)],
        40960,
        id="full-head_size_v",
    ),
    pytest.param(
        SlidingWindowSpec(block_size=32, num_kv_heads=2, head_size=64, dtype=FP32, sliding_window=128),
        [("k", FP32, (32, 2, 64), 16384), ("v", FP32, (32, 2, 64), 16384)],
        32768,
        id="sliding-fp32",
    ),
    pytest.param(
        SlidingWindowSpec(
            block_size=16, num_kv_heads=1, head_size=256, head_size_v=64, dtype=BF16, sliding_window=4096
        ),
        [("k", BF16, (16, 1, 256), 8192), ("v", BF16, (16, 1, 64), 2048)],
        10240,
        id="sliding-head_size_v",
    ),
    pytest.param(
        ChunkedLocalAttentionSpec(
            block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, attention_chunk_size=8192
        ),
        [("k", BF16, (16, 2, 64), 4096), ("v", BF16, (16, 2, 64), 4096)],
        8192,
        id="chunked-local",
    ),
    pytest.param(
        # fp8 per-tensor: plain one-byte elements, accepted.
        FullAttentionSpec(
            block_size=16, num_kv_heads=8, head_size=128, dtype=FP8, kv_quant_mode=KVQuantMode.FP8_PER_TENSOR
        ),
        [("k", FP8, (16, 8, 128), 16384), ("v", FP8, (16, 8, 128), 16384)],
        32768,
        id="full-fp8-per-tensor",
    ),
]


@pytest.mark.parametrize(("spec", "expected_parts", "page"), FULL_CASES)
def test_full_attention_parts(spec, expected_parts, page):
    strategy = FullAttentionStrategy()
    parts = strategy.page_parts(spec, NO_DIMS)
    assert parts_table(parts) == expected_parts
    assert strategy.page_size_bytes(spec, NO_DIMS) == page
    assert spec.real_page_size_bytes == page  # vLLM agrees with the hand count


def test_full_attention_page_is_the_unpadded_page():
    spec = FullAttentionSpec(
        block_size=16, num_kv_heads=8, head_size=128, dtype=BF16, page_size_padded=69632
    )
    assert spec.page_size_bytes == 69632
    assert FullAttentionStrategy().page_size_bytes(spec, NO_DIMS) == 65536


# ---------------------------------------------------------------------------
# MLA
# ---------------------------------------------------------------------------


def mla_spec(**kw):
    base = dict(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16)
    return MLAAttentionSpec(**{**base, **kw})


def test_mla_splits_latent_into_nope_512_and_rope_64():
    spec = mla_spec()
    parts = MLAStrategy().page_parts(spec, DEEPSEEK)
    assert parts_table(parts) == [
        ("nope", BF16, (64, 1, 512), 65536),  # 64 x 512 x 2
        ("rope", BF16, (64, 1, 64), 8192),  # 64 x 64 x 2
    ]
    assert MLAStrategy().page_size_bytes(spec, DEEPSEEK) == 73728
    assert spec.real_page_size_bytes == 73728


def test_mla_fp8_latent():
    spec = mla_spec(dtype=U8, cache_dtype_str="fp8", kv_quant_mode=KVQuantMode.FP8_PER_TENSOR)
    parts = MLAStrategy().page_parts(spec, DEEPSEEK)
    assert parts_table(parts) == [("nope", U8, (64, 1, 512), 32768), ("rope", U8, (64, 1, 64), 4096)]


def test_mla_page_is_the_unpadded_page_when_aligned():
    spec = mla_spec(alignment=65536)  # 73728 rounds up to 131072
    assert spec.page_size_bytes == 131072
    assert MLAStrategy().page_size_bytes(spec, DEEPSEEK) == 73728


@pytest.mark.parametrize(
    "dims",
    [
        ModelDims(),
        ModelDims(kv_lora_rank=512),
        ModelDims(qk_rope_head_dim=64),
    ],
    ids=["none", "no-rope", "no-lora"],
)
def test_mla_without_dims_is_a_layout_error(dims):
    with pytest.raises(KVCacheLayoutError, match="kv_lora_rank and qk_rope_head_dim"):
        MLAStrategy().page_parts(mla_spec(), dims)


@pytest.mark.parametrize(
    "dims", [ModelDims(512, 32), ModelDims(448, 64), ModelDims(512, 128)], ids=["544", "512", "640"]
)
def test_mla_dims_that_do_not_add_up_are_a_layout_error(dims):
    with pytest.raises(KVCacheLayoutError) as info:
        MLAStrategy().page_parts(mla_spec(), dims)
    message = str(info.value)
    assert "head_size 576" in message
    assert f"nope {dims.kv_lora_rank}" in message and f"rope {dims.qk_rope_head_dim}" in message


# ---------------------------------------------------------------------------
# Sparse MLA
# ---------------------------------------------------------------------------


def indexer_spec(**kw):
    # DeepSeek V3.2's indexer cache: head_dim 128 + 128 // 128 * 4 scale bytes, uint8.
    base = dict(
        block_size=64, num_kv_heads=1, head_size=132, dtype=U8, cache_role=SparseCacheRole.INDEXER
    )
    return MLAAttentionSpec(**{**base, **kw})


def test_sparse_mla_matches_the_indexer_role_only():
    strategy = SparseMLAStrategy()
    assert strategy.matches(indexer_spec())
    assert not strategy.matches(mla_spec())
    assert not strategy.matches(mla_spec(cache_role=SparseCacheRole.SPARSE))


def test_sparse_mla_fp8_indexer_layer_is_keys_then_scales():
    spec = indexer_spec()
    # The indexer page needs no model dims: fp8 keys, then one fp32 scale per 128 keys.
    parts = SparseMLAStrategy().page_parts(spec, NO_DIMS)
    assert parts_table(parts) == [
        ("indexer_k", FP8, (64, 1, 128), 8192),  # 64 x 128 x 1
        ("indexer_scale", FP32, (64, 1, 1), 256),  # 64 x 1 x 4
    ]
    assert [(p.kernel_blocks, p.group) for p in parts] == [(False, "indexer")] * 2
    assert SparseMLAStrategy().page_size_bytes(spec, DEEPSEEK) == 8448
    assert spec.real_page_size_bytes == 8448


def test_sparse_mla_fp8_indexer_of_another_width():
    # 256 keys + 2 scales = 264 bytes per token.
    parts = SparseMLAStrategy().page_parts(indexer_spec(head_size=264), NO_DIMS)
    assert parts_table(parts) == [("indexer_k", FP8, (64, 1, 256), 16384), ("indexer_scale", FP32, (64, 1, 2), 512)]
    with pytest.raises(KVCacheLayoutError, match="head_size=130"):
        SparseMLAStrategy().page_parts(indexer_spec(head_size=130), NO_DIMS)


def test_sparse_mla_indexer_with_bf16_heads():
    spec = indexer_spec(block_size=16, num_kv_heads=2, head_size=128, dtype=BF16)
    parts = SparseMLAStrategy().page_parts(spec, NO_DIMS)
    assert parts_table(parts) == [("indexer_k", BF16, (16, 2, 128), 8192)]


@dataclass(frozen=True, kw_only=True)
class VendorSparseMLASpec(MLAAttentionSpec):
    """An Ascend-style MLA spec that carries its own nope/rope/indexer split."""

    sparse_head_dim: tuple[int, ...] = ()


def test_sparse_mla_vendor_spec_with_its_own_split():
    # 512 + 64 + 128 = 704 elements per token, bf16, 128 tokens per block.
    spec = VendorSparseMLASpec(
        block_size=128, num_kv_heads=1, head_size=704, dtype=BF16, sparse_head_dim=(512, 64, 128)
    )
    strategy = SparseMLAStrategy()
    assert strategy.matches(spec)
    parts = strategy.page_parts(spec, NO_DIMS)
    assert parts_table(parts) == [
        ("nope", BF16, (128, 1, 512), 131072),
        ("rope", BF16, (128, 1, 64), 16384),
        ("indexer_k", BF16, (128, 1, 128), 32768),
    ]
    assert strategy.page_size_bytes(spec, NO_DIMS) == 180224 == spec.real_page_size_bytes


def test_sparse_mla_vendor_split_that_does_not_add_up():
    spec = VendorSparseMLASpec(
        block_size=128, num_kv_heads=1, head_size=704, dtype=BF16, sparse_head_dim=(512, 64, 64)
    )
    with pytest.raises(KVCacheLayoutError, match="head_size 704"):
        SparseMLAStrategy().page_parts(spec, NO_DIMS)


# ---------------------------------------------------------------------------
# Mamba
# ---------------------------------------------------------------------------


def test_mamba_mixed_dtypes_bf16_conv_fp32_ssm():
    spec = MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, FP32))
    parts = MambaStrategy().page_parts(spec, NO_DIMS)
    assert parts_table(parts) == [
        ("conv", BF16, (3, 256), 1536),  # 768 x 2
        ("ssm", FP32, (2, 64, 64), 32768),  # 8192 x 4
    ]
    assert MambaStrategy().page_size_bytes(spec, NO_DIMS) == 34304
    assert spec.real_page_size_bytes == 34304


def test_mamba_page_is_the_unpadded_page():
    spec = MambaSpec(
        block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, FP32), page_size_padded=40960
    )
    assert spec.page_size_bytes == 40960
    assert MambaStrategy().page_size_bytes(spec, NO_DIMS) == 34304


@pytest.mark.parametrize(
    ("shapes", "dtypes", "expected"),
    [
        (((4, 128),), (FP16,), [("state0", FP16, (4, 128), 1024)]),
        (
            ((3, 128), (8, 16), (2, 2, 2)),
            (BF16, FP32, FP16),
            [
                ("state0", BF16, (3, 128), 768),
                ("state1", FP32, (8, 16), 512),
                ("state2", FP16, (2, 2, 2), 16),
            ],
        ),
    ],
    ids=["one-state", "three-states"],
)
def test_mamba_other_state_counts(shapes, dtypes, expected):
    spec = MambaSpec(block_size=16, shapes=shapes, dtypes=dtypes)
    parts = MambaStrategy().page_parts(spec, NO_DIMS)
    assert parts_table(parts) == expected
    assert sum(e[3] for e in expected) == spec.real_page_size_bytes


def test_layout_families():
    # Mamba states (mixed dtypes) are placed by byte offset in one raw buffer; attention
    # parts get a buffer each; the hidden-state cache is one plain tensor.
    assert MambaStrategy.family is LayoutFamily.STATES
    assert FullAttentionStrategy.family is MLAStrategy.family is SparseMLAStrategy.family is LayoutFamily.PER_PART
    assert HiddenStateStrategy.family is LayoutFamily.PLAIN


# ---------------------------------------------------------------------------
# The hidden-state cache (speculative decoding)
# ---------------------------------------------------------------------------


def test_hidden_state_cache_is_one_part_and_never_mla():
    """HiddenStateCacheSpec subclasses MLAAttentionSpec; its page is one part (no nope/rope),
    and the model config it comes with has no kv_lora_rank (N1 of never-worse-than-stock.md)."""
    from vllm.v1.kv_cache_interface import HiddenStateCacheSpec

    from vllm_kv_strategies.core.registry import default_registry

    spec = HiddenStateCacheSpec(block_size=128, num_kv_heads=1, head_size=128, dtype=BF16)
    strategy = default_registry().resolve(spec)
    assert strategy.name == "hidden_state"
    assert parts_table(strategy.page_parts(spec, NO_DIMS)) == [("hidden", BF16, (128, 1, 128), 32768)]
    assert spec.page_size_bytes == 128 * 1 * 128 * 2 == 32768


# ---------------------------------------------------------------------------
# Packed / quantised specs are refused
# ---------------------------------------------------------------------------

PACKED_ATTENTION = [
    pytest.param(
        dict(kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD, dtype=torch.int8), "kv_quant_mode", id="int8-per-token"
    ),
    pytest.param(dict(kv_quant_mode=KVQuantMode.FP8_PER_TOKEN_HEAD, dtype=FP8), "kv_quant_mode", id="fp8-per-token"),
    pytest.param(dict(kv_quant_mode=KVQuantMode.NVFP4, dtype=U8), "kv_quant_mode", id="nvfp4"),
    pytest.param(dict(kv_quant_mode=KVQuantMode.TURBOQUANT_K8V4, dtype=U8), "kv_quant_mode", id="turboquant"),
    pytest.param(dict(num_head_slots=1, state_content_bytes=4096), "num_head_slots", id="head-slots"),
    pytest.param(dict(state_content_bytes=656), "state_content_bytes", id="state-bytes"),
]


@pytest.mark.parametrize(("packing", "field"), PACKED_ATTENTION)
def test_full_attention_refuses_packed_pages(packing, field):
    spec = FullAttentionSpec(**{**dict(block_size=16, num_kv_heads=8, head_size=128, dtype=BF16), **packing})
    with pytest.raises(UnsupportedSpecError) as info:
        FullAttentionStrategy().page_parts(spec, NO_DIMS)
    assert "FullAttentionSpec" in str(info.value) and field in str(info.value)
    with pytest.raises(UnsupportedSpecError):
        FullAttentionStrategy().page_size_bytes(spec, NO_DIMS)


PACKED_MLA = [
    pytest.param(
        # What vLLM's MLAAttention.get_kv_cache_spec builds for fp8_ds_mla.
        dict(
            dtype=U8,
            cache_dtype_str="fp8_ds_mla",
            kv_quant_mode=KVQuantMode.FP8_PER_TENSOR,
            state_content_bytes=656,
        ),
        "fp8_ds_mla",
        id="fp8_ds_mla",
    ),
    pytest.param(
        dict(dtype=U8, cache_dtype_str="nvfp4_ds_mla", kv_quant_mode=KVQuantMode.NVFP4_DS_MLA, state_content_bytes=352),
        "nvfp4_ds_mla",
        id="nvfp4_ds_mla",
    ),
    # The dtype string alone is enough to refuse.
    pytest.param(dict(dtype=U8, cache_dtype_str="fp8_ds_mla"), "fp8_ds_mla", id="ds_mla-string-only"),
    # DeepSeek V4 compresses four tokens into one stored state.
    pytest.param(dict(tokens_per_state=4), "tokens_per_state", id="tokens-per-state"),
]


@pytest.mark.parametrize(("packing", "word"), PACKED_MLA)
def test_mla_refuses_packed_pages(packing, word):
    with pytest.raises(UnsupportedSpecError) as info:
        MLAStrategy().page_parts(mla_spec(**packing), DEEPSEEK)
    assert "MLAAttentionSpec" in str(info.value) and word in str(info.value)


def test_unsupported_spec_error_is_a_type_error():
    # Callers that catch TypeError for "wrong kind of spec" keep working.
    assert issubclass(UnsupportedSpecError, TypeError)
    assert issubclass(KVCacheLayoutError, ValueError)


# ---------------------------------------------------------------------------
# The strategy's page equals the spec's own unpadded page, for any dims
# ---------------------------------------------------------------------------

DTYPES = st.sampled_from([BF16, FP16, FP32, FP8, U8])


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["full", "sliding", "chunked"]),
    block_size=st.sampled_from([1, 16, 32, 64, 128]),
    heads=st.integers(1, 16),
    head_size=st.integers(1, 512),
    head_size_v=st.one_of(st.none(), st.integers(1, 512)),
    dtype=DTYPES,
)
def test_attention_page_matches_vllm(kind, block_size, heads, head_size, head_size_v, dtype):
    common = dict(
        block_size=block_size, num_kv_heads=heads, head_size=head_size, head_size_v=head_size_v, dtype=dtype
    )
    spec = {
        "full": lambda: FullAttentionSpec(**common),
        "sliding": lambda: SlidingWindowSpec(**common, sliding_window=64),
        "chunked": lambda: ChunkedLocalAttentionSpec(**common, attention_chunk_size=64),
    }[kind]()
    assert FullAttentionStrategy().page_size_bytes(spec, NO_DIMS) == spec.unpadded_page_size_bytes


@settings(max_examples=100, deadline=None, database=None)
@given(
    block_size=st.sampled_from([16, 64, 128]),
    nope=st.integers(1, 1024),
    rope=st.integers(1, 128),
    dtype=DTYPES,
)
def test_mla_page_matches_vllm(block_size, nope, rope, dtype):
    spec = MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=nope + rope, dtype=dtype)
    dims = ModelDims(kv_lora_rank=nope, qk_rope_head_dim=rope)
    assert MLAStrategy().page_size_bytes(spec, dims) == spec.unpadded_page_size_bytes


@settings(max_examples=100, deadline=None, database=None)
@given(
    states=st.lists(
        st.tuples(st.lists(st.integers(1, 64), min_size=1, max_size=3).map(tuple), DTYPES),
        min_size=1,
        max_size=4,
    )
)
def test_mamba_page_matches_vllm(states):
    spec = MambaSpec(block_size=16, shapes=tuple(s for s, _ in states), dtypes=tuple(d for _, d in states))
    assert MambaStrategy().page_size_bytes(spec, NO_DIMS) == spec.real_page_size_bytes


def test_sliding_window_mla_resolves_to_mla_with_nope_and_rope():
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    from vllm_kv_strategies.core.registry import default_registry

    spec = SlidingWindowMLASpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, sliding_window=128)
    strategy = default_registry().resolve(spec)
    assert strategy.name == "mla"
    parts = strategy.page_parts(spec, ModelDims(kv_lora_rank=512, qk_rope_head_dim=64))
    assert [(p.name, p.shape, p.nbytes) for p in parts] == [("nope", (16, 1, 512), 16384), ("rope", (16, 1, 64), 2048)]
