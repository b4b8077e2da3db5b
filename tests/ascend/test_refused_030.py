"""vllm-ascend 0.30 (cell ascend-0.30.0 only): the KV cache kinds stock 0.30 builds on paths of
its own, which the plugin refuses by name (``platforms.ascend.stock_only``): KVPP, DeepSeek V4.1,
GLM-5-next kpool tails, DeepSeek V4, layerwise KV cache reuse, sparse KV offload.

For each kind: stock's own build (``NPUModelRunner.initialize_kv_cache_tensors`` as its
``initialize_kv_cache`` calls it) on a runner configured for that kind, with what it allocates
(shapes, dtypes, bytes, which layers alias which buffer); and the plugin's refusal, by name,
before it allocates anything: ``KV_STRATEGIES=on`` raises it, ``auto`` leaves stock's build with
one warning."""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace

import pytest
import torch
import kv_compare as kc
import runner_factory as rf

from vllm_kv_strategies.platforms.ascend import allocate as ascend_alloc
from vllm_kv_strategies.platforms.ascend.stock_only import STOCK_ONLY_KINDS
from vllm_kv_strategies.errors import UnsupportedSpecError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's own KV cache paths only")

N = 4
MiB2 = 2 * 1024 * 1024  # vllm-ascend's transfer / KVPP / host buffer alignment


def refusal(kind: str) -> str:
    return f"the strategies do not build the vllm-ascend 0.30 layout of {kind} ({STOCK_ONLY_KINDS[kind]}); stock builds it"


def storage(t: torch.Tensor) -> tuple[int, int]:
    return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()


def views(value) -> list[tuple[tuple[int, ...], torch.dtype]]:
    return [(tuple(t.shape), t.dtype) for t in value]


def signature(kv: dict) -> tuple:
    """:func:`kv_compare.layout_signature` of caches bound in any of stock's forms: a tensor (V4.1),
    a tuple with absent entries (sparse offload's device K/V without ``keep_device_kv_cache``)."""
    return kc.layout_signature({
        name: tuple(t for t in (value if isinstance(value, (tuple, list)) else (value,)) if t is not None)
        for name, value in kv.items()
    })


def assert_refused_by_name(make, config, kind, monkeypatch, kv_log):
    """``on``: the refusal naming ``kind``, raised before any buffer is allocated; ``auto``:
    stock's build, identical to stock's own, with that refusal as the one warning."""
    assert str(kc.refused_before_allocating(make(), config, UnsupportedSpecError, monkeypatch)) == refusal(kind)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    want = kc.stock_init(make(), config)
    allocated = []
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *args: allocated.append(args))
    got = kc.plugin_init(make(), config)
    assert signature(got) == signature(want) and allocated == []
    [warning] = kv_log.at(logging.WARNING)
    assert warning == f"kv_strategies: falling back to stock KV cache for all layers: {refusal(kind)}"


# -- KVPP --------------------------------------------------------------------------------------


def kvpp_case(monkeypatch, num_layers=7):
    """DeepSeek-V3 MLA layers with ``additional_config.enable_kvpp`` at TP 2: KVPP size 2
    (``KVPPConfig.from_vllm_config``), this worker KVPP rank 0 of the layer-parallel group."""
    from vllm_ascend.ascend_config import KVPPConfig
    from vllm_ascend.distributed import parallel_state

    monkeypatch.setattr(parallel_state, "_KVPP", SimpleNamespace(rank_in_group=0))  # get_kvpp_group()
    mk = rf.deepseek_v3(num_blocks=N, num_layers=num_layers)

    def make():
        runner = mk.make_runner(additional_config={"enable_kvpp": True})
        runner.vllm_config.parallel_config.tensor_parallel_size = 2
        runner.ascend_config.kvpp_config = KVPPConfig.from_vllm_config(runner.vllm_config)
        assert runner.ascend_config.kvpp_config.size == 2
        return runner

    return make, mk.kv_cache_config


def test_stock_builds_kvpp(monkeypatch):
    """Rank 0 owns layers 0-3 (ceil(7 / 2)): a 2 MiB aligned buffer each, nope then rope; the
    other rank's layers 4-6 take turns in two shared scratch buffers."""
    make, config = kvpp_case(monkeypatch)
    kv = kc.stock_init(make(), config)
    page = 128 * 576 * 2
    layers = [kv[f"model.layers.{i}.self_attn.attn"] for i in range(7)]
    assert all(views(v) == [((N, 128, 1, 512), torch.bfloat16), ((N, 128, 1, 64), torch.bfloat16)] for v in layers)
    assert all(v[1].data_ptr() - v[0].data_ptr() == N * 128 * 512 * 2 for v in layers)
    assert all(v[0].data_ptr() % MiB2 == 0 for v in layers)
    owners = [storage(v[0]) for v in layers]
    assert len(set(owners[:4])) == 4 and owners[4] == owners[6] != owners[5]
    assert set(owners[4:]).isdisjoint(owners[:4]) and {n for _, n in owners} == {N * page + MiB2}


def test_kvpp_is_refused_by_name(monkeypatch, kv_log):
    make, config = kvpp_case(monkeypatch)
    assert_refused_by_name(make, config, "KVPP", monkeypatch, kv_log)


# -- layerwise KV cache reuse --------------------------------------------------------------------


def layerwise_case():
    """6 full-attention layers with a layerwise-reuse connector (AscendStoreConnector on the
    memcache backend, ``use_layerwise``, 2 shared buffers); the config rewritten by stock's own
    ``apply_layerwise_kv_cache_plan``, as ``initialize_kv_cache`` does before the build."""
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm_ascend.distributed.kv_transfer.kv_pool.ascend_store.layerwise_cache_layout import (
        apply_layerwise_kv_cache_plan,
    )

    mk = rf.gqa_model("layerwise", num_blocks=N, num_layers=6, num_kv_heads=2, head_dim=64)
    transfer = KVTransferConfig(kv_connector="AscendStoreConnector", kv_role="kv_both", kv_connector_extra_config={
        "backend": "memcache", "use_layerwise": True, "layerwise_num_shared_buffers": 2})

    def make():
        runner = mk.make_runner()
        object.__setattr__(runner.vllm_config, "kv_transfer_config", transfer)  # as _vllm_config_030 sets it
        runner.model_config.get_num_layers = lambda parallel_config: 6
        return runner

    config = copy.deepcopy(mk.kv_cache_config)
    apply_layerwise_kv_cache_plan(config, make().vllm_config)
    assert [(t.layers, t.layer_stride) for t in config.kv_cache_tensors] == [
        ([f"model.layers.{i}.self_attn.attn" for i in slot], 0) for slot in ((0,), (1, 3, 5), (2, 4))]
    return make, config


def test_stock_builds_layerwise_reuse():
    """Layer 0 keeps a buffer of its own; 1, 3, 5 alias one, 2 and 4 another: 3 buffers of
    N pages (each 2 MiB aligned: a KV transfer config) for 6 layers, K and V interleaved."""
    make, config = layerwise_case()
    kv = kc.stock_init(make(), config)
    page = 128 * 2 * 64 * 2 * 2
    owner = {name: storage(value[0]) for name, value in kv.items()}
    slots = [{owner[f"model.layers.{i}.self_attn.attn"] for i in slot} for slot in ((0,), (1, 3, 5), (2, 4))]
    assert [len(s) for s in slots] == [1, 1, 1] and len(set.union(*slots)) == 3
    assert {n for _, n in owner.values()} == {N * page + MiB2}
    for k, v in kv.values():
        assert views((k, v)) == [((N, 128, 2, 64), torch.bfloat16)] * 2 and v.data_ptr() - k.data_ptr() == page // 2


def test_layerwise_reuse_is_refused_by_name(monkeypatch, kv_log):
    make, config = layerwise_case()
    assert_refused_by_name(make, config, "layerwise KV cache reuse", monkeypatch, kv_log)


# -- sparse KV offload ----------------------------------------------------------------------------


class _CpuTorch:
    """torch, with ``empty(..., device="npu")`` on the CPU: the top-k scratch buffers of the
    offload manager (``allocate_kv_offload_topk_buffer_pair``); CPU torch has no "npu" device."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, device=None, **kwargs):
        return torch.empty(*args, **kwargs)


def offload_case(monkeypatch):
    """DeepSeek-V3.2 (2 layers) with sparse KV offload on a decode instance: the main MLA specs
    ``store_on_host`` (as ``get_kv_cache_spec`` emits them with ``sparse_kv_offload_enabled``),
    the runner's ``SparseKVOffloadConfig(enabled)``, TP rank 0. memfabric_hybrid (the pinned
    host allocator) is not installed here: the manager module gets a CPU stand-in for its
    ``offload.empty`` (no pinning) and for torch's "npu" device; nothing else of stock changes."""
    import dataclasses

    from vllm_ascend.ascend_config import SparseKVOffloadConfig
    from vllm_ascend.distributed.kv_transfer.sparse_kv_offload import sparse_kv_offload_manager as manager

    def host_empty(*args, pin_memory=False, **kwargs):
        return torch.empty(*args, **kwargs)

    monkeypatch.setattr(manager, "offload", SimpleNamespace(empty=host_empty), raising=False)
    monkeypatch.setattr(manager, "torch", _CpuTorch())
    base = rf.deepseek_v32(num_blocks=N, num_layers=2)
    specs = {n: dataclasses.replace(s, store_on_host=True) if n.endswith(".attn") else s for n, s in base.specs.items()}
    config = rf.build_kv_cache_config(specs, N)

    def make():
        runner = rf.make_runner(config, **base.runner_kwargs)
        runner.sparse_kv_offload_enabled = True
        runner.sparse_kv_offload_config = SparseKVOffloadConfig(enabled=True, topk_buffer_size=256)
        runner.tp_rank = 0
        return runner

    return make, config


def test_stock_builds_sparse_kv_offload(monkeypatch):
    """Main layers: no device K/V (keep_device_kv_cache off), host nope and rope in one host
    buffer at 2 MiB boundaries (1 + 1 + 1 chunks of 2 MiB), top-k buffers; indexers stay on
    the device, ``(k,)`` of N pages."""
    make, config = offload_case(monkeypatch)
    kv = kc.stock_init(make(), config)
    for i in range(2):
        k, v, k_host, v_host, topk_k, topk_v = kv[f"model.layers.{i}.self_attn.attn"]
        assert k is None and v is None
        assert views((k_host, v_host)) == [((N, 128, 1, 512), torch.bfloat16), ((N, 128, 1, 64), torch.bfloat16)]
        assert storage(k_host) == storage(v_host) and storage(k_host)[1] == 3 * MiB2
        assert v_host.data_ptr() - k_host.data_ptr() == MiB2
        assert [t.shape[1:] for t in (topk_k, topk_v)] == [(256, 1, 512), (256, 1, 64)]
        (indexer,) = kv[f"model.layers.{i}.self_attn.indexer.k_cache"]
        assert views((indexer,)) == [((N, 128, 1, 128), torch.bfloat16)] and storage(indexer)[1] == N * 128 * 128 * 2


def test_sparse_kv_offload_is_refused_by_name(monkeypatch, kv_log):
    make, config = offload_case(monkeypatch)
    assert_refused_by_name(make, config, "sparse KV offload", monkeypatch, kv_log)


# -- DeepSeek V4.1 ------------------------------------------------------------------------------------


def v41_case():
    """DeepSeek V4.1 on A2 (bf16 MLA, int8 indexer + fp16 scale), specs from vllm-ascend's own
    ``make_mla_cache_spec`` / ``make_index_cache_spec`` / ``make_swa_cache_spec`` and the
    compressor's ``CircularBufferSpec``: 2 long-context layers (compress ratio 4) and 4 SWA
    layers, planned by vllm-ascend's patched planner (``get_deepseek_v41_kv_cache_config``),
    on ``DeepseekV41CacheLayer`` modules with their ``DeepseekV41CacheBackend``."""
    from vllm.v1.kv_cache_interface import CircularBufferSpec
    from vllm_ascend.attention.dsa_v41 import DeepseekV41CacheBackend, DeepseekV41CacheLayer
    from vllm_ascend.models.deepseek_v41 import cache_config as v41

    specs = {}
    for i in range(2):
        prefix = f"model.layers.{i}.self_attn"
        specs[f"{prefix}.long_kv_cache"] = v41.make_mla_cache_spec(block_size=128, head_size=512, compress_ratio=4)
        specs[f"{prefix}.indexer.k_cache"] = v41.make_index_cache_spec(block_size=128, head_size=128, compress_ratio=4)
        specs[f"{prefix}.compressor.state_cache"] = CircularBufferSpec(
            block_size=v41.STATE_RING_ROWS, num_kv_heads=1, head_size=2 * 512, dtype=torch.float32, head_size_v=0)
    for i in range(4):
        specs[f"model.layers.{i}.self_attn.swa_cache"] = v41.make_swa_cache_spec(
            block_size=128, window_size=128, head_size=512, dtype=torch.bfloat16, cache_dtype="auto")
    config = rf.build_kv_cache_config(specs, N)
    layers = {name: rf._bare_layer(DeepseekV41CacheLayer, prefix=name, spec=spec) for name, spec in specs.items()}

    def make():
        return rf.make_runner(config, model_type="deepseek_v41", extra_layers=layers,
                              extra_backends=dict.fromkeys(layers, DeepseekV41CacheBackend))

    return make, config


def test_stock_builds_deepseek_v41():
    """One backing of N x 128 KiB per layer tuple (long KV, indexer, state, SWA of layers i and
    i + 2): every layer of a tuple views it from byte 0 (the indexer after the long KV page),
    dim 0 strided by the tuple's page; each layer bound as ``[cache]``."""
    make, config = v41_case()
    assert [(t.layer_stride, t.block_stride, t.size) for t in config.kv_cache_tensors] == [(0, 131072, N * 131072)] * 2
    runner = make()
    kv = kc.stock_init(runner, config)
    for i in range(2):
        p = f"model.layers.{i}.self_attn"
        tup = [kv[f"{p}.long_kv_cache"], *kv[f"{p}.indexer.k_cache"], kv[f"{p}.compressor.state_cache"],
               kv[f"{p}.swa_cache"], kv[f"model.layers.{i + 2}.self_attn.swa_cache"]]
        assert views(tup) == [((N, 32, 1, 512), torch.bfloat16), ((N, 32, 1, 128), torch.int8),
                              ((N, 32, 1, 1), torch.float16), ((N, 32, 1, 1024), torch.float32),
                              ((N, 128, 1, 512), torch.bfloat16), ((N, 128, 1, 512), torch.bfloat16)]
        assert {storage(t) for t in tup} == {storage(tup[0])} and storage(tup[0])[1] == N * 131072
        assert [t.data_ptr() - tup[0].data_ptr() for t in tup] == [0, 32768, 32768 + 4096, 0, 0, 0]
        assert all(t.stride(0) * t.element_size() == 131072 for t in tup)
    assert storage(kv["model.layers.0.self_attn.swa_cache"]) != storage(kv["model.layers.1.self_attn.swa_cache"])
    modules = runner.compilation_config.static_forward_context
    assert all(modules[name].kv_cache == [cache] for name, cache in kv.items())


def test_deepseek_v41_is_refused_by_name(monkeypatch, kv_log):
    make, config = v41_case()
    assert_refused_by_name(make, config, "DeepSeek V4.1", monkeypatch, kv_log)


# -- DeepSeek V4 --------------------------------------------------------------------------------------


def dsv4_case():
    """DeepSeek V4 on A2 (bf16, block 128): layers 0 and 1 compress by 4 (indexer + its
    compressor state), layer 2 by 128, each with a compressor state and an SWA cache. The cache
    layers are vllm-ascend's own (``AscendCompressorStateCache``, ``AscendDeepseekV4IndexerCache``,
    ``AscendDeepseekV4SWACache``) built in a ``VllmConfig`` and asked for their specs and
    backends; the main attention spec is the one the Ascend sparse attention layer emits there
    (``AscendMLAAttentionSpec``, block ``storage block x ratio``, ``model_version`` deepseek_v4:
    its constructor needs the whole model). Planned by vllm-ascend's DSV4 planner
    (``_get_kv_cache_config_deepseek_v4_main``: one backing, two layer tuples)."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm_ascend.attention.dsa_v1 import AscendDSAC4Backend, AscendDSAC128Backend
    from vllm_ascend.core.kv_cache_interface import AscendMLAAttentionSpec
    from vllm_ascend.models.deepseek_v4.compressor import AscendCompressorStateCache
    from vllm_ascend.models.deepseek_v4.indexer import AscendDeepseekV4IndexerCache, get_indexer_k_dtype
    from vllm_ascend.models.deepseek_v4.model import AscendDeepseekV4SWACache
    from vllm_ascend.models.layer.attention.layer import DSV4_BLOCK_SIZES

    vllm_config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    cache = vllm_config.cache_config
    cache.block_size = 128
    storage_bs, _, c4_state_bs, c128_state_bs = DSV4_BLOCK_SIZES[128][0]
    ratios = (4, 4, 128)
    with set_current_vllm_config(vllm_config):  # the cache layers register in its forward context
        for i, ratio in enumerate(ratios):
            prefix = f"model.layers.{i}.self_attn"
            coff = 1 + (ratio == 4)  # vLLM's Compressor: overlapping windows for ratio 4
            AscendCompressorStateCache(state_dim=2 * coff * 512, dtype=torch.float32, compress_ratio=ratio,
                                       block_size=c4_state_bs if ratio == 4 else c128_state_bs,
                                       prefix=f"{prefix}.compressor.state_cache")
            if ratio == 4:
                AscendDeepseekV4IndexerCache(head_dim=128, dtype=get_indexer_k_dtype(vllm_config),
                                             prefix=f"{prefix}.indexer.k_cache", cache_config=cache, compress_ratio=4)
                AscendCompressorStateCache(state_dim=2 * 2 * 128, dtype=torch.float32, compress_ratio=4,
                                           block_size=c4_state_bs, prefix=f"{prefix}.indexer.compressor.state_cache")
            AscendDeepseekV4SWACache(head_dim=512, window_size=128, dtype=torch.bfloat16,
                                     prefix=f"{prefix}.swa_cache", cache_config=cache)
    layers = dict(vllm_config.compilation_config.static_forward_context)
    specs = {name: layer.get_kv_cache_spec(vllm_config) for name, layer in layers.items()}
    backends = {name: layer.get_attn_backend() for name, layer in layers.items()}
    for i, ratio in enumerate(ratios):
        name = f"model.layers.{i}.self_attn"
        specs[name] = AscendMLAAttentionSpec(block_size=storage_bs * ratio, num_kv_heads=1, head_size=512,
                                             dtype=torch.bfloat16, model_version="deepseek_v4", cache_dtype_str="auto",
                                             tokens_per_state=ratio)
        backends[name] = AscendDSAC4Backend if ratio == 4 else AscendDSAC128Backend
    config = rf.build_kv_cache_config(specs, N)

    def make():
        runner = rf.make_runner(config, model_type="deepseek_v4", extra_layers=layers, extra_backends=backends)
        runner.use_compress = True  # NPUModelRunner.__init__: the HF config has compress_ratios
        hf = runner.model_config.hf_text_config
        hf.num_hidden_layers, hf.compress_ratios = len(ratios), list(ratios)
        return runner

    return make, config


def test_stock_builds_deepseek_v4():
    """One backing (the planner's two tuples of N x (16640 + 131072) bytes) for all 13 cache
    layers: each views its region page by page, dim 0 strided by its page (16640 for the C4
    indexer and its state, 131072 for the rest); the indexer key and its fp16 scale in one
    page; layers of different groups share a tuple's slot."""
    make, config = dsv4_case()
    tuple_bytes = N * (16640 + 131072)
    assert {t.size for t in config.kv_cache_tensors} == {2 * tuple_bytes}
    kv = kc.stock_init(make(), config)
    assert len(kv) == 13 and {storage(t)[1] for v in kv.values() for t in v} == {2 * tuple_bytes}
    assert len({storage(t) for v in kv.values() for t in v}) == 1
    base = kv["model.layers.0.self_attn.indexer.k_cache"][0].data_ptr()

    def at(name):
        return [(tuple(t.shape), t.dtype, t.stride(0) * t.element_size(), t.data_ptr() - base) for t in kv[name]]

    main = ((N, 128, 1, 512), torch.bfloat16, 131072)
    assert at("model.layers.0.self_attn") == [(*main, 4 * 16640)]
    assert at("model.layers.1.self_attn") == [(*main, tuple_bytes + 4 * 16640)]
    assert at("model.layers.2.self_attn") == [(*main, 4 * 16640)]
    assert at("model.layers.0.self_attn.indexer.k_cache") == [
        ((N, 128, 1, 128), torch.int8, 16640, 0), ((N, 128, 1, 1), torch.float16, 16640, 128 * 128)]
    assert at("model.layers.0.self_attn.indexer.compressor.state_cache") == [((N, 8, 1, 512), torch.float32, 16640, 0)]
    assert at("model.layers.0.self_attn.compressor.state_cache") == [((N, 8, 1, 2048), torch.float32, 131072, 4 * 16640)]
    assert at("model.layers.2.self_attn.compressor.state_cache") == [((N, 32, 1, 1024), torch.float32, 131072, 4 * 16640)]
    assert at("model.layers.1.self_attn.swa_cache") == [(*main, 4 * 16640)]


def test_deepseek_v4_is_refused_by_name(monkeypatch, kv_log):
    make, config = dsv4_case()
    assert_refused_by_name(make, config, "DeepSeek V4", monkeypatch, kv_log)


# -- GLM-5-next kpool tails ------------------------------------------------------------------------------


def glm5_next_case():
    """A GLM-5-next-like hybrid: MLA layers 0 and 2 (512 + 64, ``model_version`` glm5_next,
    ``indexes_kv_by_block_stride``, as the runner's ``get_kv_cache_spec`` emits them for the
    layer GLM-Next marks), each with vllm-ascend's own ``Glm5NextIndexerCache`` (bf16 keys of
    128 compressed by the kpool of 4) and ``Glm5NextTailCache`` (the fp32 kpool tail,
    ``AscendIndexerKPoolTailSpec``), KDA layers 1 and 3; planned by vllm-ascend's GLM-Next
    planner (``get_glm5_next_kv_cache_config``: one tensor per physical slot)."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm_ascend.core.kv_cache_interface import AscendMLAAttentionSpec
    from vllm_ascend.models.glm5next.kv_cache import Glm5NextIndexerCache, Glm5NextTailCache

    vllm_config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    vllm_config.cache_config.block_size = 128
    with set_current_vllm_config(vllm_config):  # the cache layers register in its forward context
        for i in (0, 2):
            prefix = f"model.layers.{i}.self_attn.indexer"
            Glm5NextIndexerCache(head_dim=128, dtype=torch.bfloat16, cache_role="indexer", prefix=f"{prefix}.k_cache",
                                 cache_config=vllm_config.cache_config, compress_ratio=4)
            Glm5NextTailCache(head_dim=128, dtype=torch.float32, prefix=f"{prefix}.tail_cache", compress_ratio=4,
                              ring_capacity=4)
    layers = dict(vllm_config.compilation_config.static_forward_context)
    specs = {
        f"model.layers.{i}.self_attn.attn": AscendMLAAttentionSpec(
            block_size=128, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, cache_dtype_str="auto",
            model_version="glm5_next", indexes_kv_by_block_stride=True, tokens_per_state=1)
        for i in (0, 2)
    }
    specs.update({name: layer.get_kv_cache_spec(vllm_config) for name, layer in layers.items()})
    specs.update(dict.fromkeys(("model.layers.1.self_attn", "model.layers.3.self_attn"), rf.kda_spec()))
    config = rf.build_kv_cache_config(specs, N)
    backends = {name: layer.get_attn_backend() for name, layer in layers.items()}

    def make():
        return rf.make_runner(config, model_type="glm5_next", extra_layers=layers, extra_backends=backends)

    return make, config


def test_stock_builds_glm5_next_kpool_tails():
    """Two main slots of N x 542720 bytes (the KDA page; MLA layer i and KDA layer i + 1 alias
    one, nope then rope in each page) and two small slots of N x 8192 bytes (layer i's
    compressed indexer and its kpool tail alias one); every view strided by its slot's page."""
    make, config = glm5_next_case()
    kv = kc.stock_init(make(), config)
    for i in (0, 2):
        nope, rope = kv[f"model.layers.{i}.self_attn.attn"]
        conv, recurrent = kv[f"model.layers.{i + 1}.self_attn"]  # KDA: a 2-list (conv, recurrent)
        (indexer,) = kv[f"model.layers.{i}.self_attn.indexer.k_cache"]
        (tail,) = kv[f"model.layers.{i}.self_attn.indexer.tail_cache"]
        assert views((nope, rope, conv, recurrent, indexer, tail)) == [
            ((N, 128, 1, 512), torch.bfloat16), ((N, 128, 1, 64), torch.bfloat16), ((N, 3, 3072), torch.bfloat16),
            ((N, 8, 128, 128), torch.float32), ((N, 32, 1, 128), torch.bfloat16), ((N, 2, 4, 128), torch.float32)]
        assert {storage(t) for t in (nope, rope, conv, recurrent)} == {storage(nope)} and storage(nope)[1] == N * 542720
        assert storage(indexer) == storage(tail) and storage(tail)[1] == N * 8192
        assert [t.data_ptr() - nope.data_ptr() for t in (rope, conv, recurrent)] == [131072, 0, 3 * 3072 * 2]
        assert all(t.stride(0) * t.element_size() == 542720 for t in (nope, rope, conv, recurrent))
        assert all(t.stride(0) * t.element_size() == 8192 for t in (indexer, tail))
    assert storage(kv["model.layers.0.self_attn.attn"][0]) != storage(kv["model.layers.2.self_attn.attn"][0])


def test_glm5_next_kpool_tails_are_refused_by_name(monkeypatch, kv_log):
    make, config = glm5_next_case()
    assert_refused_by_name(make, config, "GLM-5-next", monkeypatch, kv_log)


def test_kinds_are_named_as_stock_decides_them():
    """Zero-stride tensors are layerwise reuse only with a layerwise-reuse connector (V4.1 and
    GLM-5-next plan zero-stride tensors of their own); DeepSeek V4 also by its model type, whose
    binding order stock keeps for itself; a plain config is none of the kinds."""
    from vllm_kv_strategies.platforms.ascend.stock_only import stock_only_kind

    mk = rf.gqa_model("plain", num_blocks=N, num_layers=2, num_kv_heads=2, head_dim=64)
    assert stock_only_kind(mk.make_runner(), mk.kv_cache_config) is None
    dsv4 = mk.make_runner(model_type="deepseek_v4")
    assert stock_only_kind(dsv4, mk.kv_cache_config) == refusal("DeepSeek V4").removeprefix("the strategies do not build the ")
    for case, kind in ((v41_case, "DeepSeek V4.1"), (glm5_next_case, "GLM-5-next")):
        make, config = case()
        assert any(t.layer_stride == 0 and len(t.layers) > 1 for t in config.kv_cache_tensors)
        assert stock_only_kind(make(), config) == refusal(kind).removeprefix("the strategies do not build the ")
