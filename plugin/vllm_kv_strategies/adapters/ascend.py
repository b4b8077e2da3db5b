"""vllm-ascend's ``NPUModelRunner`` (module ``vllm_ascend.worker.model_runner_v1``).

Replaces the runner's KV cache initialisation, whatever the release calls it
(:func:`vllm_kv_strategies.compat.ascend_target`): from 0.13
``initialize_kv_cache_tensors`` and its two halves, ``_allocate_kv_cache_tensors``
(raw int8 buffers per layer) and ``_reshape_kv_cache_tensors`` (typed views per
layer); in 0.11 the three complete initialisations ``initialize_kv_cache``
chooses from (general, DeepSeek MLA, DeepSeek sparse). Any caller of any of
them gets the strategies' result. The Ascend layout, per ``KVCacheTensor``:

* attention kinds (``separate_buffers``): one raw buffer per page part (K and
  V; MLA nope and rope; sparse MLA plus the indexer key cache), each viewed
  with num_blocks as dim 0, because the KV transfer engines register them one
  by one. Every layer in the tensor's ``shared_by`` aliases those buffers;
  part sizes are ``num_blocks x part bytes``, integer-exact;
* Mamba: one raw buffer of the tensor's size shared by all its Mamba layers,
  viewed state after state (0.13+) or block by block with a one-page stride
  (0.11), as the release's own runner does
  (:func:`vllm_kv_strategies.compat.mamba_states_interleaved`);
* a tensor shared by attention and Mamba layers (Qwen3.5-style, vllm-ascend
  PR #6887): one raw buffer; Mamba states from byte 0, the attention parts
  packed at its end (K where the ssm state is, V after it), when that is
  block-consistent: a byte that two layers share belongs to the same block
  index in both. vllm-ascend 0.18+ size such models for it (K page == ssm
  page). Where it is not (0.11 / 0.13 sizing: attention page == padded Mamba
  page), the attention layers get their own K/V buffers and the Mamba layers
  still share one. Whether any tensor is such a hybrid is decided from the
  whole config before allocating, and then every attention tensor uses the
  single-buffer layout.

With ``kv_transfer_config`` set every raw buffer's ``data_ptr`` is a multiple
of 2 MiB (over-allocated by 2 MiB and sliced); without it nothing is padded.
Attention views go through the runner's format cast where the release has one
(0.11); otherwise, on an NPU, each view is cast to ND with
``torch_npu.npu_format_cast``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .. import compat
from ..errors import KVCacheLayoutError
from ..logger import PREFIX, logger
from ..plan import KVCachePlan, LayerPlan
from ..report import log_summary
from .base import RunnerAdapter, allocate_bytes

#: Prefill/decode disaggregation: KV transfer engines need 2 MiB aligned buffers.
TRANSFER_ALIGNMENT = 2 * 1024 * 1024
#: torch_npu's ACL format id of ND.
ACL_FORMAT_ND = 2


@dataclass(frozen=True)
class TensorLayout:
    """Raw buffers for (some of) the layers of one ``KVCacheTensor``.

    Attributes:
        tensor_id: index of the ``KVCacheTensor``.
        layers: the layers that alias these buffers.
        buffer_bytes: bytes of each raw buffer.
        single: one buffer viewed as all parts (Mamba states; attention packed
            at its end), else one buffer per part.
    """

    tensor_id: int
    layers: tuple[LayerPlan, ...]
    buffer_bytes: tuple[int, ...]
    single: bool


#: (byte offset of block 0, bytes between blocks, bytes per block) of a view.
Region = tuple[int, int, int]


def part_regions(lp: LayerPlan, num_blocks: int, nbytes: int, interleaved: bool) -> list[Region]:
    """Where each part of ``lp`` lies in one raw buffer of ``nbytes`` bytes
    viewed as ``num_blocks`` blocks (the single-buffer layout of
    :func:`layer_views`): attention parts packed at the end, Mamba states from
    byte 0, state after state or block-interleaved."""
    regions = []
    if lp.strategy.separate_buffers:
        offset = nbytes - num_blocks * lp.page_bytes
        for p in lp.parts:
            regions.append((offset, p.nbytes, p.nbytes))
            offset += num_blocks * p.nbytes
        return regions
    offset = 0
    for p in lp.parts:
        regions.append((offset, lp.padded_page_bytes if interleaved else p.nbytes, p.nbytes))
        offset += p.nbytes if interleaved else num_blocks * p.nbytes
    return regions


def crosses_blocks(a: Region, b: Region, num_blocks: int) -> bool:
    """Whether block j of ``a`` shares a byte with block k != j of ``b``: two
    layers of one tensor may alias bytes only under the same block index (the
    block pool gives a block to one KV cache group at a time). Regions with
    different strides whose extents meet count as crossing."""
    (oa, sa, ba), (ob, sb, bb) = a, b
    last = num_blocks - 1
    if oa + last * sa + ba <= ob or ob + last * sb + bb <= oa:
        return False
    if sa != sb:
        return True
    # a_j meets b_k  <=>  ob - oa - ba < (j - k) * s < ob - oa + bb
    lo = max(-last, (ob - oa - ba) // sa + 1)
    hi = min(last, -((oa - ob - bb) // sa) - 1)
    return lo <= hi and (lo, hi) != (0, 0)


def shares_block_consistently(layers: tuple[LayerPlan, ...], num_blocks: int, nbytes: int, interleaved: bool) -> bool:
    """Whether attention and Mamba layers can alias one buffer of ``nbytes``
    (the single-buffer layout) without any byte mapping to different blocks."""
    attn = [r for lp in layers if lp.strategy.separate_buffers for r in part_regions(lp, num_blocks, nbytes, interleaved)]
    mamba = [r for lp in layers if not lp.strategy.separate_buffers for r in part_regions(lp, num_blocks, nbytes, interleaved)]
    return not any(crosses_blocks(a, m, num_blocks) for a in attn for m in mamba)


def plan_layout(plan: KVCachePlan, interleaved: bool = False) -> tuple[list[TensorLayout], bool]:
    """Decide every tensor's raw buffers before anything is allocated.

    Args:
        interleaved: Mamba states are viewed block by block
            (:func:`~vllm_kv_strategies.compat.mamba_states_interleaved`).

    Returns:
        the layouts (a tensor whose attention layers cannot share its Mamba
        buffer has two: Mamba single, attention separate), and whether
        attention and Mamba layers share one buffer anywhere (vllm-ascend's
        ``hybrid_with_attn_and_mamba``).

    Raises:
        KVCacheLayoutError: a tensor's size is not a whole number of pages of a
            layer it serves, gives fewer blocks than ``num_blocks``, or holds
            attention layers whose parts differ (they cannot share buffers).
    """
    config = plan.kv_cache_config
    n = config.num_blocks
    by_tensor = {tid: tuple(plan.layers_of(tid)) for tid in range(len(plan.tensors))}
    for tid, layers in by_tensor.items():
        size = plan.tensors[tid].size
        for lp in layers:
            page = lp.padded_page_bytes
            if size % page or size // page < n:
                raise KVCacheLayoutError(
                    f"layer {lp.name!r} ({type(lp.spec).__name__}, {lp.strategy.name}): KV cache tensor "
                    f"{tid} of {size} bytes is not a whole number >= num_blocks "
                    f"{n} of its {page}-byte pages ({size / page:g})"
                )
        attn = [lp for lp in layers if lp.strategy.separate_buffers]
        shapes = {tuple((p.dtype, p.shape) for p in lp.parts) for lp in attn}
        if len(shapes) > 1:
            raise KVCacheLayoutError(
                f"KV cache tensor {tid} is shared by attention layers whose parts differ and cannot "
                f"live in one set of buffers: "
                + "; ".join(f"{lp.name}: {[(p.name, p.nbytes) for p in lp.parts]}" for lp in attn)
            )
    mixed = {tid for tid, layers in by_tensor.items() if len({lp.strategy.separate_buffers for lp in layers}) == 2}
    shared = {t for t in mixed if shares_block_consistently(by_tensor[t], n, plan.tensors[t].size, interleaved)}
    if mixed - shared:
        logger.info(
            "%s %d KV cache tensors hold attention and Mamba layers whose pages do not line up block by "
            "block; their attention layers get K/V buffers of their own (the Mamba layers still share one)",
            PREFIX,
            len(mixed - shared),
        )
    hybrid = bool(shared)
    layouts = []
    for tid, layers in by_tensor.items():
        if not layers:
            continue
        size = plan.tensors[tid].size
        mamba = tuple(lp for lp in layers if not lp.strategy.separate_buffers)
        attn = tuple(lp for lp in layers if lp.strategy.separate_buffers)
        if tid in shared or (hybrid and not mamba):
            layouts.append(TensorLayout(tid, layers, (size,), True))
            continue
        if mamba:
            layouts.append(TensorLayout(tid, mamba, (size,), True))
        if attn:
            blocks = size // attn[0].padded_page_bytes
            layouts.append(TensorLayout(tid, attn, tuple(blocks * p.nbytes for p in attn[0].parts), False))
    return layouts, hybrid


def _zeros(nbytes: int, device: torch.device, align: bool, layer: str) -> torch.Tensor:
    if not align:
        return allocate_bytes(nbytes, device, layer)
    raw = allocate_bytes(nbytes + TRANSFER_ALIGNMENT, device, layer)
    skip = -raw.data_ptr() % TRANSFER_ALIGNMENT
    return raw[skip : skip + nbytes]


def allocate(layouts: list[TensorLayout], device: torch.device, align: bool) -> dict[str, Any]:
    """Raw int8 buffers per layer: one tensor (single layout) or a tuple with
    one buffer per part. On failure nothing is returned and the buffers of
    the attempt are released."""
    raws: dict[str, Any] = {}
    try:
        for layout in layouts:
            first = layout.layers[0].name
            buffers = tuple(_zeros(n, device, align, first) for n in layout.buffer_bytes)
            value = buffers[0] if layout.single else buffers
            raws.update((lp.name, value) for lp in layout.layers)
    except BaseException:
        raws.clear()  # release what this attempt allocated before the error propagates
        buffers = value = None
        raise
    return raws


def _kernel_split(view: torch.Tensor, block_size: int, kernel_block_size: int | None) -> torch.Tensor:
    if not kernel_block_size or kernel_block_size >= block_size or view.dim() < 2 or view.shape[1] != block_size:
        return view
    if block_size % kernel_block_size:
        raise KVCacheLayoutError(f"kernel block size {kernel_block_size} does not divide block size {block_size}")
    return view.reshape(view.shape[0] * (block_size // kernel_block_size), kernel_block_size, *view.shape[2:])


def layer_views(
    lp: LayerPlan, raw: Any, num_blocks: int, kernel_block_size: int | None, interleaved: bool = False
) -> list[torch.Tensor]:
    """Typed views of one layer, ``(num_blocks, *part.shape)`` each.

    ``raw`` is a tuple with one buffer per part, or one buffer holding all
    parts where :func:`part_regions` puts them: Mamba states from byte 0
    (state after state, or block-interleaved with a one-page stride), attention
    parts packed at its end.
    """
    parts = lp.parts
    if isinstance(raw, tuple):
        chunks = [buf.view(p.dtype).view(-1, *p.shape) for buf, p in zip(raw, parts)]
        nbytes = sum(buf.numel() for buf in raw)
    else:
        nbytes = raw.numel()
        chunks = []
        for p, (offset, stride, _) in zip(parts, part_regions(lp, num_blocks, nbytes, interleaved)):
            if offset % p.dtype.itemsize or stride % p.dtype.itemsize:
                raise KVCacheLayoutError(f"layer {lp.name!r}: part {p.name} at byte {offset} is not {p.dtype}-aligned")
            typed, step = raw.view(p.dtype), p.dtype.itemsize
            inner = tuple(math.prod(p.shape[i + 1 :]) for i in range(len(p.shape)))
            chunks.append(
                typed.as_strided((num_blocks, *p.shape), (stride // step, *inner), typed.storage_offset() + offset // step)
            )
    # part buffers hold the parts only; one buffer holds whole (padded) pages
    if nbytes // (lp.page_bytes if isinstance(raw, tuple) else lp.padded_page_bytes) < num_blocks:
        raise KVCacheLayoutError(f"layer {lp.name!r}: {nbytes} bytes hold fewer than {num_blocks} blocks")
    views = []
    for view, p in zip(chunks, parts):
        if p.kernel_blocks and lp.strategy.separate_buffers:
            view = _kernel_split(view, lp.spec.block_size, kernel_block_size)
        views.append(view)
    return views


class AscendAdapter(RunnerAdapter):
    # ``shared_kv_cache_layers`` is read with a default: vllm-ascend 0.11's
    # runner only creates it for models with cross-layer KV sharing.
    runner_attrs = (
        "device",
        "vllm_config",
        "model_config",
        "compilation_config",
        "runner_only_attn_layers",
        "kv_caches",
    )

    @property
    def target(self) -> compat.PatchTarget:  # type: ignore[override]
        return compat.ascend_target()

    def replacements(self) -> dict[str, Any]:
        """The installed release's methods (:func:`compat.ascend_target`): each
        complete initialisation (0.11 has three) or one of the two halves."""
        by_name = {
            "_allocate_kv_cache_tensors": self.allocate_kv_cache_tensors,
            "_reshape_kv_cache_tensors": self.reshape_kv_cache_tensors,
        }
        return {name: by_name.get(name, self.initialize_kv_cache_tensors) for name in self.target.methods}

    # -- runner state ------------------------------------------------------
    @staticmethod
    def _stock_only_reason(runner: Any) -> str | None:
        """Runner features whose KV layouts the strategies do not build."""
        if getattr(runner, "use_compress", False):
            return "compressed KV cache (use_compress)"
        if getattr(runner, "enable_hamming_sparse", False):
            return "hamming sparse attention"
        hf = getattr(getattr(runner, "model_config", None), "hf_text_config", None)
        if getattr(hf, "model_type", None) == "deepseek_v4":
            return "DeepSeek V4 KV cache"
        vllm_config = getattr(runner, "vllm_config", None)
        quant = getattr(vllm_config, "quant_config", None)
        if quant is not None and hasattr(quant, "get_kv_quant_split_factor") and compat.fa_quant_enabled(vllm_config):
            return "quantised attention KV cache (FA quant)"
        if (getattr(vllm_config, "additional_config", None) or {}).get("kv_cache_dtype") == "int8":
            return "int8 KV cache in the BSH layout (additional_config kv_cache_dtype=int8)"
        return None

    def _plan(self, runner: Any, kv_cache_config: Any) -> KVCachePlan | None:
        reason = self._stock_only_reason(runner)
        if reason is not None:
            from .. import envs

            if envs.KV_STRATEGIES == "on":
                raise KVCacheLayoutError(f"{PREFIX} the strategies do not build the {reason}")
            logger.warning("%s %s: stock KV cache for all layers", PREFIX, reason)
            return None
        use_sparse = bool(getattr(runner, "use_sparse", False))
        config = compat.normalize_legacy_specs(kv_cache_config, self.layer_dims(runner), use_sparse)
        return self.plan_or_fallback(runner, config)

    @staticmethod
    def _kernel_block_sizes(runner: Any) -> dict[str, int]:
        """layer -> the attention backend's kernel block size, where the runner
        splits blocks (``use_hybrid_blocks``)."""
        if not getattr(runner, "use_hybrid_blocks", False):
            return {}
        sizes = {}
        for group in runner._kv_cache_spec_attn_group_iterator():
            size = compat.kernel_block_size(group.backend)
            if size is not None:
                sizes.update((name, size) for name in group.layer_names)
        return sizes

    # -- the three replaced methods ------------------------------------------
    def allocate_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any) -> dict[str, Any]:
        """layer -> raw int8 buffer, or a tuple of raw buffers (one per part)."""
        plan = self._plan(runner, kv_cache_config)
        if plan is None:
            return stock(runner, kv_cache_config)
        layouts, hybrid = plan_layout(plan, compat.mamba_states_interleaved())
        runner.hybrid_with_attn_and_mamba = hybrid
        align = runner.vllm_config.kv_transfer_config is not None
        return allocate(layouts, runner.device, align)

    def reshape_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any, raws: dict[str, Any]) -> dict[str, Any]:
        """layer -> tuple of attention part views, or list of Mamba state views."""
        plan = self._plan(runner, kv_cache_config)
        if plan is None:
            return stock(runner, kv_cache_config, raws)
        return self._views(runner, plan, raws)

    def _views(self, runner: Any, plan: KVCachePlan, raws: dict[str, Any]) -> dict[str, Any]:
        kernel = self._kernel_block_sizes(runner)
        interleaved = compat.mamba_states_interleaved()
        convert = compat.format_converter(runner)
        on_npu = getattr(runner.device, "type", None) == "npu"
        kv_caches: dict[str, Any] = {}
        for name, lp in plan.layers.items():
            if name not in raws:
                raise KVCacheLayoutError(f"layer {name!r} ({type(lp.spec).__name__}) has no raw KV cache buffer")
            views = layer_views(lp, raws[name], plan.kv_cache_config.num_blocks, kernel.get(name), interleaved)
            if convert is not None:
                if lp.strategy.separate_buffers:  # as the release's runner: attention views only
                    views = [convert(v) for v in views]
            elif on_npu:
                import torch_npu  # only ever imported on an NPU

                views = [torch_npu.npu_format_cast(v, ACL_FORMAT_ND) for v in views]
            kv_caches[name] = tuple(views) if lp.strategy.separate_buffers else views
        return kv_caches

    def initialize_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any) -> dict[str, Any]:
        """Allocate, view, share across layers and bind, like stock."""
        from vllm.v1.worker.utils import bind_kv_cache

        plan = self._plan(runner, kv_cache_config)
        if plan is None:
            return stock(runner, kv_cache_config)
        layouts, hybrid = plan_layout(plan, compat.mamba_states_interleaved())
        runner.hybrid_with_attn_and_mamba = hybrid
        raws = allocate(layouts, runner.device, runner.vllm_config.kv_transfer_config is not None)
        kv_caches = self._views(runner, plan, raws)
        for layer_name, target in getattr(runner, "shared_kv_cache_layers", {}).items():
            kv_caches[layer_name] = kv_caches[target]
        self.inject_test_fault(plan, kv_caches)
        num_attn_module = 2 if runner.model_config.hf_text_config.model_type == "longcat_flash" else 1
        bind_kv_cache(kv_caches, runner.compilation_config.static_forward_context, runner.kv_caches, num_attn_module)
        log_summary(plan, kv_caches)
        return kv_caches
