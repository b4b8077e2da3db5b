"""Hatchling metadata hook: read the package's entry points from entry_points.toml.

hatchling only writes entry points it is told are dynamic, so pyproject.toml
lists ``entry-points`` in ``project.dynamic``; tests check the built wheel.
"""

from __future__ import annotations

import os
import sys

from hatchling.metadata.plugin.interface import MetadataHookInterface

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class EntryPointsHook(MetadataHookInterface):
    PLUGIN_NAME = "custom"

    def update(self, metadata: dict) -> None:
        path = os.path.join(self.root, "entry_points.toml")
        with open(path, "rb") as f:
            groups = tomllib.load(f).get("entry-points", {})
        metadata["entry-points"] = {g: dict(eps) for g, eps in groups.items() if eps}
