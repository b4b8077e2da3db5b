"""Fixtures shared by the unit tests (tests/unit) and the model zoo
(tests/zoo), imported by their conftest.py.

Every test starts and ends with the plugin in its stock state: no
``KV_STRATEGIES*`` variable set, no runner class patched, no pending import
hook and no process-wide strategy registry, so tests pass in any order.

vLLM's loggers do not propagate to the root logger, so pytest's ``caplog``
sees nothing the plugin logs once vLLM is imported; ``kv_log`` attaches its
own handler to the plugin's logger instead.
"""

from __future__ import annotations

import contextlib
import logging
import sys

import pytest

import vllm_kv_strategies
from vllm_kv_strategies import patching
from vllm_kv_strategies.logger import reset_warn_once
from vllm_kv_strategies.core.registry import reset_default_registry

PLUGIN_LOGGER = "vllm.kv_strategies"


def _reset_plugin() -> None:
    vllm_kv_strategies.unregister()
    patching.cancel_pending()
    reset_default_registry()
    reset_warn_once()


@pytest.fixture(autouse=True)
def stock_plugin_state(monkeypatch: pytest.MonkeyPatch):
    """Stock plugin state and no plugin environment variable, before and after."""
    # register() sets KV_STRATEGIES_RUN_ID, KV_STRATEGIES_DRIVER_MODE and VLLM_RAY_EXTRA_ENV_VARS_TO_COPY
    # itself. monkeypatch undoes only what it changed, so each name is set through it first:
    # its undo then restores the value from before the test, or removes the name.
    for name in ("KV_STRATEGIES", "KV_STRATEGIES_TEST_FAULT", "KV_STRATEGIES_REPORT", "KV_STRATEGIES_RUN_ID",
                 "KV_STRATEGIES_DRIVER_MODE", "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    _reset_plugin()
    yield
    _reset_plugin()
    assert vllm_kv_strategies._registered_platform is None
    assert patching._finder not in sys.meta_path


class RecordList(logging.Handler):
    """Collects the records of one logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        """Messages logged at exactly ``level``."""
        return [r.getMessage() for r in self.records if r.levelno == level]

    def summary(self) -> str:
        """The one summary line (``kv_strategies: rank R: ... N layers (...) ...``) logged."""
        [line] = [m for m in self.at(logging.INFO) if " layers (" in m]
        return line

    def clear(self) -> None:
        self.records.clear()


@contextlib.contextmanager
def plugin_records():
    """A :class:`RecordList` of every record of the ``vllm.kv_strategies`` logger while the block runs."""
    logger = logging.getLogger(PLUGIN_LOGGER)
    handler = RecordList()
    old_level = logger.level
    # Without vLLM imported the "vllm" logger has no level and INFO would be
    # dropped through the root logger's WARNING; set ours explicitly.
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@pytest.fixture
def kv_log():
    """Every record of the ``vllm.kv_strategies`` logger during the test."""
    with plugin_records() as handler:
        yield handler
