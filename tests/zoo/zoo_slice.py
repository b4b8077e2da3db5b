"""The zoo's CI slice: a few architectures per KV cache spec kind, each with
the spec kinds its tiny model has and the result pinned (a change in either
fails the slice), and the kv cache dtypes it runs with."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Expected:
    kinds: str
    result: str = "identical"
    dtypes: tuple[str, ...] = ("auto",)


SLICE: dict[str, Expected] = {
    # full attention; with kv cache dtype fp8 too
    "LlamaForCausalLM": Expected("FullAttentionSpec x4", dtypes=("auto", "fp8")),
    # sliding window: every layer, every 2nd (attention sinks), 3 of 4
    "MistralForCausalLM": Expected("SlidingWindowSpec x4"),
    "GptOssForCausalLM": Expected("SlidingWindowSpec x2, FullAttentionSpec x2"),
    "Gemma3ForCausalLM": Expected("SlidingWindowSpec x3, FullAttentionSpec x1"),
    # chunked local attention
    "Llama4ForCausalLM": Expected("ChunkedLocalAttentionSpec x3, FullAttentionSpec x1"),
    # MLA
    "DeepseekV2ForCausalLM": Expected("MLAAttentionSpec x4", dtypes=("auto", "fp8")),
    # Mamba 1 / 2
    "MambaForCausalLM": Expected("MambaSpec x4"),
    "Mamba2ForCausalLM": Expected("MambaSpec x4"),
    # Mamba / linear-attention hybrids
    "Qwen3NextForCausalLM": Expected("MambaSpec x3, FullAttentionSpec x1"),
    "JambaForCausalLM": Expected("MambaSpec x2, FullAttentionSpec x2"),
    "FalconH1ForCausalLM": Expected("FullAttentionSpec x4, MambaSpec x4"),
    "NemotronHForCausalLM": Expected("MambaSpec x2, FullAttentionSpec x1"),
    "Zamba2ForCausalLM": Expected("FullAttentionSpec x2, MambaSpec x4"),
    # cross-layer KV sharing (2 of 4 layers reuse a cache)
    "Gemma3nForCausalLM": Expected("SlidingWindowSpec x1, FullAttentionSpec x1, 2 sharing KV"),
    # draft models: EAGLE, EAGLE-3, the hidden-state cache (extract_hidden_states), MTP
    "LlamaForCausalLM+eagle": Expected("FullAttentionSpec x5"),
    "LlamaForCausalLM+eagle3": Expected("FullAttentionSpec x5"),
    "LlamaForCausalLM+extract_hidden_states": Expected("FullAttentionSpec x4, HiddenStateCacheSpec x1"),
    "DeepseekV3ForCausalLM+mtp": Expected("MLAAttentionSpec x5"),
}
