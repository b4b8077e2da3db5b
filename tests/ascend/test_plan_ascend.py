"""``plan`` where vllm-ascend is installed: each side planned and built by its own code.

The command runs as users run it (``python -m vllm_kv_strategies plan``), in a process of its own:
where ``torch_npu`` is missing plan stands in for the NPU modules itself, for planning only, and says
so in one line (on an Ascend host ``torch_npu`` is real). Each side's config comes from the cell's own
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
    result = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "plan", str(CONFIGS / model), *args, "--json", str(out)],
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
@pytest.mark.skipif(RELEASE >= (0, 30), reason="0.30 sizes the attention block to 384 tokens on both sides; this comparison "
                    "with the zoo's planner (runner_factory.qwen3_next) is written for 0.13 - 0.23's sizing "
                    "(test_plan_both_sides.py plans Qwen3-Next on 0.30)")
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
    every layer's page per block: 62 / 10 = 6.2x the config. ``--plot`` (matplotlib: pinned in this
    cell) draws the memory map of each side that was built: the plugin's alone, then both."""
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    result, data = plan(tmp_path, "gemma-3-27b", "--max-model-len", "32768", "--device-memory-gib", "64", "--plot", str(one))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == f"memory map written to {one} (plugin only: the other side's KV cache was not built)"
    assert png_size(one) == (1200, 382)  # one map; legend: 7 groups + 4 entries, two to a row
    stock, plugin = data["ascend"]["stock"], data["ascend"]["plugin"]
    assert round(stock["budget_scale"], 4) == round(10 / 62, 4) and plugin["budget_scale"] == 1.0
    assert "estimated maximum model length is" in stock["refusal"] and stock["num_blocks"] is None
    page = 2 * 128 * 16 * 128 * 2  # one layer's K and V page, bytes
    assert plugin["num_blocks"] == plugin["budget_bytes_per_worker"] // (10 * page)
    assert plugin["bytes_allocated_per_worker"] == [plugin["num_blocks"] * 10 * page]

    result, data = plan(tmp_path, "gemma-3-27b", "--max-model-len", "32768", "--kv-cache-memory-bytes", "8000000000",
                        "--plot", str(two))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == f"memory maps written to {two}"
    assert png_size(two) == (1200, 572)  # stock above the plugin
    stock, plugin = data["ascend"]["stock"], data["ascend"]["plugin"]
    assert stock["num_blocks"] == plugin["num_blocks"] == 8_000_000_000 // (10 * page)
    assert stock["bytes_allocated_per_worker"] == [stock["num_blocks"] * 62 * page]
    assert plugin["bytes_allocated_per_worker"] == [plugin["num_blocks"] * 10 * page]


def png_size(path) -> tuple[int, int]:
    import struct

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plan_bad_input_is_one_line(tmp_path):
    """A directory without config.json: one line, exit 2, before vLLM is imported."""
    result = subprocess.run([sys.executable, str(HERE / "plan_stubbed.py"), str(tmp_path)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(HERE.parent.parent / "plugin")})
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"plan: error: {tmp_path}: has no config.json\n")


@pytest.mark.skipif(not (0, 13) <= RELEASE < (0, 30), reason="0.11: vLLM's Qwen3-Next module imports triton "
                    "kernels at import; 0.30 plans other blocks in this budget (42, not 0.23's 31) and this comparison's "
                    "numbers are 0.13 - 0.23's (test_plan_both_sides.py plans Qwen3-Next on 0.30)")
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
    if RELEASE >= (0, 23):  # 31 blocks: the 0.23 runner's own build refuses vllm serve's 256 sequences, and so does plan (exit 1)
        result, data = plan(tmp_path, "qwen3-next-80b-a3b", *args)
        assert result.returncode == 1 and data["ascend"]["plugin"]["build_error"] == (
            "ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (31). Each decode sequence requires "
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


def test_mla_deepseek_v3_uneven_pipeline_stages(tmp_path):
    """DeepSeek-V3 (61 MLA layers, kv_lora_rank 512 + rope 64, bf16, block 128) at TP 4 x PP 2: built
    with vllm-ascend's MLA layer (``AscendMultiHeadLatentAttention``, which ``NPUWorker`` registers;
    vLLM's own wrapper does not pass vllm-ascend's MLA backend its ``rotary_emb``). A page is
    128 x 576 x 2 = 147,456 bytes, not split by TP; stage 0 holds 31 layers, stage 1 30, and vLLM
    gives every worker the smaller count: 4,000,000,000 // (31 x 147,456) = 875 blocks. Each stage's
    workers allocate their own layers' pages, and plan says so per stage. ``--swap-space 0`` before
    0.18: vLLM's swap check measures this machine's memory (4 GiB x TP by default)."""
    page = 128 * (512 + 64) * 2
    swap = ["--swap-space", "0"] if RELEASE < (0, 18) else []
    result, data = plan(tmp_path, "deepseek-v3", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
                        "--max-model-len", "8192", "--kv-cache-memory-bytes", "4000000000", *swap)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("plan: "), result.stdout[:500]  # vLLM's log lines stay off stdout
    assert "\n\n\n" not in result.stdout  # one blank line between the table and the sides (no capacity line here)
    assert data["num_blocks"] == 4_000_000_000 // (31 * page) == 875
    specs = [spec for rank in data["ranks"] for group in rank["groups"] for spec in group["specs"]]
    assert [(s["page_size_bytes"], s["num_kv_heads"], s["head_size"], len(s["layers"])) for s in specs] == (
        [(page, 1, 576, 31)] * 4 + [(page, 1, 576, 30)] * 4)
    # vLLM 0.11's planner lowers num_blocks to the smallest but keeps each worker's tensors of its
    # own count ("valid to only use the first num_blocks blocks"): stage 1 allocates 4e9 // (30 x page) = 904
    stage_1 = (4_000_000_000 // (30 * page) if RELEASE < (0, 13) else 875) * 30 * page
    stages = [875 * 31 * page] * 4 + [stage_1] * 4
    for side in ("stock", "plugin"):
        assert data["ascend"][side]["num_blocks"] == 875
        assert data["ascend"][side]["bytes_allocated_per_worker"] == stages
    assert (f"allocates per worker, by pipeline stage, stage 0: {stages[0]:,}, stage 1: {stages[-1]:,} bytes; "
            f"at most {stages[0]:,} = 1.00 x the KV cache memory") in result.stdout


def plan_error(tmp_path, model: str, *args: str) -> subprocess.CompletedProcess:
    result, data = plan(tmp_path, model, *args)
    assert (result.returncode, result.stdout, data) == (2, "", None), result.stderr[-2000:]
    return result


@pytest.mark.skipif(RELEASE >= (0, 18), reason="vLLM 0.18+ has no --swap-space nor its check of this machine's memory")
def test_swap_space_check_of_this_machine_is_explained(tmp_path):
    """vLLM before 0.18 refuses a swap space over 70% of THIS machine's memory (swap GiB x TP): plan
    says that the check measures the planning machine and that V1 does not use the swap space."""
    result = plan_error(tmp_path, "qwen3-0.6b", "--swap-space", "100000", "--kv-cache-memory-bytes", "100000000")
    assert "Too large swap space" in result.stderr
    assert result.stderr.endswith("(vLLM checks --swap-space GiB x the tensor parallel size against THIS machine's "
                                  "memory; vLLM V1 does not use the swap space: pass --swap-space 0 to plan here)\n")


@pytest.mark.skipif(RELEASE < (0, 23), reason="vLLM before 0.23 loads the KV connector class after the engine config")
def test_config_needing_a_module_not_installed_says_which(tmp_path):
    """``--kv-transfer-config`` naming vllm-ascend's Mooncake connector: vLLM 0.23+ imports its class
    while making the engine config, which imports ``mooncake`` (the transfer engine, installed only
    where it serves); plan names the module instead of saying vLLM rejects the configuration."""
    import importlib.util

    if importlib.util.find_spec("mooncake") is not None:
        pytest.skip("mooncake is installed in this environment: the configuration is made")
    result = plan_error(tmp_path, "qwen3-0.6b", "--kv-cache-memory-bytes", "100000000", "--kv-transfer-config",
                        '{"kv_connector":"MooncakeConnectorV1","kv_role":"kv_producer"}')
    assert result.stderr.endswith("plan: error: the configuration needs mooncake, which is not installed here "
                                  "(ModuleNotFoundError: No module named 'mooncake'); plan in the environment that "
                                  "serves, or install it\n")


@pytest.mark.skipif(RELEASE < (0, 30), reason="vllm-ascend 0.30's platform asserts FP8 attention hardware for fp8 caches")
def test_platform_assertion_is_located(tmp_path):
    """``--kv-cache-dtype fp8`` on an A2 (the cell's SoC): vllm-ascend 0.30's ``check_and_update_config``
    asserts FP8 attention hardware with no message, and pydantic reports "Assertion failed";
    plan names the function, file, line and the assertion."""
    result = plan_error(tmp_path, "qwen3-0.6b", "--kv-cache-memory-bytes", "100000000", "--kv-cache-dtype", "fp8")
    assert "plan: error: vLLM rejects the configuration: assertion failed in check_and_update_config (vllm_ascend/platform.py:" in result.stderr
    assert result.stderr.endswith("assert get_current_hardware_profile().supports(HardwareCapability.FP8_ATTENTION)\n")


def test_budget_refused_on_both_sides_is_quoted_once(tmp_path):
    """Qwen3-0.6B (28 layers, 8 KV heads x 128, bf16) at max model len 8,192 needs 28 x 2 x 8 x 128 x 2 x
    8,192 bytes (0.88 GiB) for one request: a 100,000,000-byte budget is refused on both sides in the
    same words, quoted once; exit 1."""
    swap = ["--swap-space", "0"] if RELEASE < (0, 18) else []
    result, data = plan(tmp_path, "qwen3-0.6b", "--max-model-len", "8192", "--kv-cache-memory-bytes", "100000000", *swap)
    assert result.returncode == 1, result.stderr[-2000:]
    refusal = data["refusal"]
    assert f"max seq len (8192), ({28 * 2 * 8 * 128 * 2 * 8192 / 2**30:.2f} GiB KV cache is needed" in refusal
    assert data["ascend"]["stock"]["refusal"] == data["ascend"]["plugin"]["refusal"] == refusal
    assert result.stdout.count(refusal) == 1 and result.stdout.count("  vLLM refuses, in the words above\n") == 2


@pytest.mark.skipif(RELEASE < (0, 18), reason="0.11 / 0.13 initialise the KV cache without the "
                    "drafter's loaded layers (planned: 437 blocks)")
def test_mtp_drafter_not_loaded_is_said(tmp_path):
    """DeepSeek-V3 with its MTP layer (``deepseek_mtp``): 61 + 1 MLA layers, 4,000,000,000 // (62 x
    147,456) = 437 blocks. From 0.18 the runner's ``initialize_kv_cache`` reads the drafter's
    attention layers, which ``load_model`` sets and plan does not run: plan says that this KV cache
    is not planned here, rather than that the configuration fails, and exits 0."""
    result, data = plan(tmp_path, "deepseek-v3", "--tensor-parallel-size", "8", "--max-model-len", "8192",
                        "--kv-cache-memory-bytes", "4000000000", "--speculative-config",
                        '{"method":"deepseek_mtp","num_speculative_tokens":1}')
    assert result.returncode == 0, result.stderr[-2000:]
    assert data["num_blocks"] == 4_000_000_000 // (62 * 128 * 576 * 2) == 437
    for side in ("stock", "plugin"):
        assert data["ascend"][side]["bytes_allocated_per_worker"] == []
        assert data["ascend"][side]["not_planned"] is True
        assert data["ascend"][side]["build_error"].endswith(
            "plan builds the draft model but does not run the drafter's load_model: the KV cache of this speculative "
            "configuration is not planned here)")


def test_arguments_the_plan_does_not_follow_are_noted(tmp_path):
    """``--block-size 16`` (CUDA's habit): vllm-ascend plans 128-token blocks (its platform sets them),
    so Qwen3-0.6B's page is 2 x 128 x 8 x 128 x 2 = 524,288 bytes and 1,000,000,000 // (28 x 524,288)
    = 68 blocks; plan notes the block size given and, beside the exact budget, the unused ``--device``."""
    swap = ["--swap-space", "0"] if RELEASE < (0, 18) else []
    result, data = plan(tmp_path, "qwen3-0.6b", "--block-size", "16", "--device", "a3", "--max-model-len", "4096",
                        "--kv-cache-memory-bytes", "1000000000", *swap)
    assert result.returncode == 0, result.stderr[-2000:]
    assert data["num_blocks"] == 1_000_000_000 // (28 * 2 * 128 * 8 * 128 * 2) == 68
    assert ("\nnote: --block-size 16 given; the blocks planned are of 128 tokens, as vLLM's platform sets them for "
            "this model\nnote: --device a3 sets the platform only: the budget given is exact\n") in result.stdout
    assert result.stdout.splitlines()[1] == ("platform: npu (--device a3: Ascend 910C / Atlas A3, one die of 64 GB; "
                                             "the platform installed here too)")
    assert "note: stand-ins for planning only, on the meta device (not installed or not loadable here; nothing of " \
           "them runs): torch_npu, acl, " in result.stdout


def test_stages_beyond_the_layers_are_bad_input(tmp_path):
    """Qwen3-0.6B's 28 layers over 32 stages: vLLM's get_pp_indices leaves stages 0-2 and 31 empty, which
    vLLM's planner divides by (was "vLLM could not build ... (ZeroDivisionError ...)"); one line, exit 2."""
    result = plan_error(tmp_path, "qwen3-0.6b", "--pipeline-parallel-size", "32", "--kv-cache-memory-bytes", "100000000")
    assert result.stderr.splitlines()[-1] == (
        "plan: error: --pipeline-parallel-size 32: 4 of the 32 stages (0, 1, 2, 31) get none of the model's 28 layers "
        "(vLLM's get_pp_indices); a stage without layers has no KV cache for vLLM to plan")


def test_cpu_offload_is_subtracted_from_the_weights(tmp_path):
    """``--cpu-offload-gb``: the model is built on the meta device without offloading (vLLM 0.13 copies
    the offloaded parameters' data: was "could not build ... Cannot copy out of meta tensor") and the
    estimate's weights term is the rank's weights less the offload."""
    result, data = plan(tmp_path, "qwen3-0.6b", "--device-memory-gib", "8", "--gpu-memory-utilization", "0.9",
                        "--max-model-len", "4096", "--cpu-offload-gb", "0.5")
    assert result.returncode == 0, result.stderr[-2000:]
    weights = {t["name"]: t for t in data["budget"]["terms"]}["weights"]
    assert weights["value"] == max(data["param_bytes_per_stage"]) - 2**29 > 0
    assert weights["source"].endswith(" less --cpu-offload-gb 0.5 (536,870,912 bytes in CPU memory)")
    overhead = data["budget"]["terms"][3:]  # the terms plan computes for the NPU: activations, runtime
    assert [t["name"] for t in overhead] == ["activations", "runtime"]
    assert data["budget"]["bytes_per_worker"] == int(8 * 2**30 * 0.9) - weights["value"] - sum(t["value"] for t in overhead)
