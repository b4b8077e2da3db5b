"""vllm-ascend's ``NPUModelRunner`` (0.11 - 0.30): the release facts the
plugin's layout depends on. What it patches in each release (the runner and,
on 0.11 / 0.13, the hybrid attention + Mamba page sizing) is declared in
:mod:`vllm_kv_strategies.platforms.ascend.targets`, re-exported here.

The layout itself (raw buffers per part, Mamba states by byte offset, the
hybrid single buffer) is the plugin's own, in
:mod:`vllm_kv_strategies.platforms.ascend.layout.buffers`; these functions only say how a
release differs. Each answer that depends on the release is read from the
installed release's row of :mod:`vllm_kv_strategies.platforms.ascend.runner_releases`;
0.30's strided form and its stock-only paths are in :mod:`.strided` and
:mod:`.stock_only`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from vllm_kv_strategies.platforms.ascend.strided import (
    interleaved_kv_layers,
    interleaved_kv_shape,
    kv_interleaved_shape,
    is_hybrid,
    kernel_block_sizes_by_layer,
    layer_specs,
    overlay_form_refusal,
    overlay_refusal,
    overlays_groups,
    private_bytes,
    private_layer_config,
    strided_form,
    strided_layout_gap,
    unbuilt_layout_reason,
)
from vllm_kv_strategies.platforms.ascend.stock_only import config_as_allocated, hybrid_corruption, stock_only_kind  # noqa: F401  (re-exported: 0.30's stock paths)
from vllm_kv_strategies.platforms.ascend.runner_releases import runner_release
from vllm_kv_strategies.platforms.ascend.targets import (
    ALL_TARGETS,
    ASCEND_V2,
    ASCEND_V2_ALLOCATION,
    HYBRID_SIZING,
    MULTI_GROUP_BUDGET,
    SPLIT_INIT,
    THREE_INITS,
    hybrid_sizing_target,
    target,
    targets,
)

#: Model types whose hybrid sizing the plugin changes on vllm-ascend 0.11 / 0.13:
#: Qwen3-Next's gated delta net kernels were checked to take the layout
#: (block-strided conv state, contiguous ssm state), and the platform keeps a
#: raised block size only for ``qwen3_next`` (0.11 ``platform.py``
#: ``check_and_update_config``; 0.13 ``utils.refresh_block_size``); other
#: hybrids are reset to 128 there.
SIZED_HYBRID_MODEL_TYPES = frozenset({"qwen3_next"})
#: Tokens per kernel block of 0.11 / 0.13's attention backend
#: (``AscendAttentionBackend.get_supported_block_size()[0]``): with several KV
#: cache groups the runner views every block as ``block_size // 128`` kernel
#: blocks, so a hybrid block size must be a multiple of it.
HYBRID_KERNEL_BLOCK_SIZE = 128

#: Model types whose decoder layers hold two attention modules (the binder's
#: ``num_attn_module``): ``longcat_flash``; ``longcat_flash_ngram`` too in 0.30.
TWO_ATTENTION_MODULES = frozenset({"longcat_flash", "longcat_flash_ngram"})
#: Indexer key width vllm-ascend 0.11 and 0.13 hard-code for the legacy sparse
#: form (used when the model config has no ``index_head_dim``).
LEGACY_INDEX_HEAD_DIM = 128


def built_for_310p() -> bool:
    """Whether the installed vllm-ascend wheel is the 310P build (its
    ``_build_info``: 0.11 ``__soc_version__`` "ASCEND310P..."; 0.13+
    ``__device_type__`` "310P"), read without torch_npu."""
    try:
        from vllm_ascend import _build_info
    except ImportError:
        return False
    soc = str(getattr(_build_info, "__soc_version__", "")).lower()
    return soc.startswith("ascend310p") or getattr(_build_info, "__device_type__", None) == "310P"


def mamba_states_interleaved(vllm_ascend: str | None = None) -> bool:
    """How Mamba layers view their raw buffer, per vllm-ascend release.

    True before 0.13 (0.11): block-major like upstream vLLM, state i of block
    j at byte ``j * page + sum(bytes of states < i)`` (``page`` includes
    ``page_size_padded``), so dim 0 of a state view has a stride of one page.
    False from 0.13: state after state, each ``(num_blocks, *shape)``
    contiguous from the byte where the previous state ends.
    """
    return runner_release(vllm_ascend).mamba_states_interleaved


def stock_shares_buffers(vllm_ascend: str | None = None) -> bool:
    """Whether stock lets every layer of one ``KVCacheTensor`` alias the first
    layer's part buffers (0.13+), so parts of different bytes per block would
    corrupt under stock rather than cost buffers of their own (0.11):
    :attr:`~.runner_releases.RunnerRelease.stock_shares_buffers`."""
    return runner_release(vllm_ascend).stock_shares_buffers


def stock_shares_hybrid_tensors(vllm_ascend: str | None = None) -> bool:
    """Whether stock views attention and Mamba layers of one ``KVCacheTensor``
    in one raw buffer (0.18+), so a tensor whose blocks do not line up
    corrupts under stock rather than costing extra buffers (0.11 / 0.13)."""
    return runner_release(vllm_ascend).stock_shares_hybrid


def legacy_sparse_form(vllm_ascend: str | None = None) -> bool:
    """Whether a release gives DeepSeek V3.2 (sparse MLA) layers the legacy
    ``FullAttentionSpec`` of twice the MLA page (before 0.18: 0.11, 0.13)."""
    return runner_release(vllm_ascend).legacy_sparse_form


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
    to ND, or NZ on 310P); later releases define no such method.

    What stock does to KV cache views on the device, per release (read in
    each release's ``vllm_ascend/worker/model_runner_v1.py``): 0.11 casts
    attention views through ``_convert_torch_format``; 0.13, 0.18, 0.23 and
    0.30 call no ``npu_format_cast`` (nor any other ``torch_npu`` operation)
    on KV cache tensors, on any device: their views stay in the format they
    were allocated in. The plugin calls this converter where it exists and
    casts nothing otherwise (a cast that copies would also break aliasing)."""
    return getattr(runner, "_convert_torch_format", None)


@cache
def binds_per_virtual_engine() -> bool:
    """Whether the installed vLLM's ``bind_kv_cache`` (``vllm/v1/worker/utils.py``)
    binds a layer's cache as a list with one entry per virtual engine,
    ``module.kv_cache = [cache]`` (vLLM 0.11 - 0.18: attention reads
    ``self.kv_cache[forward_context.virtual_engine]``), rather than the cache
    itself (vLLM 0.23). Asked of vLLM's own function, the one vllm-ascend
    installs included, by binding a sentinel to a one-layer forward context."""
    from types import SimpleNamespace

    from vllm.v1.worker import utils

    sentinel, module = object(), SimpleNamespace(kv_cache=None)
    utils.bind_kv_cache({"model.layers.0.attn": sentinel}, {"model.layers.0.attn": module}, [])
    bound = module.kv_cache
    if bound is sentinel:
        return False
    if isinstance(bound, list) and len(bound) == 1 and bound[0] is sentinel:
        return True
    raise RuntimeError(f"vLLM's bind_kv_cache bound {bound!r}: neither the cache nor [cache]")


def coallocated_groups(vllm_ascend: str | None = None) -> frozenset[str]:
    """Part groups (:attr:`~vllm_kv_strategies.core.strategies.PagePart.group`)
    a release places in one raw buffer: the LI C8 indexer key and its scale
    (``"indexer"``) from 0.23 (``NPUModelRunner._allocate_sparse_c8_indexer_tensors``,
    aligned once with KV transfer), none before."""
    return runner_release(vllm_ascend).coallocated_groups


def fa_quant_enabled(vllm_config: Any) -> bool:
    """vllm-ascend's ``enable_fa_quant(vllm_config)`` (FA-quantised attention
    KV caches): in ``vllm_ascend.quantization.utils`` from 0.18; False where a
    release has none (0.11, 0.13)."""
    try:
        from vllm_ascend.quantization.utils import enable_fa_quant
    except ImportError:
        return False
    return bool(enable_fa_quant(vllm_config))


def fa_quant_refusal(runner: Any, layer_names: Iterable[str], specs: dict[str, Any] | None = None) -> str | None:
    """Where stock crashes on an FA-quant model, what it is; else None.

    The runner splits the cache of each FA-quant layer (the quant config's
    ``is_fa_quant_layer``) as [k, 2 x v] (``get_kv_quant_split_factor``)
    when ``enable_fa_quant(vllm_config)`` holds (0.18: and
    ``runner.is_kv_consumer``), while the layer's spec is the FA-quant form
    only where ``enable_fa_quant(vllm_config, layer)`` holds (A2: a pure
    consumer). On a ``kv_both`` instance, or for non-MLA attention (no
    release builds an FA-quant spec for it), the split does not fit the
    spec's page and stock raises. So it does where ``enable_fa_quant(vllm_config,
    layer)`` holds but the layer's spec (``specs``: layer -> spec, where known)
    is not the one-byte FA-quant form (0.30 asks the layer's own spec).
    """
    vllm_config = runner.vllm_config
    quant = getattr(vllm_config, "quant_config", None)
    if quant is None or not hasattr(quant, "is_fa_quant_layer") or not fa_quant_enabled(vllm_config):
        return None
    if not runner_release().fa_quant_role_in_probe and not getattr(runner, "is_kv_consumer", False):
        return None
    split = [name for name in layer_names if quant.is_fa_quant_layer(name)]
    if not split:
        return None
    if not getattr(runner.model_config, "use_mla", False):
        return f"quantised attention KV cache for non-MLA attention (FA quant, e.g. layer {split[0]!r}; stock raises)"
    from vllm_ascend.quantization.utils import enable_fa_quant

    plain = [name for name in split if not enable_fa_quant(vllm_config, name)]
    if plain:
        role = getattr(vllm_config.kv_transfer_config, "kv_role", None)
        return (
            f"quantised attention KV cache (FA quant) on a {role} instance: the runner splits layer "
            f"{plain[0]!r} for FA quant while its spec stays unquantised (stock raises)"
        )
    wide = [name for name in split if specs and name in specs and specs[name].dtype.itemsize != 1]
    if wide:
        spec = specs[wide[0]]
        return (
            f"quantised attention KV cache (FA quant): the runner splits layer {wide[0]!r} for FA quant while its spec "
            f"is the unquantised {type(spec).__name__}(head_size={spec.head_size}, dtype={spec.dtype}) (stock raises)"
        )
    return None


def stock_only_reason(runner: Any, layer_names: Iterable[str] = (), specs: dict[str, Any] | None = None) -> str | None:
    """Runner features whose KV cache layouts no strategy builds (their layout
    is a different family, or stock itself fails on them), or None.
    ``specs``: layer -> its spec in the config, where known."""
    if getattr(runner, "use_compress", False):
        return "compressed KV cache (use_compress)"
    if getattr(runner, "enable_hamming_sparse", False):
        return "hamming sparse attention"
    hf = getattr(getattr(runner, "model_config", None), "hf_text_config", None)
    if getattr(hf, "model_type", None) == "deepseek_v4":
        return "DeepSeek V4 KV cache"
    reason = fa_quant_refusal(runner, layer_names, specs)
    if reason is not None:
        return reason
    mla = getattr(runner, "use_sparse", False) or getattr(getattr(runner, "model_config", None), "use_mla", False)
    if bsh_int8_layout(runner) and mla:
        return (
            "int8 MLA KV cache in vllm-ascend 0.11's BSH layout (additional_config kv_cache_dtype=int8; "
            "stock raises: AscendMLABackend has no get_bsh_kv_cache_shape)"
        )
    return None


def sizing_refusal(vllm_config: Any) -> str | None:
    """What in a ``VllmConfig`` keeps vllm-ascend's own hybrid page sizing
    (the K page == ssm state sizing of :mod:`vllm_kv_strategies.platforms.ascend.sizing`
    is defined for plain K/V pages): a DeepSeek V4 model, FA-quantised
    attention, 0.11's int8 BSH cache; None otherwise. Asked in the front-end
    process, from the config alone."""
    hf = getattr(getattr(vllm_config, "model_config", None), "hf_text_config", None)
    if getattr(hf, "model_type", None) == "deepseek_v4":
        return "a DeepSeek V4 KV cache"
    quant = getattr(vllm_config, "quant_config", None)
    if quant is not None and hasattr(quant, "get_kv_quant_split_factor") and fa_quant_enabled(vllm_config):
        return "an FA-quantised attention KV cache"
    if (getattr(vllm_config, "additional_config", None) or {}).get("kv_cache_dtype") == "int8":
        return "an int8 KV cache in the BSH layout"
    return None


def bsh_int8_layout(runner: Any) -> bool:
    """Whether the runner views full-attention K/V in the BSH layout:
    vllm-ascend 0.11 with ``additional_config["kv_cache_dtype"] == "int8"``
    (``NPUModelRunner.initialize_kv_cache_tensors``; later releases read no
    such key). The ``bsh_attention`` kind builds it."""
    additional = getattr(getattr(runner, "vllm_config", None), "additional_config", None) or {}
    return additional.get("kv_cache_dtype") == "int8" and runner_release().bsh_int8_key
