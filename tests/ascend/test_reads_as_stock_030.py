"""vllm-ascend 0.30: the plugin's replacements read their inputs as the functions they replace do.

V2's ``_allocate_kv_cache`` / ``_reshape_kv_cache_v2`` look up ``get_current_vllm_config`` (and
the probes ``enable_sfa``, ``get_layers_from_vllm_config``, ...) as globals of their module,
``vllm_ascend.worker.v2.attn_utils``; vllm-ascend's own unit tests rebind those globals instead of
entering ``set_current_vllm_config``. The plugin asks the same globals
(``PatchTarget.binding``), so it plans the same config stock builds. The V1 runner's build of a
config with no layer is stock's, and stock's xlite flag is asked in stock's order.
"""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace

import factory_030_v2 as f2
import kv_compare as kc
import pytest
import runner_factory as rf
import stock_cases_030 as cases

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's forms only")


def _main_through_module_binding(runner, kv_cache_config, monkeypatch):
    """``allocate_kv_cache_main`` with no current config set, ``attn_utils.get_current_vllm_config``
    rebound to answer the runner's (as vllm-ascend's tests/ut/worker/test_attn_utils_v2.py does)."""
    monkeypatch.setattr(f2.attn_utils(), "get_current_vllm_config", lambda: runner.vllm_config)
    config = copy.deepcopy(kv_cache_config)
    kernel = rf.kernel_block_sizes(runner, config)
    return f2.attn_utils().allocate_kv_cache_main(config, runner.device, None, kernel)


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_v2_plans_the_config_its_module_answers(mode, monkeypatch, kv_log):
    from vllm.config import get_current_vllm_config_or_none

    monkeypatch.setenv("KV_STRATEGIES", mode)
    mk = cases.dense()
    stock = f2.stock_v2(mk)
    assert get_current_vllm_config_or_none() is None  # vLLM's own global stays unset below
    with f2.plugin_patched():
        ours = _main_through_module_binding(f2.v2_runner(mk), mk.kv_cache_config, monkeypatch)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    assert not kv_log.at(logging.WARNING)
    [line] = [m for m in kv_log.at(logging.INFO) if ": built " in m]
    assert line.startswith(f"kv_strategies: rank 0: built {len(mk.specs)} layers")


def test_v2_probes_are_the_modules_globals(monkeypatch):
    """A probe rebound in V2's module (sparse attention forced on) changes the plugin's form as
    it changes stock's: plain full attention takes separate K and V."""
    from vllm_kv_strategies.platforms.ascend import v2_layout

    mk = cases.dense()
    runner = f2.v2_runner(mk)
    assert v2_layout.combined_kv_layers(runner.vllm_config, mk.kv_cache_config) == frozenset(mk.specs)
    monkeypatch.setattr(f2.attn_utils(), "enable_sfa", lambda config: True)
    assert v2_layout.combined_kv_layers(runner.vllm_config, mk.kv_cache_config) == frozenset()


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_v1_config_with_no_layer_is_stocks(mode, monkeypatch, kv_log):
    """An empty config (vllm-ascend's TestC8MXFPVScaleCacheFill hands a MagicMock, whose groups
    iterate empty): the plugin plans nothing, allocates nothing, and stock's build runs."""
    from unittest.mock import MagicMock

    from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter

    monkeypatch.setenv("KV_STRATEGIES", mode)
    runner = SimpleNamespace()  # no device, no compilation_config: the plugin must not ask them
    assert AscendAdapter()._decide(runner, MagicMock()) is None
    assert not kv_log.at(logging.WARNING)


def test_xlite_is_asked_only_where_stock_asks_it():
    """Stock 0.30 reads ``xlite_graph_config.enabled`` only without DCP, sparse, compressed or
    offloaded caches; with sparse attention it changes no layout, and the plugin does not refuse."""
    from vllm_kv_strategies.platforms.ascend import strided

    mk = cases.dense()
    xlite = SimpleNamespace(xlite_graph_config=SimpleNamespace(enabled=True))
    plain = SimpleNamespace(ascend_config=xlite, model_config=None)
    assert "xlite graphs" in strided.strided_layout_gap(plain, mk.kv_cache_config, mk.specs)
    sparse = SimpleNamespace(ascend_config=xlite, model_config=None, use_sparse=True)
    assert strided.strided_layout_gap(sparse, mk.kv_cache_config, mk.specs) is None
