"""Stock against the plugin on vLLM's upstream runners: build one
``KVCacheConfig`` with V1's ``GPUModelRunner.initialize_kv_cache_tensors`` or
V2's ``init_kv_cache`` (``vllm/v1/worker/gpu/attn_utils.py``), stock or
through the plugin's adapter, and compare what each built layer by layer
(shape, stride, dtype, storage offset, aliasing, binding, bytes).

Used by tests/unit (spec objects made by hand, stand-in layers) and by the
model zoo (tests/zoo: real models' modules and specs). vLLM is imported
inside functions only, so a cell without vLLM's upstream runner can import
this module and skip. vLLM 0.34 deleted Model Runner V1: :data:`RUNNERS` is then ``("v2",)``
and tests of V1 alone are marked :data:`needs_v1` (skipped, with the reason).
"""

from __future__ import annotations

import copy
import importlib.util
from types import SimpleNamespace
from typing import Any

import pytest
import torch


def _has_v1() -> bool:
    try:
        return importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is not None
    except ModuleNotFoundError:  # no vLLM, or no vllm.v1.worker
        return False


#: Whether the installed vLLM has Model Runner V1 (0.30 - 0.33), read from the installed files.
HAS_V1 = _has_v1()
#: The upstream runners of the installed release.
RUNNERS = ("v1", "v2") if HAS_V1 else ("v2",)
#: A test of Model Runner V1 alone.
needs_v1 = pytest.mark.skipif(not HAS_V1, reason="the installed vLLM has no Model Runner V1 (0.34 deleted it)")


def v1_runner_class():
    """V1's ``GPUModelRunner`` (None where the release has no V1)."""
    if not HAS_V1:
        return None
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner


class Layer:
    """Stands in for an attention module: records what is bound to it."""

    def __init__(self) -> None:
        self.kv_cache = None

    def bind_kv_cache(self, kv_cache) -> None:
        self.kv_cache = kv_cache


def make_config(specs: dict, layout: str, memory: int, hf_config=None):
    from vllm.config import VllmConfig

    vllm_config = VllmConfig()
    vllm_config.cache_config.kv_cache_layout = layout
    hf = hf_config or SimpleNamespace(model_type="llama")
    # V2's init_kv_cache reads the model type from vllm_config (LongCat-Flash has two attention modules per layer).
    object.__setattr__(vllm_config, "model_config", SimpleNamespace(hf_config=hf, hf_text_config=hf))
    return vllm_config, plan_config(vllm_config, specs, memory)


def plan_config(vllm_config, specs: dict, memory: int):
    """The ``KVCacheConfig`` vLLM's own planner makes of ``specs`` in ``memory`` bytes."""
    from vllm_kv_strategies.core.specs import kv_cache_planner

    get_kv_cache_groups, get_kv_cache_config_from_groups = kv_cache_planner()
    groups = get_kv_cache_groups(vllm_config, dict(specs))
    return get_kv_cache_config_from_groups(vllm_config, groups, memory)


def make_runner(vllm_config, layer_names, *, shared=None, hf_config=None, forward_context=None, attn_groups=()):
    """A V1 ``GPUModelRunner`` with only what its KV cache build reads (a plain
    namespace holding the same, where the release has no V1: V2's build reads only its
    forward context); its layers are ``forward_context`` (a real model's) or stand-ins."""
    GPUModelRunner = v1_runner_class()
    runner = GPUModelRunner.__new__(GPUModelRunner) if GPUModelRunner is not None else SimpleNamespace()
    runner.device = torch.device("cpu")
    runner.cache_config = vllm_config.cache_config
    runner.vllm_config = vllm_config
    hf = hf_config or SimpleNamespace(model_type="llama")
    runner.model_config = vllm_config.model_config or SimpleNamespace(hf_config=hf, hf_text_config=hf)
    runner.shared_kv_cache_layers = dict(shared or {})
    runner.runner_only_attn_layers = set(runner.shared_kv_cache_layers)
    runner.attn_groups = [list(groups) for groups in attn_groups]
    runner.speculative_config = None
    if forward_context is None:
        forward_context = {n: Layer() for n in [*layer_names, *runner.shared_kv_cache_layers]}
    runner.compilation_config = SimpleNamespace(static_forward_context=forward_context)
    runner.kv_caches = []
    return runner


def describe(t: Any):
    """Shape, strides, dtype and byte offset of a tensor (of each, for a list)."""
    if isinstance(t, (list, tuple)):
        return [describe(x) for x in t]
    return (tuple(t.shape), t.stride(), t.dtype, t.storage_offset() * t.element_size())


def alias_classes(kv_caches: dict) -> list[set[str]]:
    by_storage: dict[int, set[str]] = {}
    for name, t in kv_caches.items():
        by_storage.setdefault(t.untyped_storage().data_ptr(), set()).add(name)
    return sorted(by_storage.values(), key=sorted)


def build(
    version: str, vllm_config, config, names, kernel_block_sizes, *, plugin: bool, shared=None,
    forward_context=None, attn_groups=(),
):
    """(runner-like, kv_caches) from V1's or V2's stock build, or the plugin's."""
    import vllm.v1.worker.gpu.model_runner as v2_model_runner

    from vllm_kv_strategies import patching
    from vllm_kv_strategies.platforms.upstream.v1 import UpstreamV1Adapter
    from vllm_kv_strategies.platforms.upstream.v2 import UpstreamV2Adapter

    runner = make_runner(vllm_config, names, shared=shared, forward_context=forward_context, attn_groups=attn_groups)
    config = copy.deepcopy(config)
    if version == "v1":
        GPUModelRunner = v1_runner_class()
        stock = patching.original(GPUModelRunner, "initialize_kv_cache_tensors")
        if plugin:
            return runner, UpstreamV1Adapter().initialize_kv_cache_tensors(stock, runner, config, kernel_block_sizes)
        return runner, stock(runner, config, kernel_block_sizes)
    stock = patching.original(v2_model_runner, "init_kv_cache")
    forward_context = runner.compilation_config.static_forward_context
    args = (forward_context, config, runner.device, kernel_block_sizes or [], vllm_config)
    kwargs = {"attn_groups": [g for groups in attn_groups for g in groups]} if attn_groups else {}
    kv = UpstreamV2Adapter().init_kv_cache(stock, *args, **kwargs) if plugin else stock(*args, **kwargs)
    runner.kv_caches = list(kv.values())  # what V2's initialize_kv_cache keeps
    return runner, kv


def through_adapter(runner, config, *, plugin: bool = True, stock=None, version=None):
    """The release's first runner (V1 where it has one, else V2) building ``config`` for a
    :func:`make_runner` runner, through the plugin's adapter or stock; ``stock`` stands in
    for vLLM's build. The runner's ``kv_caches`` are set as its ``initialize_kv_cache`` does."""
    import vllm.v1.worker.gpu.model_runner as v2_model_runner

    from vllm_kv_strategies import patching
    from vllm_kv_strategies.platforms.upstream.v1 import UpstreamV1Adapter
    from vllm_kv_strategies.platforms.upstream.v2 import UpstreamV2Adapter

    version = version or RUNNERS[0]
    if version == "v1":
        stock = stock or patching.original(v1_runner_class(), "initialize_kv_cache_tensors")
        return UpstreamV1Adapter().initialize_kv_cache_tensors(stock, runner, config, None) if plugin else stock(runner, config, None)
    stock = stock or patching.original(v2_model_runner, "init_kv_cache")
    args = (runner.compilation_config.static_forward_context, config, runner.device, [], runner.vllm_config)
    kv = UpstreamV2Adapter().init_kv_cache(stock, *args) if plugin else stock(*args)
    if isinstance(kv, dict):
        runner.kv_caches = list(kv.values())
    return kv


def run_both(specs, layout="LBHNC", memory=1 << 22, kernel_block_sizes=None, *, version=None, hf_config=None, shared=None):
    """Stock and the plugin on one runner (default: the release's first, V1 where it has one)."""
    version = version or RUNNERS[0]
    vllm_config, config = make_config(specs, layout, memory, hf_config)
    names = list(specs)
    stock = build(version, vllm_config, config, names, kernel_block_sizes, plugin=False, shared=shared)
    ours = build(version, vllm_config, config, names, kernel_block_sizes, plugin=True, shared=shared)
    return config, stock, ours


def snapshot(pair) -> dict[str, Any]:
    """What one build made, as comparable values: every layer's view, the
    aliasing, the runner's ``kv_caches`` list, what each layer is bound to and
    the bytes allocated. Take it before the next build rebinds the layers."""
    runner, kv = pair
    bound = {}
    for name, layer in runner.compilation_config.static_forward_context.items():
        cache = getattr(layer, "kv_cache", None)
        if isinstance(cache, torch.Tensor) or (isinstance(cache, (list, tuple)) and cache):
            bound[name] = describe(cache)  # Mamba layers bind a list of state views
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kv.values()}
    return {
        "views": {name: describe(t) for name, t in kv.items()},
        "aliasing": alias_classes(kv),
        "runner_kv_caches": [describe(t) for t in runner.kv_caches],
        "bound": bound,
        "bytes": sum(storages.values()),
    }


def differences(stock: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Where two :func:`snapshot` results differ, one line each (empty: identical)."""
    lines = []
    for key in stock:
        if isinstance(stock[key], dict):
            for name in sorted(stock[key].keys() | ours[key].keys()):
                if stock[key].get(name) != ours[key].get(name):
                    lines.append(f"{key}[{name}]: stock {stock[key].get(name)} plugin {ours[key].get(name)}")
        elif stock[key] != ours[key]:
            lines.append(f"{key}: stock {stock[key]} plugin {ours[key]}")
    return lines


def assert_same(stock_pair, ours_pair):
    stock, ours = snapshot(stock_pair), snapshot(ours_pair)
    assert stock["views"].keys() == ours["views"].keys()
    assert not differences(stock, ours), differences(stock, ours)
