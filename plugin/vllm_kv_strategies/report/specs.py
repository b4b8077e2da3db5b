"""How a report describes KV cache specs: kinds and the fields of each
spec, read from vLLM's spec objects (vLLM is imported only for its
``get_kv_cache_spec_kind``, already loaded in a worker)."""

from __future__ import annotations

import re
from typing import Any

from ..compat.specs import layer_spec


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


def describe_groups(kv_cache_config: Any) -> tuple[list[dict], dict[str, tuple[int, Any]]]:
    """The config's groups with their distinct layer specs
    (``UniformTypeKVCacheSpecs`` unwrapped), and layer -> (group, spec)."""
    groups, layer_specs = [], {}
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        by_spec: dict[Any, tuple[Any, list[str]]] = {}
        for name in group.layer_names:
            spec = layer_spec(group.kv_cache_spec, name)
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
