"""``plan --sweep``: every combination planned by vLLM's planner, one table,
``--json`` with all of it, ``--plot`` (matplotlib, optional), a progress line
per combination, vLLM's refusals in its words, bad sweeps as one line.

The tiny Llama of test_plan (8 layers, 2 KV heads of 64, bfloat16, this
CPU build's 128-token blocks): a page is 128 x 2 x heads x 64 x 2 bytes, so
16 MiB hold 32 blocks (4,096 tokens) at TP 1 and 64 at TP 2 (one KV head per rank).
vLLM keeps one block back (its null block): 31 x 128 = 3,968 tokens cannot
serve one request of 4,096, which it refuses at TP 1.
"""

from __future__ import annotations

import json
import struct
import sys

import pytest
from test_plan import llama

from vllm_kv_strategies.deploy import cli

BUDGET = 16 * 2**20


def blocks(tp: int) -> int:
    return BUDGET // (8 * 128 * 2 * (2 // tp) * 64 * 2)


def test_sweep_plans_every_combination(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    code = cli.run([str(llama(tmp_path)), "--kv-cache-memory-bytes", str(BUDGET), "--max-model-len", "1024",
                    "--sweep", "tensor-parallel-size=1,2", "--sweep", "max_model_len=2048,4096", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (blocks(1), blocks(2)) == (32, 64)
    data = json.loads(out.read_text())
    assert data["kind"] == "plan-sweep"
    assert data["swept"] == {"tensor-parallel-size": ["1", "2"], "max-model-len": ["2048", "4096"]}
    got = [(r["values"]["tensor-parallel-size"], r["values"]["max-model-len"], r["num_blocks"], r["tokens"],
            r["max_concurrency"], r["refusal"] is not None) for r in data["combinations"]]
    assert got == [("1", "2048", 32, 4096, 2.0, False), ("1", "4096", None, None, None, True),
                   ("2", "2048", 64, 8192, 4.0, False), ("2", "4096", 64, 8192, 2.0, False)]
    refusal = data["combinations"][1]["refusal"]
    assert refusal.startswith("To serve at least one request with the model's max seq len (4096)")
    assert "the estimated maximum model length is 3968." in refusal
    assert "plan: note: the sweep replaces --max-model-len 1024 in each combination\n" in captured.err
    for i, (tp, length) in enumerate([(1, 2048), (1, 4096), (2, 2048), (2, 4096)], 1):
        assert f"plan: sweep {i} of 4: tensor-parallel-size={tp}, max-model-len={length} ..." in captured.err
    lines = captured.out.splitlines()
    assert lines[0] == f"sweep: {tmp_path / 'model'}, 4 combinations of tensor-parallel-size, max-model-len"
    assert "  1                    1          2048          32        4,096            2.00x  planned" in lines
    assert "  2                    1          4096           -            -                -  refuses (2)" in lines
    assert f"(2) {refusal}" in lines


@pytest.mark.parametrize(("argv", "combination", "given"), [
    (["M", "--max-model-len", "1024", "-tp", "2"], ["M", "-tp", "2", "--max-model-len", "2048"], ["--max-model-len 1024"]),
    (["M", "--max_model_len=1024", "--sweep", "max-model-len=1,2"], ["M", "--max-model-len", "2048"],
     ["--max_model_len=1024"]),
    (["M", "--enforce-eager"], ["M", "--enforce-eager", "--max-model-len", "2048"], []),
])
def test_the_arguments_a_sweep_replaces(argv, combination, given):
    """Each combination's command line (plan's own options and the swept argument's given value
    dropped, the combination's value added), and what plan notes the sweep replaces."""
    from vllm_kv_strategies.deploy import sweep

    assert sweep.combination_argv(argv, [("max-model-len", ["2048"])], ("2048",)) == combination
    assert sweep.replaced(argv, [("max-model-len", ["2048"])]) == given


def test_plot_is_drawn_with_matplotlib(tmp_path, capsys):
    """The picture (matplotlib: pinned in the upstream-0.32.0 cell, requirements/plot/) read back: the PNG's
    size, and the figure :func:`sweep.plot` draws from the sweep's rows: two panels, their titles and axis,
    a line per value of the second swept argument through exactly the planned points (TP 1 at 2,048 is
    refused: not drawn)."""
    pytest.importorskip("matplotlib", reason="matplotlib (the optional extra 'plot') is pinned in the upstream-0.32.0 "
                        "cell only (requirements/plot/)")
    from vllm_kv_strategies.deploy import sweep

    png, out = tmp_path / "sweep.png", tmp_path / "sweep.json"
    code = cli.run([str(llama(tmp_path)), "--kv-cache-memory-bytes", str(BUDGET), "--sweep", "tensor-parallel-size=1,2",
                    "--sweep", "max-model-len=1024,4096", "--plot", str(png), "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1210, 462)  # 11 x 4.2 inches at 110 dpi
    rows = json.loads(out.read_text())["combinations"]
    plt = sweep._matplotlib()
    fig = sweep.plot(plt, str(tmp_path / "again.png"), "model", [("tensor-parallel-size", ["1", "2"]),
                                                                 ("max-model-len", ["1024", "4096"])], rows)
    try:
        tokens_ax, concurrency_ax = fig.axes
        assert [ax.get_title() for ax in fig.axes] == ["KV cache size (tokens)", "maximum concurrency (x)"]
        assert {ax.get_xlabel() for ax in fig.axes} == {"tensor-parallel-size"}
        assert [t.get_text() for t in tokens_ax.get_xticklabels()] == ["1", "2"]
        lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in tokens_ax.get_lines()}
        assert lines == {"max-model-len=1024": ([0, 1], [4096, 8192]), "max-model-len=4096": ([1], [8192])}
        lines = {line.get_label(): list(line.get_ydata()) for line in concurrency_ax.get_lines()}
        assert lines == {"max-model-len=1024": [4.0, 8.0], "max-model-len=4096": [2.0]}
        assert [t.get_text() for t in tokens_ax.get_legend().get_texts()] == ["max-model-len=1024", "max-model-len=4096"]
        assert fig._suptitle.get_text() == "plan --sweep: model (vLLM's planner; refused combinations not drawn)"
    finally:
        plt.close(fig)


def test_plot_without_matplotlib_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it raises ImportError
    code = cli.run([str(llama(tmp_path)), "--kv-cache-memory-bytes", str(BUDGET), "--sweep",
                    "tensor-parallel-size=1,2", "--plot", str(tmp_path / "sweep.png")])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err.splitlines()[-1] == ("plan: error: --plot needs matplotlib, which is not installed here (pip "
                                             "install 'vllm-kv-strategies[plot]', or pip install matplotlib); the table "
                                             "and --json need nothing more")


@pytest.mark.parametrize("args, message", [
    (["--sweep", "no-such-arg=1,2"], "--sweep no-such-arg=1,2: no-such-arg is not an engine argument of this vLLM "
                                     "(--help=<word> lists them)"),
    (["--sweep", "tensor-parallel-size"], "--sweep tensor-parallel-size: give ARG=V1,V2,... (e.g. --sweep "
                                          "tensor-parallel-size=1,2,4,8)"),
    (["--sweep", "max-model-len=1,2", "--sweep", "max-model-len=3"], "--sweep max-model-len=3: max-model-len is "
                                                                     "swept twice"),
    (["--plot", "x.png"], "--plot x.png: draws a sweep (give --sweep ARG=V1,V2,... too), or on vllm-ascend the stock "
                          "and plugin sides' memory maps"),
])
def test_bad_sweeps_are_one_line(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code = cli.run([str(llama(tmp_path)), "--kv-cache-memory-bytes", str(BUDGET), *args])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err.splitlines()[-1] == f"plan: error: {message}"

