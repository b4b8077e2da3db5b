"""Plan files (``plan --json OUT``) beside reports: reading one and comparing
the prediction with a worker's report (``report PLAN.json REPORT``). Imports
neither torch nor vLLM.

A plan file is a JSON object with ``kind: "plan"`` and ``plan_version``
(:data:`PLAN_VERSION`; a removed key or changed meaning raises it); per
rank, ``num_blocks``, the groups in the report's form (``id``, ``layers``,
``specs``, plus ``kind``, ``block_size``, ``num_blocks``, ``token_slots``) and the
tensors (``size``, ``layers``) and the bytes they plan (``bytes_required``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from vllm_kv_strategies.report.schema import ReportError

#: The ``kind`` of a plan file (a report has none).
KIND = "plan"
PLAN_VERSION = 1

_COUNT = {"type": "integer", "minimum": 0}
PLAN_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["kind", "plan_version", "model", "versions", "num_blocks", "refusal", "ranks"],
    "properties": {
        "kind": {"const": KIND},
        "plan_version": {"const": PLAN_VERSION},
        "num_blocks": {"type": ["integer", "null"], "minimum": 0},
        "refusal": {"type": ["string", "null"]},
        # where vllm-ascend is installed: each side's own plan and build (additive, plan_version 1)
        "ascend": {"type": ["object", "null"], "properties": {side: {"type": "object", "required": [
            "num_blocks", "budget_scale", "bytes_allocated_per_worker", "refusal", "plugin_refusal"]}
            for side in ("stock", "plugin")}},
        "ranks": {"type": "array", "items": {
            "type": "object",
            "required": ["rank", "num_blocks", "bytes_required", "groups", "tensors"],
            "properties": {
                "rank": _COUNT, "num_blocks": _COUNT, "bytes_required": _COUNT,
                "groups": {"type": "array", "items": {"type": "object", "required": ["id", "layers", "specs", "block_size"]}},
                "tensors": {"type": "array", "items": {"type": "object", "required": ["size", "layers"]}},
            },
        }},
    },
}


def is_plan(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file holding a JSON object with ``kind: "plan"``."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("kind") == KIND


def load(path: str | os.PathLike) -> dict:
    """Read and check a plan file.

    Raises:
        ReportError: ``PATH: <what is wrong>``.
    """
    import jsonschema

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not a readable plan file ({exc})") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(PLAN_SCHEMA).iter_errors(data))
    if error is not None:
        raise ReportError(f"{path}: not a readable plan file ({error.message[:160]})")
    return data


def check_same_model(plan: dict, plan_path: str, report: dict, report_path: str) -> None:
    """:class:`ReportError` when the run's report is of another model than the plan: the names'
    last components differ (case aside) and so do the KV cache layers, the plan's for the run's
    rank against the report's. A model directory planned on one machine and served from another
    path, or as its Hugging Face repo id, is the same model: its name ends alike or its layers
    are the same."""
    def last(name: Any) -> str:
        return os.path.basename(str(name).rstrip("/\\")).lower()

    rank = (report.get("totals") or {}).get("rank", 0)
    planned = {name for entry in plan.get("ranks") or [] if entry.get("rank") == rank
               for group in entry.get("groups", []) for name in group.get("layers", [])}
    if planned and planned == set(report.get("layers") or {}):
        return
    if plan.get("model") and report.get("model") and last(plan["model"]) != last(report["model"]):
        raise ReportError(f"the plan ({plan_path}) is of model {plan['model']!r} and the run ({report_path}) of model "
                          f"{report['model']!r}: refusing to compare two different models (--allow-different-models "
                          "compares them anyway)")


def _rank_of(plan: dict, rank: int, path: str) -> dict:
    if plan["refusal"]:
        raise ReportError(f"{path}: vLLM refused this plan ({plan['refusal'][:120]}...): nothing to compare")
    for entry in plan["ranks"]:
        if entry["rank"] == rank:
            return entry
    raise ReportError(f"{path}: the plan has no rank {rank} (ranks {[r['rank'] for r in plan['ranks']]})")


def compare(plan: dict, plan_path: str, report: dict, report_path: str) -> tuple[str, bool]:
    """(text, equal): the plan's rank against the report's, field by field:
    num_blocks, token slots (num_blocks x the smallest block size), vLLM's
    capacity in tokens (report schema 3's ``totals.tokens``), bytes the
    config's tensors plan, and whether the groups' layers and specs and the
    tensors are the same."""
    totals = report["totals"]
    rank = totals["rank"]
    ours = _rank_of(plan, rank, plan_path)
    kv_cache = report.get("kv_cache") or {}
    slots = None if ours["num_blocks"] is None else ours["num_blocks"] * min(
        (g["block_size"] for g in ours["groups"]), default=0)
    rows: list[tuple[str, Any, Any]] = [
        ("num_blocks", ours["num_blocks"], totals["num_blocks"]),
        ("token slots", slots, totals.get("token_slots", slots)),
        ("tokens (capacity)", plan.get("tokens"), totals["tokens"]),
        ("bytes_required", ours["bytes_required"], totals["bytes_required"]),
    ]
    same = {
        "groups (layers)": [g["layers"] for g in ours["groups"]] == [g["layers"] for g in kv_cache.get("groups", [])],
        "KV cache specs": [g["specs"] for g in ours["groups"]] == [g["specs"] for g in kv_cache.get("groups", [])],
        "tensors": ours["tensors"] == kv_cache.get("tensors"),
    }
    lines = [
        f"plan: {plan_path}, model {plan['model']}, vLLM {plan['versions'].get('vllm')}, rank {rank}",
        f"run:  {report_path}, model {report.get('model')}, vLLM {(report.get('versions') or {}).get('vllm')}, "
        f"built by {report.get('built_by')}",
        "",
        f"{'':20} {'plan':>16} {'run':>16}",
    ]
    def cell(value: Any) -> str:  # a value the plan or the report does not know is "-"
        return "-" if value is None else format(value, ",")

    for name, a, b in rows:
        lines.append(f"{name:20} {cell(a):>16} {cell(b):>16}" + ("" if a == b else "   DIFFERS"))
    lines.append("")
    lines += [f"{name}: {'equal' if ok else 'DIFFER'}" for name, ok in same.items()]
    equal = all(a == b for _, a, b in rows) and all(same.values())
    lines.append(f"the run {'matches' if equal else 'does NOT match'} the plan")
    return "\n".join(lines), equal
