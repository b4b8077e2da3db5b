"""Quantised KV caches on upstream vLLM (0.32): the strategies' parts (the named fields of each
cell, scales included) add up to the page of specs made the way vLLM makes them (the backends'
own ``customize_spec``, ``MLAAttention`` / ``DeepseekV32IndexerCache`` fields), both upstream
runners build them with no fallback (``KV_STRATEGIES=on``) and equal to stock, and the modes no
release defines a layout for stay refused with their names.

Expected bytes are worked out by hand in each test (elements x element size). Numbers at
N = 4 blocks: Qwen3-8B (36 layers, 8 KV heads, head 128, block 16) int8/fp8 per-token-head
4,866,048 bytes (page 33,792), int4 2,506,752 (page 17,408); DeepSeek-V3.2 (61 MLA + 61
indexer layers, block 64) fp8_ds_mla 12,305,408 (pages 41,984 + 8,448).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu.model_runner", reason="needs vLLM's Model Runner V2 (vLLM >= 0.30)")

from test_upstream_adapter import RUNNERS, assert_same, run_both  # noqa: E402  (tests/unit is on sys.path)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVQuantMode,
    MLAAttentionSpec,
    SlidingWindowSpec,
    SparseCacheRole,
    get_kv_quant_mode,
)
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE  # noqa: E402
from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend  # noqa: E402
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend  # noqa: E402
try:  # vLLM >= 0.32: the backend's customize_spec plus the kernel-block stride alignment
    from vllm.v1.worker.utils import customize_attention_spec  # noqa: E402
except ImportError:  # vLLM 0.30 / 0.31: the runners call the backend's customize_spec alone

    def customize_attention_spec(backend, spec):
        return backend.customize_spec(spec)

from vllm_kv_strategies.platforms.upstream.check import plan_upstream  # noqa: E402
from vllm_kv_strategies.platforms.upstream import facts as upstream_facts  # noqa: E402
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError  # noqa: E402
from vllm_kv_strategies.core.registry import default_registry  # noqa: E402
from vllm_kv_strategies.core.strategies import ModelDims  # noqa: E402

BF16, FP32, FP8, U8, I8 = torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.uint8, torch.int8
DEEPSEEK = ModelDims(kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128)
DEEPSEEK_HF = SimpleNamespace(model_type="deepseek_v32", kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128)
#: DeepSeek's MLA and indexer layers pass ``max_tp_shards=1`` where the spec has the field (vLLM 0.31+).
ONE_TP_SHARD = {"max_tp_shards": 1} if "max_tp_shards" in {f.name for f in dataclasses.fields(MLAAttentionSpec)} else {}
MODES = ("int8_per_token_head", "fp8_per_token_head", "int4_per_token_head")


def fields_table(part):
    return [(f.name, f.dtype, f.width, f.nbytes) for f in part.fields]


def per_token_head(cache_dtype: str, heads=8, head_size=128, block_size=16, cls=FullAttentionSpec, **kw):
    """A dense spec as vLLM's GPU runner makes it: the layer's spec, then the Triton backend's
    ``customize_spec`` (0.32+: through ``customize_attention_spec``, vllm/v1/worker/utils.py)."""
    spec = cls(
        block_size=block_size, num_kv_heads=heads, head_size=head_size, dtype=STR_DTYPE_TO_TORCH_DTYPE[cache_dtype],
        kv_quant_mode=get_kv_quant_mode(cache_dtype), **kw,
    )
    return customize_attention_spec(TritonAttentionBackend, spec)


def ds_mla(block_size=64):
    """DeepSeek V3.2's MLA layer with ``--kv-cache-dtype fp8_ds_mla`` (``MLAAttention.get_kv_cache_spec``
    fields, then FlashMLA sparse's ``customize_spec``)."""
    spec = MLAAttentionSpec(
        block_size=block_size, num_kv_heads=1, **ONE_TP_SHARD, head_size=576, dtype=U8, cache_dtype_str="fp8_ds_mla",
        kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"), state_content_bytes=656, is_index_group_leader=True,
    )
    return customize_attention_spec(FlashMLASparseBackend, spec)


def fp8_indexer(block_size=64):
    """``DeepseekV32IndexerCache.get_kv_cache_spec`` (vllm/model_executor/models/deepseek_v2.py)."""
    return MLAAttentionSpec(
        block_size=block_size, num_kv_heads=1, **ONE_TP_SHARD, head_size=132, dtype=U8, cache_role=SparseCacheRole.INDEXER
    )


# -- parts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cache_dtype", "values", "width", "cell"),
    [
        ("int8_per_token_head", I8, 128, 264),  # 128 + 4 + 128 + 4
        ("fp8_per_token_head", FP8, 128, 264),
        ("int4_per_token_head", U8, 64, 136),  # two 4-bit values per byte
    ],
)
def test_per_token_head_cell_fields_add_up_to_the_page(cache_dtype, values, width, cell):
    spec = per_token_head(cache_dtype)
    strategy = default_registry().resolve(spec)
    assert (strategy.name, strategy.kind(spec)) == ("quant_attention", cache_dtype)
    (part,) = strategy.page_parts(spec, ModelDims())
    assert (part.name, part.dtype, part.shape) == ("kv", spec.dtype, (16, 8, cell))
    assert fields_table(part) == [("k", values, width, width), ("k_scale", FP32, 1, 4), ("v", values, width, width), ("v_scale", FP32, 1, 4)]
    assert part.nbytes == 16 * 8 * cell == spec.page_size_bytes  # 33,792 / 17,408


def test_per_token_head_sliding_window_is_the_same_cell():
    spec = per_token_head("int8_per_token_head", cls=SlidingWindowSpec, sliding_window=128, heads=2)
    (part,) = default_registry().resolve(spec).page_parts(spec, ModelDims())
    assert part.nbytes == 16 * 2 * 264 == spec.page_size_bytes == 8448


def test_fp8_ds_mla_row_fields():
    spec = ds_mla()
    strategy = default_registry().resolve(spec)
    assert strategy.name == "fp8_ds_mla"
    (part,) = strategy.page_parts(spec, DEEPSEEK)
    assert (part.name, part.dtype, part.shape) == ("kv", U8, (64, 1, 656))
    # nope | scales | rope: not vllm-ascend's QSFA order (nope | rope | scales)
    assert fields_table(part) == [("nope", FP8, 512, 512), ("nope_scale", FP32, 4, 16), ("rope", BF16, 64, 128)]
    assert part.nbytes == 64 * 656 == spec.page_size_bytes == 41984


def test_fp8_indexer_planes():
    spec = fp8_indexer()
    parts = default_registry().resolve(spec).page_parts(spec, ModelDims())
    assert [(p.name, p.dtype, p.shape, p.nbytes) for p in parts] == [
        ("indexer_k", FP8, (64, 1, 128), 8192),
        ("indexer_scale", FP32, (64, 1, 1), 256),
    ]
    assert sum(p.nbytes for p in parts) == spec.page_size_bytes == 8448


# -- refused: modes no release defines a layout for --------------------------------------------


def test_mla_per_token_head_stays_refused():
    # MLACommonBackend.customize_spec defines a page (576 + 8 bytes per token) but no MLA backend reads it.
    from vllm.model_executor.layers.attention.mla_attention import MLACommonBackend

    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=I8, kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD)
    spec = MLACommonBackend.customize_spec(spec)
    assert spec.page_size_bytes == 16 * 584
    with pytest.raises(UnsupportedSpecError, match="INT8_PER_TOKEN_HEAD"):
        default_registry().resolve(spec).page_parts(spec, DEEPSEEK)


def test_per_token_head_with_k_and_v_of_different_widths_is_refused():
    # Triton's reader splits the cell in halves: a 128 / 64 cell has no reader.
    spec = per_token_head("int8_per_token_head", head_size_v=64)
    with pytest.raises(UnsupportedSpecError, match="head_size 128, head_size_v 64"):
        default_registry().resolve(spec).page_parts(spec, ModelDims())


def test_per_token_head_without_its_scales_is_a_layout_error():
    # The spec before customize_spec: no inline scales counted in its page.
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=I8, kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD)
    with pytest.raises(KVCacheLayoutError, match="state_content_bytes None"):
        default_registry().resolve(spec).page_parts(spec, ModelDims())


#: (mode name, extra spec fields) of the opaque dense modes; each runs where the release's
#: KVQuantMode has the member (ULTRAQUANT_4BIT is new in vLLM 0.32).
OPAQUE_DENSE_MODES = [
    (name, kw)
    for name, kw in (
        ("NVFP4", dict(num_head_slots=16, state_content_bytes=72)),
        ("TURBOQUANT_K8V4", dict(state_content_bytes=196)),
        ("ULTRAQUANT_4BIT", dict(state_content_bytes=72)),
    )
    if name in KVQuantMode.__members__
]


@pytest.mark.parametrize(("word", "kw"), OPAQUE_DENSE_MODES, ids=[name.lower() for name, _ in OPAQUE_DENSE_MODES])
def test_opaque_dense_modes_stay_refused_by_name(word, kw):
    kw = dict(kw, dtype=U8, kv_quant_mode=KVQuantMode[word])
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, **kw)
    with pytest.raises(UnsupportedSpecError, match=word):
        default_registry().resolve(spec).page_parts(spec, ModelDims())


def test_ds_mla_rows_of_other_layouts_stay_refused():
    nvfp4 = MLAAttentionSpec(
        block_size=64, num_kv_heads=1, head_size=576, dtype=U8, cache_dtype_str="nvfp4_ds_mla",
        kv_quant_mode=KVQuantMode.NVFP4_DS_MLA, state_content_bytes=352,
    )
    with pytest.raises(UnsupportedSpecError, match="nvfp4_ds_mla"):
        default_registry().resolve(nvfp4).page_parts(nvfp4, DEEPSEEK)
    # DeepSeek V4's 584-byte rows (448 nope + 128 rope + 8 ue8m0 scale bytes), 4 tokens per state
    v4 = MLAAttentionSpec(
        block_size=64, num_kv_heads=1, head_size=512, dtype=U8, cache_dtype_str="fp8_ds_mla",
        state_content_bytes=584, tokens_per_state=4,
    )
    with pytest.raises(UnsupportedSpecError, match="584 bytes per state of 4 tokens"):
        default_registry().resolve(v4).page_parts(v4, ModelDims(kv_lora_rank=448, qk_rope_head_dim=64))


@contextlib.contextmanager
def registered_kv_cache_dtype(name: str, mode):
    """``name`` registered through vLLM's own ``register_kv_cache_dtype`` (0.33+), removed after."""
    import vllm.config.cache as cache_module

    @cache_module.register_kv_cache_dtype(name)
    class Handler:
        def torch_dtype(self):
            return torch.uint8

        def quant_mode(self):
            return mode

    try:
        yield
    finally:
        cache_module._KV_CACHE_DTYPE_HANDLERS.pop(name, None)
        STR_DTYPE_TO_TORCH_DTYPE.pop(name, None)
        if name in cache_module.KV_CACHE_DTYPES:
            cache_module.KV_CACHE_DTYPES.remove(name)


def test_platform_registered_cache_dtype_is_refused_by_its_name():
    """vLLM 0.33 / 0.34's ``register_kv_cache_dtype``: a handler whose ``quant_mode()`` is
    ``KVQuantMode.CUSTOM`` (an alias of ``OCTAVE_K3V4``, so the mode cannot name it; 0.34 dropped
    ``is_custom_mode``) leaves the layout to the platform backend. vLLM 0.32 has neither the
    registry nor ``CUSTOM``: nothing is refused there."""
    import vllm.config.cache as cache_module

    cache_config = SimpleNamespace(cache_dtype="acme_int6")
    assert upstream_facts.custom_kv_cache_dtype(cache_config) is None
    if not hasattr(cache_module, "register_kv_cache_dtype") or not hasattr(KVQuantMode, "CUSTOM"):
        assert not hasattr(KVQuantMode, "CUSTOM")  # 0.32: a dtype cannot say it is custom
        return
    with registered_kv_cache_dtype("acme_int6", KVQuantMode.CUSTOM), \
            registered_kv_cache_dtype("acme_fp8", KVQuantMode.FP8_PER_TENSOR):  # reuses a generic mode
        assert upstream_facts.custom_kv_cache_dtype(cache_config) == "acme_int6"
        assert upstream_facts.custom_kv_cache_dtype(SimpleNamespace(cache_dtype="acme_fp8")) is None
        assert upstream_facts.custom_kv_cache_dtype(SimpleNamespace(cache_dtype="auto")) is None
        assert upstream_facts.custom_kv_cache_dtype(SimpleNamespace(cache_dtype="fp8")) is None  # vLLM's own, no handler
        refuse_acme_int6(cache_config)
    assert upstream_facts.custom_kv_cache_dtype(cache_config) is None  # unregistered again


def refuse_acme_int6(cache_config):
    """The plan refuses the registered custom dtype by its name before anything is allocated."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    with pytest.raises(UnsupportedSpecError, match="'acme_int6'"):
        plan_upstream(
            _config_of({"model.layers.0.self_attn.attn": spec}), None, {}, set(), None,
            bound_by_name=False, cache_config=cache_config,
        )


def _config_of(specs):
    from test_upstream_adapter import make_config

    return make_config(specs, "LBHNC", 1 << 20)[1]


# -- both upstream runners: equal to stock, no fallback ----------------------------------------


@pytest.fixture
def on(monkeypatch):
    """``KV_STRATEGIES=on``: a planning failure raises instead of falling back to stock."""
    monkeypatch.setenv("KV_STRATEGIES", "on")


def backing_bytes(kv):
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kv.values()}.values())


@pytest.mark.parametrize(("cache_dtype", "page"), [(m, p) for m, p in zip(MODES, (33792, 33792, 17408))])
@pytest.mark.parametrize("layout", ["LBHNC", "LBNHC"])
def test_per_token_head_qwen3_8b_matches_stock(cache_dtype, page, layout, version, on, kv_log):
    spec = per_token_head(cache_dtype)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(36)}
    config, stock, ours = run_both(specs, layout, memory=4 * 36 * page, version=version)
    assert config.num_blocks == 4
    assert_same(stock, ours)
    kv = ours[1]
    assert backing_bytes(kv) == backing_bytes(stock[1]) == 4 * 36 * page  # 4,866,048 / 2,506,752
    assert kv["model.layers.0.self_attn.attn"].shape == (4, 8, 16, page // (8 * 16))
    assert kv_log.at(logging.WARNING) == []
    assert any("quant_attention=36" in m for m in kv_log.at(logging.INFO)), kv_log.at(logging.INFO)


def test_fp8_ds_mla_with_fp8_indexer_matches_stock(version, on, kv_log):
    specs = {f"model.layers.{i}.self_attn.attn": ds_mla() for i in range(61)}
    specs |= {f"model.layers.{i}.self_attn.indexer.k_cache": fp8_indexer() for i in range(61)}
    config, stock, ours = run_both(specs, "LBHNC", memory=61 * 4 * (41984 + 8448), hf_config=DEEPSEEK_HF, version=version)
    assert config.num_blocks == 4
    assert_same(stock, ours)
    kv = ours[1]
    assert (tuple(kv["model.layers.0.self_attn.attn"].shape), kv["model.layers.0.self_attn.attn"].dtype) == ((4, 1, 64, 656), U8)
    assert tuple(kv["model.layers.0.self_attn.indexer.k_cache"].shape) == (4, 1, 64, 132)
    assert backing_bytes(kv) == backing_bytes(stock[1]) == 61 * 4 * 41984 + 61 * 4 * 8448 == 12_305_408
    assert kv_log.at(logging.WARNING) == []
    assert any("fp8_ds_mla=61" in m and "sparse_mla=61" in m for m in kv_log.at(logging.INFO)), kv_log.at(logging.INFO)


@pytest.fixture(params=RUNNERS)
def version(request):
    return request.param
