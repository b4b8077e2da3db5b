"""C8 MXFP attention (vllm-ascend 0.30, ``--kv-cache-dtype mxfp8``): fp8 K/V in
NZ fragments with e8m0 scales, packed per kernel block.

The spec is a plain ``FullAttentionSpec`` restated by vllm-ascend's
``mxfp_cache_spec`` (vllm_ascend/attention/attention_c8_mxfp.py): dtype
``float8_e4m3fn``, ``state_content_bytes`` = k + v + (k + v) / 32 bytes per
token and head, so page = block_size x num_kv_heads x state_content_bytes.
Each kernel block of ``kb`` tokens is one packet, in storage order:

* ``k``: (num_kv_heads, k / 32, kb, 32) fp8;
* ``k_scale``: (num_kv_heads, kb / 16, k / 64, 16, 2) e8m0 bytes (uint8);
* ``v``: (num_kv_heads, v / 32, kb, 32) fp8;
* ``v_scale``: (num_kv_heads, v / 16, kb / 64, 16, 2) e8m0 bytes (uint8),

each section contiguous; packet i lies at i x page / (block_size / kb). The
runner binds them as ``(k, v, k_scale, v_scale)`` (:data:`VIEW_ORDER`), as
``mxfp_paged_cache_views`` does.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_kv_strategies.versions import Versions
from vllm_kv_strategies.core.specs import spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, LayoutFamily, ModelDims, PagePart

#: Values per fp8 group of one e8m0 scale byte (MXFP8).
GROUP = 32
#: Bytes of the NZ fragments the sections are tiled in: head dim (K, V) and
#: tokens (K scale) / head dim (V scale) per fragment, scale values per group.
DIM_FRAG, K_SCALE_TOKEN_FRAG, V_SCALE_DIM_FRAG, SCALE_GROUP, PAIR = 32, 16, 16, 64, 2
#: The order the runner binds the sections in.
VIEW_ORDER = ("k", "v", "k_scale", "v_scale")


def is_c8_mxfp(spec: Any) -> bool:
    """A ``FullAttentionSpec`` as ``mxfp_cache_spec`` restates it: fp8 with
    ``state_content_bytes`` = k + v + (k + v) / 32, one state per token."""
    k, v = spec.head_size, getattr(spec, "head_size_v", spec.head_size)
    mode = getattr(getattr(spec, "kv_quant_mode", None), "name", None)
    return (
        mode in (None, "NONE")  # vLLM's per-token-head fp8 cells can have the same bytes
        and spec.dtype == torch.float8_e4m3fn
        and getattr(spec, "tokens_per_state", 1) == 1
        and getattr(spec, "state_content_bytes", None) == k + v + (k + v) // GROUP
    )


def packet_parts(spec: Any, kernel_block_size: int) -> tuple[PagePart, ...]:
    """The four sections of one kernel block's packet, in storage order.

    Raises:
        KVCacheLayoutError: head sizes not multiples of 64, or a kernel block
            not a multiple of 64 tokens (the scale fragments' sizes).
    """
    k, v, heads, kb = spec.head_size, getattr(spec, "head_size_v", spec.head_size), spec.num_kv_heads, kernel_block_size
    if k % SCALE_GROUP or v % DIM_FRAG or kb % SCALE_GROUP:
        raise KVCacheLayoutError(
            f"C8 MXFP {type(spec).__name__}(head_size={k}, head_size_v={v}): needs head sizes that are multiples of "
            f"{SCALE_GROUP} ({DIM_FRAG} for V) and kernel blocks of a multiple of {SCALE_GROUP} tokens, got {kb}"
        )
    fp8, e8m0 = torch.float8_e4m3fn, torch.uint8
    return (
        PagePart("k", fp8, (heads, k // DIM_FRAG, kb, DIM_FRAG), kernel_blocks=False),
        PagePart("k_scale", e8m0, (heads, kb // K_SCALE_TOKEN_FRAG, k // SCALE_GROUP, K_SCALE_TOKEN_FRAG, PAIR), kernel_blocks=False),
        PagePart("v", fp8, (heads, v // DIM_FRAG, kb, DIM_FRAG), kernel_blocks=False),
        PagePart("v_scale", e8m0, (heads, v // V_SCALE_DIM_FRAG, kb // SCALE_GROUP, V_SCALE_DIM_FRAG, PAIR), kernel_blocks=False),
    )


class C8MXFPStrategy(KVCacheStrategy):
    """One buffer per layer, a packet per kernel block
    (:func:`~vllm_kv_strategies.platforms.ascend.layout.packets.packet_layer_views`)."""

    name = "c8_mxfp"
    family = LayoutFamily.PACKETS
    view_order = VIEW_ORDER

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        """vLLM's ``FullAttentionSpec``, where vllm-ascend is installed (the
        packet layout is vllm-ascend's; upstream vLLM has no such kind)."""
        return spec_classes("FullAttentionSpec") if Versions.detect().vllm_ascend is not None else ()

    def matches(self, spec: Any) -> bool:
        return is_c8_mxfp(spec)

    def packet_parts(self, spec: Any, kernel_block_size: int) -> tuple[PagePart, ...]:
        """:func:`packet_parts`: one kernel block's packet."""
        return packet_parts(spec, kernel_block_size)

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """The packet of a whole block (kernel block = block): its sections'
        bytes add up to the page."""
        return packet_parts(spec, spec.block_size)
