"""Mamba / linear attention (Qwen3-Next gated delta net, Mamba2, ...).

Page size = sum over states of prod(shape) x dtype size (vLLM's
``MambaSpec.page_size_bytes`` before ``page_size_padded``). The states share
one raw buffer and are placed by byte offset, so states of different dtypes
(bf16 conv, fp32 ssm) come out exact.
"""

from __future__ import annotations

from typing import Any

from ..compat.specs import spec_classes
from .base import KVCacheStrategy, LayoutFamily, ModelDims, PagePart


class MambaStrategy(KVCacheStrategy):
    name = "mamba"
    family = LayoutFamily.STATES

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return spec_classes("MambaSpec")

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """One part per state, named ``conv`` and ``ssm`` when there are two
        (``state0``, ``state1``, ... otherwise), with the state's own shape
        (per block, elements) and dtype."""
        shapes, dtypes = tuple(spec.shapes), tuple(spec.dtypes)
        names = ("conv", "ssm") if len(shapes) == 2 else tuple(f"state{i}" for i in range(len(shapes)))
        return tuple(PagePart(n, d, tuple(s)) for n, s, d in zip(names, shapes, dtypes))
