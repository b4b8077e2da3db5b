"""Small configs that show what stock vllm-ascend 0.30 builds (printed by
tests/ascend/stock_layouts_030.py), and a description of the result: per layer its form and
each view's dtype, shape, stride, storage offset and storage."""

from __future__ import annotations

import copy
from typing import Any

import torch
import runner_factory as rf
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

from vllm_kv_strategies import patching

N = 8  # blocks
BF16 = torch.bfloat16


def dense(block_size: int = 128) -> rf.ModelKV:
    return rf.gqa_model("dense 2 layers", num_blocks=N, num_layers=2, num_kv_heads=2, head_dim=64, block_size=block_size)


def sliding() -> rf.ModelKV:
    return rf.gqa_model(
        "full + sliding window", num_blocks=N, num_layers=4, num_kv_heads=2, head_dim=64,
        layer_types=["full_attention", "sliding_attention"] * 2, sliding_window=256, max_model_len=512,
    )


def padded_dense() -> rf.ModelKV:
    """2 full-attention layers (1 KV head x 64, bf16, block 128: page 32,768) whose pages are
    padded to 34,304 bytes (as a hybrid pads them to its Mamba page), in one group: stock
    trims the padding off each private buffer's front; refused by name by the plugin."""
    spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16, page_size_padded=34304)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(2)}
    return rf.ModelKV("padded dense", 1, rf.build_kv_cache_config(specs, N), specs)


def mla() -> rf.ModelKV:
    return rf.deepseek_v3(num_blocks=N, num_layers=2)


def _mamba_spec(page_size_padded: int | None = None, block_size: int = 128) -> Any:
    return MambaSpec(
        block_size=block_size, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, BF16),
        page_size_padded=page_size_padded, mamba_type=rf.gdn_mamba_type(),
    )


def mamba(layer_name: str = "model.layers.{i}.linear_attn") -> rf.ModelKV:
    """A Mamba-only model: 2 GDN-like layers, conv (3, 256) + ssm (2, 64, 64) bf16 (page 17920)."""
    specs = {layer_name.format(i=i): _mamba_spec() for i in range(2)}
    return rf.ModelKV(f"Mamba only ({layer_name})", 1, rf.build_kv_cache_config(specs, N, max_model_len=128), specs)


def hybrid() -> rf.ModelKV:
    """2 Mamba + 2 full attention layers sized by vLLM 0.30's rule (Platform._align_hybrid_block_size:
    attention block = align * cdiv(mamba page, align * (K+V) bytes per token), align 128; the Mamba
    page padded to the attention page): attention (1 head, 64) bf16, 256 B a token -> block 128,
    page 32768; Mamba 17920 padded to 32768."""
    attn = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)
    specs = {
        "model.layers.1.self_attn.attn": attn,
        "model.layers.3.self_attn.attn": attn,
        "model.layers.0.linear_attn": _mamba_spec(page_size_padded=attn.page_size_bytes),
        "model.layers.2.linear_attn": _mamba_spec(page_size_padded=attn.page_size_bytes),
    }
    return rf.ModelKV("hybrid 2 Mamba + 2 full", 1, rf.build_kv_cache_config(specs, N, max_model_len=128), specs)


#: (name, config builder, make_runner arguments)
CASES = [
    ("dense, not PA", dense, {}),
    ("dense, PA", dense, {"paged_attention": True}),
    ("dense block 256 (kernel blocks of 128), not PA", lambda: dense(256), {}),
    ("dense block 256 (kernel blocks of 128), PA", lambda: dense(256), {"paged_attention": True}),
    ("full + sliding window, not PA", sliding, {}),
    ("full + sliding window, PA", sliding, {"paged_attention": True}),
    ("MLA (AscendMLAAttentionSpec 512 + 64)", mla, {}),
    ("Mamba only, linear_attn layers", mamba, {}),
    ("Mamba only, mixer layers", lambda: mamba("model.layers.{i}.mixer"), {}),
    ("hybrid 2 Mamba + 2 full", hybrid, {}),
]


def build_stock(mk: rf.ModelKV, **runner_kwargs: Any):
    runner = mk.make_runner(**runner_kwargs)
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    config = copy.deepcopy(mk.kv_cache_config)
    return runner, stock(runner, config, **rf.stock_kwargs(runner, config))


def describe(kv: dict) -> dict[str, dict[str, Any]]:
    """Per layer (sorted): its form and each view's dtype, shape, stride, storage offset
    (elements), storage number (in order of first use) and whether it is contiguous."""
    ids: dict[int, int] = {}
    out = {}
    for name in sorted(kv):
        value = kv[name]
        views = [value] if isinstance(value, torch.Tensor) else list(value)
        rows = []
        for t in views:
            sid = ids.setdefault(t.untyped_storage().data_ptr(), len(ids))
            rows.append(
                dict(dtype=str(t.dtype).removeprefix("torch."), shape=tuple(t.shape), stride=t.stride(),
                     offset=t.storage_offset(), storage=sid, contiguous=t.is_contiguous())
            )
        out[name] = dict(form=f"{type(value).__name__} of {len(views)}", views=rows)
    return out


def storage_sizes(kv: dict) -> dict[int, int]:
    ids: dict[int, int] = {}
    sizes = {}
    for name in sorted(kv):
        value = kv[name]
        for t in [value] if isinstance(value, torch.Tensor) else value:
            sid = ids.setdefault(t.untyped_storage().data_ptr(), len(ids))
            sizes[sid] = t.untyped_storage().nbytes()
    return sizes


def print_kv(kv: dict) -> None:
    """Print :func:`describe` of ``kv``, one line per view, and its storages."""
    for layer, row in describe(kv).items():
        print(f"   {layer}: {row['form']}")
        for view in row["views"]:
            print(f"      {view}")
    print(f"   storages (id: bytes): {storage_sizes(kv)}")
