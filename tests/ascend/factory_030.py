"""Helpers for the hand-built configs of test modules that run on every release: a
``KVCacheTensor`` in the installed vLLM's form, and stock against the plugin on one config
(separate runners, as stock's ``initialize_kv_cache`` would call each)."""

from __future__ import annotations

from typing import Any

import runner_factory as rf
from vllm.v1.kv_cache_interface import KVCacheTensor

import kv_compare

#: vLLM 0.30's strided ``KVCacheTensor`` (``layers``, ``layer_stride``, ``block_stride``,
#: ``offset``; no ``shared_by``).
STRIDED = rf.RELEASE >= (0, 30)


def kvt(size: int, layers: list[str], num_blocks: int) -> KVCacheTensor:
    """A tensor of ``size`` bytes for ``layers``: ``shared_by`` up to 0.23 (every layer
    aliases the whole ``size``); from 0.30 the strided form vLLM's planner writes for a
    layer-outermost layout (each layer a contiguous ``size`` region of ``num_blocks`` pages,
    ``size`` the whole backing)."""
    if not STRIDED:
        return KVCacheTensor(size=size, shared_by=list(layers))
    return KVCacheTensor(
        size=size * len(layers), layers=list(layers), layer_stride=size, block_stride=size // num_blocks, offset=0
    )


def stock_and_plugin(config: Any, **runner_kw: Any) -> tuple[Any, dict, Any, dict]:
    """(stock's runner, stock's caches, the plugin's runner, the plugin's caches), each built
    on a runner of its own with the arguments the release's ``initialize_kv_cache`` passes."""
    stock_runner = rf.make_runner(config, **runner_kw)
    stock = kv_compare.stock_init(stock_runner, config)
    plugin_runner = rf.make_runner(config, **runner_kw)
    return stock_runner, stock, plugin_runner, kv_compare.plugin_init(plugin_runner, config)
