"""The KV cache summary each worker logs once at KV cache initialisation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import compat
from .logger import PREFIX, logger
from .plan import KVCachePlan


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


@dataclass(frozen=True)
class KVCacheSummary:
    """Totals of one worker's KV cache (bytes unless named otherwise)."""

    rank: int
    layers_per_strategy: dict[str, int]
    raw_buffers: int
    bytes_allocated: int
    bytes_required: int
    num_blocks: int
    tokens: int

    def line(self) -> str:
        per = ", ".join(f"{k}={v}" for k, v in sorted(self.layers_per_strategy.items()))
        return (
            f"{PREFIX} rank {self.rank}: built {sum(self.layers_per_strategy.values())} layers "
            f"({per}) in {self.raw_buffers} raw buffer{'s' if self.raw_buffers != 1 else ''}; {self.bytes_allocated} bytes allocated "
            f"({self.bytes_allocated / 2**30:.3f} GiB, required {self.bytes_required}); "
            f"num_blocks {self.num_blocks}, {self.tokens} tokens"
        )


def summarize(plan: KVCachePlan, kv_caches: dict[str, Any], *, strided: bool) -> KVCacheSummary:
    """Count what ``kv_caches`` holds. ``strided``: the tensors of the config
    describe one backing allocation (vLLM 0.30+), so the required bytes are its
    size rather than the sum of tensor sizes."""
    storages: dict[int, int] = {}
    for value in kv_caches.values():
        for t in _tensors(value):
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    sizes = [t.size for t in plan.tensors]
    config = plan.kv_cache_config
    block_sizes = {lp.spec.block_size for lp in plan.layers.values()}
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    return KVCacheSummary(
        rank=rank,
        layers_per_strategy=dict(plan.strategy_counts()),
        raw_buffers=len(storages),
        bytes_allocated=sum(storages.values()),
        bytes_required=(max(sizes) if strided else sum(sizes)) if sizes else 0,
        num_blocks=config.num_blocks,
        tokens=config.num_blocks * min(block_sizes, default=0),
    )


def log_summary(plan: KVCachePlan, kv_caches: dict[str, Any]) -> KVCacheSummary:
    summary = summarize(plan, kv_caches, strided=compat.has_strided_tensors())
    logger.info("%s", summary.line())
    return summary
