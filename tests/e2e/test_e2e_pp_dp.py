"""Pipeline parallel 2 and data parallel 2 on vLLM's CPU build: plugin on
equals plugin off at the same parallelism, each rank builds and reports only
its own KV cache, and ``report DIR`` sums the deployment.

* Pipeline parallel 2 (``LLM(pipeline_parallel_size=2)``, two workers): stage 0
  builds layers 0-1, stage 1 layers 2-3 of the tiny Llama. It runs with
  torch.compile: with ``enforce_eager`` the CPU build stops on the second
  stage's first step, plugin or not (docs/testing.md, Pipeline parallel and data parallel).
* Data parallel 2 (``--data-parallel-size 2`` of vLLM's API server: two engine
  cores of one worker each). vLLM runs a dense model's engines independently,
  so each worker's torch.distributed world is its own; the report numbers them
  as vLLM's global rank (``data_parallel_index * world_size + rank``). Each
  prompt is sent to each engine in turn (vLLM's ``X-data-parallel-rank``
  header) and vLLM's per-engine metrics show both engines served.

Greedy, one sequence at a time, random weights at a realistic scale
(``tools/tiny_models.py``). ``tests/e2e/test_e2e_equivalence.py`` proves the
comparison fails on a broken cache.
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools"))

from compare_outputs import compare  # noqa: E402
from demo import Server, default_env, free_port, http  # noqa: E402
from run_generate import PROMPTS  # noqa: E402

pytestmark = pytest.mark.e2e
TIMEOUT = float(os.environ.get("E2E_RUN_TIMEOUT", "900"))
LAYERS = [f"model.layers.{i}.self_attn.attn" for i in range(4)]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    import tiny_models

    path = tmp_path_factory.mktemp("pp_dp") / "llama"
    tiny_models.build("llama", str(path))
    return path


def clean_env(**env: str) -> dict[str, str]:
    out = {k: v for k, v in default_env().items() if not k.startswith("KV_STRATEGIES")}
    out.update(env, VLLM_CPU_OMP_THREADS_BIND="0|1")
    return out


def deployment_report(reports: Path) -> list[str]:
    shown = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", str(reports)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return shown.stdout.splitlines()


def summaries(log: str) -> dict[int, str]:
    """rank -> its one summary line (a rank logging two fails)."""
    found: dict[int, list[str]] = {}
    for line in log.splitlines():
        if m := re.search(r"kv_strategies: rank (\d+): (built|stock built|vLLM built and the plugin checked) ", line):
            found.setdefault(int(m[1]), []).append(line)
    assert all(len(v) == 1 for v in found.values()), found
    return {rank: lines[0] for rank, lines in found.items()}


def built_by_each_rank(off_log: str, on_log: str, reports: Path, built: str) -> dict[int, dict]:
    """Off: no summary line. On: ranks 0 and 1 each log once that vLLM built ``built`` and the plugin
    checked it; rank -> its newest report."""
    assert "kv_strategies: rank" not in off_log
    lines = summaries(on_log)
    assert sorted(lines) == [0, 1]
    assert all(f"vLLM built and the plugin checked {built} in 1 raw buffer;" in line for line in lines.values()), lines
    return {rank: json.loads((reports / f"kv_cache_report.latest.rank{rank}.json").read_text()) for rank in lines}


def generate_pp2(model: Path, out: Path, **env: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_generate.py"), str(model), str(out), "--pipeline-parallel-size", "2",
         "--no-enforce-eager"],
        env=clean_env(VLLM_ENABLE_V1_MULTIPROCESSING="1", **env), capture_output=True, text=True, timeout=TIMEOUT,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def test_pipeline_parallel_2_each_stage_builds_its_own_layers(model, tmp_path):
    off_log = generate_pp2(model, tmp_path / "off.json", KV_STRATEGIES="off")
    reports = tmp_path / "reports"
    on_log = generate_pp2(model, tmp_path / "on.json", KV_STRATEGIES="on", KV_STRATEGIES_REPORT=str(reports))

    for stage, report in built_by_each_rank(off_log, on_log, reports, "2 layers (full_attention=2)").items():
        assert sorted(report["layers"]) == LAYERS[2 * stage: 2 * stage + 2]
        assert report["parallel"]["pipeline_parallel_rank"] == stage
        assert report["parallel"]["pipeline_parallel_size"] == 2 and report["world_size"] == 2
    shown = deployment_report(reports)
    assert [ln.split()[:4] for ln in shown[2:4]] == [["0", "0/0/0", "vllm_checked", "on"], ["1", "0/1/0", "vllm_checked", "on"]]
    assert shown[5] == "layouts: the same on every rank of each pipeline stage (2 stages, each with its own layers)"
    d = compare(json.loads((tmp_path / "off.json").read_text()), json.loads((tmp_path / "on.json").read_text()))
    assert d.identical, d


def engines_served(metrics: str) -> set[int]:
    """Engines whose ``vllm:prompt_tokens_total`` (vLLM's Prometheus metrics, one series per engine) is above 0."""
    pattern = r'^vllm:prompt_tokens_total\{[^}]*engine="(\d+)"[^}]*\} ([0-9.e+]+)$'
    return {int(m[1]) for m in re.finditer(pattern, metrics, re.M) if float(m[2]) > 0}


def serve_dp2(model: Path, reports: Path | None, mode: str) -> tuple[dict, str]:
    """Each prompt on each engine, greedy: {"results": [...]} as run_generate.py writes it, and the server's log."""
    port = free_port()
    env = clean_env(KV_STRATEGIES=mode, VLLM_CPU_KVCACHE_SPACE="1", **({"KV_STRATEGIES_REPORT": str(reports)} if reports else {}))
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port),
           "--data-parallel-size", "2", "--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "1"]
    server = Server(cmd, env, verbose=False)
    base = f"http://127.0.0.1:{port}"
    results, served = [], []
    try:
        server.wait_ready(base, TIMEOUT)
        for engine in (0, 1):
            for prompt in PROMPTS:
                body = {"model": str(model), "prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 5,
                        "ignore_eos": True, "return_token_ids": True}
                status, text = http("POST", base + "/v1/completions", body, timeout=300,
                                    headers={"X-data-parallel-rank": str(engine)})
                assert status == 200, text
                choice = json.loads(text)["choices"][0]
                lp = choice["logprobs"]
                results.append({"engine": engine, "token_ids": choice["token_ids"], "steps": [
                    {"token_id": t, "logprob": lp["token_logprobs"][i], "top": lp["top_logprobs"][i]}
                    for i, t in enumerate(choice["token_ids"])]})
            served.append(engines_served(http("GET", base + "/metrics", timeout=30)[1]))
    finally:
        server.stop(60)
    assert served == [{0}, {0, 1}], f"engines with prompt tokens after each engine's prompts: {served}"
    return {"results": results}, "\n".join(server.lines)


def test_data_parallel_2_each_engine_builds_and_reports_its_rank(model, tmp_path):
    off, off_log = serve_dp2(model, None, "off")
    reports = tmp_path / "reports"
    on, on_log = serve_dp2(model, reports, "on")

    for rank, report in built_by_each_rank(off_log, on_log, reports, "4 layers (full_attention=4)").items():
        assert report["parallel"]["data_parallel_rank"] == rank and report["totals"]["rank"] == rank
        assert sorted(report["layers"]) == LAYERS
    shown = deployment_report(reports)
    assert shown[0] == f"KV cache reports in {reports}: 2 reports, 2 ranks (each rank's newest report), world size 2"
    assert [ln.split()[:4] for ln in shown[2:4]] == [["0", "0/0/0", "vllm_checked", "on"], ["1", "1/0/0", "vllm_checked", "on"]]
    assert shown[5] == "layouts: the same on every rank"
    d = compare(off, on)
    assert d.identical, d
