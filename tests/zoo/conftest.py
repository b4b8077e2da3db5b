"""The zoo's fixtures: the plugin's stock state around every test
(tests/plugin_fixtures.py, shared with the unit tests), a work directory for
the tiny models, and the zoo table at the end of the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from plugin_fixtures import RecordList, kv_log, stock_plugin_state  # noqa: E402,F401

ROWS: list = []


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture
def zoo_rows() -> list:
    """Rows appended here are printed as the zoo table after the run."""
    return ROWS


def pytest_terminal_summary(terminalreporter):
    if ROWS:
        import test_zoo
        import zoo

        rows = list(ROWS)
        if test_zoo.ALL:  # the registry's architectures no installed config class configures
            rows += zoo.unconfigurable_rows()
        terminalreporter.section("model zoo")
        terminalreporter.write_line(zoo.table(rows))
