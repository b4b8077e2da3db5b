"""On the device as stock does (issue 22 items 3 and 4), in every Ascend cell.

* NPU operations: on a runner whose device is an NPU, the plugin calls exactly the NPU
  operations (the stubbed ``torch_npu`` / ``torch.npu``, recorded by
  :func:`npu_stubs.npu_calls`) that the release's stock build calls: 0.11 casts attention
  views through ``_convert_torch_format``; 0.13 - 0.30 call none.
* Sleep mode: the worker's own ``NPUWorker.initialize_from_config`` (sleep mode on) runs the
  KV cache build inside ``CaMemAllocator``'s pool, tag ``kv_cache`` (0.13 - 0.23 around
  ``initialize_kv_cache``; 0.30 passes it as ``kv_cache_allocation_context``). The pool's
  pluggable allocator is stood in for: every ``torch.zeros`` / ``torch.empty`` inside it is
  registered with the real allocator's ``python_malloc_callback`` (as the C allocator does),
  every one outside is recorded. Every buffer the plugin's caches view must be a ``kv_cache``
  allocation of the pool, as stock's are, and nothing may be allocated outside; after the
  real ``CaMemAllocator.sleep()`` / ``wake_up()`` (unmapping and mapping stood in for: discard
  fills the bytes, map zeroes them) the caches are the same views (objects, data_ptrs,
  shapes, strides, storage bytes), bound as before.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
from types import SimpleNamespace

import npu_stubs
import pytest
import runner_factory as rf
import torch

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter

R = rf.RELEASE
ON_030 = R >= (0, 30)
#: Models the plugin builds on every release (0.30: hybrids and sparse MLA are refused by name;
#: Qwen3-Next with the plugin's hybrid sizing where the release has one, 0.11 / 0.13).
BUILDERS = {
    "qwen3_8b": rf.qwen3_8b,
    "deepseek_v3": rf.deepseek_v3,
    "sliding_window_beside_full": rf.sliding_window_beside_full,
}
if not ON_030:
    BUILDERS.update(deepseek_v32=rf.deepseek_v32, qwen3_next=lambda: rf.qwen3_next(plugin_sizing=True), t_hyb_toy=rf.t_hyb_toy)
MODELS = [
    pytest.param(name, marks=pytest.mark.skipif(
        R < (0, 13), reason="stock 0.11 fails on sliding-window layers ('Unknown KV cache spec type'): nothing to compare"))
    if name == "sliding_window_beside_full" else name
    for name in BUILDERS
]


class NPUDevice:
    """What ``runner.device`` looks like on an Ascend host (``type == "npu"``); allocations
    asked for on it are made on the CPU (see :func:`npu_device`)."""

    type, index = "npu", 0

    def __repr__(self) -> str:
        return "device(type='npu', index=0)"


def _on_cpu(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if isinstance(kwargs.get("device"), NPUDevice):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)

    return call


@pytest.fixture
def npu_device(monkeypatch):
    """``torch.zeros`` / ``torch.empty`` that take an :class:`NPUDevice` (for stock and plugin)."""
    for name in ("zeros", "empty"):
        monkeypatch.setattr(torch, name, _on_cpu(getattr(torch, name)))
    return NPUDevice()


def _build(which: str, runner, config, **kwargs):
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    config = copy.deepcopy(config)
    kwargs = {**rf.stock_kwargs(runner, config), **kwargs}
    if which == "stock":
        return stock(runner, config, **kwargs)
    return AscendAdapter().initialize_kv_cache_tensors(stock, runner, config, **kwargs)


@pytest.mark.parametrize("model", MODELS)
def test_the_plugin_calls_the_npu_operations_stock_calls(model, npu_device):
    mk = BUILDERS[model]()
    calls = {}
    for which in ("stock", "plugin"):
        runner = mk.make_runner()
        runner.device = npu_device
        before = npu_stubs.npu_calls()
        kv = _build(which, runner, mk.kv_cache_config)
        calls[which] = npu_stubs.npu_calls() - before
        assert kv
    assert calls["plugin"] == calls["stock"]
    if R >= (0, 13):
        assert calls["plugin"] == {}, "stock 0.13+ calls no NPU operation on KV cache views"


def test_the_recorder_sees_an_npu_operation():
    """What the comparison rests on: a call of a stubbed NPU operation is counted by name."""
    import torch_npu

    before = npu_stubs.npu_calls()
    torch_npu.npu_format_cast(torch.zeros(2), 2)
    torch.npu.synchronize()
    assert npu_stubs.npu_calls() - before == {"torch_npu.npu_format_cast": 1, "torch.npu.synchronize": 1}


# -- sleep mode --------------------------------------------------------------------------------


def _bytes_of(storage) -> torch.Tensor:
    """All bytes of ``storage`` as one int8 tensor."""
    return torch.tensor([], dtype=torch.int8).set_(storage, 0, (storage.nbytes(),), (1,))


class PoolStandIn:
    """Stands in for torch's pluggable allocator behind ``CaMemAllocator.use_memory_pool``:
    while a pool is active every allocation is reported to its ``python_malloc_callback``
    with a handle ``(device, bytes, data_ptr, tensor)``; allocations outside are recorded."""

    def __init__(self, monkeypatch, camem):
        self.active: list = []
        self.outside: list[int] = []
        monkeypatch.setattr(camem, "use_memory_pool_with_allocator", self.use_pool)
        monkeypatch.setattr(camem, "unmap_and_release", lambda handle: handle[3].fill_(0x5A))  # discarded
        monkeypatch.setattr(camem, "create_and_map", lambda handle: handle[3].zero_())  # fresh memory
        for name in ("zeros", "empty"):
            monkeypatch.setattr(torch, name, self.recording(getattr(torch, name)))

    @contextlib.contextmanager
    def use_pool(self, malloc, free):
        self.active.append(malloc)
        try:
            yield None, None
        finally:
            self.active.pop()

    def recording(self, fn):
        @functools.wraps(fn)
        def allocate(*args, **kwargs):
            t = fn(*args, **kwargs)
            storage = t.untyped_storage()
            if self.active:
                self.active[-1]((0, storage.nbytes(), storage.data_ptr(), _bytes_of(storage)))
            else:
                self.outside.append(storage.nbytes())
            return t

        return allocate


def _worker(camem_allocator_cls, runner, build):
    """A stand-in ``self`` for the release's real ``NPUWorker.initialize_from_config`` with
    sleep mode on; its model runner's ``initialize_kv_cache`` runs ``build`` (the release's
    ``initialize_kv_cache_tensors``, stock's or the plugin's) with the context it gets (0.30)."""
    worker_mod = importlib.import_module("vllm_ascend.worker.worker_v1" if R < (0, 13) else "vllm_ascend.worker.worker")

    def initialize_kv_cache(kv_cache_config, kv_cache_allocation_context=None):
        extra = {"kv_cache_allocation_context": kv_cache_allocation_context} if ON_030 else {}
        runner.built = build(runner, kv_cache_config, **extra)

    worker = SimpleNamespace(
        vllm_config=SimpleNamespace(
            model_config=SimpleNamespace(enable_sleep_mode=True), kv_transfer_config=None, speculative_config=None
        ),
        model_runner=SimpleNamespace(initialize_kv_cache=initialize_kv_cache),
        use_v2_model_runner=False,
    )
    if hasattr(worker_mod.NPUWorker, "_maybe_get_memory_pool_context"):
        worker._maybe_get_memory_pool_context = functools.partial(worker_mod.NPUWorker._maybe_get_memory_pool_context, worker)
    return functools.partial(worker_mod.NPUWorker.initialize_from_config, worker)


def _views(kv: dict) -> dict:
    return {
        name: [(id(t), t.data_ptr(), tuple(t.shape), t.stride(), t.untyped_storage().nbytes()) for t in value]
        for name, value in kv.items()
    }


@pytest.mark.parametrize("model", MODELS)
def test_every_allocation_is_in_the_kv_cache_pool_as_stock_and_survives_sleep(model, monkeypatch):
    camem = importlib.import_module("vllm_ascend.device_allocator.camem")
    pool = PoolStandIn(monkeypatch, camem)
    mk = BUILDERS[model]()
    for which in ("stock", "plugin"):
        monkeypatch.setattr(camem.CaMemAllocator, "instance", None)
        allocator = camem.CaMemAllocator.get_instance()
        runner = mk.make_runner()
        pool.outside.clear()
        _worker(camem.CaMemAllocator, runner, functools.partial(_build, which))(copy.deepcopy(mk.kv_cache_config))
        kv = runner.built
        assert pool.outside == [], f"{which} allocated {pool.outside} bytes outside the kv_cache pool"
        in_pool = {ptr: data.tag for ptr, data in allocator.pointer_to_data.items()}
        storages = {t.untyped_storage().data_ptr() for value in kv.values() for t in value}
        assert storages and all(in_pool.get(ptr) == "kv_cache" for ptr in storages), (which, in_pool)
        if which == "plugin":  # (stock 0.11 allocates hybrid buffers that no view uses)
            assert len(in_pool) == len(storages), "the plugin allocated buffers that no cache views"
        before, bound = _views(kv), list(runner.kv_caches)
        allocator.sleep(offload_tags=("weights",))  # level 1: the KV cache is discarded
        assert all(bool((_bytes_of(t.untyped_storage()) == 0x5A).all()) for value in kv.values() for t in value)
        allocator.wake_up(tags=["kv_cache"])
        assert _views(kv) == before and all(a is b for a, b in zip(runner.kv_caches, bound))
        assert all(not t.any() for value in kv.values() for t in value), "wake_up maps fresh (zeroed) memory"
