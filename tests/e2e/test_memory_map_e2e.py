"""``report --plot`` on the reports of the demo's model served by vLLM on the CPU (cell upstream-0.32.0,
which pins matplotlib: requirements/plot/upstream-0.32.0.txt).

The demo's tiny Llama (tools/tiny_models.py ``llama``: 4 full-attention layers) with the demo's
settings (``VLLM_CPU_KVCACHE_SPACE=1``, ``--max-model-len 1024``) run by vLLM's ``LLM`` with its
EngineCore and worker processes (tests/e2e/run_generate.py), once observed (``KV_STRATEGIES=observe``:
stock builds) and once with the plugin on, each writing its report. Then
``python -m vllm_kv_strategies report REPORT --plot`` and ``report STOCK PLUGIN --plot`` as a user
runs them; the pictures are read back (PNG size; the figure: one band for vLLM's one backing buffer,
the budget vLLM's CPU platform gives as the width, the legend's group, the totals).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tools"))

pytestmark = pytest.mark.e2e
TIMEOUT = float(os.environ.get("E2E_RUN_TIMEOUT", "900"))
GIB = 1 << 30


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """{side: its report file} of the demo's model served stock (observed) and with the plugin on."""
    import tiny_models

    tmp = tmp_path_factory.mktemp("demo")
    tiny_models.build("llama", str(tmp / "tiny-llama"))
    out = {}
    for side, mode in (("stock", "observe"), ("plugin", "on")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KV_STRATEGIES")}
        env.update(HF_HUB_OFFLINE="1", KV_STRATEGIES=mode, KV_STRATEGIES_REPORT=str(tmp / side), VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_ENABLE_V1_MULTIPROCESSING="1")
        run = subprocess.run([sys.executable, str(HERE / "run_generate.py"), str(tmp / "tiny-llama"), str(tmp / f"{side}.json"),
                              "--max-tokens", "2", "--max-model-len", "1024"],
                             env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=str(tmp))
        assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
        out[side] = str(tmp / side / "kv_cache_report.latest.rank0.json")
    return out


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", *args], capture_output=True, text=True,
                          timeout=120)


def test_the_demo_models_map_and_stock_against_the_plugin(served, tmp_path):
    from vllm_kv_strategies.report import schema
    from vllm_kv_strategies.report.memory_map import memory_map
    from vllm_kv_strategies.report.plot import draw, pyplot

    stock, plugin = schema.load(served["stock"]), schema.load(served["plugin"])
    for r in (stock, plugin):  # vLLM's CPU platform sets the budget from VLLM_CPU_KVCACHE_SPACE: recorded
        assert r["kv_cache"]["budget_bytes"] == GIB
        assert r["totals"]["raw_buffers"] == 1 and r["totals"]["layers_per_kind"] == {"full_attention": 4}
    assert (stock["built_by"], plugin["built_by"]) == ("stock_observed", "vllm_checked")

    one, two = tmp_path / "one.png", tmp_path / "two.png"
    shown = report(served["plugin"], "--plot", str(one))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == f"memory map written to {one}"
    assert png_size(one) == (1200, 331)  # one map; 1 group + 4 legend entries, two to a row
    shown = report(served["stock"], served["plugin"], "--plot", str(two))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == f"memory maps written to {two}"
    assert png_size(two) == (1200, 521)

    maps = [memory_map(stock, "A"), memory_map(plugin, "B")]
    fig = draw(maps, None, "demo")
    try:
        for ax, m, r in zip(fig.axes, maps, (stock, plugin)):
            assert [p.get_gid() for p in ax.patches if p.get_gid().startswith("buffer:")] == ["buffer:0"]
            assert sorted(p.get_gid() for p in ax.patches if p.get_gid().startswith("view:")) == sorted(
                f"view:{name}" for name, layer in r["layers"].items() for _ in layer["views"])
            assert ax.get_xlim() == (0, GIB)
            # vLLM's one backing of the budget, a quarter per layer (its views address all of it: no stripes, no sharing)
            [band] = m.bands
            assert [(p.layer, p.start, p.end, p.addressed, p.lane, p.subs, p.shared) for p in band.pieces] == [
                (f"model.layers.{i}.self_attn.attn", i * GIB // 4, (i + 1) * GIB // 4, GIB // 4, 0, 1, False)
                for i in range(4)]
            assert band.padding == []
            t = r["totals"]
            assert ax.get_xlabel().startswith(
                f"allocated {t['bytes_allocated'] / 2**20:,.1f} MiB in 1 buffer; budget 1,024.0 MiB "
                f"({t['bytes_allocated'] / GIB:.1%} of it); required {t['bytes_required'] / 2**20:,.1f} MiB; "
                f"num_blocks {t['num_blocks']:,}; {t['tokens']:,} tokens (vLLM's capacity), "
                f"max concurrency {t['max_concurrency']:.2f}x")
        assert [t.get_text() for t in fig.legends[0].get_texts()][0] == "group 0: full_attention (4 layers)"
        tokens = stock["totals"]["tokens"]
        assert tokens == plugin["totals"]["tokens"] > 0
        assert fig._suptitle.get_text() == f"demo\ncapacity: A {tokens:,}, B {tokens:,} tokens; ratio 1.000"
    finally:
        pyplot().close(fig)
