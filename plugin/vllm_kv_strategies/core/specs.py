"""KV cache spec classes and fields per release, and the two forms of
``KVCacheTensor`` (``size`` + ``shared_by`` up to vLLM 0.23; ``size`` +
``layers`` / ``layer_stride`` / ``block_stride`` / ``offset`` over one backing
allocation from 0.30). vLLM is imported inside functions only."""

from __future__ import annotations

import dataclasses
import importlib
from functools import cache
from typing import Any

from vllm_kv_strategies.versions import PLATFORM_SPEC_MODULES


@cache
def _spec_module() -> Any:
    import vllm.v1.kv_cache_interface as kvi

    return kvi


def vllm_spec_class(name: str) -> type | None:
    """vLLM's own spec class ``name``, or None where the release lacks it.

    vllm-ascend 0.18 rebinds ``vllm.v1.kv_cache_interface.MLAAttentionSpec``
    to its subclass ``AscendMLAAttentionSpec``; the class vLLM itself defines
    is found in that class's MRO."""
    kvi = _spec_module()
    cls = getattr(kvi, name, None)
    if cls is None:
        return None
    return next((c for c in cls.__mro__ if c.__name__ == name and c.__module__ == kvi.__name__), cls)


def spec_classes(*names: str) -> tuple[type, ...]:
    """The classes a release defines under ``names``: vLLM's own, plus what
    ``vllm.v1.kv_cache_interface`` binds the name to when a platform rebinds it
    (vllm-ascend 0.18: ``MLAAttentionSpec`` -> ``AscendMLAAttentionSpec``)."""
    kvi = _spec_module()
    found: list[type] = []
    for name in names:
        for cls in (vllm_spec_class(name), getattr(kvi, name, None)):
            if cls is not None and cls not in found:
                found.append(cls)
    return tuple(found)


def platform_spec_classes(*names: str) -> tuple[type, ...]:
    """A platform's own spec classes ``names`` where the installed release defines them: in
    its spec module (:data:`~vllm_kv_strategies.versions.PLATFORM_SPEC_MODULES`; vllm-ascend
    0.23's ``core.kv_cache_interface``), or bound into vLLM's spec module by a platform patch
    (vllm-ascend 0.18 binds its ``AscendMLAAttentionSpec`` as ``MLAAttentionSpec``); none
    where no platform is installed."""
    found: list[type] = []
    for module_name in PLATFORM_SPEC_MODULES:
        package = module_name.split(".")[0] + "."
        try:
            module = importlib.import_module(module_name)
        except Exception:  # not installed, or a release without the module
            module = None
        candidates = [getattr(module, n, None) for n in names] + list(vars(_spec_module()).values())
        for cls in candidates:
            if isinstance(cls, type) and cls.__name__ in names and cls.__module__.startswith(package) and cls not in found:
                found.append(cls)
    return tuple(found)


def uniform_type_specs_class() -> type | None:
    return getattr(_spec_module(), "UniformTypeKVCacheSpecs", None)


def restate_layer_specs(kv_cache_config: Any, restate: Any) -> Any:
    """``kv_cache_config`` with each layer's spec replaced by
    ``restate(layer_name, spec)`` (inside ``UniformTypeKVCacheSpecs``; a
    group's own spec with its first layer's name), as a shallow copy, or the
    config itself when nothing changes."""
    wrapper = uniform_type_specs_class()
    groups = []
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        if wrapper is not None and isinstance(spec, wrapper):
            inner = {n: restate(n, s) for n, s in spec.kv_cache_specs.items()}
            if any(inner[n] is not s for n, s in spec.kv_cache_specs.items()):
                spec = dataclasses.replace(spec, kv_cache_specs=inner)
        elif group.layer_names:
            spec = restate(group.layer_names[0], spec)
        groups.append(group if spec is group.kv_cache_spec else dataclasses.replace(group, kv_cache_spec=spec))
    if all(g is h for g, h in zip(groups, kv_cache_config.kv_cache_groups)):
        return kv_cache_config
    return dataclasses.replace(kv_cache_config, kv_cache_groups=groups)


def layer_spec(group_spec: Any, layer_name: str) -> Any:
    """The spec of one layer: unwraps ``UniformTypeKVCacheSpecs`` (0.11+)."""
    wrapper = uniform_type_specs_class()
    if wrapper is not None and isinstance(group_spec, wrapper):
        return group_spec.kv_cache_specs[layer_name]
    return group_spec


def is_mamba(spec: Any) -> bool:
    """A Mamba-type spec (``MambaSpec`` and its kinds: states, no K/V)."""
    return hasattr(spec, "shapes") and hasattr(spec, "mamba_type")


def is_mla(spec: Any) -> bool:
    """An MLA-type spec (vLLM's ``MLAAttentionSpec`` and vllm-ascend's subclasses)."""
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    return isinstance(spec, MLAAttentionSpec)


def head_size_v(spec: Any) -> int:
    """V head size (elements); releases before ``head_size_v`` use head_size."""
    value = getattr(spec, "head_size_v", None)
    return spec.head_size if value is None else value


def unpadded_page_bytes(spec: Any) -> int:
    """Bytes of one block's page without ``page_size_padded``."""
    if getattr(spec, "page_size_padded", None) is None:
        return spec.page_size_bytes
    for attr in ("unpadded_page_size_bytes", "real_page_size_bytes"):  # 0.30+ and some 0.2x specs
        value = getattr(spec, attr, None)
        if isinstance(value, int):
            return value
    return dataclasses.replace(spec, page_size_padded=None).page_size_bytes


def tensor_layers(tensor: Any) -> list[str]:
    """Layer names served by a ``KVCacheTensor`` (``layers`` from 0.30,
    ``shared_by`` before)."""
    layers = getattr(tensor, "layers", None)
    return list(layers if layers is not None else tensor.shared_by)


def has_strided_tensors() -> bool:
    """True from vLLM 0.30: tensors place layers by layer/block stride in one
    backing allocation."""
    kvi = _spec_module()
    return "layer_stride" in getattr(kvi.KVCacheTensor, "__dataclass_fields__", {})


def required_bytes(tensors: list[Any], strided: bool | None = None) -> int:
    """Bytes a config's ``KVCacheTensor``s plan: the sum of their sizes, or
    from vLLM 0.30 (``strided``; default: the installed release's form) the
    largest, since each ``size`` is the whole backing the tensors share."""
    sizes = [t.size for t in tensors]
    if strided is None:
        strided = has_strided_tensors()
    return (max(sizes) if strided else sum(sizes)) if sizes else 0


def tensor_num_blocks(kv_cache_config: Any, tensor: Any) -> int:
    """Blocks addressable through ``tensor`` (0.30+ strided tensors)."""
    num_blocks_of = getattr(kv_cache_config, "num_blocks_of", None)
    return num_blocks_of(tensor) if num_blocks_of else kv_cache_config.num_blocks


_PLANNER_MODULES = ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")


def planner_function(name: str) -> Any:
    """vLLM's planning function ``name`` (``get_kv_cache_configs``,
    ``generate_scheduler_kv_cache_config``, ``get_kv_cache_capacity``) from the
    first of :data:`_PLANNER_MODULES` that defines it (0.33 moved the planner).

    Raises:
        ImportError: none defines it (the message names the function and the modules).
    """
    import importlib

    for module in _PLANNER_MODULES:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        if found is not None:
            return found
    raise ImportError(f"vLLM defines no {name} in " + " or ".join(_PLANNER_MODULES))


def kv_cache_planner() -> tuple[Any, Any]:
    """vLLM's two planning steps, ``(get_kv_cache_groups,
    get_kv_cache_config_from_groups)``, from wherever the installed release
    defines them: ``vllm.v1.core.kv_cache_planning`` (0.33) or
    ``vllm.v1.core.kv_cache_utils`` (up to 0.32), found by probing.

    Raises:
        ImportError: neither module defines both (the message names them), or
            one of them exists but fails to import (that error, unchanged).
    """
    import importlib

    for module in _PLANNER_MODULES:
        try:
            planning = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the module exists; something it imports is missing
                raise
            continue
        groups = getattr(planning, "get_kv_cache_groups", None)
        config = getattr(planning, "get_kv_cache_config_from_groups", None)
        if groups is not None and config is not None:
            return groups, config
    raise ImportError(
        "vLLM defines no get_kv_cache_groups / get_kv_cache_config_from_groups in " + " or ".join(_PLANNER_MODULES)
    )


# -- vllm-ascend's quantised sparse MLA fields ---------------------------------

#: ``AscendMLAAttentionSpec`` fields that store the sparse indexer key in the
#: C8 dtype with one scale per token ("LI C8"): 0.18 ``cache_sparse_c8``,
#: 0.23 ``cache_sparse_li_c8``.
LI_C8_FIELDS = ("cache_sparse_c8", "cache_sparse_li_c8")
#: 0.23: the MLA latent packed with its scales in the C8 dtype ("SFA C8", QSFA).
SFA_C8_FIELD = "cache_sparse_sfa_c8"
#: 0.23: indexer sub-blocks per block (``decode_context_parallel_size`` with
#: ``enable_sfa_dcp_replicated_indexer``).
INDEXER_REPLICAS_FIELD = "sfa_dcp_replicated_indexer_size"
#: 0.18's LI C8 field: its split (``sparse_kv_cache_ratio``) asserts that the
#: model dtype and the scale dtype have one size.
SCALE_SIZED_LI_C8_FIELD = "cache_sparse_c8"


@dataclasses.dataclass(frozen=True)
class AscendSparseQuant:
    """What a vllm-ascend sparse MLA spec's quantisation fields say.

    Attributes:
        li_c8: the indexer key is stored in ``key_dtype`` with one
            ``scale_dtype`` scale per token.
        sfa_c8: the latent is packed with its scales in ``key_dtype`` (0.23).
        replicas: indexer sub-blocks per block (0.23 DCP replication; 1 elsewhere).
        key_dtype, scale_dtype: ``c8_k_cache_dtype`` / ``c8_k_scale_cache_dtype``
            (0.23: device defaults, int8 / fp16 on A2, fp8_e4m3fn / fp32 on A5).
        scale_sized_model: the release's split requires ``size(spec.dtype) ==
            size(scale_dtype)`` (0.18), or stock asserts.
    """

    li_c8: bool
    sfa_c8: bool
    replicas: int
    key_dtype: Any
    scale_dtype: Any
    scale_sized_model: bool

    @property
    def quantised(self) -> bool:
        return self.li_c8 or self.sfa_c8


def ascend_sparse_quant(spec: Any) -> AscendSparseQuant:
    """The quantisation fields of ``spec`` under their meaning (absent fields
    read as off / 1 / None), whatever the release calls them."""
    return AscendSparseQuant(
        li_c8=any(bool(getattr(spec, f, False)) for f in LI_C8_FIELDS),
        sfa_c8=bool(getattr(spec, SFA_C8_FIELD, False)),
        replicas=int(getattr(spec, INDEXER_REPLICAS_FIELD, 1) or 1),
        key_dtype=getattr(spec, "c8_k_cache_dtype", None),
        scale_dtype=getattr(spec, "c8_k_scale_cache_dtype", None),
        scale_sized_model=bool(getattr(spec, SCALE_SIZED_LI_C8_FIELD, False)),
    )
