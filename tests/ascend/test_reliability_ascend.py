"""Clean failure on Ascend: an allocation failing part-way binds nothing and
releases every buffer of the attempt; unsupported runner features keep stock."""

from __future__ import annotations

import copy
import gc
import logging
import weakref

import pytest
import torch
import runner_factory as rf

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.errors import KVCacheAllocationError, UnsupportedSpecError


def test_allocation_failing_part_way_releases_the_attempt(monkeypatch):
    model = rf.qwen3_8b(tp=4)  # 36 layers, 72 raw buffers
    runner = model.make_runner()
    made: list[weakref.ref] = []
    real_zeros = torch.zeros

    def zeros(n, *args, **kwargs):
        if len(made) == 10:
            raise RuntimeError("NPU out of memory. Tried to allocate 256.00 KiB")
        t = real_zeros(n, *args, **kwargs)
        made.append(weakref.ref(t))
        return t

    monkeypatch.setattr(torch, "zeros", zeros)
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    with pytest.raises(KVCacheAllocationError) as info:
        AscendAdapter().initialize_kv_cache_tensors(stock, runner, copy.deepcopy(model.kv_cache_config))
    message = str(info.value)
    assert "model.layers.5.self_attn.attn" in message and "allocating 262144 bytes" in message
    del info
    gc.collect()
    assert len(made) == 10 and all(ref() is None for ref in made), "buffers of the failed attempt are still alive"
    assert runner.kv_caches == []
    assert all(getattr(m, "kv_cache", None) in (None, []) or not isinstance(m.kv_cache, tuple)
               for m in runner.compilation_config.static_forward_context.values())


@pytest.mark.parametrize("feature", ["use_compress", "enable_hamming_sparse"])
def test_runner_features_the_strategies_do_not_build_keep_stock(monkeypatch, feature, caplog):
    model = rf.qwen3_8b(tp=4)
    runner = model.make_runner()
    setattr(runner, feature, True)
    sentinel = {"stock": True}
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    assert AscendAdapter().initialize_kv_cache_tensors(lambda *a: sentinel, runner, model.kv_cache_config) is sentinel
    monkeypatch.setenv("KV_STRATEGIES", "on")
    with pytest.raises(UnsupportedSpecError, match="do not build"):
        AscendAdapter().initialize_kv_cache_tensors(lambda *a: sentinel, runner, model.kv_cache_config)


def test_fa_quant_on_a_kv_both_instance_is_refused_in_on_and_stock_in_auto(monkeypatch):
    """Stock raises there (the runner splits for FA quant, the specs stay bf16); the plugin leaves
    it to stock in auto and names it with on."""
    model = rf.deepseek_v3()
    runner = model.make_runner(kv_transfer=True, kv_role="kv_both", quant_config=rf.fa_quant_config(range(61)))
    sentinel = {"stock": True}
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    assert AscendAdapter().initialize_kv_cache_tensors(lambda *a: sentinel, runner, model.kv_cache_config) is sentinel
    monkeypatch.setenv("KV_STRATEGIES", "on")
    with pytest.raises(UnsupportedSpecError, match="FA quant.*kv_both"):
        AscendAdapter().initialize_kv_cache_tensors(lambda *a: sentinel, runner, model.kv_cache_config)
