"""Build a real vllm-ascend ``NPUModelRunner`` (no ``__init__``) that can run the stock KV cache
initialisation on CPU, plus builders of real ``KVCacheConfig`` objects for real models, for each
vllm-ascend release the suite covers (0.11.0, 0.13.0, 0.18.0, 0.23.0, 0.30.0).

The NPU stubs (``npu_stubs.install``) must be installed before this module is imported; the
``conftest.py`` next to it does that.

``make_runner`` sets the instance attributes that the installed release's stock KV cache
initialisation reads (:data:`RUNNER_ATTRS`, traced per release by ``test_runner_factory``: see
STOCK_0.23.md for 0.23 and the table below), with real vLLM / vllm-ascend objects wherever the
code type-checks them:

* ``attn_groups``: real ``vllm.v1.worker.utils.AttentionGroup`` with the release's Ascend
  backends;
* ``compilation_config.static_forward_context``: real layer classes (``Attention``,
  ``MLAAttention``, the release's gated delta net layer) created with ``__new__`` and only the
  fields the KV code reads; ``bind_kv_cache`` sets their ``kv_cache``;
* ``vllm_config.kv_transfer_config``: a real ``KVTransferConfig`` when ``kv_transfer=True``.

What the releases' stock code reads beyond 0.23's (traced):

* 0.11: ``attn_backend`` (the runner's default backend: dense, MLA or sparse shapes),
  ``model_config.is_deepseek_mla``, ``vllm_config.additional_config``,
  ``hf_text_config.qk_rope_head_dim``; no ``shared_kv_cache_layers`` (its runner only creates it
  for models with cross-layer KV sharing), no ``_allocate`` / ``_reshape`` halves;
* 0.13: ``attn_backend``, ``model_config.use_mla``, ``hf_text_config.kv_lora_rank`` /
  ``qk_rope_head_dim``;
* 0.18: ``is_kv_consumer``, ``use_sparse_c8_indexer``;
* 0.30: ``ascend_config`` (``kvpp_config.size``, ``xlite_graph_config.enabled``), ``dcp_size``
  (through the ``use_dcp`` property), ``sparse_kv_offload_enabled``; no ``attn_backend`` /
  ``enable_hamming_sparse``. ``use_hybrid_blocks`` is read by the hybrid attention view.

The config builders derive everything the way vLLM + vllm-ascend of the installed release do at
start-up: per-layer specs as that release's ``NPUModelRunner.get_kv_cache_spec`` emits them
(DeepSeek V3.2 as a plain ``FullAttentionSpec`` of twice the MLA page in 0.11 / 0.13), GDN state
shapes/dtypes from vLLM's gated-delta-net calculators (through ``Qwen3NextForCausalLM`` where it
imports; vLLM 0.11's needs triton), the hybrid attention block size / Mamba page padding from the
release's patched ``HybridAttentionMambaModelConfig`` (0.11 / 0.13: attention page >= Mamba
page, Mamba padded to it; 0.18+: K page == ssm page, padded page = 2 K pages + conv), and the
groups + tensors from vLLM's planner (``get_kv_cache_groups`` + ``get_kv_cache_config_from_groups``
through ``core.specs.kv_cache_planner()``, the two planning steps of ``get_kv_cache_configs``, with
``num_gpu_blocks_override`` = the requested ``num_blocks``; the max-model-len memory check of
``get_kv_cache_configs`` is skipped so that any small ``num_blocks`` works).

Importing ``vllm_ascend.worker.model_runner_v1`` (done here) applies vllm-ascend's global
platform patches and worker patches process-wide as in a real vllm-ascend process (0.23:
model_runner_v1 -> patch.worker.patch_draft_quarot -> patch.worker -> patch.platform; 0.30 no
longer does, so this module imports ``vllm_ascend.patch.platform`` and ``vllm_ascend.patch.worker``
itself there), so the vLLM planning code used here is the Ascend-patched one (0.30:
``patch_kv_cache_utils`` replaces ``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups``).

0.30 (vLLM 0.30's ``KVCacheTensor``: ``layers``, ``layer_stride``, ``block_stride``, ``offset``,
``size`` the whole backing): configs are planned with a real ``VllmConfig`` on the CPU device and
the ``LBNHC`` KV cache layout, and stock is called as its ``initialize_kv_cache`` calls it:
``initialize_kv_cache_tensors(cfg, kernel_block_sizes=..., kv_cache_allocation_context=None)``
(:func:`stock_kwargs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import inspect
from collections import defaultdict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Iterable

import torch
from torch import nn
from vllm.config.kv_transfer import KVTransferConfig
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    KVCacheTensor,
    MambaSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from vllm.v1.worker.utils import AttentionGroup
from vllm_ascend.attention.attention_v1 import AscendAttentionBackend
from vllm_ascend.attention.mla_v1 import AscendMLABackend
from vllm_ascend.attention.sfa_v1 import AscendSFABackend
from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

from vllm_kv_strategies.versions import release
from vllm_kv_strategies.core.specs import kv_cache_planner

__all__ = [
    "ASCEND_VERSION",
    "AscendMLAAttentionSpec",
    "KVCacheConfig",
    "KVCacheGroupSpec",
    "KVCacheTensor",
    "LEGACY_SPARSE",
    "MLAAttentionSpec",
    "ModelKV",
    "NPUModelRunner",
    "RUNNER_ATTRS",
    "build_kv_cache_config",
    "deepseek_v3",
    "deepseek_v32",
    "fa_quant_config",
    "gdn_mamba_type",
    "make_runner",
    "qwen3_8b",
    "sliding_window_beside_full",
    "stock_initializer",
    "qwen3_next",
    "qwen35_style",
    "gqa_model",
    "mamba_hybrid",
    "minimax_m1",
    "linear_attention_mamba_type",
    "installed_plugin_sizing",
    "ALIGNMENT",
    "t_hyb_toy",
    "kda_spec",
]

ASCEND_VERSION = importlib.metadata.version("vllm-ascend")  # as installed: 0.23.0.post1
#: (major, minor) of the base release, as the plugin compares releases (versions.release).
RELEASE = tuple(int(x) for x in release(ASCEND_VERSION).split(".")[:2])
if RELEASE >= (0, 30):
    # 0.30's model_runner_v1 no longer imports them; a worker process applies both
    # (vllm_ascend.utils.adapt_patch): the planner (patch_kv_cache_utils) and the binder
    # (patch_bind_kv_cache: layer.kv_cache = cache, not vLLM 0.30's layer.bind_kv_cache).
    importlib.import_module("vllm_ascend.patch.platform")
    importlib.import_module("vllm_ascend.patch.worker")
ALIGNMENT = 2 * 1024 * 1024  # vllm-ascend's transfer alignment (_align_memory callers)
BF16 = torch.bfloat16


def _first(*paths: str) -> Any:
    """The first importable ``module:attr`` of ``paths`` (None if none is)."""
    for path in paths:
        module, _, attr = path.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    return None


# --------------------------------------------------------------------------------------------
# the release's classes

Attention = _first("vllm.model_executor.layers.attention:Attention", "vllm.attention.layer:Attention")
# vLLM 0.11 has no MLA layer class: the MLA latent lives in an ``Attention(use_mla=True)``.
MLAAttention = _first(
    "vllm.model_executor.layers.attention:MLAAttention", "vllm.attention.layer:MLAAttention"
) or Attention
#: vLLM's own MLAAttentionSpec (vllm-ascend 0.18 rebinds the module attribute to its subclass).
MLAAttentionSpec = next(
    c for c in importlib.import_module("vllm.v1.kv_cache_interface").MLAAttentionSpec.__mro__
    if c.__name__ == "MLAAttentionSpec" and c.__module__ == "vllm.v1.kv_cache_interface"
)
#: vllm-ascend's MLA spec with ``sparse_head_dim`` (0.18: a platform patch; 0.23: core); None
#: before 0.18, where DeepSeek V3.2 layers get a plain FullAttentionSpec (LEGACY_SPARSE).
AscendMLAAttentionSpec = _first(
    "vllm_ascend.core.kv_cache_interface:AscendMLAAttentionSpec",
    "vllm_ascend.patch.platform.patch_kv_cache_interface:AscendMLAAttentionSpec",
)
LEGACY_SPARSE = AscendMLAAttentionSpec is None
GDNBackend = _first(
    "vllm_ascend.ops.gdn_attn_builder:AscendGDNAttentionBackend",
    "vllm.v1.attention.backends.gdn_attn:GDNAttentionBackend",
)


class _GatedDeltaNetStandIn(nn.Module):
    """Forward-context entry of a GDN layer where the release's class cannot be imported on
    CPU (vLLM 0.11's qwen3_next needs triton); the KV code only sets its ``kv_cache``."""


GDNLayer = next(
    (
        cls
        for cls in map(
            _first,
            (
                "vllm_ascend.ops.gdn:AscendGatedDeltaNetAttention",
                "vllm_ascend.patch.worker.patch_qwen3_next:AscendQwen3Next_GatedDeltaNet",
                "vllm.model_executor.models.qwen3_next:Qwen3NextGatedDeltaNet",
            ),
        )
        if cls is not None and not inspect.isabstract(cls)  # 0.13's Ascend class is abstract
    ),
    _GatedDeltaNetStandIn,
)


#: vLLM's MiniMax lightning (linear) attention layer class (its module moved between releases).
MiniMaxLinearLayer = _first(
    "vllm.model_executor.layers.mamba.linear.minimax_linear_attn:MiniMaxText01LinearAttention",
    "vllm.model_executor.layers.mamba.linear_attn:MiniMaxText01LinearAttention",
    "vllm.model_executor.models.minimax_text_01:MiniMaxText01LinearAttention",
)


def linear_attention_mamba_type() -> Any:
    """``MambaSpec.mamba_type`` of a MiniMax linear attention layer in this release (the layer
    class's ``mamba_type``: ``"linear_attention"``, 0.23 ``MambaAttentionBackendEnum.LINEAR``)."""
    if MiniMaxLinearLayer is None:
        return "linear_attention"
    return _bare_layer(MiniMaxLinearLayer).mamba_type


def gdn_mamba_type() -> Any:
    """``MambaSpec.mamba_type`` of a Qwen3-Next GDN layer in this release: the layer class's
    ``mamba_type`` (0.13 / 0.18: ``"gdn_attention"``; 0.23: ``MambaAttentionBackendEnum.GDN_ATTN``);
    vLLM 0.11's Qwen3NextGatedDeltaNet (not importable here) says ``"linear_attention"``."""
    if GDNLayer is _GatedDeltaNetStandIn:
        return "linear_attention"
    return _bare_layer(GDNLayer).mamba_type


# Instance attributes the stock KV initialisation of each release reads (traced by
# test_runner_factory with a tracing subclass on Qwen3-Next TP4, DeepSeek-V3 and DeepSeek-V3.2).
# kv_caches is appended to; hybrid_with_attn_and_mamba is written by the 0.18+ allocator.
_COMMON_ATTRS = (
    "device",
    "vllm_config",
    "compilation_config",
    "kv_cache_config",
    "attn_groups",
    "use_hybrid_blocks",
    "runner_only_attn_layers",
    "kv_caches",
)
RUNNER_ATTRS_BY_RELEASE = {
    (0, 11): _COMMON_ATTRS + ("model_config", "attn_backend"),
    (0, 13): _COMMON_ATTRS + ("model_config", "shared_kv_cache_layers", "attn_backend", "use_sparse"),
    (0, 18): _COMMON_ATTRS
    + ("model_config", "shared_kv_cache_layers", "use_sparse", "is_kv_consumer", "use_sparse_c8_indexer"),
    (0, 23): _COMMON_ATTRS
    + ("model_config", "shared_kv_cache_layers", "use_compress", "use_sparse", "enable_hamming_sparse"),
    (0, 30): _COMMON_ATTRS
    + (
        "model_config",
        "shared_kv_cache_layers",
        "use_compress",
        "use_sparse",
        "ascend_config",
        "dcp_size",
        "sparse_kv_offload_enabled",
    ),
}
RUNNER_ATTRS = RUNNER_ATTRS_BY_RELEASE[RELEASE]


def stock_initializer(runner: NPUModelRunner) -> str:
    """The stock method ``NPUModelRunner.initialize_kv_cache`` of this release calls: 0.11 picks
    the sparse or the DeepSeek MLA initialisation by ``use_sparse`` / ``is_deepseek_mla``; later
    releases have one."""
    if RELEASE > (0, 11):
        return "initialize_kv_cache_tensors"
    if runner.use_sparse:
        return "initialize_kv_cache_tensors_deepseek_sfa"
    if runner.model_config.is_deepseek_mla:
        return "initialize_kv_cache_tensors_deepseek_mla"
    return "initialize_kv_cache_tensors"


def kernel_block_sizes(runner: NPUModelRunner, kv_cache_config: KVCacheConfig) -> list[int]:
    """Each KV cache group's kernel block size as stock 0.30 ``initialize_kv_cache`` computes it
    (vLLM's ``prepare_kernel_block_sizes`` over the runner's attention groups: the common
    supported kernel block size of the group's backends, 128 for Ascend attention; a Mamba
    group's own block size)."""
    from vllm.v1.worker.utils import prepare_kernel_block_sizes  # noqa: PLC0415 (0.30+)

    return prepare_kernel_block_sizes(kv_cache_config, runner.attn_groups)


def stock_kwargs(runner: NPUModelRunner, kv_cache_config: KVCacheConfig) -> dict[str, Any]:
    """The keyword arguments the release's ``initialize_kv_cache`` passes to the method
    :func:`stock_initializer` names, besides the config: none up to 0.23; from 0.30
    ``kernel_block_sizes`` (:func:`kernel_block_sizes`) and ``kv_cache_allocation_context=None``
    (no sleep mode)."""
    if RELEASE < (0, 30):
        return {}
    return {"kernel_block_sizes": kernel_block_sizes(runner, kv_cache_config), "kv_cache_allocation_context": None}


# --------------------------------------------------------------------------------------------
# fake layers that accept bind_kv_cache


def _bare_layer(cls: type, **fields: Any) -> nn.Module:
    """An instance of a real layer class without running its __init__."""
    layer = cls.__new__(cls)
    nn.Module.__init__(layer)
    for key, value in fields.items():
        setattr(layer, key, value)
    layer.kv_cache = []  # bind_kv_cache replaces this
    return layer


def _kind_of(spec: KVCacheSpec, attention_kind: str | None) -> str:
    """``mamba``, ``sfa`` (sparse MLA), ``mla`` or ``attn``: the layer / backend kind of a spec.
    ``attention_kind`` overrides it for every attention spec (legacy sparse layers carry a plain
    FullAttentionSpec but are MLA layers with the sparse backend)."""
    if isinstance(spec, MambaSpec):
        return "mamba"
    if type(spec).__name__ == "AscendSFAIndexerCacheSpec":  # 0.30: DeepSeek V3.2's indexer cache layer
        return "indexer"
    if attention_kind is not None:
        return attention_kind
    if getattr(spec, "sparse_head_dim", None) is not None:
        return "sfa"
    return "mla" if isinstance(spec, MLAAttentionSpec) else "attn"


def _layer_for(
    name: str, kind: str, spec: KVCacheSpec, mla_dims: tuple[int, int], mamba_layer: type | None = None
) -> nn.Module:
    if kind == "mamba":
        return _bare_layer(mamba_layer or GDNLayer, prefix=name)
    if kind == "indexer":
        from vllm.model_executor.models.deepseek_v2 import DeepseekV32IndexerCache  # noqa: PLC0415

        return _bare_layer(DeepseekV32IndexerCache, prefix=name, head_dim=spec.head_size, dtype=spec.dtype)
    if kind in ("mla", "sfa"):
        sparse = getattr(spec, "sparse_head_dim", None)
        packed = getattr(spec, "cache_sparse_sfa_c8", False)  # sparse_head_dim[0] is the packed row
        kv_lora_rank, rope = (sparse[0], sparse[1]) if sparse and not packed else mla_dims
        return _bare_layer(MLAAttention, layer_name=name, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=rope,
                           attn_backend=_backend_for(kind, spec))
    return _bare_layer(Attention, layer_name=name, attn_backend=_backend_for(kind, spec))  # get_attn_backend() reads it


def _backend_for(kind: str, spec: KVCacheSpec, mamba_layer: type | None = None) -> type:
    if kind == "mamba":
        if mamba_layer is not None:  # the layer's own (MambaBase.get_attn_backend)
            return _bare_layer(mamba_layer).get_attn_backend()
        if spec.mamba_type == gdn_mamba_type():
            return GDNBackend
        from vllm.v1.attention.backends.registry import get_mamba_attn_backend  # noqa: PLC0415 (0.23)

        return get_mamba_attn_backend(spec.mamba_type)
    if kind == "indexer":
        from vllm_ascend.attention.indexer import AscendSFAIndexerBackend  # noqa: PLC0415 (0.30)

        return AscendSFAIndexerBackend
    return {"sfa": AscendSFABackend, "mla": AscendMLABackend}.get(kind, AscendAttentionBackend)


def _layer_specs(kv_cache_config: KVCacheConfig) -> dict[str, KVCacheSpec]:
    out: dict[str, KVCacheSpec] = {}
    for group in kv_cache_config.kv_cache_groups:
        for name in group.layer_names:
            spec = group.kv_cache_spec
            if isinstance(spec, UniformTypeKVCacheSpecs):
                spec = spec.kv_cache_specs[name]
            out[name] = spec
    return out


_GROUP_FIELDS = {f.name for f in dataclasses.fields(AttentionGroup)}


def _attn_groups(
    kv_cache_config: KVCacheConfig,
    attention_kind: str | None,
    mamba_layer: type | None = None,
    backends: dict[str, type] | None = None,
) -> list[list[AttentionGroup]]:
    """One AttentionGroup per (backend, layer spec) inside each KV cache group, as
    NPUModelRunner.initialize_attn_backend builds them (metadata builders left empty).
    ``backends``: layer -> its backend where given (the layer's own ``get_attn_backend()``)."""
    backends = backends or {}
    layer_specs = _layer_specs(kv_cache_config)
    result = []
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        by_key: dict[tuple[type, KVCacheSpec], list[str]] = defaultdict(list)
        for name in group.layer_names:
            spec = layer_specs[name]
            backend = backends.get(name) or _backend_for(_kind_of(spec, attention_kind), spec, mamba_layer)
            by_key[(backend, spec)].append(name)
        groups = []
        for (backend, spec), names in by_key.items():
            kwargs = dict(backend=backend, layer_names=names, kv_cache_spec=spec, metadata_builders=[])
            if "kv_cache_group_id" in _GROUP_FIELDS:
                kwargs["kv_cache_group_id"] = gid
            groups.append(AttentionGroup(**kwargs))
        result.append(groups)
    return result


# --------------------------------------------------------------------------------------------
# the runner


def _tracing_subclass(base: type) -> type:
    class TracingNPUModelRunner(base):  # type: ignore[misc, valid-type]
        def __getattribute__(self, name):
            d = object.__getattribute__(self, "__dict__")
            if name in d and name != "_reads":
                d["_reads"].add(name)
            return object.__getattribute__(self, name)

    return TracingNPUModelRunner


def make_runner(
    kv_cache_config: KVCacheConfig,
    *,
    kv_transfer: bool = False,
    kv_role: str = "kv_producer",
    kv_connector: str = "MooncakeConnectorV1",
    mla_dims: tuple[int, int] = (512, 64),
    model_type: str = "llama",
    index_head_dim: int | None = None,
    attention_kind: str | None = None,
    runner_only_attn_layers: Iterable[str] = (),
    shared_kv_cache_layers: dict[str, str] | None = None,
    extra_layers: dict[str, nn.Module] | None = None,
    additional_config: dict[str, Any] | None = None,
    quant_config: Any = None,
    model_dtype: torch.dtype = BF16,
    trace: bool = False,
    device: str | torch.device = "cpu",
    mamba_layer: type | None = None,
    paged_attention: bool = False,
    dcp_size: int = 1,
    extra_backends: dict[str, type] | None = None,
) -> NPUModelRunner:
    """A real NPUModelRunner made with ``__new__`` carrying what the stock KV code reads.

    ``mla_dims`` = (kv_lora_rank, qk_rope_head_dim) for MLA layers without ``sparse_head_dim``;
    MLA and sparse models also carry them in ``hf_text_config`` (DeepSeek's HF config does).
    ``attention_kind`` (``"attn"``, ``"mla"``, ``"sfa"``) sets the layer class and backend of
    every attention layer (legacy sparse layers carry a plain FullAttentionSpec); by default it
    follows each spec. ``use_sparse`` is set when any layer is sparse (as vllm-ascend derives it
    from ``index_topk`` in the HF config); then ``hf_text_config.index_head_dim`` is taken from
    the spec (else 128) unless given, and 0.23's C8 dtypes are copied from the spec.
    ``shared_kv_cache_layers`` maps a KV-sharing layer to its target (a fake layer is added for
    it); on 0.11 the attribute exists only when given (as in its runner). ``additional_config``:
    ``vllm_config.additional_config`` (0.11 reads ``kv_cache_dtype`` from it). ``quant_config``:
    ``vllm_config.quant_config`` (a real ``AscendModelSlimConfig`` for FA quant, see
    :func:`fa_quant_config`); ``model_dtype``: ``model_config.dtype`` (the FA-quant rope's dtype).
    ``trace=True`` returns a subclass instance that records the instance attributes read, in
    ``runner._reads``. ``mamba_layer``: the class of the Mamba-type layers and, through its
    ``get_attn_backend``, their backend (default: the release's gated delta net layer).
    ``extra_backends``: layer -> its backend, for layers given in ``extra_layers`` whose class
    brings its own (``get_attn_backend()``: DeepSeek V4.1's cache-only layers).

    0.30: ``vllm_config`` is a real ``VllmConfig`` (:func:`_vllm_config_030`) and the runner
    carries the ``ascend_config`` made from it; attention layers carry an ``impl`` (a bare
    ``AscendAttentionBackendImpl`` with the spec's sliding window), which decides with the config
    whether stock takes the paged-attention form of a full-attention layer
    (``requires_contiguous_pa_kv_cache``: separate contiguous K and V) or the interleaved single
    buffer. ``paged_attention=True`` sets what makes it true for unpadded full-attention layers:
    cudagraph mode ``FULL_DECODE_ONLY`` and a non-empty ``pa_shape_list``; by default (cudagraph
    mode ``FULL_AND_PIECEWISE``, no ``pa_shape_list``, as on a CPU config) it is false.
    ``runner.kernel_block_sizes`` is set as stock ``initialize_kv_cache`` sets it before building
    the cache (:func:`kernel_block_sizes`). ``dcp_size``: the decode context parallel size (the
    DCP group's world size, ``use_dcp`` when > 1); with a packed SFA C8 main cache the runner's
    ``c8_cache_dtype`` is derived from the cache dtype string as its ``__init__`` does.
    """
    layer_specs = _layer_specs(kv_cache_config)
    kinds = {name: _kind_of(spec, attention_kind) for name, spec in layer_specs.items()}
    sparse_specs = [s for n, s in layer_specs.items() if kinds[n] == "sfa"]
    use_sparse = bool(sparse_specs)
    use_mla = any(k in ("mla", "sfa") for k in kinds.values())
    if use_sparse and index_head_dim is None:
        index_head_dim = max((getattr(s, "sparse_head_dim", None) or (0, 0, 128))[2] for s in sparse_specs)

    forward_context: dict[str, nn.Module] = {
        name: _layer_for(name, kinds[name], spec, mla_dims, mamba_layer) for name, spec in layer_specs.items()
    }
    shared = dict(shared_kv_cache_layers or {})
    for name, target in shared.items():
        forward_context[name] = _layer_for(name, kinds[target], layer_specs[target], mla_dims)
    forward_context.update(extra_layers or {})

    hf_text_config = SimpleNamespace(model_type=model_type)
    if use_mla:
        hf_text_config.kv_lora_rank, hf_text_config.qk_rope_head_dim = mla_dims
    if index_head_dim is not None:
        hf_text_config.index_head_dim = index_head_dim
    model_config = SimpleNamespace(
        hf_text_config=hf_text_config, use_mla=use_mla, is_deepseek_mla=use_mla, dtype=model_dtype
    )
    compilation_config = SimpleNamespace(static_forward_context=forward_context)
    transfer = (
        KVTransferConfig(kv_connector=kv_connector, kv_role=kv_role) if kv_transfer else None
    )
    vllm_config = SimpleNamespace(
        kv_transfer_config=transfer,
        quant_config=quant_config,
        model_config=model_config,
        compilation_config=compilation_config,
        additional_config=dict(additional_config or {}),
    )
    ascend_config = None
    if RELEASE >= (0, 30):
        model_config.runner_type = "generate"  # requires_contiguous_pa_kv_cache: not "pooling"
        model_config.hf_config = hf_text_config
        for name, spec in layer_specs.items():
            # stock's _get_layer_kv_cache_specs asks every layer (to find SFA indexer specs):
            # the spec its config carries is what the layer emitted
            forward_context[name].get_kv_cache_spec = lambda _vllm_config, spec=spec: spec
            if kinds[name] == "attn":
                forward_context[name].impl = _attention_impl(spec)
        vllm_config, ascend_config = _vllm_config_030(
            model_config, forward_context, transfer, quant_config, additional_config, paged_attention
        )
        compilation_config = vllm_config.compilation_config
        assert assert_pa_form(vllm_config, forward_context, layer_specs, paged_attention)

    cls = _tracing_subclass(NPUModelRunner) if trace else NPUModelRunner
    runner = cls.__new__(cls)
    attn_groups = _attn_groups(kv_cache_config, attention_kind, mamba_layer, extra_backends)
    attrs: dict[str, Any] = dict(
        device=torch.device(device),
        vllm_config=vllm_config,
        model_config=model_config,
        compilation_config=compilation_config,
        kv_cache_config=kv_cache_config,
        attn_groups=attn_groups,
        # as in NPUModelRunner.initialize_kv_cache
        use_hybrid_blocks=len(attn_groups) > 1,
        runner_only_attn_layers=set(runner_only_attn_layers),
        kv_caches=[],
        use_sparse=use_sparse,
        # the runner's default backend (get_attn_backend(use_mla, use_sparse)), read up to 0.13
        attn_backend=AscendSFABackend if use_sparse else AscendMLABackend if use_mla else AscendAttentionBackend,
        use_compress=False,
        enable_hamming_sparse=False,
        is_kv_consumer=bool(transfer is not None and transfer.is_kv_consumer),
        use_sparse_c8_indexer=False,
        shared_kv_cache_layers=shared,
        # 0.30 (NPUModelRunner.__init__ / its properties): use_dcp is dcp_size > 1
        ascend_config=ascend_config,
        dcp_size=dcp_size,
        sparse_kv_offload_enabled=False,
    )
    sfa_c8 = [s for s in layer_specs.values() if getattr(s, "cache_sparse_sfa_c8", False)]
    if RELEASE >= (0, 30) and sfa_c8:  # NPUModelRunner.__init__: kv_cache_dtype_str_to_dtype(cache_dtype)
        from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype  # noqa: PLC0415

        attrs["c8_cache_dtype"] = kv_cache_dtype_str_to_dtype(sfa_c8[0].cache_dtype_str, model_config)
    if use_sparse and hasattr(sparse_specs[0], "c8_k_cache_dtype"):
        # NPUModelRunner.__init__ derives these from the device; the specs carry the same values
        attrs["c8_k_cache_dtype"] = sparse_specs[0].c8_k_cache_dtype
        attrs["c8_k_scale_cache_dtype"] = sparse_specs[0].c8_k_scale_cache_dtype
        attrs["use_sparse_c8_indexer"] = any(getattr(s, "cache_sparse_c8", False) for s in sparse_specs)
    # Only what this release's runner has: what its stock KV code reads, plus the state every
    # runner sets up before it (0.11 creates shared_kv_cache_layers only for KV-sharing models).
    keep = set(RUNNER_ATTRS) | {"kv_cache_config", "attn_groups", "use_hybrid_blocks", "use_sparse"}
    keep |= {"c8_k_cache_dtype", "c8_k_scale_cache_dtype", "c8_cache_dtype"} | ({"shared_kv_cache_layers"} if shared else set())
    attrs = {k: v for k, v in attrs.items() if k in keep}
    if trace:
        object.__setattr__(runner, "_reads", set())
    for key, value in attrs.items():
        object.__setattr__(runner, key, value)
    if RELEASE >= (0, 30):
        # set by stock initialize_kv_cache before initialize_kv_cache_tensors
        object.__setattr__(runner, "kernel_block_sizes", kernel_block_sizes(runner, kv_cache_config))
    return runner


def _attention_impl(spec: KVCacheSpec) -> Any:
    """A bare ``AscendAttentionBackendImpl`` (0.30) with what ``requires_contiguous_pa_kv_cache``
    reads: its sliding window (the spec's)."""
    from vllm_ascend.attention.attention_v1 import AscendAttentionBackendImpl  # noqa: PLC0415

    impl = AscendAttentionBackendImpl.__new__(AscendAttentionBackendImpl)
    impl.sliding_window = getattr(spec, "sliding_window", None)
    return impl


def _vllm_config_030(
    model_config: Any,
    forward_context: dict[str, nn.Module],
    transfer: Any,
    quant_config: Any,
    additional_config: dict[str, Any] | None,
    paged_attention: bool,
) -> tuple[Any, Any]:
    """A real ``VllmConfig`` for the 0.30 runner (its KV code calls vLLM and vllm-ascend helpers
    that read real config objects: ``cache_config.get_resolved_kv_cache_layout()``,
    ``compilation_config.cudagraph_mode``, ``get_layers_from_vllm_config``), on the CPU device
    (the platform's default device string ``npu`` is unknown to CPU torch), KV cache layout
    ``LBNHC`` as in :func:`build_kv_cache_config`; ``model_config`` is the stand-in namespace.
    Returns it with the ``AscendConfig`` ``init_ascend_config`` makes of it (also the process's
    current one, which ``using_paged_attention`` reads)."""
    from vllm.config import CompilationConfig, DeviceConfig, VllmConfig  # noqa: PLC0415
    from vllm.config.compilation import CUDAGraphMode  # noqa: PLC0415
    from vllm_ascend.ascend_config import init_ascend_config  # noqa: PLC0415

    extra = dict(additional_config or {})
    if paged_attention:
        extra.setdefault("pa_shape_list", [1, 2, 4, 8])
    vllm_config = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        compilation_config=CompilationConfig(
            cudagraph_mode=CUDAGraphMode.FULL_DECODE_ONLY if paged_attention else CUDAGraphMode.FULL_AND_PIECEWISE
        ),
        additional_config=extra,
    )
    # set after validation: VllmConfig checks the connector name against vLLM's connector
    # registry, which vllm-ascend's connectors (Mooncake...) join only in a worker process
    object.__setattr__(vllm_config, "kv_transfer_config", transfer)
    vllm_config.cache_config.kv_cache_layout = KV_CACHE_LAYOUT_030
    vllm_config.compilation_config.static_forward_context = forward_context
    ascend_config = init_ascend_config(vllm_config)  # before the stand-in model config (it reads a real one's fields)
    object.__setattr__(vllm_config, "model_config", model_config)
    object.__setattr__(vllm_config, "quant_config", quant_config)
    return vllm_config, ascend_config


def assert_pa_form(vllm_config: Any, forward_context: dict, layer_specs: dict, paged_attention: bool) -> bool:
    """(0.30) ``requires_contiguous_pa_kv_cache`` is ``paged_attention`` for every unpadded
    ``FullAttentionSpec`` layer with an Ascend attention impl, False for the others."""
    from vllm_ascend.attention.utils import requires_contiguous_pa_kv_cache  # noqa: PLC0415

    for name, spec in layer_specs.items():
        expected = (
            paged_attention
            and type(spec) is FullAttentionSpec
            and getattr(forward_context[name], "impl", None) is not None
            and spec.page_size_bytes == spec.real_page_size_bytes
        )
        if requires_contiguous_pa_kv_cache(forward_context[name], vllm_config, spec) != expected:
            raise AssertionError(f"{name}: requires_contiguous_pa_kv_cache is not {expected}")
    return True


# --------------------------------------------------------------------------------------------
# real KVCacheConfig builders


@dataclass
class ModelKV:
    """A model's per-rank KV cache config plus the facts make_runner needs."""

    name: str
    tp: int
    kv_cache_config: KVCacheConfig
    specs: dict[str, KVCacheSpec]
    runner_kwargs: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def make_runner(self, **kwargs: Any) -> NPUModelRunner:
        return make_runner(self.kv_cache_config, **{**self.runner_kwargs, **kwargs})


def _spec(cls: type, **kwargs: Any) -> Any:
    """``cls(**kwargs)`` without the fields this release's ``cls`` lacks."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kwargs.items() if k in names})


def build_kv_cache_config(
    specs: dict[str, KVCacheSpec],
    num_blocks: int,
    *,
    max_model_len: int | None = None,
    mamba_cache_mode: str = "none",
    available_memory: int | None = None,
) -> KVCacheConfig:
    """Plan one worker's KV cache with vLLM's own code: ``get_kv_cache_groups`` (grouping,
    page-size unification) then ``get_kv_cache_config_from_groups`` (tensors, shared_by), with
    ``num_gpu_blocks_override=num_blocks``. ``specs`` order matters (it sets the group order).
    With ``available_memory`` (bytes per device) the planner chooses num_blocks itself
    (``get_num_blocks``: memory // page // tensors) and ``num_blocks`` is ignored."""
    if max_model_len is None:
        attn = [s for s in specs.values() if isinstance(s, AttentionSpec)]
        max_model_len = min(s.block_size for s in attn) if attn else 16
    vllm_config = SimpleNamespace(
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=max_model_len
        ),
        cache_config=SimpleNamespace(
            num_gpu_blocks_override=None if available_memory else num_blocks,
            mamba_cache_mode=mamba_cache_mode,
        ),
        model_config=SimpleNamespace(
            max_model_len=max_model_len, original_max_model_len=max_model_len
        ),
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=1, prefill_context_parallel_size=1
        ),
        speculative_config=None,
        max_concurrent_batches=1,  # read by vllm-ascend's patched SWA max_memory_usage_bytes
    )
    if RELEASE >= (0, 30):
        vllm_config = _planner_config_030(vllm_config)
    registry = _first("vllm.v1.kv_cache_spec_registry:KVCacheSpecRegistry")  # vLLM 0.23+
    specs = dict(specs)  # get_kv_cache_groups may rewrite entries in place
    if registry is not None:
        registry.check_kv_cache_spec_registry(specs)
    get_kv_cache_groups, get_kv_cache_config_from_groups = kv_cache_planner()
    groups = get_kv_cache_groups(vllm_config, specs)
    memory = available_memory or 1 << 40
    if "kv_cache_specs" in inspect.signature(get_kv_cache_config_from_groups).parameters:  # 0.11
        config = get_kv_cache_config_from_groups(vllm_config, groups, specs, memory)
    else:
        config = get_kv_cache_config_from_groups(vllm_config, groups, memory)
    assert available_memory or config.num_blocks == num_blocks, config.num_blocks
    return config


#: The KV cache layout 0.30 configs are planned and built for: vLLM's default preference (the
#: Ascend backends declare no layouts), layer- and block-compact (stock's hybrid backing needs it).
KV_CACHE_LAYOUT_030 = "LBNHC"


def _planner_config_030(plan: Any) -> Any:
    """The real ``VllmConfig`` vLLM 0.30's planner (as vllm-ascend 0.30 patches it) needs, with the
    fields of ``plan`` (the namespace the earlier releases plan with): its ``attention_config``,
    ``cache_config.get_resolved_kv_cache_layout()`` and ``prefix_cache_retention_interval``."""
    from vllm.config import DeviceConfig, VllmConfig  # noqa: PLC0415

    vllm_config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    vllm_config.cache_config.kv_cache_layout = KV_CACHE_LAYOUT_030
    vllm_config.cache_config.num_gpu_blocks_override = plan.cache_config.num_gpu_blocks_override
    vllm_config.cache_config.mamba_cache_mode = plan.cache_config.mamba_cache_mode
    vllm_config.scheduler_config.max_num_batched_tokens = plan.scheduler_config.max_num_batched_tokens
    object.__setattr__(vllm_config, "model_config", plan.model_config)
    return vllm_config


ChunkedLocalAttentionSpec = _first("vllm.v1.kv_cache_interface:ChunkedLocalAttentionSpec")


def gqa_model(
    name: str,
    tp: int = 1,
    num_blocks: int = 4,
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    layer_types: Iterable[str] | None = None,
    sliding_window: int | None = None,
    attention_chunk_size: int | None = None,
    mtp_layers: int = 0,
    model_type: str = "llama",
    block_size: int = 128,
    dtype: torch.dtype = BF16,
    max_model_len: int | None = None,
) -> ModelKV:
    """A decoder of (grouped-query) attention layers as vLLM's ``Attention.get_kv_cache_spec``
    emits them on Ascend: ``num_kv_heads // tp`` heads per rank (at least 1: vLLM replicates KV
    heads when TP exceeds them), ``head_dim``, block ``block_size`` (the Ascend platform's 128).

    ``layer_types`` (HF ``layer_types``, default all ``full_attention``) per layer:
    ``full_attention`` -> ``FullAttentionSpec``; ``sliding_attention`` -> ``SlidingWindowSpec``
    of ``sliding_window`` (Gemma 3, gpt-oss); ``chunked_attention`` -> ``ChunkedLocalAttentionSpec``
    of ``attention_chunk_size`` (Llama 4's RoPE layers, vLLM's ``ChunkedLocalAttention``).
    ``mtp_layers`` full-attention draft layers follow at ``model.layers.{num_layers + k}`` (GLM-4.5
    MTP: ``Glm4MoeMultiTokenPredictor``). Layers are named ``model.layers.{i}.self_attn.attn``."""
    kinds = list(layer_types) if layer_types is not None else ["full_attention"] * num_layers
    assert len(kinds) == num_layers, (name, len(kinds), num_layers)
    attn = dict(block_size=block_size, num_kv_heads=max(1, num_kv_heads // tp), head_size=head_dim, dtype=dtype)
    by_kind = {"full_attention": FullAttentionSpec(**attn)}
    if sliding_window is not None:
        by_kind["sliding_attention"] = SlidingWindowSpec(**attn, sliding_window=sliding_window)
    if attention_chunk_size is not None:
        assert ChunkedLocalAttentionSpec is not None, f"vLLM of vllm-ascend {ASCEND_VERSION} has no chunked local attention"
        by_kind["chunked_attention"] = ChunkedLocalAttentionSpec(**attn, attention_chunk_size=attention_chunk_size)
    kinds += ["full_attention"] * mtp_layers
    specs = {f"model.layers.{i}.self_attn.attn": by_kind[kind] for i, kind in enumerate(kinds)}
    config = build_kv_cache_config(specs, num_blocks, max_model_len=max_model_len)
    return ModelKV(name, tp, config, specs, runner_kwargs={"model_type": model_type})


def qwen3_8b(tp: int = 1, num_blocks: int = 4, block_size: int = 128, dtype: torch.dtype = BF16) -> ModelKV:
    """Qwen3-8B: 36 full-attention layers, 8 KV heads (8/tp per rank), head 128, bf16.

    ``dtype=torch.int8``: the W8A8C8 checkpoint (``kv_cache_type: C8``). From 0.18 its
    ``AscendC8KVCacheAttentionMethod`` sets the layer's ``kv_cache_torch_dtype`` to int8 and vLLM's
    ``Attention.get_kv_cache_spec`` returns a plain ``FullAttentionSpec(dtype=int8)``, scales
    outside the cache; 0.11 gets the same spec from ``additional_config={"kv_cache_dtype": "int8"}``
    (and lays it out BSH)."""
    suffix = "" if dtype == BF16 else f" {str(dtype).removeprefix('torch.')}"
    return gqa_model(
        "Qwen3-8B" + suffix, tp, num_blocks, num_layers=36, num_kv_heads=8, head_dim=128,
        model_type="qwen3", block_size=block_size, dtype=dtype,
    )


def fa_quant_config(layers: Iterable[int]) -> Any:
    """A real ``AscendModelSlimConfig`` of an FA-quant (``fa_quant_type: FAKQuant``) checkpoint
    whose ``layers`` carry ``fa_k.scale`` (its ``kvcache_quant_layers``), as vllm-ascend 0.18+
    reads the checkpoint's quant description."""
    from vllm_ascend.quantization.modelslim_config import AscendModelSlimConfig  # noqa: PLC0415

    description = {"fa_quant_type": "FAKQuant"}
    description.update({f"model.layers.{i}.self_attn.fa_k.scale": "FLOAT" for i in layers})
    return AscendModelSlimConfig(description)


def deepseek_v3(
    tp: int = 1,
    num_blocks: int = 4,
    block_size: int = 128,
    upstream_spec: bool = False,
    fa_quant: bool = False,
    fa_dtype: torch.dtype = torch.int8,
    *,
    num_layers: int = 61,
    mtp_layers: int = 0,
    name: str = "DeepSeek-V3",
    model_type: str = "deepseek_v3",
) -> ModelKV:
    """DeepSeek-V3: 61 MLA layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576, bf16.

    From 0.18 vllm-ascend re-wraps vLLM's MLAAttentionSpec into ``AscendMLAAttentionSpec``
    (num_kv_heads 1, head 576) in ``NPUModelRunner.get_kv_cache_spec``; 0.11 / 0.13 emit vLLM's
    ``MLAAttentionSpec`` (cache_dtype_str "auto"). ``upstream_spec=True`` keeps vLLM's plain
    ``MLAAttentionSpec`` (what an upstream runner would see). TP does not change MLA.

    ``fa_quant=True`` (0.18+): the W8A8C8 FA-quant checkpoint on a decode (``kv_consumer``)
    instance, where ``impl.fa_quant_layer`` holds: ``AscendMLAAttentionSpec(head_size = 576 + 64
    = 640, dtype=int8, cache_dtype_str=None)`` (int8 nope + bf16 rope), and the runner's
    ``quant_config`` from :func:`fa_quant_config` for all 61 layers. ``fa_dtype``: the nope's
    dtype, int8 on A2, ``torch.float8_e4m3fn`` on A5 (0.23, any instance role).

    Other DeepSeek-V3-style MLA models (the same 512 + 64 latent): ``num_layers``, ``name``,
    ``model_type`` (DeepSeek-V2-Lite 27 layers, Kimi-K2 61); ``mtp_layers`` MTP draft layers
    follow at ``model.layers.{num_layers + k}.self_attn.attn`` (vLLM's
    ``DeepSeekMultiTokenPredictor``), with the same spec."""
    total = num_layers + mtp_layers
    kwargs: dict[str, Any] = {"model_type": model_type, "mla_dims": (512, 64)}
    if fa_quant:
        assert AscendMLAAttentionSpec is not None, f"vllm-ascend {ASCEND_VERSION} has no FA-quant KV cache"
        spec = AscendMLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=640, dtype=fa_dtype, cache_dtype_str=None)
        kwargs["quant_config"] = fa_quant_config(range(total))
    else:
        cls = MLAAttentionSpec if upstream_spec or AscendMLAAttentionSpec is None else AscendMLAAttentionSpec
        spec = cls(block_size=block_size, num_kv_heads=1, head_size=576, dtype=BF16, cache_dtype_str="auto")
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(total)}
    name += (" (upstream MLAAttentionSpec)" if upstream_spec else "") + (" FA-quant" if fa_quant else "")
    return ModelKV(name, tp, build_kv_cache_config(specs, num_blocks), specs, runner_kwargs=kwargs)


def deepseek_v32(
    tp: int = 1,
    num_blocks: int = 4,
    block_size: int = 128,
    *,
    li_c8: bool = False,
    sfa_c8: bool | str = False,
    rep: int = 1,
    indexer_layers: Iterable[int] | None = None,
    li_c8_layers: Iterable[int] | None = None,
    num_layers: int = 61,
    mtp_layers: int = 0,
    li_c4: bool = False,
    turboquant: bool = False,
) -> ModelKV:
    """DeepSeek-V3.2-Exp (sparse MLA / DSA): 61 layers, each with an indexer key cache
    (``num_layers``; ``mtp_layers`` MTP draft layers of the same spec follow, as in
    :func:`deepseek_v3`).

    As the release's get_kv_cache_spec builds it:

    * 0.18 / 0.23: ``AscendMLAAttentionSpec`` with ``sparse_head_dim=(kv_lora_rank 512,
      qk_rope_head_dim 64, index_head_dim 128)`` and ``head_size=704``. ``li_c8`` quantises the
      indexer key (int8 + fp16 scale on A2; 0.18: ``cache_sparse_c8``). ``sfa_c8`` (0.23) is the
      packed layout: ``sparse_head_dim=(packed, 0, 128)`` where packed = 512 + 64*2 +
      (512/128)*4 = 656 bytes (vllm_ascend/attention/utils.py); its cache dtype is the spec's
      ``c8_k_cache_dtype`` (int8 with the A2 build installed here, fp8 on a real A5);
    * 0.23 only: ``rep`` = ``sfa_dcp_replicated_indexer_size`` (the DCP size with
      ``enable_sfa_dcp_replicated_indexer``); ``indexer_layers`` (default all): the layers with an
      indexer of their own, the others get ``sparse_head_dim=(512, 64, 0)`` (or (656, 0, 0));
      ``li_c8_layers`` (default all when ``li_c8``): the layers the quant config lists for LI C8
      (``is_sparse_li_c8_layer``), the others keep a bf16 indexer;
    * 0.30: the main cache a layer of its own (``AscendMLAAttentionSpec``) and the indexer key
      another (``AscendSFAIndexerCacheSpec``); ``sfa_c8`` / ``turboquant`` pack the main cache into
      one row (:func:`_main_sfa_spec_030`); ``rep`` is the DCP size: the runner's ``dcp_size`` and
      the indexer's ``sfa_dcp_replicated_indexer_size``;
    * 0.11 / 0.13 (``LEGACY_SPARSE``): a plain ``FullAttentionSpec(num_kv_heads=1,
      head_size=576)``, a K+V page of twice the MLA latent; the runner's ``use_sparse`` and the
      sparse backend tell the layers apart. No C8 variants."""
    total = num_layers + mtp_layers
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(total)]
    kwargs: dict[str, Any] = {"model_type": "deepseek_v32", "mla_dims": (512, 64), "index_head_dim": 128}
    if LEGACY_SPARSE:
        assert not (li_c8 or sfa_c8), f"vllm-ascend {ASCEND_VERSION} has no sparse C8 cache"
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=576, dtype=BF16)
        specs = dict.fromkeys(layers, spec)
        kwargs["attention_kind"] = "sfa"
        return ModelKV("DeepSeek-V3.2-Exp", tp, build_kv_cache_config(specs, num_blocks), specs, kwargs)
    if RELEASE >= (0, 30):
        # 0.30: the main cache is an AscendMLAAttentionSpec of the latent alone (512 + 64), the
        # indexer key a layer of its own (DeepseekV32IndexerCache at ``...self_attn.indexer.k_cache``)
        # with an AscendSFAIndexerCacheSpec (1 head of index_head_dim 128), as
        # NPUModelRunner.get_kv_cache_spec emits them.
        assert indexer_layers is None and li_c8_layers is None, (
            "the 0.30 DeepSeek V3.2 builder has no per-layer indexer variants"
        )
        from vllm_ascend.core.kv_cache_interface import AscendSFAIndexerCacheSpec  # noqa: PLC0415

        main = _main_sfa_spec_030(block_size, sfa_c8, turboquant)
        # as NPUModelRunner.get_kv_cache_spec (0.30) emits the indexer: LI C8 int8 keys + one fp16 scale per
        # token (A2's c8 dtypes), LI C4 uint8 keys of half the head + e8m0 scales of head / 32; with DCP its
        # sfa_dcp_replicated_indexer_size is the DCP size (enable_sfa_dcp_replicated_indexer: an SFA model)
        quant = (
            dict(head_size=64, dtype=torch.uint8, cache_dtype_str="int8", scale_dim=4, scale_dtype=torch.float8_e8m0fnu,
                 cache_sparse_li_c4=True) if li_c4
            else dict(head_size=128, dtype=torch.int8, cache_dtype_str="int8", scale_dim=1, scale_dtype=torch.float16,
                      cache_sparse_li_c8=True) if li_c8
            else dict(head_size=128, dtype=BF16, cache_dtype_str="auto")
        )
        indexer = AscendSFAIndexerCacheSpec(block_size=block_size, num_kv_heads=1, sfa_dcp_replicated_indexer_size=rep, **quant)
        specs = {}
        for name in layers:
            specs[name] = main
            specs[name.replace(".attn", ".indexer.k_cache")] = indexer
        kwargs.update(attention_kind="sfa", dcp_size=rep)
        return ModelKV("DeepSeek-V3.2-Exp", tp, build_kv_cache_config(specs, num_blocks), specs, kwargs)
    fields = {f.name for f in dataclasses.fields(AscendMLAAttentionSpec)}
    assert (rep == 1 and indexer_layers is None and li_c8_layers is None) or "cache_sparse_li_c8" in fields, (
        f"vllm-ascend {ASCEND_VERSION} has no DCP-replicated, per-layer or shared indexers"
    )
    assert not sfa_c8 or "cache_sparse_sfa_c8" in fields, f"vllm-ascend {ASCEND_VERSION} has no SFA C8 cache"
    with_indexer = set(range(total) if indexer_layers is None else indexer_layers)
    li = set(range(total) if li_c8_layers is None else li_c8_layers) if li_c8 else set()
    if sfa_c8:
        from vllm_ascend.attention.utils import get_sfa_qsfa_packed_head_dim  # noqa: PLC0415

        latent = (get_sfa_qsfa_packed_head_dim(512, 64), 0)
    else:
        latent = (512, 64)

    def spec_of(i: int) -> Any:
        sparse_head_dim = (*latent, 128 if i in with_indexer else 0)
        return _spec(
            AscendMLAAttentionSpec,
            block_size=block_size,
            num_kv_heads=1,
            head_size=sum(sparse_head_dim),
            sparse_head_dim=sparse_head_dim,
            dtype=BF16,
            cache_dtype_str="auto",
            cache_sparse_sfa_c8=sfa_c8,
            cache_sparse_li_c8=i in li,
            cache_sparse_c8=i in li,  # 0.18
            sfa_dcp_replicated_indexer_size=rep,
        )

    specs = {name: spec_of(i) for i, name in enumerate(layers)}
    suffix = "".join(s for s, on in ((" SFA-C8", sfa_c8), (" LI-C8", li_c8), (f" DCP-rep{rep}", rep > 1)) if on)
    return ModelKV(
        "DeepSeek-V3.2-Exp" + suffix, tp, build_kv_cache_config(specs, num_blocks), specs, kwargs
    )


def _main_sfa_spec_030(block_size: int, sfa_c8: bool | str, turboquant: bool) -> Any:
    """DeepSeek V3.2's main cache as ``NPUModelRunner.get_kv_cache_spec`` (0.30) emits it: the
    bf16 latent (512 + 64); with ``sfa_c8`` (``--kv-cache-dtype int8``, or the dtype string given:
    ``"fp8"``) one packed row of ``get_sfa_qsfa_packed_head_dim(512, 64)`` = 656 bytes in the C8
    dtype; with ``turboquant`` (``--kv-cache-dtype turboquant_4bit_nc``) one int8 row of
    ``get_tq_fused_slot_bytes(512, 64)`` = 386 bytes."""
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype  # noqa: PLC0415
    from vllm_ascend.attention.utils import get_sfa_qsfa_packed_head_dim, get_tq_fused_slot_bytes  # noqa: PLC0415

    assert not (sfa_c8 and turboquant), "SFA C8 and TurboQuant are two cache dtypes"
    packed: dict[str, Any] = dict(head_size=576, dtype=BF16, cache_dtype_str="auto")
    if sfa_c8:
        cache_dtype = sfa_c8 if isinstance(sfa_c8, str) else "int8"
        packed = dict(head_size=get_sfa_qsfa_packed_head_dim(512, 64), cache_dtype_str=cache_dtype,
                      dtype=kv_cache_dtype_str_to_dtype(cache_dtype, None), cache_sparse_sfa_c8=True)
    elif turboquant:
        packed = dict(head_size=get_tq_fused_slot_bytes(512, 64), dtype=torch.int8,
                      cache_dtype_str="turboquant_4bit_nc", cache_sparse_sfa_turboquant=True)
    return AscendMLAAttentionSpec(block_size=block_size, num_kv_heads=1, **packed)


def _qwen3_next_hf_config(num_key_value_heads: int = 2, num_hidden_layers: int = 48):
    from transformers import Qwen3NextConfig  # noqa: PLC0415

    return Qwen3NextConfig(
        num_hidden_layers=num_hidden_layers,
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=num_key_value_heads,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,
    )


class _Qwen3NextMambaStates:
    """Stand-in for vLLM 0.11's ``Qwen3NextForCausalLM`` (its module needs triton): the same two
    classmethods, calling vLLM's gated-delta-net calculators with the same arguments."""

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator  # noqa: PLC0415

        hf = vllm_config.model_config.hf_config
        spec = vllm_config.speculative_config
        return MambaStateShapeCalculator.gated_delta_net_state_shape(
            vllm_config.parallel_config.tensor_parallel_size,
            hf.linear_num_key_heads,
            hf.linear_num_value_heads,
            hf.linear_key_head_dim,
            hf.linear_value_head_dim,
            hf.linear_conv_kernel_dim,
            spec.num_speculative_tokens if spec else 0,
        )

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator  # noqa: PLC0415

        return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype
        )


class _MiniMaxLinearStates:
    """Stand-in for vLLM's ``MiniMaxText01ForCausalLM`` where its module does not import on CPU:
    the same two classmethods, calling vLLM's linear-attention calculators with the same
    arguments (one state (heads / tp, head_dim, head_dim) in the model dtype)."""

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator  # noqa: PLC0415

        hf = vllm_config.model_config.hf_config
        return MambaStateShapeCalculator.linear_attention_state_shape(
            num_heads=hf.num_attention_heads,
            tp_size=vllm_config.parallel_config.tensor_parallel_size,
            head_dim=hf.head_dim,
        )

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator  # noqa: PLC0415

        return MambaStateDtypeCalculator.linear_attention_state_dtype(
            vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype
        )


@contextlib.contextmanager
def _model_class(path: str, stand_in: type):
    """vLLM's model class ``path`` (``module:Class``), or where it does not import here (vLLM
    0.11's qwen3_next needs triton) the stand-in, also as what ``ModelRegistry.resolve_model_cls``
    returns while the patched sizing runs."""
    real = _first(path)
    if real is not None:
        yield real
        return
    from vllm.model_executor.models import ModelRegistry  # noqa: PLC0415

    resolve = ModelRegistry.resolve_model_cls
    ModelRegistry.resolve_model_cls = lambda *a, **k: (stand_in, path.rpartition(":")[2])
    try:
        yield stand_in
    finally:
        ModelRegistry.resolve_model_cls = resolve


def _qwen3_next_model_class():
    return _model_class("vllm.model_executor.models.qwen3_next:Qwen3NextForCausalLM", _Qwen3NextMambaStates)


@contextlib.contextmanager
def installed_plugin_sizing():
    """The plugin's hybrid page sizing (``platforms.ascend.targets.HYBRID_SIZING``) installed on this
    release's ``HybridAttentionMambaModelConfig`` while the block runs, the way ``register()``
    installs it (its adapter's ``patch`` on vllm-ascend's ``patch_mamba_config`` module), and
    removed after unless it was installed before. Yields whether the release has one (0.11,
    0.13); elsewhere nothing is patched."""
    from vllm_kv_strategies.platforms.install import adapter_for  # noqa: PLC0415
    from vllm_kv_strategies.platforms.ascend import facts  # noqa: PLC0415

    target = facts.hybrid_sizing_target()
    if target is None:
        yield False
        return
    module = importlib.import_module(target.module)
    adapter = adapter_for(target)
    patched = adapter.patch(module)
    try:
        yield True
    finally:
        if patched:
            adapter.unpatch(module)


def qwen3_next(
    tp: int = 1,
    num_blocks: int = 4,
    max_model_len: int = 512,
    *,
    block_size: int | None = None,
    plugin_sizing: bool = False,
    available_memory: int | None = None,
    hf_overrides: dict[str, Any] | None = None,
    additional_config: dict[str, Any] | None = None,
    num_key_value_heads: int = 2,
    num_hidden_layers: int = 48,
    name: str = "Qwen3-Next-80B-A3B",
    num_speculative_tokens: int = 0,
    mtp_layers: int = 0,
) -> ModelKV:
    """Qwen3-Next-80B-A3B: 48 layers = 36 Gated DeltaNet (``linear_attn``) + 12 full attention
    (every 4th layer, ``self_attn.attn``), as vLLM + vllm-ascend size them at start-up:

    * GDN state shapes / dtypes from vLLM's ``Qwen3NextForCausalLM.get_mamba_state_shape_from_config``
      and ``get_mamba_state_dtype_from_config`` (conv 8192/tp channels x 3, ssm (32/tp, 128, 128),
      bf16; the conv orientation is the release's);
    * attention block size and Mamba page padding from the release's patched
      ``HybridAttentionMambaModelConfig.verify_and_update_config``
      (vllm_ascend/patch/platform/patch_mamba_config.py). 0.18+: K page == SSM page, padded
      page = 2 * K page + conv page, attention specs get ``page_size_padded`` as in
      NPUModelRunner.get_kv_cache_spec. 0.11 / 0.13: block size a multiple of 128 making the
      attention (K+V) page >= the Mamba page, the Mamba page padded to the attention page;
    * groups/tensors from vLLM's planner (attention specs first, as Ascend's get_kv_cache_spec
      orders them, so group 0 is the attention group).

    Importing the patch module applies that vllm-ascend patch process-wide (as vllm-ascend does).
    ``block_size`` is the user's (None: not set, as in ``VllmConfig.__post_init__`` before the
    Ascend platform's default of 128). ``plugin_sizing=True`` runs the sizing with the plugin's
    patch installed (:func:`installed_plugin_sizing`: 0.11 / 0.13 K page == ssm state, Mamba page padded
    to 2 K pages); the sizing installed on the class at the time runs in any case.
    ``num_key_value_heads`` / ``num_hidden_layers`` / ``name`` give other Qwen3-Next-style
    hybrids (see :func:`qwen35_style`). ``available_memory``: plan for that many bytes per device
    instead of ``num_blocks`` (see :func:`build_kv_cache_config`). ``hf_overrides`` (attributes of
    the HF config, e.g. ``model_type``) and ``additional_config`` (vllm-ascend's) reach the sizing.
    ``mtp_layers`` MTP draft attention layers (``mtp.layers.{k}.self_attn.attn``, vLLM's
    ``Qwen3NextMultiTokenPredictor``; their spec is the target attention layers') and
    ``num_speculative_tokens`` (the conv state grows by as many rows; the Mamba spec's
    ``num_speculative_blocks``) give Qwen3-Next with MTP. The sizing is :func:`mamba_hybrid`'s.
    """
    hf = _qwen3_next_hf_config(num_key_value_heads, num_hidden_layers)
    for key, value in (hf_overrides or {}).items():
        setattr(hf, key, value)
    attn_layers = [f"model.layers.{i}.self_attn.attn" for i, k in enumerate(hf.layer_types) if k == "full_attention"]
    attn_layers += [f"mtp.layers.{k}.self_attn.attn" for k in range(mtp_layers)]
    mamba_layers = [f"model.layers.{i}.linear_attn" for i, k in enumerate(hf.layer_types) if k == "linear_attention"]
    with _qwen3_next_model_class() as model_cls:
        return mamba_hybrid(
            name, tp, num_blocks, hf=hf, architecture="Qwen3NextForCausalLM", model_cls=model_cls,
            attn_layers=attn_layers, mamba_layers=mamba_layers, mamba_type=gdn_mamba_type(),
            max_model_len=max_model_len, block_size=block_size, plugin_sizing=plugin_sizing,
            available_memory=available_memory, additional_config=additional_config,
            num_speculative_tokens=num_speculative_tokens, model_type="qwen3_next",
        )


def mamba_hybrid(
    name: str,
    tp: int,
    num_blocks: int,
    *,
    hf: Any,
    architecture: str,
    model_cls: type,
    attn_layers: list[str],
    mamba_layers: list[str],
    mamba_type: Any,
    max_model_len: int = 512,
    block_size: int | None = None,
    plugin_sizing: bool = False,
    available_memory: int | None = None,
    additional_config: dict[str, Any] | None = None,
    num_speculative_tokens: int = 0,
    model_type: str | None = None,
    runner_kwargs: dict[str, Any] | None = None,
    mla_dims: tuple[int, int] | None = None,
) -> ModelKV:
    """A hybrid of full-attention and Mamba-type layers (``hf``: its HF config), sized as vLLM +
    vllm-ascend size it at start-up (see :func:`qwen3_next`): the Mamba states from
    ``model_cls.get_mamba_state_shape_from_config`` / ``..._dtype_from_config``, the attention
    block size and Mamba page padding from the release's patched
    ``HybridAttentionMambaModelConfig.verify_and_update_config`` (``model_cls`` resolved for
    ``architecture`` while it runs), attention specs first (Ascend's get_kv_cache_spec order),
    groups / tensors from vLLM's planner. ``mamba_type`` is the Mamba layers' ``mamba_type``;
    ``model_type`` the runner's (default ``hf.model_type``), ``runner_kwargs`` more for
    :func:`make_runner`. ``mla_dims`` (kv_lora_rank, qk_rope_head_dim): the attention layers are
    MLA (0.30: ``AscendMLAAttentionSpec`` of one head of their sum, sized with ``use_mla``), as
    Kimi-Linear pairs them with KDA."""
    import vllm_ascend.patch.platform.patch_mamba_config  # noqa: F401, PLC0415
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig  # noqa: PLC0415

    kv_heads = max(1, hf.num_key_value_heads // tp)
    parallel_config = SimpleNamespace(tensor_parallel_size=tp)
    model_config = SimpleNamespace(
        hf_config=hf,
        hf_text_config=hf,
        dtype=BF16,
        architecture=architecture,
        model_impl="auto",
        runner_type="generate",
        convert_type="none",
        use_mla=mla_dims is not None,
        max_model_len=max_model_len,
        supports_mamba_prefix_caching=True,
        get_num_kv_heads=lambda pc: 1 if mla_dims else max(1, hf.num_key_value_heads // pc.tensor_parallel_size),
        get_head_size=lambda: sum(mla_dims) if mla_dims else hf.head_dim,
    )
    cache_config = SimpleNamespace(
        cache_dtype="auto",
        block_size=block_size,  # None unless the user set it; the sizing sets it
        mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype="auto",
        mamba_page_size_padded=None,
        mamba_cache_mode="none",
        mamba_block_size=None,
        enable_prefix_caching=False,
        use_kda_recoverssm=False,  # vLLM 0.30's CacheConfig default (read by Kimi-Linear's KDA state calculators)
    )
    speculative_config = (
        SimpleNamespace(num_speculative_tokens=num_speculative_tokens, method="mtp") if num_speculative_tokens else None
    )
    vllm_config = SimpleNamespace(
        model_config=model_config,
        cache_config=cache_config,
        parallel_config=parallel_config,
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, enable_chunked_prefill=True
        ),
        compilation_config=SimpleNamespace(cudagraph_mode="as configured"),  # read by 0.11
        speculative_config=speculative_config,
        kv_transfer_config=None,
        additional_config=dict(additional_config or {}),
    )
    sizing = installed_plugin_sizing() if plugin_sizing else contextlib.nullcontext()
    with sizing:
        if RELEASE >= (0, 30):
            _align_hybrid_block_size_030(vllm_config)
        else:
            HybridAttentionMambaModelConfig.verify_and_update_config(vllm_config)
        shapes = model_cls.get_mamba_state_shape_from_config(vllm_config)
        dtypes = model_cls.get_mamba_state_dtype_from_config(vllm_config)
    mamba_spec = _spec(
        MambaSpec,
        block_size=cache_config.mamba_block_size or max_model_len,  # 0.11 / 0.13: max_model_len
        shapes=tuple(shapes),
        dtypes=tuple(dtypes),
        page_size_padded=cache_config.mamba_page_size_padded,
        mamba_type=mamba_type,
        mamba_cache_mode=cache_config.mamba_cache_mode,
        num_speculative_blocks=num_speculative_tokens,
    )
    attn = dict(block_size=cache_config.block_size, num_kv_heads=kv_heads, head_size=hf.head_dim, dtype=BF16)
    attn_cls = FullAttentionSpec
    if mla_dims is not None:
        attn, attn_cls = dict(attn, num_kv_heads=1, head_size=sum(mla_dims), cache_dtype_str="auto"), AscendMLAAttentionSpec
    attn_spec = attn_cls(**attn)
    if attn_spec.page_size_bytes < mamba_spec.page_size_bytes:  # 0.18+ (page_size_padded exists)
        attn_spec = attn_cls(**attn, page_size_padded=mamba_spec.page_size_bytes)
    specs: dict[str, KVCacheSpec] = dict.fromkeys(attn_layers, attn_spec)  # attention first
    specs.update(dict.fromkeys(mamba_layers, mamba_spec))
    config = build_kv_cache_config(specs, num_blocks, max_model_len=max_model_len, available_memory=available_memory)
    return ModelKV(
        name,
        tp,
        config,
        specs,
        runner_kwargs={"model_type": model_type or hf.model_type, **(runner_kwargs or {})},
        notes={
            "attn_block_size": cache_config.block_size,
            "mamba_block_size": mamba_spec.block_size,
            "mamba_page_size_padded": cache_config.mamba_page_size_padded,
            "mamba_shapes": tuple(tuple(s) for s in shapes),
            "mamba_dtypes": tuple(dtypes),
        },
    )

def _align_hybrid_block_size_030(vllm_config: Any) -> None:
    """0.30's hybrid sizing: vLLM's ``Platform._align_hybrid_block_size`` with the Ascend attention
    backend (vllm-ascend 0.30 overrides it only for MLA + C8 + index kpool), after the platform's
    default block size (128) where the user set none: attention block = align * cdiv(Mamba page,
    align * attention bytes per token), align = max(min kernel block size 128, block size); the
    Mamba page padded to the attention page. No K page == ssm page rule (0.18 - 0.23)."""
    from vllm.platforms import current_platform  # noqa: PLC0415

    cache_config = vllm_config.cache_config
    if cache_config.block_size is None:
        cache_config.block_size = 128
    cache_config.user_specified_mamba_block_size = False
    cache_config.kv_cache_dtype_skip_layers = []
    vllm_config.model_config.is_hybrid = True
    current_platform._align_hybrid_block_size(vllm_config, AscendAttentionBackend)


def kda_spec(num_heads: int = 8, head_dim: int = 128, conv_kernel: int = 4, block_size: int = 128):
    """A KDA layer's ``MambaSpec`` as vLLM's gated delta net layers emit it (GLM-5-next's
    ``Glm5NextLinearAttention``, Kimi's ``KimiGatedDeltaNetAttention``): the two states of
    ``MambaStateShapeCalculator.kda_state_shape`` (conv ``(3, 3 x heads x head)`` bf16, recurrent
    ``(heads, head, head)`` fp32, ``kda_state_dtype``), ``mamba_type`` GDN_ATTN; TP 1."""
    from vllm.model_executor.layers.mamba.mamba_utils import (  # noqa: PLC0415 (kda_state_shape: vLLM 0.30)
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    shapes = MambaStateShapeCalculator.kda_state_shape(1, num_heads, head_dim, conv_kernel_size=conv_kernel)
    dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto")
    return MambaSpec(block_size=block_size, shapes=shapes, dtypes=dtypes, mamba_type=gdn_mamba_type())


def qwen35_style(tp: int = 1, num_blocks: int = 4, **kwargs: Any) -> ModelKV:
    """A Qwen3.5-style hybrid as a Qwen3-Next config (vLLM 0.11 / 0.13 have no Qwen3.5 model
    class): 32 layers = 24 GDN + 8 full attention, 4 KV heads of 256 (vs Qwen3-Next's 2), GDN
    16 / 32 heads x 128 as Qwen3-Next. ``kwargs`` as :func:`qwen3_next`."""
    kwargs.setdefault("num_hidden_layers", 32)
    return qwen3_next(tp, num_blocks, num_key_value_heads=4, name="Qwen3.5-style hybrid", **kwargs)


def minimax_m1(tp: int = 1, num_blocks: int = 4, *, num_hidden_layers: int = 80, **kwargs: Any) -> ModelKV:
    """MiniMax-M1 (``MiniMaxText01ForCausalLM``; MiniMax-Text-01 has the same attention): every
    8th layer softmax attention (8 KV heads of 128, ``model.layers.{i}.self_attn.attn``), the
    others lightning attention (``model.layers.{i}.self_attn``, vLLM's
    ``MiniMaxText01LinearAttention``: one state (64/tp heads, 128, 128) in the model dtype, no
    conv), sized as :func:`mamba_hybrid` does (0.18+: pure linear attention, K page == state,
    padded page = 2 K pages). ``num_hidden_layers`` (80) keeps the 1-in-8 pattern when shrunk;
    ``kwargs`` as :func:`mamba_hybrid`."""
    from transformers import PretrainedConfig  # noqa: PLC0415

    assert num_hidden_layers % 8 == 0, num_hidden_layers
    attn_type_list = [int(i % 8 == 7) for i in range(num_hidden_layers)]
    hf = PretrainedConfig(
        model_type="minimax",
        num_hidden_layers=num_hidden_layers,
        hidden_size=6144,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        attn_type_list=attn_type_list,
    )
    hf.model_type = "minimax"
    attn_layers = [f"model.layers.{i}.self_attn.attn" for i, t in enumerate(attn_type_list) if t == 1]
    mamba_layers = [f"model.layers.{i}.self_attn" for i, t in enumerate(attn_type_list) if t == 0]
    with _model_class("vllm.model_executor.models.minimax_text_01:MiniMaxText01ForCausalLM", _MiniMaxLinearStates) as cls:
        return mamba_hybrid(
            "MiniMax-M1", tp, num_blocks, hf=hf, architecture="MiniMaxText01ForCausalLM", model_cls=cls,
            attn_layers=attn_layers, mamba_layers=mamba_layers, mamba_type=linear_attention_mamba_type(),
            runner_kwargs={"mamba_layer": MiniMaxLinearLayer} if MiniMaxLinearLayer is not None else {},
            **kwargs,
        )


def t_hyb_toy(num_blocks: int = 4) -> ModelKV:
    """The toy hybrid of shared/cases (T-HYB / C01): 6 Mamba + 2 attention layers,
    attention (128, 1 head, 64) bf16, Mamba conv (3, 256) + ssm (2, 64, 64) bf16.

    Sized by the release's rule: 0.18+ (the cases file) K page == ssm page 16384, padded page
    34304 = 2 K pages + conv on both specs; 0.11 / 0.13 (no ``page_size_padded`` on attention
    specs): attention page 32768, Mamba page 17920 padded to 32768."""
    attn = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)
    mamba = dict(block_size=128, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, BF16), mamba_type=gdn_mamba_type())
    if "page_size_padded" in {f.name for f in dataclasses.fields(FullAttentionSpec)}:
        attn = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16, page_size_padded=34304)
        mamba_spec = MambaSpec(**mamba, page_size_padded=34304)
    else:
        mamba_spec = MambaSpec(**mamba, page_size_padded=attn.page_size_bytes)
    specs: dict[str, KVCacheSpec] = {
        "model.layers.3.self_attn.attn": attn,
        "model.layers.7.self_attn.attn": attn,
    }
    for i in (0, 1, 2, 4, 5, 6):
        specs[f"model.layers.{i}.linear_attn"] = mamba_spec
    return ModelKV("T-HYB", 1, build_kv_cache_config(specs, num_blocks, max_model_len=128), specs)


def sliding_window_beside_full(num_blocks: int = 4) -> ModelKV:
    """A model with full-attention and sliding-window layers in separate groups (Gemma-style:
    4 full + 4 SWA layers, block 128, 2 KV heads, head 128, bf16, window 512), planned by vLLM."""
    full = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=128, dtype=BF16)
    swa = SlidingWindowSpec(block_size=128, num_kv_heads=2, head_size=128, dtype=BF16, sliding_window=512)
    specs: dict[str, KVCacheSpec] = {}
    for i in range(8):
        specs[f"model.layers.{i}.self_attn.attn"] = swa if i % 2 else full
    return ModelKV("full + sliding window", 1, build_kv_cache_config(specs, num_blocks, max_model_len=1024), specs)
