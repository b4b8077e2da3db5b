"""The overhead terms of plan's estimate (``deploy/overhead.py``, ``deploy/shape.py``): the shapes read
from published configs, the terms' arithmetic in bytes, and plan's budget for an H100 as the installed
vLLM configures it (its capture sizes, its server defaults)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import published
from vllm_kv_strategies.deploy import cli, hccl, overhead
from vllm_kv_strategies.deploy.shape import Shape

GIB = 2**30


def test_shapes_of_published_configs():
    llama = Shape.from_config(published.full_config("llama-3.1-8b"))
    assert (llama.hidden, llama.intermediate, llama.layers, llama.heads, llama.kv_heads, llama.head_dim, llama.vocab,
            llama.dtype_bytes, llama.experts, llama.mla, llama.linear, llama.encoder) == (
        4096, 14336, 32, 32, 8, 128, 128256, 2, 0, None, 0, False)
    v3 = Shape.from_config(published.full_config("deepseek-v3"))
    assert (v3.experts, v3.topk, v3.moe_intermediate, v3.shared_intermediate, v3.mla) == (256, 8, 2048, 2048, (512, 128, 64, 128))
    nxt = Shape.from_config(published.full_config("qwen3-next-80b-a3b"))
    # gated delta net: q, k (16 x 128 each), v, z (32 x 128 each), b, a (32 each)
    assert (nxt.linear, nxt.state, nxt.scan_heads, nxt.experts, nxt.topk) == (2 * 16 * 128 + 2 * 32 * 128 + 2 * 32, 128 * 128, 32, 512, 10)
    gemma = Shape.from_config(published.full_config("gemma-3-27b-it"))
    assert (gemma.hidden, gemma.layers, gemma.vocab, gemma.encoder) == (5376, 62, 262208, True)
    v4 = Shape.from_config(published.full_config("deepseek-v4-flash"))
    assert v4.streams == 4


def test_a_config_without_a_dimension_is_named():
    with pytest.raises(ValueError, match="config.json gives no num_attention_heads"):
        Shape.from_config({"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 10})


def test_the_terms_of_llama_8b_on_an_h100():
    """8,192 batched tokens, 1,024 sequences (an H100's server defaults): the forward holds 5 x 8,192 x
    4,096 residual-stream elements and 8,192 x 3 x 14,336 of the MLP, bf16; the sampler 1,024 x 128,256
    logits at 15.4 bytes, the larger; 51 capture sizes (1, 2, 4, 8 ... 248, 256 ... 512) x 33 pieces
    plus 51 full decode graphs."""
    shape = Shape.from_config(published.full_config("llama-3.1-8b"))
    sizes = overhead.capture_sizes(1024, 8192)
    assert (len(sizes), sizes[:5], sizes[-2:]) == (51, [1, 2, 4, 8, 16], [496, 512])
    engine = overhead.Engine("cuda", "0.32.0", max_num_batched_tokens=8192, max_num_seqs=1024,
                             graphs=overhead.graph_count(sizes, 32, 1024), largest_graph=512)
    assert engine.graphs == 51 * 33 + 51
    assert overhead.forward_peak(shape, engine, 8192) == (5 * 8192 * 4096 + 8192 * 3 * 14336) * 2
    assert overhead.sampler_peak(shape, engine) == (round(1024 * 128256 * 15.4), "flashinfer")
    terms = {name: value for name, value, _ in overhead.terms(shape, engine)}
    assert terms == {"activations": round(1024 * 128256 * 15.4), "runtime": round(0.25 * GIB),
                     "cuda graphs": (5 * 512 * 4096 + 512 * 3 * 14336) * 2 + 1734 * round(0.42 * 2**20)}
    eager = overhead.terms(shape, overhead.Engine("cuda", "0.32.0"))
    assert eager[-1][:2] == ("cuda graphs", 0)
    assert not any(name == "cuda graphs" for name, _, _ in overhead.terms(shape, overhead.Engine("npu", "0.30.0")))
    old = overhead.Engine("npu", "0.13.0")
    assert old.runtime[0] == GIB and "vllm-ascend < 0.18" in old.runtime[1]


def test_plan_for_an_h100_computes_the_terms_from_vllms_config(tmp_path, capsys):
    """plan with ``--device h100-80g``: the engine config vLLM makes for the card (the server's 8,192 tokens
    and 1,024 sequences, its capture sizes) gives the terms above, and the budget subtracts each."""
    model = tmp_path / "llama-3.1-8b"
    model.mkdir()
    (model / "config.json").write_text((published.CONFIGS / "llama-3.1-8b" / "config.json").read_text())
    code = cli.run([str(model), "--device", "h100-80g", "--max-model-len", "8192", "--json", str(tmp_path / "p.json")])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads((tmp_path / "p.json").read_text())
    terms = {t["name"]: t for t in data["budget"]["terms"]}
    assert terms["activations"]["value"] == round(1024 * 128256 * 15.4)
    assert "the forward of 8,192 tokens" in terms["activations"]["source"]
    assert terms["cuda graphs"]["source"].startswith("1,734 graphs, the largest of 512 tokens")
    assert data["budget"]["bytes_per_worker"] == int(terms["device memory"]["value"] * 0.92) - sum(
        t["value"] for name, t in terms.items() if name not in ("device memory", "utilisation"))
    assert "max num seqs 1024" in out


MIB = 2**20


@pytest.mark.parametrize(("release", "soc", "expert_parallel", "tp", "dp", "model", "mc2"), [
    ("0.30.0", "A2", True, 8, 2, "deepseek-v4-flash", True),  # the Mooncake #2827 prefill: 16 ranks, 16 experts each
    ("0.30.0", "A2", True, 1, 8, "deepseek-v3", False),  # A2 below 16 ranks: all-gather
    ("0.30.0", "A3", True, 1, 8, "deepseek-v3", True),  # A3: MC2 at any expert-parallel size
    ("0.30.0", "A2", False, 16, 1, "deepseek-v3", False),  # no expert parallel: all-gather
    ("0.30.0", "A2", True, 16, 1, "qwen3-next-80b-a3b", False),  # 512 experts / 16 = 32 a rank > 24 (0.18+)
    ("0.13.0", "A2", True, 16, 1, "qwen3-next-80b-a3b", True),  # 0.13 counts ranks only
    ("0.30.0", "310P", True, 8, 2, "deepseek-v3", False),  # 310P: all-gather always
    ("0.30.0", "A3", True, 1, 1, "deepseek-v3", False),  # one rank
    ("0.30.0", "A3", True, 8, 2, "qwen3-32b", False),  # dense: no MoE dispatch
])
def test_hccl_buffsize_sizes_the_mc2_communicator(release, soc, expert_parallel, tp, dp, model, mc2):
    """HCCL_BUFFSIZE=1024 on the NPU: where vllm-ascend's profile runs MC2, its communicator holds
    2 x 1024 MB where the runtime figure holds 2 x 200 (CANN: each communicator 2 x HCCL_BUFFSIZE),
    a term of its own, 2 x 824 MiB; nowhere else, and never at the default size or off the NPU."""
    shape = Shape.from_config(published.full_config(model))
    engine = overhead.Engine("npu", release, tp, expert_parallel=expert_parallel, dp=dp, hccl_buffsize=1024, soc=soc)
    assert hccl.runs_mc2(shape, engine) is mc2
    terms = {name: (value, source) for name, value, source in overhead.terms(shape, engine)}
    assert terms.get("hccl buffers", (0, ""))[0] == (2 * 824 * MIB if mc2 else 0)
    if mc2:
        assert terms["hccl buffers"][1].startswith("HCCL_BUFFSIZE=1024: ")
    default = dataclasses.replace(engine, hccl_buffsize=hccl.HCCL_DEFAULT_BUFFSIZE)
    assert "hccl buffers" not in {name for name, _, _ in overhead.terms(shape, default)}
    assert hccl.mc2_buffers(shape, dataclasses.replace(engine, platform="cuda")) == 0


def test_a_smaller_hccl_buffsize_gives_back_memory():
    shape = Shape.from_config(published.full_config("deepseek-v3"))
    engine = overhead.Engine("npu", "0.30.0", 16, expert_parallel=True, hccl_buffsize=50)
    assert hccl.mc2_buffers(shape, engine) == -2 * 150 * MIB
    source = {name: source for name, _, source in overhead.terms(shape, engine)}["hccl buffers"]
    assert source.endswith("2 x 50 MB where the runtime holds 2 x 200: 0.29 GiB back")


@pytest.mark.parametrize(("release", "mc2"), [("0.30.0", False), ("0.23.0", True)])
def test_lora_takes_all_to_all_from_vllm_ascend_030(release, mc2):
    """vllm-ascend 0.30's select_moe_comm_method takes all-to-all for LoRA with expert parallel (its
    fused MC2 ops cannot be patched for LoRA): no MC2 in the profile, no term; 0.23 had no such case."""
    shape = Shape.from_config(published.full_config("deepseek-v3"))
    engine = overhead.Engine("npu", release, 16, expert_parallel=True, hccl_buffsize=1024, lora=True)
    assert hccl.runs_mc2(shape, engine) is mc2


@pytest.mark.parametrize(("value", "mb"), [(None, 200), ("", 200), (" 1024 ", 1024), ("1", 1), ("2560", 2560)])
def test_hccl_buffsize_from_the_environment(value, mb):
    assert hccl.buffsize_from_env({} if value is None else {"HCCL_BUFFSIZE": value}) == mb


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5", "1e3", "\u0661\u0660\u0662\u0664"])  # the last: Arabic-Indic 1024
def test_a_bad_hccl_buffsize_is_named(value):
    with pytest.raises(ValueError, match=f"HCCL_BUFFSIZE='{value}': CANN takes a whole number of MB, at least 1"):
        hccl.buffsize_from_env({"HCCL_BUFFSIZE": value})


@pytest.mark.parametrize(("device", "family"), [("910b-64g", "A2"), ("910b-32g", "A2"), ("a3", "A3")])
def test_the_ascend_family_of_a_card(device, family):
    assert hccl.ascend_family(device) == family


@pytest.mark.parametrize(("release", "graphs", "said"), [
    ("0.21.0", 100, True), ("0.22.1", 100, True),  # they subtract vLLM's estimate of their ACL graphs
    ("0.21.0", 0, False),  # --enforce-eager: none captured
    ("0.23.0", 100, False), ("0.30.0", 100, False), ("0.18.0", 100, False),  # subtract none
])
def test_the_acl_graph_estimate_of_vllm_ascend_021_022_is_said_not_computed(release, graphs, said):
    shape = Shape.from_config(published.full_config("qwen3-8b"))
    terms = overhead.terms(shape, overhead.Engine("npu", release, graphs=graphs, largest_graph=512 if graphs else 0))
    acl = [(value, source) for name, value, source in terms if name == "acl graphs"]
    assert acl == ([(0, acl[0][1])] if said else [])
    if said:
        assert acl[0][1].startswith("NOT COMPUTED: vllm-ascend 0.21 - 0.22 subtract their ACL graph estimate")
