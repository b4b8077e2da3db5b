"""The strategy interface: what one KV cache spec kind stores per block.

A strategy is a small stateless object. Given one layer's KV cache spec it
states the parts of a page (:class:`PagePart`: name, dtype, per-block shape)
and so the page size in bytes, and the :class:`LayoutFamily` that tells a
runner's layout code how the parts are placed. Strategies know nothing of
runners or devices; which spec classes exist in a release comes from
:mod:`vllm_kv_strategies.core.specs`.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, ClassVar

from vllm_kv_strategies.core.specs import LI_C8_FIELDS, SFA_C8_FIELD
from vllm_kv_strategies.errors import UnsupportedSpecError

if TYPE_CHECKING:
    import torch


class LayoutFamily(str, enum.Enum):
    """How a kind's parts are placed in raw buffers on layouts that choose
    (vllm-ascend's runner; upstream vLLM places every kind itself).

    * ``PER_PART``: attention. One raw buffer per part, each viewed with
      num_blocks as dim 0 (the KV transfer engines register them one by one);
      layers sharing a ``KVCacheTensor`` share the buffers part by part.
    * ``STATES``: Mamba / linear attention. One raw buffer holding every part
      (state), each placed by byte offset.
    * ``PLAIN``: one part in one raw buffer, viewed as a plain tensor and
      bound as such (the hidden-state cache of speculative decoding).
    * ``PACKETS``: one raw buffer, a packet per kernel block holding the
      parts back to back (the strategy's ``packet_parts(spec,
      kernel_block_size)``), bound as a tuple in its ``view_order`` (vllm-ascend
      0.30's C8 MXFP cache).
    """

    PER_PART = "per_part"
    STATES = "states"
    PLAIN = "plain"
    PACKETS = "packets"


@dataclass(frozen=True)
class Field:
    """One field of a packed row: ``width`` elements of ``dtype``.

    A quantised cell stores its data, its scales and the dimensions left
    unquantised side by side, token by token (vLLM's ``fp8_ds_mla``: fp8
    nope, fp32 scales, bf16 rope); a part's :attr:`PagePart.fields` name them.
    """

    name: str
    dtype: torch.dtype
    width: int

    @property
    def nbytes(self) -> int:
        return self.width * self.dtype.itemsize


@dataclass(frozen=True)
class PagePart:
    """One part of a KV cache page.

    Attributes:
        name: e.g. ``"k"``, ``"v"``, ``"nope"``, ``"rope"``, ``"indexer_k"``,
            ``"conv"``, ``"ssm"``.
        dtype: element dtype of the part's view.
        shape: per-block shape in elements, e.g. ``(block_size, num_kv_heads,
            head_size)``. A cache of ``num_blocks`` blocks views the part as
            ``(num_blocks * blocks, *shape)``.
        kernel_blocks: whether runners that split a block into kernel blocks
            (``shape[0]`` tokens into ``shape[0] // k`` blocks of ``k``) split
            this part; the sparse-MLA indexer cache keeps whole blocks.
        blocks: sub-blocks of ``shape`` per block (vllm-ascend's DCP-replicated
            sparse indexer holds one per DCP rank: its view's dim 0 is
            ``num_blocks * blocks``).
        group: parts that belong together (an indexer key and its scale). A
            release's layout may place a group in one raw buffer
            (:func:`vllm_kv_strategies.platforms.ascend.facts.coallocated_groups`).
        fields: what each row of the last dimension packs, in storage order
            (quantised cells: data, scales, unquantised dims); their bytes add
            up to one row. Empty for a plain part.

    Raises:
        ValueError: ``fields`` do not add up to one row, or ``blocks`` < 1.
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    kernel_blocks: bool = True
    blocks: int = 1
    group: str | None = None
    fields: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        if self.blocks < 1:
            raise ValueError(f"part {self.name}: blocks {self.blocks} < 1")
        row = self.shape[-1] * self.dtype.itemsize if self.shape else 0
        if self.fields and sum(f.nbytes for f in self.fields) != row:
            raise ValueError(
                f"part {self.name}: fields {[(f.name, f.nbytes) for f in self.fields]} do not add up to "
                f"its {row}-byte row ({self.shape[-1]} x {self.dtype})"
            )

    @property
    def nbytes(self) -> int:
        """Bytes per block."""
        return self.blocks * prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class ModelDims:
    """Model facts that some specs do not carry themselves.

    Upstream ``MLAAttentionSpec`` stores only ``head_size = kv_lora_rank +
    qk_rope_head_dim`` (elements); the split comes from the model's config.
    vllm-ascend's FA-quant MLA spec counts its unquantised rope in bytes of
    the model's dtype (``model_dtype``).
    """

    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    index_head_dim: int | None = None
    model_dtype: torch.dtype | None = None

    @classmethod
    def from_objects(cls, *sources: Any, model_dtype: torch.dtype | None = None) -> ModelDims:
        """Each width from the first source that has it as an int, e.g. the
        layer's attention module (vLLM's ``MLAAttention`` carries
        ``kv_lora_rank``), then the model's HF config; ``model_dtype`` as
        given (the model config's ``dtype``)."""

        def get(name: str) -> int | None:
            for source in sources:
                value = getattr(source, name, None)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
            return None

        return cls(get("kv_lora_rank"), get("qk_rope_head_dim"), get("index_head_dim"), model_dtype)


class KVCacheStrategy(ABC):
    """Builds the KV cache of one spec kind.

    Subclasses set ``name`` and ``family``, list the exact spec classes they
    serve in :meth:`spec_types` (the registry matches a spec's own class, never
    an ancestor's: a subclass a strategy does not list is not understood), and
    may refine the choice among strategies of one class with :meth:`matches`.
    """

    #: Short kind name used in logs and reports, e.g. ``"full_attention"``.
    name: ClassVar[str]
    #: How the parts are placed in raw buffers (see :class:`LayoutFamily`).
    family: ClassVar[LayoutFamily] = LayoutFamily.PER_PART

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

    def kind(self, spec: Any) -> str:
        """What the summary line calls a layer of ``spec``: the strategy's name
        by default (``sliding_window`` for windowed attention, say)."""
        return self.name

    def page_size_bytes(self, spec: Any, dims: ModelDims) -> int:
        """Bytes of one block's page without padding: the sum of the parts."""
        return sum(part.nbytes for part in self.page_parts(spec, dims))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: Spec fields that pack an attention page differently from plain per-token
#: elements (vLLM 0.32+), with their plain values.
_PACKING_FIELDS = (("num_head_slots", None), ("state_content_bytes", None), ("tokens_per_state", 1))
#: vllm-ascend's ``AscendMLAAttentionSpec`` fields of quantised (C8) sparse
#: caches (the ``sparse_mla_c8`` kind) and of indexer scales in the page
#: (``scale_dim``: DeepSeek V4's compressed cache, refused), with their plain values.
_ASCEND_QUANT_FIELDS = (
    *((name, False) for name in (*LI_C8_FIELDS, SFA_C8_FIELD)),
    ("scale_dim", 0),
)
#: Modes whose page is plain K/V elements (a per-tensor scale lives outside the cache).
_PLAIN_MODES = ("NONE", "FP8_PER_TENSOR")


def require_dense_page(spec: Any, kind: str) -> None:
    """Refuse attention pages that are not plain K/V (or latent) elements.

    Raises:
        UnsupportedSpecError: the spec packs its page (``num_head_slots``,
            ``state_content_bytes``, ``tokens_per_state`` != 1, a packed
            ``cache_dtype_str`` such as ``fp8_ds_mla``), stores per-token
            quantisation scales (``kv_quant_mode``; the ``quant_attention``
            kind lays out the per-token-head modes of dense attention), or is
            one of vllm-ascend's quantised sparse caches (``sparse_mla_c8``)
            or DeepSeek V4's indexer scales (``scale_dim``).
    """
    packed = {
        name: getattr(spec, name)
        for name, plain in (*_PACKING_FIELDS, *_ASCEND_QUANT_FIELDS)
        if getattr(spec, name, plain) != plain
    }
    mode = getattr(spec, "kv_quant_mode", None)
    if mode is not None and mode.name not in _PLAIN_MODES:
        packed["kv_quant_mode"] = mode.name
    cache_dtype = getattr(spec, "cache_dtype_str", None)
    dense_dtype = cache_dtype in (None, "auto", "bfloat16", "float16", "float32") or (
        cache_dtype.startswith("fp8") and not cache_dtype.endswith("_ds_mla")
    )
    if not dense_dtype:
        packed["cache_dtype_str"] = cache_dtype
    if packed:
        raise UnsupportedSpecError(f"{kind} strategy does not lay out packed KV pages: {type(spec).__name__} has {packed}")
