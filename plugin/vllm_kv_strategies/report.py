"""The KV cache report: one summary line per worker, and an optional JSON file.

At KV cache initialisation each worker logs one line starting with
``kv_strategies:``. With ``KV_STRATEGIES_REPORT=DIR`` it also writes
``DIR/kv_cache_report.rank{rank}.json`` (schema :data:`SCHEMA_VERSION`), which
``python -m vllm_kv_strategies report`` renders or compares.

Everything is measured from the tensors themselves (storages, view extents),
so a stock runner's caches can be reported the same way as the plugin's.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import torch

from . import compat
from .compat.specs import has_strided_tensors
from ._version import __version__
from .logger import PREFIX, logger
from .plan import KVCachePlan

SCHEMA_VERSION = 1
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


@dataclass(frozen=True)
class KVCacheSummary:
    """Totals of one worker's KV cache (bytes unless named otherwise).

    ``alignment_padding`` is allocated but outside every view (2 MiB alignment
    slack); ``duplicated_bytes`` is what was allocated beyond the required
    bytes and that padding (e.g. one buffer per layer where layers share a
    ``KVCacheTensor``).
    """

    rank: int
    layers_per_strategy: dict[str, int]
    raw_buffers: int
    bytes_allocated: int
    bytes_required: int
    alignment_padding: int
    duplicated_bytes: int
    num_blocks: int
    tokens: int

    def line(self) -> str:
        per = ", ".join(f"{k}={v}" for k, v in sorted(self.layers_per_strategy.items()))
        plural = "s" if self.raw_buffers != 1 else ""
        return (
            f"{PREFIX} rank {self.rank}: built {sum(self.layers_per_strategy.values())} layers ({per}) "
            f"in {self.raw_buffers} raw buffer{plural}; {self.bytes_allocated} bytes allocated "
            f"({self.bytes_allocated / 2**30:.3f} GiB; required {self.bytes_required}, "
            f"alignment padding {self.alignment_padding}, duplicated {self.duplicated_bytes}); "
            f"num_blocks {self.num_blocks}, {self.tokens} tokens"
        )


def build_report(plan: KVCachePlan, kv_caches: dict[str, Any], *, strided: bool, rank: int | None = None) -> dict:
    """The JSON-able report of ``kv_caches`` built for ``plan``.

    Args:
        strided: the config's tensors describe one backing allocation (vLLM
            0.30+), so the required bytes are its size, not the sum of sizes.
        rank: defaults to the torch.distributed rank (0 when not initialised).
    """
    if rank is None:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
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
                    "dtype": str(view.dtype).removeprefix("torch."),
                    "bytes": end - start,
                    "buffer": buf["id"],
                    "offset": start,
                    "data_ptr_alignment": _alignment(view.data_ptr()),
                }
            )
        lp = plan.layers.get(name)
        layers[name] = {
            "group": lp.group_id if lp else None,
            "spec_type": type(lp.spec).__name__ if lp else None,
            # layers outside the plan reuse another layer's cache (cross-layer KV sharing)
            "strategy": lp.strategy.name if lp else "shared",
            "page_parts": [
                {"name": p.name, "shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch."), "bytes_per_block": p.nbytes}
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
    sizes = [t.size for t in plan.tensors]
    config = plan.kv_cache_config
    allocated = sum(b["bytes"] for b in storages.values())
    required = (max(sizes) if strided else sum(sizes)) if sizes else 0
    padding = sum(b["bytes"] - (b["extent"][1] - b["extent"][0]) for b in storages.values() if b["extent"])
    block_sizes = {lp.spec.block_size for lp in plan.layers.values()}
    summary = KVCacheSummary(
        rank=rank,
        layers_per_strategy=dict(plan.strategy_counts()),
        raw_buffers=len(storages),
        bytes_allocated=allocated,
        bytes_required=required,
        alignment_padding=padding,
        duplicated_bytes=max(0, allocated - required - padding),
        num_blocks=config.num_blocks,
        tokens=config.num_blocks * min(block_sizes, default=0),
    )
    installed = compat.Installed.detect()
    return {
        "schema_version": SCHEMA_VERSION,
        "plugin_version": __version__,
        "vllm": installed.vllm,
        "vllm_ascend": installed.vllm_ascend,
        "totals": asdict(summary),
        "layers": layers,
        "buffers": [{"id": b["id"], "bytes": b["bytes"], "layers": b["layers"]} for b in storages.values()],
    }


def report_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"kv_cache_report.rank{rank}.json")


def log_summary(plan: KVCachePlan, kv_caches: dict[str, Any]) -> KVCacheSummary:
    """Log the summary line; write the JSON report when ``KV_STRATEGIES_REPORT`` is set."""
    from . import envs

    report = build_report(plan, kv_caches, strided=has_strided_tensors())
    summary = KVCacheSummary(**report["totals"])
    logger.info("%s", summary.line())
    directory = envs.KV_STRATEGIES_REPORT
    if directory:
        try:
            os.makedirs(directory, exist_ok=True)
            path = report_path(directory, summary.rank)
            with open(path, "w") as f:
                json.dump(report, f, indent=1)
            logger.info("%s rank %d: report written to %s", PREFIX, summary.rank, path)
        except OSError as exc:
            logger.warning("%s could not write the report to %s: %s", PREFIX, directory, exc)
    return summary


# -- rendering (CLI) -----------------------------------------------------------


def render(report: dict) -> str:
    """A readable table of one report."""
    t = report["totals"]
    lines = [
        f"KV cache report (schema {report['schema_version']}, plugin {report['plugin_version']}, "
        f"vLLM {report['vllm']}" + (f", vllm-ascend {report['vllm_ascend']}" if report.get("vllm_ascend") else "") + f"), rank {t['rank']}",
        f"{'layer':48} {'strategy':15} {'spec':24} views (shape dtype @buffer+offset)",
    ]
    for name, entry in report["layers"].items():
        views = "; ".join(f"{tuple(v['shape'])} {v['dtype']} @{v['buffer']}+{v['offset']}" for v in entry["views"])
        lines.append(f"{name:48} {entry['strategy'] or '-':15} {entry['spec_type'] or '-':24} {views}")
    lines.append("")
    for key in ("raw_buffers", "bytes_allocated", "bytes_required", "alignment_padding", "duplicated_bytes", "num_blocks", "tokens"):
        lines.append(f"{key:20} {t[key]:>16,}")
    lines.append(f"{'layers_per_strategy':20} {t['layers_per_strategy']}")
    return "\n".join(lines)


def compare(a: dict, b: dict) -> str:
    """Differences of report ``b`` against report ``a`` (bytes and tokens)."""
    ta, tb = a["totals"], b["totals"]
    lines = [f"{'':20} {'A':>16} {'B':>16} {'B - A':>16} {'B / A':>8}"]
    for key in ("raw_buffers", "bytes_allocated", "bytes_required", "alignment_padding", "duplicated_bytes", "num_blocks", "tokens"):
        ratio = f"{tb[key] / ta[key]:.3f}" if ta[key] else "-"
        lines.append(f"{key:20} {ta[key]:>16,} {tb[key]:>16,} {tb[key] - ta[key]:>+16,} {ratio:>8}")
    differ = [
        name
        for name in sorted(set(a["layers"]) | set(b["layers"]))
        if [(v["shape"], v["dtype"]) for v in a["layers"].get(name, {}).get("views", [])]
        != [(v["shape"], v["dtype"]) for v in b["layers"].get(name, {}).get("views", [])]
    ]
    lines.append(f"layers whose views differ: {len(differ)}" + (f" ({', '.join(differ[:8])}{', ...' if len(differ) > 8 else ''})" if differ else ""))
    return "\n".join(lines)
