"""N3 and N4 of ``../shared/cases/never-worse-than-stock.md`` on vllm-ascend, with their right
values (N1 is in tests/unit/test_strategies.py, N2 and N5 in test_public_cases.py).

* N3: an MTP draft layer shares layer index 0 with a target layer. Every bound layer stays
  bound: ``runner.kv_caches`` lists all 9 caches and each module holds its own.
* N4: the KV cache config names layers this pipeline stage does not have. A named error
  (``ModelLayerMismatchError``, in ``auto`` too: stock fails on it after allocating) before
  any buffer is allocated, listing the layers the model lacks.

On vllm-ascend 0.30 N3's model is dense (the plugin refuses 0.30's hybrid backing by name,
stock builds it): 8 full-attention layers plus the MTP layer, each with private buffers.
"""

from __future__ import annotations

import pytest
import runner_factory as rf
import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec

from kv_compare import plugin_init, stock_init
from vllm_kv_strategies.platforms.ascend import runner as ascend_adapter
from vllm_kv_strategies.errors import ModelLayerMismatchError

BF16 = torch.bfloat16
MTP = "mtp.layers.0.self_attn.attn"


def bound(module):
    """The cache bound to a module: the cache itself (vLLM 0.23) or ``[cache]`` (one per
    virtual engine, vLLM 0.11 - 0.18)."""
    cache = module.kv_cache
    return cache[0] if isinstance(cache, list) and len(cache) == 1 else cache


def n3_model():
    if rf.RELEASE >= (0, 30):  # the hybrid toy is refused by name on 0.30: 8 dense layers + MTP
        spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)
        specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(8)}
        specs[MTP] = spec
        return rf.build_kv_cache_config(specs, 4, max_model_len=128)
    return _n3_model_hybrid()


def _n3_model_hybrid():
    """The T-HYB toy (6 Mamba + 2 attention layers) plus an MTP draft attention layer with
    the toy's attention spec (``FullAttentionSpec(128, 1, 64, bf16)``, padded as the release
    pads it), planned by vLLM; N = 4."""
    toy = rf.t_hyb_toy()
    specs = dict(toy.specs)
    specs[MTP] = specs["model.layers.3.self_attn.attn"]
    return rf.build_kv_cache_config(specs, 4, max_model_len=128)


def test_n3_an_mtp_layer_sharing_a_layer_index_stays_bound(monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES", "on")
    config = n3_model()
    assert sum(len(g.layer_names) for g in config.kv_cache_groups) == 9
    runner = rf.make_runner(config)
    kv = plugin_init(runner, config)
    assert len(kv) == 9 and len(runner.kv_caches) == 9
    assert {id(c) for c in runner.kv_caches} == {id(c) for c in kv.values()}
    context = runner.compilation_config.static_forward_context
    for name, cache in kv.items():
        assert bound(context[name]) is cache, name
    # the draft layer has K/V views of its own, in the buffer of its KVCacheTensor
    k, v = kv[MTP]
    assert (tuple(k.shape), k.dtype) == ((4, 128, 1, 64), BF16)
    assert all(kv[MTP] is not c for name, c in kv.items() if name != MTP)
    if rf.RELEASE >= (0, 30):  # private: its K|V buffer (interleaved per kernel block) serves no other layer
        assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
        others = {t.untyped_storage().data_ptr() for name, c in kv.items() if name != MTP for t in c}
        assert k.untyped_storage().data_ptr() not in others
        return
    tensor = next(t for t in config.kv_cache_tensors if MTP in t.shared_by)
    storages = {t.untyped_storage().data_ptr() for name in tensor.shared_by for t in kv[name]}
    assert {k.untyped_storage().data_ptr(), v.untyped_storage().data_ptr()} <= storages


def test_n3_the_plugin_binds_every_layer_stock_binds():
    """Each module holds its cache in the form stock binds it, and the plugin's runner list is
    never shorter than stock's (vllm-ascend 0.13 - 0.23's binder keeps one cache per layer
    index: 8 of 9). On 0.11 stock's ``bind_kv_cache`` raises on two layers of one index."""
    config = n3_model()
    stock_runner, ours_runner = rf.make_runner(config), rf.make_runner(config)
    plugin_init(ours_runner, config)
    if rf.RELEASE < (0, 13):
        with pytest.raises(NotImplementedError):
            stock_init(stock_runner, config)
        assert len(ours_runner.kv_caches) == 9
        return
    stock_init(stock_runner, config)
    assert len(stock_runner.kv_caches) <= len(ours_runner.kv_caches) == 9
    ours_ctx = ours_runner.compilation_config.static_forward_context
    stock_ctx = stock_runner.compilation_config.static_forward_context
    for name in stock_ctx:
        if stock_ctx[name].kv_cache is not None:
            assert type(ours_ctx[name].kv_cache) is type(stock_ctx[name].kv_cache), name


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_n4_layers_the_stage_lacks_are_named_before_allocating(monkeypatch, mode):
    """Config layers ``model.layers.0-3``, model (this stage) layers 0-1."""
    monkeypatch.setenv("KV_STRATEGIES", mode)
    spec = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=128, dtype=BF16)
    config = rf.build_kv_cache_config({f"model.layers.{i}.self_attn.attn": spec for i in range(4)}, 4)
    runner = rf.make_runner(config)
    context = runner.compilation_config.static_forward_context
    for i in (2, 3):
        del context[f"model.layers.{i}.self_attn.attn"]
    allocated = []
    monkeypatch.setattr(ascend_adapter, "allocate", lambda *a, **k: allocated.append(a))
    with pytest.raises(ModelLayerMismatchError) as info:
        plugin_init(runner, config)
    message = str(info.value)
    assert "names 2 layers the model does not have" in message
    assert "model.layers.2.self_attn.attn, model.layers.3.self_attn.attn" in message
    assert "the model has 2 attention layers" in message
    assert allocated == [] and runner.kv_caches == []
    assert all(getattr(m, "kv_cache", None) in (None, []) for m in context.values())
