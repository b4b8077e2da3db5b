"""The KV cache report: summary line, JSON file per rank, CLI render/compare."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import torch
from test_upstream_adapter import dense, run_both

from vllm.v1.kv_cache_interface import MambaSpec, FullAttentionSpec  # noqa: E402

from vllm_kv_strategies import report as report_mod
from vllm_kv_strategies.plan import plan_kv_cache


def test_json_report_written_per_rank_with_exact_totals(monkeypatch, tmp_path, kv_log):
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    config, _, (_, kv) = run_both(dense(n=3))
    path = tmp_path / "kv_cache_report.rank0.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == report_mod.SCHEMA_VERSION
    t = data["totals"]
    size = config.kv_cache_tensors[0].size
    assert (t["raw_buffers"], t["bytes_allocated"], t["bytes_required"]) == (1, size, size)
    assert (t["alignment_padding"], t["duplicated_bytes"]) == (0, 0)
    assert t["num_blocks"] == config.num_blocks and t["tokens"] == config.num_blocks * 16
    assert t["layers_per_strategy"] == {"full_attention": 3}
    layer = data["layers"]["model.layers.1.self_attn.attn"]
    assert layer["strategy"] == "full_attention" and layer["spec_type"] == "FullAttentionSpec"
    assert [p["name"] for p in layer["page_parts"]] == ["k", "v"]
    assert layer["page_parts"][0]["bytes_per_block"] == 16 * 2 * 64 * 2
    [view] = layer["views"]
    assert view["shape"] == [config.num_blocks, 2, 16, 128] and view["dtype"] == "bfloat16"
    assert layer["aliases"] == []  # one backing buffer, but each layer owns its bytes
    assert data["buffers"] == [{"id": 0, "bytes": size, "layers": sorted(kv)}]
    summary_lines = [m for m in kv_log.at(logging.INFO) if m.startswith("kv_strategies: rank 0: built 3 layers")]
    assert len(summary_lines) == 1
    assert f"{size} bytes allocated" in summary_lines[0] and "duplicated 0" in summary_lines[0]


def test_padding_and_duplicates_are_measured_from_the_tensors():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)  # 4096 B/block
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    names = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    config = KVCacheConfig(
        num_blocks=4,
        kv_cache_tensors=[KVCacheTensor(size=16384, layers=names, layer_stride=16384, block_stride=4096)],
        kv_cache_groups=[KVCacheGroupSpec(names, spec)],
    )
    plan = plan_kv_cache(config)
    # One buffer per layer (the fault stock vllm-ascend 0.11 had), each with 1 KiB of slack.
    own = {n: torch.zeros(16384 + 1024, dtype=torch.int8)[1024:].view(torch.bfloat16).view(4, 16, 1, 128) for n in names}
    t = report_mod.build_report(plan, own, strided=True, rank=3)["totals"]
    assert (t["rank"], t["raw_buffers"], t["bytes_allocated"], t["bytes_required"]) == (3, 2, 34816, 16384)
    assert (t["alignment_padding"], t["duplicated_bytes"]) == (2048, 16384)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "vllm_kv_strategies", *args], capture_output=True, text=True, timeout=120)


def test_cli_renders_and_compares(tmp_path, monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path / "a"))
    run_both(dense(n=2))
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path / "b"))
    run_both(dense(n=4))
    a, b = tmp_path / "a/kv_cache_report.rank0.json", tmp_path / "b/kv_cache_report.rank0.json"
    shown = run_cli("report", str(a))
    assert shown.returncode == 0, shown.stderr
    assert "model.layers.1.self_attn.attn" in shown.stdout and "full_attention" in shown.stdout
    diff = run_cli("report", str(a), str(b))
    assert diff.returncode == 0, diff.stderr
    ta, tb = (json.loads(p.read_text())["totals"] for p in (a, b))
    row = next(line for line in diff.stdout.splitlines() if line.startswith("num_blocks"))
    assert f"{tb['num_blocks'] - ta['num_blocks']:+,}" in row
    assert run_cli("report", str(a), str(b), str(a)).returncode == 2


def test_aliases_are_layers_sharing_bytes_across_groups(monkeypatch, tmp_path):
    from test_upstream_adapter import BF16

    mamba = MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, torch.float32))
    attn = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    specs = {f"model.layers.{i}.linear_attn": mamba for i in (0, 1, 2, 4, 5, 6)}
    specs |= {f"model.layers.{i}.self_attn.attn": attn for i in (3, 7)}
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    config, _, _ = run_both(specs)
    data = json.loads((tmp_path / "kv_cache_report.rank0.json").read_text())
    # vLLM overlays the groups: the first layer of every group shares the same bytes.
    assert data["layers"]["model.layers.3.self_attn.attn"]["aliases"] == [
        "model.layers.0.linear_attn", "model.layers.1.linear_attn", "model.layers.2.linear_attn"]
    assert data["layers"]["model.layers.4.linear_attn"]["aliases"] == [
        "model.layers.5.linear_attn", "model.layers.6.linear_attn", "model.layers.7.self_attn.attn"]
