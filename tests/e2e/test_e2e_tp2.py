"""Two workers: vLLM's CPU build with tensor parallel 2 (pipeline parallel 2 and
data parallel 2: ``test_e2e_pp_dp.py``).

With the plugin on, both ranks build their KV cache through the strategies, each
logs exactly one summary line and writes its own report file; tokens and logprobs
equal those with the plugin off at the same parallelism.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools"))

from compare_outputs import compare  # noqa: E402

pytestmark = pytest.mark.e2e


def generate(model: Path, out: Path, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KV_STRATEGIES")}
    full_env.update(env, VLLM_CPU_OMP_THREADS_BIND="0|1", VLLM_ENABLE_V1_MULTIPROCESSING="1")
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_generate.py"), str(model), str(out), "--tensor-parallel-size", "2"],
        env=full_env, capture_output=True, text=True, timeout=float(os.environ.get("E2E_RUN_TIMEOUT", "900")),
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def test_two_workers_each_build_log_and_report_once(tmp_path):
    import tiny_models

    model = tmp_path / "llama"
    tiny_models.build("llama", str(model))
    off_log = generate(model, tmp_path / "off.json", KV_STRATEGIES="off")
    reports = tmp_path / "reports"
    on_log = generate(model, tmp_path / "on.json", KV_STRATEGIES="on", KV_STRATEGIES_REPORT=str(reports))

    assert "kv_strategies: rank" not in off_log
    for rank in (0, 1):
        lines = [ln for ln in on_log.splitlines() if f"kv_strategies: rank {rank}: vLLM built and the plugin checked 4 layers" in ln]
        assert len(lines) == 1, f"rank {rank}: {lines}"
        report = json.loads((reports / f"kv_cache_report.latest.rank{rank}.json").read_text())
        assert report["totals"]["rank"] == rank and report["world_size"] == 2
        assert report["totals"]["layers_per_strategy"] == {"full_attention": 4}
    # One report for the deployment: both ranks, their totals, one layout.
    summed = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", str(reports)],
                            capture_output=True, text=True, timeout=120)
    assert summed.returncode == 0, summed.stdout + summed.stderr
    lines = summed.stdout.splitlines()
    assert lines[0] == f"KV cache reports in {reports}: 2 reports, 2 ranks (each rank's newest report), world size 2"
    assert [ln.split()[:4] for ln in lines[2:4]] == [["0", "0/0/0", "vllm_checked", "on"], ["1", "0/0/1", "vllm_checked", "on"]]
    assert lines[4].startswith("deployment (2 ranks): ") and lines[5] == "layouts: the same on every rank"
    d = compare(json.loads((tmp_path / "off.json").read_text()), json.loads((tmp_path / "on.json").read_text()))
    assert d.identical, d
