"""Stock vllm-ascend KV cache initialisation against the plugin, layer by layer.

Each case builds a real ``KVCacheConfig`` (vLLM's planner, real spec classes,
real model dimensions) and two real ``NPUModelRunner`` instances; stock
``initialize_kv_cache_tensors`` runs on one, the Ascend adapter's on the other.
Per layer: the same number of caches, shapes, dtypes, strides, and num_blocks
(dim 0); bytes allocated no more than stock; every layer of one
``KVCacheTensor`` aliases one storage set; no two tensors overlap; with
``kv_transfer_config`` each raw buffer starts on a 2 MiB boundary.
"""

from __future__ import annotations

import copy

import pytest
import torch
import runner_factory as rf

from vllm_kv_strategies import compat, patching
from vllm_kv_strategies.plan import plan_kv_cache
from vllm_kv_strategies.report import build_report
from vllm_kv_strategies.adapters.ascend import TRANSFER_ALIGNMENT, AscendAdapter

MODELS = {
    "qwen3-8b-tp1": lambda: rf.qwen3_8b(tp=1),
    "qwen3-8b-tp4": lambda: rf.qwen3_8b(tp=4),
    "deepseek-v3-tp1": lambda: rf.deepseek_v3(tp=1),
    "deepseek-v3-tp4": lambda: rf.deepseek_v3(tp=4),
    "deepseek-v3.2-tp1": lambda: rf.deepseek_v32(tp=1),
    "deepseek-v3.2-tp4": lambda: rf.deepseek_v32(tp=4),
    "qwen3-next-tp1": lambda: rf.qwen3_next(tp=1),
    "qwen3-next-tp4": lambda: rf.qwen3_next(tp=4),
    "t-hyb": lambda: rf.t_hyb_toy(),
}


def storages(kv_caches: dict) -> dict[int, int]:
    out = {}
    for value in kv_caches.values():
        for t in value:
            s = t.untyped_storage()
            out[s.data_ptr()] = s.nbytes()
    return out


def run(model: rf.ModelKV, fn, kv_transfer: bool):
    runner = model.make_runner(kv_transfer=kv_transfer)
    config = copy.deepcopy(model.kv_cache_config)
    return runner, fn(runner, config)


def stock_init(runner, config):
    return patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")(runner, config)


def ours_init(runner, config):
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    return AscendAdapter().initialize_kv_cache_tensors(stock, runner, config)


def describe(t: torch.Tensor):
    return tuple(t.shape), t.dtype, t.stride()


@pytest.mark.parametrize("kv_transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("name", list(MODELS))
def test_plugin_equals_stock(name, kv_transfer, capsys):
    model = MODELS[name]()
    stock_runner, stock = run(model, stock_init, kv_transfer)
    ours_runner, ours = run(model, ours_init, kv_transfer)
    config = model.kv_cache_config

    assert ours.keys() == stock.keys()
    for layer in stock:
        assert [describe(t) for t in ours[layer]] == [describe(t) for t in stock[layer]], layer
        assert all(t.shape[0] >= config.num_blocks for t in ours[layer])

    # Every layer of one KVCacheTensor aliases its storage; tensors never overlap.
    owner: dict[int, int] = {}
    for tid, tensor in enumerate(config.kv_cache_tensors):
        ptrs = {frozenset(t.untyped_storage().data_ptr() for t in ours[layer]) for layer in tensor.shared_by}
        assert len(ptrs) == 1, f"tensor {tid}: layers {tensor.shared_by} do not share storage"
        for ptr in ptrs.pop():
            assert owner.setdefault(ptr, tid) == tid, f"tensors {owner[ptr]} and {tid} share storage"

    ours_bytes, stock_bytes = sum(storages(ours).values()), sum(storages(stock).values())
    required = sum(t.size for t in config.kv_cache_tensors)
    assert ours_bytes <= stock_bytes
    if kv_transfer:
        assert ours_bytes <= required + TRANSFER_ALIGNMENT * len(storages(ours))
        for value in ours.values():
            for t in value:
                base = t.data_ptr() - t.storage_offset() * t.element_size()
                # the raw buffer is the aligned slice the first view starts from
                assert (t.data_ptr() - base) >= 0
        raw = ours_runner._allocate_kv_cache_tensors(copy.deepcopy(config))
        for value in raw.values():
            for buf in (value if isinstance(value, tuple) else (value,)):
                assert buf.data_ptr() % TRANSFER_ALIGNMENT == 0
    else:
        assert ours_bytes == required
    # Bound to the model like stock.
    for layer, module in ours_runner.compilation_config.static_forward_context.items():
        if layer in ours:
            assert module.kv_cache is not None
    assert len(ours_runner.kv_caches) == len(stock_runner.kv_caches)
    # The report measures both sides the same way, from the tensors.
    plan = plan_kv_cache(config, AscendAdapter.layer_dims(ours_runner), skip_layers=ours_runner.runner_only_attn_layers)
    t_ours = build_report(plan, ours, strided=False)["totals"]
    t_stock = build_report(plan, stock, strided=False)["totals"]
    assert t_ours["bytes_required"] == required and t_ours["duplicated_bytes"] == 0
    assert t_ours["alignment_padding"] == (TRANSFER_ALIGNMENT * t_ours["raw_buffers"] if kv_transfer else 0)
    assert (t_ours["bytes_allocated"], t_ours["num_blocks"], t_ours["tokens"]) == (
        t_stock["bytes_allocated"], t_stock["num_blocks"], t_stock["tokens"])
    print(f"{name} transfer={kv_transfer}: stock {stock_bytes} bytes, plugin {ours_bytes} bytes, required {required}")
