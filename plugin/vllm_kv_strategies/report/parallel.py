"""Where a worker sits in its deployment: data, pipeline and tensor parallel
ranks, as the installed vLLM numbers them (for the report's ``rank`` and
``parallel``). Reads vLLM's ``ParallelConfig`` and parallel groups; imports
neither vLLM nor torch at module level.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParallelRanks:
    """Where one worker sits in its deployment (the report's ``parallel`` key).

    ``rank`` is vLLM's global rank, as ``init_distributed_environment``
    (``vllm/distributed/parallel_state.py``) numbers it:
    ``data_parallel_rank * world_size + rank``, with ``world_size`` the
    engine's ranks (tensor x pipeline x context parallel). Data-parallel
    engines of a dense model run independently: vLLM resets their
    ``data_parallel_rank`` / ``data_parallel_size`` to 0 / 1
    (``ParallelConfig.reconfigure_for_independent_dp_rank``) and keeps the
    engine's index in ``data_parallel_index``, which is used here; their
    ``data_parallel_size`` is then unknown (None) and ``world_size`` is the
    engine's own.
    """

    rank: int
    world_size: int
    data_parallel_rank: int
    data_parallel_size: int | None
    pipeline_parallel_rank: int
    pipeline_parallel_size: int
    tensor_parallel_rank: int
    tensor_parallel_size: int

    def as_dict(self) -> dict[str, int | None]:
        return {k: v for k, v in vars(self).items() if k not in ("rank", "world_size")}


def _group(name: str) -> tuple[int, int] | None:
    """(rank in group, group size) of vLLM's ``get_tp_group`` / ``get_pp_group``, None when not set up."""
    state = sys.modules.get("vllm.distributed.parallel_state")
    try:
        group = getattr(state, name)()
        return group.rank_in_group, group.world_size
    except Exception:  # no vLLM, or its groups are not initialised (a test, observe before init)
        return None


def parallel_ranks(parallel_config: Any = None) -> ParallelRanks:
    """This worker's :class:`ParallelRanks`, from torch.distributed, vLLM's
    tensor / pipeline parallel groups and ``parallel_config`` (vLLM's
    ``ParallelConfig``; None: no data parallelism).

    Without an initialised torch.distributed the worker is rank 0 of 1.
    Never raises on a missing attribute: releases without
    ``data_parallel_index`` (before vLLM 0.30) use ``data_parallel_rank``.
    """
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    dist_rank, dist_world = (dist.get_rank(), dist.get_world_size()) if initialised else (0, 1)
    tp = _group("get_tp_group") or (dist_rank, dist_world)
    pp = _group("get_pp_group") or (0, 1)
    engine_world = int(getattr(parallel_config, "world_size", 0) or dist_world)
    dp_size = int(getattr(parallel_config, "data_parallel_size", 1) or 1)
    if dp_size > 1 and dist_world >= engine_world * dp_size:  # one world across data parallel (MoE): vLLM's rank
        dp_rank = int(getattr(parallel_config, "data_parallel_rank", 0) or 0)
        return ParallelRanks(dist_rank, dist_world, dp_rank, dp_size, pp[0], pp[1], tp[0], tp[1])
    index = getattr(parallel_config, "data_parallel_index", None)
    dp_rank = int(index if index is not None else getattr(parallel_config, "data_parallel_rank", 0) or 0)
    # An independent engine (index set, size reset to 1) is not told how many engines there are.
    known_size = dp_size if dp_size > 1 or index is None else None
    return ParallelRanks(
        dp_rank * engine_world + dist_rank % engine_world, dist_world, dp_rank, known_size, pp[0], pp[1], tp[0], tp[1]
    )
