"""vLLM's Model Runner V2 (``vllm/v1/worker/gpu/``), vLLM's default wherever
Triton works.

V2's ``GPUModelRunner`` does not subclass V1's; its ``initialize_kv_cache``
calls the module-level ``init_kv_cache`` of ``gpu/attn_utils.py`` (allocate,
cross-layer sharing, kernel-block views, ``bind_kv_cache_to_layers``), which
``gpu/model_runner.py`` imports by name. The plugin replaces that name in
``gpu/model_runner.py`` (the narrowest seam: nothing else of
``initialize_kv_cache`` changes) with a function that plans and checks every
layer before anything is allocated, calls the stock ``init_kv_cache``
unchanged, and reports what was built. The result is stock's by construction.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.platforms.upstream import facts
from vllm_kv_strategies.logger import PREFIX, warn_once
from vllm_kv_strategies.platforms.adapter import RunnerAdapter
from vllm_kv_strategies.platforms.upstream.check import plan_upstream

#: Set while a V2 runner's ``initialize_kv_cache`` runs and cleared by the
#: patched ``init_kv_cache``, to tell whether the plugin built the cache.
_pending: list[Any] = []


def shared_kv_cache_layers(vllm_config: Any) -> dict[str, str]:
    """Cross-layer KV sharing: layer -> the layer whose cache it reuses
    (V2's ``get_shared_kv_cache_layers`` in ``gpu/attn_utils.py``)."""
    from vllm.v1.worker.gpu.attn_utils import get_shared_kv_cache_layers

    return dict(get_shared_kv_cache_layers(vllm_config))


def resizable_facts(kv_cache_config: Any, phase: str, committed_num_blocks: int | None) -> dict[str, Any]:
    """The report's ``resizable`` entry: the reservation of ``kv_cache_config`` (the engine's
    config the cache was reserved from: its ``num_blocks`` and the bytes of its one backing
    allocation, as ``ExtensibleKVCache`` reserves them) and, once committed, the blocks kept."""
    from vllm_kv_strategies.core.specs import required_bytes

    tensors = [t for t in kv_cache_config.kv_cache_tensors if not getattr(t, "host_resident", False)]
    return {"phase": phase, "reserved_bytes": required_bytes(tensors),
            "reserved_num_blocks": kv_cache_config.num_blocks, "committed_num_blocks": committed_num_blocks}


class UpstreamV2Adapter(RunnerAdapter):
    target = facts.V2
    built_with_plan = "vllm_checked"  # vLLM's own allocation builds it; the plugin checked the plan first

    def replacements(self) -> dict[str, Any]:
        return {"init_kv_cache": self.init_kv_cache, "GPUModelRunner.initialize_kv_cache": self.initialize_kv_cache}

    def patch(self, module: Any) -> bool:
        """Patch; from vLLM 0.34 ``auto`` patches only the code its cell proved
        (:func:`~vllm_kv_strategies.platforms.upstream.facts.v2_code_mismatch`)."""
        from vllm_kv_strategies.versions import Versions

        return self.patch_published(module, facts.v2_code_mismatch(Versions.detect().vllm))

    def init_kv_cache(
        self,
        stock: Any,
        forward_context: dict[str, Any],
        kv_cache_config: Any,
        device: Any,
        kernel_block_sizes: list[int],
        vllm_config: Any,
        *args: Any,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Same signature and result as V2's stock ``init_kv_cache``."""
        if _pending:
            _pending[-1] = None
        plan = None
        if not self.observing():
            # V2 adds KV-sharing layers to their target's group (init_attn_backend)
            # and binds only the layers the forward context has.
            skip = set(shared_kv_cache_layers(vllm_config))
            plan = self.plan_or_fallback(
                lambda: plan_upstream(
                    kv_cache_config, vllm_config.model_config.hf_text_config, forward_context, skip,
                    vllm_config.cache_config.get_resolved_kv_cache_layout(), bound_by_name=False,
                    cache_config=vllm_config.cache_config,
                )
            )
        kv_caches = stock(forward_context, kv_cache_config, device, kernel_block_sizes, vllm_config, *args, **kwargs)
        if plan is not None:
            self.inject_test_fault(plan, kv_caches, forward_context)
        # A resizable KV cache (vLLM 0.34: allocate= the reservation's hook): these are the reserved
        # views; extend_kv_cache binds the committed ones after warm-up (platforms/upstream/extend.py).
        resizable = resizable_facts(kv_cache_config, "reserved", None) if kwargs.get("allocate") is not None else None
        self.report(plan, kv_caches, kv_cache_config, vllm_config, forward_context, resizable=resizable)
        return kv_caches

    def initialize_kv_cache(self, stock: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
        """Stock; afterwards, one warning if the KV cache was built without the
        patched ``init_kv_cache``."""
        _pending.append(runner)
        try:
            result = stock(runner, *args, **kwargs)
        finally:
            built = _pending.pop() is None
        if not built:
            warn_once(
                f"{PREFIX} {type(runner).__qualname__} (V2) built its KV cache without "
                "gpu/model_runner.py's init_kv_cache: the plugin did nothing in this worker"
            )
        return result
