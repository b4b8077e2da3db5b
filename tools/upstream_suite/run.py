"""Run an upstream project's own unit tests of the KV cache code with the plugin off, in auto and on,
and compare the outcomes test by test.

    python tools/upstream_suite/run.py CELL [--suite NAME] [--modes off,auto,on] [--list]

Run by the cell's own interpreter (``.nox/<cell>/bin/python``; the noxfile does so after the
cell's tests, and ``tools/nox.sh -s suite-<cell>`` alone), where the plugin is installed as users
install it. For each suite of ``suites.toml`` whose ``cell`` is CELL:

1. the release's sdist is fetched by pip (``pip download --no-deps --no-binary :all:`` of
   ``dist==version``) into ``.nox/_suites/`` and unpacked there, its own copy of the package
   replaced by a link to the installed one (the tests read source files by path);
2. the selection (``suites.toml``) runs once per mode, ``KV_STRATEGIES=<mode>``, with
   ``-p pytest_register`` (the plugin registered as vLLM's plugin loader does) and a junit report
   per mode in ``.nox/_reports/suite-<suite>-<mode>.xml``;
3. the outcomes are compared: every test must have in ``auto`` the outcome it has ``off``; in
   ``on`` a test may differ only where ``on_refusals`` lists it.

Prints per suite and mode collected / passed / failed / skipped and the time, the tests that fail
or skip alike in every mode because they need what this host lacks (an NPU, a GPU, a hub model,
Triton), and every difference. Exit 0: no unlisted difference; 1: a difference (or a listed
refusal that no longer differs); 2: the suite cannot be fetched or run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORK = ROOT / ".nox" / "_suites"
REPORTS = ROOT / ".nox" / "_reports"
MODES = ("off", "auto", "on")
#: What a test that fails or skips in every mode needs, read from its message (first match wins).
NEEDS = (
    ("an NPU", re.compile(r"\bnpu\b|torch_npu|ascend device|(?-i:CANN)", re.I)),
    ("a GPU", re.compile(r"\bcuda\b|\bgpu\b|nvidia|accelerator", re.I)),
    ("a hub model", re.compile(r"huggingface|hf_hub|hub\b|offline mode|Repository Not Found|connect", re.I)),
    ("Triton", re.compile(r"triton", re.I)),
)


def _progress(message: str) -> None:
    print(f"upstream-suite: {message}", file=sys.stderr, flush=True)


def load(cell: str, only: str | None) -> list[tuple[str, dict]]:
    """The suites of ``suites.toml`` that run in ``cell`` (only the one named ``only``, where given),
    each with its list of terms."""
    data = tomllib.loads((HERE / "suites.toml").read_text())
    return [(name, {**suite, "terms": data["terms"].get(suite.get("terms"), [])})
            for name, suite in data["suite"].items() if suite["cell"] == cell and only in (None, name)]


def _archive(suite: dict) -> Path | None:
    """The sdist pip saved (``vllm_ascend-0.30.0rc2.tar.gz``, ``vllm-0.32.0.tar.gz``), or None."""
    names = {f"{dist}-{suite['version']}.tar.gz" for dist in (suite["dist"], suite["dist"].replace("-", "_"))}
    return next((WORK / name for name in sorted(names) if (WORK / name).is_file()), None)


def fetch(name: str, suite: dict) -> Path:
    """The unpacked sdist, its package a link to the installed one."""
    tree = WORK / name
    if (tree / ".ready").is_file():
        return tree
    WORK.mkdir(parents=True, exist_ok=True)
    archive = _archive(suite)
    if archive is None:
        _progress(f"fetching {suite['dist']}=={suite['version']}'s source distribution with pip")
        env = {**os.environ, **suite.get("build_env", {})}
        tools = suite.get("build_tools")
        if tools:  # the sdist's metadata step imports them; not every cell has them
            target = WORK / "_build_tools"
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *tools],
                           check=True)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "--no-build-isolation", "-d", str(WORK), f"{suite['dist']}=={suite['version']}"],
                       check=True, env=env)
        archive = _archive(suite)
    tree.mkdir(exist_ok=True)
    with tarfile.open(archive) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        package = f"{top}/{suite['package']}"
        members = [m for m in sdist.getmembers() if m.name.startswith(f"{top}/") and
                   m.name != package and not m.name.startswith(f"{package}/")]
        for member in members:
            member.name = member.name[len(top) + 1:]
        sdist.extractall(tree, members=[m for m in members if m.name], filter="data")
    installed = importlib.util.find_spec(suite["package"])
    if installed is None:
        raise SystemExit(f"upstream-suite: {suite['package']} is not installed in {sys.executable}")
    link = tree / suite["package"]
    if not link.is_symlink():
        link.symlink_to(Path(installed.submodule_search_locations[0]), target_is_directory=True)
    if not _has_pytest_config(tree):  # else pytest would take this repository's, from a directory above
        (tree / "pytest.ini").write_text("# tools/upstream_suite: the sdist has no pytest configuration.\n[pytest]\n")
    (tree / ".ready").touch()
    return tree


def _has_pytest_config(tree: Path) -> bool:
    """Whether the unpacked sdist configures pytest itself (pytest's own ini-file rules)."""
    marks = {"pytest.ini": "", "pyproject.toml": "[tool.pytest.ini_options]", "tox.ini": "[pytest]",
             "setup.cfg": "[tool:pytest]"}
    return any((tree / name).is_file() and mark in (tree / name).read_text(errors="replace")
               for name, mark in marks.items())


def select(tree: Path, suite: dict) -> list[str]:
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, suite["terms"])) + r")\b") if suite["terms"] else None
    files = []
    for root in suite["roots"]:
        for path in sorted((tree / root).rglob("test_*.py")):
            if pattern is None or pattern.search(path.read_text(errors="replace")):
                files.append(str(path.relative_to(tree)))
    return files


def run_mode(name: str, suite: dict, tree: Path, files: list[str], mode: str) -> tuple[Path, float]:
    junit = REPORTS / f"suite-{name}-{mode}.xml"
    junit.unlink(missing_ok=True)
    # The hub offline: a test that needs a hub model fails at once (counted as such) instead of retrying.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **suite.get("env", {}), "KV_STRATEGIES": mode,
           "KV_SUITE_STAND_IN": ",".join(suite.get("stand_in", [])),
           "KV_SUITE_NPU_STANDIN": "1" if suite.get("npu_standin") else "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.pop("KV_TEST_CELL", None)
    start = time.monotonic()
    pytest = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "pytest_register", "-p", "no:cacheprovider", "-q",
                               "--no-header", "-rN", "--continue-on-collection-errors", f"--junitxml={junit}", *files],
                              cwd=tree, env=env, stdout=subprocess.DEVNULL)
    try:
        pytest.wait(timeout=suite.get("timeout_s", 1800))
    except subprocess.TimeoutExpired:
        pytest.send_signal(signal.SIGUSR1)  # pytest_register: every thread's stack on stderr
        time.sleep(5)
        pytest.kill()
        pytest.wait()
        raise SystemExit(f"upstream-suite: {name} with KV_STRATEGIES={mode} did not finish in "
                         f"{suite.get('timeout_s', 1800)} s: the stacks above show where it hangs")
    return junit, time.monotonic() - start


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | error | skipped, the first line of its message)."""
    if not junit.is_file():
        raise SystemExit(f"upstream-suite: pytest wrote no report {junit} (see its output above)")
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for kind in ("failure", "skipped", "error"):
            node = case.find(kind)
            if node is not None:
                message = (node.get("message") or node.text or "").strip().splitlines()[:1]
                message = message[0][:200] if message else ""
                outcome = {"failure": "failed"}.get(kind, kind)
                if kind == "error" and message.startswith("failed on teardown"):  # the test itself passed
                    outcome, message = "passed", f"teardown: {message}"
                break
        result[test] = (outcome, message)
    return result


def counts(results: dict[str, tuple[str, str]]) -> str:
    tally = {kind: sum(o == kind for o, _ in results.values()) for kind in ("passed", "failed", "error", "skipped")}
    teardown = sum(o == "passed" and m.startswith("teardown: ") for o, m in results.values())
    return (f"{len(results)} collected, {tally['passed']} passed ({teardown} of them erring in teardown), "
            f"{tally['failed'] + tally['error']} failed ({tally['error']} errors), {tally['skipped']} skipped")


def needs(results: dict[str, dict[str, tuple[str, str]]]) -> dict[str, int]:
    """What the tests that fail or skip alike in every mode need, by their message."""
    tally: dict[str, int] = {}
    first = next(iter(results.values()))
    for test, (outcome, message) in first.items():
        if outcome == "passed" and message.startswith("teardown: "):
            outcome = "passed, erring in teardown"
        elif outcome == "passed" or any(r.get(test, ("absent",))[0] != outcome for r in results.values()):
            continue
        what = next((label for label, pattern in NEEDS if pattern.search(message)), "something else")
        tally[f"{outcome}: {what}"] = tally.get(f"{outcome}: {what}", 0) + 1
    return tally


def compare(off: dict, other: dict) -> dict[str, tuple]:
    """test -> (off's outcome, the other mode's), for each test whose outcome differs."""
    return {test: (off.get(test, ("absent", "")), other.get(test, ("absent", "")))
            for test in sorted(set(off) | set(other)) if off.get(test, ("absent",))[0] != other.get(test, ("absent",))[0]}


def node_id(tree: Path, test: str) -> str:
    """pytest's node id of a junit test id (``package.module.Class::name`` -> ``path.py::Class::name``)."""
    dotted, _, name = test.partition("::")
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (tree / path).is_file():
            return "::".join([str(path), *parts[cut:], name])
    return test


def confirm(name: str, suite: dict, tree: Path, results: dict[str, dict]) -> None:
    """Run each test whose outcome differs from ``off`` again, alone, in ``off`` and in its mode, and
    keep the second outcomes: a test that fails on a timer under load (a thread joined within 2 s)
    differs once, not twice. Every rerun is printed."""
    off = results.get("off")
    for mode in (m for m in results if m != "off" and off is not None):
        listed = suite.get("on_refusals", {}) if mode == "on" else {}
        differ = {test: d for test, d in compare(off, results[mode]).items() if test not in listed}
        if not differ or len(differ) > 50:  # many: not timing, and a rerun would take as long as the run
            continue
        nodes = [node_id(tree, test) for test in differ]
        _progress(f"{name}: {len(nodes)} tests differ off / {mode}; running them again, alone, in both")
        for again in ("off", mode):
            junit, _ = run_mode(f"{name}-again", suite, tree, nodes, again)
            rerun = outcomes(junit)
            for test in differ:
                if test in rerun and rerun[test][0] != results[again][test][0]:
                    print(f"  rerun {again}: {test}: {results[again][test][0]} -> {rerun[test][0]}")
                    results[again][test] = rerun[test]


def report(name: str, suite: dict, results: dict[str, dict], seconds: dict[str, float]) -> int:
    print(f"\n=== {suite['dist']} {suite['version']} ({name}): {len(next(iter(results.values())))} tests")
    for mode, result in results.items():
        print(f"  {mode:<5} {counts(result)}; {seconds[mode]:.0f} s")
    for what, n in sorted(needs(results).items()):
        print(f"  alike in every mode, {what}: {n}")
    failed = 0
    refusals = suite.get("on_refusals", {})
    off = results.get("off")
    for mode in (m for m in results if m != "off" and off is not None):
        differ = compare(off, results[mode])
        allowed = refusals if mode == "on" else {}
        unlisted = {t: d for t, d in differ.items() if t not in allowed}
        print(f"  {mode} vs off: {len(differ)} differ, {len(differ) - len(unlisted)} of them listed refusals")
        for test, ((was, _), (now, message)) in unlisted.items():
            print(f"    DIFFERS {test}: off {was}, {mode} {now}: {message}")
        failed |= bool(unlisted)
        if mode == "on":
            for test in sorted(set(allowed) - set(differ)):
                print(f"    STALE refusal (no longer differs): {test}")
                failed = 1
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", help="the nox cell whose environment runs this (ascend-0.30.0, upstream-0.32.0, ...)")
    parser.add_argument("--suite", help="only this suite of suites.toml")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of off,auto,on (default: all)")
    parser.add_argument("--list", action="store_true", help="print the selected test files and exit")
    parser.add_argument("--ci", action="store_true", help="only the suites CI runs (those not marked ci = false)")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if bad := set(modes) - set(MODES):
        parser.error(f"unknown modes {sorted(bad)}: choose from {', '.join(MODES)}")
    every = load(args.cell, args.suite)
    suites = [(n, s) for n, s in every if s.get("ci", True) or not args.ci]
    if not suites:
        if every:  # --ci: the cell's suites are sessions only
            print(f"upstream-suite: {args.cell}'s suites are not run in CI (ci = false); nothing to do", file=sys.stderr)
            return 0
        known = tomllib.loads((HERE / "suites.toml").read_text())["suite"]
        print(f"upstream-suite: no suite{' ' + args.suite if args.suite else ''} runs in {args.cell}; the suites and their cells: "
              + ", ".join(f"{name} ({suite['cell']})" for name, suite in known.items()), file=sys.stderr)
        return 2
    REPORTS.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, suite in suites:
        try:
            tree = fetch(name, suite)
        except subprocess.CalledProcessError as exc:
            print(f"upstream-suite: cannot fetch {suite['dist']}=={suite['version']}: {exc}", file=sys.stderr)
            return 2
        files = select(tree, suite)
        if args.list:
            print("\n".join(files))
            continue
        results, seconds = {}, {}
        for mode in modes:
            _progress(f"{name}: {len(files)} files with KV_STRATEGIES={mode}")
            junit, seconds[mode] = run_mode(name, suite, tree, files, mode)
            results[mode] = outcomes(junit)
        confirm(name, suite, tree, results)
        failed |= report(name, suite, results, seconds)
    return failed


if __name__ == "__main__":
    sys.exit(main())
