"""vllm-ascend's ``NPUModelRunner`` (module ``vllm_ascend.worker.model_runner_v1``).

Replaces ``initialize_kv_cache_tensors`` and its two halves,
``_allocate_kv_cache_tensors`` (raw int8 buffers per layer) and
``_reshape_kv_cache_tensors`` (typed views per layer), so any caller of any of
them gets the strategies' result. The Ascend layout, per ``KVCacheTensor``:

* attention kinds (``separate_buffers``): one raw buffer per page part (K and
  V; MLA nope and rope; sparse MLA plus the indexer key cache), each viewed
  with num_blocks as dim 0, because the KV transfer engines register them one
  by one. Every layer in the tensor's ``shared_by`` aliases those buffers;
  part sizes are ``num_blocks x part bytes``, integer-exact;
* Mamba: one raw buffer of the tensor's size, viewed state after state
  (state-major regions, placed by byte offset) as vllm-ascend 0.23 does;
* a tensor shared by attention and Mamba layers (Qwen3.5-style, vllm-ascend
  PR #6887): one raw buffer; Mamba states from byte 0, the attention parts
  packed at its end (K where the ssm state is, V after it). Whether any tensor
  is such a hybrid is decided from the whole config before allocating, and
  then every attention tensor uses the single-buffer layout.

With ``kv_transfer_config`` set every raw buffer's ``data_ptr`` is a multiple
of 2 MiB (over-allocated by 2 MiB and sliced); without it nothing is padded.
On an NPU each view is cast to the ND format with ``torch_npu.npu_format_cast``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import compat
from ..errors import KVCacheAllocationError, KVCacheLayoutError
from ..logger import PREFIX, logger
from ..plan import KVCachePlan, LayerPlan
from ..report import log_summary
from .base import RunnerAdapter

#: Prefill/decode disaggregation: KV transfer engines need 2 MiB aligned buffers.
TRANSFER_ALIGNMENT = 2 * 1024 * 1024
#: torch_npu's ACL format id of ND.
ACL_FORMAT_ND = 2


@dataclass(frozen=True)
class TensorLayout:
    """How one ``KVCacheTensor`` is allocated (bytes per raw buffer)."""

    tensor_id: int
    layers: tuple[LayerPlan, ...]
    buffer_bytes: tuple[int, ...]
    single: bool


def plan_layout(plan: KVCachePlan) -> tuple[list[TensorLayout], bool]:
    """Decide every tensor's raw buffers before anything is allocated.

    Returns:
        the layouts, and whether attention and Mamba layers share a tensor
        anywhere (vllm-ascend's ``hybrid_with_attn_and_mamba``).

    Raises:
        KVCacheLayoutError: a tensor's size is not a whole number of pages of a
            layer it serves, gives fewer blocks than ``num_blocks``, or holds
            attention layers whose parts differ (they cannot share buffers).
    """
    config = plan.kv_cache_config
    hybrid = any(
        len({lp.strategy.separate_buffers for lp in plan.layers_of(tid)}) == 2 for tid in range(len(plan.tensors))
    )
    layouts = []
    for tid, tensor in enumerate(plan.tensors):
        layers = tuple(plan.layers_of(tid))
        if not layers:
            continue
        for lp in layers:
            page = lp.padded_page_bytes
            if tensor.size % page or tensor.size // page < config.num_blocks:
                raise KVCacheLayoutError(
                    f"layer {lp.name!r} ({type(lp.spec).__name__}, {lp.strategy.name}): KV cache tensor "
                    f"{tid} of {tensor.size} bytes is not a whole number >= num_blocks "
                    f"{config.num_blocks} of its {page}-byte pages ({tensor.size / page:g})"
                )
        if hybrid or not layers[0].strategy.separate_buffers:
            layouts.append(TensorLayout(tid, layers, (tensor.size,), True))
            continue
        shapes = {tuple((p.dtype, p.shape) for p in lp.parts) for lp in layers}
        if len(shapes) > 1:
            raise KVCacheLayoutError(
                f"KV cache tensor {tid} is shared by attention layers whose parts differ and cannot "
                f"live in one set of buffers: "
                + "; ".join(f"{lp.name}: {[(p.name, p.nbytes) for p in lp.parts]}" for lp in layers)
            )
        num_blocks = tensor.size // layers[0].padded_page_bytes
        layouts.append(TensorLayout(tid, layers, tuple(num_blocks * p.nbytes for p in layers[0].parts), False))
    return layouts, hybrid


def _zeros(nbytes: int, device: torch.device, align: bool, layer: str) -> torch.Tensor:
    try:
        if not align:
            return torch.zeros(nbytes, dtype=torch.int8, device=device)
        raw = torch.zeros(nbytes + TRANSFER_ALIGNMENT, dtype=torch.int8, device=device)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        free = ""
        if device.type != "cpu" and hasattr(torch, device.type):
            try:
                free = f", {getattr(torch, device.type).mem_get_info(device)[0]} bytes free"
            except Exception:
                pass
        raise KVCacheAllocationError(
            f"allocating {nbytes} bytes for the KV cache of layer {layer!r} failed{free}: {exc}"
        ) from exc
    skip = -raw.data_ptr() % TRANSFER_ALIGNMENT
    return raw[skip : skip + nbytes]


def allocate(layouts: list[TensorLayout], device: torch.device, align: bool) -> dict[str, Any]:
    """Raw int8 buffers per layer: one tensor (single layout) or a tuple with
    one buffer per part. On failure nothing is returned and the buffers of
    the attempt are released."""
    raws: dict[str, Any] = {}
    for layout in layouts:
        first = layout.layers[0].name
        buffers = tuple(_zeros(n, device, align, first) for n in layout.buffer_bytes)
        value = buffers[0] if layout.single else buffers
        raws.update((lp.name, value) for lp in layout.layers)
    return raws


def _kernel_split(view: torch.Tensor, block_size: int, kernel_block_size: int | None) -> torch.Tensor:
    if not kernel_block_size or kernel_block_size >= block_size or view.dim() < 2 or view.shape[1] != block_size:
        return view
    if block_size % kernel_block_size:
        raise KVCacheLayoutError(f"kernel block size {kernel_block_size} does not divide block size {block_size}")
    return view.reshape(view.shape[0] * (block_size // kernel_block_size), kernel_block_size, *view.shape[2:])


def layer_views(lp: LayerPlan, raw: Any, num_blocks: int, kernel_block_size: int | None) -> list[torch.Tensor]:
    """Typed views of one layer, ``(num_blocks, *part.shape)`` each.

    ``raw`` is a tuple with one buffer per part, or one buffer holding all
    parts: Mamba states from byte 0, attention parts packed at its end.
    """
    parts = lp.parts
    if isinstance(raw, tuple):
        chunks = [buf.view(p.dtype) for buf, p in zip(raw, parts)]
        nbytes = sum(buf.numel() for buf in raw)
    else:
        nbytes = raw.numel()
        used = num_blocks * lp.page_bytes
        offset = 0 if not lp.strategy.separate_buffers else nbytes - used
        chunks = []
        for p in parts:
            size = num_blocks * p.nbytes
            if offset % p.dtype.itemsize:
                raise KVCacheLayoutError(f"layer {lp.name!r}: part {p.name} at byte {offset} is not {p.dtype}-aligned")
            chunks.append(raw[offset : offset + size].view(p.dtype))
            offset += size
    if nbytes // lp.padded_page_bytes < num_blocks:
        raise KVCacheLayoutError(f"layer {lp.name!r}: {nbytes} bytes hold fewer than {num_blocks} blocks")
    views = []
    for chunk, p in zip(chunks, parts):
        view = chunk.view(-1, *p.shape)
        if p.kernel_blocks and lp.strategy.separate_buffers:
            view = _kernel_split(view, lp.spec.block_size, kernel_block_size)
        views.append(view)
    return views


class AscendAdapter(RunnerAdapter):
    target = compat.ASCEND_TARGET

    def replacements(self) -> dict[str, Any]:
        return {
            "initialize_kv_cache_tensors": self.initialize_kv_cache_tensors,
            "_allocate_kv_cache_tensors": self.allocate_kv_cache_tensors,
            "_reshape_kv_cache_tensors": self.reshape_kv_cache_tensors,
        }

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
        quant = getattr(getattr(runner, "vllm_config", None), "quant_config", None)
        if quant is not None and hasattr(quant, "get_kv_quant_split_factor"):
            try:
                from vllm_ascend.utils import enable_fa_quant

                if enable_fa_quant(runner.vllm_config):
                    return "quantised attention KV cache (FA quant)"
            except ImportError:
                pass
        return None

    def _plan(self, runner: Any, kv_cache_config: Any) -> KVCachePlan | None:
        reason = self._stock_only_reason(runner)
        if reason is not None:
            from .. import envs

            if envs.KV_STRATEGIES == "on":
                raise KVCacheLayoutError(f"{PREFIX} the strategies do not build the {reason}")
            logger.warning("%s %s: stock KV cache for all layers", PREFIX, reason)
            return None
        return self.plan_or_fallback(runner, kv_cache_config)

    @staticmethod
    def _kernel_block_sizes(runner: Any) -> dict[str, int]:
        """layer -> the attention backend's kernel block size, where the runner
        splits blocks (``use_hybrid_blocks``)."""
        if not getattr(runner, "use_hybrid_blocks", False):
            return {}
        sizes = {}
        for group in runner._kv_cache_spec_attn_group_iterator():
            get = getattr(group.backend, "get_supported_kernel_block_sizes", None)
            if get is None:
                continue
            size = get()[0]
            size = size if isinstance(size, int) else getattr(size, "base", None)
            if isinstance(size, int):
                sizes.update((name, size) for name in group.layer_names)
        return sizes

    # -- the three replaced methods ------------------------------------------
    def allocate_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any) -> dict[str, Any]:
        """layer -> raw int8 buffer, or a tuple of raw buffers (one per part)."""
        plan = self._plan(runner, kv_cache_config)
        if plan is None:
            return stock(runner, kv_cache_config)
        layouts, hybrid = plan_layout(plan)
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
        on_npu = getattr(runner.device, "type", None) == "npu"
        kv_caches: dict[str, Any] = {}
        for name, lp in plan.layers.items():
            if name not in raws:
                raise KVCacheLayoutError(f"layer {name!r} ({type(lp.spec).__name__}) has no raw KV cache buffer")
            views = layer_views(lp, raws[name], plan.kv_cache_config.num_blocks, kernel.get(name))
            if on_npu:
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
        layouts, hybrid = plan_layout(plan)
        runner.hybrid_with_attn_and_mamba = hybrid
        raws = allocate(layouts, runner.device, runner.vllm_config.kv_transfer_config is not None)
        kv_caches = self._views(runner, plan, raws)
        for layer_name, target in runner.shared_kv_cache_layers.items():
            kv_caches[layer_name] = kv_caches[target]
        self.inject_test_fault(plan, kv_caches)
        num_attn_module = 2 if runner.model_config.hf_text_config.model_type == "longcat_flash" else 1
        bind_kv_cache(kv_caches, runner.compilation_config.static_forward_context, runner.kv_caches, num_attn_module)
        log_summary(plan, kv_caches)
        return kv_caches
