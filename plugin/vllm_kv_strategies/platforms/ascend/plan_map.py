"""``plan ... --plot`` on vllm-ascend: one side's KV cache, as its runner bound it on the meta
device (:func:`.plan.build`), in the report's form that :mod:`vllm_kv_strategies.report.memory_map`
draws: buffers (told apart by storage: meta tensors have no data pointers), each layer's views
(shape, stride, dtype, offset, bytes addressed), its KV cache group and kind, the layers whose views
address the same bytes, and the totals (allocated, required, num_blocks, token capacity). Only the
keys the map reads; it is not a report file.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import required_bytes
from vllm_kv_strategies.report.addressed import overlap, span
from vllm_kv_strategies.report.specs import dtype_name, spec_kind


def _tensors(value: Any) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def side_map(layers: dict[str, Any], kv_cache_config: Any, budget: int, tokens: int | None,
             max_concurrency: float | None) -> dict:
    """The map's input for the caches the stage's attention ``layers`` hold (``module.kv_cache``)
    after the side's build of ``kv_cache_config``; ``budget``: the KV cache bytes per worker
    before the worker's budget step (the map's width)."""
    groups = {name: (g, spec) for g, group in enumerate(kv_cache_config.kv_cache_groups)
              for name in group.layer_names for spec in [group.kv_cache_spec]}
    buffers: dict[int, dict] = {}
    out_layers: dict[str, dict] = {}
    spans = []
    for name, module in layers.items():
        if name not in groups:
            continue
        views = []
        seen = set()
        for t in _tensors(getattr(module, "kv_cache", None)):
            storage = t.untyped_storage()
            key = (storage._cdata, t.storage_offset(), tuple(t.shape), tuple(t.stride()))
            if key in seen:  # the same view bound once per virtual engine
                continue
            seen.add(key)
            buf = buffers.setdefault(storage._cdata, {"id": len(buffers), "bytes": storage.nbytes(), "layers": []})
            if name not in buf["layers"]:
                buf["layers"].append(name)
            sp = span(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.element_size())
            spans.append((buf["id"], sp, name))
            views.append({"shape": list(t.shape), "stride": list(t.stride()), "dtype": dtype_name(t.dtype),
                          "bytes": sp.nbytes, "buffer": buf["id"], "offset": t.storage_offset() * t.element_size()})
        group, spec = groups[name]
        out_layers[name] = {"group": group, "kind": spec_kind(spec), "views": views, "aliases": []}
    for i, (b, sp, name) in enumerate(spans):
        for b2, sp2, other in spans[i + 1:]:
            if b == b2 and other != name and other not in out_layers[name]["aliases"] and overlap(sp, sp2):
                out_layers[name]["aliases"].append(other)
                out_layers[other]["aliases"].append(name)
    block_sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
    totals = {"bytes_allocated": sum(b["bytes"] for b in buffers.values()), "raw_buffers": len(buffers),
              "bytes_required": required_bytes(list(kv_cache_config.kv_cache_tensors)),
              "num_blocks": kv_cache_config.num_blocks, "token_slots": kv_cache_config.num_blocks * min(block_sizes, default=0),
              "tokens": tokens, "max_concurrency": max_concurrency}
    return {"buffers": list(buffers.values()), "layers": out_layers, "totals": totals,
            "kv_cache": {"budget_bytes": budget, "num_blocks": kv_cache_config.num_blocks}}
