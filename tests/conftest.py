"""No silent skips: in a cell run by noxfile.py (``KV_TEST_CELL`` set), a test module whose
every test skipped must be declared for that cell in ``tests/expected_skips.toml``, and a
declared module must skip whole; either way the run fails, naming the modules and what to write.

A module "skips whole" when it was collected and none of its tests ran (a module-level skip,
an ``importorskip``, a module-level ``skipif`` mark, or every test skipping on its own).
Runs with a selection (``-k``, ``-m``, node ids: the noxfile leaves ``KV_TEST_CELL`` unset
when pytest arguments are given) are not checked. Importing this imports neither torch nor vLLM.
"""

from __future__ import annotations

import os
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

EXPECTED_SKIPS = Path(__file__).resolve().parent / "expected_skips.toml"
ROOT = EXPECTED_SKIPS.parents[1]

#: module path (from the repository root) -> [tests that ran, tests skipped]
_OUTCOMES: dict[str, list[int]] = defaultdict(lambda: [0, 0])
_MODULE_SKIPS: dict[str, str] = {}


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _rel(path: str) -> str:
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            return candidate.relative_to(ROOT).as_posix()
        except ValueError:
            return candidate.as_posix()
    return candidate.as_posix()


def declared(cell: str) -> dict[str, str]:
    """The modules ``cell`` expects to skip whole, with the reason (empty for an unlisted cell).

    Raises:
        ValueError: the file is not TOML, or a cell's entry is not a table of strings.
    """
    table = tomllib.loads(EXPECTED_SKIPS.read_text()).get(cell, {})
    if not isinstance(table, dict) or not all(isinstance(v, str) and v.strip() for v in table.values()):
        raise ValueError(f"{EXPECTED_SKIPS.name}: [{cell!r}] must map module paths to non-empty reasons")
    return dict(table)


def whole_module_skips() -> set[str]:
    """The modules of this run that were collected and ran no test."""
    skipped = {m for m, (ran, skips) in _OUTCOMES.items() if ran == 0 and skips > 0}
    return skipped | set(_MODULE_SKIPS)


def pytest_collectreport(report):
    if report.skipped and _rel(_module(report.nodeid)).endswith(".py"):
        _MODULE_SKIPS[_rel(_module(report.nodeid))] = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)


def pytest_runtest_logreport(report):
    counts = _OUTCOMES[_rel(_module(report.nodeid))]
    if report.skipped and report.when in ("setup", "call"):
        counts[1] += 1
    elif report.when == "call":
        counts[0] += 1


def check(cell: str) -> list[str]:
    """What is wrong with this run's whole-module skips for ``cell`` (empty: nothing)."""
    expected, found = declared(cell), whole_module_skips()
    problems = [f"{m} skipped whole in {cell} but {EXPECTED_SKIPS.name} does not declare it: add "
                f'"{m}" = "<why it cannot run in {cell}>" under ["{cell}"], or make it run'
                for m in sorted(found - set(expected))]
    collected = set(_OUTCOMES) | set(_MODULE_SKIPS)
    problems += [f"{m} is declared to skip whole in {cell} ({expected[m]}) but ran tests: remove it from "
                 f"{EXPECTED_SKIPS.name}" for m in sorted(set(expected) - found) if m in collected]
    return problems


def pytest_sessionfinish(session, exitstatus):
    cell = os.environ.get("KV_TEST_CELL", "").strip()
    if not cell or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return
    problems = check(cell)
    if problems:
        session.config._kv_skip_problems = problems
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    problems = getattr(config, "_kv_skip_problems", None)
    if problems:
        terminalreporter.section("modules skipped whole (tests/expected_skips.toml)", red=True)
        for line in problems:
            terminalreporter.write_line(f"FAILED {line}")
