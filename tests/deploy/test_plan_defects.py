"""``plan``'s output read as a new user reads it (issue 32's list): no temp file
left behind, a failed assertion located, a config without ``architectures``
refused, "1 worker", small parameter counts in MiB, vLLM's default
utilisation said to be the default, data parallel totals beside the
per-engine figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_plan import MAX_MODEL_LEN, llama, plan

from vllm_kv_strategies.deploy import cli

PLUGIN = Path(cli.__file__).resolve().parents[2]


def test_no_temp_file_left_behind(tmp_path):
    """gloo's file store (``kv_plan_dist_*``) is removed when plan exits."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "plan", str(llama(tmp_path)),
                           "--kv-cache-memory-bytes", str(2**26), "--max-model-len", str(MAX_MODEL_LEN)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "num_blocks" in done.stdout
    assert sorted(p.name for p in temp.iterdir() if p.name.startswith("kv_plan_dist_")) == []


def test_assertion_while_building_is_located(tmp_path, capsys):
    """6 KV heads over TP 4 (Phi-4's 10 KV heads at TP 4 alike): vLLM's attention layer asserts
    without words; plan names the function, file, line and the assertion."""
    model = llama(tmp_path, num_attention_heads=12, num_key_value_heads=6, hidden_size=768)
    code, out, err, _ = plan(capsys, model, "--kv-cache-memory-bytes", 2**26, "--tensor-parallel-size", 4,
                             "--max-model-len", MAX_MODEL_LEN)
    assert code == 2 and out == ""
    line = err.strip().splitlines()[-1]  # after the progress lines
    assert line.startswith(f"plan: error: cannot plan: vLLM could not build {model} on the meta device for these "
                           "arguments (assertion failed in __init__ (models/llama.py:")
    assert "assert self.total_num_kv_heads % tp_size == 0" in line


def test_config_without_architectures_is_refused(tmp_path, capsys):
    model = llama(tmp_path)
    config = json.loads((model / "config.json").read_text())
    del config["architectures"]
    (model / "config.json").write_text(json.dumps(config))
    code, out, err, _ = plan(capsys, model, "--kv-cache-memory-bytes", 2**26)
    assert (code, out) == (2, "")
    assert err.strip().splitlines()[-1:] == [
        f"plan: error: {model / 'config.json'}: has no \"architectures\" (the model's class, e.g. "
        "[\"LlamaForCausalLM\"]); vLLM would otherwise take transformers' default for its model_type, not this model"]


def test_headline_reads_plainly(tmp_path, capsys):
    """One worker, not "1 workers"; a small model's parameters in MiB, not "(0.00 GiB)";
    vLLM's default utilisation named as the default, a given one as given."""
    model = llama(tmp_path)
    code, out, err, data = plan(capsys, model, "--device-memory-gib", 4, "--max-model-len", MAX_MODEL_LEN)
    assert code == 0, err
    params, nbytes = data["params_per_stage"][0], data["param_bytes_per_stage"][0]
    assert params == 512 * 256 * 2 + 8 * (256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 512 + 2 * 256) + 256
    assert f"model: {params:,} ({nbytes / 2**20:.2f} MiB) parameters per rank" in out
    assert "parallel: tensor 1 x pipeline 1 = 1 worker per engine; max model len" in out
    (term,) = [t for t in data["budget"]["terms"] if t["name"] == "utilisation"]
    from vllm.engine.arg_utils import EngineArgs

    assert term["source"] == f"vLLM's default --gpu-memory-utilization ({EngineArgs.gpu_memory_utilization:g}; not given)"
    code, out, err, data = plan(capsys, model, "--device-memory-gib", 4, "--gpu-memory-utilization", 0.75,
                                "--max-model-len", MAX_MODEL_LEN)
    (term,) = [t for t in data["budget"]["terms"] if t["name"] == "utilisation"]
    assert term["source"] == "--gpu-memory-utilization 0.75"


def test_data_parallel_totals_beside_each_engine(tmp_path, capsys):
    """DP 2 x TP 2: each engine plans its two workers alike; the deployment holds twice the tokens."""
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--max-model-len",
                                MAX_MODEL_LEN, "--data-parallel-size", 2, "--tensor-parallel-size", 2)
    assert code == 0, err
    blocks = 2**26 // (8 * 128 * 2 * 1 * 64 * 2)
    assert data["num_blocks"] == blocks and data["tokens"] == blocks * 128
    assert data["deployment"] == {"engines": 2, "workers": 4, "tokens": 2 * blocks * 128,
                                  "max_concurrency": 2 * data["max_concurrency"]}
    assert "= 2 workers per engine x data parallel 2 = 4 workers (each engine plans alike)" in out
    assert (f"  that is per engine; the deployment's 2 engines together: {2 * blocks * 128:,} tokens, "
            f"{2 * data['max_concurrency']:.2f}x concurrency") in out


def test_per_stage_budgets_and_the_limiting_stage(tmp_path, capsys):
    """PP 2, four layers a stage, a page of 128 x 2 x 2 x 64 x 2 = 65,536 bytes per layer: exact
    budgets of 64 MiB and 32 MiB per stage hold 256 and 128 blocks; vLLM gives every worker
    the smaller count, so stage 1 limits num_blocks."""
    code, out, err, data = plan(capsys, llama(tmp_path), "--stage-budgets", f"{2**26},{2**25}", "--max-model-len",
                                MAX_MODEL_LEN, "--pipeline-parallel-size", 2)
    assert code == 0, err
    block = 4 * 65_536
    assert data["num_blocks"] == 2**25 // block == 128
    assert [(s["stage"], s["budget_bytes"], s["blocks_alone"], s["limits"]) for s in data["stages"]] == [
        (0, 2**26, 256, False), (1, 2**25, 128, True)]
    assert f"stage 1: budget {2**25:,} bytes per worker, holds 128 blocks alone  <- limits num_blocks" in out


def test_estimate_per_stage_subtracts_each_stages_weights(tmp_path, capsys):
    """The estimate's weights term per stage: stage 0 holds the embedding, stage 1 the final norm
    and the LM head (512 x 256 each, bfloat16), so their budgets differ by the norm's 512 bytes."""
    code, out, err, data = plan(capsys, llama(tmp_path), "--device-memory-gib", 4, "--max-model-len", MAX_MODEL_LEN,
                                "--pipeline-parallel-size", 2)
    assert code == 0, err
    stage0, stage1 = data["stages"]
    assert stage0["weights_bytes"] - stage1["weights_bytes"] == -256 * 2
    assert stage0["budget_bytes"] - stage1["budget_bytes"] == 256 * 2
    assert stage1["limits"] and stage1["blocks_alone"] <= stage0["blocks_alone"]
    code, out, err, _ = plan(capsys, llama(tmp_path), "--stage-budgets", "1000000", "--pipeline-parallel-size", 2)
    assert code == 2 and err.splitlines()[-1] == "plan: error: --stage-budgets 1000000: 1 budgets for 2 pipeline stages"


def test_a_long_refusal_of_vllms_is_given_whole(tmp_path, capsys):
    """vLLM's ValueError for a max model len beyond the model's runs past 400 characters: the one
    line carries it to its end (it was cut at 400, mid-word, before the advice on RoPE)."""
    code, out, err, _ = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--max-model-len", 4_000_000)
    lines = [line for line in err.splitlines() if line.startswith("plan: error:")]
    assert code == 2 and len(lines) == 1 and out == "", err
    assert "User-specified max_model_len (4000000) is greater than the derived max_model_len" in lines[0]
    assert "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error." in lines[0]
    assert len(lines[0]) > 400 and not lines[0].endswith(" [...]")
