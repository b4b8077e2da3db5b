"""Each vllm-ascend release difference that ``vllm_kv_strategies.platforms.ascend.facts`` records (and the
kind semantics the strategies derive from it), tested on
the installed release (0.11.0, 0.13.0, 0.18.0 or 0.23.0) against that release's real classes,
with exact numbers; pure translations are also checked for every release's value.

| difference | releases | where (``platforms.ascend.facts``, else named) |
|---|---|---|
| methods to patch | 0.11: 3 complete inits; 0.13+: init + _allocate + _reshape | ``target`` |
| Mamba state views | 0.11: block-interleaved (page stride); 0.13+: state after state | ``mamba_states_interleaved`` |
| DeepSeek V3.2 layers | 0.11 / 0.13: FullAttentionSpec(1, 576), 2x page; 0.18+: MLA spec + sparse_head_dim | ``legacy_sparse_form``; ``core.strategies.sparse_mla.normalize_legacy_specs`` |
| kernel block size | <= 0.13: ``get_supported_block_size``; 0.18+: ``get_supported_kernel_block_sizes`` | ``kernel_block_size`` |
| format cast of views | 0.11: ``NPUModelRunner._convert_torch_format``; later: none | ``format_converter`` |
| FA-quant probe | 0.18+: ``vllm_ascend.quantization.utils.enable_fa_quant``; before: none | ``fa_quant_enabled``, ``fa_quant_refusal`` |
| LI C8 key + scale | 0.18: two raw buffers; 0.23: one (``_allocate_sparse_c8_indexer_tensors``) | ``coallocated_groups`` |
| ``additional_config`` int8 | 0.11 only (BSH layout; MLA refused) | ``bsh_int8_layout``, ``stock_only_reason`` |
| MLA spec class | 0.18 rebinds ``kv_cache_interface.MLAAttentionSpec`` to its subclass | ``core.specs.vllm_spec_class``, ``core.specs.spec_classes`` |
| sparse C8 flag | 0.18: ``cache_sparse_c8``; 0.23: ``cache_sparse_{sfa,li}_c8``, ``sfa_dcp_replicated_indexer_size`` | ``core.specs.ascend_sparse_quant`` (the dense strategies refuse them) |
| ``KVCacheTensor`` | ``size`` + ``shared_by`` in all four | ``core.specs.tensor_layers`` |

Also here: 0.11 stock cannot build sliding-window layers beside full attention (the plugin can),
and the adapter's block-consistency rule for hybrid tensors on each release's sizing.

On vllm-ascend 0.30 the hand-built configs are vLLM 0.30's strided form (``factory_030.kvt``);
the cases 0.30 has no form of are skipped there with the reasons below.
"""

from __future__ import annotations

import copy
import importlib
from types import SimpleNamespace

import pytest
import torch
import npu_stubs
import runner_factory as rf
import factory_030
import kv_compare
from factory_030 import kvt
from vllm.config.kv_transfer import KVTransferConfig
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.core import specs
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.platforms.ascend.layout.buffers import crosses_blocks, shares_block_consistently
from vllm_kv_strategies.platforms.ascend.layout.hybrid_kv import states_in_kv_page
from vllm_kv_strategies.core.strategies.base import require_dense_page
from vllm_kv_strategies.core.strategies.mla import mla_spec_types
from vllm_kv_strategies.core.strategies.sparse_mla import legacy_sparse_mla, normalize_legacy_specs
from vllm_kv_strategies.core.plan import plan_kv_cache
from vllm_kv_strategies.core.registry import default_registry
from vllm_kv_strategies.core.strategies import ModelDims

R = rf.RELEASE
BF16 = torch.bfloat16
A = "model.layers.{}.self_attn.attn".format
RELEASES = ("0.11.0", "0.13.0", "0.18.0", "0.23.0")
ON_030 = R >= (0, 30)
#: Skip reasons on vllm-ascend 0.30 (one per reason).
SPARSE_030 = (
    "vllm-ascend 0.30 has no sparse_head_dim MLA spec (runner_factory.deepseek_v32 builds 0.18-0.23's): "
    "the SFA indexer is AscendSFAIndexerCacheSpec on a layer of its own, which the sfa_indexer kind builds "
    "as stock (tests/ascend/test_sfa_030.py)"
)
HYBRID_030 = (
    "vllm-ascend 0.30: a hybrid (Mamba + attention) config is one page-strided backing, laid out as stock's "
    "(tests/ascend/test_overlay_030.py, test_public_cases.test_hybrid_backing_is_stocks_030), not 0.23's form"
)
NO_KV_CACHE_DTYPE_030 = (
    "vllm-ascend 0.30's AscendConfig rejects additional_config kv_cache_dtype (pydantic: unexpected "
    "keyword argument), so no 0.30 deployment carries it"
)
HYBRID_SIZING_030 = (
    "vllm-ascend 0.30 has no hybrid page sizing of its own (vLLM 0.30's _align_hybrid_block_size sizes "
    "hybrids) and no shared_by: the 0.11-0.23 sizings whose block consistency this checks do not exist "
    "there, and the plugin refuses 0.30's hybrid backing by name"
)


def plugin_init(runner, config):
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    config = copy.deepcopy(config)
    return AscendAdapter().initialize_kv_cache_tensors(stock, runner, config, **rf.stock_kwargs(runner, config))


def stock_init(runner, config):
    config = copy.deepcopy(config)
    return patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))(runner, config, **rf.stock_kwargs(runner, config))


def allocated(kv_caches: dict) -> int:
    return sum(
        {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for v in kv_caches.values() for t in v}.values()
    )


# -- methods to patch ------------------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_ascend_target_per_release(release):
    expected = facts.THREE_INITS if release == "0.11.0" else facts.SPLIT_INIT
    assert facts.target(release) is expected
    assert facts.target(release + "+cpu") is expected


def test_ascend_target_names_the_installed_classes_methods():
    module = importlib.import_module(facts.target().module)
    for attribute in facts.target().attributes:
        owner, name = patching.owner_and_name(module, attribute)
        assert owner is rf.NPUModelRunner and name in rf.NPUModelRunner.__dict__, attribute


# -- Mamba state views -----------------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_mamba_states_interleaved_per_release(release):
    assert facts.mamba_states_interleaved(release) is (release == "0.11.0")


def test_mamba_layout_is_the_installed_stocks():
    """The translation agrees with what the release's own runner builds: Qwen3-Next TP4 conv /
    ssm views with dim-0 stride one (padded) page, or contiguous."""
    if ON_030:  # a Mamba-only model: 0.30 hybrids are page-strided states in a shared backing (refused)
        import stock_cases_030

        mk = stock_cases_030.mamba()  # 8 blocks, conv (3, 256) + ssm (2, 64, 64) bf16
        conv, ssm = stock_init(mk.make_runner(), mk.kv_cache_config)["model.layers.0.linear_attn"]
        assert not facts.mamba_states_interleaved()
        assert conv.is_contiguous() and ssm.is_contiguous()
        assert ssm.data_ptr() - conv.data_ptr() == 8 * 3 * 256 * 2  # after all 8 conv states
        return
    mk = rf.qwen3_next(tp=4)
    conv, ssm = stock_init(mk.make_runner(), mk.kv_cache_config)["model.layers.0.linear_attn"]
    page = mk.specs["model.layers.0.linear_attn"].page_size_bytes
    if facts.mamba_states_interleaved():
        assert (conv.stride(0), ssm.stride(0)) == (page // 2, page // 2) == (196_608, 196_608)
        assert ssm.data_ptr() - conv.data_ptr() == 3 * 2048 * 2  # one conv state into page 0
    else:
        assert conv.is_contiguous() and ssm.is_contiguous()
        assert ssm.data_ptr() - conv.data_ptr() == 4 * 3 * 2048 * 2  # after all 4 conv states


# -- legacy DeepSeek V3.2 spec ---------------------------------------------------------------

LEGACY = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=BF16)
V32_DIMS = ModelDims(kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128)


def test_legacy_sparse_spec_resolves_to_sparse_mla_with_exact_parts():
    spec = legacy_sparse_mla(LEGACY, V32_DIMS, facts.LEGACY_INDEX_HEAD_DIM)
    assert isinstance(spec, specs.vllm_spec_class("MLAAttentionSpec"))
    assert (spec.block_size, spec.num_kv_heads, spec.head_size, spec.dtype) == (128, 1, 704, BF16)
    assert tuple(spec.sparse_head_dim) == (512, 64, 128)
    assert (spec.page_size_bytes, specs.unpadded_page_bytes(spec)) == (294_912, 180_224)
    strategy = default_registry().resolve(spec)
    assert strategy.name == "sparse_mla"
    assert [(p.name, p.shape, p.dtype) for p in strategy.page_parts(spec, V32_DIMS)] == [
        ("nope", (128, 1, 512), BF16),
        ("rope", (128, 1, 64), BF16),
        ("indexer_k", (128, 1, 128), BF16),
    ]
    # without index_head_dim in the model config: the 128 vllm-ascend 0.11 / 0.13 hard-code
    no_index = ModelDims(kv_lora_rank=512, qk_rope_head_dim=64)
    assert tuple(legacy_sparse_mla(LEGACY, no_index, facts.LEGACY_INDEX_HEAD_DIM).sparse_head_dim) == (512, 64, 128)


@pytest.mark.parametrize(
    "spec",
    [
        FullAttentionSpec(block_size=128, num_kv_heads=8, head_size=128, dtype=BF16),
        FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=512, dtype=BF16),
    ],
    ids=["dense-heads", "other-head-size"],
)
def test_other_specs_are_left_alone(spec):
    assert legacy_sparse_mla(spec, V32_DIMS, facts.LEGACY_INDEX_HEAD_DIM) is spec


def test_a_runner_without_use_sparse_keeps_legacy_shaped_layers_as_full_attention():
    """A DeepSeek-style model without an indexer may have a layer of the legacy sparse spec's
    shape; without the runner's use_sparse the adapter does not restate it: K and V."""
    config = KVCacheConfig(8, [kvt(2_359_296, [A(0)], 8)], [KVCacheGroupSpec([A(0)], LEGACY)])
    runner = rf.make_runner(config, attention_kind="attn", model_type="deepseek_v3")
    assert not getattr(runner, "use_sparse", False)
    decided = AscendAdapter().plan_runner(runner, config)
    assert [(lp.strategy.name, [p.name for p in lp.parts]) for lp in decided.plan.layers.values()] == [
        ("full_attention", ["k", "v"])
    ]


def test_legacy_sparse_indexer_that_does_not_fit_is_refused():
    with pytest.raises(KVCacheLayoutError, match="do not fit the 294912-byte page"):
        legacy_sparse_mla(LEGACY, ModelDims(512, 64, 1024), facts.LEGACY_INDEX_HEAD_DIM)


@pytest.mark.parametrize("release", RELEASES)
def test_legacy_sparse_form_per_release(release):
    assert facts.legacy_sparse_form(release) is (release in ("0.11.0", "0.13.0"))
    assert facts.legacy_sparse_form() is rf.LEGACY_SPARSE  # the installed release's own spec form


def test_normalize_legacy_specs_copies_only_when_needed():
    config = KVCacheConfig(8, [kvt(2_359_296, [A(0)], 8)], [KVCacheGroupSpec([A(0)], LEGACY)])
    dims = lambda name: V32_DIMS  # noqa: E731
    plain = KVCacheConfig(8, [kvt(2_359_296, [A(0)], 8)], [KVCacheGroupSpec([A(0)], FullAttentionSpec(
        block_size=128, num_kv_heads=8, head_size=128, dtype=BF16))])
    assert normalize_legacy_specs(plain, dims, facts.LEGACY_INDEX_HEAD_DIM) is plain
    out = normalize_legacy_specs(config, dims, facts.LEGACY_INDEX_HEAD_DIM)
    assert out is not config and config.kv_cache_groups[0].kv_cache_spec is LEGACY
    assert out.kv_cache_tensors is config.kv_cache_tensors and out.num_blocks == 8
    assert tuple(out.kv_cache_groups[0].kv_cache_spec.sparse_head_dim) == (512, 64, 128)


@pytest.mark.skipif(not rf.LEGACY_SPARSE, reason="vllm-ascend 0.18+ emit the sparse MLA spec")
def test_legacy_sparse_layer_exact_on_the_release_runner():
    """C07 in the legacy form: one layer, N = 8, a 2,359,296-byte tensor (8 x 294,912): nope,
    rope and indexer K in three buffers, 1,441,792 bytes. Stock 0.13 also allocates the unused
    917,504 (its indexer buffer is half the tensor); 0.11's sparse initialisation does not."""
    config = KVCacheConfig(8, [KVCacheTensor(2_359_296, [A(0)])], [KVCacheGroupSpec([A(0)], LEGACY)])
    kw = dict(attention_kind="sfa", model_type="deepseek_v32", index_head_dim=128)
    ours, stock = plugin_init(rf.make_runner(config, **kw), config), stock_init(rf.make_runner(config, **kw), config)
    assert [(tuple(t.shape), t.numel() * 2) for t in ours[A(0)]] == [
        ((8, 128, 1, 512), 1_048_576),
        ((8, 128, 1, 64), 131_072),
        ((8, 128, 1, 128), 262_144),
    ]
    assert [(t.shape, t.dtype, t.stride()) for t in ours[A(0)]] == [(t.shape, t.dtype, t.stride()) for t in stock[A(0)]]
    assert allocated(ours) == 1_441_792
    assert allocated(stock) == {(0, 11): 1_441_792, (0, 13): 2_359_296}[R]


# -- kernel block size -----------------------------------------------------------------------


def test_kernel_block_size_of_the_releases_backend():
    assert facts.kernel_block_size(rf.AscendAttentionBackend) == 128


class MultipleOf:  # shaped like vLLM's (0.13+) "any multiple of base" kernel block size
    def __init__(self, base: int):
        self.base = base


def test_kernel_block_size_names():
    v013 = SimpleNamespace(get_supported_block_size=lambda: [64], get_supported_kernel_block_sizes=lambda: [MultipleOf(1)])
    assert facts.kernel_block_size(v013) == 64  # Ascend's own name wins over vLLM's default
    assert facts.kernel_block_size(SimpleNamespace(get_supported_kernel_block_sizes=lambda: [128])) == 128
    assert facts.kernel_block_size(SimpleNamespace(get_supported_kernel_block_sizes=lambda: [MultipleOf(16)])) is None
    assert facts.kernel_block_size(SimpleNamespace()) is None


# -- format cast -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "qwen3_8b",
        "deepseek_v3",
        pytest.param("deepseek_v32", marks=pytest.mark.skipif(ON_030, reason=SPARSE_030)),
        pytest.param("qwen3_next", marks=pytest.mark.skipif(ON_030, reason=HYBRID_030)),
    ],
)
def test_format_cast_as_the_release_runner(model):
    """0.11 casts every attention view (not Mamba states) through _convert_torch_format
    (npu_format_cast, stubbed as identity); later releases cast nothing on A2. Qwen3-Next with the
    plugin's hybrid sizing where the release has one (0.11 / 0.13: at stock sizing its K/V would
    exceed the config, refused by name)."""
    mk = rf.qwen3_next(plugin_sizing=True) if model == "qwen3_next" else getattr(rf, model)()
    runner = mk.make_runner()
    convert = facts.format_converter(runner)
    assert (convert is not None) == (R < (0, 13))
    cast = npu_stubs.format_cast_mock()
    before = cast.call_count
    ours = plugin_init(runner, mk.kv_cache_config)
    plugin_casts = cast.call_count - before
    before = cast.call_count
    stock_init(mk.make_runner(), mk.kv_cache_config)
    assert plugin_casts == cast.call_count - before
    attention_views = sum(len(v) for v in ours.values() if isinstance(v, tuple))
    assert plugin_casts == (attention_views if R < (0, 13) else 0)


# -- FA quant --------------------------------------------------------------------------------


def test_fa_quant_probe():
    quant = SimpleNamespace(enable_fa_quant=True, is_fa_quant_layer=lambda name: True)
    consumer = KVTransferConfig(kv_connector="MooncakeConnectorV1", kv_role="kv_consumer")
    vllm_config = SimpleNamespace(quant_config=quant, kv_transfer_config=consumer)
    # 0.30's enable_fa_quant is false without an MLA model config (model_config.use_mla; cache_dtype fp8/int8)
    assert facts.fa_quant_enabled(vllm_config) is ((0, 18) <= R < (0, 30))
    mk = rf.qwen3_8b()
    runner = mk.make_runner()
    runner.vllm_config.quant_config, runner.vllm_config.kv_transfer_config = quant, consumer
    runner.is_kv_consumer = True
    names = mk.kv_cache_config.kv_cache_groups[0].layer_names
    # 0.18+: the runner would split Qwen3's attention layers [k, 2v] for FA quant; stock raises
    # (tests/ascend/test_quant_ascend.py runs it); before 0.18 no release has FA quant
    reason = facts.stock_only_reason(runner, names)
    assert (reason is not None and "non-MLA attention" in reason) is ((0, 18) <= R < (0, 30))
    assert facts.stock_only_reason(runner) is None  # no layer the quant config lists


@pytest.mark.skipif(ON_030, reason=NO_KV_CACHE_DTYPE_030)
def test_int8_bsh_layout_is_read_on_0_11_only():
    """vllm-ascend 0.11's ``additional_config={"kv_cache_dtype": "int8"}`` lays K/V out as BSH
    (the ``bsh_attention`` kind, tests/ascend/test_quant_ascend.py); later releases read no such key."""
    mk = rf.qwen3_8b(dtype=torch.int8)
    runner = mk.make_runner(additional_config={"kv_cache_dtype": "int8"})
    assert facts.bsh_int8_layout(runner) is (R < (0, 13))
    assert facts.bsh_int8_layout(mk.make_runner()) is False
    assert facts.stock_only_reason(runner) is None
    plan = AscendAdapter().plan_runner(runner, mk.kv_cache_config).plan
    assert set(plan.kind_counts()) == {"bsh_attention" if R < (0, 13) else "full_attention"}


# -- MLA spec class rebinding, sparse C8 flags ------------------------------------------------


def test_strategies_serve_vllms_own_mla_spec_class():
    import vllm.v1.kv_cache_interface as kvi  # noqa: PLC0415

    mla = mla_spec_types()[0]
    assert mla is rf.MLAAttentionSpec and mla.__module__ == "vllm.v1.kv_cache_interface"
    # vllm-ascend's own MLA spec classes are listed where the release has them (exact matching)
    assert (rf.AscendMLAAttentionSpec in mla_spec_types()) is (rf.AscendMLAAttentionSpec is not None)
    assert (kvi.MLAAttentionSpec is rf.AscendMLAAttentionSpec) is (R == (0, 18))  # 0.18's rebinding
    plain = rf.MLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=BF16)
    assert default_registry().resolve(plain).name == "mla"
    if rf.AscendMLAAttentionSpec is not None:
        sub = rf.AscendMLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=BF16)
        if "sparse_head_dim" not in rf.AscendMLAAttentionSpec.__dataclass_fields__:  # 0.30: SFA_030 above
            assert default_registry().resolve(sub).name == "mla"
            return
        sparse = rf.AscendMLAAttentionSpec(
            block_size=128, num_kv_heads=1, head_size=704, dtype=BF16, sparse_head_dim=(512, 64, 128)
        )
        assert (default_registry().resolve(sub).name, default_registry().resolve(sparse).name) == ("mla", "sparse_mla")


@pytest.mark.parametrize("flag", ["cache_sparse_c8", "cache_sparse_sfa_c8", "cache_sparse_li_c8"])
def test_sparse_c8_flags_are_read_by_meaning_and_refused_by_the_plain_kinds(flag):
    fields = getattr(rf.AscendMLAAttentionSpec, "__dataclass_fields__", {})
    # the release's own spec (0.30's AscendMLAAttentionSpec keeps cache_sparse_sfa_c8 but has no
    # sparse_head_dim: SPARSE_030; the 0.18 / 0.23 form is checked as a namespace there)
    if flag in fields and "sparse_head_dim" in fields:
        spec = rf.AscendMLAAttentionSpec(
            block_size=128, num_kv_heads=1, head_size=704, dtype=BF16, sparse_head_dim=(512, 64, 128), **{flag: True}
        )
    else:  # the other release's form
        spec = SimpleNamespace(block_size=128, num_kv_heads=1, head_size=704, dtype=BF16, **{flag: True})
    quant = specs.ascend_sparse_quant(spec)
    assert (quant.li_c8, quant.sfa_c8, quant.replicas) == (flag != "cache_sparse_sfa_c8", flag == "cache_sparse_sfa_c8", 1)
    assert quant.scale_sized_model is (flag == "cache_sparse_c8")  # 0.18's form
    with pytest.raises(UnsupportedSpecError, match=flag):
        require_dense_page(spec, "sparse_mla")


def test_coallocated_groups_per_release():
    assert facts.coallocated_groups() == (frozenset({"indexer"}) if R >= (0, 23) else frozenset())
    assert [facts.coallocated_groups(v) for v in ("0.11.0", "0.13.0", "0.18.0", "0.23.0")] == [frozenset()] * 3 + [
        frozenset({"indexer"})
    ]


# -- sliding window beside full attention ----------------------------------------------------


def test_sliding_window_beside_full_attention():
    """Gemma-style: 4 full + 4 SWA layers in two groups, tensors shared_by [full_i, swa_i], each
    4 x 131,072 bytes. vllm-ascend 0.11 stock raises "Unknown KV cache spec type" (its reshape
    knows FullAttentionSpec and MambaSpec only; it has already given each of the two layers its
    own K/V); the plugin builds K and V (4, 128, 2, 128) bf16 per layer, the two layers of a tensor
    aliasing them: 8 buffers, 2,097,152 bytes. Later releases' stock builds the same."""
    mk = rf.sliding_window_beside_full()
    config = mk.kv_cache_config
    if ON_030:  # no shared_by: each of the 8 layers private, as stock 0.30 (full: K|V interleaved; SWA: K, V)
        _, stock, _, ours = factory_030.stock_and_plugin(config)
        assert kv_compare.layout_signature(ours) == kv_compare.layout_signature(stock)
        for i in range(8):
            assert [(tuple(t.shape), t.dtype) for t in ours[A(i)]] == [((4, 128, 2, 128), BF16)] * 2
        owners = [frozenset(t.untyped_storage().data_ptr() for t in v) for v in ours.values()]
        assert sum(map(len, owners)) == len(frozenset().union(*owners)) == 12  # 4 full x 1 + 4 SWA x 2
        assert allocated(ours) == allocated(stock) == 8 * 524_288
        return
    assert [t.size for t in config.kv_cache_tensors] == [524_288] * 4
    ours = plugin_init(mk.make_runner(), config)
    for i in range(8):
        assert [(tuple(t.shape), t.dtype) for t in ours[A(i)]] == [((4, 128, 2, 128), BF16)] * 2
    for i in range(0, 8, 2):
        assert [t.data_ptr() for t in ours[A(i)]] == [t.data_ptr() for t in ours[A(i + 1)]]
    assert allocated(ours) == 2_097_152 and len({t.untyped_storage().data_ptr() for v in ours.values() for t in v}) == 8
    if R < (0, 13):
        with pytest.raises(ValueError, match="Unknown KV cache spec type"):
            stock_init(mk.make_runner(), config)
    else:
        stock = stock_init(mk.make_runner(), config)
        assert {n: [(t.shape, t.stride()) for t in v] for n, v in stock.items()} == {
            n: [(t.shape, t.stride()) for t in v] for n, v in ours.items()
        }
        assert allocated(stock) == 2_097_152


# -- hybrid tensors: block consistency -------------------------------------------------------


def test_crosses_blocks():
    n = 4
    assert not crosses_blocks((0, 10, 10), (0, 10, 10), n)  # the same region
    assert not crosses_blocks((0, 10, 10), (40, 10, 10), n)  # disjoint extents
    assert crosses_blocks((0, 10, 10), (5, 10, 10), n)  # block 1 of one meets block 0 of the other
    assert crosses_blocks((0, 10, 10), (10, 10, 10), n)  # shifted by a block
    assert not crosses_blocks((0, 20, 8), (8, 20, 12), n)  # interleaved parts of one page
    assert crosses_blocks((0, 16, 16), (0, 32, 16), n)  # different strides over the same bytes


@pytest.mark.skipif(ON_030, reason=HYBRID_SIZING_030)
def test_hybrid_tensors_share_one_buffer_only_on_block_consistent_sizing():
    """T-HYB on the release's sizing: 0.18+ (K page == ssm page, padded page 2A + conv) is
    block-consistent with state-after-state Mamba views; 0.11 / 0.13 sizing (attention page ==
    padded Mamba page, here 32,768 = 2 x the 16,384-byte ssm state) is not, in either Mamba
    layout, but is with the states inside the K/V blocks (``states_in_kv_page``)."""
    mk = rf.t_hyb_toy()
    plan = plan_kv_cache(mk.kv_cache_config, ModelDims())
    layers, size = tuple(plan.layers_of(0)), mk.kv_cache_config.kv_cache_tensors[0].size
    consistent = {il: shares_block_consistently(layers, 4, size, il) for il in (False, True)}
    assert consistent == {False: R >= (0, 18), True: False}
    kv_page = states_in_kv_page(layers)
    assert kv_page == (None if R >= (0, 18) else 16_384)
    if kv_page is not None:
        assert shares_block_consistently(layers, 4, size, facts.mamba_states_interleaved(), kv_page)
