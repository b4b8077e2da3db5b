"""The plan command's fixtures: the plugin's stock state around every test
(tests/plugin_fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plugin_fixtures import RecordList, kv_log, stock_plugin_state  # noqa: E402,F401
