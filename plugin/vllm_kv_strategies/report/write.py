"""Writing the report: measured from the KV cache tensors a worker built.

At KV cache initialisation each worker logs one ``kv_strategies:`` summary
line; with ``KV_STRATEGIES_REPORT=DIR`` it also writes its report (schema
:data:`~.schema.SCHEMA_VERSION`) to ``DIR/kv_cache_report.<UTC time>.<pid>.rank<r>.json``
and copies it to ``DIR/kv_cache_report.latest.rank<r>.json``.

Everything is measured from the tensors themselves (storages, view extents),
so stock's caches are reported the same way as the plugin's: with a plan the
report names each layer's strategy and page parts; without one
(``KV_STRATEGIES=observe``, stock built the cache) those are null and the rest
comes from the ``KVCacheConfig``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

import torch

from .. import compat
from ..compat.specs import required_bytes, tensor_layers
from ..compat.parallel import ParallelRanks, parallel_ranks
from .._version import __version__
from ..logger import PREFIX, logger
from .schema import MARKER, SCHEMA_VERSION, file_name, iso, latest_name, utc_now
from .specs import describe_groups, dtype_name, spec_kind
from .summary import KVCacheSummary

#: Data pointers are reported aligned to at most this (2 MiB, the KV transfer need).
MAX_REPORTED_ALIGNMENT = 2 * 1024 * 1024


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _extent(view: torch.Tensor) -> tuple[int, int]:
    """[start, end) byte offsets of a view inside its storage."""
    start = view.storage_offset() * view.element_size()
    if view.numel() == 0:
        return start, start
    last = sum((n - 1) * s for n, s in zip(view.shape, view.stride()))
    return start, start + (last + 1) * view.element_size()


def _alignment(ptr: int) -> int:
    return min(ptr & -ptr, MAX_REPORTED_ALIGNMENT) if ptr else MAX_REPORTED_ALIGNMENT


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
) -> dict:
    """The JSON-able report (schema 2) of ``kv_caches``.

    Args:
        plan: the :class:`~vllm_kv_strategies.plan.KVCachePlan` the plugin
            built from, or None when stock built the cache (observe mode):
            then each layer's strategy and page parts are null.
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
            :func:`~vllm_kv_strategies.compat.parallel.parallel_ranks` of
            ``parallel_config``: vLLM's global rank, data-parallel engines
            included; rank 0 of 1 without torch.distributed.

    Raises:
        ValueError: neither ``plan`` nor ``kv_cache_config`` given.
    """
    from .. import envs

    config = kv_cache_config if kv_cache_config is not None else getattr(plan, "kv_cache_config", None)
    if config is None:
        raise ValueError("build_report needs a plan or a kv_cache_config")
    place = parallel_ranks(parallel_config) if place is None else place
    mode = envs.KV_STRATEGIES if mode is None else mode
    groups, layer_specs = describe_groups(config)
    storages: dict[int, dict] = {}
    layers: dict[str, dict] = {}
    for name, value in kv_caches.items():
        views = []
        for view in _tensors(value):
            storage = view.untyped_storage()
            buf = storages.setdefault(
                storage.data_ptr(), {"id": len(storages), "bytes": storage.nbytes(), "layers": [], "extent": None}
            )
            start, end = _extent(view)
            ext = buf["extent"]
            buf["extent"] = (start, end) if ext is None else (min(ext[0], start), max(ext[1], end))
            if name not in buf["layers"]:
                buf["layers"].append(name)
            views.append(
                {
                    "shape": list(view.shape),
                    "stride": list(view.stride()),
                    "dtype": dtype_name(view.dtype),
                    "bytes": end - start,
                    "buffer": buf["id"],
                    "offset": start,
                    "data_ptr_alignment": _alignment(view.data_ptr()),
                }
            )
        lp = plan.layers.get(name) if plan is not None else None
        gid, spec = (lp.group_id, lp.spec) if lp else layer_specs.get(name, (None, None))
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
    # Aliases: layers whose views share bytes (not merely the backing buffer).
    spans = [(v["buffer"], v["offset"], v["offset"] + v["bytes"], name) for name, e in layers.items() for v in e["views"]]
    for name, entry in layers.items():
        mine = [(b, lo, hi) for b, lo, hi, n in spans if n == name]
        entry["aliases"] = sorted(
            {n for b, lo, hi, n in spans if n != name and any(b == mb and lo < mhi and mlo < hi for mb, mlo, mhi in mine)}
        )
    # Layers built (the plan's, or the config's that were built), by kind and strategy.
    if plan is not None:
        built = {name: lp.spec for name, lp in plan.layers.items()}
        per_strategy = dict(plan.strategy_counts())
    else:
        built = {name: spec for name, (_, spec) in layer_specs.items() if name in kv_caches}
        per_strategy = {}
    # required: what vLLM's config plans (on vllm-ascend 0.30 the plan lays the strided tensors out
    # per layer, as stock does; the config's own tensors say what was planned)
    tensors = list(config.kv_cache_tensors)
    per_kind: dict[str, int] = {}
    for spec in built.values():
        kind = spec_kind(spec)
        per_kind[kind] = per_kind.get(kind, 0) + 1
    allocated = sum(b["bytes"] for b in storages.values())
    required = required_bytes(tensors, strided)
    padding = sum(b["bytes"] - (b["extent"][1] - b["extent"][0]) for b in storages.values() if b["extent"])
    block_sizes = {spec.block_size for spec in built.values()}
    summary = KVCacheSummary(
        rank=place.rank,
        layers_per_strategy=per_strategy,
        layers_per_kind=per_kind,
        raw_buffers=len(storages),
        bytes_allocated=allocated,
        bytes_required=required,
        alignment_padding=padding,
        duplicated_bytes=max(0, allocated - required - padding),
        num_blocks=config.num_blocks,
        tokens=config.num_blocks * min(block_sizes, default=0),
    )
    installed = compat.Installed.detect()
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
        "built_by": "stock" if plan is None or mode == "observe" else "plugin",
        "versions": {"plugin": __version__, "vllm": installed.vllm, "vllm_ascend": installed.vllm_ascend,
                     "torch": installed.torch},
        "kv_cache": {
            "num_blocks": config.num_blocks,
            "tensors": [{"size": t.size, "layers": tensor_layers(t)} for t in config.kv_cache_tensors],
            "groups": groups,
        },
        "totals": summary.totals(),
        "layers": layers,
        "buffers": [{"id": b["id"], "bytes": b["bytes"], "layers": b["layers"]} for b in storages.values()],
    }


def run_id(when: datetime | None = None) -> str:
    """A new run id: ``<UTC time>-<pid>`` of this process (see ``KV_STRATEGIES_RUN_ID``)."""
    return f"{(when or utc_now()).strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"


def write_report(report: dict, directory: str) -> str:
    """Write ``report`` to a new file in ``directory`` (created if needed) and
    replace ``kv_cache_report.latest.rank<r>.json`` with a copy.

    Returns:
        the new file's path; never an earlier file's: the name holds the UTC
        second, the pid and the rank, and a suffix ``-2``, ``-3`` ... when the
        same process writes twice within a second.

    Raises:
        OSError: the directory or a file cannot be written.
    """
    os.makedirs(directory, exist_ok=True)
    rank = report["totals"]["rank"]
    when = datetime.strptime(report["created"], "%Y-%m-%dT%H:%M:%S.%fZ")
    text = json.dumps(report, indent=1)
    attempt = 1
    while True:
        path = os.path.join(directory, file_name(when, report["pid"], rank, attempt))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            attempt += 1
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        break
    latest = os.path.join(directory, latest_name(rank))
    tmp = f"{latest}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, latest)  # readers never see a half-written latest file
    return path


def log_summary(
    plan: Any,
    kv_caches: dict[str, Any],
    *,
    kv_cache_config: Any = None,
    mode: str | None = None,
    model: str | None = None,
    runner: str | None = None,
    parallel_config: Any = None,
) -> KVCacheSummary | None:
    """Log the summary line; write the report when ``KV_STRATEGIES_REPORT`` is set.

    Arguments as :func:`build_report`; ``plan`` None when stock built the
    cache. Never raises: the KV cache is built already, and a failure to
    describe it is logged as a warning (None returned) rather than stopping vLLM.
    """
    from .. import envs

    try:
        report = build_report(plan, kv_caches, kv_cache_config=kv_cache_config, mode=mode, model=model, runner=runner,
                              parallel_config=parallel_config)
        summary = KVCacheSummary(**report["totals"])
    except Exception as exc:
        built = "stock built" if plan is None else "the strategies built"
        logger.warning("%s could not describe the KV cache %s: %r", PREFIX, built, exc)
        return None
    logger.info("%s", summary.line(report["built_by"]))
    directory = envs.KV_STRATEGIES_REPORT
    if directory:
        try:
            path = write_report(report, directory)
            logger.info("%s rank %d: report written to %s", PREFIX, summary.rank, path)
        except Exception as exc:  # the KV cache is built: a report that cannot be written never stops vLLM
            logger.warning("%s could not write the report to %s: %s", PREFIX, directory, exc)
    return summary
