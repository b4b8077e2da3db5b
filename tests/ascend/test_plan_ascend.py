"""``plan`` where vllm-ascend is installed: refused by name, exit 2, before
vLLM is imported. vllm-ascend's ``NPUModelRunner`` collects specs of its own
and 0.30 replaces vLLM's planner; plan does not reproduce them yet, and an
upstream plan there would be wrong."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys


def test_plan_refuses_vllm_ascend_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    result = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "plan", str(tmp_path), "--kv-cache-memory-bytes", "1"],
                            capture_output=True, text=True, timeout=120)
    version = importlib.metadata.version("vllm-ascend")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"plan: error: plan does not plan for vllm-ascend yet (vllm-ascend {version} is installed): its NPUModelRunner's "
        "specs and planner differ from upstream vLLM's; run plan where upstream vLLM is installed"]
