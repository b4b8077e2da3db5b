"""register() on vllm-ascend: the NPUModelRunner's three KV cache methods are
replaced on the class that defines them, reversibly; ``off`` never touches it."""

from __future__ import annotations

import copy

import pytest
import runner_factory as rf
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

import vllm_kv_strategies
from vllm_kv_strategies import patching

METHODS = ("initialize_kv_cache_tensors", "_allocate_kv_cache_tensors", "_reshape_kv_cache_tensors")
NPU = rf.NPUModelRunner


@pytest.fixture
def originals(monkeypatch):
    vllm_kv_strategies.unregister()
    saved = {m: NPU.__dict__[m] for m in METHODS}
    gpu = GPUModelRunner.__dict__["initialize_kv_cache_tensors"]
    yield saved, gpu
    vllm_kv_strategies.unregister()
    assert {m: NPU.__dict__[m] for m in METHODS} == saved


def test_off_leaves_the_class_untouched(monkeypatch, originals):
    saved, gpu = originals
    monkeypatch.setenv("KV_STRATEGIES", "off")
    vllm_kv_strategies.register()
    assert all(NPU.__dict__[m] is saved[m] for m in METHODS)
    assert not patching.is_patched(NPU)


def test_auto_patches_npu_runner_and_unpatch_restores_identity(monkeypatch, originals):
    saved, gpu = originals
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    vllm_kv_strategies.register()
    vllm_kv_strategies.register()  # a repeat is a no-op
    for m in METHODS:
        assert NPU.__dict__[m] is not saved[m]
        assert NPU.__dict__[m].__wrapped__ is saved[m]
    assert GPUModelRunner.__dict__["initialize_kv_cache_tensors"] is gpu  # NPU overrides it
    vllm_kv_strategies.unregister()
    assert all(NPU.__dict__[m] is saved[m] for m in METHODS)
    vllm_kv_strategies.register()
    assert NPU.__dict__["_allocate_kv_cache_tensors"].__wrapped__ is saved["_allocate_kv_cache_tensors"]


def test_callers_of_each_half_get_the_strategies_result(monkeypatch, originals):
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    vllm_kv_strategies.register()
    model = rf.t_hyb_toy()
    runner = model.make_runner()
    config = copy.deepcopy(model.kv_cache_config)
    raws = runner._allocate_kv_cache_tensors(config)
    caches = runner._reshape_kv_cache_tensors(config, raws)
    whole = model.make_runner().initialize_kv_cache_tensors(copy.deepcopy(model.kv_cache_config))
    assert caches.keys() == whole.keys()
    for name in caches:
        assert [tuple(t.shape) for t in caches[name]] == [tuple(t.shape) for t in whole[name]]
    # one raw buffer per KVCacheTensor, shared by its layers (never one per layer)
    assert len({raws[n].data_ptr() for n in raws}) == len(config.kv_cache_tensors)
    assert runner.hybrid_with_attn_and_mamba is True
