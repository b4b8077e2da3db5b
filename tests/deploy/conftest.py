"""The plan command's fixtures: the plugin's stock state around every test
(tests/plugin_fixtures.py) and the zoo's tiny-config writer on the path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "zoo"))
from plugin_fixtures import RecordList, kv_log, stock_plugin_state  # noqa: E402,F401

#: config.json files written from the public configs' values (no weights).
CONFIGS = Path(__file__).resolve().parent / "configs"
