"""Dense attention with per-token-head quantised K/V (vLLM 0.32+
``--kv-cache-dtype int8_per_token_head`` / ``fp8_per_token_head`` /
``int4_per_token_head``): each token's K and V of each head stored with an
inline fp32 scale.

The cell of one (token, head) is ``[K (hs) | K scale | V (hs) | V scale]``,
each scale one fp32 (``TritonAttentionImpl._ensure_scale_caches``,
vllm/v1/attention/backends/triton_attn.py); int4 packs two values per byte
(hs / 2 bytes). ``TritonAttentionBackend.customize_spec`` (same file) sets
``state_content_bytes`` = (hs_k + hs_v) x size(dtype) + 2 x 4, so page =
block_size x num_kv_heads x state_content_bytes (``AttentionSpec.page_size_bytes``,
vllm/v1/kv_cache_interface.py). vLLM builds the views itself
(``create_kv_cache_views``); this kind names the fields of the cell and checks
that they add up to the page. No vllm-ascend release defines these modes.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_kv_strategies.core.specs import head_size_v, spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.core.strategies.base import Field, KVCacheStrategy, ModelDims, PagePart
from vllm_kv_strategies.core.strategies.full_attention import SPEC_CLASS_NAMES

#: Per-token-head modes -> (dtype of the K/V values, values per stored byte
#: element). FP8 is read as the platform's fp8 (e4m3fn; e4m3fnuz on ROCm).
PER_TOKEN_HEAD_MODES = {
    "INT8_PER_TOKEN_HEAD": (torch.int8, 1),
    "FP8_PER_TOKEN_HEAD": (torch.float8_e4m3fn, 1),
    "INT4_PER_TOKEN_HEAD": (torch.uint8, 2),
}


def _mode(spec: Any) -> str | None:
    mode = getattr(spec, "kv_quant_mode", None)
    return getattr(mode, "name", None)


class QuantAttentionStrategy(KVCacheStrategy):
    name = "quant_attention"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return spec_classes(*SPEC_CLASS_NAMES)

    def matches(self, spec: Any) -> bool:
        return _mode(spec) in PER_TOKEN_HEAD_MODES

    def kind(self, spec: Any) -> str:
        """The mode, e.g. ``int8_per_token_head``."""
        return _mode(spec).lower()

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """One part ``kv`` (block_size, num_kv_heads, C) in ``spec.dtype``,
        C = state_content_bytes / size(dtype), with the fields ``k``,
        ``k_scale`` (fp32), ``v``, ``v_scale`` (fp32).

        Raises:
            UnsupportedSpecError: K and V head sizes differ (the reader splits
                the cell in halves), or the page is packed otherwise
                (``num_head_slots``, ``tokens_per_state``).
            KVCacheLayoutError: ``state_content_bytes`` is not that cell.
        """
        values, per_byte = PER_TOKEN_HEAD_MODES[_mode(spec)]
        hs, hs_v = spec.head_size, head_size_v(spec)
        slots, tokens = getattr(spec, "num_head_slots", None), getattr(spec, "tokens_per_state", 1)
        if hs != hs_v or slots not in (None, spec.num_kv_heads) or tokens != 1:
            raise UnsupportedSpecError(
                f"{self.name} strategy lays out one [K | scale | V | scale] cell per token and head of equal "
                f"K/V widths: {type(spec).__name__}({_mode(spec)}) has head_size {hs}, head_size_v {hs_v}, "
                f"num_head_slots {slots}, tokens_per_state {tokens}"
            )
        width = hs // per_byte
        fields = (
            Field("k", values, width),
            Field("k_scale", torch.float32, 1),
            Field("v", values, width),
            Field("v_scale", torch.float32, 1),
        )
        content = getattr(spec, "state_content_bytes", None)
        cell = sum(f.nbytes for f in fields)
        if hs % per_byte or content != cell or cell % spec.dtype.itemsize:
            raise KVCacheLayoutError(
                f"{type(spec).__name__}({_mode(spec)}, head_size={hs}, dtype={spec.dtype}): state_content_bytes "
                f"{content} is not the {cell}-byte cell {[(f.name, f.nbytes) for f in fields]}"
            )
        shape = (spec.block_size, spec.num_kv_heads, cell // spec.dtype.itemsize)
        return (PagePart("kv", spec.dtype, shape, fields=fields),)
