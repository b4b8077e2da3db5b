"""Raw buffers that hold several page parts: a release may co-allocate parts
that belong together (vllm-ascend 0.23 puts the sparse indexer key and its
scale in one allocation, so the KV transfer engines register one range).
Which parts belong together is the strategy's (``PagePart.group``); whether a
release co-allocates a group is a release fact
(:func:`vllm_kv_strategies.platforms.ascend.facts.coallocated_groups`)."""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.strategies import PagePart


def coallocated_runs(parts: tuple[PagePart, ...], groups: frozenset[str]) -> tuple[int, ...]:
    """Consecutive parts of one group in ``groups`` share a raw buffer (the
    release co-allocates them, e.g. vllm-ascend 0.23's indexer key and scale);
    every other part has its own. Returns the parts per buffer, in order."""
    runs: list[int] = []
    for i, p in enumerate(parts):
        if i and p.group is not None and p.group in groups and p.group == parts[i - 1].group:
            runs[-1] += 1
        else:
            runs.append(1)
    return tuple(runs)


def buffer_slices(layout: Any) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """The raw buffers of ``layout``: (bytes, ((offset, bytes) of each part it
    holds)). In a co-allocated buffer each part starts at the end of the one
    before, rounded up to its dtype's size (as vllm-ascend 0.23's
    ``_allocate_sparse_c8_indexer_tensors`` places the indexer scale); a
    single layout is one buffer viewed whole."""
    if layout.single or not layout.runs:
        return [(n, ((0, n),)) for n in layout.buffer_bytes]
    parts = layout.layers[0].parts
    out, i = [], 0
    for run in layout.runs:
        slices, end = [], 0
        for j in range(i, i + run):
            size = parts[j].dtype.itemsize
            start = -(-end // size) * size
            slices.append((start, layout.buffer_bytes[j]))
            end = start + layout.buffer_bytes[j]
        out.append((end, tuple(slices)))
        i += run
    return out
