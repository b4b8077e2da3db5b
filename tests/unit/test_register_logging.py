"""What ``register()`` tells the user: the ``observe`` switch, the line each
process logs once (also where vLLM configures logging only after loading
plugins, as the 0.32 API server does), the run id, and the one line an
invalid switch gives before vLLM's traceback."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest
import vllm.v1.worker.gpu.model_runner as v2_module
from upstream_harness import HAS_V1, v1_runner_class

import vllm_kv_strategies
from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms import matrix

INSTALLED = matrix.Installed.detect().vllm
#: The runners the release has (vLLM 0.34: V2 only); the log names no other.
RUNNERS = "GPUModelRunner (V1) and GPUModelRunner (V2)" if HAS_V1 else "GPUModelRunner (V2)"
OBSERVING = f"kv_strategies: observing (KV_STRATEGIES=observe, vLLM {INSTALLED}): stock builds the KV cache of {RUNNERS}; the plugin reports it"
ACTIVE = f"kv_strategies: enabled (KV_STRATEGIES=on, vLLM {INSTALLED}): will build the KV cache of {RUNNERS}"
INVALID = "kv_strategies: KV_STRATEGIES='bogus' is not valid; use one of 'auto', 'on', 'off', 'observe'. vLLM cannot start with it."


def patched() -> bool:
    """The first runner patched: V1's class where the release has V1, else V2's module."""
    return patching.MARKER in vars(v1_runner_class() if HAS_V1 else v2_module)


def test_observe_wraps_the_runner_and_says_stock_builds(monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "observe")
    vllm_kv_strategies.register()
    vllm_kv_strategies.register()
    assert patched() and vllm_kv_strategies._registered_platform == "upstream"
    assert kv_log.at(logging.INFO)[0] == OBSERVING  # then the patched lines (test_register.py)
    assert kv_log.at(logging.WARNING) == []


def test_observe_wraps_an_undeclared_release_with_a_warning(monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "observe")
    monkeypatch.setattr(matrix, "UPSTREAM_VLLM_RELEASES", ("0.29.0",))
    vllm_kv_strategies.register()
    assert patched()
    [warning] = kv_log.at(logging.WARNING)
    assert warning == (f"kv_strategies: KV_STRATEGIES=observe: wrapping, to report stock's KV cache, vLLM {INSTALLED}, "
                       f"which the plugin's tests do not prove (vLLM {INSTALLED} is not a final release of a cell "
                       "(the cells: vLLM 0.29.0))")
    assert kv_log.at(logging.INFO)[0] == OBSERVING


@pytest.mark.parametrize("mode", ["auto", "on", "observe"])
def test_register_sets_a_run_id_for_the_processes_it_starts(monkeypatch, mode):
    monkeypatch.setenv("KV_STRATEGIES", mode)
    vllm_kv_strategies.register()
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}Z-{os.getpid()}", os.environ["KV_STRATEGIES_RUN_ID"])


def test_a_run_id_set_by_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES_RUN_ID", "deployment-7")
    vllm_kv_strategies.register()
    assert os.environ["KV_STRATEGIES_RUN_ID"] == "deployment-7"


def test_off_sets_no_run_id(monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES", "off")
    vllm_kv_strategies.register()
    assert "KV_STRATEGIES_RUN_ID" not in os.environ


def test_an_invalid_switch_logs_one_error_line_then_raises(monkeypatch, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "bogus")
    with pytest.raises(ValueError, match=r"^KV_STRATEGIES='bogus' is not valid; use one of 'auto', 'on', 'off', 'observe'\.$"):
        vllm_kv_strategies.register()
    assert kv_log.at(logging.ERROR) == [INVALID]
    assert not patched()


def python(code: str, merged: bool = False, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter without the caller's KV_STRATEGIES* / VLLM_*
    variables; ``merged``: stderr into stdout, in the order a terminal shows them."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_"))}
    streams = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) if merged else dict(capture_output=True)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**clean, **env},
                          text=True, timeout=300, **streams)


def test_a_process_that_configures_logging_after_register_still_says_it_once():
    """vLLM 0.32's API server: plugins load while the argument parser is built,
    logging is configured after (``configure_logging_from_args``). The line is
    held and logged by vLLM's configured handler, once; vLLM's function is restored."""
    proc = python(
        """
        import logging
        import vllm.logger as vl
        original = {n: getattr(vl, n, None) for n in ("_configure_vllm_root_logger", "configure_logging")}
        configured_at_import = logging.getLogger("vllm").hasHandlers()  # releases before 0.32
        import vllm_kv_strategies
        vllm_kv_strategies.register()
        print("MARK registered", flush=True)
        if not configured_at_import:
            from vllm.config.logging import LoggingConfig
            vl.configure_logging(LoggingConfig())
        vllm_kv_strategies.register()
        print("MARK restored", all(getattr(vl, n, None) is f for n, f in original.items()), configured_at_import, flush=True)
        """,
        KV_STRATEGIES="on",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    said = [i for i, ln in enumerate(lines) if ln.endswith(ACTIVE)]
    assert len(said) == 1, proc.stdout[-3000:]
    mark = lines.index("MARK registered")
    restored = next(ln for ln in lines if ln.startswith("MARK restored"))
    configured_at_import = restored.endswith("True")
    assert (said[0] < mark) if configured_at_import else (said[0] > mark)
    assert restored.startswith("MARK restored True")
    assert lines[said[0]].startswith("INFO ") or "INFO" in lines[said[0]].split("kv_strategies:")[0]  # vLLM's format
    assert "kv_strategies" not in proc.stderr


def test_an_invalid_switch_through_vllms_plugin_loader_prints_one_line_before_the_traceback():
    """What a user sees when vLLM loads the plugin with a bad switch and has not
    configured logging yet (the API server): one ERROR line in vLLM's format first (the plugin
    configures vLLM's logging for it where vLLM has not yet, 0.32; importing vLLM configured it
    on 0.30), then the traceback."""
    proc = python("import vllm.plugins; vllm.plugins.load_general_plugins()", merged=True, KV_STRATEGIES="bogus")
    assert proc.returncode == 1
    err = proc.stdout.splitlines()
    ours = [i for i, ln in enumerate(err) if "kv_strategies:" in ln]
    assert len(ours) == 1 and re.match(r"(\(\w+ pid=\d+\) )?ERROR \d\d-\d\d \d\d:\d\d:\d\d \[__init__\.py:\d+\] ", err[ours[0]]), err
    assert err[ours[0]].endswith(INVALID)
    assert ours[0] < err.index("Traceback (most recent call last):")
    assert err[-1] == "ValueError: KV_STRATEGIES='bogus' is not valid; use one of 'auto', 'on', 'off', 'observe'."
