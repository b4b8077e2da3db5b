"""Build tiny, deterministic, *non-degenerate* checkpoints for vLLM CPU tests.

    python tools/tiny_models.py KIND OUT_DIR        # KIND: llama | qwen3_next | deepseek_v2 | gemma3 | deepseek_v32

Why not ``--load-format dummy``: dummy weights are so small that every next-token
distribution is nearly uniform, so a wrong KV cache changes neither tokens nor
logprobs.  Here a transformers model is built from a tiny config with
``initializer_range=0.2`` (fixed seed) and saved as safetensors, so the output
clearly depends on the context.  A byte-level BPE tokenizer is trained on an
inline corpus; the model's ``vocab_size`` equals the tokenizer size, so every
generated id decodes to text.

Shapes follow what vLLM 0.32's CPU kernels accept:
  * llama:       4 layers, full attention (one KV cache group of 4 layers).
  * qwen3_next:  8 layers = 6 gated-delta-net (head dims 128) + 2 full attention
                 (``full_attention_interval`` 4).  vLLM groups them as
                 (full.3, full.7), (gdn.0, gdn.4), (gdn.1, gdn.5), (gdn.2, gdn.6):
                 every group has two layers.
  * deepseek_v2: 2 MLA layers (kv_lora_rank 512, qk_rope_head_dim 64,
                 qk_nope_head_dim 128, v_head_dim 128); one group of 2 layers.
  * gemma3:      6 layers, Gemma 3 style: 5 sliding-window (window 64) + 1 full
                 attention (every sixth), untied embeddings (tied ones at this
                 scale make the text degenerate).  vLLM gives the sliding and the
                 full layers groups of their own; with
                 ``--disable-hybrid-kv-cache-manager`` it merges them into one
                 group whose spec carries the window (the report still labels
                 each layer by its own).
  * deepseek_v32: deepseek_v2's MLA plus DeepSeek-V3.2's sparse attention
                 indexer (index_topk 64, 4 indexer heads of 128, q_lora_rank 64):
                 sparse MLA. Needs a transformers with ``DeepseekV32Config``
                 (5.x); vLLM's CPU build cannot run it (no sparse MLA backend),
                 tools/npu_check.py runs it on an NPU.
All MLPs are dense (no MoE): the KV cache is what these models exercise.

A quantised KV cache is a serving option, not a checkpoint: any kind served
with ``--kv-cache-dtype fp8`` (vLLM's CPU attention takes ``fp8``,
``fp8_e4m3``, ``fp8_e5m2``) stores K and V in one byte per element, e.g.
``python -m vllm.entrypoints.openai.api_server --model ./tiny-llama
--kv-cache-dtype fp8 --enforce-eager`` (``main`` prints such a line).

Only needs torch, transformers, tokenizers and safetensors (no network).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

KINDS = ("llama", "qwen3_next", "deepseek_v2", "gemma3", "deepseek_v32")
SEED = 1234
INIT_RANGE = 0.2
TOKENIZER_VOCAB = 512  # target; the real size is whatever the trainer reaches

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A stitch in time saves nine.
Once upon a time there was a small model that lived inside a tiny computer.
It read numbers one two three four five six seven eight nine ten and wrote
them back in a different order. The cache remembered every key and every value.
Paris is the capital of France. Berlin is the capital of Germany. Rome is the
capital of Italy. Madrid is the capital of Spain. Water boils at one hundred
degrees. The sun rises in the east and sets in the west. Cats sleep a lot.
def add(a, b): return a + b
for i in range(10): print(i * i)
Hello world! How are you today? I am fine, thank you. What is your name?
My name is Tiny. I like to count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.
Attention layers keep keys and values; linear attention keeps a running state.
Latent attention compresses keys and values into a small shared vector.
"""

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>"]


# --------------------------------------------------------------------------- tokenizer
def build_tokenizer(out_dir: Path):
    """Train a byte-level BPE on the inline corpus; save as PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|pad|>",
        model_max_length=4096,
    )
    fast.save_pretrained(str(out_dir))
    # Make the class explicit so AutoTokenizer does not pick a model-specific one.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return fast


# --------------------------------------------------------------------------- configs
def _config(kind: str, vocab_size: int, eos_id: int, pad_id: int):
    common = dict(
        vocab_size=vocab_size,
        initializer_range=INIT_RANGE,
        rms_norm_eps=1e-6,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="bfloat16",
    )
    if kind == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            architectures=["LlamaForCausalLM"],
            **common,
        )
    if kind == "qwen3_next":
        from transformers import Qwen3NextConfig

        n_layers = 8
        layer_types = [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention"
            for i in range(n_layers)
        ]
        return Qwen3NextConfig(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=n_layers,
            layer_types=layer_types,
            full_attention_interval=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=128,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            # MoE everywhere (vLLM's Qwen3Next needs at least one MoE layer)
            mlp_only_layers=[],
            decoder_sparse_step=1,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
            },
            architectures=["Qwen3NextForCausalLM"],
            **common,
        )
    if kind == "deepseek_v2":
        from transformers import DeepseekV2Config

        n_layers = 2
        return DeepseekV2Config(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=n_layers,
            num_attention_heads=2,
            num_key_value_heads=2,
            kv_lora_rank=512,
            q_lora_rank=None,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            # dense MLP everywhere (no MoE)
            first_k_dense_replace=n_layers,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=64,
            topk_method="greedy",
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            architectures=["DeepseekV2ForCausalLM"],
            **common,
        )
    if kind == "deepseek_v32":
        from transformers import DeepseekV32Config

        return DeepseekV32Config(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=2, kv_lora_rank=512, q_lora_rank=64, qk_rope_head_dim=64,
            qk_nope_head_dim=128, v_head_dim=128, index_topk=64, index_head_dim=128, index_n_heads=4,
            first_k_dense_replace=2, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            moe_intermediate_size=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            architectures=["DeepseekV32ForCausalLM"], **common,
        )
    if kind == "gemma3":
        from transformers import Gemma3TextConfig

        return Gemma3TextConfig(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=6,  # layer_types: sliding x 5, then full (sliding_window_pattern 6)
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            query_pre_attn_scalar=32,
            sliding_window=64,
            architectures=["Gemma3ForCausalLM"],
            **common,
        )
    raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")


# --------------------------------------------------------------------------- build
def build(kind: str, out_dir: str | os.PathLike) -> Path:
    """Write config, safetensors weights and tokenizer for ``kind`` to ``out_dir``.

    Deterministic: the same kind gives byte-identical weights (fixed seed).
    Returns the output directory.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    vocab_size = len(tok)
    cfg = _config(kind, vocab_size, tok.eos_token_id, tok.pad_token_id)

    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    _reinit(model)
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    gen = out / "generation_config.json"
    if gen.exists():  # keep vLLM's defaults greedy-neutral
        gen.unlink()
    return out


def _reinit(model) -> None:
    """Re-draw weights with a fixed generator so they do not depend on init order
    details of a transformers version: N(0, INIT_RANGE) for matrices/embeddings,
    RMSNorm weights left as built (ones, or zeros for (1+w) norms), GDN A_log /
    dt_bias kept in their usual ranges."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1, 16, generator=g)))
            elif name.endswith("dt_bias"):
                p.fill_(1.0)
            elif "norm" in name and p.dim() == 1:
                continue
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * INIT_RANGE)
            else:  # biases and other vectors
                p.zero_()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("out_dir")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = build(args.kind, args.out_dir)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(
        f"built {args.kind} in {out} ({size / 1e6:.1f} MB) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    print(f"serve it with a quantised (fp8) KV cache: python -m vllm.entrypoints.openai.api_server --model {out} "
          "--kv-cache-dtype fp8 --enforce-eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
