"""What vLLM's engine core would plan for a deployment, computed offline by
the installed release's own code.

:func:`predict` follows ``EngineCore._initialize_kv_caches``
(``vllm/v1/engine/core.py``): the specs of every worker (rank ``pp * TP + tp``,
from :mod:`.model`), the KV cache layout resolved as the engine resolves it,
the KV cache budget per worker (``--kv-cache-memory-bytes`` as the worker's
``determine_available_memory`` returns it), vLLM's ``get_kv_cache_configs``
(its memory check raises vLLM's own ``ValueError``, kept word for word as the
refusal), the scheduler's config and the capacity vLLM logs as "KV cache
size: N tokens, Maximum concurrency for L tokens per request: Cx".
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any

from vllm_kv_strategies.core.specs import planner_function
from vllm_kv_strategies.deploy import model as deploy_model
from vllm_kv_strategies.deploy.budget import Budget


@dataclasses.dataclass
class Prediction:
    """One deployment's plan.

    Attributes:
        vllm_config: the engine config ``create_engine_config`` made.
        budget: KV cache bytes per worker given to the planner, and how they were found.
        workers: per worker (rank ``pp * TP + tp``), its ``KVCacheConfig``;
            empty when vLLM refuses.
        specs: per worker, the layer specs collected from the model.
        stages: per pipeline stage, ``shared`` (the layers sharing another's
            KV cache) and ``layers`` (the stage's static forward context).
        sides: per worker, stock's bytes and the plugin's (:func:`predict`'s ``sides``).
        params: per pipeline stage, parameter count (elements) on one TP rank.
        param_bytes: per pipeline stage, their bytes.
        refusal: vLLM's own error message when its planner refuses, else None.
        tokens, max_concurrency: what vLLM logs ("KV cache size" /
            "Maximum concurrency"); None when refused.
        log_lines: before vLLM 0.30, those two lines in the release's own words
            (:func:`logged_capacity`; "GPU KV cache size: N tokens").
        seconds: wall time of config, model build and planning.
    """

    vllm_config: Any
    budget: Budget
    workers: list[Any]
    specs: list[dict[str, Any]]
    stages: list[dict[str, dict]]
    params: list[int]
    param_bytes: list[int]
    refusal: str | None = None
    sides: list[Any] = dataclasses.field(default_factory=list)
    #: on vllm-ascend: ``{"stock": Side, "plugin": Side}`` (:mod:`vllm_kv_strategies.platforms.ascend.plan`), each planned and built by its own code
    ascend: dict[str, Any] | None = None
    tokens: int | None = None
    max_concurrency: float | None = None
    log_lines: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    #: lines for the headline: arguments given that the plan does not follow (:func:`.cli.notes`)
    notes: list[str] = dataclasses.field(default_factory=list)
    #: which vLLM platform was planned, and why (:func:`.platforms.use`)
    platform: str = ""
    #: per pipeline stage, its budget per worker (:func:`predict`; :func:`stage_rows`)
    stage_budgets: list[Budget] = dataclasses.field(default_factory=list)

    @property
    def num_blocks(self) -> int | None:
        return self.workers[0].num_blocks if self.workers else None


def engine_config(engine_args, notes: list[str] | None = None):
    """``engine_args.create_engine_config()`` as ``vllm serve`` calls it (its usage context, so
    that ``max_num_batched_tokens`` / ``max_num_seqs`` take the server's defaults for the card),
    with vLLM's model inspection in this process (and, on vLLM 0.34's CPU platform without
    triton-cpu, past its Triton check, said in ``notes``:
    :func:`~vllm_kv_strategies.deploy.platforms.config_without_triton`)."""
    from vllm.usage.usage_lib import UsageContext

    from vllm_kv_strategies.deploy.platforms import config_without_triton

    with deploy_model.inspect_models_in_process(), config_without_triton(notes if notes is not None else []):
        return engine_args.create_engine_config(UsageContext.OPENAI_API_SERVER)


def worker_specs(vllm_config, progress=None, collect=deploy_model.collect_specs) -> tuple[list[dict], list[dict], list[int], list[int]]:
    """``(specs per worker, per stage its shared layers and forward context, params per stage, their bytes)``:
    the model built once per pipeline stage; every TP rank of a stage gets its specs
    (``collect``: :func:`.model.build_stage`'s)."""
    parallel = vllm_config.parallel_config
    deploy_model.init_distributed(vllm_config)
    per_worker, stages, params, param_bytes = [], [], [], []
    for pp_rank in range(parallel.pipeline_parallel_size):
        if progress is not None:
            progress(f"building the model on the meta device (pipeline stage {pp_rank} of {parallel.pipeline_parallel_size})")
        specs, stage_shared, stage_params, stage_bytes, layers = deploy_model.build_stage(vllm_config, pp_rank, collect)
        per_worker += [specs] * parallel.tensor_parallel_size
        stages.append({"shared": stage_shared, "layers": layers})
        params.append(stage_params)
        param_bytes.append(stage_bytes)
    return per_worker, stages, params, param_bytes


def resolve_layout(vllm_config, per_worker: list[dict]) -> None:
    """The KV cache layout as ``EngineCore._initialize_kv_caches`` resolves it
    and its workers' ``set_kv_cache_layout`` record it."""
    import inspect
    from types import SimpleNamespace

    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.worker_base import WorkerBase

    try:
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    except ImportError:  # before vLLM 0.30 the layout is the platform's (or VLLM_KV_CACHE_LAYOUT)
        return

    worker = SimpleNamespace(vllm_config=vllm_config)
    with set_current_vllm_config(vllm_config):
        supported = [WorkerBase.get_supported_kv_cache_layouts(worker)] * len(per_worker)
        layout = resolve_kv_cache_layout(vllm_config, supported, [s for specs in per_worker for s in specs.values()])
        interleave = ()  # vLLM 0.34 passes the CP interleave size with the layout (after adjusting it for DCP)
        if "cp_kv_cache_interleave_size" in inspect.signature(WorkerBase.set_kv_cache_layout).parameters:
            interleave = (vllm_config.parallel_config.cp_kv_cache_interleave_size,)
        WorkerBase.set_kv_cache_layout(worker, layout.name, *interleave)


def worker_budget(vllm_config, kv_cache_memory_bytes: int) -> int:
    """What the worker's ``determine_available_memory`` returns for an
    explicit ``--kv-cache-memory-bytes``: the bytes, less the multimodal
    IPC reservation where the release has one (``reserve_mm_ipc_gpu_memory``)."""
    try:
        from vllm.multimodal.gpu_ipc_memory import reserve_mm_ipc_gpu_memory
    except ImportError:
        return kv_cache_memory_bytes
    return reserve_mm_ipc_gpu_memory(
        kv_cache_memory_bytes,
        vllm_config.model_config.multimodal_config,
        getattr(vllm_config.parallel_config, "_api_process_count", 1),
    )


def plan_budget(vllm_config, per_worker: list[dict], budget: int | list[int]) -> tuple[list, str | None]:
    """``(configs per worker, refusal)``: vLLM's ``get_kv_cache_configs`` of
    ``budget`` bytes per worker (one for all, or a list); its ``ValueError``
    (not enough memory, no blocks, ...) is the refusal."""
    import copy
    import inspect

    from vllm.config import set_current_vllm_config

    get_kv_cache_configs = planner_function("get_kv_cache_configs")
    specs = [dict(s) for s in per_worker]  # the planner unifies specs in place
    with set_current_vllm_config(vllm_config):
        try:  # the engine core registers the spec classes' managers first (0.32+)
            from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
        except ImportError:
            pass
        else:
            register_all_kvcache_specs(vllm_config)
        try:
            budgets = budget if isinstance(budget, list) else [budget] * len(specs)
            extra = ()  # vLLM 0.34: the whole model's groups, made first as EngineCore._initialize_kv_caches does
            if "global_kv_cache_groups" in inspect.signature(get_kv_cache_configs).parameters:
                extra = (planner_function("get_global_kv_cache_groups")(vllm_config, specs),)
            _PLANNER_LOG.clear()
            with recorded(get_kv_cache_configs) as logged:
                configs = get_kv_cache_configs(vllm_config, specs, budgets, *extra)
            _PLANNER_LOG.extend(logged)
        except ValueError as exc:
            return [], str(exc)
    for config in configs:
        config.kv_cache_layout = getattr(vllm_config.cache_config, "kv_cache_layout", None)
    return [copy.deepcopy(c) for c in configs], None


def capacity_of(vllm_config, workers: list) -> tuple[int | None, float | None, list[str]]:
    """``(tokens, maximum concurrency, log lines)``: :func:`capacity` of the workers' configs as
    the engine core gives them to its scheduler; before 0.30, which has no ``get_kv_cache_capacity``,
    the lines its planner logs, in its words, and their numbers (:func:`logged_capacity`)."""
    if not workers or not workers[0].kv_cache_groups:
        return None, None, []
    try:
        get_capacity = planner_function("get_kv_cache_capacity")
    except ImportError:
        lines = logged_capacity(vllm_config, workers[0])
        tokens = next((m for m in map(_SIZE.search, lines) if m), None)
        concurrency = next((m for m in map(_CONCURRENCY.search, lines) if m), None)
        return (int(tokens[1].replace(",", "")) if tokens else None), (float(concurrency[1]) if concurrency else None), lines
    scheduler_config = planner_function("generate_scheduler_kv_cache_config")(workers)
    tokens, concurrency = get_capacity(vllm_config, scheduler_config)
    return int(tokens), float(concurrency), []


_SIZE = re.compile(r"KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"[Cc]oncurrency for [\d,]+ tokens per request: ([\d.]+)x")


#: The capacity lines vLLM's planner logged while :func:`plan_budget` last planned (vLLM 0.11 logs them
#: per worker inside ``get_kv_cache_config_from_groups``, before the workers' num_blocks are unified).
_PLANNER_LOG: list[str] = []


@contextlib.contextmanager
def recorded(function):
    """While the block runs, each line the logger of ``function``'s module is given (every logging
    method: ``info_once(..., scope=...)`` too) is also recorded in the list yielded; put back after."""
    lines: list[str] = []
    namespace = function.__globals__
    if "logger" not in namespace:
        yield lines
        return
    saved = namespace["logger"]

    class Recorder:
        def __getattr__(self, name):
            def log(msg, *args, **kwargs):
                lines.append(str(msg) % args if args else str(msg))
                return getattr(saved, name)(msg, *args, **kwargs)

            return log

    namespace["logger"] = Recorder()
    try:
        yield lines
    finally:
        namespace["logger"] = saved


def logged_capacity(vllm_config, kv_cache_config) -> list[str]:
    """The "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request: Cx"
    lines vLLM logs at start-up, in its words: what its ``_report_kv_cache_config`` logs for
    ``kv_cache_config`` (the first worker's, as ``get_kv_cache_configs`` logs it once; 0.13+), else
    the first two its planner logged while planning (0.11); empty where it logs neither."""
    try:
        report = planner_function("_report_kv_cache_config")
    except ImportError:
        lines = list(_PLANNER_LOG)
    else:
        with recorded(report) as lines:
            report(vllm_config, kv_cache_config)
    size = next((line for line in lines if _SIZE.search(line)), None)
    concurrency = next((line for line in lines if _CONCURRENCY.search(line)), None)
    return [line for line in (size, concurrency) if line]


def predict(vllm_config, budget_for: Callable[[Any, int], Budget], progress=None,
            stage_bytes: list[int] | None = None, sides: Callable[..., Any] | None = None) -> Prediction:
    """The deployment's plan; ``budget_for(vllm_config, bytes of a rank's parameters)``
    gives the KV cache budget per worker (:mod:`.budget`), for each pipeline stage with
    its own weights (an estimate differs between stages; the headline's is the largest
    rank's); ``stage_bytes``: an exact budget per stage (``--stage-budgets``); ``sides``:
    the platform's ``sides(vllm_config, config, forward_context, shared)`` (stock's bytes and
    the plugin's, per worker: :func:`vllm_kv_strategies.platforms.upstream.plan.sides`).

    Raises:
        vLLM's own errors for a model it cannot build (not a refusal of the budget).
    """
    from vllm_kv_strategies.deploy.budget import exact

    start = time.monotonic()
    per_worker, stages, params, param_bytes = worker_specs(vllm_config, progress)
    context = vllm_config.compilation_config.static_forward_context
    context.update({name: layer for stage in stages for name, layer in stage["layers"].items()})
    try:  # the layers in the forward context, as in a worker: vLLM reads their attention backends
        resolve_layout(vllm_config, per_worker)
    finally:
        context.clear()
    if stage_bytes:
        budget = exact(min(stage_bytes), "--stage-budgets (the smallest stage's)")
        stage_budgets = [exact(n, "--stage-budgets") for n in stage_bytes]
    else:
        budget = budget_for(vllm_config, max(param_bytes))
        stage_budgets = [budget_for(vllm_config, b) for b in param_bytes]
    for each in [budget, *stage_budgets]:
        if each.bytes > 0:
            each.bytes = worker_budget(vllm_config, each.bytes)
    tp = vllm_config.parallel_config.tensor_parallel_size
    budgets = [stage_budgets[w // tp].bytes for w in range(len(per_worker))]
    workers, refusal = plan_budget(vllm_config, per_worker, budgets if len(set(budgets)) > 1 else budgets[0])
    prediction = Prediction(vllm_config, budget, workers, per_worker, stages, params, param_bytes, refusal)
    prediction.stage_budgets = stage_budgets
    prediction.tokens, prediction.max_concurrency, prediction.log_lines = capacity_of(vllm_config, workers)
    if sides is not None and workers and workers[0].kv_cache_groups:
        prediction.sides = [sides(vllm_config, config, stages[w // tp]["layers"], stages[w // tp]["shared"])
                            for w, config in enumerate(workers)]
    prediction.seconds = time.monotonic() - start
    return prediction


def stage_rows(prediction) -> list[dict[str, Any]]:
    """Per pipeline stage: its budget per worker (exact or the estimate with its weights term), the
    blocks it alone would hold (its budget // its workers' bytes per block, from vLLM's plan) and
    whether it limits num_blocks (vLLM gives every worker the smallest worker's count)."""
    from vllm_kv_strategies.core.specs import required_bytes

    tp = prediction.vllm_config.parallel_config.tensor_parallel_size
    rows = []
    for stage, budget in enumerate(prediction.stage_budgets):
        config = prediction.workers[stage * tp] if prediction.workers else None
        per_block = required_bytes(list(config.kv_cache_tensors)) // config.num_blocks if config and config.num_blocks else 0
        weights = {name: value for name, value, _ in budget.terms}.get("weights")
        rows.append({"stage": stage, "budget_bytes": budget.bytes, "exact": budget.exact, "weights_bytes": weights,
                     "bytes_per_block": per_block or None, "blocks_alone": budget.bytes // per_block if per_block else None})
    alone = [r["blocks_alone"] for r in rows if r["blocks_alone"] is not None]
    for r in rows:
        r["limits"] = bool(alone) and r["blocks_alone"] == min(alone)
    return rows
