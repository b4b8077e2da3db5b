"""Sparse MLA (DeepSeek V3.2 sparse attention, DSA): MLA plus the indexer key cache.

Three forms reach this strategy:

* a layer that stores nope + rope + the indexer key cache in one page
  (vllm-ascend's MLA spec with ``sparse_head_dim`` = (nope, rope, indexer));
  with vllm-ascend 0.23's DCP-replicated indexer
  (``sfa_dcp_replicated_indexer_size`` = r) a block holds r indexer
  sub-blocks: page = block_size x (nope + rope + r x indexer) x dtype size
  (``AscendMLAAttentionSpec.page_size_bytes``, vllm_ascend/core/kv_cache_interface.py);
* vllm-ascend's legacy form up to 0.13: a ``FullAttentionSpec`` of twice the
  MLA page (``num_kv_heads=1``, ``head_size=kv_lora_rank+qk_rope_head_dim``),
  restated by :func:`normalize_legacy_specs` as :class:`LegacySparseMLASpec`
  before planning;
* an indexer-only layer (upstream vLLM: ``MLAAttentionSpec`` with
  ``cache_role=INDEXER``), whose page is the indexer key cache alone. vLLM
  stores it in fp8 with one fp32 scale per 128 values (``uint8`` spec of
  head_size 128 + 4 = 132, ``DeepseekV32IndexerCache`` in
  vllm/model_executor/models/deepseek_v2.py): per block the fp8 keys
  (block_size x 128 bytes), then the scales (block_size x 4 bytes), as the
  indexer's cache writer ``indexer_k_quant_and_cache`` places them.

The indexer key cache is (block_size, 1, index_head_dim) per block (sub-block).
The quantised Ascend forms (C8) are the ``sparse_mla_c8`` kind.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import torch

from vllm_kv_strategies.core.specs import ascend_sparse_quant, restate_layer_specs, vllm_spec_class
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, ModelDims, PagePart, require_dense_page
from vllm_kv_strategies.core.strategies.mla import MLASplit, mla_spec_types


def _ascend_sparse_dims(spec: Any) -> tuple[int, ...]:
    dims = getattr(spec, "sparse_head_dim", None)
    return tuple(dims) if dims else ()


def is_indexer(spec: Any) -> bool:
    """An upstream indexer-only layer (``cache_role == INDEXER``)."""
    role = getattr(spec, "cache_role", None)
    return role is not None and getattr(role, "value", role) == "indexer"


def is_sparse_mla(spec: Any) -> bool:
    """True for specs of DeepSeek V3.2 sparse attention: an upstream indexer
    layer or a spec with vllm-ascend's ``sparse_head_dim``."""
    return is_indexer(spec) or bool(_ascend_sparse_dims(spec))


def sparse_split(spec: Any) -> MLASplit:
    """Widths of a vllm-ascend sparse spec's parts (elements per token and
    head): ``sparse_head_dim`` = (nope, rope, indexer).

    Raises:
        KVCacheLayoutError: nope + rope + indexer != head_size.
    """
    nope, rope, *rest = _ascend_sparse_dims(spec)
    split = MLASplit(nope, rope, rest[0] if rest else 0)
    if nope + rope + split.indexer != spec.head_size:
        raise KVCacheLayoutError(
            f"sparse MLA spec {type(spec).__name__}: head_size {spec.head_size} != nope {nope} + "
            f"rope {rope} + indexer {split.indexer}"
        )
    return split


#: Values per fp32 scale of vLLM's fp8 indexer key cache (``quant_block_size``).
FP8_INDEXER_BLOCK = 128


def indexer_key(spec: Any, width: int, dtype: Any, replicas: int = 1, group: str | None = None) -> PagePart:
    """``indexer_k``: (block_size, num_kv_heads, width) per (sub-)block,
    never split into kernel blocks (``replicas`` sub-blocks per block)."""
    shape = (spec.block_size, spec.num_kv_heads, width)
    return PagePart("indexer_k", dtype, shape, kernel_blocks=False, blocks=replicas, group=group)


def fp8_indexer_parts(spec: Any) -> tuple[PagePart, ...]:
    """vLLM's fp8 indexer page (a ``uint8`` indexer spec of head_size
    ``d + d / 128 x 4``): ``indexer_k`` fp8 (block_size, H, d), then
    ``indexer_scale`` fp32 (block_size, H, d / 128).

    Raises:
        KVCacheLayoutError: head_size is not of that form.
    """
    width = spec.head_size * FP8_INDEXER_BLOCK // (FP8_INDEXER_BLOCK + 4)
    scales = width // FP8_INDEXER_BLOCK
    if width % FP8_INDEXER_BLOCK or width + 4 * scales != spec.head_size:
        raise KVCacheLayoutError(
            f"indexer spec {type(spec).__name__}(head_size={spec.head_size}, dtype={spec.dtype}): not "
            f"{FP8_INDEXER_BLOCK}-value fp8 groups each followed by a 4-byte scale"
        )
    rows = (spec.block_size, spec.num_kv_heads)
    return (
        PagePart("indexer_k", torch.float8_e4m3fn, (*rows, width), kernel_blocks=False, group="indexer"),
        PagePart("indexer_scale", torch.float32, (*rows, scales), kernel_blocks=False, group="indexer"),
    )


class SparseMLAStrategy(KVCacheStrategy):
    name = "sparse_mla"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return (*mla_spec_types(), legacy_sparse_mla_spec_class())

    def matches(self, spec: Any) -> bool:
        return is_sparse_mla(spec)

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """nope, rope (as the MLA strategy) and ``indexer_k``
        (block_size, 1, index_head_dim) x the DCP replicas per block; an
        indexer-only layer has just its indexer (fp8 keys and their scales,
        see :func:`fp8_indexer_parts`, or one ``indexer_k`` (block_size,
        num_kv_heads, head_size) in another dtype). A sparse layer whose
        indexer is shared from another layer gets no ``indexer_k``.

        Raises:
            KVCacheLayoutError: the widths do not add up to ``head_size``.
            UnsupportedSpecError: quantised (C8) or packed pages.
        """
        require_dense_page(spec, self.name)
        if is_indexer(spec):
            if spec.dtype == torch.uint8:
                return fp8_indexer_parts(spec)
            return (PagePart("indexer_k", spec.dtype, (spec.block_size, spec.num_kv_heads, spec.head_size), kernel_blocks=False),)
        split = sparse_split(spec)
        parts = []
        if split.nope or split.rope:
            rows = (spec.block_size, spec.num_kv_heads)
            parts += [
                PagePart("nope", spec.dtype, (*rows, split.nope)),
                PagePart("rope", spec.dtype, (*rows, split.rope)),
            ]
        if split.indexer:
            parts.append(indexer_key(spec, split.indexer, spec.dtype, ascend_sparse_quant(spec).replicas))
        return tuple(parts)


# -- vllm-ascend's legacy form (0.11, 0.13) -------------------------------------


@cache
def legacy_sparse_mla_spec_class() -> type:
    """A subclass of vLLM's ``MLAAttentionSpec`` that restates a legacy sparse
    layer (see :func:`legacy_sparse_mla`): ``sparse_head_dim`` = (nope, rope,
    indexer) like vllm-ascend's later spec, ``page_size_padded`` = the K+V
    page the config reserved for it (bytes)."""
    base = vllm_spec_class("MLAAttentionSpec")

    @dataclasses.dataclass(frozen=True)
    class LegacySparseMLASpec(base):  # type: ignore[misc, valid-type]
        sparse_head_dim: tuple[int, ...] = ()
        page_size_padded: int | None = None

        @property
        def unpadded_page_size_bytes(self) -> int:
            return self.block_size * self.num_kv_heads * sum(self.sparse_head_dim) * self.dtype.itemsize

        @property
        def page_size_bytes(self) -> int:
            return self.unpadded_page_size_bytes if self.page_size_padded is None else self.page_size_padded

    return LegacySparseMLASpec


def legacy_sparse_mla(spec: Any, dims: ModelDims, index_head_dim: int) -> Any:
    """The spec to plan a layer with, for vllm-ascend's legacy sparse form.

    vllm-ascend 0.11 and 0.13 give each DeepSeek V3.2 layer a plain
    ``FullAttentionSpec(num_kv_heads=1, head_size=kv_lora_rank +
    qk_rope_head_dim)``: a K+V page of twice the MLA latent, of which nope,
    rope and the indexer key cache (block_size, 1, index_head_dim) use
    ``kv_lora_rank + qk_rope_head_dim + index_head_dim`` elements per token.
    Such a spec becomes a :func:`legacy_sparse_mla_spec_class` spec with the
    same block size and dtype; anything else is returned unchanged.

    Args:
        dims: the layer's ``ModelDims`` (kv_lora_rank, qk_rope_head_dim;
            ``index_head_dim`` when the model config has it).
        index_head_dim: the indexer width to use when ``dims`` has none (the
            release's hard-coded width).

    Raises:
        KVCacheLayoutError: nope + rope + indexer do not fit the K+V page.
    """
    nope, rope = dims.kv_lora_rank, dims.qk_rope_head_dim
    if type(spec) is not vllm_spec_class("FullAttentionSpec") or None in (nope, rope):
        return spec
    if spec.num_kv_heads != 1 or spec.head_size != nope + rope:
        return spec
    split = (nope, rope, dims.index_head_dim or index_head_dim)
    restated = legacy_sparse_mla_spec_class()(
        block_size=spec.block_size,
        num_kv_heads=1,
        head_size=sum(split),
        dtype=spec.dtype,
        sparse_head_dim=split,
        page_size_padded=spec.page_size_bytes,
    )
    if restated.unpadded_page_size_bytes > spec.page_size_bytes:
        raise KVCacheLayoutError(
            f"sparse MLA layer: nope {nope} + rope {rope} + indexer {split[2]} elements per token "
            f"do not fit the {spec.page_size_bytes}-byte page of {spec}"
        )
    return restated


def normalize_legacy_specs(kv_cache_config: Any, dims: Any, index_head_dim: int) -> Any:
    """``kv_cache_config`` with every group spec passed through
    :func:`legacy_sparse_mla` (a shallow copy), or the config itself when
    nothing changes. Call it only for a runner with ``use_sparse`` on a
    release with the legacy form. ``dims``: layer name -> ``ModelDims``."""
    return restate_layer_specs(kv_cache_config, lambda name, spec: legacy_sparse_mla(spec, dims(name), index_head_dim))
