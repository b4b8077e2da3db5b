"""``plan`` where vllm-ascend is installed: each side, stock and the plugin,
planned and built by the installed release's own code on the meta device.

Per side the plugin's patches are installed as ``register()`` installs them in
``auto`` (the plugin's side) or not at all (stock's), and then:

1. the engine config is made by ``EngineArgs.create_engine_config`` (vllm-ascend's
   platform sizing runs in it; on 0.11 / 0.13 hybrids the plugin's page sizing too,
   so the two sides' block sizes can differ);
2. per pipeline stage the model is built on the meta device and the release's
   ``NPUModelRunner`` is constructed there (its ``__init__``, accelerator
   tensors on the meta device) and asked ``get_kv_cache_spec()``;
3. the worker's budget step: with an estimated budget, 0.30's
   ``NPUWorker._scale_kv_cache_memory_for_multi_group`` (the plugin's wrapper of
   it on the plugin's side); ``--kv-cache-memory-bytes`` is used as given, as
   the worker does;
4. vLLM's ``get_kv_cache_configs`` (vllm-ascend's patched planner on 0.30);
5. the runner's own ``initialize_kv_cache`` on that config, with the meta
   device: the bytes a side allocates are the storages of the caches it bound
   (:func:`storage_bytes`), stock's by stock's code and the plugin's by the
   plugin's. Nothing is allocated on a device.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from types import SimpleNamespace
from typing import Any, Callable

from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import KVStrategiesError, StockWouldFailError
from vllm_kv_strategies.deploy import model as deploy_model
from vllm_kv_strategies.platforms.ascend.plan_worker import fresh_graph_params, planning_routed_experts, worker_patches
from vllm_kv_strategies.deploy.budget import Budget


@dataclasses.dataclass
class Side:
    """One side of an Ascend deployment, per worker.

    Attributes:
        name: ``"stock"`` or ``"plugin"``.
        vllm_config: the engine config this side's front-end makes.
        available: KV cache bytes per worker before the worker's budget step
            (the memory the KV cache may take).
        budget: KV cache bytes per worker after the step (what vLLM's planner gets).
        scale: the budget step's scale (1.0: unscaled).
        workers: per worker its ``KVCacheConfig`` (empty when vLLM refuses).
        refusal: vLLM's own error when its planner refuses.
        allocated: per worker, bytes the side's build allocates (storages).
        plugin_refusal: on the plugin's side, why the plugin would not build
            (then stock builds this config in ``auto``, one warning).
        stock_would_fail: the plugin's refusal is a :class:`~vllm_kv_strategies.errors.StockWouldFailError`.
        build_error: the side's build raised on this config (its message).
        not_planned: the build raised on what plan does not run (the drafter's
            ``load_model``), not on the config: plan exits 0 for it.
    """

    name: str
    vllm_config: Any
    available: int
    budget: int
    scale: float
    workers: list[Any]
    refusal: str | None
    allocated: list[int] = dataclasses.field(default_factory=list)
    plugin_refusal: str | None = None
    stock_would_fail: bool = False
    build_error: str | None = None
    not_planned: bool = False
    tokens: int | None = None
    max_concurrency: float | None = None
    log_lines: list[str] = dataclasses.field(default_factory=list)  #: before vLLM 0.30: its two lines, its words
    memory_map: dict | None = None  #: the first worker's KV cache as built, for plan --plot (:mod:`.plan_map`)

    @property
    def num_blocks(self) -> int | None:
        return self.workers[0].num_blocks if self.workers else None

    @property
    def block_sizes(self) -> list[int]:
        return [g.kv_cache_spec.block_size for g in self.workers[0].kv_cache_groups] if self.workers else []

    def as_json(self) -> dict:
        return {
            "available_bytes_per_worker": self.available, "budget_bytes_per_worker": self.budget, "budget_scale": self.scale, "refusal": self.refusal,
            "num_blocks": self.num_blocks, "block_sizes": self.block_sizes, "tokens": self.tokens,
            "max_concurrency": self.max_concurrency, "vllm_log": self.log_lines, "bytes_allocated_per_worker": self.allocated,
            "plugin_refusal": self.plugin_refusal, "stock_would_fail": self.stock_would_fail,
            "build_error": self.build_error, "not_planned": self.not_planned,
        }


@contextlib.contextmanager
def patches(plugin: bool):
    """The plugin's patches of vllm-ascend installed as ``register()`` does in
    ``auto`` (``plugin``), or none, while the block runs; none after. Plan
    writes no KV cache report (``KV_STRATEGIES_REPORT`` is unset meanwhile)."""
    from vllm_kv_strategies.platforms.install import patch_when_imported, restore

    saved = {name: os.environ.get(name) for name in ("KV_STRATEGIES", "KV_STRATEGIES_REPORT")}
    os.environ.pop("KV_STRATEGIES_REPORT", None)
    os.environ["KV_STRATEGIES"] = "auto"
    restore(facts.ALL_TARGETS)
    try:
        if plugin:
            patch_when_imported(facts.targets())
        yield
    finally:
        restore(facts.ALL_TARGETS)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def npu_runner(vllm_config) -> Any:
    """The release's ``NPUModelRunner``, constructed on the meta device for
    ``vllm_config`` (host buffers stay on the host; nothing touches an NPU)."""
    import importlib

    import torch
    from vllm.config import set_current_vllm_config

    runner_cls = getattr(importlib.import_module(facts.target().module), "NPUModelRunner")
    with set_current_vllm_config(vllm_config), deploy_model.on_meta(default=False):
        return runner_cls(vllm_config, torch.device("meta"))


def npu_collect(runners: list) -> Callable[[Any], tuple[dict, dict]]:
    """A :func:`.model.build_stage` collector: the stage's specs by its
    ``NPUModelRunner.get_kv_cache_spec()``; each runner is appended to ``runners``."""

    def collect(vllm_config) -> tuple[dict, dict]:
        from vllm.config import set_current_vllm_config

        runner = npu_runner(vllm_config)
        with set_current_vllm_config(vllm_config):
            specs = runner.get_kv_cache_spec()
        runners.append(runner)
        return specs, dict(getattr(runner, "shared_kv_cache_layers", None) or {})

    return collect


@contextlib.contextmanager
def stage(vllm_config, layers: dict[str, Any]):
    """The stage's ``layers`` in the static forward context (where the runner
    and vLLM's helpers look layers up) and ``vllm_config`` current, for the block."""
    from vllm.config import set_current_vllm_config

    forward_context = vllm_config.compilation_config.static_forward_context
    forward_context.clear()
    forward_context.update(layers)
    try:
        with set_current_vllm_config(vllm_config):
            yield
    finally:
        forward_context.clear()


def budget_step(vllm_config, runner: Any, budget: int) -> int:
    """What the worker's ``determine_available_memory`` makes of ``budget``:
    unchanged for ``--kv-cache-memory-bytes``; else, on 0.30,
    ``NPUWorker._scale_kv_cache_memory_for_multi_group`` (as patched on this
    side) on a worker holding the runner."""
    if vllm_config.cache_config.kv_cache_memory_bytes or budget <= 0:
        return budget
    target = facts.MULTI_GROUP_BUDGET
    try:
        import importlib

        worker_cls = getattr(importlib.import_module(target.module), "NPUWorker")
    except (ImportError, AttributeError):
        return budget
    scale = getattr(worker_cls, "_scale_kv_cache_memory_for_multi_group", None)
    if scale is None:
        return budget
    worker = SimpleNamespace(model_runner=runner, vllm_config=vllm_config, model_config=vllm_config.model_config,
                             cache_config=vllm_config.cache_config, get_kv_cache_spec=runner.get_kv_cache_spec)
    return int(scale(worker, budget))


def storage_bytes(kv_caches: Any) -> int:
    """Bytes of the distinct storages ``kv_caches`` views (tensors, or lists /
    tuples / dicts of them), each counted once."""
    import torch

    seen: dict[int, int] = {}

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            seen[storage.data_ptr() if value.device.type != "meta" else id(storage)] = storage.nbytes()
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(kv_caches)
    return sum(seen.values())


def build(vllm_config, runner: Any, kv_cache_config: Any, layers: dict[str, Any]) -> int:
    """The runner's own ``initialize_kv_cache`` of ``kv_cache_config`` on the
    meta device, with the stage's ``layers`` in the forward context; returns
    the bytes of what it bound (``runner.kv_caches`` and its caches per layer)."""
    with stage(vllm_config, layers), deploy_model.on_meta(default=False), fresh_graph_params():
        runner.initialize_kv_cache(copy.deepcopy(kv_cache_config))
    bound = [getattr(module, "kv_cache", None) for module in layers.values()]
    return storage_bytes([runner.kv_caches, bound])


def plugin_refusal(vllm_config, runner: Any, kv_cache_config: Any, layers: dict[str, Any]) -> tuple[str | None, bool]:
    """``(why the plugin would not build, whether stock would fail too)`` by
    the adapter's own check before allocating (:meth:`AscendAdapter.plan_runner`)."""
    from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter

    try:
        with stage(vllm_config, layers):
            AscendAdapter().plan_runner(runner, copy.deepcopy(kv_cache_config))
    except KVStrategiesError as exc:
        return str(exc), isinstance(exc, StockWouldFailError)
    return None, False


def plan_side(name: str, vllm_config, budget_for: Callable[[Any, int], Budget], progress=None) -> tuple[Side, Any]:
    """One side (``"stock"`` or ``"plugin"``) of ``vllm_config`` (the engine
    config its front-end made) planned and built by its own code:
    ``(side, prediction)``, the prediction holding the side's specs, stages and budget."""
    from vllm_kv_strategies.deploy import predict

    with patches(plugin=name == "plugin"):
        runners: list = []
        per_worker, stages, params, param_bytes = predict.worker_specs(vllm_config, progress, npu_collect(runners))
        predict.resolve_layout(vllm_config, per_worker)
        budget = budget_for(vllm_config, max(param_bytes))
        tp = vllm_config.parallel_config.tensor_parallel_size
        stepped = []
        for w in range(len(per_worker)):
            with stage(vllm_config, stages[w // tp]["layers"]):
                stepped.append(budget_step(vllm_config, runners[w // tp], budget.bytes))
        workers, refusal = predict.plan_budget(vllm_config, per_worker, stepped)
        side = Side(name, vllm_config, budget.bytes, stepped[0], stepped[0] / budget.bytes if budget.bytes > 0 else 1.0, workers, refusal)
        prediction = predict.Prediction(vllm_config, budget, workers, per_worker, stages, params, param_bytes, refusal)
        side.tokens, side.max_concurrency, side.log_lines = predict.capacity_of(vllm_config, workers)
        if not workers:
            return side, prediction
        if progress is not None:
            progress(f"building {name}'s KV cache on the meta device")
        if name == "plugin":
            side.plugin_refusal, side.stock_would_fail = plugin_refusal(vllm_config, runners[0], workers[0], stages[0]["layers"])
        try:
            per_stage = [build(vllm_config, runners[s], workers[s * tp], stage["layers"]) for s, stage in enumerate(stages)]
        except Exception as exc:  # the side's own build raises on this config (it would at start-up too)
            side.build_error = f"{type(exc).__name__}: {exc}"
            side.not_planned = vllm_config.speculative_config is not None and "Proposer" in str(exc)
            if side.not_planned:
                side.build_error += (" (the worker loads its drafter, whose layers this initialisation reads, before it; "
                                     "plan builds the draft model but does not run the drafter's load_model: "
                                     "the KV cache of this speculative configuration is not planned here)")
        else:
            side.allocated = [per_stage[w // tp] for w in range(len(workers))]
            from vllm_kv_strategies.platforms.ascend.plan_map import side_map

            side.memory_map = side_map(stages[0]["layers"], workers[0], budget.bytes, side.tokens, side.max_concurrency)
    return side, prediction


def predict_ascend(engine_args, budget_for: Callable[[Any, int], Budget], progress=None):
    """The deployment's plan on vllm-ascend: the plugin's side as the
    :class:`~.predict.Prediction` (what the deployment gets with the plugin
    installed), both sides in its ``ascend``."""
    from vllm_kv_strategies.deploy import predict

    configs = {}
    for name in ("stock", "plugin"):  # the front-end's engine config, each with its side's patches
        with patches(plugin=name == "plugin"):
            configs[name] = predict.engine_config(copy.deepcopy(engine_args))
    worker_patches()
    with planning_routed_experts():
        stock, _ = plan_side("stock", configs["stock"], budget_for, progress)
        plugin, prediction = plan_side("plugin", configs["plugin"], budget_for, progress)
    prediction.tokens, prediction.max_concurrency, prediction.log_lines = plugin.tokens, plugin.max_concurrency, plugin.log_lines
    prediction.ascend = {"stock": stock, "plugin": plugin}
    return prediction
