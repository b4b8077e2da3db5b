"""The KV cache report: summary line, JSON file per rank (schema 2, validated
with jsonschema against the shipped schema), and the CLI on real report files
written by the real writer from real CPU tensors built by vLLM's stock method
and by the plugin on configs from vLLM's own planner."""

from __future__ import annotations

import copy
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch
from test_upstream_adapter import BF16, dense, make_config, make_runner, run_both
from upstream_harness import through_adapter
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor, MambaSpec, SlidingWindowSpec

from vllm_kv_strategies import patching
from vllm_kv_strategies import report as report_mod
from vllm_kv_strategies.report.parallel import ParallelRanks
from vllm_kv_strategies.core.plan import plan_kv_cache
from vllm_kv_strategies.report import render, schema, write

STAMPED = re.compile(r"^kv_cache_report\.\d{8}T\d{6}Z\.\d+(-\d+)?\.rank(\d+)\.json$")


def validate(data: dict) -> None:
    jsonschema.Draft202012Validator.check_schema(schema.schema())
    jsonschema.validate(data, schema.schema(), cls=jsonschema.Draft202012Validator)


def stamped(directory: Path, rank: int = 0) -> list[Path]:
    return sorted(p for p in directory.iterdir() if (m := STAMPED.match(p.name)) and int(m[2]) == rank)


def stock_caches(specs: dict):
    """vLLM's stock build (V1's ``initialize_kv_cache_tensors``, V2's ``init_kv_cache`` where
    the release has no V1) on a planner-made config: (config, kv_caches)."""
    vllm_config, config = make_config(specs, "LBHNC", 1 << 22)
    return config, through_adapter(make_runner(vllm_config, list(specs)), copy.deepcopy(config), plugin=False)


def test_json_report_written_with_exact_totals_and_specs(monkeypatch, tmp_path, kv_log):
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    monkeypatch.setenv("KV_STRATEGIES_RUN_ID", "run-a")
    config, _, (_, kv) = run_both(dense(n=3))
    [path] = stamped(tmp_path)
    data = json.loads(path.read_text())
    validate(data)
    assert json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text()) == data
    assert data["schema_version"] == report_mod.SCHEMA_VERSION == 3
    assert (data["mode"], data["built_by"], data["run_id"], data["world_size"]) == ("auto", "vllm_checked", "run-a", 1)
    assert data["versions"]["vllm"] == report_mod.write.Versions.detect().vllm
    assert data["versions"]["torch"] == torch.__version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", data["created"])
    t = data["totals"]
    size = config.kv_cache_tensors[0].size
    assert (t["raw_buffers"], t["bytes_allocated"], t["bytes_required"]) == (1, size, size)
    assert (t["alignment_padding"], t["unused_bytes"], t["duplicated_bytes"]) == (0, 0, 0)
    assert t["num_blocks"] == config.num_blocks and t["token_slots"] == config.num_blocks * 16
    assert t["tokens"] is None  # the harness's model config has no max_model_len: vLLM's capacity not known
    assert t["layers_per_strategy"] == {"full_attention": 3}
    assert t["layers_per_kind"] == {"full_attention": 3}
    [group] = data["kv_cache"]["groups"]
    assert group["specs"] == [{
        "type": "FullAttentionSpec", "kind": "full_attention", "block_size": 16, "page_size_bytes": 16 * 2 * 128 * 2,
        "dtype": "bfloat16", "sliding_window": None, "attention_chunk_size": None, "num_kv_heads": 2, "head_size": 64,
        "layers": sorted(kv),
    }]
    assert data["kv_cache"]["tensors"] == [{"size": size, "layers": sorted(kv)}]
    layer = data["layers"]["model.layers.1.self_attn.attn"]
    assert (layer["strategy"], layer["spec_type"], layer["kind"], layer["group"]) == ("full_attention", "FullAttentionSpec", "full_attention", 0)
    assert [p["name"] for p in layer["page_parts"]] == ["k", "v"]
    assert layer["page_parts"][0]["bytes_per_block"] == 16 * 2 * 64 * 2
    [view] = layer["views"]
    assert view["shape"] == [config.num_blocks, 2, 16, 128] and view["dtype"] == "bfloat16"
    assert layer["aliases"] == []  # one backing buffer, but each layer owns its bytes
    assert data["buffers"] == [{"id": 0, "bytes": size, "layers": sorted(kv)}]
    summary_lines = [m for m in kv_log.at(logging.INFO) if m.startswith("kv_strategies: rank 0: vLLM built")]
    assert summary_lines == [
        f"kv_strategies: rank 0: vLLM built and the plugin checked 3 layers (full_attention=3) in 1 raw buffer; "
        f"{size:,} bytes allocated ({size / 2**30:.3f} GiB; required {size:,}, alignment padding 0, unused 0, duplicated 0); "
        f"num_blocks {config.num_blocks:,} ({config.num_blocks * 16:,} token slots)"
    ]
    assert f"kv_strategies: rank 0: report written to {path}" in kv_log.at(logging.INFO)


def test_a_second_run_does_not_overwrite_the_first(monkeypatch, tmp_path):
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    run_both(dense(n=2))
    run_both(dense(n=3))  # same process, most likely the same second: "-2" after the pid
    first, second = sorted(stamped(tmp_path), key=lambda p: json.loads(p.read_text())["created"])
    assert json.loads(first.read_text())["totals"]["layers_per_strategy"] == {"full_attention": 2}
    assert json.loads(second.read_text())["totals"]["layers_per_strategy"] == {"full_attention": 3}
    assert json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text()) == json.loads(second.read_text())
    assert sorted(p.name for p in tmp_path.iterdir() if not STAMPED.match(p.name)) == ["kv_cache_report.latest.rank0.json"]


def test_padding_and_duplicates_are_measured_from_the_tensors():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)  # 4096 B/block
    names = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    config = KVCacheConfig(
        num_blocks=4,
        kv_cache_tensors=[KVCacheTensor(size=16384, layers=names, layer_stride=16384, block_stride=4096)],
        kv_cache_groups=[KVCacheGroupSpec(names, spec)],
    )
    plan = plan_kv_cache(config)
    # One buffer per layer (the fault stock vllm-ascend 0.11 had), each with 1 KiB unused before its view.
    own = {n: torch.zeros(16384 + 1024, dtype=torch.int8)[1024:].view(torch.bfloat16).view(4, 16, 1, 128) for n in names}
    t = report_mod.build_report(plan, own, strided=True, place=ParallelRanks(3, 4, 0, 1, 0, 1, 3, 4))["totals"]
    assert (t["rank"], t["raw_buffers"], t["bytes_allocated"], t["bytes_required"]) == (3, 2, 34816, 16384)
    assert (t["alignment_padding"], t["unused_bytes"], t["duplicated_bytes"]) == (0, 2048, 16384)


def test_observe_reports_stock_without_a_plan(monkeypatch, tmp_path, kv_log):
    """What the adapters call in KV_STRATEGIES=observe: stock built, no plan."""
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    config, kv = stock_caches(dense(n=4))
    summary = report_mod.log_summary(None, kv, kv_cache_config=config, mode="observe", model="tiny", runner="GPUModelRunner (V1)")
    size = config.kv_cache_tensors[0].size
    assert kv_log.at(logging.INFO)[0] == summary.line("stock_observed")
    assert summary.line("stock_observed").startswith("kv_strategies: rank 0: stock built 4 layers (full_attention=4) in 1 raw buffer; ")
    data = json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text())
    validate(data)
    assert (data["built_by"], data["mode"], data["model"], data["runner"]) == ("stock_observed", "observe", "tiny", "GPUModelRunner (V1)")
    assert data["totals"]["layers_per_strategy"] == {}
    assert data["totals"]["layers_per_kind"] == {"full_attention": 4}
    assert (data["totals"]["bytes_allocated"], data["totals"]["bytes_required"]) == (size, size)
    for entry in data["layers"].values():
        assert (entry["strategy"], entry["page_parts"], entry["kind"], entry["group"]) == (None, [], "full_attention", 0)


def test_summary_and_report_name_sliding_window_layers(monkeypatch, tmp_path, kv_log):
    full = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, sliding_window=128)
    specs = {f"model.layers.{i}.self_attn.attn": (swa if i % 3 else full) for i in range(6)}
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    run_both(specs)
    [line] = [m for m in kv_log.at(logging.INFO) if "built" in m]
    assert "checked 6 layers (full_attention=2, sliding_window=4; strategies full_attention=6)" in line
    data = json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text())
    windows = {}
    for spec in (s for g in data["kv_cache"]["groups"] for s in g["specs"]):
        windows.setdefault((spec["kind"], spec["sliding_window"]), []).extend(spec["layers"])
    assert {k: len(v) for k, v in windows.items()} == {("full_attention", None): 2, ("sliding_window", 128): 4}
    # A sliding layer stored as full attention (vLLM without the hybrid allocator) is named too.
    assert report_mod.spec_kind(FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, sliding_window=512)) == "full_attention/sliding_window"


def test_mamba_states_are_described(monkeypatch, tmp_path):
    mamba = MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, torch.float32))
    attn = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    specs = {f"model.layers.{i}.linear_attn": mamba for i in (0, 1, 2, 4, 5, 6)}
    specs |= {f"model.layers.{i}.self_attn.attn": attn for i in (3, 7)}
    config, kv = stock_caches(specs)
    data = report_mod.build_report(None, kv, kv_cache_config=config, mode="observe")
    validate(data)
    assert data["totals"]["layers_per_kind"] == {"full_attention": 2, "mamba": 6}
    mamba_specs = [s for g in data["kv_cache"]["groups"] for s in g["specs"] if s["kind"] == "mamba"]
    assert {(s["dtype"], str(s["state_shapes"]), str(s["state_dtypes"])) for s in mamba_specs} == {
        (None, "[[3, 256], [2, 64, 64]]", "['bfloat16', 'float32']")}


def test_aliases_are_layers_sharing_bytes_across_groups(monkeypatch, tmp_path):
    mamba = MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, torch.float32))
    attn = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    specs = {f"model.layers.{i}.linear_attn": mamba for i in (0, 1, 2, 4, 5, 6)}
    specs |= {f"model.layers.{i}.self_attn.attn": attn for i in (3, 7)}
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    run_both(specs)
    data = json.loads((tmp_path / "kv_cache_report.latest.rank0.json").read_text())
    # vLLM overlays the groups: the first layer of every group shares the same bytes.
    assert data["layers"]["model.layers.3.self_attn.attn"]["aliases"] == [
        "model.layers.0.linear_attn", "model.layers.1.linear_attn", "model.layers.2.linear_attn"]
    assert data["layers"]["model.layers.4.linear_attn"]["aliases"] == [
        "model.layers.5.linear_attn", "model.layers.6.linear_attn", "model.layers.7.self_attn.attn"]


def test_a_failure_to_describe_is_logged_not_raised(kv_log):
    assert report_mod.log_summary(None, {}, kv_cache_config=object(), mode="observe") is None
    [warning] = kv_log.at(logging.WARNING)
    assert warning.startswith("kv_strategies: could not describe the KV cache stock built: AttributeError(")


# ---------------------------------------------------------------------------
# The CLI, on files written above
# ---------------------------------------------------------------------------


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """Real reports: stock (observe) and plugin of one config, a 2-layer one, two ranks of a
    deployment, and a schema 1 file as 0.1.0 wrote it."""
    root = tmp_path_factory.mktemp("reports")
    specs = dense(n=4)
    config, stock_kv = stock_caches(specs)
    vllm_config, _ = make_config(specs, "LBHNC", 1 << 22)
    out = {}
    stock = report_mod.build_report(None, stock_kv, kv_cache_config=config, mode="observe", model="tiny-llama")
    plan = plan_kv_cache(config)
    ours_kv = through_adapter(make_runner(vllm_config, list(specs)), copy.deepcopy(config))
    plugin = report_mod.build_report(plan, ours_kv, mode="on", model="tiny-llama", built_by="vllm_checked")
    for name, data in {"stock": stock, "plugin": plugin}.items():
        (root / name).mkdir()
        out[name] = Path(report_mod.write_report(data, str(root / name)))
    config2, kv2 = stock_caches(dense(n=2))
    out["other_model"] = Path(report_mod.write_report(
        report_mod.build_report(plan_kv_cache(config2), kv2, mode="on", model="other"), str(root / "other")))
    # A deployment of two ranks, run "r1"; then a leftover of an earlier run in another directory.
    deploy = root / "deploy"
    for rank in (0, 1):
        place = ParallelRanks(rank, 2, 0, 1, 0, 1, rank, 2)  # tensor parallel 2
        data = report_mod.build_report(plan, ours_kv, mode="on", place=place, model="tiny-llama")
        report_mod.write_report({**data, "run_id": "r1"}, str(deploy))
    out["deploy"] = deploy
    v1 = {k: v for k, v in plugin.items() if k in ("layers", "buffers")}
    v1 |= {"schema_version": 1, "plugin_version": "0.1.0", "vllm": "0.32.0", "vllm_ascend": None,
           "totals": {**{k: plugin["totals"][k] for k in schema._V1_TOTALS if k != "tokens"},
                      "tokens": plugin["totals"]["token_slots"]}}  # schema 1's tokens: num_blocks x block size
    v1["layers"] = {n: {k: v for k, v in e.items() if k != "kind"} for n, e in v1["layers"].items()}
    out["v1"] = root / "kv_cache_report.rank0.json"
    out["v1"].write_text(json.dumps(v1))
    return out


def test_render_one_report(reports):
    shown = run_cli(reports["plugin"])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"KV cache report (schema 3): {reports['plugin']}, built by vLLM, checked by the plugin (KV_STRATEGIES=on), model tiny-llama, vLLM ")
    assert "  group 0: FullAttentionSpec (full_attention), block_size 16, bfloat16, 2 KV heads x 64, page 8,192 bytes: 4 layers" in lines
    assert any(line.startswith("model.layers.1.self_attn.attn") and "full_attention" in line for line in lines)


def test_compare_stock_with_plugin_labels_a_and_b(reports):
    diff = run_cli(reports["stock"], reports["plugin"])
    assert diff.returncode == 0, diff.stderr
    lines = diff.stdout.splitlines()
    assert lines[0].startswith(f"A: {reports['stock']}, built by stock vLLM (observed; KV_STRATEGIES=observe), model tiny-llama")
    assert lines[1].startswith(f"B: {reports['plugin']}, built by vLLM, checked by the plugin (KV_STRATEGIES=on), model tiny-llama")
    stock, plugin = (json.loads(reports[k].read_text())["totals"] for k in ("stock", "plugin"))
    row = next(line for line in lines if line.startswith("bytes_allocated"))
    assert row.split() == ["bytes_allocated", f"{stock['bytes_allocated']:,}", f"{plugin['bytes_allocated']:,}", "+0", "1.000"]
    assert "KV cache specs: equal (1 in 1 groups)" in lines
    assert "per-layer views (shape, stride, dtype): equal on all 4 layers" in lines
    assert "layers by strategy: A -; B full_attention=4" in lines


def test_compare_shows_the_layers_whose_views_differ(reports):
    diff = run_cli(reports["plugin"], reports["other_model"], "--allow-different-models")
    assert diff.returncode == 0, diff.stderr
    lines = diff.stdout.splitlines()
    a, b = (json.loads(reports[k].read_text())["totals"] for k in ("plugin", "other_model"))
    row = next(line for line in lines if line.startswith("num_blocks"))
    assert f"{b['num_blocks'] - a['num_blocks']:+,}" in row
    assert "KV cache specs differ:" in lines
    assert "per-layer views (shape, stride, dtype) differ on 4 of 4 layers:" in lines
    assert "    B: (no such layer)" in lines  # layers 2 and 3 exist in A only


def test_compare_refuses_two_different_models(reports):
    diff = run_cli(reports["plugin"], reports["other_model"])
    assert (diff.returncode, diff.stdout) == (2, "")
    assert diff.stderr == (
        f"error: A ({reports['plugin']}) describes model 'tiny-llama' and B ({reports['other_model']}) model 'other': "
        "refusing to compare two different models (--allow-different-models compares them anyway)\n")


def test_a_directory_of_one_rank_stands_for_its_report(reports):
    diff = run_cli(reports["stock"].parent, reports["plugin"].parent)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines()[0].startswith(f"A: {reports['stock']}, ")  # the stamped file, not the latest copy


def test_report_dir_sums_up_the_deployment(reports):
    shown = run_cli(reports["deploy"])
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    t = json.loads(next(reports["deploy"].glob("kv_cache_report.latest.rank0.json")).read_text())["totals"]
    assert lines[0] == f"KV cache reports in {reports['deploy']}: 2 reports, 2 ranks (each rank's newest report), world size 2"
    rows = [line.split() for line in lines[2:4]]
    assert [r[:10] for r in rows] == [[str(rank), f"0/0/{rank}", "plugin", "on", "4", "1", f"{t['bytes_allocated']:,}", f"{t['bytes_required']:,}",
                                      f"{t['num_blocks']:,}", "-"] for rank in (0, 1)]
    assert lines[4] == (f"deployment (2 ranks): {2 * t['bytes_allocated']:,} bytes allocated ({2 * t['bytes_allocated'] / 2**30:.3f} GiB), "
                        f"{2 * t['bytes_required']:,} required; tokens per rank (vLLM's capacity) - on every rank")
    assert lines[5] == "layouts: the same on every rank"
    assert "flagged:" not in lines


def test_report_dir_flags_missing_stock_and_leftover_ranks(reports, tmp_path):
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    rank0 = next(reports["deploy"].glob("kv_cache_report.2*.rank0.json"))
    (deploy / rank0.name).write_text(rank0.read_text())
    shown = run_cli(deploy)
    assert shown.returncode == 1
    assert shown.stdout.splitlines()[-2:] == ["flagged:", "  rank 1: no report in this directory (world size 2): the "
                                              "plugin did not run there (KV_STRATEGIES=off on that rank's node?) or wrote elsewhere"]
    # Rank 1 left by an earlier observe run, with a 2-layer model's layout.
    stock = json.loads(reports["other_model"].read_text())
    leftover = {**stock, "totals": {**stock["totals"], "rank": 1}, "built_by": "stock_observed", "mode": "observe",
                "run_id": "r0", "world_size": 2, "model": "tiny-llama", "created": "2020-01-01T00:00:00.000000Z"}
    (deploy / "kv_cache_report.20200101T000000Z.1.rank1.json").write_text(json.dumps(leftover))
    shown = run_cli(deploy)
    assert shown.returncode == 1
    lines = shown.stdout.splitlines()
    assert any(line.startswith("ranks whose layouts differ: layout ") for line in lines)
    flagged = lines[lines.index("flagged:") + 1:]
    assert flagged == [
        "  rank 1: the plugin neither built nor checked this KV cache (stock vLLM (observed; KV_STRATEGIES=observe))",
        "  ranks from different runs (a rank's newest report may be left from an earlier run; set KV_STRATEGIES_RUN_ID "
        "alike on every node of one deployment): run r1: rank 0; run r0: rank 1",
    ]


def test_schema_1_files_are_read(reports):
    shown = run_cli(reports["v1"])
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert first.startswith(f"KV cache report (schema 1): {reports['v1']}, built by vLLM, checked by the plugin (mode not recorded), model not recorded, vLLM 0.32.0, plugin 0.1.0, rank 0, written ")
    assert first.endswith(" (file time; schema 1)")
    diff = run_cli(reports["v1"], reports["plugin"])
    assert diff.returncode == 0, diff.stderr
    assert "per-layer views (shape, stride, dtype): equal on all 4 layers" in diff.stdout.splitlines()


def broken(tmp_path: Path, reports, change) -> Path:
    data = json.loads(reports["plugin"].read_text())
    change(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("totals"), "missing key 'totals'"),
        (lambda d: d["totals"].pop("token_slots"), "missing key 'token_slots' at $.totals"),
        (lambda d: next(iter(d["layers"].values())).pop("views"), "missing key 'views' at $.layers['model.layers.0.self_attn.attn']"),
        (lambda d: d["totals"].update(bytes_allocated="many"), "'many' is not of type 'integer' at $.totals.bytes_allocated"),
        (lambda d: d.update(schema_version=4), "written with report schema 4, newer than this vllm-kv-strategies 0.1.0 reads (schemas 1-3): upgrade the plugin to read it"),
        (lambda d: d.pop("schema_version"), "not a KV cache report (no 'schema_version' key; KV_STRATEGIES_REPORT writes one)"),
        (lambda d: d.update(schema_version="2"), "not a KV cache report (schema_version '2')"),
    ],
    ids=["totals", "totals.token_slots", "views", "type", "newer", "no-version", "version-type"],
)
def test_a_broken_file_gives_one_line_and_exit_2(reports, tmp_path, change, message):
    path = broken(tmp_path, reports, change)
    shown = run_cli(path)
    assert (shown.returncode, shown.stdout, shown.stderr) == (2, "", f"error: {path}: {message}\n")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "not a KV cache report (a JSON list, not an object)"),
        ('{"name": "a config"}', "not a KV cache report (no 'schema_version' key; KV_STRATEGIES_REPORT writes one)"),
        ("kv_strategies: rank 0: built", "not a KV cache report (not JSON: Expecting value: line 1 column 1 (char 0))"),
    ],
)
def test_a_file_that_is_not_a_report(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_text(content)
    shown = run_cli(path)
    assert (shown.returncode, shown.stderr) == (2, f"error: {path}: {message}\n")


def test_missing_file_and_empty_directory(tmp_path):
    shown = run_cli(tmp_path / "missing.json")
    assert (shown.returncode, shown.stderr) == (2, f"error: {tmp_path / 'missing.json'}: cannot read it (No such file or directory)\n")
    shown = run_cli(tmp_path)
    assert (shown.returncode, shown.stderr) == (2, (
        f"error: {tmp_path}: no KV cache report in this directory (files kv_cache_report.*.json, "
        f"written by vLLM workers with KV_STRATEGIES_REPORT={tmp_path})\n"))


def test_a_malformed_parallel_key_is_one_line(reports, tmp_path):
    """The reader needs jsonschema (a dependency): a report whose ``parallel`` lacks a key or has the
    wrong type is refused in one line, never a traceback in the renderer."""
    data = json.loads(reports["plugin"].read_text())
    for value, message in (("0/0/0", r"'0/0/0' is not of type 'object' at \$\.parallel"),
                           ({**data["parallel"], "tensor_parallel_rank": None}, r"None is not of type 'integer'"),
                           ({k: v for k, v in data["parallel"].items() if k != "tensor_parallel_rank"},
                            r"missing key 'tensor_parallel_rank' at \$\.parallel")):
        path = tmp_path / "kv_cache_report.latest.rank0.json"
        path.write_text(json.dumps({**data, "parallel": value}))
        for target in (path, tmp_path):
            shown = run_cli(target)
            assert shown.returncode == 2 and shown.stdout == "", shown.stderr
            assert re.fullmatch(rf"error: {re.escape(str(path))}: {message}.*\n", shown.stderr), shown.stderr


def test_reading_imports_neither_torch_nor_vllm(reports):
    code = (
        "import sys\nfrom vllm_kv_strategies.__main__ import main\n"
        f"rc = main(['report', {str(reports['stock'])!r}, {str(reports['plugin'])!r}])\n"
        "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm')), rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines()[-1] == "HEAVY [] 0", proc.stderr


def test_the_schema_file_is_package_data():
    text = (Path(render.__file__).parent / schema.SCHEMA_FILE).read_text()
    assert json.loads(text)["properties"]["schema_version"] == {"const": schema.SCHEMA_VERSION}
    assert write.SCHEMA_VERSION == schema.SCHEMA_VERSION


def test_two_processes_of_one_run_claiming_one_rank_are_flagged(reports, tmp_path):
    """As plugin 0.1.0 wrote data parallel engines: each engine's worker as rank 0."""
    data = json.loads(next(reports["deploy"].glob("kv_cache_report.2*.rank0.json")).read_text())
    for pid, dp in ((101, 0), (202, 1)):
        twin = {**data, "pid": pid, "parallel": {**data["parallel"], "data_parallel_rank": dp}}
        (tmp_path / f"kv_cache_report.20261201T000000Z.{pid}.rank0.json").write_text(json.dumps(twin))
    shown = run_cli(tmp_path)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"KV cache reports in {tmp_path}: 2 reports, 1 rank (each rank's newest report), world size 2"
    assert lines[lines.index("flagged:") + 1:] == [
        "  rank 1: no report in this directory (world size 2): the plugin did not run there "
        "(KV_STRATEGIES=off on that rank's node?) or wrote elsewhere",
        "  rank 0: written by 2 processes of run r1 (pids 101, 202; dp/pp/tp 0/0/0, 1/0/0): two workers claim one "
        "rank, so only the newest is shown (plugin 0.1.0 numbered every data parallel engine's workers from 0)",
    ]


def test_missing_ranks_are_one_flag_and_a_file_named_for_another_rank_is_refused(reports, tmp_path):
    data = json.loads(next(reports["deploy"].glob("kv_cache_report.2*.rank0.json")).read_text())
    far = {**data, "totals": {**data["totals"], "rank": 7}, "world_size": 8}
    (tmp_path / "kv_cache_report.20261201T000000Z.1.rank7.json").write_text(json.dumps(far))
    lines = run_cli(tmp_path).stdout.splitlines()
    assert lines[lines.index("flagged:") + 1:] == [
        "  ranks 0-6: no report in this directory (world size 8): the plugin did not run there "
        "(KV_STRATEGIES=off on that rank's node?) or wrote elsewhere"]
    renamed = tmp_path / "kv_cache_report.20261201T000000Z.1.rank3.json"
    renamed.write_text(json.dumps(far))
    shown = run_cli(tmp_path)
    assert (shown.returncode, shown.stderr) == (2, f"error: {renamed}: the file name says rank 3, the report rank 7\n")


def test_a_reader_that_leaves_early_gets_no_traceback(reports):
    """``report FILE | head -1``: the pipe's reader is gone (closed here before the command writes)."""
    proc = subprocess.Popen([sys.executable, "-m", "vllm_kv_strategies", "report", str(reports["plugin"])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert (proc.wait(timeout=120), stderr) == (1, "")
