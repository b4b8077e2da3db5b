"""Quantised KV caches on vllm-ascend, against the installed release's stock initialisation.

Each case builds a real ``KVCacheConfig`` (vLLM's planner, the release's spec classes as its
``NPUModelRunner.get_kv_cache_spec`` emits them) and runs stock and the plugin on two real
runners, with and without ``kv_transfer_config``: per layer the same views (shape, dtype,
stride; without transfer also the byte offset in the raw buffer), the same parts sharing one
raw buffer (0.23 allocates the LI C8 indexer key and its scale as one; 0.18 apart), the same
raw buffer count and the same bytes, which the test states by hand (N = 4 blocks, block 128):

* LI C8 (0.18 ``cache_sparse_c8``, 0.23 ``cache_sparse_li_c8``), DeepSeek V3.2, 61 layers:
  page 128 x (512 x 2 + 64 x 2 + 128 x 1 + 1 x 2) = 164,096; 61 x 4 x 164,096 = 40,039,424;
* SFA C8 (0.23): 128 x (656 x 1 + 128 x 2) = 116,736 -> 28,483,584; with LI C8:
  128 x (656 + 128 + 2) = 100,608 -> 24,548,352;
* DCP-replicated indexer (0.23), r = 8: bf16 128 x (576 + 8 x 128) x 2 = 409,600 ->
  99,942,400; LI C8 128 x (1,152 + 8 x 130) = 280,576 -> 68,460,544; SFA + LI
  128 x (656 + 8 x 130) = 217,088 -> 52,969,472;
* FA-quant MLA (0.18+, decode instance): 128 x (512 x 1 + 64 x 2) = 81,920 -> 19,988,480;
* dense C8 (0.18+, Qwen3-8B W8A8C8): 128 x 8 x 128 x 2 x 1 = 262,144 -> 36 x 4 x 262,144 =
  37,748,736 (TP1), 9,437,184 (TP4); on 0.11 (``additional_config`` ``kv_cache_dtype=int8``)
  the same bytes in the BSH layout, K and V (N, 128, heads x 128).

With transfer each raw buffer costs 2 MiB more and starts on a 2 MiB boundary. Stock's crashes
stay refused: FA quant on a ``kv_both`` instance or for non-MLA attention, 0.11's int8 MLA. The A5 variants
(fp8 C8 keys, fp32 scales, fp8 FA-quant nope on any role) run with the device type patched
where vllm-ascend 0.23 reads it.

On vllm-ascend 0.30 only dense C8 is built (one private buffer per layer, K|V interleaved per
kernel block, as stock); the sparse (SFA / LI C8 / indexer) and FA-quant cases are skipped
there with the reasons below.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import runner_factory as rf
import factory_030
from test_compare_stock import ours_init, stock_init

from vllm_kv_strategies.platforms.ascend.runner import TRANSFER_ALIGNMENT, AscendAdapter
from vllm_kv_strategies.errors import UnsupportedSpecError

R = rf.RELEASE
N = 4
BF16, FP16, FP32, I8, FP8 = torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.float8_e4m3fn
NO_C8 = (
    "vllm-ascend 0.11 / 0.13 build no sparse C8, FA-quant or W8A8C8 int8 spec (0.18+); 0.11's int8 K/V are the BSH "
    "layout (test_0_11_bsh_int8_equals_stock)"
)
#: Skip reasons on vllm-ascend 0.30 (one per reason).
SPARSE_030 = (
    "vllm-ascend 0.30 has no sparse_head_dim MLA spec (runner_factory.deepseek_v32 builds 0.18-0.23's): "
    "its SFA indexer is AscendSFAIndexerCacheSpec on a layer of its own, which the sfa_indexer kind builds "
    "as stock (plain, LI C8, LI C4: tests/ascend/test_sfa_030.py)"
)
FA_QUANT_030 = (
    "runner_factory.fa_quant_config imports quantization.modelslim_config, which vllm-ascend 0.30 moved to "
    "quantization.configs.modelslim_config, and 0.30's enable_fa_quant also needs cache_config.cache_dtype "
    "int8/fp8: 0.30's FA-quant cases are test_fa_quant_030_* (factory_030.fa_quant_runner_030)"
)
NO_KV_CACHE_DTYPE_030 = (
    "vllm-ascend 0.30's AscendConfig rejects additional_config kv_cache_dtype (pydantic: unexpected "
    "keyword argument), so no 0.30 deployment carries it"
)
A5_030 = (
    "vllm-ascend 0.30 has no get_ascend_device_type in core.kv_cache_interface (the a5 fixture's patch); "
    "the A5 variants are LI C8 and SFA C8 (built on 0.30, the latter in fp8 too: test_sfa_030) and FA quant (see FA_QUANT_030)"
)
ONLY_023 = "SFA C8, DCP-replicated and shared indexers, per-layer LI C8 and the A5 dtypes are vllm-ascend 0.23 features"


@dataclass(frozen=True)
class Case:
    build: Callable[[], Any]
    since: tuple[int, int]
    skip_reason: str
    nbytes: int  # plugin == stock, without transfer
    buffers: dict[tuple[int, int], int]  # release -> raw buffers (plugin == stock)
    kinds: dict[str, int]
    runner: dict[str, Any] | None = None
    skip_030: str | None = None  # why the case is skipped on vllm-ascend 0.30


CONSUMER = {"kv_transfer": True, "kv_role": "kv_consumer"}
CASES = {
    "dense-c8-tp1": Case(lambda: rf.qwen3_8b(tp=1, dtype=I8), (0, 18), NO_C8, 37_748_736, {(0, 18): 72, (0, 23): 72, (0, 30): 36}, {"full_attention": 36}),
    "dense-c8-tp4": Case(lambda: rf.qwen3_8b(tp=4, dtype=I8), (0, 18), NO_C8, 9_437_184, {(0, 18): 72, (0, 23): 72, (0, 30): 36}, {"full_attention": 36}),
    # 0.18: nope, rope, key, scale apart (4 x 61); 0.23: key + scale in one (3 x 61)
    "li-c8": Case(lambda: rf.deepseek_v32(li_c8=True), (0, 18), NO_C8, 40_039_424, {(0, 18): 244, (0, 23): 183}, {"sparse_mla_li_c8": 61}, skip_030=SPARSE_030),
    "fa-quant": Case(lambda: rf.deepseek_v3(fa_quant=True), (0, 18), NO_C8, 19_988_480, {(0, 18): 122, (0, 23): 122}, {"mla": 0, "fa_quant_mla": 61}, CONSUMER, FA_QUANT_030),
    "sfa-c8": Case(lambda: rf.deepseek_v32(sfa_c8=True), (0, 23), ONLY_023, 28_483_584, {(0, 23): 122}, {"sparse_mla_sfa_c8": 61}, skip_030=SPARSE_030),
    "sfa-li-c8": Case(lambda: rf.deepseek_v32(sfa_c8=True, li_c8=True), (0, 23), ONLY_023, 24_548_352, {(0, 23): 122}, {"sparse_mla_sfa_c8": 61}, skip_030=SPARSE_030),
    "dcp-rep8": Case(lambda: rf.deepseek_v32(rep=8), (0, 23), ONLY_023, 99_942_400, {(0, 23): 183}, {"sparse_mla": 61}, skip_030=SPARSE_030),
    "li-c8-dcp-rep8": Case(lambda: rf.deepseek_v32(li_c8=True, rep=8), (0, 23), ONLY_023, 68_460_544, {(0, 23): 183}, {"sparse_mla_li_c8": 61}, skip_030=SPARSE_030),
    "sfa-li-c8-dcp-rep8": Case(
        lambda: rf.deepseek_v32(sfa_c8=True, li_c8=True, rep=8), (0, 23), ONLY_023, 52_969_472, {(0, 23): 122}, {"sparse_mla_sfa_c8": 61}, skip_030=SPARSE_030,
    ),
    # LI C8 on the 31 even layers (4 x 164,096 each), bf16 indexers on the 30 others (4 x 180,224)
    "li-c8-per-layer": Case(
        lambda: rf.deepseek_v32(li_c8=True, li_c8_layers=range(0, 61, 2)), (0, 23), ONLY_023, 41_974_784, {(0, 23): 183},
        {"sparse_mla_li_c8": 31, "sparse_mla": 30}, skip_030=SPARSE_030,
    ),
    # 16 layers with an indexer (4 x 180,224, 3 buffers), 45 sharing one (4 x 147,456, 2 buffers)
    "shared-indexers": Case(
        lambda: rf.deepseek_v32(indexer_layers=range(0, 61, 4)), (0, 23), ONLY_023, 38_076_416, {(0, 23): 138}, {"sparse_mla": 61}, skip_030=SPARSE_030,
    ),
    # SFA + LI: 16 x 4 x 100,608 (packed, key + scale) + 45 x 4 x 83,968 (packed only)
    "sfa-li-c8-shared-indexers": Case(
        lambda: rf.deepseek_v32(sfa_c8=True, li_c8=True, indexer_layers=range(0, 61, 4)), (0, 23), ONLY_023, 21_553_152,
        {(0, 23): 77}, {"sparse_mla_sfa_c8": 61}, skip_030=SPARSE_030,
    ),
}


def storages(kv: dict) -> dict[int, int]:
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for v in kv.values() for t in v}


def layout_of(kv: dict, offsets: bool) -> dict[str, list]:
    """Per layer: each view's shape, dtype, stride, its raw buffer (numbered per layer) and,
    where ``offsets``, its byte offset in that buffer."""
    out = {}
    for name, views in kv.items():
        ptrs = list(dict.fromkeys(t.untyped_storage().data_ptr() for t in views))
        out[name] = [
            (tuple(t.shape), t.dtype, t.stride(), ptrs.index(t.untyped_storage().data_ptr()),
             t.storage_offset() * t.element_size() if offsets else None)
            for t in views
        ]
    return out


def compare(model, **runner_kwargs):
    config = model.kv_cache_config
    stock = stock_init(model.make_runner(**runner_kwargs), copy.deepcopy(config))
    runner = model.make_runner(**runner_kwargs)
    return config, stock, ours_init(runner, copy.deepcopy(config)), runner


@pytest.mark.parametrize("kv_transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.skipif(R >= (0, 30), reason=c.skip_030)) if c.skip_030 else n for n, c in CASES.items()],
)
def test_quantised_kv_cache_equals_stock(name, kv_transfer):
    case = CASES[name]
    if R < case.since:
        pytest.skip(case.skip_reason)
    runner_kwargs = dict(case.runner or {})
    if runner_kwargs.get("kv_transfer") and not kv_transfer:
        pytest.skip("FA quant exists on A2 only on decode instances, which always have kv_transfer_config")
    runner_kwargs["kv_transfer"] = kv_transfer
    model = case.build()
    config, stock, ours, runner = compare(model, **runner_kwargs)
    assert layout_of(ours, not kv_transfer) == layout_of(stock, not kv_transfer)
    buffers = case.buffers[R]
    expected = case.nbytes + (TRANSFER_ALIGNMENT * buffers if kv_transfer else 0)
    assert (sum(storages(ours).values()), len(storages(ours))) == (expected, buffers)
    assert (sum(storages(stock).values()), len(storages(stock))) == (expected, buffers)
    assert sum(t.size for t in config.kv_cache_tensors) == case.nbytes
    if R >= (0, 30):  # 0.30: no shared_by; every layer has its raw buffers to itself, as stock
        owners = [frozenset(t.untyped_storage().data_ptr() for t in views) for views in ours.values()]
        assert sum(map(len, owners)) == len(frozenset().union(*owners)) == buffers
    else:  # the layers of one KVCacheTensor alias one set of raw buffers
        for tensor in config.kv_cache_tensors:
            assert len({frozenset(t.untyped_storage().data_ptr() for t in ours[n]) for n in tensor.shared_by}) == 1
    if kv_transfer:  # each raw buffer starts on a 2 MiB boundary (the first view into it)
        firsts: dict[int, int] = {}
        for views in ours.values():
            for t in views:
                p = t.untyped_storage().data_ptr()
                firsts[p] = min(firsts.get(p, t.data_ptr()), t.data_ptr())
        assert all(ptr % TRANSFER_ALIGNMENT == 0 for ptr in firsts.values())
    plan = AscendAdapter().plan_runner(runner, config).plan
    assert {k: v for k, v in plan.kind_counts().items()} == {k: v for k, v in case.kinds.items() if v}


# -- the parts, exactly ------------------------------------------------------------------------


def parts_of(model, layer=0):
    runner = model.make_runner(**{k: v for k, v in model.runner_kwargs.items() if k == "quant_config"})
    plan = AscendAdapter().plan_runner(runner, model.kv_cache_config).plan
    lp = plan.layers[f"model.layers.{layer}.self_attn.attn"]
    return [(p.name, p.dtype, p.shape, p.blocks, p.group, p.nbytes) for p in lp.parts], lp


@pytest.mark.skipif(R >= (0, 30), reason=SPARSE_030)
@pytest.mark.skipif(R < (0, 18), reason=NO_C8)
def test_li_c8_parts():
    parts, lp = parts_of(rf.deepseek_v32(li_c8=True))
    assert parts == [
        ("nope", BF16, (128, 1, 512), 1, None, 131_072),  # 128 x 512 x 2
        ("rope", BF16, (128, 1, 64), 1, None, 16_384),
        ("indexer_k", I8, (128, 1, 128), 1, "indexer", 16_384),  # 128 x 128 x 1
        ("indexer_scale", FP16, (128, 1, 1), 1, "indexer", 256),  # 128 x 1 x 2
    ]
    assert [p.kernel_blocks for p in lp.parts] == [True, True, False, False]
    assert lp.page_bytes == lp.spec.page_size_bytes == 164_096


@pytest.mark.skipif(R >= (0, 30), reason=SPARSE_030)
@pytest.mark.skipif(R < (0, 23), reason=ONLY_023)
def test_sfa_c8_packed_row_fields_and_replicated_indexer():
    parts, lp = parts_of(rf.deepseek_v32(sfa_c8=True, li_c8=True, rep=8))
    assert parts == [
        ("packed_kv", I8, (128, 1, 656), 1, None, 83_968),  # 128 x 656
        ("indexer_k", I8, (128, 1, 128), 8, "indexer", 131_072),  # 8 x 128 x 128
        ("indexer_scale", FP16, (128, 1, 1), 8, "indexer", 2_048),  # 8 x 128 x 2
    ]
    # nope | rope | scales: vllm-ascend's QSFA row (not upstream fp8_ds_mla's nope | scales | rope)
    assert [(f.name, f.dtype, f.width, f.nbytes) for f in lp.parts[0].fields] == [
        ("nope", I8, 512, 512), ("rope", BF16, 64, 128), ("nope_scale", FP32, 4, 16)
    ]
    assert lp.page_bytes == lp.spec.page_size_bytes == 217_088


@pytest.mark.skipif(R >= (0, 30), reason=FA_QUANT_030)
@pytest.mark.skipif(R < (0, 18), reason=NO_C8)
def test_fa_quant_parts():
    parts, lp = parts_of(rf.deepseek_v3(fa_quant=True))
    assert parts == [("nope", I8, (128, 1, 512), 1, None, 65_536), ("rope", BF16, (128, 1, 64), 1, None, 16_384)]
    assert lp.page_bytes == lp.spec.page_size_bytes == 81_920


@pytest.mark.skipif(R != (0, 18), reason="the cache_sparse_c8 form (and its dtype assertion) is vllm-ascend 0.18's")
def test_018_li_c8_of_a_float32_model_is_refused():
    """0.18's ``sparse_kv_cache_ratio`` asserts size(dtype) == size(scale dtype): stock raises."""
    spec = rf.AscendMLAAttentionSpec(
        block_size=128, num_kv_heads=1, head_size=704, sparse_head_dim=(512, 64, 128), dtype=FP32, cache_sparse_c8=True
    )
    config = rf.build_kv_cache_config({"model.layers.0.self_attn.attn": spec}, N)
    runner = rf.make_runner(config, model_type="deepseek_v32", index_head_dim=128)
    with pytest.raises(AssertionError):
        stock_init(runner, copy.deepcopy(config))
    with pytest.raises(UnsupportedSpecError, match="scale dtype"):
        AscendAdapter().plan_runner(rf.make_runner(config, model_type="deepseek_v32", index_head_dim=128), config)


@pytest.mark.skipif(R >= (0, 30), reason=SPARSE_030)
@pytest.mark.skipif(R < (0, 23), reason="scale_dim (DeepSeek V4's indexer scales) is a vllm-ascend 0.23 field")
def test_indexer_scales_in_the_page_stay_refused():
    spec = rf.AscendMLAAttentionSpec(
        block_size=128, num_kv_heads=1, head_size=704, sparse_head_dim=(512, 64, 128), dtype=BF16, scale_dim=4,
        scale_dtype=FP32, cache_sparse_li_c8=True,
    )
    config = rf.build_kv_cache_config({"model.layers.0.self_attn.attn": spec}, N)
    with pytest.raises(UnsupportedSpecError, match="scale_dim=4"):
        AscendAdapter().plan_runner(rf.make_runner(config, model_type="deepseek_v32", index_head_dim=128), config)


# -- FA quant: where stock crashes, the plugin refuses; elsewhere it builds ---------------------


def _fa_quant_runner_kwargs(model, role):
    return dict(kv_transfer=role is not None, kv_role=role or "kv_producer", quant_config=rf.fa_quant_config(range(61)))


@pytest.mark.skipif(R >= (0, 30), reason=FA_QUANT_030)
@pytest.mark.skipif(R < (0, 18), reason=NO_C8)
@pytest.mark.parametrize(
    ("model", "role", "word"),
    [
        # the layers' specs stay bf16 (the spec side wants a pure consumer) while the runner splits for FA quant
        (lambda: rf.deepseek_v3(), "kv_both", "kv_both instance"),
        # the runner splits an Attention layer [k, 2v]; no release builds an FA-quant spec for it
        (lambda: rf.qwen3_8b(), "kv_consumer", "non-MLA attention"),
    ],
    ids=["mla-kv_both", "dense-kv_consumer"],
)
def test_fa_quant_where_stock_crashes_is_refused(model, role, word, monkeypatch):
    mk = model()
    kwargs = _fa_quant_runner_kwargs(mk, role)
    with pytest.raises((AssertionError, RuntimeError)):  # stock: the split does not fit the page
        stock_init(mk.make_runner(**kwargs), copy.deepcopy(mk.kv_cache_config))
    with pytest.raises(UnsupportedSpecError, match=word):
        ours_init(mk.make_runner(**kwargs), copy.deepcopy(mk.kv_cache_config))
    monkeypatch.setenv("KV_STRATEGIES", "auto")  # auto: the runner stays stock (and fails as stock does)
    with pytest.raises((AssertionError, RuntimeError)):
        ours_init(mk.make_runner(**kwargs), copy.deepcopy(mk.kv_cache_config))


@pytest.mark.skipif(R >= (0, 30), reason=FA_QUANT_030)
@pytest.mark.skipif(R < (0, 18), reason=NO_C8)
@pytest.mark.parametrize("role", [None, "kv_producer"], ids=["no-transfer", "kv_producer"])
def test_fa_quant_checkpoint_off_a_decode_instance_is_plain_mla(role):
    """On A2 the FA-quant checkpoint quantises nothing off decode instances: bf16 MLA, as stock."""
    mk = rf.deepseek_v3()
    config, stock, ours, runner = compare(mk, **_fa_quant_runner_kwargs(mk, role))
    assert layout_of(ours, role is None) == layout_of(stock, role is None)
    assert sum(storages(ours).values()) == sum(storages(stock).values()) == 61 * 4 * 128 * 576 * 2 + (
        122 * TRANSFER_ALIGNMENT if role else 0
    )


@pytest.mark.skipif(R >= (0, 30), reason=NO_KV_CACHE_DTYPE_030)
@pytest.mark.skipif(
    R < (0, 18), reason="vllm-ascend 0.11 reads additional_config kv_cache_dtype (BSH layout: test_0_11_bsh_int8_equals_stock); 0.13 has no int8 spec"
)
def test_additional_config_int8_is_read_by_0_11_only():
    """0.18 / 0.23 read no ``kv_cache_dtype`` key in additional_config: the W8A8C8 spec is built as stock."""
    mk = rf.qwen3_8b(dtype=I8)
    config, stock, ours, _ = compare(mk, additional_config={"kv_cache_dtype": "int8"})
    assert layout_of(ours, True) == layout_of(stock, True)
    assert sum(storages(ours).values()) == 37_748_736


BSH_ONLY_011 = "additional_config kv_cache_dtype=int8 (the BSH layout) is read by vllm-ascend 0.11 only"


@pytest.mark.skipif(R >= (0, 13), reason=BSH_ONLY_011)
@pytest.mark.parametrize("kv_transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize(("tp", "nbytes", "row"), [(1, 37_748_736, 1024), (4, 9_437_184, 256)], ids=["tp1", "tp4"])
def test_0_11_bsh_int8_equals_stock(tp, nbytes, row, kv_transfer):
    """K and V (N, block, heads x head) int8, never kernel-split: 36 x 4 x 128 x row x 2 bytes."""
    mk = rf.qwen3_8b(tp=tp, dtype=I8)
    config, stock, ours, runner = compare(mk, additional_config={"kv_cache_dtype": "int8"}, kv_transfer=kv_transfer)
    assert layout_of(ours, not kv_transfer) == layout_of(stock, not kv_transfer)
    assert [(tuple(t.shape), t.dtype) for t in ours["model.layers.0.self_attn.attn"]] == [((4, 128, row), I8)] * 2
    expected = nbytes + (72 * TRANSFER_ALIGNMENT if kv_transfer else 0)  # 188,743,680 / 160,432,128 with transfer
    assert sum(storages(ours).values()) == sum(storages(stock).values()) == expected
    assert dict(AscendAdapter().plan_runner(runner, config).plan.kind_counts()) == {"bsh_attention": 36}


@pytest.mark.skipif(R >= (0, 13), reason=BSH_ONLY_011)
def test_0_11_int8_mla_stays_refused():
    """For MLA layers stock 0.11 raises (``AscendMLABackend`` has no ``get_bsh_kv_cache_shape``)."""
    spec = rf.MLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=I8, cache_dtype_str="int8")
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(61)}
    mk = rf.ModelKV("DeepSeek-V3 int8", 1, rf.build_kv_cache_config(specs, N), specs, {"model_type": "deepseek_v3"})
    kwargs = {"additional_config": {"kv_cache_dtype": "int8"}}
    with pytest.raises(AttributeError, match="get_bsh_kv_cache_shape"):
        stock_init(mk.make_runner(**kwargs), copy.deepcopy(mk.kv_cache_config))
    with pytest.raises(UnsupportedSpecError, match="BSH"):
        ours_init(mk.make_runner(**kwargs), copy.deepcopy(mk.kv_cache_config))


@pytest.mark.skipif(R < (0, 30), reason="vllm-ascend 0.30's FA-quant enabling (cache_dtype int8, configs.modelslim_config)")
def test_fa_quant_030_equals_stock():
    """A decode instance: int8 nope + bf16 rope per layer in buffers of their own, 61 x 4 x
    (128 x 512 x 1 + 128 x 64 x 2) = 19,988,480 bytes + 2 MiB for each of the 122 buffers."""
    mk = factory_030.fa_quant_model_030()
    stock = stock_init(factory_030.fa_quant_runner_030(mk), copy.deepcopy(mk.kv_cache_config))
    runner = factory_030.fa_quant_runner_030(mk)
    ours = ours_init(runner, copy.deepcopy(mk.kv_cache_config))
    assert layout_of(ours, False) == layout_of(stock, False)
    assert [(tuple(t.shape), t.dtype) for t in ours["model.layers.0.self_attn.attn"]] == [
        ((4, 128, 1, 512), I8), ((4, 128, 1, 64), BF16)
    ]
    expected = 19_988_480 + 122 * TRANSFER_ALIGNMENT
    assert (sum(storages(ours).values()), len(storages(ours))) == (expected, 122)
    assert (sum(storages(stock).values()), len(storages(stock))) == (expected, 122)


@pytest.mark.skipif(R < (0, 30), reason="vllm-ascend 0.30's FA-quant enabling (cache_dtype int8, configs.modelslim_config)")
def test_fa_quant_030_unquantised_spec_is_refused_where_stock_crashes():
    mk = factory_030.fa_quant_model_030(num_layers=2, quantised_spec=False)
    with pytest.raises(AssertionError):
        stock_init(factory_030.fa_quant_runner_030(mk), copy.deepcopy(mk.kv_cache_config))
    with pytest.raises(UnsupportedSpecError, match="FA quant"):
        ours_init(factory_030.fa_quant_runner_030(mk), copy.deepcopy(mk.kv_cache_config))


# -- A5 (vllm-ascend 0.23): fp8 C8 keys, fp32 scales, fp8 FA-quant nope on any role ------------


@pytest.fixture
def a5(monkeypatch):
    """The device type where 0.23 reads it for these caches: the spec's C8 dtype defaults
    (``core.kv_cache_interface``), FA quant's role rule and dtype (``quantization.utils``,
    ``quantization.modelslim_config``)."""
    from vllm_ascend.utils import AscendDeviceType

    for module in ("vllm_ascend.core.kv_cache_interface", "vllm_ascend.quantization.utils", "vllm_ascend.quantization.modelslim_config"):
        monkeypatch.setattr(f"{module}.get_ascend_device_type", lambda: AscendDeviceType.A5)


A5_CASES = {
    # 128 x (576 x 2 + 128 x 1 + 1 x 4) = 164,352 -> 61 x 4 x 164,352
    "li-c8": (lambda: rf.deepseek_v32(li_c8=True), {}, 40_101_888, [FP8, FP32]),
    # 128 x (656 + 128 + 4) = 100,864
    "sfa-li-c8": (lambda: rf.deepseek_v32(sfa_c8=True, li_c8=True), {}, 24_610_816, [FP8, FP8, FP32]),
    # any role on A5: no transfer config at all; 128 x (512 x 1 + 64 x 2)
    "fa-quant": (lambda: rf.deepseek_v3(fa_quant=True, fa_dtype=FP8), {}, 19_988_480, [FP8]),
}


@pytest.mark.skipif(R >= (0, 30), reason=A5_030)
@pytest.mark.skipif(R < (0, 23), reason=ONLY_023)
@pytest.mark.parametrize("name", list(A5_CASES))
def test_a5_variants_equal_stock(name, a5):
    build, kwargs, nbytes, dtypes = A5_CASES[name]
    mk = build()
    config, stock, ours, _ = compare(mk, **kwargs)
    assert layout_of(ours, True) == layout_of(stock, True)
    assert sum(storages(ours).values()) == sum(storages(stock).values()) == nbytes
    first = ours["model.layers.0.self_attn.attn"]
    assert [t.dtype for t in first if t.dtype not in (BF16,)] == dtypes


# -- the layout mechanics these kinds need (no release specifics) -------------------------------


def _lp(parts, page):
    from types import SimpleNamespace

    from vllm_kv_strategies.core.plan import LayerPlan
    from vllm_kv_strategies.core.strategies import SparseMLAStrategy

    spec = SimpleNamespace(block_size=4, page_size_bytes=page)
    return LayerPlan("model.layers.0.self_attn.attn", 0, spec, SparseMLAStrategy(), tuple(parts), 0)


def test_coallocated_groups_become_one_raw_buffer_with_aligned_slices():
    from vllm_kv_strategies.platforms.ascend.layout.buffers import TensorLayout, buffer_slices, coallocated_runs
    from vllm_kv_strategies.core.strategies import PagePart

    parts = (
        PagePart("nope", BF16, (4, 1, 8)),
        PagePart("indexer_k", I8, (4, 1, 3), group="indexer"),  # 12 bytes: the scale starts at 12, fp32-aligned
        PagePart("indexer_scale", FP32, (4, 1, 1), group="indexer"),
    )
    assert coallocated_runs(parts, frozenset({"indexer"})) == (1, 2)
    assert coallocated_runs(parts, frozenset()) == (1, 1, 1)
    lp = _lp(parts, 64 + 12 + 16)
    layout = TensorLayout(0, (lp,), tuple(3 * p.nbytes for p in parts), False, (1, 2))  # 3 blocks
    assert buffer_slices(layout) == [(192, ((0, 192),)), (84, ((0, 36), (36, 48)))]
    odd = (PagePart("k", I8, (1, 1, 3), group="g"), PagePart("s", FP32, (1, 1, 1), group="g"))
    layout = TensorLayout(0, (_lp(odd, 7),), (3, 4), False, (2,))  # one block: scale at align_up(3, 4) = 4
    assert buffer_slices(layout) == [(8, ((0, 3), (4, 4)))]


def test_sub_blocks_are_viewed_as_num_blocks_times_sub_blocks():
    from vllm_kv_strategies.platforms.ascend.layout.buffers import layer_views
    from vllm_kv_strategies.core.strategies import PagePart

    parts = (PagePart("nope", BF16, (4, 1, 8)), PagePart("indexer_k", BF16, (4, 1, 2), kernel_blocks=False, blocks=3))
    page = 64 + 3 * 16
    lp = _lp(parts, page)
    # one buffer per part
    raws = (torch.zeros(5 * 64, dtype=I8), torch.zeros(5 * 48, dtype=I8))
    views = layer_views(lp, raws, 5, kernel_block_size=2)
    assert [tuple(v.shape) for v in views] == [(10, 2, 1, 8), (15, 4, 1, 2)]  # nope split into kernel blocks
    # one buffer holding whole pages (the hybrid layout): parts packed at its end, sub-blocks back to back
    raw = torch.arange(5 * page, dtype=torch.int16).view(I8)[: 5 * page]
    nope, idx = layer_views(lp, raw, 5, None)
    assert (tuple(idx.shape), idx.stride()) == ((15, 4, 1, 2), (8, 2, 2, 1))
    assert idx.data_ptr() - raw.data_ptr() == 5 * 64 and idx[1].data_ptr() - idx[0].data_ptr() == 16
