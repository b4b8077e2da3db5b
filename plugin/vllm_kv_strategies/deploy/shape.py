"""The text model's dimensions a KV cache budget's overhead depends on, read from a Hugging Face
``config.json`` (:mod:`.overhead` computes the terms from them)."""

from __future__ import annotations

import dataclasses

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def _first(config: dict, *keys: str, default=None):
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


@dataclasses.dataclass(frozen=True)
class Shape:
    """The text model's dimensions, in elements (a Hugging Face config's names in the docs).

    ``mla``: (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) of DeepSeek's
    multi-head latent attention; ``linear``: the width of a linear-attention / Mamba layer's input
    projection and ``state``: the elements of one head's recurrent state (key x value dims, or
    head dim x state size) and ``scan_heads`` how many; ``encoder``: a vision tower is profiled;
    ``streams``: copies of the residual stream (DeepSeek-V4's hyper-connections, ``hc_mult``).
    """

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int = 2
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    mla: tuple[int, int, int, int] | None = None
    linear: int = 0
    state: int = 0
    scan_heads: int = 0
    encoder: bool = False
    streams: int = 1

    @classmethod
    def from_config(cls, config: dict) -> "Shape":
        """From a ``config.json`` as a dict: the text part (``text_config`` / ``llm_config``
        where the model is multimodal), the names of Llama, Qwen2/3(-MoE, -Next), DeepSeek V2/V3,
        Mixtral, gpt-oss, Gemma, Granite-H and Nemotron-H configs.

        Raises:
            ValueError: the config gives no ``hidden_size`` / ``num_hidden_layers`` /
                ``num_attention_heads`` / ``vocab_size`` (names the missing key).
        """
        text = _first(config, "text_config", "llm_config", default=None) or config
        encoder = text is not config or "vision_config" in config
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
            if text.get(key) is None:
                raise ValueError(f"config.json gives no {key}: the overhead cannot be computed")
        vocab = _first(text, "vocab_size", default=None) or config.get("vocab_size")
        if vocab is None:
            raise ValueError("config.json gives no vocab_size: the overhead cannot be computed")
        hidden, heads = text["hidden_size"], text["num_attention_heads"]
        dtype = str(_first(text, "torch_dtype", "dtype", default=None) or config.get("torch_dtype") or "bfloat16")
        experts = _first(text, "num_experts", "n_routed_experts", "num_local_experts", default=0) or 0
        mla = None
        if text.get("kv_lora_rank"):
            mla = (text["kv_lora_rank"], text["qk_nope_head_dim"], text["qk_rope_head_dim"], text["v_head_dim"])
        shared = _first(text, "shared_expert_intermediate_size", "shared_intermediate_size", default=0) or 0
        if not shared and text.get("n_shared_experts"):
            shared = text["n_shared_experts"] * text["moe_intermediate_size"]
        linear = state = scan_heads = 0
        if text.get("linear_num_value_heads"):  # gated delta net (Qwen3-Next)
            k, v = text["linear_key_head_dim"], text["linear_value_head_dim"]
            nk, nv = text["linear_num_key_heads"], text["linear_num_value_heads"]
            linear, state, scan_heads = 2 * nk * k + 2 * nv * v + 2 * nv, k * v, nv
        elif text.get("mamba_d_state") or text.get("mamba_n_heads"):  # Mamba-2 (Granite-H, Nemotron-H)
            inner = text.get("mamba_expand", 2) * hidden
            groups, d_state = text.get("mamba_n_groups", 1), text.get("mamba_d_state", 128)
            nh = text.get("mamba_n_heads") or inner // text.get("mamba_d_head", 64)
            linear, state, scan_heads = 2 * inner + 2 * groups * d_state + nh, (inner // nh) * d_state, nh
        return cls(
            hidden=hidden,
            intermediate=text.get("intermediate_size") or 0,
            layers=text["num_hidden_layers"],
            heads=heads,
            kv_heads=text.get("num_key_value_heads") or heads,
            head_dim=text.get("head_dim") or hidden // heads,
            vocab=vocab,
            dtype_bytes=_DTYPE_BYTES.get(dtype.replace("torch.", ""), 2),
            experts=experts,
            topk=_first(text, "num_experts_per_tok", "experts_per_token", default=0) or 0,
            moe_intermediate=(text.get("moe_intermediate_size") or text.get("intermediate_size") or 0) if experts else 0,
            shared_intermediate=shared,
            mla=mla,
            linear=linear,
            state=state,
            scan_heads=scan_heads,
            encoder=encoder,
            streams=text.get("hc_mult") or 1,
        )
