"""What stock vLLM and the plugin would allocate for a planned config, per
worker, before anything is allocated.

Upstream vLLM allocates the config's ``KVCacheTensor``s (each ``size``
bytes; from 0.30 one backing they share: :func:`~vllm_kv_strategies.core.specs.required_bytes`)
and so does the plugin where it builds. Whether it builds is decided
by the same check its upstream adapter runs before allocating
(:func:`vllm_kv_strategies.platforms.upstream.check.plan_upstream`: a strategy for
every layer's spec, the parts adding up to the page, every view inside its
tensor); where that check raises, ``KV_STRATEGIES=auto`` leaves the runner to
stock (one warning) and ``on`` stops, and plan says which with the adapter's
own message. A :class:`~vllm_kv_strategies.errors.StockWouldFailError` means
stock would fail or corrupt the cache on it too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vllm_kv_strategies.core.specs import required_bytes
from vllm_kv_strategies.errors import KVStrategiesError, StockWouldFailError


@dataclasses.dataclass(frozen=True)
class Sides:
    """One worker: stock's bytes, and the plugin's layers per strategy or why it would not build."""

    stock_bytes: int
    plugin_layers: dict[str, int] | None
    plugin_refusal: str | None = None
    stock_would_fail: bool = False

    def line(self) -> str:
        if self.plugin_layers is not None:
            counts = ", ".join(f"{k}={v}" for k, v in sorted(self.plugin_layers.items()))
            return (f"stock vLLM allocates {self.stock_bytes:,} bytes per worker (the config's tensors); with the "
                    f"plugin, vLLM builds the same {self.stock_bytes:,} bytes and the plugin checks every layer "
                    f"(layers per strategy: {counts})")
        if self.stock_would_fail:
            return f"stock would fail on this config, and the plugin stops before allocating: {self.plugin_refusal}"
        return (f"stock vLLM allocates {self.stock_bytes:,} bytes per worker; the plugin would not build it "
                f"(KV_STRATEGIES=auto: stock builds it, one warning; on: start-up stops): {self.plugin_refusal}")


def sides(vllm_config, kv_cache_config, forward_context: dict[str, Any], shared: dict[str, str]) -> Sides:
    """:class:`Sides` of one worker's config, by the upstream adapter's own check."""
    from vllm.config import set_current_vllm_config

    from vllm_kv_strategies.platforms.upstream.check import plan_upstream

    stock = required_bytes(list(kv_cache_config.kv_cache_tensors))
    try:
        with set_current_vllm_config(vllm_config):
            plan = plan_upstream(kv_cache_config, vllm_config.model_config.hf_text_config, forward_context, set(shared),
                                 vllm_config.cache_config.get_resolved_kv_cache_layout(), bound_by_name=True,
                                 cache_config=vllm_config.cache_config)
    except KVStrategiesError as exc:
        return Sides(stock, None, str(exc), isinstance(exc, StockWouldFailError))
    return Sides(stock, dict(plan.strategy_counts()))
