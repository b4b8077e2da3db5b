"""The Ascend model zoo: published models' KV-relevant HF ``config.json`` values, built as the
installed vllm-ascend release's runner emits their KV cache specs (``runner_factory``'s
builders), for ``test_zoo``.

Each entry keeps the published numbers (KV heads, head dim, MLA latent, indexer head dim,
sliding window / chunk, layer pattern, linear-attention state shapes, MTP layers) and says where
the layer count was shrunk to keep memory tiny: a uniform stack (every layer the same spec) is
built with :data:`UNIFORM_LAYERS` layers, a patterned one with whole periods of its pattern (or
at its published depth where that is small enough). MTP / draft layers are added as vLLM names
them. TP divides KV heads (at least 1 per rank) and linear-attention heads; MLA is
TP-invariant.

Published values (HF ``config.json``): ``layers`` is the published ``num_hidden_layers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import runner_factory as rf

#: Layers built for a model whose every layer has the same spec (the planner gives one tensor
#: per layer, so depth adds identical tensors and nothing else).
UNIFORM_LAYERS = 8
#: Blocks per worker: enough for aliasing / block-consistency checks, tiny memory.
NUM_BLOCKS = 2
TPS = (1, 4, 8)


@dataclass(frozen=True)
class ZooModel:
    """One published model: ``build(tp)`` -> ``runner_factory.ModelKV``."""

    name: str
    kinds: tuple[str, ...]  # the KV cache spec kinds its layers get
    layers: int  # published num_hidden_layers
    built: int  # layers built (without MTP)
    mtp: int  # MTP / draft layers built
    build: Callable[[int], rf.ModelKV]
    note: str = ""
    #: None, or why this release cannot express the model's spec (the case is then skipped).
    unsupported: Callable[[], str | None] = field(default=lambda: None)
    #: ``build`` with the plugin's hybrid page sizing installed (0.11 / 0.13 Qwen3-Next types).
    build_sized: Callable[[int], rf.ModelKV] | None = None

    @property
    def shrunk(self) -> str:
        return "" if self.built == self.layers else f"{self.layers} -> {self.built} layers"


def _gqa(name: str, *, layers: int, built: int | None = None, mtp: int = 0, **kw: Any) -> Callable[[int], rf.ModelKV]:
    built = built or layers
    types = kw.pop("layer_types", None)
    return lambda tp: rf.gqa_model(
        name, tp, NUM_BLOCKS, num_layers=built, layer_types=types(built) if types else None, mtp_layers=mtp, **kw
    )


def _every(period: int, kind: str, other: str) -> Callable[[int], list[str]]:
    """``kind`` at layers i with (i + 1) % period == 0, ``other`` elsewhere (HF layer_types)."""
    return lambda n: [kind if (i + 1) % period == 0 else other for i in range(n)]


def _no_chunked_local() -> str | None:
    return None if rf.ChunkedLocalAttentionSpec is not None else "this vLLM has no ChunkedLocalAttentionSpec"


_U = UNIFORM_LAYERS

MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in [
        # Qwen3 dense / MoE: full attention, head_dim 128.
        ZooModel("Qwen3-8B", ("full",), 36, _U, 0,
                 _gqa("Qwen3-8B", layers=36, built=_U, num_kv_heads=8, head_dim=128, model_type="qwen3")),
        ZooModel("Qwen3-32B", ("full",), 64, _U, 0,
                 _gqa("Qwen3-32B", layers=64, built=_U, num_kv_heads=8, head_dim=128, model_type="qwen3")),
        ZooModel("Qwen3-30B-A3B", ("full",), 48, _U, 0,
                 _gqa("Qwen3-30B-A3B", layers=48, built=_U, num_kv_heads=4, head_dim=128, model_type="qwen3_moe")),
        ZooModel("Qwen3-235B-A22B", ("full",), 94, _U, 0,
                 _gqa("Qwen3-235B-A22B", layers=94, built=_U, num_kv_heads=4, head_dim=128, model_type="qwen3_moe")),
        # Qwen3-Next: 3 gated delta net + 1 full attention (2 KV heads of 256); GDN 16 key / 32 value
        # heads of 128, conv kernel 4; MTP: 1 attention layer, 1 speculative token (conv + 1 row).
        ZooModel("Qwen3-Next-80B-A3B", ("full", "mamba"), 48, 16, 0,
                 lambda tp: rf.qwen3_next(tp, NUM_BLOCKS, num_hidden_layers=16),
                 build_sized=lambda tp: rf.qwen3_next(tp, NUM_BLOCKS, num_hidden_layers=16, plugin_sizing=True)),
        ZooModel("Qwen3-Next-80B-A3B MTP", ("full", "mamba"), 48, 16, 1,
                 lambda tp: rf.qwen3_next(tp, NUM_BLOCKS, num_hidden_layers=16, mtp_layers=1,
                                          num_speculative_tokens=1, name="Qwen3-Next-80B-A3B MTP"),
                 build_sized=lambda tp: rf.qwen3_next(tp, NUM_BLOCKS, num_hidden_layers=16, mtp_layers=1,
                                                      num_speculative_tokens=1, plugin_sizing=True)),
        ZooModel("Qwen3.5-style hybrid", ("full", "mamba"), 32, 16, 0,
                 lambda tp: rf.qwen35_style(tp, NUM_BLOCKS, num_hidden_layers=16),
                 build_sized=lambda tp: rf.qwen35_style(tp, NUM_BLOCKS, num_hidden_layers=16, plugin_sizing=True),
                 note="runner_factory.qwen35_style: Qwen3-Next GDN with 4 KV heads"),
        # DeepSeek MLA: kv_lora_rank 512 + qk_rope_head_dim 64.
        ZooModel("DeepSeek-V2-Lite", ("mla",), 27, _U, 0,
                 lambda tp: rf.deepseek_v3(tp, NUM_BLOCKS, num_layers=_U, name="DeepSeek-V2-Lite", model_type="deepseek_v2")),
        ZooModel("DeepSeek-V3 MTP", ("mla",), 61, _U, 1,
                 lambda tp: rf.deepseek_v3(tp, NUM_BLOCKS, num_layers=_U, mtp_layers=1, name="DeepSeek-V3 MTP")),
        ZooModel("Kimi-K2", ("mla",), 61, _U, 0,
                 lambda tp: rf.deepseek_v3(tp, NUM_BLOCKS, num_layers=_U, name="Kimi-K2", model_type="kimi_k2")),
        # DeepSeek V3.2-Exp: sparse MLA + lightning indexer (index_head_dim 128), MTP 1 layer.
        ZooModel("DeepSeek-V3.2-Exp MTP", ("sparse_mla",), 61, _U, 1,
                 lambda tp: rf.deepseek_v32(tp, NUM_BLOCKS, num_layers=_U, mtp_layers=1)),
        # GLM-4.5: full attention, 8 KV heads of 128 (96 query heads), MTP 1 layer.
        ZooModel("GLM-4.5 MTP", ("full",), 92, _U, 1,
                 _gqa("GLM-4.5 MTP", layers=92, built=_U, mtp=1, num_kv_heads=8, head_dim=128, model_type="glm4_moe")),
        # MiniMax: M1 lightning attention (1 softmax attention layer in 8; 64 heads of 128 linear
        # state), M2 full attention (8 KV heads of 128).
        ZooModel("MiniMax-M1", ("full", "mamba"), 80, 16, 0,
                 lambda tp: rf.minimax_m1(tp, NUM_BLOCKS, num_hidden_layers=16)),
        ZooModel("MiniMax-M2", ("full",), 62, _U, 0,
                 _gqa("MiniMax-M2", layers=62, built=_U, num_kv_heads=8, head_dim=128, model_type="minimax_m2")),
        # Gemma 3 27B: 5 sliding (window 1024) : 1 full, 16 KV heads of 128; published depth.
        ZooModel("Gemma-3-27B", ("sliding_window", "full"), 62, 62, 0,
                 _gqa("Gemma-3-27B", layers=62, num_kv_heads=16, head_dim=128, sliding_window=1024,
                      layer_types=_every(6, "full_attention", "sliding_attention"), model_type="gemma3_text",
                      max_model_len=2048)),
        # gpt-oss-120b: sliding (window 128) and full alternate, 8 KV heads of 64; published depth.
        ZooModel("gpt-oss-120b", ("sliding_window", "full"), 36, 36, 0,
                 _gqa("gpt-oss-120b", layers=36, num_kv_heads=8, head_dim=64, sliding_window=128,
                      layer_types=_every(2, "full_attention", "sliding_attention"), model_type="gpt_oss")),
        # Llama 4 Scout: 3 chunked local (RoPE, chunk 8192) : 1 global NoPE, 8 KV heads of 128.
        ZooModel("Llama-4-Scout-17B-16E", ("chunked_local", "full"), 48, 48, 0,
                 _gqa("Llama-4-Scout-17B-16E", layers=48, num_kv_heads=8, head_dim=128, attention_chunk_size=8192,
                      layer_types=_every(4, "full_attention", "chunked_attention"), model_type="llama4_text",
                      max_model_len=16384),
                 unsupported=_no_chunked_local),
    ]
}
