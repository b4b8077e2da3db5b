"""vllm-ascend 0.30 (cell ascend-0.30.0 only): C8 MXFP attention (``--kv-cache-dtype mxfp8``,
the ``c8_mxfp`` kind) byte for byte as stock 0.30: one buffer per layer, a packet per kernel
block ``[k | k_scale | v | v_scale]`` bound as ``(k, v, k_scale, v_scale)``, kernel blocks as
stock's ``initialize_kv_cache`` passes them; and the contract of the block zeroer and of
``_fill_c8_mxfp_v_scale_caches`` (4 views, ``kv[0]`` strided by the packet, V scales of
``num_blocks x r`` packets)."""

from __future__ import annotations


import pytest
import torch
import kv_compare as kc
import runner_factory as rf

from vllm_kv_strategies.core.strategies import C8MXFPStrategy, ModelDims, QuantAttentionStrategy

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's C8 MXFP KV cache only")

N = 4


def mxfp_model(block_size: int, head_size: int = 128, heads: int = 2):
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm_ascend.attention.attention_c8_mxfp import mxfp_cache_spec

    spec = mxfp_cache_spec(FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=head_size, dtype=torch.bfloat16))
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(2)}
    return spec, rf.build_kv_cache_config(specs, N)


def build(config, plugin, transfer):
    runner = rf.make_runner(config, kv_transfer=transfer)
    runner.vllm_config.cache_config.cache_dtype = "mxfp8"  # what --kv-cache-dtype mxfp8 sets
    return (kc.plugin_init if plugin else kc.stock_init)(runner, config)


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("block_size", [128, 256], ids=["block 128", "block 256 (2 kernel blocks)"])
def test_c8_mxfp_equals_stock(block_size, transfer):
    spec, config = mxfp_model(block_size)
    stock, ours = build(config, False, transfer), build(config, True, transfer)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    r = block_size // 128  # kernel blocks per block (the backend's 128)
    pitch = spec.page_size_bytes // r
    k, v, k_scale, v_scale = ours["model.layers.0.self_attn.attn"]
    assert [(tuple(t.shape), t.dtype) for t in (k, v, k_scale, v_scale)] == [
        ((N * r, 2, 4, 128, 32), torch.float8_e4m3fn),
        ((N * r, 2, 4, 128, 32), torch.float8_e4m3fn),
        ((N * r, 2, 8, 2, 16, 2), torch.uint8),
        ((N * r, 2, 8, 2, 16, 2), torch.uint8),
    ]
    # the zeroer's contract: packet i of kv[0] at data_ptr + i * pitch; sections K | K scale | V | V scale
    assert all(t.stride(0) == pitch for t in (k, v, k_scale, v_scale))
    assert [t.data_ptr() - k.data_ptr() for t in (k, k_scale, v, v_scale)] == [0, 32768, 32768 + 1024, 65536 + 1024]
    assert pitch == 65536 + 2048 and len({t.untyped_storage().data_ptr() for t in (k, v, k_scale, v_scale)}) == 1


def test_c8_mxfp_packet_bytes_are_the_page():
    spec, _ = mxfp_model(256)
    assert sum(p.nbytes for p in C8MXFPStrategy().page_parts(spec, ModelDims())) == spec.page_size_bytes


def test_per_token_head_fp8_cells_of_the_same_bytes_are_not_c8_mxfp():
    """vLLM's FP8 per-token-head cell of head 128 has the same state_content_bytes (264) as C8
    MXFP's: the kv_quant_mode tells them apart."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVQuantMode

    spec = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=128, dtype=torch.float8_e4m3fn,
                             kv_quant_mode=KVQuantMode.FP8_PER_TOKEN_HEAD, state_content_bytes=2 * 128 + 2 * 4)
    mxfp, _ = mxfp_model(128)
    assert spec.state_content_bytes == mxfp.state_content_bytes == 264
    assert not C8MXFPStrategy().matches(spec) and QuantAttentionStrategy().matches(spec)
    assert C8MXFPStrategy().matches(mxfp)
