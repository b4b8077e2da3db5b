"""``python -m vllm_kv_strategies report`` where a new user tripped (issue 22, item 6), on real
report files (tests/unit/test_report.py's ``reports``): the parent of report directories, too
many paths, an empty file, a report directory that is a file, a directory observed on purpose,
and schema 2 files read in schema 3's terms."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from test_report import reports, run_cli  # noqa: F401  (the module-scoped real reports)

from vllm_kv_strategies import report as report_mod


def test_the_parent_of_report_directories_names_them(reports, tmp_path):
    for name in ("stock", "plugin"):
        shutil.copytree(reports[name].parent, tmp_path / name)
    (tmp_path / "empty").mkdir()
    shown = run_cli(tmp_path)
    assert (shown.returncode, shown.stdout) == (2, "")
    assert shown.stderr == (
        f"error: {tmp_path}: no KV cache report in this directory; its subdirectories plugin, stock hold reports: "
        f"name one (report {tmp_path / 'plugin'}) or two to compare (report {tmp_path / 'plugin'} {tmp_path / 'stock'})\n")


def test_three_paths_get_the_report_usage_and_what_is_wrong(reports):
    shown = run_cli(reports["stock"], reports["plugin"], reports["stock"])
    assert (shown.returncode, shown.stdout) == (2, "")
    usage, error = shown.stderr.strip().splitlines()[0], shown.stderr.strip().splitlines()[-1]
    assert usage.startswith("usage: vllm-kv-strategies report [-h]")
    assert error == ("vllm-kv-strategies report: error: 3 paths given: report takes one FILE or DIR, "
                     "or two reports A B to compare")


def test_an_empty_file_is_called_empty(tmp_path):
    path = tmp_path / "kv_cache_report.latest.rank0.json"
    path.write_text("")
    for target in (path, tmp_path):
        shown = run_cli(target)
        assert (shown.returncode, shown.stderr) == (2, f"error: {path}: an empty file, not a KV cache report "
                                                       "(a worker writing it right now, or a failed write)\n")


def test_a_report_directory_that_is_a_file_is_named_so(reports, tmp_path, monkeypatch, kv_log):
    data = json.loads(reports["plugin"].read_text())
    target = tmp_path / "reports"
    target.write_text("not a directory")
    with pytest.raises(NotADirectoryError, match=f"^{target} is a file, not a directory: KV_STRATEGIES_REPORT names"):
        report_mod.write_report(data, str(target))
    assert target.read_text() == "not a directory"


def test_a_directory_observed_on_purpose_is_not_flagged(reports, tmp_path):
    stock = json.loads(reports["stock"].read_text())
    assert stock["built_by"] == "stock_observed"
    for rank in (0, 1):
        report_mod.write_report({**stock, "totals": {**stock["totals"], "rank": rank}, "world_size": 2, "run_id": "r"},
                                str(tmp_path))
    shown = run_cli(tmp_path)
    assert shown.returncode == 0, shown.stdout
    lines = shown.stdout.splitlines()
    assert "every rank observed (KV_STRATEGIES=observe): stock built each KV cache, the plugin described it" in lines
    assert "flagged:" not in lines


@pytest.mark.parametrize(("built_by", "mode", "runner", "now"), [
    ("plugin", "on", "GPUModelRunner (V1)", "vllm_checked"),  # schema 2 said the plugin built what vLLM built
    ("plugin", "on", "NPUModelRunner", "plugin"),
    ("stock", "observe", "GPUModelRunner (V2)", "stock_observed"),
    ("stock", "auto", "GPUModelRunner (V1)", "stock_fallback"),
])
def test_schema_2_files_are_read_in_schema_3_terms(reports, tmp_path, built_by, mode, runner, now):
    data = json.loads(reports["plugin"].read_text())
    t = data["totals"]
    v2 = {**{k: v for k, v in data.items() if k != "fallback_reason"}, "schema_version": 2, "built_by": built_by,
          "mode": mode, "runner": runner,
          "totals": {**{k: v for k, v in t.items() if k not in ("unused_bytes", "token_slots", "max_concurrency", "max_model_len")},
                     "tokens": t["token_slots"]}}
    path = tmp_path / "kv_cache_report.latest.rank0.json"
    path.write_text(json.dumps(v2))
    read = report_mod.load(path)
    assert (read["schema_version"], read["built_by"], read["fallback_reason"]) == (2, now, None)
    assert (read["totals"]["token_slots"], read["totals"]["tokens"], read["totals"]["unused_bytes"]) == (t["token_slots"], None, None)
    shown = run_cli(path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"KV cache report (schema 2): {path}, built by ")


def test_a_failed_write_is_one_warning(reports, tmp_path, monkeypatch, kv_log):
    target = tmp_path / "reports"
    target.write_text("")
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(target))
    from test_report import stock_caches
    from test_upstream_adapter import dense

    config, kv = stock_caches(dense(n=2))
    assert report_mod.log_summary(None, kv, kv_cache_config=config, mode="observe") is not None
    assert kv_log.at(logging.WARNING) == [
        f"kv_strategies: could not write the report to {target}: {target} is a file, not a directory: "
        "KV_STRATEGIES_REPORT names the directory the reports go to"]


def test_plot_without_matplotlib_is_one_line(reports, tmp_path, monkeypatch, capsys):
    """``report --plot`` where matplotlib is not installed (an import of it raises ImportError): one
    line naming the extra, exit 2, nothing written; checked before any report is read."""
    import sys

    from vllm_kv_strategies.__main__ import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "map.png"
    for paths in ([reports["stock"]], [reports["stock"], reports["plugin"]], [tmp_path / "missing.json"]):
        assert main(["report", *map(str, paths), "--plot", str(png)]) == 2
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", "error: --plot needs matplotlib, which is not installed here (pip "
                                                    "install 'vllm-kv-strategies[plot]', or pip install matplotlib); "
                                                    "everything else needs nothing more\n")
    assert not png.exists()


def test_plot_to_an_unwritable_path_or_of_a_plan_is_one_line(reports, tmp_path):
    target = tmp_path / "no-such-dir" / "map.png"
    shown = run_cli(reports["stock"], "--plot", target)
    assert (shown.returncode, shown.stdout, shown.stderr) == (2, "", f"error: --plot {target}: cannot write a file there\n")
    shown = run_cli(reports["stock"], "--plot", tmp_path)
    assert (shown.returncode, shown.stdout, shown.stderr) == (2, "", f"error: --plot {tmp_path}: cannot write a file there\n")


@pytest.mark.parametrize("args", [["--budget", "100"], ["--budget", "0", "--plot", "map.png"],
                                  ["--budget", "-5", "--plot", "map.png"]])
def test_a_budget_is_a_positive_number_of_bytes_with_plot(reports, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    shown = run_cli(reports["stock"], *args)
    assert (shown.returncode, shown.stdout) == (2, "")
    assert shown.stderr == f"error: --budget {args[1]}: a positive number of bytes, with --plot\n"
    assert not (tmp_path / "map.png").exists()
