"""``plan`` against the engine: a tiny model (tools/tiny_models.py) run by
vLLM on the CPU (tests/e2e/run_generate.py: vLLM's ``LLM``, EngineCore and
worker processes as in production) with ``--kv-cache-memory-bytes`` and the
plugin on, then ``python -m vllm_kv_strategies plan`` with the same engine
arguments on the model directory: plan's num_blocks, tokens, maximum
concurrency, groups and tensors equal the engine's log ("CPU KV cache size:
N tokens, Maximum concurrency for L tokens per request: Cx") and the plugin's
report of what it built.

The dense model runs in the upstream-0.32.0 cell; ``PLAN_E2E_KINDS=all`` (the
nox session ``plan-e2e``) adds the hybrid (Qwen3-Next: gated delta net + full
attention), MLA (DeepSeek-V2) and sliding + full (Gemma 3: five sliding-window
layers of window 64 and one full-attention layer, each its own KV cache group)
models, about 1-1.5 min each on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tools"))

pytestmark = pytest.mark.e2e
TIMEOUT = float(os.environ.get("E2E_RUN_TIMEOUT", "900"))
KINDS = ("llama", "qwen3_next", "deepseek_v2", "gemma3") if os.environ.get("PLAN_E2E_KINDS") == "all" else ("llama",)
#: Not a multiple of any page: the planner's floor division is part of what is compared.
BUDGET = 50_000_000
ENGINE_ARGS = ["--max-model-len", "1024", "--kv-cache-memory-bytes", str(BUDGET)]
CAPACITY_RE = re.compile(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def env(**extra: str) -> dict[str, str]:
    """No plugin variables from this process and no VLLM_CPU_KVCACHE_SPACE:
    vLLM's CPU platform would replace --kv-cache-memory-bytes with it."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("KV_STRATEGIES") and k != "VLLM_CPU_KVCACHE_SPACE"}
    out.update(HF_HUB_OFFLINE="1", VLLM_LOGGING_LEVEL="INFO", **extra)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_plan_equals_the_engine(tmp_path, kind):
    import tiny_models

    model = tmp_path / kind
    tiny_models.build(kind, str(model))
    reports = tmp_path / "reports"
    run = subprocess.run(
        [sys.executable, str(HERE / "run_generate.py"), str(model), str(tmp_path / "out.json"), "--max-tokens", "2",
         *ENGINE_ARGS],
        env=env(KV_STRATEGIES="on", KV_STRATEGIES_REPORT=str(reports), VLLM_ENABLE_V1_MULTIPROCESSING="1"),
        capture_output=True, text=True, timeout=TIMEOUT, cwd=str(REPO),
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    (capacity,) = set(CAPACITY_RE.findall(log))
    report = json.loads((reports / "kv_cache_report.latest.rank0.json").read_text())

    planned = subprocess.run(
        [sys.executable, "-m", "vllm_kv_strategies", "plan", str(model), "--max-num-seqs", "1", "--enforce-eager",
         *ENGINE_ARGS, "--json", str(tmp_path / "plan.json")],
        env=env(), capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    (rank,) = plan["ranks"]

    tokens, max_model_len, concurrency = capacity
    assert (f"{plan['tokens']:,}", f"{plan['max_concurrency']:.2f}", max_model_len) == (tokens, concurrency, "1,024")
    assert plan["num_blocks"] == rank["num_blocks"] == report["kv_cache"]["num_blocks"] == report["totals"]["num_blocks"]
    assert [g["layers"] for g in rank["groups"]] == [g["layers"] for g in report["kv_cache"]["groups"]]
    for ours, theirs in zip(rank["groups"], report["kv_cache"]["groups"]):
        assert [{k: v for k, v in s.items()} for s in ours["specs"]] == theirs["specs"]
    assert rank["tensors"] == report["kv_cache"]["tensors"]
    # what the plugin allocated, and how many layers each strategy built, as plan said
    assert plan["stock_bytes_per_worker"] == [rank["bytes_required"]] == [report["totals"]["bytes_allocated"]]
    assert plan["plugin"] == [{"layers_per_strategy": report["totals"]["layers_per_strategy"], "refusal": None,
                               "stock_would_fail": False}]
    assert f"KV cache size: {tokens} tokens, Maximum concurrency for 1,024 tokens per request: {concurrency}x" in planned.stdout

    # report PLAN REPORT: the prediction against the run, exit 0 when they match
    shown = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", str(tmp_path / "plan.json"),
                            str(reports / "kv_cache_report.latest.rank0.json")], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"{'num_blocks':20} {plan['num_blocks']:>16,} {plan['num_blocks']:>16,}" in shown.stdout
    assert shown.stdout.splitlines()[-4:] == ["groups (layers): equal", "KV cache specs: equal", "tensors: equal",
                                              "the run matches the plan"]
