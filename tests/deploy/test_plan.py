"""``python -m vllm_kv_strategies plan``: the engine arguments parsed by
vLLM's own parser, the model built on the meta device per pipeline stage,
vLLM's planner. Exact num_blocks, page bytes and tokens; vLLM's refusal
word for word; bad input as one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_kv_strategies.core.specs import has_strided_tensors
from vllm_kv_strategies.deploy import cli

MAX_MODEL_LEN = 1024
#: config.json files written from the public configs' values (no weights).
CONFIGS = Path(__file__).resolve().parent / "configs"


def llama(tmp_path: Path, **overrides) -> Path:
    """A tiny Llama config.json alone: 8 layers, 4 heads, 2 KV heads of 64."""
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "num_hidden_layers": 8, "vocab_size": 512, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", **overrides,
    }
    directory = tmp_path / "model"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def plan(capsys, *argv) -> tuple[int, str, str, dict | None]:
    """(exit status, stdout, stderr, the --json file's content) of one in-process run."""
    out = Path(argv[0]).parent / "plan.json" if argv and Path(argv[0]).is_dir() else None
    args = [*map(str, argv), *(["--json", str(out)] if out else [])]
    code = cli.run(args)
    captured = capsys.readouterr()
    data = json.loads(out.read_text()) if out and out.exists() else None
    return code, captured.out, captured.err, data


def test_dense_tp2_pp2_exact(tmp_path, capsys):
    """TP 2 x PP 2: four workers, four layers per stage, one KV head per rank.
    Page per layer: 128 tokens x (K, V) x 1 head x 64 x 2 bytes = 32768;
    num_blocks = budget // (4 layers x 32768)."""
    budget = 64 * 2**20
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", budget, "--max-model-len", MAX_MODEL_LEN,
                                "--tensor-parallel-size", 2, "--pipeline-parallel-size", 2)
    assert code == 0, err
    page = 128 * 2 * 1 * 64 * 2
    num_blocks = budget // (4 * page)
    assert num_blocks == 512
    assert data["kind"] == "plan" and data["num_blocks"] == num_blocks
    assert [(r["rank"], r["pipeline_parallel_rank"], r["tensor_parallel_rank"]) for r in data["ranks"]] == [
        (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    for r in data["ranks"]:
        stage = r["pipeline_parallel_rank"]
        assert r["num_blocks"] == num_blocks
        (group,) = r["groups"]
        assert group["layers"] == [f"model.layers.{i}.self_attn.attn" for i in range(4 * stage, 4 * stage + 4)]
        assert (group["kind"], group["block_size"], group["num_blocks"], group["token_slots"]) == (
            "full_attention", 128, num_blocks, num_blocks * 128)
        (spec,) = group["specs"]
        assert (spec["page_size_bytes"], spec["num_kv_heads"], spec["head_size"], spec["dtype"]) == (page, 1, 64, "bfloat16")
        if has_strided_tensors():  # vLLM 0.30+: one tensor, the layers strided in it
            assert r["tensors"] == [{"size": 4 * num_blocks * page, "layers": group["layers"]}]
        else:
            assert r["tensors"] == [{"size": num_blocks * page, "layers": [name]} for name in group["layers"]]
        assert r["bytes_required"] == 4 * num_blocks * page
    # stock allocates the config's tensors; the plugin's upstream adapter would build every layer in them
    assert data["stock_bytes_per_worker"] == [4 * num_blocks * page] * 4
    assert data["plugin"] == [{"layers_per_strategy": {"full_attention": 4}, "refusal": None, "stock_would_fail": False}] * 4
    assert (f"stock vLLM allocates {4 * num_blocks * page:,} bytes per worker (the config's tensors); with the plugin, "
            f"vLLM builds the same {4 * num_blocks * page:,} bytes and the plugin checks every layer (layers per "
            "strategy: full_attention=4)") in out
    # vLLM's log: a request of 1024 tokens takes 8 blocks of 128
    assert data["max_concurrency"] == num_blocks / 8 and data["tokens"] == num_blocks // 8 * MAX_MODEL_LEN
    assert "KV cache size: 65,536 tokens, Maximum concurrency for 1,024 tokens per request: 64.00x" in out
    assert f"{num_blocks:>11,}" in out


def test_refusal_in_vllms_words(tmp_path, capsys):
    """A budget below one request of max model len: vLLM's own ValueError,
    with its estimated maximum model length, and exit 1."""
    page = 128 * 2 * 2 * 64 * 2
    budget = 8 * page * 5  # 5 blocks per layer for 8 layers; the null block leaves 4 = 512 tokens
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", budget, "--max-model-len", MAX_MODEL_LEN)
    assert code == 1, err
    assert "vLLM refuses (its own words): To serve at least one request with the model's max seq len (1024)" in out
    assert "the estimated maximum model length is 512." in out
    assert data["refusal"].startswith("To serve at least one request") and data["num_blocks"] is None


@pytest.mark.parametrize("case", ["no-dir", "no-config", "remote-code", "unknown-arch", "empty-archs", "bad-value",
                                  "no-budget", "negative-budget", "negative-memory"])
def test_bad_input_one_line_exit_2(tmp_path, capsys, case):
    directory = llama(tmp_path)
    argv = [directory, "--kv-cache-memory-bytes", 2**26]
    expected = {
        "no-dir": "no such directory", "no-config": "has no config.json", "remote-code": "needs remote code",
        "unknown-arch": "architecture NoSuchForCausalLM is not one this vLLM knows",
        "empty-archs": 'has no "architectures"',  # not transformers' default class for the model_type
        "bad-value": "invalid argument: argument --tensor-parallel-size/-tp: invalid int value: 'two'",
        "no-budget": "--kv-cache-memory-bytes",
        "negative-budget": "--kv-cache-memory-bytes -5: must be positive",
        "negative-memory": "--device-memory-gib -3.0: must be positive",
    }[case]
    if case == "no-dir":
        argv[0] = tmp_path / "absent"
    elif case == "no-config":
        (directory / "config.json").unlink()
    elif case == "remote-code":  # auto_map and a model_type transformers does not know
        llama(tmp_path, auto_map={"AutoModelForCausalLM": "modeling_x.X"}, model_type="no_such_model_type")
    elif case == "negative-budget":
        argv = [directory, "--kv-cache-memory-bytes", -5]
    elif case == "negative-memory":
        argv = [directory, "--device-memory-gib", -3]
    elif case == "unknown-arch":
        llama(tmp_path, architectures=["NoSuchForCausalLM"])
    elif case == "empty-archs":
        llama(tmp_path, architectures=[])
    elif case == "bad-value":
        argv += ["--tensor-parallel-size", "two"]
    else:
        argv = argv[:1]
    code, out, err, _ = plan(capsys, *argv)
    lines = [line for line in err.splitlines() if line.startswith("plan: error:")]
    assert code == 2 and len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err and out == ""


def test_command_line_bad_input_no_traceback(tmp_path):
    """Through ``python -m``: a missing directory is one line and exit 2, before vLLM is imported."""
    result = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "plan", str(tmp_path / "absent")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"plan: error: {tmp_path / 'absent'}: no such directory "
                                                  "(plan takes a local model directory holding config.json)"]


def cpu_mla_block_size() -> int:
    """The block size vLLM's CPU platform gives MLA models (``CpuPlatform.check_and_update_config``,
    vLLM 0.32): 128 where AMX tiles are supported (its AMX MLA backend), else 16 (its reference
    MLA decode kernel compiles only for 16). Machines of this project's kind differ in AMX."""
    import torch

    return 128 if torch.cpu._is_amx_tile_supported() else 16


@pytest.mark.parametrize(("name", "args", "layers", "page"), [
    # Llama-3-70B: 80 layers over 2 stages; 8 KV heads / TP 4 = 2 per rank: 128 x 2 x 2 x 128 x 2 bytes
    ("llama-3-70b", ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"], 40, 131072),
    # DeepSeek-V3: 61 MLA layers, latent 512 + rope 64, bf16: block x 576 x 2 bytes (the CPU's MLA block)
    ("deepseek-v3", ["--tensor-parallel-size", "8", "--max-model-len", "32768"], 61, "mla"),
    # with its MTP layer as the draft (vLLM's speculative config): one MLA layer more
    ("deepseek-v3", ["--tensor-parallel-size", "8", "--max-model-len", "32768",
                     "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], 62, "mla"),
])
def test_large_configs_plan_fast(tmp_path, capsys, name, args, layers, page):
    """Public configs' values (tests/deploy/configs): planned in <= 30 s on the CPU, exact num_blocks."""
    if page == "mla":
        page = cpu_mla_block_size() * 576 * 2
    budget = 20 * 10**9
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text((CONFIGS / name / "config.json").read_text())
    start = time.monotonic()
    code, out, err, data = plan(capsys, model, "--kv-cache-memory-bytes", budget, *args)
    seconds = time.monotonic() - start
    assert code == 0, err
    assert seconds <= 30, f"{name} planned in {seconds:.1f} s"
    assert {g["page_size_bytes"] for r in data["ranks"] for g in (s for grp in r["groups"] for s in grp["specs"])} == {page}
    assert {len(grp["layers"]) for r in data["ranks"] for grp in r["groups"]} == {layers}
    assert data["num_blocks"] == budget // (layers * page)


@pytest.mark.parametrize("index", [False, True])
def test_estimate_shows_each_term(tmp_path, capsys, index):
    """Without --kv-cache-memory-bytes: memory x utilisation - weights - overhead;
    weights from the checkpoint index's total_size over the ranks when there is
    one, else the meta-built rank's parameter bytes (bf16: 2 per parameter)."""
    directory = llama(tmp_path)
    if index:
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 3 * 2**20}, "weight_map": {}}))
    code, out, err, data = plan(capsys, directory, "--device-memory-gib", 1, "--gpu-memory-utilization", 0.5,
                                "--overhead-gib", 0.25, "--max-model-len", MAX_MODEL_LEN, "--tensor-parallel-size", 2)
    assert code == 0, err
    (params,), (param_bytes,) = data["params_per_stage"], data["param_bytes_per_stage"]
    assert param_bytes == 2 * params
    weights = 3 * 2**20 // 2 if index else param_bytes
    budget = 2**29 - weights - 2**28
    terms = {t["name"]: t["value"] for t in data["budget"]["terms"]}
    assert terms == {"device memory": 2**30, "utilisation": 500, "weights": weights, "overhead": 2**28}
    assert data["budget"]["exact"] is False and data["budget"]["bytes_per_worker"] == budget
    assert data["num_blocks"] == budget // (8 * 128 * 2 * 1 * 64 * 2)
    assert f"budget: ESTIMATE {budget:,} bytes per worker" in out
    assert ("model.safetensors.index.json total_size 3,145,728 / 2 ranks" if index else "parameters of the meta-built model") in out


def test_help_names_the_budget_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.run(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.startswith("usage: vllm-kv-strategies plan MODEL_DIR [vLLM engine arguments] [--kv-cache-memory-bytes N] "
                          "[--device NAME | --device list] [--device-memory-gib GIB] [--overhead-gib GIB] "
                          "[--stage-budgets N0,N1,...] [--sweep ARG=V1,V2,...] [--plot FILE.png] [--json OUT] "
                          "[--quiet | --verbose]\n")
    assert "--help=plan: this command's own" in out
    assert "\nexamples:\n  vllm-kv-strategies plan ./Llama-3.1-8B --kv-cache-memory-bytes 20G " in out
    with pytest.raises(SystemExit):
        cli.run(["--help=plan"])
    own = capsys.readouterr().out
    assert own.startswith("plan:\n  this command's own options") and "\n  --kv-cache-memory-bytes" not in own
    assert "--device list: their memory and its source" in " ".join(own.split())
    assert cli.run(["--device", "list"]) == 0  # the cards, without importing vLLM's parser
    cards = capsys.readouterr().out.splitlines()
    assert cards[0] == "NAME           GiB platform card; source of the memory figure"
    assert ('h100-80g     79.11 cuda     NVIDIA H100 80GB; torch: "GPU 0 has a total capacity of 79.11 GiB" '
            "(vllm-project/vllm#27508)") in cards and len(cards) == 1 + 15


def test_report_compares_a_plan_with_a_run(tmp_path, capsys):
    """``report PLAN REPORT``: each number side by side, exit 1 where the run
    differs (here a report claiming one block more than planned), exit 2 for a
    rank the plan lacks. (The match against a real run: tests/e2e/test_plan_e2e.py.)"""
    from vllm_kv_strategies.__main__ import main

    code, _, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--max-model-len", MAX_MODEL_LEN)
    assert code == 0, err
    (rank,) = data["ranks"]
    page_tokens = min(g["block_size"] for g in rank["groups"])
    report = {"schema_version": 2, "report": "vllm-kv-strategies KV cache report", "model": "m", "built_by": "plugin",
              "versions": {"vllm": "x"},
              "totals": {"rank": 0, "num_blocks": rank["num_blocks"] + 1, "tokens": (rank["num_blocks"] + 1) * page_tokens,
                         "bytes_required": rank["bytes_required"]},
              "kv_cache": {"num_blocks": rank["num_blocks"] + 1, "groups": rank["groups"], "tensors": rank["tensors"]}}
    from vllm_kv_strategies.report import plan_file

    text, equal = plan_file.compare(data, "plan.json", report, "run.json")
    assert not equal
    assert f"{'num_blocks':20} {rank['num_blocks']:>16,} {rank['num_blocks'] + 1:>16,}   DIFFERS" in text
    assert text.splitlines()[-1] == "the run does NOT match the plan"
    report["totals"]["tokens"] = None  # a value one side does not know: "-", not a crash
    text, _ = plan_file.compare(data, "plan.json", report, "run.json")
    assert f"{'tokens (capacity)':20} {data['tokens']:>16,} {'-':>16}   DIFFERS" in text
    report["totals"]["rank"] = 3
    with pytest.raises(plan_file.ReportError, match=r"plan.json: the plan has no rank 3 \(ranks \[0\]\)"):
        plan_file.compare(data, "plan.json", report, "run.json")
    assert main(["report", str(tmp_path / "model" / "plan.json"), str(tmp_path / "missing.json")]) == 2


def test_data_parallel_engines_plan_alike(tmp_path, capsys):
    """--data-parallel-size 2: each engine plans its own workers (vLLM's groups made as for one engine,
    no rendezvous with the other): one worker of TP 1, the budget's blocks."""
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--max-model-len", MAX_MODEL_LEN,
                                "--data-parallel-size", 2)
    assert code == 0, err
    assert data["parallel"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 2}
    assert [r["num_blocks"] for r in data["ranks"]] == [2**26 // (8 * 128 * 2 * 2 * 64 * 2)]
    assert "1 worker per engine x data parallel 2 = 2 workers (each engine plans alike)" in out


def test_planner_function_probes_the_planner_modules():
    """plan calls vLLM's own get_kv_cache_configs / get_kv_cache_capacity from wherever the release defines them."""
    from vllm.v1.core import kv_cache_utils

    from vllm_kv_strategies.core.specs import planner_function

    for name in ("get_kv_cache_configs", "generate_scheduler_kv_cache_config", "get_kv_cache_capacity"):
        assert planner_function(name) in (getattr(kv_cache_utils, name, None), _planning(name))
    with pytest.raises(ImportError, match="vLLM defines no no_such_step in vllm.v1.core.kv_cache_planning or vllm.v1.core.kv_cache_utils"):
        planner_function("no_such_step")


def _planning(name: str):
    try:
        from vllm.v1.core import kv_cache_planning
    except ImportError:
        return None
    return getattr(kv_cache_planning, name, None)


def test_auto_map_of_a_model_type_transformers_knows_is_planned(tmp_path, capsys):
    """DeepSeek-V2's published config.json carries auto_map, yet the installed transformers
    configures its model_type itself: plan needs no remote code and plans it."""
    directory = llama(tmp_path, auto_map={"AutoConfig": "configuration_x.XConfig"})
    code, out, err, data = plan(capsys, directory, "--kv-cache-memory-bytes", 2**26, "--max-model-len", MAX_MODEL_LEN)
    assert code == 0 and data["num_blocks"] > 0, err


def test_json_path_that_cannot_be_written_is_bad_input(tmp_path, capsys):
    """Checked before anything is planned: one line, exit 2, no traceback."""
    for out in (tmp_path / "absent" / "plan.json", tmp_path):
        code = cli.run([str(llama(tmp_path)), "--kv-cache-memory-bytes", str(2**26), "--json", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and f"--json {out}: cannot write a file there" in err and "Traceback" not in err


def test_hybrid_manager_off_labels_each_layer_by_its_own_window(tmp_path, capsys):
    """--disable-hybrid-kv-cache-manager: vLLM merges sliding and full layers into one group whose
    spec carries the window; plan names each layer by its attention module's own window."""
    directory = llama(tmp_path, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=256,
                      layer_types=["sliding_attention", "full_attention"] * 4)
    code, out, err, data = plan(capsys, directory, "--kv-cache-memory-bytes", 2**26, "--max-model-len", MAX_MODEL_LEN,
                                "--disable-hybrid-kv-cache-manager")
    assert code == 0, err
    (rank,) = data["ranks"]
    kinds = [g["kind"] for g in rank["groups"]]
    assert kinds and all("full_attention" in k.split("+") for k in kinds), kinds
    assert "token slots" in out and data["tokens"] is not None


def test_report_names_a_plan_file_given_alone_or_second(tmp_path, capsys):
    """``report PLAN`` alone, ``report RUN PLAN`` or two plans: the plan file is named as one,
    with the order report expects; exit 2."""
    from vllm_kv_strategies.__main__ import main

    code, _, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--max-model-len", MAX_MODEL_LEN)
    assert code == 0, err
    path = str(tmp_path / "plan.json")
    for paths, what in (([path], "a plan file (plan --json)"), ([path, path], "a plan file too, not a run's report"),
                        ([str(tmp_path / "run.json"), path], "a plan file, given second")):
        assert main(["report", *paths]) == 2
        assert capsys.readouterr().err == (f"error: {path}: {what}; compare a plan with a run's report: report PLAN "
                                           "RUN_REPORT (the plan first, then one report file or a directory holding one rank)\n")


def test_vllm_cpu_kvcache_space_beside_the_budget_given_is_said(tmp_path, capsys, monkeypatch):
    """vLLM's CPU platform sets ``kv_cache_memory_bytes`` from ``VLLM_CPU_KVCACHE_SPACE`` over
    ``--kv-cache-memory-bytes``: plan plans vLLM's budget and says which it replaced (a new user's
    review: was said without the value given)."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code = cli.run([str(llama(tmp_path)), "--kv-cache-memory-bytes", str(16 * 2**20), "--max-model-len", "1024"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert ("budget: 1,073,741,824 bytes per worker (1.000 GiB, kv_cache_memory_bytes set by vLLM's platform "
            "(VLLM_CPU_KVCACHE_SPACE on the CPU, replacing --kv-cache-memory-bytes 16,777,216): exact)") in captured.out
