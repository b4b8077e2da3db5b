"""``plan --device NAME`` plans for the card's vLLM platform from this CPU
machine: vLLM's own platform class for the card (CUDA: a ``CudaPlatformBase``
with the card's compute capability) picks the block size and the attention
backends, the kernels it imports stood in. A platform is process-wide, so the
card's plan runs in a process of its own.

Gemma-3-27B (text, published config), 62 layers of 16 KV heads x 128 in
bfloat16, sliding window 1024 on five layers of six: vLLM's hybrid manager
makes seven groups (six sliding-window groups of 9, 9, 9, 9, 8, 8 layers, one
full-attention group of 10); each KV cache tensor is shared by one layer of
each group, so num_blocks = budget // (10 x page bytes). A page is block x 2
(K, V) x 16 x 128 x 2 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_kv_strategies.deploy import cli
from vllm_kv_strategies.deploy.budget import DEVICES

CONFIGS = Path(__file__).resolve().parent / "configs"
BUDGET = 117_961_276_784  # the public ROCm log's "Available KV cache memory" for Gemma-3-27B, in bytes
PLUGIN = Path(cli.__file__).resolve().parents[2]


def page(block: int) -> int:
    return block * 2 * 16 * 128 * 2


def run_plan(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / "plan.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "plan", *args, "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    return done, json.loads(out.read_text()) if out.exists() else None


def test_gpu_card_plans_cuda_blocks_from_the_cpu_build(tmp_path):
    """--device H100-80G (any case): CUDA's attention backends take the 16-token
    block asked for; the CPU build alone would plan 32 (next test)."""
    done, data = run_plan(tmp_path, str(CONFIGS / "gemma-3-27b"), "--block-size", "16",
                          "--kv-cache-memory-bytes", str(BUDGET), "--device", "H100-80G")
    assert done.returncode == 0, done.stderr
    assert BUDGET // (10 * page(16)) == 89_997
    assert data["num_blocks"] == 89_997 and data["device"] == "cuda"
    assert data["platform"].startswith("platform: cuda (--device h100-80g: NVIDIA H100 80GB, compute capability 9.0)")
    groups = data["ranks"][0]["groups"]
    assert sorted(len(g["layers"]) for g in groups) == [8, 8, 9, 9, 9, 9, 10]
    assert {g["block_size"] for g in groups} == {16}
    assert "note: stand-ins for planning only, on the meta device" in done.stdout
    assert "--block-size 16 given" not in done.stdout  # the plan follows it


def test_rocm_card_plans_with_vllms_rocm_platform(tmp_path):
    """--device mi300x: vLLM's RocmPlatform (its amdsmi queries answered with gfx942) takes the
    16-token block too: the same 89,997 blocks (the public ROCm log: 89,994)."""
    done, data = run_plan(tmp_path, str(CONFIGS / "gemma-3-27b"), "--block-size", "16",
                          "--kv-cache-memory-bytes", str(BUDGET), "--device", "mi300x")
    assert done.returncode == 0, done.stderr[-2000:]
    assert data["num_blocks"] == BUDGET // (10 * page(16)) == 89_997
    assert data["platform"].startswith("platform: rocm (--device mi300x: AMD Instinct MI300X 192GB, gfx942), vLLM's "
                                       "RocmPlatform planned from this cpu machine")
    assert {g["block_size"] for g in data["ranks"][0]["groups"]} == {16}


def test_no_card_plans_the_installed_cpu_platform(tmp_path, capsys):
    """Without a card the installed platform plans (vLLM's CPU backend: 32-token
    multiples), and the output says so."""
    out = tmp_path / "plan.json"
    code = cli.run([str(CONFIGS / "gemma-3-27b"), "--block-size", "16", "--kv-cache-memory-bytes", str(BUDGET),
                    "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    data = json.loads(out.read_text())
    assert BUDGET // (10 * page(32)) == 44_998
    assert data["num_blocks"] == 44_998
    assert data["platform"].startswith("platform: cpu (vLLM's platform in this environment")
    assert "--block-size 16 given; the blocks planned are of 32 tokens" in text
    # vLLM before 0.34 starts on an x86 CPU without Triton (this cell serves models): no note that it cannot
    assert "cannot start on this machine" not in text


@pytest.mark.parametrize("name, platform, gib", [
    ("H200", "cuda", 143771 / 1024), ("h20", "cuda", 97871 / 1024), ("L20", "cuda", 46068 / 1024),
    ("A10", "cuda", 23028 / 1024), ("B200", "cuda", 183359 / 1024), ("MI300X", "rocm", 191.98),
    ("910B-32G", "npu", 29.49)])
def test_cards_named_in_any_case(name, platform, gib):
    parser = cli.own_arguments(argparse.ArgumentParser(add_help=False))
    device = parser.parse_known_args(["model", "--device", name])[0].device
    assert device == name.lower()
    assert (DEVICES[device].platform, DEVICES[device].gib) == (platform, gib)


def test_multimodal_model_plans_without_torchvision(tmp_path):
    """Qwen3-VL-8B (config written from the published one's values: 36 text layers of 8 KV
    heads x 128, bfloat16): its processors import torchvision, which its KV cache does not
    depend on; where torchvision is missing plan stands in for it and says so. A page is
    128 x 2 x 8 x 128 x 2 = 524,288 bytes; 10,000,000,000 // (36 x 524,288) = 529 blocks."""
    import importlib.util

    done, data = run_plan(tmp_path, str(CONFIGS / "qwen3-vl-8b"), "--kv-cache-memory-bytes", "10000000000",
                          "--max-model-len", "32768")
    assert done.returncode == 0, done.stderr[-2000:]
    assert data["architectures"] == ["Qwen3VLForConditionalGeneration"]
    (rank,) = data["ranks"]
    (group,) = rank["groups"]
    assert (len(group["layers"]), group["specs"][0]["page_size_bytes"]) == (36, 524_288)
    assert data["num_blocks"] == 10_000_000_000 // (36 * 524_288) == 529
    assert data["tokens"] == 529 * 128
    stood_in = "nothing of them runs): torchvision" in done.stdout
    assert stood_in == (importlib.util.find_spec("torchvision") is None)


def test_kimi_linear_plans_for_a_gpu_card(tmp_path):
    """Kimi-Linear-48B-A3B (config written from the published one's values: 27 layers, MLA on
    layers 4, 8, ..., 24 and 27 (latent 512 + rope 64), KDA on the other 20) for an H100 from
    this CPU build: its modules import CUTLASS's Python DSL (``cutlass``), stood in for
    planning. vLLM's CUDA platform aligns the attention page with the KDA state: 1,920-token
    blocks, an MLA page of 1,920 x 576 x 2 bytes; four groups of at most 7 layers share each
    tensor, so num_blocks = budget // (7 x page)."""
    done, data = run_plan(tmp_path, str(CONFIGS / "kimi-linear-48b-a3b"), "--kv-cache-memory-bytes", "20000000000",
                          "--max-model-len", "32768", "--device", "h100-80g")
    assert done.returncode == 0, done.stderr[-2000:]
    groups = data["ranks"][0]["groups"]
    assert sorted((g["kind"], len(g["layers"])) for g in groups) == [
        ("mamba", 6), ("mamba", 7), ("mamba", 7), ("mla_attention", 7)]
    assert {g["block_size"] for g in groups} == {1920}
    page = 1920 * (512 + 64) * 2
    assert data["num_blocks"] == 20_000_000_000 // (7 * page) == 1_291
    assert "cutlass" in done.stdout.split("nothing of them runs): ")[1].splitlines()[0].split(", ")


def test_deepseek_v4_flash_plans_for_b200_from_the_cpu_build(tmp_path):
    """A DeepSeek-V4-Flash config (the attention fields from the published config: 43 layers,
    one KV head of 512, 64 rope dims, sliding window 128, the per-layer compress ratios 0, 0,
    4 / 128 alternating, 0; the MoE and hyper-connection fields, which do not touch the KV cache,
    as published or placeholders) at TP 8 for B200s from vLLM's CPU build: its modules import
    tilelang, DeepGEMM, CUTLASS's DSL and quack, stood in. vLLM's planner groups the layers by
    their window and compression; every worker gets the same blocks."""
    done, data = run_plan(tmp_path, str(CONFIGS / "deepseek-v4-flash"), "--kv-cache-memory-bytes", "40000000000",
                          "--max-model-len", "65536", "--tensor-parallel-size", "8", "--device", "b200")
    assert done.returncode == 0, done.stderr[-2000:]
    stood_in = done.stdout.split("nothing of them runs): ")[1].splitlines()[0].split(", ")
    assert {"tilelang", "deep_gemm", "cutlass", "quack"} <= set(stood_in)
    rank = data["ranks"][0]
    per_block = rank["bytes_required"] // data["num_blocks"]
    assert data["num_blocks"] == 40_000_000_000 // per_block == 39_910
    assert [r["num_blocks"] for r in data["ranks"]] == [39_910] * 8
    assert sorted((g["kind"], g["block_size"]) for g in rank["groups"]) == [
        ("mla_attention", 256), ("sliding_window_mla", 4), ("sliding_window_mla", 8), ("sliding_window_mla", 64),
        ("sliding_window_mla", 64)]
    # vLLM's capacity of sliding and compressed groups counts each request's chunk of batched tokens: with
    # `vllm serve`'s defaults for a B200 (16,384 batched tokens; plan took the engine's 2,048 before) a
    # 65,536-token request needs more blocks, so 192,404 tokens, 2.94x (1,344,060 and 20.51x at 2,048)
    assert (data["tokens"], round(data["max_concurrency"], 2)) == (192_404, 2.94)


def test_the_installed_platform_is_back_after_a_card(tmp_path, capsys):
    """In one process (tests, tools): a plan for an H100 and then one without a card plans the
    CPU's blocks again (128 tokens for the tiny Llama of test_plan), not the card's."""
    from test_plan import llama

    model = llama(tmp_path)
    assert cli.run([str(model), "--kv-cache-memory-bytes", str(2**26), "--max-model-len", "1024", "--device", "h100-80g",
                    "--json", str(tmp_path / "gpu.json")]) == 0
    assert cli.run([str(model), "--kv-cache-memory-bytes", str(2**26), "--max-model-len", "1024",
                    "--json", str(tmp_path / "cpu.json")]) == 0
    capsys.readouterr()
    gpu, cpu = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("gpu", "cpu"))
    assert [g["block_size"] for g in gpu["ranks"][0]["groups"]] == [16]
    assert [g["block_size"] for g in cpu["ranks"][0]["groups"]] == [128]
    assert cpu["platform"].startswith("platform: cpu") and cpu["num_blocks"] == 2**26 // (8 * 128 * 2 * 2 * 64 * 2)


def test_ascend_card_without_vllm_ascend_plans_here_and_says_so(tmp_path, capsys):
    """--device 910b-64g where vllm-ascend is not installed: the card's memory, this platform's
    blocks, and a line saying why (vllm-ascend is the card's vLLM platform)."""
    import importlib.util

    if importlib.util.find_spec("vllm_ascend") is not None:
        pytest.skip("vllm-ascend is installed here: the card plans on its platform (tests/ascend)")
    from test_plan import llama

    out = tmp_path / "plan.json"
    assert cli.run([str(llama(tmp_path)), "--device", "910b-64g", "--max-model-len", "1024", "--json", str(out)]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["platform"] == (
        "platform: cpu (--device 910b-64g is an Ascend card, and vllm-ascend, its vLLM platform, is not installed here: "
        "planned on this environment's platform with the card's memory; install vllm-ascend for its block sizes)")
    assert data["budget"]["terms"][0]["value"] == int(60.96 * 2**30)
