"""``report ... --plot FILE.png`` and ``plan ... --plot``: KV cache memory maps (matplotlib, the
optional extra ``plot``; imported here, on first use, never at the plugin's import).

One map per side (:mod:`.memory_map`), one above the other on the same byte scale: the device
budget as the width, a band per buffer (grey: padding, bytes no view spans), in it a lane per
KV cache group in which its layers' views are coloured by group and hatched by spec kind
(outlined in black: a layer whose bytes another layer's views address too; a stripe per layer
where the group's layers interleave block by block over the same bytes); the budget left over drawn as unused; under
each map its totals (allocated, budget, required, num_blocks, token capacity); over two maps
the capacity ratio.
"""

from __future__ import annotations

import os
from typing import Any

from vllm_kv_strategies.report.memory_map import MemoryMap, mib, totals_line
from vllm_kv_strategies.report.schema import ReportError

#: What to install where matplotlib is missing (one line, exit 2).
MISSING = ("--plot needs matplotlib, which is not installed here (pip install 'vllm-kv-strategies[plot]', "
           "or pip install matplotlib); everything else needs nothing more")
#: Hatch per spec kind (its family: the part of the name before ``/``).
HATCHES = {"full_attention": "", "sliding_window": "///", "chunked_local_attention": "\\\\\\", "mla_attention": "xx",
           "sliding_window_mla": "xx//", "mamba": "..", "cross_attention": "++"}
PADDING, UNUSED = "#b8b8b8", "#ececec"


def pyplot():
    """matplotlib's pyplot on the Agg backend; :class:`ReportError` (:data:`MISSING`) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError(MISSING) from None
    return plt


def nice_step(rough: float) -> float:
    """1, 2 or 5 x a power of ten, at least ``rough`` (MiB between the axis' ticks)."""
    import math

    power = 10 ** math.floor(math.log10(rough)) if rough > 0 else 1
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def hatch(kind: str | None) -> str:
    return HATCHES.get((kind or "").split("/")[0], "--")


def colour(plt, group: int | None):
    return plt.get_cmap("tab10")(group % 10) if group is not None else (0.4, 0.4, 0.4, 1.0)


def group_label(group: int | None, kind: str | None, layers: int) -> str:
    return f"group {group if group is not None else '-'}: {kind or 'kind not recorded'} ({layers} layer{'s' if layers != 1 else ''})"


def _draw_map(plt, ax, m: MemoryMap, width: int) -> None:
    from matplotlib.patches import Rectangle

    for band in m.bands:
        ax.add_patch(Rectangle((band.at, 0), band.bytes, 1, facecolor="white", edgecolor="#777777", linewidth=0.5,
                               gid=f"buffer:{band.id}"))
        for start, end in band.padding:
            ax.add_patch(Rectangle((band.at + start, 0), end - start, 1, facecolor=PADDING, edgecolor="none",
                                   gid=f"padding:{band.id}"))
        lanes = max(1, len(band.lanes))
        for piece in band.pieces:
            y = 1 - (piece.lane + 1) / lanes + (piece.subs - 1 - piece.sub) / lanes / piece.subs
            ax.add_patch(Rectangle(
                (band.at + piece.start, y), piece.end - piece.start, 1 / lanes / piece.subs, facecolor=colour(plt, piece.group),
                hatch=hatch(piece.kind), edgecolor="black" if piece.shared else "white", linewidth=0.5,
                gid=f"view:{piece.layer}"))
    if m.budget and m.budget > m.allocated:
        ax.add_patch(Rectangle((m.allocated, 0), m.budget - m.allocated, 1, facecolor=UNUSED, edgecolor="none",
                               gid="unused budget"))
        if m.budget - m.allocated > width / 12:  # else the legend says it
            ax.text(m.allocated + (m.budget - m.allocated) / 2, 0.5, f"unused budget\n{mib(m.budget - m.allocated)}",
                    ha="center", va="center", fontsize=8, color="#555555")
    if m.budget and m.budget >= m.allocated:
        ax.axvline(m.budget, color="black", linewidth=1.2, linestyle="--")
    elif m.budget:  # beyond the budget: say so where it ends
        ax.axvline(m.budget, color="red", linewidth=2.5, zorder=5)
        ax.text(m.budget, 0.5, f"budget\n{m.allocated / m.budget:.2f}x it allocated", color="red", fontsize=8,
                ha="center", va="center", zorder=6, bbox={"facecolor": "white", "edgecolor": "red", "linewidth": 0.8})
    ax.set_xlim(0, width)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    step = nice_step(width / 8 / 2**20) * 2**20
    ticks = [i * step for i in range(int(width // step) + 1)]
    ax.set_xticks(ticks, [f"{t / 2**20:,.{0 if step >= 2**20 else 2}f}" for t in ticks])
    ax.set_xlabel(totals_line(m), fontsize=8)
    ax.set_title(m.label, fontsize=9, loc="left")


def _legend(plt, fig, maps: list[MemoryMap]) -> Any:
    from matplotlib.patches import Patch

    seen: dict[tuple, int] = {}
    for m in maps:
        for key, layers in m.groups.items():
            seen[key] = max(seen.get(key, 0), layers)
    handles = [Patch(facecolor=colour(plt, g), hatch=hatch(k), edgecolor="black", linewidth=0.3,
                     label=group_label(g, k, n)) for (g, k), n in seen.items()]
    handles += [Patch(facecolor=PADDING, edgecolor="white", label="padding: buffer bytes outside every view"),
                Patch(facecolor=UNUSED, label="unused budget"),
                Patch(facecolor="white", edgecolor="black", linewidth=0.8, label="outlined: a layer sharing bytes with "
                      "another (lanes filled over the same bytes: groups overlaid)"),
                Patch(facecolor=colour(plt, 0), edgecolor="white", linewidth=1.5, label="stripes in a lane: the group's "
                      "layers interleaved block by block over these bytes")]
    return fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=7.5, frameon=False)


def draw(maps: list[MemoryMap], path: str | None, title: str) -> Any:
    """The figure of ``maps`` (one above the other, one scale), saved as PNG to ``path`` (if given);
    returns it open (the caller closes it: ``pyplot().close(fig)``)."""
    plt = pyplot()
    width = max(m.width for m in maps)
    groups = len({key for m in maps for key in m.groups})
    legend_rows = (groups + 4 + 1) // 2
    fig, axes = plt.subplots(len(maps), 1, figsize=(12, 1.9 * len(maps) + 0.9 + 0.17 * legend_rows), squeeze=False)
    for ax, m in zip(axes[:, 0], maps):
        _draw_map(plt, ax, m, width)
    axes[-1, 0].set_xlabel(f"{axes[-1, 0].get_xlabel()}\nMiB from the first buffer (buffers end to end in the report's "
                           "order; dashed line: the budget, red where exceeded)", fontsize=8)
    if len(maps) == 2:
        (a, what), (b, _) = maps[0].capacity, maps[1].capacity
        title += f"\ncapacity: {maps[0].label.split(':')[0]} {a:,}, {maps[1].label.split(':')[0]} {b:,} {what.split(' (')[0]}"
        title += f"; ratio {b / a:.3f}" if a else ""
    fig.suptitle(title, fontsize=10)
    _legend(plt, fig, maps)
    top = 1 - 0.5 / fig.get_figheight()
    bottom = (0.35 + 0.17 * legend_rows) / fig.get_figheight()
    fig.subplots_adjust(left=0.02, right=0.98, top=top - (0.25 if len(maps) == 2 else 0.1) / fig.get_figheight(),
                        bottom=bottom + 0.55 / fig.get_figheight(), hspace=1.1)
    if path:
        fig.savefig(path, dpi=100)
    return fig


def label(report: dict, path: str, side: str | None = None) -> str:
    """``A: built by the plugin ..., model M, vllm-ascend V (FILE)``: a map's title."""
    from vllm_kv_strategies.report.render import _built_by

    versions = report.get("versions") or {}
    release = f"vllm-ascend {versions['vllm_ascend']}" if versions.get("vllm_ascend") else f"vLLM {versions.get('vllm')}"
    prefix = f"{side}: " if side else ""
    shown = path if len(path) <= 60 else "..." + path[-57:]
    model = os.path.basename(str(report.get("model") or "not recorded").rstrip("/"))  # a local path: its directory
    return f"{prefix}{_built_by(report)}, model {model}, {release} ({shown})"


def check_target(path: str) -> None:
    """:class:`ReportError` where ``path`` cannot be written or names no image format matplotlib
    writes (before anything is read; matplotlib must be importable)."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise ReportError(f"--plot {path}: cannot write a file there")
    pyplot()  # matplotlib importable (one line and exit 2 otherwise)
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix not in formats:
        raise ReportError(f"--plot {path}: name the image format by its suffix ({', '.join(sorted(formats))})")


def plot_reports(items: list[tuple[str, dict]], out: str, budget: int | None = None) -> str:
    """Draw one report's map, or two (A above B), to ``out``; the line saying so."""
    from vllm_kv_strategies.report.memory_map import memory_map

    sides = ["A", "B"] if len(items) == 2 else [None]
    maps = [memory_map(report, label(report, path, side), budget) for side, (path, report) in zip(sides, items)]
    try:
        fig = draw(maps, out, "KV cache memory map" + ("s: A above B, one scale" if len(maps) == 2 else ""))
    except OSError as exc:  # root passes os.access everywhere: /proc, a read-only mount
        raise ReportError(f"--plot {out}: cannot write it: {exc.strerror or exc}") from exc
    pyplot().close(fig)
    return f"memory map{'s' if len(maps) == 2 else ''} written to {out}"
