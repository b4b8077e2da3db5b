"""vllm-ascend 0.30 (cell ascend-0.30.0 only): DeepSeek V3.2's sparse attention, MLA layers and
SFA indexer layers (``AscendSFAIndexerCacheSpec``, the ``sfa_indexer`` kind), byte for byte as
stock 0.30 (configs from vllm-ascend's planner, runner_factory.deepseek_v32): the plain bf16
indexer key ``(k,)``, LI C8 (int8 keys + an fp16 scale per token) and LI C4 (uint8 keys of half
the head + e8m0 scales viewed ``(..., scale_dim / 2, 2)``), the key and its scale in one raw
buffer, the scale aligned to its dtype (``_allocate_sparse_c8_indexer_tensors``); the packed main
caches ``(k,)`` (SFA C8 in int8 / fp8 and TurboQuant, the ``sfa_packed`` kind); and decode context
parallelism: the DCP-replicated indexers (``sfa_dcp_replicated_indexer_size`` = the DCP size
sub-blocks per block), dense attention as separate K and V (stock's interleaved form is off under
DCP), the multi-group budget left scaled (no overlay under DCP) and hybrids as without DCP."""

from __future__ import annotations


import pytest
import torch
import kv_compare as kc
import runner_factory as rf

import json
import logging

from test_overlay_030 import gpt_oss_like, patched_runner, stock_scale, worker_of  # noqa: F401 (a fixture)

from vllm_kv_strategies.platforms.ascend.worker_budget import OVERLAY_BUDGET, MultiGroupBudgetAdapter
from vllm_kv_strategies.report import schema
from vllm_kv_strategies.core.strategies import Field, ModelDims, SFAPackedStrategy

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


def equals_stock_with_indexer(mk, transfer, views):
    """The plugin's build of ``mk``, checked equal to stock's (layout, storages), its indexer's
    views ``views`` (shape, dtype, byte offset) in one raw buffer (key and scale co-allocated)."""
    stock, ours = build(mk, False, transfer), build(mk, True, transfer)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert sorted(storages(ours).values()) == sorted(storages(stock).values())
    indexer = ours[INDEXER]
    base = indexer[0].storage_offset() * indexer[0].element_size()
    assert [(tuple(t.shape), t.dtype, t.storage_offset() * t.element_size() - base) for t in indexer] == views
    assert len({t.untyped_storage().data_ptr() for t in indexer}) == 1
    return ours


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_sparse_attention_equals_stock(variant, transfer):
    kwargs, views = VARIANTS[variant]
    mk = rf.deepseek_v32(num_blocks=N, num_layers=3, **kwargs)
    ours = equals_stock_with_indexer(mk, transfer, views)
    indexer = ours[INDEXER]
    nope, rope = ours["model.layers.0.self_attn.attn"]
    assert (tuple(nope.shape), tuple(rope.shape)) == ((N, 128, 1, 512), (N, 128, 1, 64))
    assert nope.untyped_storage().data_ptr() != indexer[0].untyped_storage().data_ptr()


def test_sfa_indexer_parts_add_up_to_the_spec_page():
    from vllm_kv_strategies.core.strategies import SFAIndexerStrategy

    for kwargs, _ in VARIANTS.values():
        mk = rf.deepseek_v32(num_blocks=N, num_layers=1, **kwargs)
        spec = mk.specs[INDEXER]
        parts = SFAIndexerStrategy().page_parts(spec, ModelDims())
        assert sum(p.nbytes for p in parts) == spec.page_size_bytes
        assert {p.group for p in parts} == {"indexer"} and not any(p.kernel_blocks for p in parts)


MAIN = "model.layers.0.self_attn.attn"
#: packed variant -> (deepseek_v32 arguments, the (k,) view's dtype, its row in bytes: 512 C8 + 64 bf16 + 4 fp32
#: scales (get_sfa_qsfa_packed_head_dim); 256 int4 nibble pairs + 64 bf16 + one fp16 (get_tq_fused_slot_bytes))
PACKED = {
    "SFA C8 int8": ({"sfa_c8": True}, torch.int8, 656),
    "SFA C8 fp8": ({"sfa_c8": "fp8"}, torch.float8_e4m3fn, 656),
    "TurboQuant": ({"turboquant": True}, torch.int8, 386),
    "SFA C8 + LI C8": ({"sfa_c8": True, "li_c8": True}, torch.int8, 656),
}
MiB2 = 2 * 1024 * 1024


@pytest.mark.parametrize("block_size", [128, 256], ids=["block 128", "block 256"])
@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("variant", PACKED)
def test_packed_main_cache_equals_stock(variant, transfer, block_size):
    kwargs, dtype, row = PACKED[variant]
    mk = rf.deepseek_v32(num_blocks=N, num_layers=3, block_size=block_size, **kwargs)
    stock, ours = build(mk, False, transfer), build(mk, True, transfer)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert sorted(storages(ours).values()) == sorted(storages(stock).values())
    assert mk.specs[MAIN].page_size_bytes == block_size * row
    for layer in range(3):
        (k,) = ours[f"model.layers.{layer}.self_attn.attn"]  # one packed view, no rope part
        kernel = 128  # AscendSFABackend's kernel block: a 256-token block is 2 kernel blocks
        assert (tuple(k.shape), k.dtype, k.stride()) == ((N * block_size // kernel, kernel, 1, row), dtype, (kernel * row, row, row, 1))
        # a raw buffer of its own: num_blocks pages (+ 2 MiB to align its start with a transfer config)
        assert k.untyped_storage().nbytes() == N * block_size * row + (MiB2 if transfer else 0)
        assert k.data_ptr() % MiB2 == 0 if transfer else k.storage_offset() == 0


def test_packed_rows_name_their_fields_and_add_up_to_the_page():
    dims = ModelDims(kv_lora_rank=512, qk_rope_head_dim=64)
    for kwargs, dtype, row in PACKED.values():
        spec = rf.deepseek_v32(num_blocks=N, num_layers=1, **kwargs).specs[MAIN]
        (part,) = SFAPackedStrategy().page_parts(spec, dims)
        assert (part.name, part.dtype, part.shape, part.nbytes) == ("packed_kv", dtype, (128, 1, row), spec.page_size_bytes)
        rope = Field("rope", torch.bfloat16, 64)
        if "turboquant" in kwargs:  # int4 nibble pairs, rope, one fp16 scale
            assert part.fields == (Field("nope", torch.int8, 256), rope, Field("scale", torch.float16, 1))
        else:  # C8 nope, rope, one fp32 scale per 128 nope values
            assert part.fields == (Field("nope", dtype, 512), rope, Field("nope_scale", torch.float32, 4))
    plain = rf.deepseek_v32(num_blocks=N, num_layers=1).specs[MAIN]
    assert not SFAPackedStrategy().matches(plain)  # the bf16 latent stays the mla kind (nope, rope)


def report_of(mk, monkeypatch, tmp_path, **runner_kw):
    """The plugin's build of ``mk`` and its JSON report (schema-checked)."""
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    ours = kc.plugin_init(mk.make_runner(**runner_kw), mk.kv_cache_config)
    data = json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text())
    schema.validate(data)
    return ours, data


@pytest.mark.parametrize("variant", ["SFA C8 int8", "TurboQuant"])
def test_packed_main_caches_are_built_by_the_plugin(variant, monkeypatch, tmp_path):
    """Refused by name before (``packed SFA C8 / TurboQuant main caches``); now the plugin builds them."""
    mk = rf.deepseek_v32(num_blocks=N, num_layers=3, **PACKED[variant][0])
    _, data = report_of(mk, monkeypatch, tmp_path)
    assert (data["built_by"], data["fallback_reason"]) == ("plugin", None)
    assert data["totals"]["layers_per_strategy"] == {"sfa_packed": 3, "sfa_indexer": 3}


#: DCP size -> indexer variant -> the indexer's views (shape, dtype, byte offset in its buffer): r sub-blocks per block
def dcp_views(r):
    return {
        "bf16": ({}, [((N * r, 128, 1, 128), torch.bfloat16, 0)]),
        "LI C8": ({"li_c8": True}, [((N * r, 128, 1, 128), torch.int8, 0), ((N * r, 128, 1, 1), torch.float16, N * r * 128 * 128)]),
        "LI C4": ({"li_c4": True}, [((N * r, 128, 1, 64), torch.uint8, 0),
                                    ((N * r, 128, 1, 2, 2), torch.float8_e8m0fnu, N * r * 128 * 64)]),
        "SFA C8": ({"sfa_c8": True}, [((N * r, 128, 1, 128), torch.bfloat16, 0)]),
    }


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("variant", dcp_views(1))
@pytest.mark.parametrize("dcp", [2, 4])
def test_dcp_replicated_indexers_equal_stock(dcp, variant, transfer):
    kwargs, views = dcp_views(dcp)[variant]
    mk = rf.deepseek_v32(num_blocks=N, num_layers=3, rep=dcp, **kwargs)
    assert mk.specs[INDEXER].sfa_dcp_replicated_indexer_size == dcp
    ours = equals_stock_with_indexer(mk, transfer, views)
    indexer = ours[INDEXER]
    assert indexer[0].untyped_storage().nbytes() == N * mk.specs[INDEXER].page_size_bytes + (MiB2 if transfer else 0)
    main = ours[MAIN]  # the main cache is not replicated: num_blocks rows
    assert [tuple(t.shape)[0] for t in main] == [N] * len(main)


def test_dcp_replicated_indexers_are_built_by_the_plugin(monkeypatch, tmp_path):
    """Refused by name before (``decode context parallelism``); now the plugin builds them."""
    mk = rf.deepseek_v32(num_blocks=N, num_layers=3, rep=2, li_c8=True)
    _, data = report_of(mk, monkeypatch, tmp_path)
    assert (data["built_by"], data["fallback_reason"]) == ("plugin", None)
    assert data["totals"]["layers_per_strategy"] == {"mla": 3, "sfa_indexer": 3}


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
def test_dense_attention_under_dcp_is_separate_k_and_v_as_stock(transfer):
    """Stock 0.30 interleaves K|V of plain full attention only without DCP: with it, each layer gets
    separate contiguous K and V buffers (``_allocate_kv_cache_tensors``' gate)."""
    mk = rf.qwen3_8b(tp=4)
    stock = kc.stock_init(mk.make_runner(dcp_size=2, kv_transfer=transfer), mk.kv_cache_config)
    ours = kc.plugin_init(mk.make_runner(dcp_size=2, kv_transfer=transfer), mk.kv_cache_config)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    k, v = ours[MAIN]
    assert k.is_contiguous() and v.is_contiguous() and k.untyped_storage().data_ptr() != v.untyped_storage().data_ptr()
    assert len(storages(ours)) == 2 * 36
    interleaved = kc.plugin_init(mk.make_runner(kv_transfer=transfer), mk.kv_cache_config)  # control: without DCP
    assert not interleaved[MAIN][0].is_contiguous() and len(storages(interleaved)) == 36


def test_hybrid_under_dcp_equals_stock():
    """Stock's hybrid backing does not depend on DCP; the plugin's neither."""
    mk = rf.qwen3_next(tp=4)
    stock = kc.stock_init(mk.make_runner(dcp_size=2), mk.kv_cache_config)
    ours = kc.plugin_init(mk.make_runner(dcp_size=2), mk.kv_cache_config)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert list(storages(ours).values()) == [mk.kv_cache_config.kv_cache_tensors[0].size]


def test_multi_group_budget_stays_scaled_under_dcp(patched_runner, caplog):  # noqa: F811 (the fixture)
    """No overlay under DCP (stock gives the attention layers separate K and V there): stock's
    scale stays and the build is stock's private per-layer form."""
    mk = gpt_oss_like()
    runner = mk.make_runner(model_type="gpt_oss", dcp_size=2)
    with caplog.at_level(logging.WARNING):
        assert MultiGroupBudgetAdapter().scale(stock_scale(), worker_of(mk, runner), 1 << 30) == 1 << 29
    assert OVERLAY_BUDGET not in vars(runner)
    assert "decode context parallelism (stock 0.30 gives its attention layers separate K and V" in caplog.text
    ours = kc.plugin_init(runner, mk.kv_cache_config)
    stock = kc.stock_init(mk.make_runner(model_type="gpt_oss", dcp_size=2), mk.kv_cache_config)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert sum(storages(ours).values()) == mk.kv_cache_config.num_blocks * sum(s.page_size_bytes for s in mk.specs.values())


def test_packed_forms_the_kind_does_not_lay_out_are_refused_by_name():
    import dataclasses

    from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError

    dims = ModelDims(kv_lora_rank=512, qk_rope_head_dim=64)
    spec = rf.deepseek_v32(num_blocks=N, num_layers=1, sfa_c8=True).specs[MAIN]
    both = dataclasses.replace(spec, cache_sparse_sfa_turboquant=True)
    with pytest.raises(UnsupportedSpecError, match=r"cache_sparse_sfa_c8.*cache_sparse_sfa_turboquant"):
        SFAPackedStrategy().page_parts(both, dims)
    with pytest.raises(UnsupportedSpecError, match=r"'scale_dim': 1"):
        SFAPackedStrategy().page_parts(dataclasses.replace(spec, scale_dim=1), dims)
    with pytest.raises(KVCacheLayoutError, match=r"packed row of 656 x torch.int8 is not kv_lora_rank 448"):
        SFAPackedStrategy().page_parts(spec, ModelDims(kv_lora_rank=448, qk_rope_head_dim=64))
    tq = rf.deepseek_v32(num_blocks=N, num_layers=1, turboquant=True).specs[MAIN]
    with pytest.raises(KVCacheLayoutError, match=r"TurboQuant SFA spec .* 386 x torch.int8 is not kv_lora_rank 512 / 2"):
        SFAPackedStrategy().page_parts(tq, ModelDims(kv_lora_rank=512, qk_rope_head_dim=32))
