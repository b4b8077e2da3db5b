"""Who built it, on vllm-ascend (issue 22, item 2): the plugin's layout code allocates the KV
cache of ``NPUModelRunner`` (``built_by: plugin``), stock builds it in observe mode
(``stock_observed``) and when the plugin falls back (``stock_fallback``, with the reason), on
every Ascend cell, through the real adapter and stock method of the installed release."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import runner_factory as rf

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.report import render, schema


def unclassified(config):
    """``config`` with every group's spec a subclass no strategy lists (as a new release's class)."""
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        cls = dataclasses.make_dataclass("UnclassifiedSpec", [("extra", int, dataclasses.field(default=0))],
                                         bases=(type(spec),), frozen=True)
        group.kv_cache_spec = cls(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})
    return config


def build(monkeypatch, tmp_path, mode: str, unclassified_specs: bool = False) -> dict:
    model = rf.qwen3_8b(tp=4)  # 36 full attention layers
    runner = model.make_runner()
    monkeypatch.setenv("KV_STRATEGIES", mode)
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    config = copy.deepcopy(model.kv_cache_config)
    if unclassified_specs:
        config = unclassified(config)
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    AscendAdapter().initialize_kv_cache_tensors(stock, runner, config, **rf.stock_kwargs(runner, config))
    data = json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text())
    schema.validate(data)
    return data


def test_the_plugin_built_it(monkeypatch, tmp_path, kv_log):
    data = build(monkeypatch, tmp_path, "on")
    assert (data["built_by"], data["fallback_reason"], data["runner"]) == ("plugin", None, "NPUModelRunner")
    assert kv_log.summary().startswith("kv_strategies: rank 0: built 36 layers (full_attention=36) in ")
    assert "built by the plugin (KV_STRATEGIES=on)" in render.describe(data, "r")


def test_observe_says_stock_vllm_ascend_built_it(monkeypatch, tmp_path, kv_log):
    data = build(monkeypatch, tmp_path, "observe")
    assert (data["built_by"], data["fallback_reason"], data["totals"]["layers_per_strategy"]) == ("stock_observed", None, {})
    assert kv_log.summary().startswith("kv_strategies: rank 0: stock built 36 layers (full_attention=36) in ")
    assert "built by stock vllm-ascend (observed; KV_STRATEGIES=observe)" in render.describe(data, "r")


def test_a_fallback_says_stock_built_it_and_why(monkeypatch, tmp_path, kv_log):
    data = build(monkeypatch, tmp_path, "auto", unclassified_specs=True)
    assert data["built_by"] == "stock_fallback"
    assert "UnclassifiedSpec" in data["fallback_reason"] and "model.layers.0." in data["fallback_reason"]
    line = kv_log.summary()  # the kind: vLLM's (0.23+) or the class name (unclassified) before
    assert re.match(r"kv_strategies: rank 0: stock built 36 layers \((full_attention|unclassified)=36\) in ", line), line
    assert line.endswith(f"; the plugin fell back to stock: {data['fallback_reason']}")
    assert f"built by stock vllm-ascend (the plugin fell back: {data['fallback_reason']}; KV_STRATEGIES=auto)" in render.describe(data, "r")
