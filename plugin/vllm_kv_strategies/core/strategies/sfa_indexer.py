"""vllm-ascend 0.30's SFA indexer cache (DeepSeek V3.2 sparse attention): a
layer of its own beside the MLA layer (``...self_attn.indexer.k_cache``),
with ``AscendSFAIndexerCacheSpec`` (vllm_ascend/core/kv_cache_interface.py).

Page = r x block_size x num_kv_heads x (head_size x dtype size + scale_dim x
scale dtype size) bytes, r = ``sfa_dcp_replicated_indexer_size`` (one
indexer sub-block per DCP rank). Its parts, as
``NPUModelRunner._reshape_kv_cache_tensors`` (0.30) views them:

* ``indexer_k``: (block_size, num_kv_heads, head_size) of ``dtype`` per
  sub-block: bf16; int8 / fp8 with LI C8; uint8 keys of half the index head
  with LI C4 (``head_size`` is already halved there);
* ``indexer_scale`` (``scale_dim`` > 0): (block_size, num_kv_heads,
  scale_dim) of ``scale_dtype`` per sub-block (LI C8: one fp16 / fp32 scale
  per token); LI C4: (block_size, num_kv_heads, scale_dim / 2, 2) e8m0.

Both are never split into kernel blocks and belong to the ``indexer`` group:
0.30 allocates them in one raw buffer, the scale aligned to its dtype
(``_allocate_sparse_c8_indexer_tensors``;
:func:`~vllm_kv_strategies.platforms.ascend.facts.coallocated_groups`).
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import platform_spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, ModelDims, PagePart

GROUP = "indexer"


class SFAIndexerStrategy(KVCacheStrategy):
    name = "sfa_indexer"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return platform_spec_classes("AscendSFAIndexerCacheSpec")

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``indexer_k`` and, with ``scale_dim``, ``indexer_scale``, each with
        ``sfa_dcp_replicated_indexer_size`` sub-blocks per block.

        Raises:
            KVCacheLayoutError: an LI C4 scale width that is not even.
        """
        rows = (spec.block_size, spec.num_kv_heads)
        replicas = spec.sfa_dcp_replicated_indexer_size
        parts = [PagePart("indexer_k", spec.dtype, (*rows, spec.head_size), kernel_blocks=False, blocks=replicas, group=GROUP)]
        if spec.scale_dim:
            if spec.cache_sparse_li_c4 and spec.scale_dim % 2:
                raise KVCacheLayoutError(
                    f"{type(spec).__name__}: LI C4 scale_dim {spec.scale_dim} is not a whole number of e8m0 pairs"
                )
            scale = (*rows, spec.scale_dim // 2, 2) if spec.cache_sparse_li_c4 else (*rows, spec.scale_dim)
            parts.append(PagePart("indexer_scale", spec.scale_dtype, scale, kernel_blocks=False, blocks=replicas, group=GROUP))
        return tuple(parts)
