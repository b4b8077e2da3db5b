"""The upstream overhead benchmark still runs (quick mode; timings are not judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_upstream_overhead_benchmark_runs_quick(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "upstream_overhead.py"), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["register"]["register_ms"] > 0
    assert [r["case"] for r in results["init"]] == ["DeepSeek-V3 (61 MLA layers)", "Qwen3-Next (48 layers)"]
    assert [r["model"] for r in results["tiny"]] == ["llama"]
