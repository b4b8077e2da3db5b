"""The totals of one worker's KV cache and the ``kv_strategies:`` summary line
(torch-free: the writer fills it from tensors, the CLI from files)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..logger import PREFIX


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


@dataclass(frozen=True)
class KVCacheSummary:
    """Totals of one worker's KV cache (bytes unless named otherwise); the
    ``totals`` object of a report.

    ``layers_per_kind`` counts the layers by KV cache spec kind (vLLM's
    ``get_kv_cache_spec_kind``; ``full_attention/sliding_window`` for a full
    attention spec that carries a sliding window); ``layers_per_strategy`` by
    the strategy that built them (empty when stock built the cache).
    ``alignment_padding`` is allocated but outside every view (2 MiB alignment
    slack); ``duplicated_bytes`` is what was allocated beyond the required
    bytes and that padding (e.g. one buffer per layer where layers share a
    ``KVCacheTensor``). ``tokens`` is ``num_blocks`` times the smallest block
    size.
    """

    rank: int
    layers_per_strategy: dict[str, int]
    layers_per_kind: dict[str, int] | None
    raw_buffers: int
    bytes_allocated: int
    bytes_required: int
    alignment_padding: int
    duplicated_bytes: int
    num_blocks: int
    tokens: int

    def totals(self) -> dict:
        return asdict(self)

    def line(self, built_by: str = "plugin") -> str:
        """The summary line, e.g. ``kv_strategies: rank 0: built 4 layers
        (full_attention=4) in 1 raw buffer; ...``; ``stock built`` when
        ``built_by`` is ``"stock"`` (``KV_STRATEGIES=observe``)."""
        kinds = self.layers_per_kind if self.layers_per_kind is not None else self.layers_per_strategy
        layers = sum(kinds.values())
        detail = _counts(kinds)
        if self.layers_per_strategy and self.layers_per_strategy != kinds:
            detail += f"; strategies {_counts(self.layers_per_strategy)}"
        plural = "s" if self.raw_buffers != 1 else ""
        verb = "stock built" if built_by == "stock" else "built"
        return (
            f"{PREFIX} rank {self.rank}: {verb} {layers} layers ({detail}) "
            f"in {self.raw_buffers} raw buffer{plural}; {self.bytes_allocated} bytes allocated "
            f"({self.bytes_allocated / 2**30:.3f} GiB; required {self.bytes_required}, "
            f"alignment padding {self.alignment_padding}, duplicated {self.duplicated_bytes}); "
            f"num_blocks {self.num_blocks}, {self.tokens} tokens"
        )
