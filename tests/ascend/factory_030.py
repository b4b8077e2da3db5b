"""Helpers for the hand-built configs of test modules that run on every release: a
``KVCacheTensor`` in the installed vLLM's form, and stock against the plugin on one config
(separate runners, as stock's ``initialize_kv_cache`` would call each)."""

from __future__ import annotations

from typing import Any

import runner_factory as rf
from vllm.v1.kv_cache_interface import KVCacheTensor

import kv_compare

#: vLLM 0.30's strided ``KVCacheTensor`` (``layers``, ``layer_stride``, ``block_stride``,
#: ``offset``; no ``shared_by``).
STRIDED = rf.RELEASE >= (0, 30)


def kvt(size: int, layers: list[str], num_blocks: int) -> KVCacheTensor:
    """A tensor of ``size`` bytes for ``layers``: ``shared_by`` up to 0.23 (every layer
    aliases the whole ``size``); from 0.30 the strided form vLLM's planner writes for a
    layer-outermost layout (each layer a contiguous ``size`` region of ``num_blocks`` pages,
    ``size`` the whole backing)."""
    if not STRIDED:
        return KVCacheTensor(size=size, shared_by=list(layers))
    return KVCacheTensor(
        size=size * len(layers), layers=list(layers), layer_stride=size, block_stride=size // num_blocks, offset=0
    )


def stock_and_plugin(config: Any, **runner_kw: Any) -> tuple[Any, dict, Any, dict]:
    """(stock's runner, stock's caches, the plugin's runner, the plugin's caches), each built
    on a runner of its own with the arguments the release's ``initialize_kv_cache`` passes."""
    stock_runner = rf.make_runner(config, **runner_kw)
    stock = kv_compare.stock_init(stock_runner, config)
    plugin_runner = rf.make_runner(config, **runner_kw)
    return stock_runner, stock, plugin_runner, kv_compare.plugin_init(plugin_runner, config)


def fa_quant_model_030(num_layers: int = 61, num_blocks: int = 4, quantised_spec: bool = True) -> rf.ModelKV:
    """DeepSeek-V3 MLA layers (512 + 64) for FA quant on vllm-ascend 0.30. ``quantised_spec``: the
    FA-quant spec form, ``AscendMLAAttentionSpec(head_size 576 + 64 = 640, int8, cache_dtype_str
    None)`` (int8 nope + bf16 rope); else the plain bf16 MLA spec (576)."""
    import torch

    if quantised_spec:
        spec = rf.AscendMLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=640, dtype=torch.int8, cache_dtype_str=None)
    else:
        spec = rf.AscendMLAAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, cache_dtype_str="auto")
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(num_layers)}
    config = rf.build_kv_cache_config(specs, num_blocks)
    return rf.ModelKV("DeepSeek-V3 FA-quant (0.30)", 1, config, specs, {"model_type": "deepseek_v3", "mla_dims": (512, 64)})


def fa_quant_runner_030(mk: rf.ModelKV, kv_role: str = "kv_consumer") -> Any:
    """A runner of ``mk`` with FA quant on as vllm-ascend 0.30 enables it (``enable_fa_quant``:
    an MLA model, ``cache_config.cache_dtype`` int8, a KV consumer on A2, and the checkpoint's
    ``AscendModelSlimConfig`` with ``fa_quant_type`` FAKQuant and ``fa_k.scale`` for every layer,
    from 0.30's ``quantization.configs.modelslim_config``)."""
    from vllm_ascend.quantization.configs.modelslim_config import AscendModelSlimConfig  # noqa: PLC0415

    description = {"fa_quant_type": "FAKQuant"}
    description.update({f"{name.removesuffix('.attn')}.fa_k.scale": "FLOAT" for name in mk.specs})
    runner = mk.make_runner(kv_transfer=True, kv_role=kv_role, quant_config=AscendModelSlimConfig(description))
    runner.vllm_config.cache_config.cache_dtype = "int8"
    return runner
