"""The unit tests' fixtures: the plugin's stock state around every test and
``kv_log`` (tests/plugin_fixtures.py, shared with the model zoo); on vLLM 0.34's CPU platform
without triton-cpu, configs built as if Triton were there (tests/cpu_platform.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cpu_platform import allow_config_without_triton  # noqa: E402
from plugin_fixtures import RecordList, kv_log, stock_plugin_state  # noqa: E402,F401

allow_config_without_triton()
