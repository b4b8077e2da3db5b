"""The hidden-state cache of speculative decoding (vLLM's
``extract_hidden_states`` / EAGLE-3 path, vllm PR #39160): one part per block.

``HiddenStateCacheSpec`` subclasses ``MLAAttentionSpec`` only to reuse its
single-latent page: block_size x num_kv_heads x head_size x dtype size, with
no nope/rope split. It stores hidden states, not attention keys, so the MLA
strategies never serve it (the registry matches exact classes). On Ascend
stock views it as one plain tensor (vllm-ascend 0.23
``NPUModelRunner._reshape_kv_cache_tensors``, the cache-only layer path).
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import spec_classes
from vllm_kv_strategies.core.strategies.base import (
    KVCacheStrategy,
    LayoutFamily,
    ModelDims,
    PagePart,
    require_dense_page,
)


class HiddenStateStrategy(KVCacheStrategy):
    name = "hidden_state"
    family = LayoutFamily.PLAIN

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return spec_classes("HiddenStateCacheSpec")

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``hidden``: (block_size, num_kv_heads, head_size) in ``spec.dtype``.

        Raises:
            UnsupportedSpecError: a packed page.
        """
        require_dense_page(spec, self.name)
        return (PagePart("hidden", spec.dtype, (spec.block_size, spec.num_kv_heads, spec.head_size)),)
