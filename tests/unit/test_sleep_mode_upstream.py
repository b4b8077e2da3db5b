"""Sleep mode on vLLM's upstream runners (issue 22 item 4): vLLM's worker passes CuMemAllocator's
pool (tag ``kv_cache``) to the runner as ``kv_cache_allocation_context`` (V1's
``GPUModelRunner.initialize_kv_cache_tensors``, V2's ``init_kv_cache``), and vLLM allocates the
KV cache inside it. The plugin lets vLLM allocate: it hands the context on unchanged and
allocates nothing itself, so every byte of the KV cache lies in the pool as without the plugin.

The pool is stood in for (CuMemAllocator needs CUDA): a context manager that records whether
it is active; every ``torch.zeros`` / ``torch.empty`` during the build is recorded with whether
the pool was active and whether vLLM's own (stock) build was running.
"""

from __future__ import annotations

import contextlib
import copy
import functools

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu.model_runner", reason="needs vLLM's Model Runner V2 (vLLM >= 0.30)")

from upstream_harness import RUNNERS, make_config, make_runner, v1_runner_class  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

from vllm_kv_strategies import patching  # noqa: E402
from vllm_kv_strategies.platforms.upstream.v1 import UpstreamV1Adapter  # noqa: E402
from vllm_kv_strategies.platforms.upstream.v2 import UpstreamV2Adapter  # noqa: E402


class Recorder(contextlib.AbstractContextManager):
    """The pool stand-in, and the record of every allocation: (bytes, pool active, in stock)."""

    def __init__(self, monkeypatch):
        self.active = self.in_stock = False
        self.entered = 0
        self.allocations: list[tuple[int, bool, bool]] = []
        for name in ("zeros", "empty"):
            monkeypatch.setattr(torch, name, self.recording(getattr(torch, name)))

    def __enter__(self):
        self.active, self.entered = True, self.entered + 1
        return self

    def __exit__(self, *exc):
        self.active = False

    def recording(self, fn):
        @functools.wraps(fn)
        def allocate(*args, **kwargs):
            t = fn(*args, **kwargs)
            self.allocations.append((t.untyped_storage().nbytes(), self.active, self.in_stock))
            return t

        return allocate

    def stock(self, fn):
        """``fn`` (vLLM's own build), marked as running while it runs."""

        @functools.wraps(fn)
        def run(*args, **kwargs):
            self.in_stock = True
            try:
                return fn(*args, **kwargs)
            finally:
                self.in_stock = False

        return run


def _build(version: str, plugin: bool, recorder: Recorder, specs: dict):
    import vllm.v1.worker.gpu.model_runner as v2_model_runner

    vllm_config, config = make_config(specs, "LBHNC", 1 << 22)
    runner = make_runner(vllm_config, list(specs))
    config = copy.deepcopy(config)
    if version == "v1":
        stock = recorder.stock(patching.original(v1_runner_class(), "initialize_kv_cache_tensors"))
        args = (runner, config, None, recorder)  # kernel_block_sizes, kv_cache_allocation_context
        return UpstreamV1Adapter().initialize_kv_cache_tensors(stock, *args) if plugin else stock(*args)
    stock = recorder.stock(patching.original(v2_model_runner, "init_kv_cache"))
    args = (runner.compilation_config.static_forward_context, config, runner.device, [], vllm_config, recorder)
    return UpstreamV2Adapter().init_kv_cache(stock, *args) if plugin else stock(*args)


@pytest.mark.parametrize("version", RUNNERS)
def test_the_plugin_allocates_nothing_outside_sleep_modes_pool(version, monkeypatch):
    specs = {
        f"model.layers.{i}.self_attn.attn": FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
        for i in range(3)
    }
    recorder, recorded = Recorder(monkeypatch), {}
    for plugin in (False, True):
        recorder.allocations, recorder.entered = [], 0
        kv = _build(version, plugin, recorder, specs)
        assert kv and recorder.entered == 1 and not recorder.active
        recorded[plugin] = recorder.allocations
    assert recorded[True], "nothing allocated: the recorder saw no build"
    assert all(active and in_stock for _, active, in_stock in recorded[True]), recorded[True]
    assert recorded[True] == recorded[False]
