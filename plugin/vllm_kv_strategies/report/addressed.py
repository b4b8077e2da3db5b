"""The bytes a view addresses, from its offset, shape and strides (not its
extent): what a report's ``views[].bytes`` counts and ``layers.<name>.aliases``
compares.

A view of a block-outer (cross-layer) layout addresses one page per block,
``block_stride`` apart, and the layers of one tensor interleave there without
sharing a byte: their extents overlap, their bytes do not. A view is reduced
to a :class:`Span`: ``count`` copies, ``period`` bytes apart, of a few runs of
contiguous bytes (the page's parts), which answers both questions exactly
without listing every block. Pure Python; no torch import (the writer passes
``view.shape``, ``view.stride()``, ``view.storage_offset()`` and the element
size).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

#: Inner runs expanded per period at most (a page's parts: K/V, heads); beyond
#: it a period is counted as its extent (never less than the bytes addressed).
MAX_RUNS = 1 << 14


def _merge(runs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, hi in sorted(runs):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _expand(dims: list[tuple[int, int]], run: int) -> tuple[tuple[int, int], ...]:
    """Runs of ``run`` bytes at every combination of ``dims`` ((count, stride bytes))."""
    if prod(n for n, _ in dims) > MAX_RUNS:
        return ((0, sum((n - 1) * s for n, s in dims) + run),)
    starts = [0]
    for n, s in dims:
        starts = [base + i * s for base in starts for i in range(n)]
    return _merge([(b, b + run) for b in starts])


@dataclass(frozen=True)
class Span:
    """Bytes ``offset + i * period + r`` for ``i < count`` and ``r`` in a run
    ``[lo, hi)`` of ``runs`` (every run inside ``[0, period)`` when ``count > 1``)."""

    offset: int
    count: int
    period: int
    runs: tuple[tuple[int, int], ...]

    @property
    def nbytes(self) -> int:
        """Bytes addressed (each once)."""
        return self.count * sum(hi - lo for lo, hi in self.runs)

    @property
    def extent(self) -> tuple[int, int]:
        """[first, last + 1) byte offsets, as the view's extent."""
        if not self.runs:
            return self.offset, self.offset
        return self.offset + self.runs[0][0], self.offset + (self.count - 1) * self.period + self.runs[-1][1]

    def copies(self, lo: int, hi: int) -> range:
        """The copies ``i`` whose bytes may fall in [lo, hi)."""
        if self.count == 1:
            return range(1)
        first = max(0, (lo - self.offset - self.runs[-1][1]) // self.period)
        last = min(self.count - 1, (hi - self.offset - self.runs[0][0]) // self.period)
        return range(first, last + 1)


def span(shape: tuple[int, ...], stride: tuple[int, ...], offset_elements: int, element_size: int) -> Span:
    """The :class:`Span` of a strided view (shape and strides in elements, as torch gives them)."""
    offset = offset_elements * element_size
    if prod(shape) == 0:
        return Span(offset, 1, 0, ())
    dims = sorted((s * element_size, n) for n, s in zip(shape, stride) if n > 1 and s != 0)
    run = element_size
    rest: list[tuple[int, int]] = []
    for s, n in dims:
        if not rest and s <= run:  # contiguous (or overlapping) with the run so far
            run += (n - 1) * s
        else:
            rest.append((n, s))
    if not rest:
        return Span(offset, 1, 0, ((0, run),))
    (count, period), inner = rest[-1], rest[:-1]
    if sum((n - 1) * s for n, s in inner) + run <= period:
        return Span(offset, count, period, _expand(inner, run))
    return Span(offset, 1, 0, _expand(rest, run))


def _meet(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...], shift: int) -> bool:
    """Whether runs ``a`` meet runs ``b`` moved by ``shift`` bytes."""
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0] + shift), min(a[i][1], b[j][1] + shift)
        if lo < hi:
            return True
        if a[i][1] <= b[j][1] + shift:
            i += 1
        else:
            j += 1
    return False


def overlap(a: Span, b: Span) -> bool:
    """Whether two spans of one buffer share a byte."""
    (a_lo, a_hi), (b_lo, b_hi) = a.extent, b.extent
    if not (a.runs and b.runs) or a_hi <= b_lo or b_hi <= a_lo:
        return False
    if a.count > 1 and (a.count, a.period) == (b.count, b.period):
        d, period = b.offset - a.offset, a.period
        k_lo = max(-(a.count - 1), -((period - 1 + d) // period))
        k_hi = min(a.count - 1, (period - 1 - d) // period)
        return any(_meet(a.runs, b.runs, d + k * period) for k in range(k_lo, k_hi + 1))
    if a.count < b.count:
        a, b = b, a
    a_lo, a_hi = a.extent
    # b has fewer copies: each of its copies against a's copies in range.
    for j in b.copies(a_lo, a_hi):
        base = b.offset + j * b.period
        lo, hi = base + b.runs[0][0], base + b.runs[-1][1]
        near = a.copies(lo, hi)
        if len(near) > 4 and len(b.runs) == 1:
            return True  # one contiguous run holding a whole copy of a (the third of five)
        if len(near) > MAX_RUNS:
            return True  # not worth listing: counted as sharing (never a missed alias)
        if any(_meet(a.runs, b.runs, base - a.offset - i * a.period) for i in near):
            return True
    return False
