"""The bytes a strided view addresses (``report/addressed.py``), against the bytes enumerated
one by one: any shape, strides (zero, overlapping, interleaved) and offsets of views into
one buffer; the count of each and whether two share one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_kv_strategies.report.addressed import overlap, span


def enumerate_bytes(shape, stride, offset, size) -> set[int]:
    starts = {offset}
    for n, s in zip(shape, stride):
        starts = {b + i * s for b in starts for i in range(n)}
    return {e * size + k for e in starts for k in range(size)} if all(shape) else set()


dims = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 40)), min_size=0, max_size=4)
views = st.tuples(dims, st.integers(0, 64), st.sampled_from([1, 2, 4]))


def layout(view):
    dims_, offset, size = view
    shape = tuple(n for n, _ in dims_)
    stride = tuple(s for _, s in dims_)
    return shape, stride, offset, size


@settings(max_examples=400, deadline=None)
@given(views, views)
def test_bytes_and_overlap_equal_the_bytes_enumerated(a, b):
    la, lb = layout(a), layout(b)
    bytes_a, bytes_b = enumerate_bytes(*la), enumerate_bytes(*lb)
    sa, sb = span(*la), span(*lb)
    assert (sa.nbytes, sb.nbytes) == (len(bytes_a), len(bytes_b))
    assert overlap(sa, sb) == overlap(sb, sa) == bool(bytes_a & bytes_b), (la, lb)


def test_block_outer_pages_of_27_layers():
    """27 MLA layers, 4 blocks of 18,432-byte pages, block stride 27 pages (bf16 elements)."""
    page = 18432 // 2
    views = [span((4, 1, 16, 576), (27 * page, page, 576, 1), i * page, 2) for i in range(27)]
    assert {v.nbytes for v in views} == {73728}
    assert views[0].extent == (0, 1511424)
    assert not any(overlap(views[i], views[j]) for i in range(27) for j in range(27) if i != j)
    whole = span((4 * 27 * page,), (1,), 0, 2)
    assert all(overlap(whole, v) and overlap(v, whole) for v in views)
