"""vllm-ascend 0.30 (cell ascend-0.30.0, which pins matplotlib: requirements/plot/ascend-0.30.0.txt):
``report STOCK PLUGIN --plot FILE.png`` on the reports of the Ascend benchmark's multi-group models
(``benchmarks/ascend_memory.py --reports DIR``: gpt-oss-like, 36 layers, sliding 128 / full; Gemma-3-like,
62 layers, 5 sliding 1024 : 1 full), each side built end to end by the worker's real budget step and the
runner (tests/ascend/worker_030.py), at a device budget of 1 GiB.

The picture is read back: the PNG's size, and the figure :func:`plot.draw` returns: one band per buffer
of each report (54 / 114 private buffers on stock's side, one overlaid backing on the plugin's), the
views' lanes, the legend's groups, the totals under each map and the capacity ratio over them.
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

from vllm_kv_strategies.__main__ import main
from vllm_kv_strategies.report import schema
from vllm_kv_strategies.report.memory_map import memory_map
from vllm_kv_strategies.report.plot import draw, pyplot

REPO = Path(__file__).resolve().parents[2]
BUDGET = 1 << 30
MIB = 2**20


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("ascend_memory", REPO / "benchmarks" / "ascend_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    names = [n for n in bench.MULTI_GROUP if n.startswith(("gpt-oss", "gemma-3"))]
    return bench.write_reports(BUDGET, str(tmp_path_factory.mktemp("reports")), names)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def gids(ax, prefix: str) -> list[str]:
    return [p.get_gid() for p in ax.patches if (p.get_gid() or "").startswith(prefix)]


#: model -> (stock's buffers, num_blocks, token slots; the plugin's; the legend's groups; the PNG's height:
#: 100 px per inch of 12 x (1.9 per map + 0.9 + 0.17 per legend row of two entries))
EXPECTED = {
    "gpt-oss-120b-like": ((54, 113, 14_464), (1, 227, 29_056),
                          ["group 0: sliding_window (18 layers)", "group 1: full_attention (18 layers)"], 521),
    "gemma-3-27b-like": ((114, 16, 2_048), (1, 102, 13_056),
                         [*(f"group {g}: sliding_window ({9 if g < 4 else 8} layers)" for g in range(6)),
                          "group 6: full_attention (10 layers)"], 572),
}


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_the_maps_of_stock_and_the_plugin(reports, model, tmp_path, capsys):
    (stock_buffers, stock_blocks, stock_slots), (plugin_buffers, plugin_blocks, plugin_slots), legend, height = EXPECTED[model]
    stock, plugin = (schema.load(reports[model][side]) for side in ("stock", "plugin"))
    png = tmp_path / "map.png"
    assert main(["report", reports[model]["stock"], reports[model]["plugin"], "--plot", str(png)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"memory maps written to {png}"
    assert png_size(png) == (1200, height)

    maps = [memory_map(stock, "stock"), memory_map(plugin, "plugin")]
    fig = draw(maps, None, model)
    try:
        stock_ax, plugin_ax = fig.axes
        assert gids(stock_ax, "buffer:") == [f"buffer:{i}" for i in range(stock_buffers)]
        assert gids(plugin_ax, "buffer:") == [f"buffer:{i}" for i in range(plugin_buffers)]
        # every layer's views drawn: stock's in private buffers (one lane), the plugin's overlaid on one backing
        for ax, report in ((stock_ax, stock), (plugin_ax, plugin)):
            assert sorted(gids(ax, "view:")) == sorted(f"view:{n}" for n, e in report["layers"].items() for _ in e["views"])
            assert ax.get_xlim() == (0, BUDGET)  # the same scale: the device budget
        assert {len(b.lanes) for b in maps[0].bands} == {1}
        assert maps[1].bands[0].lanes == list(range(len(legend)))  # every group overlaid on the backing
        assert [t.get_text() for t in fig.legends[0].get_texts()][:len(legend)] == legend
        assert stock_ax.get_xlabel() == (
            f"allocated {maps[0].allocated / MIB:,.1f} MiB in {stock_buffers} buffers; budget 1,024.0 MiB "
            f"({maps[0].allocated / BUDGET:.1%} of it); required {stock['totals']['bytes_required'] / MIB:,.1f} MiB; "
            f"num_blocks {stock_blocks}; {stock_slots:,} token slots (num_blocks x block size; vLLM's capacity not recorded)")
        assert plugin_ax.get_xlabel().startswith(
            f"allocated {plugin['totals']['bytes_allocated'] / MIB:,.1f} MiB in 1 buffer; budget 1,024.0 MiB")
        assert f"; num_blocks {plugin_blocks}; {plugin_slots:,} token slots" in plugin_ax.get_xlabel()
        assert plugin["totals"]["bytes_allocated"] == plugin["totals"]["bytes_required"] <= BUDGET
        assert fig._suptitle.get_text() == (f"{model}\ncapacity: stock {stock_slots:,}, plugin {plugin_slots:,} "
                                            f"token slots; ratio {plugin_slots / stock_slots:.3f}")
    finally:
        pyplot().close(fig)


def test_one_report_and_the_budget_given(reports, tmp_path, capsys):
    """One report's map; ``--budget`` widens it past what the report records, the rest drawn unused."""
    png = tmp_path / "one.png"
    path = reports["gpt-oss-120b-like"]["plugin"]
    assert main(["report", path, "--plot", str(png), "--budget", str(2 * BUDGET)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"memory map written to {png}"
    assert png_size(png) == (1200, 331)  # one map; 2 groups + 4 legend entries, two to a row
    m = memory_map(schema.load(path), "plugin", 2 * BUDGET)
    fig = draw([m], None, "one")
    try:
        [ax] = fig.axes
        assert gids(ax, "unused budget") == ["unused budget"]
        assert ax.get_xlim() == (0, 2 * BUDGET)
        assert "unused budget\n1,026.5 MiB" in [t.get_text() for t in ax.texts]
    finally:
        pyplot().close(fig)
    # a budget below what was allocated: the map is as wide as the allocation, the budget a red line, said
    fig = draw([memory_map(schema.load(path), "plugin", BUDGET // 2)], None, "over")
    try:
        [ax] = fig.axes
        assert ax.get_xlim() == (0, m.allocated) and gids(ax, "unused budget") == []
        [line] = ax.get_lines()
        assert (list(line.get_xdata()), line.get_color()) == ([BUDGET // 2] * 2, "red")
        assert f"budget\n{m.allocated / (BUDGET // 2):.2f}x it allocated" in [t.get_text() for t in ax.texts]
    finally:
        pyplot().close(fig)
