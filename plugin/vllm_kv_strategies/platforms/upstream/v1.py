"""vLLM's V1 model runner (``GPUModelRunner``; the CPU runner inherits it).

The KV cache is what stock builds, by construction: the plugin calls the stock
``GPUModelRunner.initialize_kv_cache_tensors`` (vLLM's ``allocate_kv_cache``,
cross-layer sharing, kernel-block views, ``bind_kv_cache``) unchanged, and
adds what it adds around it: every layer's spec resolved to a strategy and its
page and tensor bounds checked before anything is allocated (the stock
fallback in ``auto``), the summary line and report, and the test-only fault.
``initialize_kv_cache`` is wrapped only to say which runner the worker is and
to warn when the KV cache was built without the plugin.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.platforms.upstream import facts
from vllm_kv_strategies.platforms.adapter import RunnerAdapter
from vllm_kv_strategies.platforms.upstream.check import plan_upstream


class UpstreamV1Adapter(RunnerAdapter):
    target = facts.V1
    built_with_plan = "vllm_checked"  # vLLM's own allocation builds it; the plugin checked the plan first

    def replacements(self) -> dict[str, Any]:
        return {
            "GPUModelRunner.initialize_kv_cache_tensors": self.initialize_kv_cache_tensors,
            "GPUModelRunner.initialize_kv_cache": self.initialize_kv_cache,
        }

    def initialize_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Same signature and result as the stock method; see the module doc."""
        self.mark_built(runner)
        forward_context = runner.compilation_config.static_forward_context
        plan = None
        if not self.observing():
            skip = set(getattr(runner, "runner_only_attn_layers", ()) or ()) | set(runner.shared_kv_cache_layers)
            plan = self.plan_or_fallback(
                lambda: plan_upstream(
                    kv_cache_config, getattr(runner.model_config, "hf_text_config", None), forward_context, skip,
                    runner.cache_config.get_resolved_kv_cache_layout(), bound_by_name=True,
                    cache_config=runner.cache_config,
                )
            )
        kv_caches = stock(runner, kv_cache_config, *args, **kwargs)
        if plan is not None:
            self.inject_test_fault(plan, kv_caches, forward_context)
        self.report(plan, kv_caches, kv_cache_config, runner)
        return kv_caches

    def initialize_kv_cache(self, stock: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
        """Stock; afterwards, one warning if the KV cache was built by a path
        the plugin did not patch (a runner subclass overriding the build)."""
        return self.checked_initialize(stock, runner, "GPUModelRunner.initialize_kv_cache_tensors", *args, **kwargs)
