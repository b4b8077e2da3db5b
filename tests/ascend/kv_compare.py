"""Stock vllm-ascend KV cache initialisation against the plugin's on one model config, and what
tells their results apart: per-layer views, storages, bytes, and block-consistent aliasing.

Shared by ``test_compare_stock`` (fixed expectations per case) and ``test_zoo`` (a verdict per
model: identical, better, fallback or refused). Nothing here builds configs; that is
``runner_factory``'s job.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import runner_factory as rf
from vllm.v1.kv_cache_interface import AttentionSpec

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter


def stock_init(runner, config):
    """The stock initialisation the release's ``initialize_kv_cache`` would call, with the
    arguments it passes (0.30: ``kernel_block_sizes``, ``kv_cache_allocation_context``)."""
    config = copy.deepcopy(config)
    return patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))(runner, config, **rf.stock_kwargs(runner, config))


def plugin_init(runner, config):
    """The Ascend adapter's ``initialize_kv_cache_tensors`` (stock is what it falls back to),
    called as stock is (:func:`stock_init`)."""
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    config = copy.deepcopy(config)
    return AscendAdapter().initialize_kv_cache_tensors(stock, runner, config, **rf.stock_kwargs(runner, config))


def refused_before_allocating(runner, config, error: type[BaseException], monkeypatch) -> BaseException:
    """The adapter's ``initialize_kv_cache_tensors`` of ``config`` on ``runner`` (called as
    :func:`plugin_init`), which must raise ``error`` with no raw buffer allocated (the layout
    code's ``allocate_bytes`` is watched for the rest of the test); returns the exception."""
    import pytest
    from vllm_kv_strategies.platforms.ascend import allocate as ascend_alloc

    allocated: list = []
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *args: allocated.append(args))
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    with pytest.raises(error) as raised:
        AscendAdapter().initialize_kv_cache_tensors(stock, runner, copy.deepcopy(config), **rf.stock_kwargs(runner, config))
    assert allocated == [], f"{len(allocated)} buffers allocated before the refusal"
    return raised.value


def storages(kv_caches: dict) -> dict[int, int]:
    """data_ptr -> bytes of every storage the caches view."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for value in kv_caches.values() for t in value}


def describe(t: torch.Tensor):
    return tuple(t.shape), t.dtype, t.stride()


def layout_signature(kv_caches: dict) -> tuple:
    """Everything that tells two builds apart except where the allocator put them: per layer
    (sorted) its views' shape, dtype, stride, storage (numbered in order of first use) and byte
    offset from the first view byte of that storage; and the bytes of each storage."""
    ids: dict[int, int] = {}
    first: dict[int, int] = {}
    for name in sorted(kv_caches):
        for t in kv_caches[name]:
            ptr = t.untyped_storage().data_ptr()
            ids.setdefault(ptr, len(ids))
            first[ptr] = min(first.get(ptr, t.data_ptr()), t.data_ptr())
    layers = tuple(
        (name, tuple((*describe(t), ids[p := t.untyped_storage().data_ptr()], t.data_ptr() - first[p]) for t in kv_caches[name]))
        for name in sorted(kv_caches)
    )
    sizes = {ids[p]: n for p, n in storages(kv_caches).items()}
    return layers, tuple(sizes[i] for i in range(len(sizes)))


def _blocks_per_view(spec: Any, view: torch.Tensor, num_blocks: int) -> int:
    """Rows of dim 0 per logical block: kernel blocks of an attention view, sub-blocks of a
    replicated part; 1 for Mamba states."""
    if isinstance(spec, AttentionSpec) and view.shape[0] % num_blocks == 0:
        return view.shape[0] // num_blocks
    return 1


def _span(view: torch.Tensor, base: int) -> tuple[int, int]:
    start = view.data_ptr() - base
    extent = 1 + sum((size - 1) * stride for size, stride in zip(view.shape, view.stride()) if size)
    return start, start + extent * view.element_size()


def block_conflicts(kv_caches: dict, config: Any, limit: int = 3) -> list[str]:
    """Where a byte belongs to block j of one layer (or part) and block k != j of another (or
    two parts of one layer share it): what would corrupt the cache, since the block pool gives a
    block index to one group at a time and only same-index aliasing is safe. Kernel blocks count
    as part of their block. Empty if none; at most ``limit`` descriptions."""
    specs = rf._layer_specs(config)
    n = config.num_blocks
    by_storage: dict[int, list[tuple[int, int, int, str, int]]] = {}
    for name, value in kv_caches.items():
        for part, view in enumerate(value):
            base = view.untyped_storage().data_ptr()
            per_block = _blocks_per_view(specs.get(name), view, n)
            rows = by_storage.setdefault(base, [])
            for row in range(view.shape[0]):
                start, end = _span(view[row], base)
                rows.append((start, end, row // per_block, name, part))
    found: list[str] = []
    for rows in by_storage.values():
        rows.sort()
        active: list[tuple[int, int, int, str, int]] = []
        for row in rows:
            active = [a for a in active if a[1] > row[0]]
            for a in active:
                same_layer = a[3] == row[3]
                if (same_layer and a[4] != row[4]) or (not same_layer and a[2] != row[2]) or (same_layer and a[4] == row[4]):
                    found.append(
                        f"{a[3]} part {a[4]} block {a[2]} and {row[3]} part {row[4]} block {row[2]} share bytes "
                        f"[{max(a[0], row[0])}, {min(a[1], row[1])})"
                    )
                    if len(found) >= limit:
                        return found
            active.append(row)
    return found


def blocks_of(kv_caches: dict, config: Any) -> dict[str, int]:
    """layer -> the fewest logical blocks any of its views holds."""
    specs = rf._layer_specs(config)
    n = config.num_blocks
    return {
        name: min(view.shape[0] // _blocks_per_view(specs.get(name), view, n) for view in value)
        for name, value in kv_caches.items()
    }


def tensor_layers(tensor: Any) -> list[str]:
    """The layers a ``KVCacheTensor`` serves: ``shared_by`` up to vLLM 0.23, ``layers`` in vLLM
    0.30's strided form."""
    return list(tensor.shared_by) if hasattr(tensor, "shared_by") else list(tensor.layers)


def strided(config: Any) -> bool:
    """Whether the config's tensors are vLLM 0.30's strided form (``layer_stride``)."""
    return any(hasattr(tensor, "layer_stride") for tensor in config.kv_cache_tensors)


def layers_sharing_storage(kv_caches: dict) -> list[tuple[str, str]]:
    """Pairs of layers (sorted) whose views share a storage: none where every layer owns its
    buffers, as stock vllm-ascend 0.30 gives them outside hybrids."""
    owner: dict[int, str] = {}
    pairs = set()
    for name in sorted(kv_caches):
        for t in kv_caches[name]:
            ptr = t.untyped_storage().data_ptr()
            if owner.setdefault(ptr, name) != name:
                pairs.add((owner[ptr], name))
    return sorted(pairs)


def storage_bytes_by_layer(kv_caches: dict) -> dict[str, list[int]]:
    """layer -> the bytes of each distinct storage its views use, in order of first use (K and V
    interleaved in one buffer: one entry)."""
    out = {}
    for name, value in kv_caches.items():
        seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in value}
        out[name] = list(seen.values())
    return out


def tensors_sharing_storage(kv_caches: dict, config: Any) -> list[tuple[int, int]]:
    """Pairs of ``KVCacheTensor`` indices whose layers view one storage (never allowed)."""
    owner: dict[int, int] = {}
    pairs = set()
    for tid, tensor in enumerate(config.kv_cache_tensors):
        for layer in tensor_layers(tensor):
            for t in kv_caches.get(layer, ()):
                ptr = t.untyped_storage().data_ptr()
                if owner.setdefault(ptr, tid) != tid:
                    pairs.add((owner[ptr], tid))
    return sorted(pairs)


@dataclass
class Built:
    """One side's result: the caches, or the error it raised; ``unbound``: layers whose cache
    is not in ``runner.kv_caches`` or not bound to their forward-context module."""

    kv: dict | None
    error: BaseException | None = None
    unbound: tuple[str, ...] = ()

    @property
    def bytes(self) -> int | None:
        return None if self.kv is None else sum(storages(self.kv).values())


def vllm_bound(bound: Any) -> Any:
    """What a module's ``kv_cache`` holds as vLLM's ``bind_kv_cache`` sets it, unwrapped: vLLM
    0.11 - 0.18 bind ``[cache]`` (one per virtual engine), 0.23 the cache itself."""
    from vllm_kv_strategies.platforms.ascend import facts

    if facts.binds_per_virtual_engine():
        return bound[0] if isinstance(bound, list) and len(bound) == 1 else None
    return bound


def bound_cache(bound: Any, stock_bound: Any, stock_cache: Any) -> Any:
    """The cache a module holds in the form stock bound it (``stock_bound``, holding
    ``stock_cache``); None where the forms differ (a list of one per virtual engine or not)."""
    wrapped = isinstance(stock_bound, list) and len(stock_bound) == 1 and stock_bound[0] is stock_cache
    assert wrapped or stock_bound is stock_cache, "stock bound neither the cache nor [cache]"
    if wrapped:
        return bound[0] if isinstance(bound, list) and len(bound) == 1 else None
    return bound


def unbound_layers(runner, kv_caches: dict) -> tuple[str, ...]:
    """Layers whose cache the model cannot reach: not bound to the layer's module as vLLM
    binds it (:func:`vllm_bound`), or (by identity) missing from ``runner.kv_caches``."""
    listed = {id(cache) for cache in runner.kv_caches}
    modules = runner.compilation_config.static_forward_context
    return tuple(
        sorted(
            name for name, cache in kv_caches.items()
            if id(cache) not in listed or vllm_bound(getattr(modules.get(name), "kv_cache", None)) is not cache
        )
    )


def run(init, runner, config) -> Built:
    try:
        kv = init(runner, config)
    except Exception as exc:  # recorded: the verdict decides whether it is allowed
        return Built(None, exc)
    return Built(kv, None, unbound_layers(runner, kv))
