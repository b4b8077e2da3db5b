"""Mamba / linear attention (Qwen3-Next gated delta net, Mamba2, ...).

Page size = sum over states of prod(shape) x dtype size, each rounded up to
``MambaSpec.state_alignment`` bytes (vLLM 0.34; 1 before) (vLLM's
``MambaSpec.state_content_size_bytes``, before ``page_size_padded``). The states share
one raw buffer and are placed by byte offset, so states of different dtypes
(bf16 conv, fp32 ssm) come out exact; a state that does not end on the alignment is
followed by a ``<state>_align`` part of the gap's bytes, as ``MambaBase.bind_kv_cache``
(``vllm/model_executor/layers/mamba/abstract.py``, 0.34) starts the next state there.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_kv_strategies.core.specs import spec_classes
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, LayoutFamily, ModelDims, PagePart


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
        alignment = getattr(spec, "state_alignment", 1) or 1
        parts: list[PagePart] = []
        for n, s, d in zip(names, shapes, dtypes):
            parts.append(PagePart(n, d, tuple(s)))
            gap = -parts[-1].nbytes % alignment
            if gap:  # the next state starts on the alignment: these bytes hold no state
                parts.append(PagePart(f"{n}_align", torch.uint8, (gap,), kernel_blocks=False))
        return tuple(parts)
