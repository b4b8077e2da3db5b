"""runner_factory on the installed release: the runner carries exactly what that release's stock
KV cache initialisation reads (traced), and the configs have the release's own spec forms and
sizing (exact numbers, N = 4 blocks)."""

from __future__ import annotations

import copy

import pytest
import torch
import runner_factory as rf
from vllm.v1.kv_cache_interface import FullAttentionSpec

from vllm_kv_strategies import patching

R = rf.RELEASE
TRACED_MODELS = {
    "qwen3-8b": lambda: rf.qwen3_8b(tp=1),
    "deepseek-v3": lambda: rf.deepseek_v3(),
    "deepseek-v3.2": lambda: rf.deepseek_v32(),
    "qwen3-next-tp4": lambda: rf.qwen3_next(tp=4),
    "t-hyb": lambda: rf.t_hyb_toy(),
}


def test_traced_attribute_reads_match_factory():
    """The union over models (with and without kv_transfer_config) of the instance attributes
    the stock initialisation reads is RUNNER_ATTRS (plus the hybrid flag the 0.18+ allocator
    writes, then reads)."""
    reads: set[str] = set()
    for build in TRACED_MODELS.values():
        mk = build()
        for transfer in (False, True):
            stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(mk.make_runner()))
            runner = mk.make_runner(trace=True, kv_transfer=transfer)
            stock(runner, copy.deepcopy(mk.kv_cache_config))
            reads |= runner._reads
    written = {"hybrid_with_attn_and_mamba"} if R >= (0, 18) else set()
    assert reads == set(rf.RUNNER_ATTRS) | written


def test_0_11_runner_has_no_shared_kv_cache_layers():
    runner = rf.qwen3_8b().make_runner()
    assert hasattr(runner, "shared_kv_cache_layers") == (R > (0, 11))


def test_deepseek_v32_spec_form():
    spec = rf.deepseek_v32().specs["model.layers.0.self_attn.attn"]
    if rf.LEGACY_SPARSE:  # 0.11 / 0.13: a K+V page of twice the MLA latent
        assert R < (0, 18)
        assert type(spec) is FullAttentionSpec and (spec.num_kv_heads, spec.head_size) == (1, 576)
        assert spec.page_size_bytes == 2 * 128 * 576 * 2 == 294_912
    elif R >= (0, 30):  # the latent alone; the indexer key is a layer of its own
        assert type(spec) is rf.AscendMLAAttentionSpec and (spec.num_kv_heads, spec.head_size) == (1, 576)
        assert spec.page_size_bytes == 128 * 576 * 2 == 147_456
        indexer = rf.deepseek_v32().specs["model.layers.0.self_attn.indexer.k_cache"]
        assert type(indexer).__name__ == "AscendSFAIndexerCacheSpec"
        assert (indexer.num_kv_heads, indexer.head_size, indexer.dtype) == (1, 128, torch.bfloat16)
        assert indexer.page_size_bytes == 128 * 128 * 2 == 32_768
    else:
        assert R >= (0, 18)
        assert tuple(spec.sparse_head_dim) == (512, 64, 128) and spec.head_size == 704
        assert spec.page_size_bytes == 128 * 704 * 2 == 180_224


@pytest.mark.parametrize("tp", [1, 4])
def test_qwen3_next_sizing(tp):
    mk = rf.qwen3_next(tp=tp)
    attn, mamba = mk.specs["model.layers.3.self_attn.attn"], mk.specs["model.layers.0.linear_attn"]
    conv, ssm = 3 * 8192 // tp * 2, 32 // tp * 128 * 128 * 2  # bytes per block
    k_per_token = 256 * max(1, 2 // tp) * 2
    if (0, 18) <= R < (0, 30):  # K page == ssm page; padded page = 2 K pages + conv, on both specs
        assert attn.block_size * k_per_token == ssm
        assert mamba.page_size_bytes == attn.page_size_bytes == 2 * ssm + conv
        expected = {1: (1024, 2_146_304), 4: (512, 536_576)}[tp]
    else:  # block a multiple of 128 with K+V page >= Mamba page; Mamba padded to it (0.30: vLLM's
        # _align_hybrid_block_size: the smallest such multiple)
        assert attn.block_size % 128 == 0 and 2 * attn.block_size * k_per_token >= conv + ssm
        assert mamba.page_size_bytes == attn.page_size_bytes == 2 * attn.block_size * k_per_token
        expected = {1: (640, 1_310_720), 4: (384, 393_216)}[tp]
    assert (attn.block_size, mamba.page_size_bytes) == expected
    assert mk.notes["mamba_shapes"] == ((3, 8192 // tp), (32 // tp, 128, 128))
    assert mk.notes["mamba_dtypes"] == (torch.bfloat16, torch.bfloat16)
    assert [len(g.layer_names) for g in mk.kv_cache_config.kv_cache_groups] == [12, 12, 12, 12]
    tensors = mk.kv_cache_config.kv_cache_tensors
    if R >= (0, 30):  # strided: 4 tensors (groups) of 12 layers over one backing of 12 slots of 4 pages
        assert [(t.size, t.offset, t.layer_stride, t.block_stride) for t in tensors] == [
            (12 * 4 * expected[1], 0, 4 * expected[1], expected[1])
        ] * 4
        assert tensors[0].layers == [f"model.layers.{i}.self_attn.attn" for i in range(3, 48, 4)]
        assert tensors[1].layers == [f"model.layers.{i}.linear_attn" for i in range(0, 48, 4)]
        return
    assert all(t.size == 4 * expected[1] for t in tensors)
    assert tensors[0].shared_by == [
        "model.layers.3.self_attn.attn",
        "model.layers.0.linear_attn",
        "model.layers.1.linear_attn",
        "model.layers.2.linear_attn",
    ]
