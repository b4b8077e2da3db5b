"""vllm-ascend 0.30: the worker's KV cache budget decision, recorded on its
runner, and the guard every allocation passes: never beyond the budget.

The worker's budget step (``NPUWorker.determine_available_memory``: the bytes
it measured, then ``_scale_kv_cache_memory_for_multi_group``, wrapped by
:class:`~vllm_kv_strategies.platforms.ascend.worker_budget.MultiGroupBudgetAdapter`)
decides once whether the plugin builds vLLM's overlay of the KV cache groups
(the budget left whole) or not (stock's scaled budget), and records that
decision (:class:`BudgetDecision`) on the runner. Allocation follows the
record: a runner whose budget was left whole is built as the overlay or
raises :class:`~vllm_kv_strategies.errors.UnscaledBudgetError`, in every mode;
it never reaches stock's private per-layer buffers.

Whatever path allocation takes (the plugin's layout, or stock's build in
``auto``), the bytes about to be allocated are checked first against the
budget the worker measured before its step (:func:`check_within_budget`), or
against ``--kv-cache-memory-bytes`` where the worker has no step: beyond it,
:class:`~vllm_kv_strategies.errors.KVBudgetExceededError` is raised before
anything is allocated. With ``kv_transfer_config`` each raw buffer may take
2 MiB more (stock's alignment slack, ``NPUModelRunner._allocate_int8_cache_tensor``).

Sizes are integer bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_kv_strategies.errors import KVBudgetExceededError, UnscaledBudgetError

#: Set on a runner whose worker left the KV cache budget unscaled for the overlay.
OVERLAY_BUDGET = "_kv_strategies_overlay_budget"
#: The runner's :class:`BudgetDecision`.
BUDGET_DECISION = "_kv_strategies_budget_decision"
#: Over-allocation per raw buffer with ``kv_transfer_config`` (2 MiB aligned ``data_ptr``).
TRANSFER_ALIGNMENT = 2 * 1024 * 1024


@dataclass(frozen=True)
class BudgetDecision:
    """What the worker's budget step decided for its runner.

    Attributes:
        measured: KV cache bytes the worker measured, before its step.
        granted: bytes the step gave vLLM's planner (stock's scaled budget, or
            ``measured`` where the plugin builds the overlay).
        overlay: the plugin builds vLLM's overlay of the KV cache groups.
        reason: why the budget stays stock's (None: it does not, or there was
            nothing to scale).
    """

    measured: int
    granted: int
    overlay: bool
    reason: str | None = None


def record(runner: Any, decision: BudgetDecision) -> None:
    """Record ``decision`` on ``runner`` (and mark it for the overlay where it is one)."""
    vars(runner)[BUDGET_DECISION] = decision
    if decision.overlay:
        vars(runner)[OVERLAY_BUDGET] = True
    else:
        vars(runner).pop(OVERLAY_BUDGET, None)


def forget(runner: Any) -> None:
    """Drop any decision recorded on ``runner`` (a new budget step begins)."""
    vars(runner).pop(BUDGET_DECISION, None)
    vars(runner).pop(OVERLAY_BUDGET, None)


def decision_of(runner: Any) -> BudgetDecision | None:
    return vars(runner).get(BUDGET_DECISION)


def overlay_committed(runner: Any) -> bool:
    """Whether the worker left ``runner``'s budget unscaled for the overlay."""
    return bool(vars(runner).get(OVERLAY_BUDGET))


def budget_limit(runner: Any, vllm_config: Any = None) -> tuple[int, str] | None:
    """``(bytes, what they are)``: the budget the worker measured before its
    step, else ``--kv-cache-memory-bytes`` (the worker has no step then);
    None where neither is known (nothing is checked)."""
    decision = decision_of(runner) if runner is not None else None
    if decision is not None:
        return decision.measured, "the KV cache budget the worker measured before its budget step"
    config = vllm_config if vllm_config is not None else getattr(runner, "vllm_config", None)
    explicit = getattr(getattr(config, "cache_config", None), "kv_cache_memory_bytes", None)
    if explicit:
        return int(explicit), "--kv-cache-memory-bytes"
    return None


def check_within_budget(runner: Any, nbytes: int, buffers: int, what: str, vllm_config: Any = None) -> None:
    """Raise before allocating when ``nbytes`` in ``buffers`` raw buffers
    exceed :func:`budget_limit` (plus 2 MiB per buffer with
    ``kv_transfer_config``).

    Raises:
        KVBudgetExceededError: naming ``what`` would allocate, both byte
            counts and the budget's source.
    """
    limit = budget_limit(runner, vllm_config)
    if limit is None:
        return
    budget, source = limit
    config = vllm_config if vllm_config is not None else getattr(runner, "vllm_config", None)
    slack = buffers * TRANSFER_ALIGNMENT if getattr(config, "kv_transfer_config", None) is not None else 0
    if nbytes > budget + slack:
        raise KVBudgetExceededError(
            f"{what} would allocate {nbytes} bytes in {buffers} raw buffers, beyond {source} ({budget} bytes"
            f"{f', plus {slack} bytes of transfer alignment' if slack else ''}); nothing was allocated"
        )


def dry_run_bytes(allocate: Callable[[Any], Any]) -> tuple[int, int]:
    """``(bytes, raw buffers)`` of what ``allocate(device)`` (a stock
    allocation of a KV cache: layer -> raw tensor or tuple of them) allocates,
    run on the meta device: nothing is allocated."""
    import torch

    seen: dict[int, int] = {}
    for value in allocate(torch.device("meta")).values():
        for tensor in value if isinstance(value, (tuple, list)) else (value,):
            storage = tensor.untyped_storage()
            seen.setdefault(storage._cdata, storage.nbytes())  # the StorageImpl: one key per storage, also on meta
    return sum(seen.values()), len(seen)


def stock_within_budget(stock_allocate: Callable[[Any], Any], runner: Any, kv_cache_config: Any, where: str) -> None:
    """Before stock allocates on a runner whose worker recorded a budget: its
    allocation (``stock_allocate(config)``, the runner's
    ``_allocate_kv_cache_tensors``) run on the meta device and checked by
    :func:`check_within_budget`. Where stock's own path cannot run on meta
    tensors it stays unmeasured (stock's decision, stock's budget)."""
    import copy

    from vllm_kv_strategies.logger import PREFIX, logger

    if decision_of(runner) is None:
        return

    def on_meta(meta: Any) -> Any:
        device, runner.device = runner.device, meta
        try:
            return stock_allocate(copy.deepcopy(kv_cache_config))
        finally:
            runner.device = device

    try:
        nbytes, buffers = dry_run_bytes(on_meta)
    except Exception as exc:
        logger.debug("%s stock's KV cache allocation could not be measured on the meta device: %s", PREFIX, exc)
        return
    check_within_budget(runner, nbytes, buffers, f"stock's KV cache build ({where})")


def unscaled_refusal(runner: Any, kv_cache_config: Any, skip_layers: Any, exc: BaseException, where: str) -> UnscaledBudgetError:
    """The error of a runner whose worker left the budget unscaled for vLLM's
    overlay when allocation then refuses it (``exc``): a bug of the budget
    step, never a fallback; it names the refusal, stock's per-layer bytes
    and the plan's backing."""
    from vllm_kv_strategies.platforms.ascend import facts
    from vllm_kv_strategies.core.strided import backing_bytes

    decision = decision_of(runner)
    budget = f"{decision.measured}-byte budget" if decision is not None else "budget"
    return UnscaledBudgetError(
        f"the worker left the {budget} unscaled for the plugin's overlay of {len(kv_cache_config.kv_cache_groups)} "
        f"KV cache groups ({where}), which allocation then refuses ({exc}); stock's per-layer buffers would need "
        f"{facts.private_bytes(kv_cache_config, skip_layers)} bytes for a {backing_bytes(kv_cache_config)}-byte plan, so "
        "nothing falls back to them. This is a bug of the plugin's budget step; KV_STRATEGIES=off runs stock (its "
        "worker then scales the budget)"
    )
