"""How a report describes KV cache specs: kinds and the fields of each
spec, read from vLLM's spec objects (vLLM is imported only for its
``get_kv_cache_spec_kind``, already loaded in a worker)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from vllm_kv_strategies.core.specs import layer_spec


def dtype_name(value: Any) -> str | None:
    return None if value is None else str(value).removeprefix("torch.")


def spec_kind(spec: Any) -> str:
    """The layer kind shown in the summary line: vLLM's
    ``get_kv_cache_spec_kind`` (``vllm/v1/kv_cache_interface.py``, 0.23+),
    e.g. ``full_attention``, ``sliding_window``, ``mla_attention``, ``mamba``;
    ``/sliding_window`` or ``/chunked_local_attention`` appended for a full
    attention spec that carries a window (sliding layers stored as full
    attention); the class name in snake case where vLLM says ``unknown``."""
    try:
        from vllm.v1.kv_cache_interface import get_kv_cache_spec_kind

        kind = get_kv_cache_spec_kind(spec).value
    except (ImportError, AttributeError):
        kind = "unknown"
    if kind == "unknown":
        kind = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", type(spec).__name__.removesuffix("Spec")).lower()
    if kind in ("full_attention", "mla_attention", "sink_full_attention"):
        if getattr(spec, "sliding_window", None) is not None:
            kind += "/sliding_window"
        elif getattr(spec, "attention_chunk_size", None) is not None:
            kind += "/chunked_local_attention"
    return kind


def spec_fields(spec: Any, layers: list[str]) -> dict:
    """The report's description of one KV cache spec (see the schema's ``spec``)."""
    fields: dict[str, Any] = {
        "type": type(spec).__name__,
        "kind": spec_kind(spec),
        "block_size": spec.block_size,
        "page_size_bytes": spec.page_size_bytes,
        "dtype": dtype_name(getattr(spec, "dtype", None)),
        "sliding_window": getattr(spec, "sliding_window", None),
        "attention_chunk_size": getattr(spec, "attention_chunk_size", None),
    }
    for attr in ("num_kv_heads", "head_size"):
        if isinstance(getattr(spec, attr, None), int):
            fields[attr] = getattr(spec, attr)
    if getattr(spec, "shapes", None) is not None and getattr(spec, "dtypes", None) is not None:  # Mamba states
        fields["state_shapes"] = [list(s) for s in spec.shapes]
        fields["state_dtypes"] = [dtype_name(d) for d in spec.dtypes]
    fields["layers"] = layers
    return fields


_NO_WINDOW = object()


def own_spec(spec: Any, module: Any) -> Any:
    """The layer's own spec: ``spec`` with the window of its attention module.

    With vLLM's hybrid KV cache manager off, ``unify_hybrid_kv_cache_specs``
    (``vllm/v1/core/kv_cache_utils.py``) stores sliding-window layers as full
    attention with their window, and ``FullAttentionSpec.merge`` gives the
    whole group that window: the group's spec then calls a Gemma-3-like
    model's global layers windowed. Each layer's module (vLLM's ``Attention``
    sets ``sliding_window`` per layer) says which it is. ``spec`` unchanged
    where the module does not say (no module, no ``sliding_window``) or agrees.
    """
    window = getattr(module, "sliding_window", _NO_WINDOW)
    if window is _NO_WINDOW or not dataclasses.is_dataclass(spec) or "sliding_window" not in {
        f.name for f in dataclasses.fields(spec)
    }:
        return spec
    if window == spec.sliding_window or not (window is None or isinstance(window, int)):
        return spec
    try:
        return dataclasses.replace(spec, sliding_window=window)
    except (TypeError, ValueError, AssertionError):  # a spec class that refuses the field: the config's
        return spec


def describe_groups(
    kv_cache_config: Any, modules: Mapping[str, Any] | None = None
) -> tuple[list[dict], dict[str, tuple[int, Any]]]:
    """The config's groups with their distinct layer specs
    (``UniformTypeKVCacheSpecs`` unwrapped, each layer's window from its
    attention module in ``modules``, the runner's ``static_forward_context``:
    :func:`own_spec`), and layer -> (group, own spec)."""
    groups, layer_specs = [], {}
    modules = modules or {}
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        by_spec: dict[Any, tuple[Any, list[str]]] = {}
        for name in group.layer_names:
            spec = own_spec(layer_spec(group.kv_cache_spec, name), modules.get(name))
            layer_specs[name] = (gid, spec)
            try:
                hash(spec)
                key = spec
            except TypeError:  # a spec with an unhashable field: grouped by identity
                key = id(spec)
            by_spec.setdefault(key, (spec, []))[1].append(name)
        groups.append({"id": gid, "layers": list(group.layer_names),
                       "specs": [spec_fields(spec, names) for spec, names in by_spec.values()]})
    return groups, layer_specs


def capacity(vllm_config: Any, kv_cache_config: Any) -> tuple[int, float, int] | None:
    """vLLM's KV cache capacity: (tokens, maximum concurrency, max_model_len).

    vLLM's ``get_kv_cache_capacity`` (``vllm/v1/core/kv_cache_utils.py``,
    0.30+) where the release has it, else ``get_max_concurrency_for_kv_cache_config``
    times ``max_model_len`` (how vLLM 0.23+ logs "KV cache size: N tokens";
    releases before 0.23 log ``num_blocks // groups x smallest block size``
    instead). The concurrency is how many ``max_model_len`` requests fit: every
    group draws a request's blocks (``cdiv(max_memory_usage_bytes, page)``,
    sliding windows capped) from the one pool of ``num_blocks``. None where
    vLLM cannot say (no ``vllm_config``, a spec it cannot size).
    """
    if vllm_config is None:
        return None
    try:
        from vllm.v1.core import kv_cache_utils

        max_model_len = vllm_config.model_config.max_model_len
        if hasattr(kv_cache_utils, "get_kv_cache_capacity"):
            tokens, concurrency = kv_cache_utils.get_kv_cache_capacity(vllm_config, kv_cache_config)
        else:
            concurrency = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config)
            tokens = int(concurrency * max_model_len)
        return int(tokens), float(concurrency), int(max_model_len)
    except Exception:  # described without it: the line and report say "not known"
        return None


def group_capacity(vllm_config: Any, kv_cache_config: Any, groups: list[dict]) -> None:
    """Add to each described group (:func:`describe_groups`) its ``token_slots``
    (``num_blocks`` x its block size) and, where vLLM can say, its
    ``blocks_per_request``: the blocks one ``max_model_len`` request takes from
    the pool in that group (``cdiv(max_memory_usage_bytes, page_size_bytes)``,
    as vLLM's ``get_max_concurrency_for_kv_cache_config`` counts them; a
    sliding window caps it)."""
    for described, group in zip(groups, kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        described["token_slots"] = kv_cache_config.num_blocks * spec.block_size
        described["blocks_per_request"] = None
        if vllm_config is not None:
            try:
                described["blocks_per_request"] = -(-spec.max_memory_usage_bytes(vllm_config) // spec.page_size_bytes)
            except Exception:  # a spec vLLM cannot size here: not known
                pass


def budget_bytes(vllm_config: Any) -> int | None:
    """The KV cache budget per worker vLLM's planner sized ``num_blocks`` from, where the
    config says it: ``cache_config.kv_cache_memory_bytes`` (``--kv-cache-memory-bytes``; vLLM's
    CPU platform sets it from ``VLLM_CPU_KVCACHE_SPACE``); else None (a measured budget)."""
    value = getattr(getattr(vllm_config, "cache_config", None), "kv_cache_memory_bytes", None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
