"""The switch's policy when planning fails (``RunnerAdapter.plan_or_fallback``): what the plugin
reads beyond what the replaced function reads never stops what stock would build.

* an input (runner, config, spec: an object not of this package) lacking an attribute the plugin
  reads: stock builds in every mode, ``on`` included, with one warning naming the object and the
  attribute (vllm-ascend's own unit tests hand runners without ``compilation_config`` or
  ``device`` to code that never reads them);
* a config with no layer to build: stock's, silently, in every mode;
* an attribute missing on the plugin's own objects is a bug of the plugin: raised in ``on``.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from vllm_kv_strategies.errors import NothingToBuildError, StockWouldFailError, missing_input
from vllm_kv_strategies.logger import reset_warn_once
from vllm_kv_strategies.platforms.adapter import RunnerAdapter


@pytest.fixture(autouse=True)
def _fresh_warnings():
    reset_warn_once()


def _read(obj, name):
    return getattr(obj, name)


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_an_input_missing_what_only_the_plugin_reads_leaves_stock_in_every_mode(mode, monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", mode)
    runner = SimpleNamespace(kv_caches=[])
    adapter = RunnerAdapter()
    assert adapter.plan_or_fallback(lambda: _read(runner, "compilation_config")) is None
    reason = "its input has no SimpleNamespace 'compilation_config' (which the replaced function does not read)"
    assert adapter.fallback_reason == reason
    assert kv_log.at(logging.WARNING) == [f"kv_strategies: falling back to stock KV cache for all layers: {reason}"]


def test_a_missing_attribute_of_the_plugins_own_objects_raises_in_on(monkeypatch):
    from vllm_kv_strategies.core.plan import KVCachePlan

    monkeypatch.setenv("KV_STRATEGIES", "on")
    plan = object.__new__(KVCachePlan)
    with pytest.raises(AttributeError, match="no_such_field"):
        RunnerAdapter().plan_or_fallback(lambda: _read(plan, "no_such_field"))


def test_missing_input_names_the_input_and_nothing_else():
    with pytest.raises(AttributeError) as caught:
        _read(SimpleNamespace(), "device")
    assert missing_input(caught.value) == "SimpleNamespace 'device' (which the replaced function does not read)"
    assert missing_input(ValueError("device")) is None
    with pytest.raises(AttributeError) as on_none:
        _read(None, "xlite_graph_config")  # a default of the plugin's own (getattr(..., None)), not an input
    assert missing_input(on_none.value) is None
    assert missing_input(AttributeError("no object, no name")) is None


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_nothing_to_build_is_stocks_silently(mode, monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", mode)

    def plan():
        raise NothingToBuildError("the KV cache config names no layer")

    adapter = RunnerAdapter()
    assert adapter.plan_or_fallback(plan) is None
    assert adapter.fallback_reason is None
    assert not [r for r in kv_log.records if r.levelno >= logging.WARNING]


def test_stock_would_fail_still_raises_in_auto(monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES", "auto")

    def plan():
        raise StockWouldFailError("stock corrupts this cache too")

    with pytest.raises(StockWouldFailError):
        RunnerAdapter().plan_or_fallback(plan)
