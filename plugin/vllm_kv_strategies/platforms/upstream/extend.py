"""vLLM 0.34's resizable KV cache: the views vLLM finally binds, after warm-up.

With ``initialize_kv_cache(extensible=True)`` (CUDA / ROCm by default in 0.34), V2's
``init_kv_cache`` lays the views out over address space reserved for the config's
``num_blocks`` (``ExtensibleKVCache.allocate``); the plugin checks and reports them there as
the *reserved* views. After warm-up and graph capture the worker calls ``extend_kv_cache``
(``vllm/v1/worker/extensible_kv_cache.py``, imported by name into ``gpu_worker.py``): it
commits the final ``num_blocks`` (the minimum across ranks; it may shrink), rebuilds every
view over the committed bytes and binds them outside ``init_kv_cache``. The plugin wraps that
name: it calls the stock function unchanged, then plans the runner's committed config against
the committed tensors (``ExtensibleKVCache.committed_kv_cache_tensors``), checks the views
vLLM bound, and reports them as the *committed* views (reserved bytes, committed
``num_blocks``).
"""

from __future__ import annotations

import copy
from typing import Any

from vllm_kv_strategies.platforms.upstream import facts
from vllm_kv_strategies.platforms.adapter import RunnerAdapter
from vllm_kv_strategies.platforms.upstream.check import plan_upstream
from vllm_kv_strategies.platforms.upstream.v2 import resizable_facts, shared_kv_cache_layers


class UpstreamExtendAdapter(RunnerAdapter):
    target = facts.V2_EXTEND
    built_with_plan = "vllm_checked"

    def replacements(self) -> dict[str, Any]:
        return {"extend_kv_cache": self.extend_kv_cache}

    def patch(self, module: Any) -> bool:
        """Patch; ``auto`` only where the V2 code is what the cell proved
        (:func:`~vllm_kv_strategies.platforms.upstream.facts.v2_code_mismatch`)."""
        from vllm_kv_strategies.versions import Versions

        return self.patch_published(module, facts.v2_code_mismatch(Versions.detect().vllm))

    def extend_kv_cache(self, stock: Any, runner: Any, kv_cache_config: Any, num_blocks: int, *args: Any,
                        **kwargs: Any) -> Any:
        """Stock's ``extend_kv_cache(runner, kv_cache_config, num_blocks)``, then the check
        and the report of the committed views (see the module doc)."""
        result = stock(runner, kv_cache_config, num_blocks, *args, **kwargs)
        cache = getattr(runner, "extensible_kv_cache", None)
        if cache is None:  # stock asserts it; nothing of ours to describe
            return result
        layout = runner.cache_config.get_resolved_kv_cache_layout()
        committed = copy.copy(runner.kv_cache_config)
        committed.kv_cache_tensors = cache.committed_kv_cache_tensors(committed, layout, committed.num_blocks)
        forward_context = runner.compilation_config.static_forward_context
        vllm_config = runner.vllm_config
        plan = None
        if not self.observing():
            skip = set(shared_kv_cache_layers(vllm_config))
            plan = self.plan_or_fallback(
                lambda: plan_upstream(committed, vllm_config.model_config.hf_text_config, forward_context, skip, layout,
                                      bound_by_name=False, cache_config=vllm_config.cache_config)
            )
        resizable = resizable_facts(kv_cache_config, "committed", committed.num_blocks)
        self.report(plan, dict(runner.kv_caches_by_layer), committed, vllm_config, forward_context, resizable=resizable)
        return result
