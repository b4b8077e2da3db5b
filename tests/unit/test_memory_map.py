"""The memory map ``report --plot`` draws (report/memory_map.py: torch-free, no matplotlib: every
cell runs this), read from real reports (test_report's: a 4-layer model of 1 MiB per layer, stock
observed and the plugin's build, both one backing of 4 MiB, a quarter per layer)."""

from __future__ import annotations

import pytest
from test_report import reports  # noqa: F401  (the module-scoped real reports)

from vllm_kv_strategies.report import schema
from vllm_kv_strategies.report.memory_map import extent, memory_map, totals_line

MIB = 2**20


@pytest.mark.parametrize("side", ["stock", "plugin"])
def test_one_backing_a_quarter_per_layer(reports, side):
    report = schema.load(reports[side])
    m = memory_map(report, side)
    [band] = m.bands
    assert (band.id, band.at, band.bytes, band.lanes, band.padding) == (0, 0, 4 * MIB, [0], [])
    assert [(p.layer, p.group, p.kind, p.start, p.end, p.addressed, p.lane, p.subs, p.shared) for p in band.pieces] == [
        (f"model.layers.{i}.self_attn.attn", 0, "full_attention", i * MIB, (i + 1) * MIB, MIB, 0, 1, False) for i in range(4)]
    assert m.groups == {(0, "full_attention"): 4}
    # no budget recorded (build_report without a vllm_config): the width is what was allocated
    assert (m.budget, m.width, m.allocated) == (None, 4 * MIB, 4 * MIB)
    assert totals_line(m) == ("allocated 4.0 MiB in 1 buffer; budget not recorded; required 4.0 MiB; num_blocks 128; "
                              "2,048 token slots (num_blocks x block size; vLLM's capacity not recorded)")
    given = memory_map(report, side, budget=8 * MIB)  # --budget
    assert (given.width, totals_line(given).split("; ")[1]) == (8 * MIB, "budget 8.0 MiB (50.0% of it)")


def test_a_views_extent_counts_its_strides(reports):
    """A block-outer view of 4 blocks of 18,432-byte pages, one 3-layer block apart, spans 4 x 3 pages
    less the 2 after its last: 73,728 bytes addressed over 184,320."""
    view = {"shape": [4, 9216], "stride": [27648, 1], "dtype": "bfloat16", "offset": 4096, "bytes": 73728, "buffer": 0}
    assert extent(view) == (4096, 4096 + (3 * 27648 + 9216) * 2)
    assert extent({**view, "shape": [0, 9216]}) == (4096, 4096)
