"""Writing the report: measured from the KV cache tensors a worker built.

At KV cache initialisation each worker logs one ``kv_strategies:`` summary
line; with ``KV_STRATEGIES_REPORT=DIR`` it also writes its report (schema
:data:`~.schema.SCHEMA_VERSION`) to ``DIR/kv_cache_report.<UTC time>.<pid>.rank<r>.json``
and copies it to ``DIR/kv_cache_report.latest.rank<r>.json``.

Everything is measured from the tensors themselves (storages, the bytes each
view addresses: :mod:`.addressed`), so stock's caches are reported the same
way as the plugin's: with a plan the report names each layer's strategy and
page parts; without one (``KV_STRATEGIES=observe``, the fallback) those are
null and the rest comes from the ``KVCacheConfig``. ``built_by`` says who built
it (:data:`~.summary.BUILT_BY`).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import torch

from vllm_kv_strategies.core.specs import required_bytes, tensor_layers
from vllm_kv_strategies.report.parallel import ParallelRanks, parallel_ranks
from vllm_kv_strategies._version import __version__
from vllm_kv_strategies.logger import PREFIX, logger
from vllm_kv_strategies.versions import Versions
from vllm_kv_strategies.report.files import run_id, write_report  # noqa: F401  (the writer's names: report.write_report)
from vllm_kv_strategies.report.schema import MARKER, SCHEMA_VERSION, iso, utc_now
from vllm_kv_strategies.report.addressed import Span, overlap, span
from vllm_kv_strategies.report.specs import budget_bytes, capacity, describe_groups, dtype_name, group_capacity, own_spec, spec_kind
from vllm_kv_strategies.report.summary import BUILT_BY, KVCacheSummary

#: Data pointers are reported aligned to at most this (2 MiB, the KV transfer need).
MAX_REPORTED_ALIGNMENT = 2 * 1024 * 1024


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _alignment(ptr: int) -> int:
    return min(ptr & -ptr, MAX_REPORTED_ALIGNMENT) if ptr else MAX_REPORTED_ALIGNMENT


def _record(storages: dict[int, dict], name: str, view: torch.Tensor) -> tuple[dict, Span]:
    """Count ``view`` of layer ``name`` in its buffer (``storages``: data pointer -> buffer); its span."""
    storage = view.untyped_storage()
    buf = storages.setdefault(storage.data_ptr(), {"id": len(storages), "bytes": storage.nbytes(), "layers": [], "extent": None})
    sp = span(tuple(view.shape), tuple(view.stride()), view.storage_offset(), view.element_size())
    start, end = sp.extent
    ext = buf["extent"]
    if sp.runs:
        buf["extent"] = (start, end) if ext is None else (min(ext[0], start), max(ext[1], end))
    if name not in buf["layers"]:
        buf["layers"].append(name)
    return buf, sp


def _built(plan: Any, kv_caches: dict[str, Any], modules: Any, layer_specs: dict) -> tuple[dict, dict]:
    """Layers built (the plan's, or the config's that were built) -> own spec; layers per strategy."""
    if plan is not None:
        return {name: own_spec(lp.spec, (modules or {}).get(name)) for name, lp in plan.layers.items()}, dict(plan.strategy_counts())
    return {name: spec for name, (_, spec) in layer_specs.items() if name in kv_caches}, {}


def _summary(storages: dict[int, dict], built: dict, per_strategy: dict, config: Any, strided: bool | None,
             vllm_config: Any, rank: int) -> KVCacheSummary:
    """The totals of the buffers ``storages`` holding the layers ``built``."""
    # required: what vLLM's config plans (on vllm-ascend 0.30 the plan lays the strided tensors out
    # per layer, as stock does; the config's own tensors say what was planned)
    per_kind = dict(Counter(spec_kind(spec) for spec in built.values()))
    allocated = sum(b["bytes"] for b in storages.values())
    required = required_bytes(list(config.kv_cache_tensors), strided)
    # Outside the views' extent: the transfer alignment's slack (allocate + 2 MiB, view from an
    # aligned address: prefix + tail = 2 MiB), else bytes no view uses (a region's prefix or tail).
    aligned = unused = 0
    for base, b in storages.items():
        outside = b["bytes"] - (b["extent"][1] - b["extent"][0]) if b["extent"] else b["bytes"]  # empty views: all
        if b["extent"] and outside == MAX_REPORTED_ALIGNMENT and (base + b["extent"][0]) % MAX_REPORTED_ALIGNMENT == 0:
            aligned += outside
        else:
            unused += outside
    block_sizes = {spec.block_size for spec in built.values()}
    vllm_capacity = capacity(vllm_config, config)
    return KVCacheSummary(
        rank=rank,
        layers_per_strategy=per_strategy,
        layers_per_kind=per_kind,
        raw_buffers=len(storages),
        bytes_allocated=allocated,
        bytes_required=required,
        alignment_padding=aligned,
        unused_bytes=unused,
        duplicated_bytes=max(0, allocated - required - aligned - unused),
        num_blocks=config.num_blocks,
        token_slots=config.num_blocks * min(block_sizes, default=0),
        tokens=vllm_capacity[0] if vllm_capacity else None,
        max_concurrency=vllm_capacity[1] if vllm_capacity else None,
        max_model_len=vllm_capacity[2] if vllm_capacity else None,
    )


def _settle(plan: Any, kv_cache_config: Any, mode: str | None, built_by: str | None) -> tuple[Any, str, str]:
    """The config, mode and ``built_by`` a report of ``plan`` uses (build_report's defaults and checks)."""
    from vllm_kv_strategies import envs

    config = kv_cache_config if kv_cache_config is not None else getattr(plan, "kv_cache_config", None)
    if config is None:
        raise ValueError("build_report needs a plan or a kv_cache_config")
    mode = envs.KV_STRATEGIES if mode is None else mode
    if built_by is None:
        built_by = "plugin" if plan is not None else "stock_observed" if mode == "observe" else "stock_fallback"
    if built_by not in BUILT_BY:
        raise ValueError(f"built_by {built_by!r} is none of {', '.join(BUILT_BY)}")
    return config, mode, built_by


def build_report(
    plan: Any,
    kv_caches: dict[str, Any],
    *,
    strided: bool | None = None,
    kv_cache_config: Any = None,
    mode: str | None = None,
    model: str | None = None,
    runner: str | None = None,
    parallel_config: Any = None,
    place: ParallelRanks | None = None,
    built_by: str | None = None,
    fallback_reason: str | None = None,
    vllm_config: Any = None,
    modules: Any = None,
    resizable: dict | None = None,
) -> dict:
    """The JSON-able report (schema 3) of ``kv_caches``.

    Args:
        plan: the :class:`~vllm_kv_strategies.core.plan.KVCachePlan` the plugin
            planned (and checked) before the build, or None when it made
            none (observe, the fallback): then each layer's strategy and
            page parts are null.
        kv_caches: layer name -> tensor (or list/tuple of tensors) as built.
        strided: the config's tensors describe one backing allocation (vLLM
            0.30+), so the required bytes are its size, not the sum of sizes;
            defaults to what the installed vLLM has.
        kv_cache_config: vLLM's ``KVCacheConfig``; defaults to the plan's.
        mode: the ``KV_STRATEGIES`` value; defaults to the environment's.
        model: the served model's name or path, if the caller knows it.
        runner: the runner, e.g. ``"GPUModelRunner (V1)"``.
        parallel_config: the runner's vLLM ``ParallelConfig`` (its data
            parallel rank); None: no data parallelism.
        place: the worker's ranks (the report's ``rank``, ``world_size`` and
            ``parallel``), when the caller knows them; defaults to
            :func:`~vllm_kv_strategies.report.parallel.parallel_ranks` of
            ``parallel_config``: vLLM's global rank, data-parallel engines
            included; rank 0 of 1 without torch.distributed.
        built_by: who built it, a key of :data:`~.summary.BUILT_BY`;
            defaults to ``plugin`` with a plan, else ``stock_observed`` in
            observe mode and ``stock_fallback`` otherwise.
        fallback_reason: why the plugin fell back to stock (``stock_fallback``).
        vllm_config: vLLM's ``VllmConfig``, for vLLM's capacity (tokens, max
            concurrency; null without it).
        modules: layer -> attention module (the runner's
            ``static_forward_context``): each layer's own window
            (:func:`~.specs.own_spec`).
        resizable: for a resizable KV cache (vLLM 0.34), which views these are:
            ``phase`` ``reserved`` (bound over the reservation at initialisation) or
            ``committed`` (bound by ``extend_kv_cache`` after warm-up), ``reserved_bytes``,
            ``reserved_num_blocks`` and ``committed_num_blocks``; the report's ``resizable`` key.

    Raises:
        ValueError: neither ``plan`` nor ``kv_cache_config`` given, or an
            unknown ``built_by``.
    """
    from vllm_kv_strategies import envs

    config, mode, built_by = _settle(plan, kv_cache_config, mode, built_by)
    place = parallel_ranks(parallel_config) if place is None else place
    groups, layer_specs = describe_groups(config, modules)
    group_capacity(vllm_config, config, groups)
    storages: dict[int, dict] = {}
    layers: dict[str, dict] = {}
    spans: list[tuple[int, Span, str]] = []  # (buffer, bytes addressed, layer)
    for name, value in kv_caches.items():
        views = []
        for view in _tensors(value):
            buf, sp = _record(storages, name, view)
            spans.append((buf["id"], sp, name))
            views.append(
                {
                    "shape": list(view.shape),
                    "stride": list(view.stride()),
                    "dtype": dtype_name(view.dtype),
                    "bytes": sp.nbytes,
                    "buffer": buf["id"],
                    "offset": view.storage_offset() * view.element_size(),
                    "data_ptr_alignment": _alignment(view.data_ptr()),
                }
            )
        lp = plan.layers.get(name) if plan is not None else None
        gid, spec = (lp.group_id, own_spec(lp.spec, (modules or {}).get(name))) if lp else layer_specs.get(name, (None, None))
        if plan is not None and lp is None:
            strategy = "shared"  # outside the plan: reuses another layer's cache (cross-layer KV sharing)
        else:
            strategy = lp.strategy.name if lp else None
        layers[name] = {
            "group": gid,
            "spec_type": type(spec).__name__ if spec is not None else None,
            "kind": spec_kind(spec) if spec is not None else None,
            "strategy": strategy,
            "page_parts": [
                {"name": p.name, "shape": list(p.shape), "dtype": dtype_name(p.dtype), "bytes_per_block": p.nbytes}
                for p in (lp.parts if lp else ())
            ],
            "views": views,
        }
    # Aliases: layers whose views share a byte (not merely the backing buffer or an extent).
    aliases: dict[str, set[str]] = {name: set() for name in layers}
    for i, (b, sp, name) in enumerate(spans):
        for b2, sp2, other in spans[i + 1:]:
            if b == b2 and other != name and other not in aliases[name] and overlap(sp, sp2):
                aliases[name].add(other)
                aliases[other].add(name)
    for name, entry in layers.items():
        entry["aliases"] = sorted(aliases[name])
    built, per_strategy = _built(plan, kv_caches, modules, layer_specs)
    summary = _summary(storages, built, per_strategy, config, strided, vllm_config, place.rank)
    installed = Versions.detect()
    now = utc_now()
    return {
        "schema_version": SCHEMA_VERSION,
        "report": MARKER,
        "created": iso(now),
        "run_id": envs.KV_STRATEGIES_RUN_ID or run_id(now),
        "pid": os.getpid(),
        "world_size": place.world_size,
        "parallel": place.as_dict(),
        "model": model,
        "runner": runner,
        "mode": mode,
        "built_by": built_by,
        "fallback_reason": fallback_reason if built_by == "stock_fallback" else None,
        "versions": {"plugin": __version__, "vllm": installed.vllm, "vllm_ascend": installed.vllm_ascend,
                     "torch": installed.torch},
        "kv_cache": {
            "num_blocks": config.num_blocks,
            "tensors": [{"size": t.size, "layers": tensor_layers(t)} for t in config.kv_cache_tensors],
            "groups": groups,
            "budget_bytes": budget_bytes(vllm_config),
        },
        "totals": summary.totals(),
        "layers": layers,
        "buffers": [{"id": b["id"], "bytes": b["bytes"], "layers": b["layers"]} for b in storages.values()],
        **({"resizable": dict(resizable)} if resizable else {}),
    }


def log_summary(
    plan: Any,
    kv_caches: dict[str, Any],
    *,
    kv_cache_config: Any = None,
    mode: str | None = None,
    model: str | None = None,
    runner: str | None = None,
    parallel_config: Any = None,
    built_by: str | None = None,
    fallback_reason: str | None = None,
    vllm_config: Any = None,
    modules: Any = None,
    resizable: dict | None = None,
) -> KVCacheSummary | None:
    """Log the summary line; write the report when ``KV_STRATEGIES_REPORT`` is set.

    Arguments as :func:`build_report`; ``plan`` None when the plugin made none. Never raises: the KV cache is built already, and a failure to
    describe it is logged as a warning (None returned) rather than stopping vLLM.
    """
    from vllm_kv_strategies import envs

    directory = envs.KV_STRATEGIES_REPORT
    report = None
    try:
        if directory:  # the whole report, to write
            report = build_report(plan, kv_caches, kv_cache_config=kv_cache_config, mode=mode, model=model, runner=runner,
                                  parallel_config=parallel_config, built_by=built_by, fallback_reason=fallback_reason,
                                  vllm_config=vllm_config, modules=modules, resizable=resizable)
            summary, built_by = KVCacheSummary(**report["totals"]), report["built_by"]
        else:  # only the summary line's totals (the same as the report's)
            config, mode, built_by = _settle(plan, kv_cache_config, mode, built_by)
            place = parallel_ranks(parallel_config)
            layer_specs = describe_groups(config, modules)[1] if plan is None else {}
            storages: dict[int, dict] = {}
            for name, value in kv_caches.items():
                for view in _tensors(value):
                    _record(storages, name, view)
            summary = _summary(storages, *_built(plan, kv_caches, modules, layer_specs), config, None, vllm_config, place.rank)
    except Exception as exc:
        built = "stock built" if plan is None else "the strategies built"
        logger.warning("%s could not describe the KV cache %s: %r", PREFIX, built, exc)
        return None
    logger.info("%s", summary.line(built_by, fallback_reason if built_by == "stock_fallback" else None))
    if resizable:
        logger.info("%s rank %d: resizable KV cache, %s views: %s bytes reserved for %s blocks; %s blocks committed",
                    PREFIX, summary.rank, resizable.get("phase"), resizable.get("reserved_bytes"),
                    resizable.get("reserved_num_blocks"), resizable.get("committed_num_blocks"))
    if report is not None:
        try:
            path = write_report(report, directory)
            logger.info("%s rank %d: report written to %s", PREFIX, summary.rank, path)
        except Exception as exc:  # the KV cache is built: a report that cannot be written never stops vLLM
            logger.warning("%s could not write the report to %s: %s", PREFIX, directory, exc)
    return summary
