"""Binding the KV caches vllm-ascend's ``NPUModelRunner`` built: every layer
to its attention module, and into ``runner.kv_caches``."""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.platforms.ascend import facts


def bind_every_layer(kv_caches: dict[str, Any], forward_context: dict[str, Any], runner_kv_caches: list[Any], num_attn_module: int) -> None:
    """Bind every layer's cache to its module and append every cache to
    ``runner_kv_caches``, ordered by layer index and, within one index, as
    ``kv_caches`` lists them. Follows vLLM's ``bind_kv_cache``
    (``vllm/v1/worker/utils.py``) except that several layers of one index
    (an MTP draft layer beside a target layer, cross and self attention) all
    stay in ``runner_kv_caches``. A module gets its cache in the form the
    installed vLLM binds it: ``[cache]`` (one per virtual engine) up to vLLM
    0.18, the cache itself in 0.23
    (:func:`~vllm_kv_strategies.platforms.ascend.facts.binds_per_virtual_engine`)."""
    from vllm.model_executor.models.utils import extract_layer_index

    order = sorted(kv_caches, key=lambda name: extract_layer_index(name, num_attn_module))  # stable
    runner_kv_caches.extend(kv_caches[name] for name in order)
    wrap = facts.binds_per_virtual_engine()
    for name, cache in kv_caches.items():
        forward_context[name].kv_cache = [cache] if wrap else cache
