"""tools/upstream_suite/run.py's verdict on the upstream projects' own tests: outcomes read from
the junit reports, compared test by test; ``auto`` must equal ``off``, ``on`` may differ only by
the listed refusals, and a listed refusal that no longer differs is stale. (Running the suites
is each cell's job: tools/nox.sh -s suite-CELL.)"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("upstream_suite_run", ROOT / "tools" / "upstream_suite" / "run.py")
run = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = run
SPEC.loader.exec_module(run)

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.ut.worker.test_a" name="test_ok"/>
<testcase classname="tests.ut.worker.test_a.TestK" name="test_refused"/>
<testcase classname="tests.ut.worker.test_a" name="test_npu"><failure message="ModuleNotFoundError: No module named 'torch_npu.op_plugin'">x</failure></testcase>
<testcase classname="tests.ut.worker.test_a" name="test_hub"><skipped message="requires a hub model"/></testcase>
<testcase classname="tests.ut.worker.test_a" name="test_teardown"><error message="failed on teardown with &quot;RuntimeError: Cannot access accelerator device when none is available.&quot;">x</error></testcase>
</testsuite></testsuites>"""


def _results(tmp_path, **changes):
    path = tmp_path / "off.xml"
    path.write_text(JUNIT)
    off = run.outcomes(path)
    other = dict(off)
    for test, outcome in changes.items():
        other[test.replace("__", "::")] = (outcome, "UnsupportedSpecError: the strategies do not build ...")
    return off, other


def test_outcomes_read_from_junit(tmp_path):
    off, _ = _results(tmp_path)
    assert off == {
        "tests.ut.worker.test_a::test_ok": ("passed", ""),
        "tests.ut.worker.test_a.TestK::test_refused": ("passed", ""),
        "tests.ut.worker.test_a::test_npu": ("failed", "ModuleNotFoundError: No module named 'torch_npu.op_plugin'"),
        "tests.ut.worker.test_a::test_hub": ("skipped", "requires a hub model"),
        "tests.ut.worker.test_a::test_teardown": (  # its body passed: compared as passed, counted apart
            "passed", 'teardown: failed on teardown with "RuntimeError: Cannot access accelerator device when none is available."'),
    }
    assert run.counts(off) == "5 collected, 3 passed (1 of them erring in teardown), 1 failed (0 errors), 1 skipped"


def test_auto_equal_to_off_passes_and_counts_what_tests_need(tmp_path, capsys):
    off, auto = _results(tmp_path)
    assert run.report("s", {"dist": "d", "version": "1"}, {"off": off, "auto": auto}, {"off": 1, "auto": 1}) == 0
    out = capsys.readouterr().out
    assert "alike in every mode, failed: an NPU: 1" in out and "alike in every mode, skipped: a hub model: 1" in out
    assert "alike in every mode, passed, erring in teardown: a GPU: 1" in out
    assert "auto vs off: 0 differ" in out


def test_a_difference_in_auto_fails_even_if_listed(tmp_path, capsys):
    off, auto = _results(tmp_path, **{"tests.ut.worker.test_a.TestK__test_refused": "failed"})
    suite = {"dist": "d", "version": "1", "on_refusals": {"tests.ut.worker.test_a.TestK::test_refused": "KVPP"}}
    assert run.report("s", suite, {"off": off, "auto": auto}, {"off": 1, "auto": 1}) == 1
    assert "DIFFERS tests.ut.worker.test_a.TestK::test_refused: off passed, auto failed" in capsys.readouterr().out


def test_on_may_differ_by_listed_refusals_only(tmp_path, capsys):
    off, on = _results(tmp_path, **{"tests.ut.worker.test_a.TestK__test_refused": "failed"})
    listed = {"dist": "d", "version": "1", "on_refusals": {"tests.ut.worker.test_a.TestK::test_refused": "KVPP"}}
    assert run.report("s", listed, {"off": off, "on": on}, {"off": 1, "on": 1}) == 0
    assert "on vs off: 1 differ, 1 of them listed refusals" in capsys.readouterr().out
    assert run.report("s", {"dist": "d", "version": "1"}, {"off": off, "on": on}, {"off": 1, "on": 1}) == 1


def test_a_stale_refusal_fails(tmp_path, capsys):
    off, on = _results(tmp_path)
    listed = {"dist": "d", "version": "1", "on_refusals": {"tests.ut.worker.test_a.TestK::test_refused": "KVPP"}}
    assert run.report("s", listed, {"off": off, "on": on}, {"off": 1, "on": 1}) == 1
    assert "STALE refusal (no longer differs): tests.ut.worker.test_a.TestK::test_refused" in capsys.readouterr().out


def test_node_ids_follow_the_files(tmp_path):
    (tmp_path / "tests" / "ut" / "worker").mkdir(parents=True)
    (tmp_path / "tests" / "ut" / "worker" / "test_a.py").write_text("")
    assert run.node_id(tmp_path, "tests.ut.worker.test_a.TestK::test_x[1-2]") == "tests/ut/worker/test_a.py::TestK::test_x[1-2]"
    assert run.node_id(tmp_path, "tests.ut.worker.test_a::test_y") == "tests/ut/worker/test_a.py::test_y"


def test_every_suite_names_a_cell_and_its_listed_refusals_say_why():
    data = tomllib.loads((ROOT / "tools" / "upstream_suite" / "suites.toml").read_text())
    cells = {p.stem for p in (ROOT / "requirements").glob("*-*.txt")}
    for name, suite in data["suite"].items():
        assert suite["cell"] in cells, name
        assert suite.get("terms") is None or suite["terms"] in data["terms"], name
        assert all(reason.strip() for reason in suite.get("on_refusals", {}).values()), name


@pytest.mark.parametrize("cell", ["ascend-0.30.0", "upstream-0.34.0"])
def test_the_selection_is_the_suites(cell):
    assert [name for name, _ in run.load(cell, None)] == {
        "ascend-0.30.0": ["vllm-ascend-0_30_0rc2"], "upstream-0.34.0": ["vllm-0_34_0"]}[cell]


def test_the_harness_leaves_dropped_zmq_contexts_to_the_process_exit():
    """vllm-ascend 0.18's hang: the garbage collector's ``Context.__del__`` -> ``term()`` waited for a
    socket a test's thread still blocked in; under ``-p pytest_register`` it no longer terminates a
    dropped context (pyzmq's own closes it), and ``SIGUSR1`` prints every thread's stack."""
    import subprocess

    pytest.importorskip("zmq")
    code = (
        "import signal, sys, zmq\n"
        "ctx = zmq.Context(); ctx.socket(zmq.ROUTER); ctx.__del__(); print('pyzmq', ctx.closed)\n"
        f"sys.path.insert(0, {str(ROOT / 'tools' / 'upstream_suite')!r}); import pytest_register\n"
        "ctx = zmq.Context(); sock = ctx.socket(zmq.ROUTER); ctx.__del__(); print('harness', ctx.closed, sock.closed)\n"
        "signal.raise_signal(signal.SIGUSR1)\n"
        "ctx.destroy(linger=0); print('destroy', ctx.closed)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"KV_SUITE_NPU_STANDIN": "0", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["pyzmq True", "harness False False", "destroy True"]
    assert "Current thread" in done.stderr and "File \"<string>\", line 5 in <module>" in done.stderr
