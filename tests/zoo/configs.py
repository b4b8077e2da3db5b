"""Tiny configs for the model zoo: every text-generation architecture of
vLLM's model registry that the installed transformers, or vLLM's own config
classes (``vllm.transformers_utils.configs``), can configure.

A tiny config is the config class's defaults with small widths (hidden 128,
4 query / 2 KV heads of 32, vocab 512, a few small experts) and 4 layers
chosen from the default per-layer lists (``layer_types`` and the like) so
that every kind the full model has stays (sliding / chunked / full
attention, linear attention and Mamba layers); the KV cache features the
class declares are kept as they are: sliding and chunk windows, MLA's
``kv_lora_rank`` / ``qk_rope_head_dim``, Mamba state sizes, cross-layer KV
sharing. :data:`OVERRIDES` holds what an architecture needs beyond that.

Everything is written to a local directory (``config.json``); nothing is
downloaded.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from pathlib import Path
from typing import Any

NUM_LAYERS = 4
#: Standard config names and their tiny values (through a class's ``attribute_map``).
COMMON: dict[str, Any] = {
    "num_hidden_layers": NUM_LAYERS,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}
#: MoE and other width fields: set only where the class has them.
IF_PRESENT: dict[str, Any] = {
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_k": 2,
    "top_k_experts": 2,
    "moe_intermediate_size": 64,
    "expert_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "moe_shared_expert_intermediate_size": 64,
    "shared_intermediate_size": 64,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "hidden_size_per_layer_input": 32,
    "vocab_size_per_layer_input": 512,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "num_nextn_predict_layers": 0,
    "q_lora_rank": 64,
}
#: Per-layer index lists (layer numbers, not one entry per layer).
INDEX_LISTS = ("full_attn_idxs", "hybrid_layer_ids", "moe_layers", "mlp_only_layers", "attn_layer_indices")


@dataclasses.dataclass
class Entry:
    """One zoo architecture: how to write its tiny model directory."""

    arch: str
    model_type: str
    config_class: type
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: A draft model: (speculative method, draft architecture ("": no draft checkpoint), its config
    #: overrides, num_speculative_tokens).
    draft: tuple[str, str, dict[str, Any], int] | None = None
    #: More ``--speculative-config`` fields.
    speculative: dict[str, Any] = dataclasses.field(default_factory=dict)

    def config_dict(self, arch: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        return tiny_config(self.config_class, arch or self.arch, {**self.overrides, **(overrides or {})})

    def write(self, out: Path) -> tuple[Path, dict | None]:
        """The tiny model directory (and the speculative config of a draft entry)."""
        main = out / "target"
        main.mkdir(parents=True, exist_ok=True)
        (main / "config.json").write_text(json.dumps(self.config_dict(), indent=1, default=str))
        if self.draft is None:
            return main, None
        method, draft_arch, draft_overrides, n = self.draft
        speculative: dict[str, Any] = {"method": method, "num_speculative_tokens": n, **self.speculative}
        if draft_arch:
            draft_dir = out / "draft"
            draft_dir.mkdir(parents=True, exist_ok=True)
            draft = self.config_dict(draft_arch, {"num_hidden_layers": 1, **draft_overrides})
            (draft_dir / "config.json").write_text(json.dumps(draft, indent=1, default=str))
            speculative["model"] = str(draft_dir)
        return main, speculative


def _pick_layers(per_layer: list[Any], n: int) -> list[int]:
    """``n`` layer indices of a default per-layer list that keep every kind it has."""
    first: dict[Any, int] = {}
    for i, kind in enumerate(per_layer):
        first.setdefault(json.dumps(kind, sort_keys=True, default=str), i)
    chosen = sorted(first.values())[:n]
    for i in range(len(per_layer)):
        if len(chosen) >= n:
            break
        if i not in chosen:
            chosen.append(i)
    return sorted(chosen)


def tiny_config(cls: type, arch: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """``cls``'s defaults made tiny (see the module doc), as ``config.json`` content."""
    default = cls().to_dict()
    attribute_map = getattr(cls, "attribute_map", {})  # standard name -> the class's own

    def name(key: str) -> str:
        return attribute_map.get(key, key)

    n_default = default.get(name("num_hidden_layers"))
    n = overrides.get("num_hidden_layers", NUM_LAYERS)
    kwargs: dict[str, Any] = {}
    for key, value in COMMON.items():
        attr = getattr(cls, name(key), None)
        if not (isinstance(attr, property) and attr.fset is None):  # some classes derive head_dim (read-only)
            kwargs[name(key)] = value
    for key, value in IF_PRESENT.items():
        if name(key) in default and default[name(key)] is not None:
            kwargs[name(key)] = value
    if isinstance(n_default, int):
        per_layer = [k for k, v in default.items() if isinstance(v, list) and len(v) == n_default]
        kinds_key = next((k for k in ("layer_types", "layers_block_type") if k in per_layer), None)
        keep = _pick_layers(default[kinds_key], n) if kinds_key else list(range(n))
        for key in per_layer:
            kwargs[key] = [default[key][i] for i in keep]
        for key in INDEX_LISTS:
            if isinstance(default.get(key), list) and key not in per_layer:
                kwargs[key] = [new for new, old in enumerate(keep) if old in default[key]]
        if isinstance(default.get("per_layer_config"), dict):
            width = len(next(iter(default["per_layer_config"]), "") or "0")
            kwargs["per_layer_config"] = {
                str(new).zfill(width): default["per_layer_config"][str(old).zfill(width)]
                for new, old in enumerate(keep)
                if str(old).zfill(width) in default["per_layer_config"]
            }
    for key, value in overrides.items():
        kwargs[name(key)] = value
    kwargs["architectures"] = [arch]
    kwargs.setdefault("torch_dtype", "bfloat16")
    config = cls(**kwargs).to_diff_dict()  # what differs from the defaults, as a checkpoint writes it
    config["architectures"] = [arch]
    return config


#: What an architecture needs beyond :func:`tiny_config`'s defaults.
OVERRIDES: dict[str, dict[str, Any]] = {
    # Mamba / linear-attention hybrids: state widths that add up with hidden 128.
    "JambaForCausalLM": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
                         "mamba_dt_rank": 8},
    "FalconH1ForCausalLM": {"mamba_d_ssm": 256, "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 16},
    "GraniteMoeHybridForCausalLM": {"mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 16,
                                    "layer_types": ["mamba", "attention", "mamba", "attention"]},
    "Zamba2ForCausalLM": {"mamba_headdim": 32, "n_mamba_heads": 8, "mamba_d_state": 16,
                          "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"], "hybrid_layer_ids": [1, 3],
                          "num_mem_blocks": 1, "attention_head_dim": 64},
    "NemotronHForCausalLM": {"mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 1,
                             "layers_block_type": ["mamba", "attention", "mamba", "mlp"]},
    "MambaForCausalLM": {"state_size": 16},
    "FalconMambaForCausalLM": {"state_size": 16},
    "Mamba2ForCausalLM": {"num_heads": 8, "head_dim": 32, "state_size": 16, "n_groups": 1},
    # Cross-layer KV sharing: the last 2 of 4 layers reuse earlier layers' caches.
    "Gemma3nForCausalLM": {"num_kv_shared_layers": 2, "layer_types": ["sliding_attention", "full_attention"] * 2, "altup_num_inputs": 2, "laurel_rank": 8,
                           "activation_sparsity_pattern": [0.0] * NUM_LAYERS},
    # Fields a real checkpoint's config.json has and the config class's defaults lack.
    "MiniMaxM2ForCausalLM": {"rotary_dim": 16, "scoring_func": "sigmoid"},
    "Glm4MoeLiteForCausalLM": {"first_k_dense_replace": 1},
    "AfmoeForCausalLM": {"score_func": "sigmoid", "route_norm": True, "route_scale": 1.0, "n_group": 1, "topk_group": 1},
    "Step3p5ForCausalLM": {"num_attention_groups": 2},
    "Gemma4ForCausalLM": {"num_kv_shared_layers": 2, "layer_types": ["sliding_attention", "full_attention"] * 2},
}


def _causal_lm_model_types() -> dict[str, str]:
    """transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` inverted: class name (lower case) -> model type."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found: dict[str, str] = {}
    for model_type, names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        for cls_name in names if isinstance(names, (list, tuple)) else [names]:
            # A text-only model type (llama4_text) before its multimodal one (llama4).
            if cls_name.lower() not in found or model_type.endswith("_text"):
                found[cls_name.lower()] = model_type
    return found


def config_class(arch: str, module: str) -> tuple[str, type] | None:
    """(model type, config class) for a registry architecture, or None when
    neither transformers nor vLLM's own config classes configure it."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    model_type = _causal_lm_model_types().get(arch.lower())
    if model_type is None and module == "llama":  # registered on vLLM's Llama module (LLaMA, InternLM3, ...)
        model_type = "llama"
    if model_type is None and module in _CONFIG_REGISTRY:
        model_type = module
    if model_type is None:
        return None
    if model_type in _CONFIG_REGISTRY:
        return model_type, _CONFIG_REGISTRY[model_type]
    if model_type in CONFIG_MAPPING:
        return model_type, type(AutoConfig.for_model(model_type))
    return None


@cache
def registry_archs() -> dict[str, str]:
    """vLLM's text-generation architectures: name -> module."""
    from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS

    return {arch: module for arch, (module, _) in _TEXT_GENERATION_MODELS.items()}


@cache
def unconfigurable() -> dict[str, str]:
    """Registry architectures no installed config class configures, with why."""
    out = {}
    for arch, module in registry_archs().items():
        if config_class(arch, module) is None:
            out[arch] = f"no config class in transformers or vLLM for {arch} (module {module}; remote code)"
    return out


def entry(arch: str) -> Entry | None:
    """The zoo entry of ``arch`` (a registry architecture or a :func:`drafts` key), or None when unconfigurable."""
    if arch in drafts():
        return drafts()[arch]
    module = registry_archs().get(arch)
    found = config_class(arch, module) if module is not None else None
    return None if found is None else Entry(arch, found[0], found[1], OVERRIDES.get(arch, {}))


def all_archs() -> list[str]:
    """Every configurable registry architecture, then the draft rows."""
    return [a for a in registry_archs() if a not in unconfigurable()] + list(drafts())


@cache
def drafts() -> dict[str, Entry]:
    """Draft-model rows: ``<target>+<method>``."""
    from transformers import DeepseekV3Config, LlamaConfig

    return {
        "LlamaForCausalLM+eagle": Entry("LlamaForCausalLM", "llama", LlamaConfig,
                                        draft=("eagle", "EagleLlamaForCausalLM", {}, 1)),
        "LlamaForCausalLM+eagle3": Entry("LlamaForCausalLM", "llama", LlamaConfig,
                                         draft=("eagle3", "Eagle3LlamaForCausalLM", {}, 1)),
        "LlamaForCausalLM+extract_hidden_states": Entry(
            "LlamaForCausalLM", "llama", LlamaConfig, draft=("extract_hidden_states", "", {}, 1),
            speculative={"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}},
        ),
        "DeepseekV3ForCausalLM+mtp": Entry("DeepseekV3ForCausalLM", "deepseek_v3", DeepseekV3Config,
                                           {"num_nextn_predict_layers": 1}, draft=("mtp", "", {}, 1)),
    }

