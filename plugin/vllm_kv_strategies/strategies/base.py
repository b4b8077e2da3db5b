"""The strategy interface: what one KV cache spec kind stores per block.

A strategy is a small stateless object. Given one layer's KV cache spec it
states the parts of a page (``PagePart``: name, dtype, per-block shape) and so
the page size in bytes. Runner adapters turn those parts into tensors in the
layout their runner's attention backends expect; strategies know nothing of
runners, devices or vLLM releases (the compatibility module does).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class PagePart:
    """One part of a KV cache page.

    Attributes:
        name: e.g. ``"k"``, ``"v"``, ``"nope"``, ``"rope"``, ``"indexer_k"``,
            ``"conv"``, ``"ssm"``.
        dtype: element dtype of the part's view.
        shape: per-block shape in elements, e.g. ``(block_size, num_kv_heads,
            head_size)``. A cache of ``num_blocks`` blocks views the part as
            ``(num_blocks, *shape)``.
        kernel_blocks: whether runners that split a block into kernel blocks
            (``shape[0]`` tokens into ``shape[0] // k`` blocks of ``k``) split
            this part; the sparse-MLA indexer cache keeps whole blocks.
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    kernel_blocks: bool = True

    @property
    def nbytes(self) -> int:
        """Bytes per block."""
        return prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class ModelDims:
    """Model dimensions that some specs do not carry themselves (elements).

    Upstream ``MLAAttentionSpec`` stores only ``head_size = kv_lora_rank +
    qk_rope_head_dim``; the split comes from the model's config.
    """

    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    index_head_dim: int | None = None

    @classmethod
    def from_objects(cls, *sources: Any) -> ModelDims:
        """Each field from the first source that has it as an int, e.g. the
        layer's attention module (vLLM's ``MLAAttention`` carries
        ``kv_lora_rank``), then the model's HF config."""

        def get(name: str) -> int | None:
            for source in sources:
                value = getattr(source, name, None)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
            return None

        return cls(get("kv_lora_rank"), get("qk_rope_head_dim"), get("index_head_dim"))


class KVCacheStrategy(ABC):
    """Builds the KV cache of one spec kind.

    Subclasses set ``name``, list the spec classes they serve in
    :meth:`spec_types` (the registry resolves a spec's class through its MRO,
    most specific first) and may refine the choice with :meth:`matches`.
    """

    #: Short kind name used in logs and reports, e.g. ``"full_attention"``.
    name: ClassVar[str]
    #: True: each part lives in its own raw buffer on layouts that separate
    #: them (Ascend attention, for the KV transfer engines). False: one raw
    #: buffer is viewed as all parts (Mamba states).
    separate_buffers: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def spec_types(cls) -> tuple[type, ...]:
        """The KV cache spec classes this strategy serves (imported lazily)."""

    def matches(self, spec: Any) -> bool:
        """Refines the choice among strategies registered for one spec class.

        Strategies that override this are tried before those that do not.
        """
        return True

    @abstractmethod
    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """The parts of one page, in storage order.

        Raises:
            UnsupportedSpecError: the spec is a variant this strategy refuses.
            KVCacheLayoutError: the spec's dimensions cannot be split.
        """

    def page_size_bytes(self, spec: Any, dims: ModelDims) -> int:
        """Bytes of one block's page without padding: the sum of the parts."""
        return sum(part.nbytes for part in self.page_parts(spec, dims))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
