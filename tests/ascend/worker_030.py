"""vllm-ascend 0.30's worker budget step, run for real on CPU: ``NPUWorker.determine_available_memory``
(its multi-group scale, as patched or not, and the layerwise-reuse factor after it), with only the
device measurement stood in for (``memory_profiling`` reports exactly ``measured`` bytes free for the
KV cache), then vLLM's (patched) planner on the budget it returns, and the runner's KV cache build.

``deployment(...)`` gives what a worker would do end to end, for one side (stock, or the plugin's
patches as ``register()`` installs them), and the bytes its KV cache build allocates.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import runner_factory as rf

from vllm_kv_strategies import patching


@dataclass
class Deployment:
    measured: int  #: KV cache bytes the worker measured (before its step)
    budget: int  #: what its step returned (vLLM's planner sizes num_blocks from it)
    num_blocks: int
    allocated: int  #: bytes of the storages the build allocated (alignment slack included)
    buffers: int
    kv_caches: dict
    required: int = 0  #: the config's backing (vLLM 0.30's KVCacheTensor.size)
    kv_cache_config: Any = None  #: the config built (after stock's layerwise rewrite on V1)


def _profile(measured: int):
    """``memory_profiling`` as if the device left exactly ``measured`` bytes for the KV cache:
    requested memory 2 x measured, non-KV memory (weights) = measured."""

    @contextlib.contextmanager
    def memory_profiling(init_snapshot, weights_memory=0):
        result = SimpleNamespace(
            non_torch_increase=0, torch_peak_increase=0, weights_memory=measured,
            before_profile=SimpleNamespace(torch_peak=0), after_profile=SimpleNamespace(free_memory=measured),
        )
        result.non_kv_cache_memory = measured
        yield result

    return memory_profiling


def budget_step(runner: Any, specs: dict, measured: int, monkeypatch, num_layers: int | None = None) -> int:
    """The real ``NPUWorker.determine_available_memory`` of a worker holding ``runner`` (whose
    ``get_kv_cache_spec`` gives ``specs``), the device measurement stood in for."""
    import torch
    from vllm_ascend.worker import worker as worker_module
    from vllm_ascend.worker.worker import NPUWorker

    monkeypatch.setattr(worker_module, "memory_profiling", _profile(measured))
    monkeypatch.setattr(worker_module, "maybe_apply_startup_plan", lambda worker: None)
    npu = getattr(torch, "npu", None)
    if npu is None or not hasattr(npu, "memory_stats"):
        monkeypatch.setattr(torch, "npu", SimpleNamespace(memory_stats=lambda device=None: {}), raising=False)
    else:
        monkeypatch.setattr(npu, "memory_stats", lambda device=None: {})
    object.__setattr__(runner, "get_kv_cache_spec", lambda: dict(specs))
    object.__setattr__(runner, "model_memory_usage", measured)
    object.__setattr__(runner, "profile_run", lambda: None)
    if num_layers is not None:
        runner.model_config.get_num_layers = lambda parallel_config: num_layers
    worker = NPUWorker.__new__(NPUWorker)
    vars(worker).update(
        model_runner=runner, vllm_config=runner.vllm_config, model_config=runner.vllm_config.model_config,
        cache_config=runner.vllm_config.cache_config, parallel_config=runner.vllm_config.parallel_config,
        init_snapshot=SimpleNamespace(free_memory=4 * measured), requested_memory=2 * measured,
        device=runner.device, _kvpp_cache_allocation_plan=None,
    )
    return int(worker.determine_available_memory())


def storages(kv_caches: dict) -> tuple[int, int]:
    """(bytes, storages) of the distinct storages ``kv_caches`` views."""
    seen = {}
    for value in kv_caches.values():
        for t in value if isinstance(value, (list, tuple)) else (value,):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values()), len(seen)


@contextlib.contextmanager
def plugin_patches():
    """The runner and worker patched as ``register()`` patches them on 0.30 (restored after)."""
    from vllm_ascend.worker import worker as worker_module

    from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
    from vllm_kv_strategies.platforms.ascend.worker_budget import MultiGroupBudgetAdapter

    runner_module = sys.modules[rf.NPUModelRunner.__module__]
    with _patched([(AscendAdapter(), runner_module), (MultiGroupBudgetAdapter(), worker_module)]):
        yield


@contextlib.contextmanager
def _patched(adapters):
    """Each ``(adapter, module)`` patched for the duration, then restored."""
    for adapter, module in adapters:
        adapter.patch(module)
    try:
        yield
    finally:
        for adapter, module in adapters:
            adapter.unpatch(module)


def deployment(runner_for, probe: Any, measured: int, monkeypatch, *, plugin: bool, max_model_len: int = 1024,
               num_layers: int | None = None, before_build=None) -> Deployment:
    """One worker, end to end: its budget step on ``runner_for(probe config)`` (``probe``: a
    :class:`runner_factory.ModelKV` with the model's specs), vLLM's (patched) planner on the
    budget, then stock's ``initialize_kv_cache`` steps on a runner of that config
    (``runner_for(config)``, carrying the decision the budget step recorded): the config
    rewritten by stock's own ``apply_layerwise_kv_cache_plan`` (a layerwise-reuse connector), then
    ``initialize_kv_cache_tensors``, with the plugin's patches installed where ``plugin``.
    ``before_build(runner)``: called between the budget step and the build."""
    from vllm_kv_strategies.platforms.ascend.budget import BUDGET_DECISION, OVERLAY_BUDGET
    from vllm_ascend.distributed.kv_transfer.kv_pool.ascend_store.layerwise_cache_layout import (
        apply_layerwise_kv_cache_plan,
    )

    with plugin_patches() if plugin else contextlib.nullcontext():
        runner = runner_for(probe.kv_cache_config)
        budget = budget_step(runner, probe.specs, measured, monkeypatch, num_layers)
        config = rf.build_kv_cache_config(dict(probe.specs), 0, available_memory=budget, max_model_len=max_model_len)
        built = runner_for(config)
        for key in (BUDGET_DECISION, OVERLAY_BUDGET):  # the same worker's runner: the decision it recorded
            if key in vars(runner):
                vars(built)[key] = vars(runner)[key]
        if num_layers is not None:
            built.model_config.get_num_layers = lambda parallel_config: num_layers
        config = copy.deepcopy(config)
        apply_layerwise_kv_cache_plan(config, built.vllm_config)  # as stock's initialize_kv_cache, before allocating
        if before_build is not None:
            before_build(built)
        kv = rf.NPUModelRunner.initialize_kv_cache_tensors(built, config, **rf.stock_kwargs(built, config))
    nbytes, buffers = storages(kv)
    return Deployment(measured, budget, config.num_blocks, nbytes, buffers, kv, max(t.size for t in config.kv_cache_tensors),
                      config)


def as_v2(runner: Any) -> Any:
    """``runner``'s state in an instance of Ascend's Model Runner V2 class (what the worker holds
    with ``VLLM_USE_V2_MODEL_RUNNER=1``): the budget step and the adapters tell the runners apart
    by class."""
    from vllm_ascend.worker.v2.model_runner import NPUModelRunner as V2Runner

    v2 = V2Runner.__new__(V2Runner)
    for key, value in vars(runner).items():
        object.__setattr__(v2, key, value)
    return v2


@contextlib.contextmanager
def v2_patches():
    """:func:`plugin_patches` plus Ascend V2's allocation and runner adapters, as ``register()`` patches them."""
    from vllm_kv_strategies.platforms.ascend.runner_v2 import AscendV2Adapter, AscendV2AllocationAdapter
    import factory_030_v2 as f2
    from vllm_ascend.worker.v2 import model_runner as v2_module

    with plugin_patches(), _patched([(AscendV2AllocationAdapter(), f2.attn_utils()), (AscendV2Adapter(), v2_module)]):
        yield


def deployment_v2(probe: Any, measured: int, monkeypatch, *, plugin: bool, max_model_len: int = 1024,
                  **runner_kwargs: Any) -> Deployment:
    """:func:`deployment` with the worker's runner Ascend's Model Runner V2: the budget step on
    it, then its ``initialize_kv_cache`` (wrapped by the plugin where ``plugin``) allocating
    through ``allocate_kv_cache_main`` (factory_030_v2)."""
    import factory_030_v2 as f2
    from vllm_kv_strategies.platforms.ascend.budget import BUDGET_DECISION, OVERLAY_BUDGET
    from vllm_kv_strategies.platforms.ascend.runner_v2 import AscendV2Adapter

    with v2_patches() if plugin else contextlib.nullcontext():
        runner = as_v2(f2.v2_runner(probe, **runner_kwargs))
        budget = budget_step(runner, probe.specs, measured, monkeypatch)
        config = rf.build_kv_cache_config(dict(probe.specs), 0, available_memory=budget, max_model_len=max_model_len)
        planned = rf.ModelKV(probe.name, probe.tp, config, dict(probe.specs), probe.runner_kwargs)
        built = as_v2(f2.v2_runner(planned, **runner_kwargs))
        for key in (BUDGET_DECISION, OVERLAY_BUDGET):  # the same worker's runner: the decision it recorded
            if key in vars(runner):
                vars(built)[key] = vars(runner)[key]
        init = (lambda stock: AscendV2Adapter().initialize_kv_cache(stock, built)) if plugin else (lambda stock: stock(built))
        kv = init(lambda r: f2.allocate_main(r, config))
    nbytes, buffers = storages(kv)
    return Deployment(measured, budget, config.num_blocks, nbytes, buffers, kv, max(t.size for t in config.kv_cache_tensors),
                      config)
