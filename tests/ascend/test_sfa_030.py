"""vllm-ascend 0.30 (cell ascend-0.30.0 only): DeepSeek V3.2's sparse attention, MLA layers and
SFA indexer layers (``AscendSFAIndexerCacheSpec``, the ``sfa_indexer`` kind), byte for byte as
stock 0.30 (configs from vllm-ascend's planner, runner_factory.deepseek_v32): the plain bf16
indexer key ``(k,)``, LI C8 (int8 keys + an fp16 scale per token) and LI C4 (uint8 keys of half
the head + e8m0 scales viewed ``(..., scale_dim / 2, 2)``), the key and its scale in one raw
buffer, the scale aligned to its dtype (``_allocate_sparse_c8_indexer_tensors``)."""

from __future__ import annotations


import pytest
import torch
import kv_compare as kc
import runner_factory as rf

from vllm_kv_strategies.errors import UnsupportedSpecError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's AscendSFAIndexerCacheSpec only")

N = 4
INDEXER = "model.layers.0.self_attn.indexer.k_cache"
#: variant -> (deepseek_v32 arguments, the indexer's views: (shape, dtype, byte offset in its buffer))
VARIANTS = {
    "bf16": ({}, [((N, 128, 1, 128), torch.bfloat16, 0)]),
    "LI C8": ({"li_c8": True}, [((N, 128, 1, 128), torch.int8, 0), ((N, 128, 1, 1), torch.float16, N * 128 * 128)]),
    "LI C4": ({"li_c4": True}, [((N, 128, 1, 64), torch.uint8, 0),
                                ((N, 128, 1, 2, 2), torch.float8_e8m0fnu, N * 128 * 64)]),
}


def build(mk, plugin, transfer):
    runner = mk.make_runner(kv_transfer=transfer)
    return (kc.plugin_init if plugin else kc.stock_init)(runner, mk.kv_cache_config)


storages = kc.storages


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_sparse_attention_equals_stock(variant, transfer):
    kwargs, views = VARIANTS[variant]
    mk = rf.deepseek_v32(num_blocks=N, num_layers=3, **kwargs)
    stock, ours = build(mk, False, transfer), build(mk, True, transfer)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert sorted(storages(ours).values()) == sorted(storages(stock).values())
    indexer = ours[INDEXER]
    base = indexer[0].storage_offset() * indexer[0].element_size()
    assert [(tuple(t.shape), t.dtype, t.storage_offset() * t.element_size() - base) for t in indexer] == views
    assert len({t.untyped_storage().data_ptr() for t in indexer}) == 1  # key and scale: one raw buffer
    nope, rope = ours["model.layers.0.self_attn.attn"]
    assert (tuple(nope.shape), tuple(rope.shape)) == ((N, 128, 1, 512), (N, 128, 1, 64))
    assert nope.untyped_storage().data_ptr() != indexer[0].untyped_storage().data_ptr()


def test_sfa_indexer_parts_add_up_to_the_spec_page():
    from vllm_kv_strategies.strategies import ModelDims, SFAIndexerStrategy

    for kwargs, _ in VARIANTS.values():
        mk = rf.deepseek_v32(num_blocks=N, num_layers=1, **kwargs)
        spec = mk.specs[INDEXER]
        parts = SFAIndexerStrategy().page_parts(spec, ModelDims())
        assert sum(p.nbytes for p in parts) == spec.page_size_bytes
        assert {p.group for p in parts} == {"indexer"} and not any(p.kernel_blocks for p in parts)


def test_packed_sfa_main_cache_is_refused_by_name():
    """SFA C8 / TurboQuant pack the latent into (k,): refused by name, stock builds it."""
    mk = rf.deepseek_v32(num_blocks=N, num_layers=1)
    main = "model.layers.0.self_attn.attn"
    spec = mk.specs[main]
    import dataclasses

    packed = dataclasses.replace(spec, cache_sparse_sfa_c8=True)
    for group in mk.kv_cache_config.kv_cache_groups:
        if main in group.layer_names:
            group.kv_cache_spec.kv_cache_specs[main] = packed
    with pytest.raises(UnsupportedSpecError, match=r"packed SFA C8 / TurboQuant main caches"):
        build(mk, True, False)
