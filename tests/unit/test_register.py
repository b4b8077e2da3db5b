"""``register()``: the ``KV_STRATEGIES`` switch, idempotency, undo, the log
line, deferred patching, loading through vLLM's plugin loader, and its cost.

The in-process tests patch the real runners of the installed vLLM (V1's and V2's
``GPUModelRunner`` up to 0.33, V2's alone on 0.34, which deleted V1; already
imported here); the conftest fixture restores them after every test. Two kinds
of fresh subprocess check what only a new interpreter shows: the cheap one
never imports vLLM, the other (one run, ~10 s) imports the runner module after
``register()``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

# ---------------------------------------------------------------------------
# Fresh interpreters (helpers; the tests are at the end)
# ---------------------------------------------------------------------------


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_PLUGINS"))}
    env.update(extra)
    return env


class Probe:
    """A fresh ``python -c`` run, started at once; :meth:`result` waits."""

    def __init__(self, code: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=subprocess_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        atexit.register(self.kill)  # if the test that reads it is deselected

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()

    def result(self, timeout: float) -> dict:
        stdout, stderr = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, stderr[-4000:]
        # vLLM logs to stdout: the result is the line after the marker.
        [line] = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
        return json.loads(line[len("RESULT ") :])


def run_python(code: str, timeout: float, **env: str) -> dict:
    return Probe(code, **env).result(timeout)


CHEAP_PROBE = """
    import json, sys, time
    t0 = time.perf_counter()
    import vllm_kv_strategies
    t1 = time.perf_counter()
    heavy_after_import = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "vllm"))
    vllm_kv_strategies.register()
    t2 = time.perf_counter()
    from vllm_kv_strategies import patching
    print("RESULT " + json.dumps(dict(
        import_ms=(t1 - t0) * 1e3,
        register_ms=(t2 - t1) * 1e3,
        heavy_after_import=heavy_after_import,
        heavy_after_register=sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "vllm")),
        hook=patching._finder in sys.meta_path,
        pending=sorted(patching._finder.callbacks),
        platform=vllm_kv_strategies._registered_platform,
    )))
"""


DEFERRED_PROBE = """
    import importlib, json, sys
    import vllm_kv_strategies
    from vllm_kv_strategies import patching
    vllm_kv_strategies.register()
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "vllm"))
    hook = patching._finder in sys.meta_path
    pending = sorted(patching._finder.callbacks)
    # The first runner (V1 where the release has it, else V2) and what it left pending.
    v1 = "vllm.v1.worker.gpu_model_runner" in patching._finder.callbacks
    runner_module = importlib.import_module("vllm.v1.worker.gpu_model_runner" if v1 else "vllm.v1.worker.gpu.model_runner")
    owner, name = (runner_module.GPUModelRunner, "initialize_kv_cache_tensors") if v1 else (runner_module, "init_kv_cache")
    fn = owner.__dict__[name]
    originals = owner.__dict__.get(patching.MARKER, {})
    original = originals.get(name)
    pending_after_v1 = sorted(patching._finder.callbacks)
    import vllm.v1.worker.gpu.model_runner as v2_module
    print("RESULT " + json.dumps(dict(
        heavy_before_runner_import=heavy,
        hook=hook,
        pending=pending,
        pending_after_v1=pending_after_v1,
        pending_after=sorted(patching._finder.callbacks),
        v2_marker=sorted(v2_module.__dict__.get(patching.MARKER, {})),
        marker=list(originals),
        wrapped_is_original=original is not None and fn.__wrapped__ is original,
        original=f"{original.__module__}.{original.__qualname__}" if original else None,
        fn_is_original=original is fn,
    )))
"""

# The deferred-patching probe imports vLLM's runner (~10 s): start it now, so it
# runs while this module imports vLLM in-process and the other tests run.
DEFERRED = Probe(DEFERRED_PROBE)

import vllm.plugins  # noqa: E402
import vllm.v1.worker.gpu.model_runner as v2_module  # noqa: E402  (both runners imported: both patched at once)
import vllm_kv_strategies
from upstream_harness import HAS_V1, needs_v1

from vllm_kv_strategies import platforms, patching
from vllm_kv_strategies.platforms import matrix
from vllm_kv_strategies.platforms.upstream.v1 import UpstreamV1Adapter
from vllm_kv_strategies.platforms.upstream.v2 import UpstreamV2Adapter

if HAS_V1:  # vLLM 0.30 - 0.33: V1, and the CPU runner that subclasses it
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
else:  # vLLM 0.34: no V1; the x86 CPU runner subclasses V2; the resizable KV cache's extend_kv_cache
    import vllm.v1.worker.gpu_worker as worker_module
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner

    GPUModelRunner = None
    EXTEND_ORIGINAL = worker_module.__dict__["extend_kv_cache"]

METHOD = "initialize_kv_cache_tensors"
V1_METHODS = (METHOD, "initialize_kv_cache")
V2_CLASS = v2_module.GPUModelRunner
#: The stock attributes, taken when this module is imported (before any test ran).
ORIGINALS = {name: GPUModelRunner.__dict__[name] for name in V1_METHODS} if HAS_V1 else {}
ORIGINAL = ORIGINALS.get(METHOD)
V2_ORIGINALS = {"init_kv_cache": v2_module.__dict__["init_kv_cache"], "initialize_kv_cache": V2_CLASS.__dict__["initialize_kv_cache"]}
#: The first runner's build (V1's method, else V2's module function): (owner, name).
FIRST = (GPUModelRunner, METHOD) if HAS_V1 else (v2_module, "init_kv_cache")
assert patching.MARKER not in vars(FIRST[0]), "runner patched before the tests started"
if HAS_V1:
    assert ORIGINAL.__qualname__ == f"GPUModelRunner.{METHOD}"
    assert ORIGINAL.__module__ == "vllm.v1.worker.gpu_model_runner"


def first_build():
    """The first runner's build attribute as it is now (patched or stock)."""
    return vars(FIRST[0])[FIRST[1]]


#: The installed vLLM, as the log lines name it (e.g. ``0.31.0``).
INSTALLED = matrix.Installed.detect().vllm
RUNNERS = "GPUModelRunner (V1) and GPUModelRunner (V2)" if HAS_V1 else "GPUModelRunner (V2)"
ENABLED_LINE = f"kv_strategies: enabled (KV_STRATEGIES={{mode}}, vLLM {INSTALLED}): will build the KV cache of {RUNNERS}"
V1_LINE = ("kv_strategies: patched vllm.v1.worker.gpu_model_runner.{GPUModelRunner.initialize_kv_cache_tensors, "
           "GPUModelRunner.initialize_kv_cache} (GPUModelRunner (V1))")
V2_LINE = ("kv_strategies: patched vllm.v1.worker.gpu.model_runner.{init_kv_cache, GPUModelRunner.initialize_kv_cache} "
           "(GPUModelRunner (V2))")
EXTEND_LINE = "kv_strategies: patched vllm.v1.worker.gpu_worker.{extend_kv_cache} (GPUModelRunner (V2))"
PATCHED_LINES = [V1_LINE, V2_LINE] if HAS_V1 else [V2_LINE, EXTEND_LINE]
#: The runner modules register() waits for, as its import hook lists them.
#: vLLM 0.34's standalone CPU runner is waited for too, to say it is not covered (test below).
STANDALONE = "vllm.v1.worker.cpu.standalone_model_runner"
PENDING = (["vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu_model_runner"] if HAS_V1
           else [STANDALONE, "vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu_worker"])


def active_lines(mode: str) -> list[str]:
    """What register() logs in a process that has imported both runners."""
    return [ENABLED_LINE.format(mode=mode), *PATCHED_LINES]


def assert_stock() -> None:
    for name, fn in ORIGINALS.items():
        assert GPUModelRunner.__dict__[name] is fn
    assert v2_module.__dict__["init_kv_cache"] is V2_ORIGINALS["init_kv_cache"]
    assert V2_CLASS.__dict__["initialize_kv_cache"] is V2_ORIGINALS["initialize_kv_cache"]
    for owner in (GPUModelRunner, v2_module, V2_CLASS) if HAS_V1 else (v2_module, V2_CLASS):
        assert patching.MARKER not in vars(owner)
    if HAS_V1:
        assert CPUModelRunner.initialize_kv_cache_tensors is ORIGINAL
    else:
        assert CPUModelRunner.initialize_kv_cache is V2_ORIGINALS["initialize_kv_cache"]
        assert worker_module.__dict__["extend_kv_cache"] is EXTEND_ORIGINAL
        assert patching.MARKER not in vars(worker_module)
    assert patching._finder not in sys.meta_path
    assert patching._finder.callbacks == {}


def assert_patched_once() -> None:
    if not HAS_V1:  # the x86 CPU runner inherits V2's initialize_kv_cache: patched through its base class
        assert worker_module.__dict__[patching.MARKER] == {"extend_kv_cache": EXTEND_ORIGINAL}
        assert "initialize_kv_cache" not in CPUModelRunner.__dict__
        assert CPUModelRunner.initialize_kv_cache is V2_CLASS.__dict__["initialize_kv_cache"]
    for name, original in ORIGINALS.items():
        patched = GPUModelRunner.__dict__[name]
        assert patched is not original
        assert patched.__wrapped__ is original  # one layer of wrapping, not two
        assert patched.__name__ == name and patched.__doc__ == original.__doc__
    assert v2_module.__dict__[patching.MARKER] == {"init_kv_cache": V2_ORIGINALS["init_kv_cache"]}
    assert V2_CLASS.__dict__[patching.MARKER] == {"initialize_kv_cache": V2_ORIGINALS["initialize_kv_cache"]}
    if not HAS_V1:
        return
    assert GPUModelRunner.__dict__[patching.MARKER] == ORIGINALS
    # The CPU runner inherits the build method: patched through its base class.
    assert METHOD not in CPUModelRunner.__dict__
    assert patching.MARKER not in CPUModelRunner.__dict__
    assert CPUModelRunner.initialize_kv_cache_tensors is GPUModelRunner.__dict__[METHOD]


def info_lines(kv_log) -> list[str]:
    return [m for m in kv_log.at(logging.INFO) if m.startswith("kv_strategies:")]


# ---------------------------------------------------------------------------
# The switch
# ---------------------------------------------------------------------------


def test_off_leaves_the_runner_stock_and_installs_no_hook(monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "off")
    vllm_kv_strategies.register()
    vllm_kv_strategies.register()  # decided once per process: no second line
    assert_stock()
    assert vllm_kv_strategies._registered_platform == "off"
    assert info_lines(kv_log) == ["kv_strategies: off (KV_STRATEGIES=off): nothing patched"]
    assert kv_log.at(logging.WARNING) == []


@pytest.mark.parametrize("bad", ["maybe", "yes", "0"])
def test_bad_value_raises_naming_the_valid_values(monkeypatch, bad):
    monkeypatch.setenv("KV_STRATEGIES", bad)
    with pytest.raises(ValueError) as info:
        vllm_kv_strategies.register()
    message = str(info.value)
    assert f"KV_STRATEGIES={bad!r}" in message
    for valid in ("'auto'", "'on'", "'off'"):
        assert valid in message
    assert_stock()


@pytest.mark.parametrize("mode", [None, "auto", "AUTO", "on"])
def test_auto_and_on_patch_the_defining_class(monkeypatch, kv_log, mode):
    if mode is not None:
        monkeypatch.setenv("KV_STRATEGIES", mode)
    vllm_kv_strategies.register()
    assert_patched_once()
    assert vllm_kv_strategies._registered_platform == "upstream"
    expected_mode = (mode or "auto").lower()
    assert info_lines(kv_log) == active_lines(expected_mode)
    assert kv_log.at(logging.WARNING) == []  # the installed release is in the support matrix


# ---------------------------------------------------------------------------
# Idempotency and undo
# ---------------------------------------------------------------------------


def test_register_twice_wraps_once_and_logs_once(kv_log):
    vllm_kv_strategies.register()
    first = first_build()
    vllm_kv_strategies.register()
    assert first_build() is first
    assert_patched_once()
    assert info_lines(kv_log) == active_lines("auto")


def test_marker_prevents_double_wrapping_when_the_flag_is_lost(monkeypatch):
    # A fork child inherits the patched class but may rerun register() with
    # fresh module state; the marker on the class keeps it one layer deep.
    vllm_kv_strategies.register()
    first = first_build()
    monkeypatch.setattr(vllm_kv_strategies, "_registered_platform", None)
    vllm_kv_strategies.register()
    platforms.install("upstream")
    assert first_build() is first
    assert_patched_once()


def test_unregister_restores_the_identical_original():
    vllm_kv_strategies.register()
    assert_patched_once()
    vllm_kv_strategies.unregister()
    assert_stock()
    assert vllm_kv_strategies._registered_platform is None
    vllm_kv_strategies.unregister()  # a second undo is harmless
    assert_stock()


def test_patch_unpatch_patch(kv_log):
    vllm_kv_strategies.register()
    first = first_build()
    vllm_kv_strategies.unregister()
    assert_stock()
    vllm_kv_strategies.register()
    assert_patched_once()
    assert first_build() is not first  # a fresh wrapper
    assert info_lines(kv_log) == active_lines("auto") * 2


@needs_v1
def test_patched_method_delegates_to_the_adapter(monkeypatch):
    calls = []

    def fake(self, stock, runner, *args, **kwargs):
        calls.append((stock, runner, args, kwargs))
        return "built"

    monkeypatch.setattr(UpstreamV1Adapter, "initialize_kv_cache_tensors", fake)
    vllm_kv_strategies.register()
    runner = CPUModelRunner.__new__(CPUModelRunner)
    assert runner.initialize_kv_cache_tensors("config", [16]) == "built"
    assert calls == [(ORIGINAL, runner, ("config", [16]), {})]


def test_the_cpu_runner_reaches_the_v2_adapter_where_it_subclasses_v2(monkeypatch):
    """vLLM 0.34's x86 ``CPUModelRunner`` (``cpu/model_runner.py``) inherits V2's
    ``initialize_kv_cache``, which calls the patched ``init_kv_cache``; before 0.34 V2's own
    class stands for it."""
    calls = []

    def fake(self, stock, runner, *args, **kwargs):
        calls.append((stock, runner, args, kwargs))
        return "built"

    monkeypatch.setattr(UpstreamV2Adapter, "initialize_kv_cache", fake)
    vllm_kv_strategies.register()
    cls = V2_CLASS if HAS_V1 else CPUModelRunner
    runner = cls.__new__(cls)
    assert runner.initialize_kv_cache("config") == "built"
    assert calls == [(V2_ORIGINALS["initialize_kv_cache"], runner, ("config",), {})]
    assert v2_module.init_kv_cache.__wrapped__ is V2_ORIGINALS["init_kv_cache"]


STANDALONE_PROBE = """
    import json, logging
    import vllm_kv_strategies
    from vllm_kv_strategies import patching
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append((record.levelname, record.getMessage()))
    logging.getLogger("vllm.kv_strategies").addHandler(handler)
    vllm_kv_strategies.register()
    import vllm.v1.worker.cpu.standalone_model_runner as standalone
    print("RESULT " + json.dumps(dict(
        records=records,
        patched=patching.MARKER in vars(standalone) or patching.MARKER in vars(standalone.StandaloneCPUModelRunner),
    )))
"""


@pytest.mark.skipif(HAS_V1, reason="the standalone CPU runner is new in vLLM 0.34")
def test_the_standalone_cpu_runner_is_named_not_covered_when_it_loads():
    """vLLM 0.34's StandaloneCPUModelRunner builds with its own init_kv_cache: the worker's log
    says the plugin does not cover it, and no line claims it was patched (a fresh interpreter:
    the warning is given when the module loads)."""
    result = run_python(STANDALONE_PROBE, timeout=300, KV_STRATEGIES="on", VLLM_TARGET_DEVICE="cpu")
    assert result["patched"] is False
    warnings = [m for level, m in result["records"] if level == "WARNING" and "StandaloneCPUModelRunner" in m]
    assert warnings == [
        "kv_strategies: StandaloneCPUModelRunner builds its KV cache stock in this worker: vLLM's runner for CPUs "
        "without Triton that are not x86 builds it with its own cpu/attn_utils.init_kv_cache, which the plugin does not patch"]
    assert not any("standalone" in m and "patched" in m for _, m in result["records"])


# ---------------------------------------------------------------------------
# Support matrix
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "named"),
    # 0.29.0: a release no test environment installs, declared instead of the installed one
    [((), ["(no upstream cell)"]), (("0.29.0",), ["(the cells: vLLM 0.29.0)"])],
    ids=["none", "other"],
)
def test_auto_on_an_undeclared_release_stays_stock_then_on_patches(monkeypatch, kv_log, declared, named):
    monkeypatch.setattr(matrix, "UPSTREAM_VLLM_RELEASES", declared)
    vllm_kv_strategies.register()
    vllm_kv_strategies.register()  # decided once per process: one warning
    assert_stock()
    assert vllm_kv_strategies._registered_platform == "stock"
    [warning] = kv_log.at(logging.WARNING)
    assert warning.startswith(f"kv_strategies: vLLM {INSTALLED} is not proven by the plugin's tests (vLLM {INSTALLED} is not ")
    assert "stock KV cache is used" in warning
    assert "Set KV_STRATEGIES=on" in warning
    for release in named:  # the supported releases are named
        assert release in warning
    assert info_lines(kv_log) == []

    kv_log.clear()
    vllm_kv_strategies.unregister()  # a new process, in effect
    monkeypatch.setenv("KV_STRATEGIES", "on")
    vllm_kv_strategies.register()
    assert_patched_once()
    [warning] = kv_log.at(logging.WARNING)
    assert warning.startswith(
        f"kv_strategies: KV_STRATEGIES=on: patching vLLM {INSTALLED}, which the plugin's tests do not prove"
    )
    for release in named:
        assert release in warning
    assert info_lines(kv_log) == active_lines("on")


# ---------------------------------------------------------------------------
# Nothing but a bad switch value escapes register()
# ---------------------------------------------------------------------------


def test_a_failure_while_installing_is_logged_not_raised(monkeypatch, kv_log):
    def boom(platform):
        raise RuntimeError("boom while installing")

    monkeypatch.setattr(platforms, "install", boom)
    vllm_kv_strategies.register()  # must not raise: vLLM does not catch it
    assert_stock()
    assert vllm_kv_strategies._registered_platform == "stock"
    [warning] = kv_log.at(logging.WARNING)
    assert warning.startswith("kv_strategies: not active, vLLM's stock KV cache is used")
    assert "boom while installing" in warning


def test_a_failure_while_patching_the_runner_is_logged_not_raised(monkeypatch, kv_log):
    def boom(self, cls):
        raise RuntimeError("boom while patching")

    monkeypatch.setattr(UpstreamV1Adapter if HAS_V1 else UpstreamV2Adapter, "patch", boom)
    vllm_kv_strategies.register()
    assert first_build() is (ORIGINAL if HAS_V1 else V2_ORIGINALS["init_kv_cache"])
    assert patching.MARKER not in vars(FIRST[0])
    [warning] = kv_log.at(logging.WARNING)
    module = "vllm.v1.worker.gpu_model_runner.{GPUModelRunner." if HAS_V1 else "vllm.v1.worker.gpu.model_runner.{init_kv_cache"
    assert warning.startswith(f"kv_strategies: could not patch {module}")
    assert "its KV cache stays stock" in warning and "boom while patching" in warning
    # Only what really ran is claimed: the failed runner's patch line is missing, the others' are there.
    assert info_lines(kv_log) == [ENABLED_LINE.format(mode="auto"), *PATCHED_LINES[1:]]


# ---------------------------------------------------------------------------
# Loaded by vLLM's plugin loader through the installed entry point
# ---------------------------------------------------------------------------


@pytest.fixture
def fresh_plugin_loader(monkeypatch):
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    return vllm.plugins.load_general_plugins


def test_load_general_plugins_registers_the_plugin(monkeypatch, fresh_plugin_loader, kv_log):
    monkeypatch.setenv("VLLM_PLUGINS", "kv_strategies")
    fresh_plugin_loader()
    assert vllm.plugins.plugins_loaded is True
    assert_patched_once()
    assert info_lines(kv_log) == active_lines("auto")
    # vLLM loads plugins once per process; a second call changes nothing.
    fresh_plugin_loader()
    assert_patched_once()
    assert info_lines(kv_log) == active_lines("auto")


def test_load_general_plugins_skips_the_plugin_when_not_listed(monkeypatch, fresh_plugin_loader, kv_log):
    monkeypatch.setenv("VLLM_PLUGINS", "some_other")
    fresh_plugin_loader()
    assert vllm.plugins.plugins_loaded is True
    assert_stock()
    assert kv_log.records == []


def test_load_general_plugins_with_the_switch_off(monkeypatch, fresh_plugin_loader, kv_log):
    monkeypatch.setenv("VLLM_PLUGINS", "kv_strategies")
    monkeypatch.setenv("KV_STRATEGIES", "off")
    fresh_plugin_loader()
    assert_stock()
    assert info_lines(kv_log) == ["kv_strategies: off (KV_STRATEGIES=off): nothing patched"]


# ---------------------------------------------------------------------------
# Fresh interpreters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_import_and_register_in_a_fresh_process_import_neither_torch_nor_vllm(mode, capsys):
    result = run_python(CHEAP_PROBE, timeout=60, KV_STRATEGIES=mode)
    assert result["heavy_after_import"] == []
    assert result["heavy_after_register"] == []
    if mode == "off":
        assert result["hook"] is False and result["pending"] == [] and result["platform"] == "off"
    else:  # the control: auto does install the hook
        assert result["hook"] is True
        assert result["pending"] == PENDING  # no V1 module waited for where the release has none
        assert result["platform"] == "upstream"
    with capsys.disabled():
        print(
            f"\n[register cost, KV_STRATEGIES={mode}] import vllm_kv_strategies: "
            f"{result['import_ms']:.1f} ms, register(): {result['register_ms']:.1f} ms"
        )


def test_register_before_the_runner_is_imported_patches_it_on_import():
    result = DEFERRED.result(timeout=300)
    assert result["heavy_before_runner_import"] == []
    assert result["hook"] is True
    assert result["pending"] == PENDING
    # The first runner's callback ran and was dropped (V1's; V2's where the release has no V1).
    assert result["pending_after_v1"] == (["vllm.v1.worker.gpu.model_runner"] if HAS_V1
                                          else [STANDALONE, "vllm.v1.worker.gpu_worker"])
    assert result["pending_after"] == ([] if HAS_V1 else [STANDALONE, "vllm.v1.worker.gpu_worker"])  # not imported here
    assert result["v2_marker"] == ["init_kv_cache"]
    assert result["marker"] == (["initialize_kv_cache_tensors", "initialize_kv_cache"] if HAS_V1 else ["init_kv_cache"])
    assert result["wrapped_is_original"] is True
    assert result["fn_is_original"] is False
    assert result["original"] == (
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner.initialize_kv_cache_tensors" if HAS_V1
        else "vllm.v1.worker.gpu.attn_utils.init_kv_cache")
