"""Build a real vllm-ascend ``NPUModelRunner`` (no ``__init__``) that can run the stock KV cache
initialisation on CPU, plus builders of real ``KVCacheConfig`` objects for real models.

The NPU stubs (``npu_stubs.install``) must be installed before this module is imported; the
``conftest.py`` next to it does that.

``make_runner`` sets exactly the instance attributes that the stock
``initialize_kv_cache_tensors`` / ``_allocate_kv_cache_tensors`` / ``_reshape_kv_cache_tensors``
of vllm-ascend 0.23.0 read (see STOCK_0.23.md), with real vLLM / vllm-ascend objects wherever the
code type-checks them:

* ``attn_groups``: real ``vllm.v1.worker.utils.AttentionGroup`` with the real Ascend backends;
* ``compilation_config.static_forward_context``: real layer classes (``Attention``,
  ``MLAAttention``, Ascend's ``AscendGatedDeltaNetAttention``) created with ``__new__`` and only
  the fields the KV code reads (MLA ``kv_lora_rank`` / ``qk_rope_head_dim``); ``bind_kv_cache``
  sets their ``kv_cache``;
* ``vllm_config.kv_transfer_config``: a real ``KVTransferConfig`` when ``kv_transfer=True``.

The config builders derive everything the way vLLM + vllm-ascend do at start-up:
per-layer specs as vllm-ascend's ``NPUModelRunner.get_kv_cache_spec`` would emit them, GDN state
shapes/dtypes from vLLM's ``Qwen3NextForCausalLM`` class methods, the hybrid attention block
size / Mamba page padding from vllm-ascend's patched ``HybridAttentionMambaModelConfig``, and the
groups + tensors from vLLM's ``kv_cache_utils`` (``get_kv_cache_groups`` +
``get_kv_cache_config_from_groups``, the two planning steps of ``get_kv_cache_configs``, with
``num_gpu_blocks_override`` = the requested ``num_blocks``; the max-model-len memory check of
``get_kv_cache_configs`` is skipped so that any small ``num_blocks`` works).

Importing ``vllm_ascend.worker.model_runner_v1`` (done here) applies vllm-ascend's global
platform patches and worker patches process-wide (model_runner_v1 -> patch.worker.patch_draft_quarot
-> patch.worker -> patch_v2.patch_use_v2_model_runner -> patch.platform), so the vLLM planning code
used here is the Ascend-patched one, as in a real vllm-ascend process.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Iterable

import torch
from torch import nn
from vllm.config.kv_transfer import KVTransferConfig
from vllm.model_executor.layers.attention import Attention, MLAAttention
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core.kv_cache_utils import (
    get_kv_cache_config_from_groups,
    get_kv_cache_groups,
)
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    KVCacheTensor,
    MambaSpec,
    MLAAttentionSpec,
    UniformTypeKVCacheSpecs,
)
from vllm.v1.worker.utils import AttentionGroup
from vllm_ascend.attention.attention_v1 import AscendAttentionBackend
from vllm_ascend.attention.mla_v1 import AscendMLABackend
from vllm_ascend.attention.sfa_v1 import AscendSFABackend
from vllm_ascend.core.kv_cache_interface import AscendMLAAttentionSpec
from vllm_ascend.ops.gdn import AscendGatedDeltaNetAttention
from vllm_ascend.ops.gdn_attn_builder import AscendGDNAttentionBackend
from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

__all__ = [
    "KVCacheConfig",
    "KVCacheGroupSpec",
    "KVCacheTensor",
    "ModelKV",
    "NPUModelRunner",
    "RUNNER_ATTRS",
    "build_kv_cache_config",
    "deepseek_v3",
    "deepseek_v32",
    "make_runner",
    "qwen3_8b",
    "qwen3_next",
    "ALIGNMENT",
    "t_hyb_toy",
]

ALIGNMENT = 2 * 1024 * 1024  # vllm-ascend's transfer alignment (model_runner_v1.py:4099)
BF16 = torch.bfloat16

# Instance attributes the stock 0.23.0 KV methods read (checked by test_stock_smoke with a tracing
# subclass). kv_caches is appended to, hybrid_with_attn_and_mamba is written by the allocator.
RUNNER_ATTRS = (
    "device",
    "vllm_config",
    "model_config",
    "compilation_config",
    "kv_cache_config",
    "attn_groups",
    "use_hybrid_blocks",
    "runner_only_attn_layers",
    "shared_kv_cache_layers",
    "kv_caches",
    "use_compress",
    "use_sparse",
    "enable_hamming_sparse",
)


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


def _layer_for(name: str, spec: KVCacheSpec, mla_dims: tuple[int, int]) -> nn.Module:
    if isinstance(spec, MambaSpec):
        return _bare_layer(AscendGatedDeltaNetAttention, prefix=name)
    if isinstance(spec, MLAAttentionSpec):
        sparse = getattr(spec, "sparse_head_dim", None)
        kv_lora_rank, rope = (sparse[0], sparse[1]) if sparse else mla_dims
        return _bare_layer(
            MLAAttention, layer_name=name, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=rope
        )
    return _bare_layer(Attention, layer_name=name)


def _backend_for(spec: KVCacheSpec) -> type:
    if isinstance(spec, MambaSpec):
        if spec.mamba_type == MambaAttentionBackendEnum.GDN_ATTN:
            return AscendGDNAttentionBackend
        from vllm.v1.attention.backends.registry import get_mamba_attn_backend  # noqa: PLC0415

        return get_mamba_attn_backend(spec.mamba_type)
    if isinstance(spec, AscendMLAAttentionSpec) and spec.sparse_head_dim is not None:
        return AscendSFABackend
    if isinstance(spec, MLAAttentionSpec):
        return AscendMLABackend
    return AscendAttentionBackend


def _layer_specs(kv_cache_config: KVCacheConfig) -> dict[str, KVCacheSpec]:
    out: dict[str, KVCacheSpec] = {}
    for group in kv_cache_config.kv_cache_groups:
        for name in group.layer_names:
            spec = group.kv_cache_spec
            if isinstance(spec, UniformTypeKVCacheSpecs):
                spec = spec.kv_cache_specs[name]
            out[name] = spec
    return out


def _attn_groups(kv_cache_config: KVCacheConfig) -> list[list[AttentionGroup]]:
    """One AttentionGroup per (backend, layer spec) inside each KV cache group, as
    NPUModelRunner.initialize_attn_backend builds them (metadata builders left empty)."""
    layer_specs = _layer_specs(kv_cache_config)
    result = []
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        by_key: dict[tuple[type, KVCacheSpec], list[str]] = defaultdict(list)
        for name in group.layer_names:
            spec = layer_specs[name]
            by_key[(_backend_for(spec), spec)].append(name)
        result.append(
            [AttentionGroup(backend, names, spec, gid) for (backend, spec), names in by_key.items()]
        )
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
    runner_only_attn_layers: Iterable[str] = (),
    shared_kv_cache_layers: dict[str, str] | None = None,
    extra_layers: dict[str, nn.Module] | None = None,
    trace: bool = False,
    device: str | torch.device = "cpu",
) -> NPUModelRunner:
    """A real NPUModelRunner made with ``__new__`` carrying what the stock KV code reads.

    ``mla_dims`` = (kv_lora_rank, qk_rope_head_dim) for MLA layers without ``sparse_head_dim``.
    ``use_sparse`` is set when any layer spec is an ``AscendMLAAttentionSpec`` with
    ``sparse_head_dim`` (as vllm-ascend derives it from ``index_topk`` in the HF config); then
    ``model_config.hf_text_config.index_head_dim`` is taken from the spec unless given, and
    ``c8_k_cache_dtype`` / ``c8_k_scale_cache_dtype`` are copied from the spec.
    ``shared_kv_cache_layers`` maps a KV-sharing layer to its target (a fake layer is added for it).
    ``trace=True`` returns a subclass instance that records the instance attributes read, in
    ``runner._reads``.
    """
    layer_specs = _layer_specs(kv_cache_config)
    sparse_specs = [
        s
        for s in layer_specs.values()
        if isinstance(s, AscendMLAAttentionSpec) and s.sparse_head_dim is not None
    ]
    use_sparse = bool(sparse_specs)
    if use_sparse and index_head_dim is None:
        index_head_dim = max(s.sparse_head_dim[2] for s in sparse_specs)

    forward_context: dict[str, nn.Module] = {
        name: _layer_for(name, spec, mla_dims) for name, spec in layer_specs.items()
    }
    shared = dict(shared_kv_cache_layers or {})
    for name, target in shared.items():
        forward_context[name] = _layer_for(name, layer_specs[target], mla_dims)
    forward_context.update(extra_layers or {})

    hf_text_config = SimpleNamespace(model_type=model_type)
    if index_head_dim is not None:
        hf_text_config.index_head_dim = index_head_dim
    model_config = SimpleNamespace(
        hf_text_config=hf_text_config,
        use_mla=any(isinstance(s, MLAAttentionSpec) for s in layer_specs.values()),
    )
    compilation_config = SimpleNamespace(static_forward_context=forward_context)
    transfer = (
        KVTransferConfig(kv_connector=kv_connector, kv_role=kv_role) if kv_transfer else None
    )
    vllm_config = SimpleNamespace(
        kv_transfer_config=transfer,
        quant_config=None,
        model_config=model_config,
        compilation_config=compilation_config,
        additional_config={},
    )

    cls = _tracing_subclass(NPUModelRunner) if trace else NPUModelRunner
    runner = cls.__new__(cls)
    attrs: dict[str, Any] = dict(
        device=torch.device(device),
        vllm_config=vllm_config,
        model_config=model_config,
        compilation_config=compilation_config,
        kv_cache_config=kv_cache_config,
        attn_groups=_attn_groups(kv_cache_config),
        runner_only_attn_layers=set(runner_only_attn_layers),
        shared_kv_cache_layers=shared,
        kv_caches=[],
        use_compress=False,
        use_sparse=use_sparse,
        enable_hamming_sparse=False,
    )
    # as in NPUModelRunner.initialize_kv_cache (model_runner_v1.py:3856)
    attrs["use_hybrid_blocks"] = len(attrs["attn_groups"]) > 1
    if use_sparse:
        attrs["c8_k_cache_dtype"] = sparse_specs[0].c8_k_cache_dtype
        attrs["c8_k_scale_cache_dtype"] = sparse_specs[0].c8_k_scale_cache_dtype
    if trace:
        object.__setattr__(runner, "_reads", set())
    for key, value in attrs.items():
        object.__setattr__(runner, key, value)
    return runner


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


def build_kv_cache_config(
    specs: dict[str, KVCacheSpec],
    num_blocks: int,
    *,
    max_model_len: int | None = None,
    mamba_cache_mode: str = "none",
) -> KVCacheConfig:
    """Plan one worker's KV cache with vLLM's own code: ``get_kv_cache_groups`` (grouping,
    page-size unification) then ``get_kv_cache_config_from_groups`` (tensors, shared_by), with
    ``num_gpu_blocks_override=num_blocks``. ``specs`` order matters (it sets the group order)."""
    if max_model_len is None:
        attn = [s for s in specs.values() if isinstance(s, AttentionSpec)]
        max_model_len = min(s.block_size for s in attn) if attn else 16
    vllm_config = SimpleNamespace(
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=max_model_len
        ),
        cache_config=SimpleNamespace(
            num_gpu_blocks_override=num_blocks, mamba_cache_mode=mamba_cache_mode
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
    from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry  # noqa: PLC0415

    specs = dict(specs)  # get_kv_cache_groups may rewrite entries in place
    KVCacheSpecRegistry.check_kv_cache_spec_registry(specs)
    groups = get_kv_cache_groups(vllm_config, specs)
    config = get_kv_cache_config_from_groups(vllm_config, groups, 1 << 40)
    assert config.num_blocks == num_blocks, config.num_blocks
    return config


def qwen3_8b(tp: int = 1, num_blocks: int = 4, block_size: int = 128) -> ModelKV:
    """Qwen3-8B: 36 full-attention layers, 8 KV heads (8/tp per rank), head 128, bf16."""
    total_kv_heads, layers = 8, 36
    spec = FullAttentionSpec(
        block_size=block_size,
        num_kv_heads=max(1, total_kv_heads // tp),
        head_size=128,
        dtype=BF16,
    )
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(layers)}
    return ModelKV(
        "Qwen3-8B", tp, build_kv_cache_config(specs, num_blocks), specs,
        runner_kwargs={"model_type": "qwen3"},
    )


def deepseek_v3(
    tp: int = 1, num_blocks: int = 4, block_size: int = 128, upstream_spec: bool = False
) -> ModelKV:
    """DeepSeek-V3: 61 MLA layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576, bf16.

    vllm-ascend re-wraps vLLM's MLAAttentionSpec into ``AscendMLAAttentionSpec`` (num_kv_heads 1,
    head 576) in ``NPUModelRunner.get_kv_cache_spec``; ``upstream_spec=True`` keeps vLLM's plain
    ``MLAAttentionSpec`` instead (what an upstream runner would see). TP does not change MLA."""
    cls = MLAAttentionSpec if upstream_spec else AscendMLAAttentionSpec
    spec = cls(block_size=block_size, num_kv_heads=1, head_size=576, dtype=BF16, cache_dtype_str="auto")
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(61)}
    return ModelKV(
        "DeepSeek-V3" + (" (upstream MLAAttentionSpec)" if upstream_spec else ""),
        tp,
        build_kv_cache_config(specs, num_blocks),
        specs,
        runner_kwargs={"model_type": "deepseek_v3", "mla_dims": (512, 64)},
    )


def deepseek_v32(
    tp: int = 1,
    num_blocks: int = 4,
    block_size: int = 128,
    *,
    li_c8: bool = False,
    sfa_c8: bool = False,
) -> ModelKV:
    """DeepSeek-V3.2-Exp (sparse MLA / DSA): 61 layers, each with an indexer key cache.

    As vllm-ascend's get_kv_cache_spec builds it: ``AscendMLAAttentionSpec`` with
    ``sparse_head_dim=(kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128)`` and
    ``head_size=704``. ``li_c8`` quantises the indexer key (int8 + fp16 scale on A2).
    ``sfa_c8`` is the A5 packed layout: ``sparse_head_dim=(packed, 0, 128)`` where packed =
    512 + 64*2 + (512/128)*4 = 656 bytes (vllm_ascend/attention/utils.py:25); its cache dtype is
    the spec's ``c8_k_cache_dtype`` (int8 with the A2 build installed here, fp8 on a real A5)."""
    if sfa_c8:
        from vllm_ascend.attention.utils import get_sfa_qsfa_packed_head_dim  # noqa: PLC0415

        sparse_head_dim = (get_sfa_qsfa_packed_head_dim(512, 64), 0, 128)
    else:
        sparse_head_dim = (512, 64, 128)
    spec = AscendMLAAttentionSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=sum(sparse_head_dim),
        sparse_head_dim=sparse_head_dim,
        dtype=BF16,
        cache_dtype_str="auto",
        cache_sparse_sfa_c8=sfa_c8,
        cache_sparse_li_c8=li_c8,
    )
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(61)}
    suffix = "".join(s for s, on in ((" SFA-C8", sfa_c8), (" LI-C8", li_c8)) if on)
    return ModelKV(
        "DeepSeek-V3.2-Exp" + suffix,
        tp,
        build_kv_cache_config(specs, num_blocks),
        specs,
        runner_kwargs={"model_type": "deepseek_v32", "mla_dims": (512, 64), "index_head_dim": 128},
    )


def _qwen3_next_hf_config():
    from transformers import Qwen3NextConfig  # noqa: PLC0415

    return Qwen3NextConfig(
        num_hidden_layers=48,
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,
    )


def qwen3_next(tp: int = 1, num_blocks: int = 4, max_model_len: int = 512) -> ModelKV:
    """Qwen3-Next-80B-A3B: 48 layers = 36 Gated DeltaNet (``linear_attn``) + 12 full attention
    (every 4th layer, ``self_attn.attn``), as vLLM + vllm-ascend size them at start-up:

    * GDN state shapes / dtypes from vLLM's ``Qwen3NextForCausalLM.get_mamba_state_shape_from_config``
      and ``get_mamba_state_dtype_from_config`` (conv (3, 8192/tp), ssm (32/tp, 128, 128), bf16);
    * attention block size and Mamba page padding from vllm-ascend's patched
      ``HybridAttentionMambaModelConfig.verify_and_update_config``
      (vllm_ascend/patch/platform/patch_mamba_config.py): K page == SSM page, padded page =
      2 * K page + conv page; attention specs get ``page_size_padded`` as in
      NPUModelRunner.get_kv_cache_spec;
    * groups/tensors from vLLM's planner (attention specs first, as Ascend's get_kv_cache_spec
      orders them, so group 0 is the attention group).

    Importing the patch module applies that vllm-ascend patch process-wide (as vllm-ascend does).
    """
    import vllm_ascend.patch.platform.patch_mamba_config  # noqa: F401, PLC0415
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig  # noqa: PLC0415
    from vllm.model_executor.models.qwen3_next import Qwen3NextForCausalLM  # noqa: PLC0415

    hf = _qwen3_next_hf_config()
    kv_heads = max(1, hf.num_key_value_heads // tp)
    parallel_config = SimpleNamespace(tensor_parallel_size=tp)
    model_config = SimpleNamespace(
        hf_config=hf,
        hf_text_config=hf,
        dtype=BF16,
        architecture="Qwen3NextForCausalLM",
        model_impl="auto",
        runner_type="generate",
        convert_type="none",
        use_mla=False,
        max_model_len=max_model_len,
        supports_mamba_prefix_caching=True,
        get_num_kv_heads=lambda pc: max(1, hf.num_key_value_heads // pc.tensor_parallel_size),
        get_head_size=lambda: hf.head_dim,
    )
    cache_config = SimpleNamespace(
        cache_dtype="auto",
        block_size=128,  # Ascend default; raised by the patch
        mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype="auto",
        mamba_page_size_padded=None,
        mamba_cache_mode="none",
        mamba_block_size=None,
        enable_prefix_caching=False,
    )
    vllm_config = SimpleNamespace(
        model_config=model_config,
        cache_config=cache_config,
        parallel_config=parallel_config,
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, enable_chunked_prefill=True
        ),
        speculative_config=None,
        kv_transfer_config=None,
    )
    HybridAttentionMambaModelConfig.verify_and_update_config(vllm_config)

    shapes = Qwen3NextForCausalLM.get_mamba_state_shape_from_config(vllm_config)
    dtypes = Qwen3NextForCausalLM.get_mamba_state_dtype_from_config(vllm_config)
    mamba_spec = MambaSpec(
        block_size=cache_config.mamba_block_size,
        shapes=tuple(shapes),
        dtypes=tuple(dtypes),
        page_size_padded=cache_config.mamba_page_size_padded,
        mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
        mamba_cache_mode=cache_config.mamba_cache_mode,
        num_speculative_blocks=0,
    )
    attn_spec = FullAttentionSpec(
        block_size=cache_config.block_size, num_kv_heads=kv_heads, head_size=hf.head_dim, dtype=BF16
    )
    if attn_spec.page_size_bytes < mamba_spec.page_size_bytes:
        attn_spec = FullAttentionSpec(
            block_size=cache_config.block_size,
            num_kv_heads=kv_heads,
            head_size=hf.head_dim,
            dtype=BF16,
            page_size_padded=mamba_spec.page_size_bytes,
        )
    layer_types = hf.layer_types
    specs: dict[str, KVCacheSpec] = {}
    for i, kind in enumerate(layer_types):  # attention first (Ascend get_kv_cache_spec order)
        if kind == "full_attention":
            specs[f"model.layers.{i}.self_attn.attn"] = attn_spec
    for i, kind in enumerate(layer_types):
        if kind == "linear_attention":
            specs[f"model.layers.{i}.linear_attn"] = mamba_spec
    config = build_kv_cache_config(specs, num_blocks, max_model_len=max_model_len)
    return ModelKV(
        "Qwen3-Next-80B-A3B",
        tp,
        config,
        specs,
        runner_kwargs={"model_type": "qwen3_next"},
        notes={
            "attn_block_size": cache_config.block_size,
            "mamba_block_size": cache_config.mamba_block_size,
            "mamba_page_size_padded": cache_config.mamba_page_size_padded,
            "mamba_shapes": tuple(shapes),
            "mamba_dtypes": tuple(dtypes),
        },
    )


def t_hyb_toy(num_blocks: int = 4) -> ModelKV:
    """The toy hybrid of shared/cases (T-HYB / C01): 6 Mamba + 2 attention layers."""
    attn = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16,
                             page_size_padded=34304)
    mamba = MambaSpec(block_size=128, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, BF16),
                      mamba_type=MambaAttentionBackendEnum.GDN_ATTN)
    mamba = MambaSpec(block_size=128, shapes=mamba.shapes, dtypes=mamba.dtypes,
                      page_size_padded=34304, mamba_type=MambaAttentionBackendEnum.GDN_ATTN)
    specs: dict[str, KVCacheSpec] = {
        "model.layers.3.self_attn.attn": attn,
        "model.layers.7.self_attn.attn": attn,
    }
    for i in (0, 1, 2, 4, 5, 6):
        specs[f"model.layers.{i}.linear_attn"] = mamba
    return ModelKV("T-HYB", 1, build_kv_cache_config(specs, num_blocks, max_model_len=128), specs)

