"""The totals of one worker's KV cache and the ``kv_strategies:`` summary line
(torch-free: the writer fills it from tensors, the CLI from files)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vllm_kv_strategies.logger import PREFIX

#: A report's ``built_by``: who allocated and laid out the KV cache.
BUILT_BY = {
    "plugin": "the plugin",  # the strategies allocated and laid it out (vllm-ascend's runner)
    "vllm_checked": "vLLM, checked by the plugin",  # vLLM's own allocation, every layer planned and checked first
    "stock_fallback": "stock (the plugin fell back)",  # planning failed in KV_STRATEGIES=auto: stock built it
    "stock_observed": "stock (observed)",  # KV_STRATEGIES=observe: stock built it, the plugin only describes it
}


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


@dataclass(frozen=True)
class KVCacheSummary:
    """Totals of one worker's KV cache (bytes unless named otherwise); the
    ``totals`` object of a report.

    ``layers_per_kind`` counts the layers by KV cache spec kind (vLLM's
    ``get_kv_cache_spec_kind`` of each layer's own spec;
    ``full_attention/sliding_window`` for a sliding layer stored as full
    attention); ``layers_per_strategy`` by the strategy that planned them
    (empty when no plan was made). Bytes allocated but addressed by no view,
    outside the views' extent of a buffer: ``alignment_padding`` where the
    buffer was allocated 2 MiB larger to align its views for KV transfer,
    ``unused_bytes`` otherwise (an unused prefix or tail of a region).
    ``duplicated_bytes`` is what was allocated beyond the required bytes and
    those (e.g. one buffer per layer where layers share a ``KVCacheTensor``).
    ``token_slots`` is ``num_blocks`` x the smallest block size (not a
    capacity: every group draws blocks from the one pool). ``tokens`` and
    ``max_concurrency`` are vLLM's capacity for ``max_model_len`` requests
    (:func:`~vllm_kv_strategies.report.specs.capacity`), None where unknown.
    """

    rank: int
    layers_per_strategy: dict[str, int]
    layers_per_kind: dict[str, int] | None
    raw_buffers: int
    bytes_allocated: int
    bytes_required: int
    alignment_padding: int
    unused_bytes: int
    duplicated_bytes: int
    num_blocks: int
    token_slots: int
    tokens: int | None
    max_concurrency: float | None
    max_model_len: int | None

    def totals(self) -> dict:
        return asdict(self)

    def line(self, built_by: str = "plugin", fallback_reason: str | None = None) -> str:
        """The summary line, e.g. ``kv_strategies: rank 0: built 4 layers
        (full_attention=4) in 1 raw buffer; ...``: ``built`` (the plugin),
        ``vLLM built and the plugin checked``, or ``stock built`` (observe,
        or the fallback, whose reason ends the line); see :data:`BUILT_BY`."""
        kinds = self.layers_per_kind if self.layers_per_kind is not None else self.layers_per_strategy
        layers = sum(kinds.values())
        detail = _counts(kinds)
        if self.layers_per_strategy and self.layers_per_strategy != kinds:
            detail += f"; strategies {_counts(self.layers_per_strategy)}"
        plural = "s" if self.raw_buffers != 1 else ""
        verb = {"vllm_checked": "vLLM built and the plugin checked", "plugin": "built"}.get(built_by, "stock built")
        capacity = ""
        if self.tokens is not None and self.max_concurrency is not None:
            capacity = (f"; capacity {_n(self.tokens)} tokens, max concurrency {self.max_concurrency:,.2f}x "
                        f"for {_n(self.max_model_len)}-token requests (vLLM's)")
        fallback = f"; the plugin fell back to stock: {fallback_reason}" if built_by == "stock_fallback" and fallback_reason else ""
        return (
            f"{PREFIX} rank {self.rank}: {verb} {layers} layers ({detail}) "
            f"in {self.raw_buffers} raw buffer{plural}; {_n(self.bytes_allocated)} bytes allocated "
            f"({self.bytes_allocated / 2**30:.3f} GiB; required {_n(self.bytes_required)}, "
            f"alignment padding {_n(self.alignment_padding)}, unused {_n(self.unused_bytes)}, "
            f"duplicated {_n(self.duplicated_bytes)}); "
            f"num_blocks {_n(self.num_blocks)} ({_n(self.token_slots)} token slots){capacity}{fallback}"
        )


def _n(value: object) -> str:
    """An integer with thousands separators, as ``report`` and ``plan`` print them; else as it is."""
    return f"{value:,}" if isinstance(value, int) else str(value)
