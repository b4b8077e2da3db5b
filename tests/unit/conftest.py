"""The unit tests' fixtures: the plugin's stock state around every test and
``kv_log`` (tests/plugin_fixtures.py, shared with the model zoo); on vLLM 0.34's CPU platform
without triton-cpu, configs built as if Triton were there for the whole run (the plugin's own
``deploy.platforms.config_without_triton``, which ``plan`` and ``doctor`` use)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plugin_fixtures import RecordList, kv_log, stock_plugin_state  # noqa: E402,F401

from vllm_kv_strategies.deploy.platforms import config_without_triton  # noqa: E402

#: Entered once, never left: every config the unit tests build sees Triton's check pass (they
#: run no kernel); on any other platform or release it changes nothing.
_WITHOUT_TRITON = contextlib.ExitStack()
_WITHOUT_TRITON.enter_context(config_without_triton([]))
