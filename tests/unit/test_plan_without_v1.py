"""``plan`` on a vLLM without Model Runner V1 (0.34): the specs collected by V2's own
``get_kv_cache_spec``, 0.34's planner (the whole model's groups first) and layout call, and,
on this machine (x86 without triton-cpu), past the CPU platform's Triton refusal, said in a
note. README's dense example ("Plan before you deploy") gives its num_blocks exactly with
``--kv-cache-memory-bytes``. ``tests/deploy`` (the upstream-0.32.0 cell) covers plan on V1 releases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from upstream_harness import HAS_V1  # noqa: E402

pytestmark = pytest.mark.skipif(HAS_V1, reason="plan on releases with Model Runner V1 runs in tests/deploy (upstream-0.32.0)")

LLAMA_70B = Path(__file__).resolve().parents[1] / "deploy" / "configs" / "llama-3-70b"


def test_readme_dense_example_plans_the_same_num_blocks(tmp_path):
    out = tmp_path / "plan.json"
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_kv_strategies", "plan", str(LLAMA_70B), "--tensor-parallel-size", "4",
         "--pipeline-parallel-size", "2", "--kv-cache-memory-bytes", "40000000000", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    rows = [line.split() for line in lines if line.strip()[:1].isdigit() and "full_attention" in line]
    assert len(rows) == 8 and {tuple(r[4:]) for r in rows} == {("full_attention", "40", "128", "131,072", "7,629", "976,512")}
    assert "vLLM would log: KV cache size: 976,512 tokens, Maximum concurrency for 8,192 tokens per request: 119.20x" in lines
    plan = json.loads(out.read_text())
    assert plan["num_blocks"] == 7629
    import vllm.triton_utils

    if not vllm.triton_utils.HAS_TRITON:
        assert any(line.startswith("note: vLLM ") and "cannot start on this machine" in line for line in lines), proc.stdout
