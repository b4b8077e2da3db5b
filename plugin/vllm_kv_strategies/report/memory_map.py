"""One worker's KV cache as a memory map: what :mod:`.plot` draws, from a report (torch-free).

The device budget is the map's width; the buffers lie left to right in the order the report
lists them (their device addresses are not recorded), each a band of its bytes. Inside a band
each KV cache group holding views there has a lane, in which each view of its layers covers
its extent (from its offset, shape, strides and dtype): groups overlaid on the same bytes
(vLLM's hybrid layout: a tensor per layer slot, one layer of each group in it) show as lanes
filled over the same range, and layers of one group interleaved block by block over the same
range (vLLM's one backing, a block holding every layer's page) as stripes of its lane; a layer whose views address a byte another layer's views address
(the report's ``aliases``) is ``shared``. Bytes of a buffer
outside every view's extent are padding; the budget left over is unused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

#: Element sizes of the dtypes reports name (torch's names without ``torch.``).
DTYPE_BYTES = {
    "float64": 8, "int64": 8, "uint64": 8, "complex64": 8, "float32": 4, "int32": 4, "uint32": 4,
    "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1,
}


def element_size(dtype: str) -> int:
    """Bytes per element of ``dtype`` (the float8 / float4 families: 1)."""
    return DTYPE_BYTES.get(dtype, 1)


@dataclass
class Piece:
    """One view of ``layer`` in its band: bytes ``start``-``end`` of the band's buffer (its extent)."""

    layer: str
    group: int | None
    kind: str | None
    start: int
    end: int
    addressed: int
    lane: int = 0
    shared: bool = False
    sub: int = 0  #: its layer's stripe in the lane, where the group's layers interleave in these bytes
    subs: int = 1


@dataclass
class Band:
    """A buffer: ``bytes`` long, drawn from ``at`` (bytes from the map's left edge)."""

    id: int
    at: int
    bytes: int
    pieces: list[Piece] = field(default_factory=list)
    lanes: list[int | None] = field(default_factory=list)  #: the KV cache groups with views here, a lane each

    @property
    def padding(self) -> list[tuple[int, int]]:
        """Byte ranges of the buffer outside every view's extent."""
        gaps, at = [], 0
        for start, end in sorted((p.start, p.end) for p in self.pieces):
            if start > at:
                gaps.append((at, start))
            at = max(at, end)
        if at < self.bytes:
            gaps.append((at, self.bytes))
        return gaps


@dataclass
class MemoryMap:
    """A report's KV cache laid out for drawing (:func:`memory_map`)."""

    label: str
    budget: int | None
    bands: list[Band]
    totals: dict
    groups: dict[tuple[int | None, str | None], int]  #: (group, kind) -> layers

    @property
    def allocated(self) -> int:
        return sum(b.bytes for b in self.bands)

    @property
    def width(self) -> int:
        """The map's width in bytes: the budget, or what was allocated where that is more (or not known)."""
        return max(self.budget or 0, self.allocated)

    @property
    def capacity(self) -> tuple[int, str]:
        """(tokens, what they are): vLLM's capacity where the report knows it, else the token slots."""
        if self.totals.get("tokens") is not None:
            return self.totals["tokens"], "tokens (vLLM's capacity)"
        return self.totals["token_slots"], "token slots (num_blocks x block size; vLLM's capacity not recorded)"


def extent(view: dict) -> tuple[int, int]:
    """Byte range ``[start, end)`` of the buffer that ``view`` spans."""
    size = element_size(view["dtype"])
    if any(n == 0 for n in view["shape"]):
        return view["offset"], view["offset"]
    last = sum((n - 1) * s for n, s in zip(view["shape"], view["stride"]))
    return view["offset"], view["offset"] + (last + 1) * size


def budget_of(report: dict) -> int | None:
    """The KV cache budget a report records (``kv_cache.budget_bytes``), else None."""
    return (report.get("kv_cache") or {}).get("budget_bytes")


def memory_map(report: dict, label: str, budget: int | None = None) -> MemoryMap:
    """The map of ``report`` (schema 3's form, :func:`.schema.load`); ``budget`` in bytes
    overrides the report's own (:func:`budget_of`)."""
    bands: dict[int, Band] = {}
    at = 0
    for buffer in report["buffers"]:
        bands[buffer["id"]] = Band(buffer["id"], at, buffer["bytes"])
        at += buffer["bytes"]
    groups: dict[tuple[int | None, str | None], int] = {}
    for name, layer in report["layers"].items():
        key = (layer.get("group"), layer.get("kind"))
        groups[key] = groups.get(key, 0) + 1
        for view in layer["views"]:
            band = bands[view["buffer"]]
            start, end = extent(view)
            band.pieces.append(Piece(name, key[0], key[1], start, min(end, band.bytes), view["bytes"],
                                     shared=bool(layer.get("aliases"))))
    for band in bands.values():  # a lane per KV cache group holding views in the buffer
        band.lanes = sorted({p.group for p in band.pieces}, key=lambda g: (g is None, g or 0))
        for piece in band.pieces:
            piece.lane = band.lanes.index(piece.group)
        for group in band.lanes:  # layers of one group over the same range (block by block): a stripe each
            pieces = [p for p in band.pieces if p.group == group]
            layers = list(dict.fromkeys(p.layer for p in pieces))
            if any(a.layer != b.layer and a.start < b.end and b.start < a.end for a, b in combinations(pieces, 2)):
                for piece in pieces:
                    piece.sub, piece.subs = layers.index(piece.layer), len(layers)
    return MemoryMap(label, budget if budget is not None else budget_of(report), list(bands.values()),
                     report["totals"], dict(sorted(groups.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0))))


def mib(n: int | float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def totals_line(m: MemoryMap) -> str:
    """``allocated A of budget B (P%) in N buffers; required R; num_blocks K; capacity T tokens``."""
    t = m.totals
    budget = f"budget {mib(m.budget)} ({m.allocated / m.budget:.1%} of it)" if m.budget else "budget not recorded"
    tokens, what = m.capacity
    concurrency = f", max concurrency {t['max_concurrency']:.2f}x" if t.get("max_concurrency") is not None else ""
    return (f"allocated {mib(m.allocated)} in {len(m.bands)} buffer{'s' if len(m.bands) != 1 else ''}; {budget}; "
            f"required {mib(t['bytes_required'])}; num_blocks {t['num_blocks']:,}; {tokens:,} {what}{concurrency}")
