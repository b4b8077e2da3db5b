"""``plan`` where vllm-ascend is installed: each side planned and built by its own code.

``tests/ascend/plan_stubbed.py`` runs the command in a process of its own with the NPU modules
stubbed (on an Ascend host ``torch_npu`` is real). Each side's config comes from the cell's own
engine config, ``NPUModelRunner.get_kv_cache_spec`` and planner; its bytes are the storages its
own ``initialize_kv_cache`` bound on the meta device. The numbers asserted are computed here
from the published configs (``tests/deploy/configs``), not read back from plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import runner_factory as rf
from conftest import ASCEND_RELEASE

HERE = Path(__file__).parent
CONFIGS = HERE.parent / "deploy" / "configs"
RELEASE = tuple(int(x) for x in ASCEND_RELEASE.split(".")[:2])


def plan(tmp_path, model: str, *args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / "plan.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "plugin"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(HERE / "plan_stubbed.py"), str(CONFIGS / model), *args, "--json", str(out)],
                            capture_output=True, text=True, timeout=300, env=env)
    return result, json.loads(out.read_text()) if out.exists() else None


def test_dense_model_both_sides_allocate_the_config(tmp_path):
    """Llama-3-70B at TP 4 (80 layers, 8 KV heads / 4 = 2 per rank, head 128, bf16, block 128):
    a block is 80 x 2 (K, V) x 128 tokens x 2 heads x 128 x 2 bytes = 10,485,760 bytes, so a
    4,000,000,000-byte budget plans 381 blocks (vLLM: budget // bytes per block); stock and the
    plugin each allocate exactly the config's 80 tensors of 381 pages."""
    result, data = plan(tmp_path, "llama-3-70b", "--tensor-parallel-size", "4", "--max-model-len", "4096",
                        "--kv-cache-memory-bytes", "4000000000")
    assert result.returncode == 0, result.stderr[-2000:]
    assert data["num_blocks"] == 381 and [r["num_blocks"] for r in data["ranks"]] == [381] * 4
    required = 381 * 10_485_760
    assert data["ranks"][0]["bytes_required"] == required
    for side in ("stock", "plugin"):
        assert data["ascend"][side]["num_blocks"] == 381
        assert data["ascend"][side]["bytes_allocated_per_worker"] == [required] * 4
    assert data["ascend"]["plugin"]["plugin_refusal"] is None
    assert (data["stock_bytes_per_worker"], data["plugin"]) == ([required] * 4, None)  # upstream's per-worker sides: none here
    assert "allocates 3,995,074,560 bytes per worker = 1.00 x the KV cache memory" in result.stdout


@pytest.mark.skipif(RELEASE < (0, 13), reason="vLLM 0.11's Qwen3-Next module imports its triton flash-linear-attention "
                    "kernels at import, which this CPU environment's triton lacks (vllm-ascend hosts have triton-ascend)")
@pytest.mark.skipif(RELEASE >= (0, 30), reason="vllm-ascend 0.30.0rc2's FusedMoE patch passes n_shared_experts, which "
                    "the paired vLLM 0.30.0 wheel's RoutedExperts does not take: no MoE model builds in this cell")
def test_qwen3_next_hybrid_stock_against_plugin(tmp_path):
    """Qwen3-Next-80B-A3B at TP 4 (12 full attention layers of 2 / 4 -> 1 KV head x 256, 36 GDN
    layers): on 0.13 stock sizes the attention block to 384 tokens and allocates 2x its config
    (vllm-project/vllm-ascend#3368); with the plugin's sizing (block 512, a K page = the ssm
    state) the plugin allocates its config exactly. From 0.18 stock shares the hybrid tensors
    and both sides allocate the config. Each side's config equals the one the cell's planner
    builds for the zoo's Qwen3-Next (``runner_factory.qwen3_next``) at the same num_blocks."""
    budget = 8_000_000_000
    result, data = plan(tmp_path, "qwen3-next-80b-a3b", "--tensor-parallel-size", "4", "--max-model-len", "4096",
                        "--kv-cache-memory-bytes", str(budget))
    assert result.returncode == 0, result.stderr[-2000:]
    stock, plugin = data["ascend"]["stock"], data["ascend"]["plugin"]
    sized = RELEASE < (0, 18)
    assert (stock["block_sizes"][0], plugin["block_sizes"][0]) == ((384, 512) if sized else (512, 512))
    for side, plugin_sizing in ((stock, False), (plugin, True)):
        zoo = rf.qwen3_next(tp=4, num_blocks=side["num_blocks"], max_model_len=4096, plugin_sizing=plugin_sizing and sized)
        page = zoo.kv_cache_config.kv_cache_tensors[0].size // side["num_blocks"]
        assert side["num_blocks"] == budget // (page * len(zoo.kv_cache_config.kv_cache_tensors))
        required = sum(t.size for t in zoo.kv_cache_config.kv_cache_tensors)
        factor = 2 if side is stock and RELEASE[:2] == (0, 13) else 1
        assert side["bytes_allocated_per_worker"] == [factor * required] * 4
        if side is plugin:  # plan's ranks are the plugin's side: the zoo's tensors, layer for layer
            assert [(t["size"], sorted(t["layers"])) for t in data["ranks"][0]["tensors"]] == [
                (t.size, sorted(t.shared_by)) for t in zoo.kv_cache_config.kv_cache_tensors]
    assert [len(t["layers"]) for t in data["ranks"][0]["tensors"]] == [4] * 12  # 1 attention + 3 GDN layers each
    if sized:
        assert "beyond the budget: out of memory at KV cache initialisation" in result.stdout
    assert plugin["plugin_refusal"] is None


@pytest.mark.skipif(RELEASE < (0, 30), reason="the multi-group budget scale is vllm-ascend 0.30's worker step")
def test_gemma3_multi_group_budget_on_030(tmp_path):
    """Gemma-3-27B (62 layers, 5 sliding : 1 full, 16 KV heads x 128, bf16; 7 KV cache groups of
    9, 9, 9, 9, 8, 8, 10 layers) on a 64 GiB device at max model len 32,768: stock's worker
    scales the budget by the largest group's page bytes over all layers' (10 / 62 = 0.1613), and
    vLLM refuses the scaled budget; with the plugin the budget stays whole and vLLM's overlay fits
    in it. With ``--kv-cache-memory-bytes`` stock does not scale and its private buffers need
    every layer's page per block: 62 / 10 = 6.2x the config."""
    result, data = plan(tmp_path, "gemma-3-27b", "--max-model-len", "32768", "--device-memory-gib", "64")
    assert result.returncode == 0, result.stderr[-2000:]
    stock, plugin = data["ascend"]["stock"], data["ascend"]["plugin"]
    assert round(stock["budget_scale"], 4) == round(10 / 62, 4) and plugin["budget_scale"] == 1.0
    assert "estimated maximum model length is" in stock["refusal"] and stock["num_blocks"] is None
    page = 2 * 128 * 16 * 128 * 2  # one layer's K and V page, bytes
    assert plugin["num_blocks"] == plugin["budget_bytes_per_worker"] // (10 * page)
    assert plugin["bytes_allocated_per_worker"] == [plugin["num_blocks"] * 10 * page]

    result, data = plan(tmp_path, "gemma-3-27b", "--max-model-len", "32768", "--kv-cache-memory-bytes", "8000000000")
    assert result.returncode == 0, result.stderr[-2000:]
    stock, plugin = data["ascend"]["stock"], data["ascend"]["plugin"]
    assert stock["num_blocks"] == plugin["num_blocks"] == 8_000_000_000 // (10 * page)
    assert stock["bytes_allocated_per_worker"] == [stock["num_blocks"] * 62 * page]
    assert plugin["bytes_allocated_per_worker"] == [plugin["num_blocks"] * 10 * page]


def test_plan_bad_input_is_one_line(tmp_path):
    """A directory without config.json: one line, exit 2, before vLLM is imported."""
    result = subprocess.run([sys.executable, str(HERE / "plan_stubbed.py"), str(tmp_path)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(HERE.parent.parent / "plugin")})
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"plan: error: {tmp_path}: has no config.json\n")


@pytest.mark.skipif(not (0, 13) <= RELEASE < (0, 30), reason="Qwen3-Next builds for plan in the 0.13 - 0.23 cells "
                    "(0.11: triton kernels at import; 0.30: vllm-ascend 0.30.0rc2's MoE patch against the vLLM 0.30.0 wheel)")
def test_plan_bytes_equal_the_benchmarks(tmp_path):
    """What plan says each side allocates is what ``benchmarks/ascend_memory.py`` measures when it
    runs each side's build on CPU tensors (Qwen3-Next-80B-A3B TP 4, each side at its own sizing,
    num_blocks by vLLM's rule for the same 200,000,000-byte budget, no transfer)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ascend_memory", HERE.parent.parent / "benchmarks" / "ascend_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    budget = 200_000_000
    args = ["--tensor-parallel-size", "4", "--max-model-len", "4096", "--kv-cache-memory-bytes", str(budget)]
    if RELEASE >= (0, 23):  # 31 blocks: the 0.23 runner's own build refuses 128 sequences, and so does plan (exit 1)
        result, data = plan(tmp_path, "qwen3-next-80b-a3b", *args)
        assert result.returncode == 1 and data["ascend"]["plugin"]["build_error"] == (
            "ValueError: max_num_seqs (128) exceeds available Mamba cache blocks (31). Each decode sequence requires "
            "one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 31 or "
            "increase gpu_memory_utilization.")
    result, data = plan(tmp_path, "qwen3-next-80b-a3b", *args, "--max-num-seqs", "16")
    assert result.returncode == 0, result.stderr[-2000:]
    for side, fn, sized in (("stock", bench.stock, False), ("plugin", bench.plugin, True)):
        build = lambda n, sized=sized: bench.MODELS["Qwen3-Next-80B-A3B TP4"](n, sized)
        num_blocks = bench.blocks_for(budget, build)
        measured = bench.measure(build(num_blocks), fn, transfer=False)
        assert data["ascend"][side]["num_blocks"] == num_blocks
        assert data["ascend"][side]["bytes_allocated_per_worker"][0] == measured["bytes_allocated"], side
