"""vllm-ascend 0.11's int8 K/V in the BSH layout (``additional_config``
``{"kv_cache_dtype": "int8"}``, with a ``kv_quant_type: C8`` checkpoint).

The layers' specs are plain ``FullAttentionSpec(dtype=int8)``; what differs is
the runner: for every full-attention layer it views K and V as
``(num_blocks, block_size, num_kv_heads x head_size)``
(``AscendAttentionBackend.get_bsh_kv_cache_shape``, vllm_ascend/attention/attention_v1.py),
never split into kernel blocks (``NPUModelRunner.initialize_kv_cache_tensors``,
vllm_ascend/worker/model_runner_v1.py, 0.11), as ``AscendC8KVCacheMethod``
writes (tokens, heads x head) rows. Page = block_size x num_kv_heads x 2 x
head_size bytes, the plain formula. Because only the runner's config says so,
such a spec is restated (:func:`restate_bsh`) as :class:`BSHAttentionSpec`
before planning, as the sparse MLA kind restates 0.11's legacy form; which
release and config do this is :func:`vllm_kv_strategies.platforms.ascend.facts.bsh_int8_layout`.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from vllm_kv_strategies.core.specs import head_size_v, restate_layer_specs, vllm_spec_class
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, ModelDims, PagePart


@cache
def bsh_spec_class() -> type:
    """A subclass of vLLM's ``FullAttentionSpec``, same fields and page, that
    marks a layer the runner views in the BSH layout."""

    @dataclasses.dataclass(frozen=True)
    class BSHAttentionSpec(vllm_spec_class("FullAttentionSpec")):  # type: ignore[misc]
        pass

    return BSHAttentionSpec


def restate_bsh(kv_cache_config: Any) -> Any:
    """``kv_cache_config`` with every exact ``FullAttentionSpec`` restated as
    :class:`BSHAttentionSpec` (a shallow copy; see :func:`restate_layer_specs`)."""
    full = vllm_spec_class("FullAttentionSpec")

    def restate(name: str, spec: Any) -> Any:
        if type(spec) is not full:
            return spec
        return bsh_spec_class()(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.init})

    return restate_layer_specs(kv_cache_config, restate)


class BSHAttentionStrategy(KVCacheStrategy):
    name = "bsh_attention"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return (bsh_spec_class(),)

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``k`` and ``v``: (block_size, num_kv_heads x head_size) each, in
        ``spec.dtype``, never split into kernel blocks.

        Raises:
            KVCacheLayoutError: K and V head sizes differ (stock halves the
                page between them).
        """
        if head_size_v(spec) != spec.head_size:
            raise KVCacheLayoutError(
                f"{type(spec).__name__}: the BSH layout halves the page between K and V; head_size "
                f"{spec.head_size} != head_size_v {head_size_v(spec)}"
            )
        row = (spec.block_size, spec.num_kv_heads * spec.head_size)
        return (PagePart("k", spec.dtype, row, kernel_blocks=False), PagePart("v", spec.dtype, row, kernel_blocks=False))
