"""The plan zoo: one model of each kind vLLM plans differently, through ``plan`` (the command,
in-process), for an H100 80GB (``--device h100-80g``) and for the host's platform, each checked
against vLLM's own planner called here directly.

Each model is a directory under ``configs/`` holding only its ``config.json`` (written after the public
models' configs; one model of each kind): dense GPT-2, Llama-3.1-8B, Qwen3-14B;
MoE Qwen3-30B-A3B; the hybrid Qwen3-Next-80B-A3B (TP 4); gpt-oss-20b (sliding + full);
Gemma-3-27B (5:1 sliding windows); MLA DeepSeek-V2-Lite and DeepSeek-V3 (TP 8); the Mamba-2 hybrid
granite-4.0-h-tiny; multimodal Qwen3-VL-8B; Llama-3.1-8B with an EAGLE draft.

vLLM's own figure: the specs plan collected from the model (vLLM's spec objects, as the runner
returns them) given by this test to vLLM's ``get_kv_cache_configs`` (with the engine's steps
before it: the spec classes registered, the whole model's groups on 0.34) and its
``get_kv_cache_capacity``, for the budget a worker of vLLM measures from
``--kv-cache-memory-bytes`` (less the multimodal IPC reservation vLLM makes, where it has one).
Plan's JSON must give the same blocks per rank and group, the same token slots and the same
"KV cache size"; single-group models also equal the budget over the layers' pages.

The host's platform: vLLM's platform in this environment; where vLLM finds none (its CUDA wheel
on this CPU machine: vLLM 0.33, 0.34) plan says in one line what to pass (checked), and the host
leg plans on vLLM's CPU platform, as ``VLLM_TARGET_DEVICE=cpu`` makes it current.

CI runs :data:`SLICE`; ``KV_PLAN_ZOO=all`` (``tools/nox.sh -s plan-zoo``) runs every model.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from vllm_kv_strategies.deploy import cli, platforms, predict

CONFIGS = Path(__file__).parent / "configs"
BUDGET = 20_000_000_000
EAGLE = json.dumps({"method": "eagle", "model": str(CONFIGS / "eagle-llama-3.1-8b"), "num_speculative_tokens": 3})

#: name -> (config directory, plan's arguments besides the budget and the platform)
ZOO = {
    "gpt2": ("gpt2", ["--max-model-len", "1024"]),
    "llama-3.1-8b": ("llama-3.1-8b", []),
    "qwen3-14b": ("qwen3-14b", []),
    "qwen3-30b-a3b": ("qwen3-30b-a3b", []),
    "qwen3-next-80b-a3b": ("qwen3-next-80b-a3b", ["--tensor-parallel-size", "4"]),
    "gpt-oss-20b": ("gpt-oss-20b", []),
    "gemma-3-27b": ("gemma-3-27b", []),
    "deepseek-v2-lite": ("deepseek-v2-lite", []),
    "deepseek-v3": ("deepseek-v3", ["--tensor-parallel-size", "8"]),
    "granite-4.0-h-tiny": ("granite-4.0-h-tiny", []),
    "qwen3-vl-8b": ("qwen3-vl-8b", []),
    "llama-3.1-8b+eagle": ("llama-3.1-8b", ["--speculative-config", EAGLE]),
}
#: CI's slice (every upstream cell; under a minute): GPT-2's activation is a compiled op of
#: vLLM's missing where vLLM has no CPU build, the hybrid's pages are aligned, MLA is one latent.
SLICE = ("gpt2", "qwen3-next-80b-a3b", "deepseek-v2-lite")
MODELS = list(ZOO) if os.environ.get("KV_PLAN_ZOO") == "all" else list(SLICE)


@contextlib.contextmanager
def host_platform():
    """vLLM's platform in this environment; where it finds none, its CPU platform made current for the
    test (what ``VLLM_TARGET_DEVICE=cpu`` does), and restored after."""
    import vllm.platforms

    installed = vllm.platforms.current_platform
    if not installed.is_unspecified():
        yield
        return
    from vllm.platforms.cpu import CpuPlatform

    platforms._replace(installed, CpuPlatform())
    try:
        yield
    finally:
        platforms._replace(vllm.platforms._current_platform, installed)


def vllm_planner(vllm_config, specs: list[dict]):
    """vLLM's own plan of ``specs`` (per worker) for :data:`BUDGET`: ``(configs, tokens)``."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.core import kv_cache_utils

    try:  # vLLM 0.33 moved the planner
        from vllm.v1.core import kv_cache_planning as planning
    except ImportError:
        planning = kv_cache_utils
    try:
        from vllm.multimodal.gpu_ipc_memory import reserve_mm_ipc_gpu_memory
    except ImportError:
        budget = BUDGET
    else:
        budget = reserve_mm_ipc_gpu_memory(BUDGET, vllm_config.model_config.multimodal_config,
                                           getattr(vllm_config.parallel_config, "_api_process_count", 1))
    specs = [dict(s) for s in specs]
    with set_current_vllm_config(vllm_config):
        with contextlib.suppress(ImportError):
            from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

            register_all_kvcache_specs(vllm_config)
        whole = (planning.get_global_kv_cache_groups(vllm_config, specs),) if hasattr(
            planning, "get_global_kv_cache_groups") else ()
        configs = planning.get_kv_cache_configs(vllm_config, specs, [budget] * len(specs), *whole)
        tokens, _ = kv_cache_utils.get_kv_cache_capacity(
            vllm_config, kv_cache_utils.generate_scheduler_kv_cache_config(configs))
    return configs, int(tokens)


@pytest.mark.parametrize("platform", ["h100-80g", "host"])
@pytest.mark.parametrize("name", MODELS)
def test_zoo_plans_as_vllm_plans(name, platform, tmp_path, capfd, monkeypatch):
    directory, extra = ZOO[name]
    seen = []
    stock = predict.plan_budget

    def spy(vllm_config, per_worker, budget):
        seen.append((vllm_config, [dict(s) for s in per_worker]))
        return stock(vllm_config, per_worker, budget)

    monkeypatch.setattr(predict, "plan_budget", spy)
    out = tmp_path / "plan.json"
    argv = [str(CONFIGS / directory), "--kv-cache-memory-bytes", str(BUDGET), "--max-model-len", "8192", *extra,
            "--json", str(out)] + (["--device", platform] if platform != "host" else [])
    with host_platform() if platform == "host" else contextlib.nullcontext():
        code = cli.run(argv)
        printed = capfd.readouterr()
        assert code == 0, printed.err[-3000:]
        (vllm_config, specs), = seen
        configs, tokens = vllm_planner(vllm_config, specs)
    data = json.loads(out.read_text())
    if platform != "host":
        assert data["platform"].startswith(f"platform: cuda (--device {platform}"), data["platform"]
    assert [r["num_blocks"] for r in data["ranks"]] == [c.num_blocks for c in configs]
    for rank, config in zip(data["ranks"], configs):
        groups = config.kv_cache_groups
        assert [g["token_slots"] for g in rank["groups"]] == [config.num_blocks * g.kv_cache_spec.block_size for g in groups]
        assert [g["layers"] for g in rank["groups"]] == [list(g.layer_names) for g in groups]
    assert f"KV cache size: {tokens:,} tokens" in printed.out
    if len(configs[0].kv_cache_groups) == 1 and not vllm_config.model_config.is_multimodal_model:
        pages = sum(spec.page_size_bytes for spec in specs[0].values())
        assert configs[0].num_blocks == BUDGET // pages
    assert configs[0].num_blocks > 0
    if os.environ.get("KV_PLAN_ZOO_TABLE"):  # a row of the zoo's table (docs/plan.md), appended as one JSON line
        row = {"model": name, "vllm": data["versions"].get("vllm"), "platform": platform, "plan_blocks": data["num_blocks"],
               "plan_slots": [g["token_slots"] for g in data["ranks"][0]["groups"]][:1], "vllm_blocks": configs[0].num_blocks,
               "vllm_tokens": tokens, "block": configs[0].kv_cache_groups[0].kv_cache_spec.block_size}
        with open(os.environ["KV_PLAN_ZOO_TABLE"], "a") as f:
            f.write(json.dumps(row) + "\n")


def test_no_platform_says_what_to_pass(capfd):
    """Where vLLM finds no platform (its CUDA wheel on a machine without the card), plan without
    ``--device`` answers in one line; elsewhere the installed platform plans (the zoo's host leg)."""
    import vllm.platforms

    if not vllm.platforms.current_platform.is_unspecified():
        with host_platform():
            code = cli.run([str(CONFIGS / "gpt2"), "--kv-cache-memory-bytes", str(BUDGET), "--max-model-len", "1024"])
        assert code == 0, capfd.readouterr().err[-2000:]
        return
    code = cli.run([str(CONFIGS / "gpt2"), "--kv-cache-memory-bytes", str(BUDGET)])
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("plan: error:")]
    assert code == 2 and len(lines) == 1, err
    assert "finds no platform on this machine" in lines[0] and "--device NAME" in lines[0]
    assert "VLLM_TARGET_DEVICE=cpu" in lines[0]


def test_host_ops_stood_in_only_where_vllm_has_none(tmp_path):
    """On the host's own platform, vLLM's operators are stood in exactly where none of its compiled
    extensions loads (the CUDA wheel on this CPU machine), and named in the stand-ins line; where
    one loads (vLLM's CPU build), only the real operators answer and none is stood in. A process
    of its own, planning GPT-2 (its ``gelu_new`` is one of vLLM's compiled operators)."""
    import subprocess
    import sys

    probe = "import importlib, sys\nfor name in sys.argv[1:]:\n    try:\n        importlib.import_module(name)\n" \
            "        sys.exit(0)\n    except ImportError:\n        pass\nsys.exit(1)"
    loads = subprocess.run([sys.executable, "-c", probe, *platforms.COMPILED], capture_output=True).returncode == 0
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_kv_strategies", "plan", str(CONFIGS / "gpt2"), "--kv-cache-memory-bytes", str(BUDGET)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: stand-ins")]
    assert any("torch.ops._C's missing operators" in line for line in notes) is not loads, proc.stdout
    assert "KV cache size: 542,464 tokens" in proc.stdout  # 4,238 blocks of 128 on vLLM's CPU platform
