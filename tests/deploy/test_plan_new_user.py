"""``plan`` tried as a new user: bad input that slipped past its checks (each
now one line on stderr naming the problem, exit 2, nothing on stdout, no
traceback), a device too small for an exact budget, a model without KV cache."""

from __future__ import annotations

import json

import pytest
from test_plan import llama, plan


@pytest.mark.parametrize(("case", "argv", "expected"), [
    # valid JSON that is not an object: was AttributeError: 'list' object has no attribute 'get'
    ("list-config", [], "config.json: holds a JSON list, not the object of a model's configuration"),
    # a string: was "architecture L, l, a, m, a, ... is not one this vLLM knows"
    ("architectures-string", [], 'config.json: "architectures" is "LlamaForCausalLM", not a list of class names'),
    # argparse's float() takes these; nan was blamed on vLLM's meta build, a negative overhead was planned
    ("memory-nan", ["--device-memory-gib", "nan"], "--device-memory-gib nan: must be positive and finite"),
    ("memory-inf", ["--device-memory-gib", "inf"], "--device-memory-gib inf: must be positive and finite"),
    ("overhead-negative", ["--device-memory-gib", "80", "--overhead-gib", "-10"], "--overhead-gib -10.0: must be zero or more"),
    # pydantic's error for a JSON argument spans three lines: was three lines on stderr
    ("json-argument", ["--kv-cache-memory-bytes", 2**26, "--kv-transfer-config", "{bad"],
     "invalid argument: argument --kv-transfer-config: 1 validation error for KVTransferConfig Invalid JSON: key must "
     "be a string at line 1 column 2"),
    # 8 layers over 10 stages: was "vLLM could not build ... (ZeroDivisionError: integer division or modulo by zero)"
    ("stages-beyond-layers", ["--kv-cache-memory-bytes", 2**26, "--pipeline-parallel-size", 10],
     "--pipeline-parallel-size 10: 2 of the 10 stages (0, 9) get none of the model's 8 layers (vLLM's get_pp_indices)"),
])
def test_bad_input_found_as_a_new_user(tmp_path, capsys, case, argv, expected):
    directory = llama(tmp_path)
    if case == "list-config":
        (directory / "config.json").write_text("[1, 2]")
    elif case == "architectures-string":
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**config, "architectures": "LlamaForCausalLM"}))
    code, out, err, data = plan(capsys, directory, *argv)
    lines = [line for line in err.splitlines() if line.startswith("plan: error:")]
    assert code == 2 and len(lines) == 1 and expected in lines[0], err
    assert err.splitlines()[-1] == lines[0], err  # the error's last line is the whole error
    assert "Traceback" not in err and out == "" and data is None


def test_stages_that_all_hold_layers_are_planned(tmp_path, capsys):
    """8 layers over 8 stages: one layer each, planned (the check refuses empty stages only).
    Page: 128 x (K, V) x 2 heads x 64 x 2 bytes = 65536; num_blocks = 2**26 // 65536."""
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--max-model-len", 1024,
                                "--pipeline-parallel-size", 8)
    assert code == 0, err
    assert data["num_blocks"] == 2**26 // 65536 == 1024
    assert [r["pipeline_parallel_rank"] for r in data["ranks"]] == list(range(8))


@pytest.mark.parametrize("gib", [0.0625, 1.0])
def test_exact_budget_beside_a_device_too_small_for_it(tmp_path, capsys, gib):
    """``--kv-cache-memory-bytes`` with ``--device-memory-gib``: the plan is the exact budget's; the note
    says when the card cannot hold it with the largest rank's weights (was only "is not used")."""
    budget = 2**26  # 64 MiB: over a 1/16 GiB card with the weights, well inside 1 GiB
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", budget, "--max-model-len", 1024,
                                "--device-memory-gib", gib)
    assert code == 0, err
    assert data["num_blocks"] == budget // (8 * 128 * 2 * 2 * 64 * 2) == 128
    weights, memory = max(data["param_bytes_per_stage"]), int(gib * 2**30)
    if budget + weights > memory:
        assert (f"note: --device-memory-gib {gib:g} does not hold the exact budget: {budget:,} bytes of KV cache and "
                f"{weights:,} bytes of weights on the largest rank exceed its {memory:,} bytes; vLLM would run out of "
                "memory at KV cache initialisation there\n") in out
    else:
        assert f"note: --device-memory-gib {gib:g} is not used: the budget given is exact\n" in out
    assert (budget + weights > memory) == (gib < 1)


def test_model_without_kv_cache_says_so(tmp_path, capsys):
    """all-MiniLM-L6-v2's published config (BertModel: encoder-only attention, no KV cache spec): vLLM's
    ``EngineCore._initialize_kv_caches`` gives it no memory; the plan says so (was an empty table)."""
    directory = tmp_path / "minilm"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02, "intermediate_size": 1536,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
        "num_hidden_layers": 6, "pad_token_id": 0, "position_embedding_type": "absolute", "torch_dtype": "float32",
        "type_vocab_size": 2, "vocab_size": 30522}))
    code, out, err, data = plan(capsys, directory, "--kv-cache-memory-bytes", 2**26)
    assert code == 0, err
    assert ("\nno layer of this model has a KV cache spec (attention free, or encoder-only attention): vLLM's engine "
            "gives it no KV cache memory and allocates no KV cache tensors\nplanned in ") in out
    assert "rank  pp  tp group" not in out
    assert [(r["groups"], r["tensors"], r["bytes_required"]) for r in data["ranks"]] == [([], [], 0)]


@pytest.mark.parametrize("offload_gib", [0.001, 1.0])
def test_estimate_subtracts_weights_offloaded_to_cpu(tmp_path, capsys, offload_gib):
    """``--cpu-offload-gb``: vLLM's UVA offload holds up to that many GiB of each GPU's weights in CPU
    memory, so the estimate's weights term is the rank's weights less it, never below zero (was the
    whole rank's weights: Mistral-7B on a 24 GiB card with 10 GiB offloaded lost 10 GiB of KV cache)."""
    code, out, err, data = plan(capsys, llama(tmp_path), "--max-model-len", 1024, "--device-memory-gib", 4,
                                "--gpu-memory-utilization", 0.9, "--cpu-offload-gb", offload_gib)
    assert code == 0, err
    terms = {t["name"]: t for t in data["budget"]["terms"]}
    offload, weights = int(offload_gib * 2**30), max(data["param_bytes_per_stage"])
    assert 0 < offload < weights if offload_gib < 1 else offload > weights
    assert terms["weights"]["value"] == max(weights - offload, 0)
    assert terms["weights"]["source"].endswith(f" less --cpu-offload-gb {offload_gib:g} ({offload:,} bytes in CPU memory)")
    # 0.9 of 4 GiB, less the weights term and the overhead terms plan computes for the model
    overhead = sum(t["value"] for t in data["budget"]["terms"][3:])
    assert {"activations", "runtime"} <= set(terms) and overhead > 0
    assert data["budget"]["bytes_per_worker"] == int(4 * 2**30 * 0.9) - terms["weights"]["value"] - overhead


def test_expert_parallel_moe_builds_on_meta(tmp_path, capsys):
    """``--enable-expert-parallel``: vLLM's expert map (``torch.full(..., -1, dtype=torch.int32)``, then
    ``torch.where`` and ``.item()`` in its init) is built on the host, so the MoE model builds (was
    "could not build ... NotImplementedError: The register_meta function for torch.nonzero() ...").
    Its expert parallel size is TP x DP, as FusedMoE's. A tiny Mixtral: 4 layers, 4 experts, 2 KV heads of 64;
    TP 2: one KV head per rank,
    page 128 x (K, V) x 1 x 64 x 2 bytes = 32768; num_blocks = 2**24 // (4 x 32768)."""
    config = llama(tmp_path, architectures=["MixtralForCausalLM"], model_type="mixtral", num_hidden_layers=4,
                   num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    params = {}
    for dp in (1, 2):
        code, out, err, data = plan(capsys, config, "--kv-cache-memory-bytes", 2**24, "--max-model-len", 1024,
                                    "--tensor-parallel-size", 2, "--data-parallel-size", dp, "--enable-expert-parallel")
        assert code == 0, err
        assert data["num_blocks"] == 2**24 // (4 * 32768) == 128
        assert [g["block_size"] for r in data["ranks"] for g in r["groups"]] == [128, 128]
        params[dp] = data["params_per_stage"][0]
    # expert parallel size is TP x DP: 2 of the 4 experts per rank at DP 1, one at DP 2 (was 2 at both);
    # one expert: gate and up (2 x 512 x 256) and down (256 x 512) weights, in each of the 4 layers
    assert params[1] - params[2] == 4 * 3 * 512 * 256


@pytest.mark.parametrize(("partition", "expected"), [
    ("4,2", "vLLM rejects the pipeline partition (VLLM_PP_LAYER_PARTITION=4,2): sum(partitions)=6 does not match "
            "num_hidden_layers=8."),
    ("8,0", "--pipeline-parallel-size 2 (VLLM_PP_LAYER_PARTITION=8,0): 1 of the 2 stages (1) gets none of the model's "
            "8 layers (vLLM's get_pp_indices)"),
])
def test_pipeline_partition_from_the_environment(tmp_path, capsys, monkeypatch, partition, expected):
    """vLLM's ``VLLM_PP_LAYER_PARTITION``: one that does not add up is refused in vLLM's words, one that
    leaves a stage empty is named; both say where the partition came from."""
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", partition)
    code, out, err, data = plan(capsys, llama(tmp_path), "--kv-cache-memory-bytes", 2**26, "--pipeline-parallel-size", 2)
    assert code == 2 and err.splitlines()[-1] == f"plan: error: {expected}" + (
        "; a stage without layers has no KV cache for vLLM to plan" if partition == "8,0" else ""), err
    assert out == "" and data is None


def test_online_fp8_weights_are_counted_as_served(tmp_path, capsys):
    """``--quantization fp8`` on a checkpoint without ``quantization_config``: vLLM builds the weights in
    the model's dtype and quantizes the linear layers' after loading, so the weights term counts them
    at one byte each, as served (it was the bf16 bytes, noted as low). The tiny Llama's linear weights:
    8 layers x (qkv 256 x 512 + o 256 x 256 + gate / up 256 x 1,024 + down 512 x 256) = 4,718,592
    elements, one byte fewer each; the embedding and the LM head stay bf16. Without ``--quantization``
    nothing is noted."""
    code, out, err, bf16 = plan(capsys, llama(tmp_path), "--max-model-len", 1024, "--device-memory-gib", 4)
    assert code == 0 and "as " not in {t["name"]: t for t in bf16["budget"]["terms"]}["weights"]["source"]
    code, out, err, data = plan(capsys, llama(tmp_path), "--max-model-len", 1024, "--device-memory-gib", 4,
                                "--quantization", "fp8")
    assert code == 0, err
    terms = {t["name"]: t for t in data["budget"]["terms"]}
    scales = (data["params_per_stage"][0] - bf16["params_per_stage"][0]) * 4  # fp32 scales fp8 adds, if any
    assert terms["weights"]["value"] == max(data["param_bytes_per_stage"]) == (
        max(bf16["param_bytes_per_stage"]) - 4_718_592 + scales)
    assert terms["weights"]["source"].endswith(", as served: --quantization fp8 stores the linear and expert "
                                               "weights at one byte after loading")