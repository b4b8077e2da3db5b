"""``tools/demo.py --compare`` without serving: the arguments, one model for both runs, the modes,
the reports kept where it says. The serving itself: ``bash tools/demo.sh --compare`` (measured in
CHANGELOG.md) and tests/e2e/test_memory_map_e2e.py (the same two runs, drawn)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import demo  # noqa: E402


@pytest.fixture
def runs(monkeypatch):
    """Each serve_once call as (model_dir, name, env updates); show_reports' directories and picture."""
    calls: dict[str, list] = {"serve": [], "show": []}

    def serve_once(args, model_dir, name, env_updates, own_model, allow_no_plugin=None):
        calls["serve"].append((model_dir, name, dict(env_updates), own_model))
        Path(env_updates["KV_STRATEGIES_REPORT"]).mkdir(parents=True, exist_ok=True)
        return 0

    monkeypatch.setattr(demo, "serve_once", serve_once)
    monkeypatch.setattr(demo, "show_reports", lambda dirs, plot=None: calls["show"].append((dirs, plot)) or 0)
    monkeypatch.delenv("KV_STRATEGIES", raising=False)
    monkeypatch.delenv("KV_STRATEGIES_REPORT", raising=False)
    return calls


def test_compare_serves_one_built_model_stock_then_with_the_plugin(runs, monkeypatch, tmp_path):
    """One tiny model built (not two: report refuses two different models), served observed then in
    auto; the reports go to two directories under one kept base, and the picture beside them."""
    built = []
    fake = types.ModuleType("tiny_models")
    fake.build = lambda kind, out: built.append((kind, out)) or (Path(out) / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tiny_models", fake)
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path / "reports"))
    assert demo.main(["--compare"]) == 0
    assert len(built) == 1 and built[0][0] == "llama"
    model = built[0][1]
    assert [(m, n, e["KV_STRATEGIES"], own) for m, n, e, own in runs["serve"]] == [
        (model, "tiny-llama", "observe", True), (model, "tiny-llama", "auto", True)]
    stock, plugin = (Path(e["KV_STRATEGIES_REPORT"]) for _, _, e, _ in runs["serve"])
    assert (stock, plugin) == (tmp_path / "reports" / "stock", tmp_path / "reports" / "plugin")
    assert runs["show"] == [([stock, plugin], tmp_path / "reports" / "memory-maps.png")]
    assert not Path(model).exists()  # the built model is removed after (--keep-model keeps it)


def test_compare_uses_the_model_dir_given_and_on_when_asked(runs, monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("KV_STRATEGIES", "on")
    assert demo.main(["--compare", "--model-dir", str(tmp_path)]) == 0
    assert [(m, e["KV_STRATEGIES"], own) for m, _, e, own in runs["serve"]] == [
        (str(tmp_path), "observe", False), (str(tmp_path), "on", False)]
    assert tmp_path.exists()


def test_compare_stops_at_the_first_failed_run(runs, monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(demo, "serve_once", lambda *a, **k: runs["serve"].append(a) or 2)
    assert demo.main(["--compare", "--model-dir", str(tmp_path)]) == 2
    assert len(runs["serve"]) == 1 and runs["show"] == []


def test_a_model_dir_without_config_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--compare", "--model-dir", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"demo.py: error: --model-dir {tmp_path}: no config.json there"


def test_show_reports_says_where_both_are_and_what_is_missing(tmp_path, capsys):
    assert demo.show_reports([tmp_path / "stock", tmp_path / "plugin"], tmp_path / "maps.png") == 1
    assert capsys.readouterr().out == (f"no KV cache report at {tmp_path}/stock/kv_cache_report.latest.rank0.json, "
                                       f"{tmp_path}/plugin/kv_cache_report.latest.rank0.json\n")
