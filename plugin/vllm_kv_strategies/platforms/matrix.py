"""The support matrix and the installed versions (read from distribution
metadata, never by importing vLLM)."""

from __future__ import annotations

from vllm_kv_strategies.platforms.ascend.releases import CELL_PINS, OWN_CELL, classify, nearest_cell
from vllm_kv_strategies.versions import Versions, exact_release, release

__all__ = ["ASCEND_RELEASES", "UPSTREAM_VLLM_RELEASES", "Installed", "exact_release", "release", "supported_releases"]

#: vLLM releases whose upstream model runners (V1 and V2) are proven against stock.
UPSTREAM_VLLM_RELEASES: tuple[str, ...] = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
#: (vLLM, vllm-ascend) release pairs with a cell whose NPUModelRunner is proven
#: against stock; the exact vllm-ascend version each cell pins, and every other
#: release ``auto`` patches, are in :mod:`.ascend.releases`.
ASCEND_RELEASES: tuple[tuple[str, str], ...] = tuple((r, r) for r in CELL_PINS)

class Installed(Versions):
    """The installed versions (:class:`~vllm_kv_strategies.versions.Versions`) and
    whether the support matrix covers them."""

    @property
    def supported(self) -> bool:
        """Whether ``auto`` patches this release (pair): on Ascend, a
        vllm-ascend version a cell proved (its pin, or a release with the
        pin's code: :func:`~vllm_kv_strategies.platforms.ascend.releases.classify`)
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


def supported_releases() -> str:
    """Human-readable support matrix, for warnings: the cells (each Ascend
    cell by the exact vllm-ascend version it pins)."""
    upstream = ", ".join(UPSTREAM_VLLM_RELEASES)
    ascend = ", ".join(f"{v}+{CELL_PINS[a]}" for v, a in ASCEND_RELEASES)
    return f"vLLM {upstream}; vLLM+vllm-ascend {ascend} (and releases with a cell's code: `matrix`)"
