"""Reading KV cache report files: names, schema versions, validation.

Imports neither torch nor vLLM (``python -m vllm_kv_strategies report`` reads
files in well under a second); ``jsonschema`` (a dependency) is imported only
to validate a file that exists.

Every failure raises :class:`ReportError` with one line a user can act on.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any

#: The version this plugin writes. Readers accept :data:`READABLE`.
SCHEMA_VERSION = 3
#: Schema 1 (0.1.0) and 2 files are read in schema 3's form: what they lack is unknown (None).
READABLE = (1, 2, 3)
#: Runners where vLLM's own code allocates the cache and the plugin checks it (schema 2 said ``plugin``).
VLLM_BUILT_RUNNERS = ("GPUModelRunner (V1)", "GPUModelRunner (V2)")
#: The value of every report's ``report`` key (tells a report from other JSON).
MARKER = "vllm-kv-strategies KV cache report"
SCHEMA_FILE = "kv_cache_report.schema.json"
PREFIX = "kv_cache_report."
#: ``kv_cache_report.20260101T120000Z.4242.rank0.json`` (``-2``, ``-3`` ... after
#: the pid when one process writes twice in a second), the stable
#: ``kv_cache_report.latest.rank0.json`` and schema 1's ``kv_cache_report.rank0.json``.
NAME_RE = re.compile(r"^kv_cache_report\.(?:(?P<stamp>\d{8}T\d{6}Z)\.(?P<pid>\d+)(?:-\d+)?\.|(?P<latest>latest)\.)?rank(?P<rank>\d+)\.json$")

_V1_TOTALS = ("rank", "layers_per_strategy", "raw_buffers", "bytes_allocated", "bytes_required",
              "alignment_padding", "duplicated_bytes", "num_blocks", "tokens")


class ReportError(Exception):
    """A file or directory that cannot be read as a KV cache report; the
    message is one line naming the path and what is wrong."""


@cache
def schema() -> dict:
    """The JSON Schema of :data:`SCHEMA_VERSION` (package data, ``report/kv_cache_report.schema.json``)."""
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text())


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(when: datetime) -> str:
    """``2026-01-01T12:00:00.123456Z``: the ``created`` field."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def file_name(when: datetime, pid: int, rank: int, attempt: int = 1) -> str:
    """The file one worker writes: never the name of an earlier run's file."""
    stamp = when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{PREFIX}{stamp}.{pid}{'' if attempt == 1 else f'-{attempt}'}.rank{rank}.json"


def latest_name(rank: int) -> str:
    """The stable name, replaced by each run: a copy of rank ``rank``'s newest report."""
    return f"{PREFIX}latest.rank{rank}.json"


def _where(error: Any) -> str:
    path = getattr(error, "json_path", "$")
    return "" if path == "$" else f" at {path}"


def validate(data: dict) -> None:
    """Check a schema-3 report against the shipped JSON Schema.

    Raises:
        ReportError: the first (most relevant) violation, e.g. ``missing key 'totals'``.
    """
    import jsonschema  # a dependency; imported here, only when a file is read

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema()).iter_errors(data))
    if error is None:
        return
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        raise ReportError(f"missing key {missing!r}{_where(error)}")
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    raise ReportError(f"{message}{_where(error)}")


def upgrade_v2(data: dict) -> dict:
    """A schema-2 report in schema 3's form. Schema 2's ``built_by`` said
    ``plugin`` where vLLM's runner built the cache (upstream V1 / V2: now
    ``vllm_checked``) and ``stock`` for both observe and the fallback (told
    apart by ``mode``; the reason was not recorded); its ``tokens`` was
    ``num_blocks`` x the smallest block size (now ``token_slots``; vLLM's
    capacity was not recorded); its ``alignment_padding`` counted every byte
    outside the views (the unused part is not told apart: ``unused_bytes`` None)."""
    if not isinstance(data.get("totals"), dict) or "tokens" not in data["totals"]:
        raise ReportError("missing key 'tokens' at $.totals (schema 2)" if isinstance(data.get("totals"), dict)
                          else "missing key 'totals' (schema 2)")
    if data.get("built_by") == "stock":
        built_by = "stock_observed" if data.get("mode") == "observe" else "stock_fallback"
    else:
        built_by = "vllm_checked" if data.get("runner") in VLLM_BUILT_RUNNERS else "plugin"
    totals = {**data["totals"], "unused_bytes": None, "token_slots": data["totals"]["tokens"], "tokens": None,
              "max_concurrency": None, "max_model_len": None}
    upgraded = {**data, "built_by": built_by, "fallback_reason": None, "totals": totals}
    validate({**upgraded, "schema_version": SCHEMA_VERSION})
    return upgraded


def upgrade_v1(data: dict) -> dict:
    """A schema-1 report (0.1.0) in schema 3's form; what 0.1.0 did not record
    (model, time, mode, specs, kinds, capacity) is None. Only the plugin wrote
    them; without vllm-ascend, vLLM's runner built the cache and the plugin checked it."""
    for key in ("totals", "layers", "buffers"):
        if not isinstance(data.get(key), (dict, list)):
            raise ReportError(f"missing key {key!r} (schema 1)")
    missing = [k for k in _V1_TOTALS if k not in data["totals"]]
    if missing:
        raise ReportError(f"missing key {missing[0]!r} at $.totals (schema 1)")
    return {
        "schema_version": 1,
        "report": MARKER,
        "created": None,
        "run_id": None,
        "pid": None,
        "world_size": None,
        "model": None,
        "runner": None,
        "mode": None,
        "built_by": "plugin" if data.get("vllm_ascend") else "vllm_checked",
        "fallback_reason": None,
        "versions": {"plugin": data.get("plugin_version"), "vllm": data.get("vllm"),
                     "vllm_ascend": data.get("vllm_ascend"), "torch": None},
        "kv_cache": None,
        "totals": {**data["totals"], "layers_per_kind": None, "unused_bytes": None, "token_slots": data["totals"]["tokens"],
                   "tokens": None, "max_concurrency": None, "max_model_len": None},
        "layers": {name: {**entry, "kind": None} for name, entry in data["layers"].items()},
        "buffers": data["buffers"],
    }


def parse(data: Any) -> dict:
    """A report of any readable schema version, in schema 3's form.

    Raises:
        ReportError: not a report, a newer schema, or a key missing (message
            without the path; :func:`load` adds it).
    """
    if not isinstance(data, dict):
        raise ReportError(f"not a KV cache report (a JSON {type(data).__name__}, not an object)")
    version = data.get("schema_version")
    if version is None:
        raise ReportError("not a KV cache report (no 'schema_version' key; KV_STRATEGIES_REPORT writes one)")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(f"not a KV cache report (schema_version {version!r})")
    if version > SCHEMA_VERSION:
        from vllm_kv_strategies._version import __version__

        raise ReportError(
            f"written with report schema {version}, newer than this vllm-kv-strategies {__version__} "
            f"reads (schemas {READABLE[0]}-{READABLE[-1]}): upgrade the plugin to read it"
        )
    if version == 1:
        return upgrade_v1(data)
    if version == 2:
        return upgrade_v2(data)
    validate(data)
    return data


def load(path: str | os.PathLike) -> dict:
    """Read and check one report file.

    Raises:
        ReportError: ``PATH: <what is wrong>``: unreadable, not JSON, not a
            report, a newer schema, a missing key, a file named for another rank.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ReportError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a KV cache report (not UTF-8 text)") from None
    if not text.strip():
        raise ReportError(f"{path}: an empty file, not a KV cache report (a worker writing it right now, or a failed write)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"{path}: not a KV cache report (not JSON: {exc})") from None
    try:
        report = parse(data)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None
    named = NAME_RE.match(os.path.basename(path))
    if named and int(named["rank"]) != report["totals"]["rank"]:  # renamed, or copied over another rank's file
        raise ReportError(f"{path}: the file name says rank {named['rank']}, the report rank {report['totals']['rank']}")
    return report


def created(report: dict, path: str | os.PathLike) -> str:
    """When a report was written: its ``created`` field, or the file's
    modification time for schema 1 (same format, so the two sort together)."""
    if report.get("created"):
        return report["created"]
    return iso(datetime.fromtimestamp(os.path.getmtime(path), timezone.utc))


def load_dir(directory: str | os.PathLike) -> list[tuple[str, dict]]:
    """Every report file in ``directory`` (not recursive), each once: the
    ``latest`` copy of a timestamped file is dropped. Sorted by rank, then time.

    Raises:
        ReportError: no report file there, one of them is broken, or its
            name's rank is not the rank it holds.
    """
    try:
        names = sorted(n for n in os.listdir(directory) if NAME_RE.match(n))
    except OSError as exc:
        raise ReportError(f"{directory}: cannot read it ({exc.strerror or exc})") from None
    if not names:
        holding = report_subdirectories(directory)
        if holding:
            shown = [os.path.join(str(directory), d) for d in holding]
            raise ReportError(
                f"{directory}: no KV cache report in this directory; its subdirector{'y' if len(holding) == 1 else 'ies'} "
                f"{', '.join(holding)} hold{'s' if len(holding) == 1 else ''} reports: name one "
                f"(report {shown[0]})" + (f" or two to compare (report {shown[0]} {shown[1]})" if len(shown) > 1 else "")
            )
        raise ReportError(
            f"{directory}: no KV cache report in this directory (files kv_cache_report.*.json, "
            f"written by vLLM workers with KV_STRATEGIES_REPORT={directory})"
        )
    seen: dict[tuple, tuple[str, dict]] = {}
    for name in names:
        path = os.path.join(directory, name)
        report, named = load(path), NAME_RE.match(name)  # load: the name's rank is the report's
        key = (report["totals"]["rank"], report.get("run_id"), report.get("pid"), created(report, path))
        if key not in seen or named["latest"] is None:
            seen[key] = (path, report)
    return sorted(seen.values(), key=lambda item: (item[1]["totals"]["rank"], created(item[1], item[0])))


def report_subdirectories(directory: str | os.PathLike) -> list[str]:
    """The names of ``directory``'s subdirectories that hold report files (sorted)."""
    found = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        try:
            if entry.is_dir() and any(NAME_RE.match(n) for n in os.listdir(entry.path)):
                found.append(entry.name)
        except OSError:  # unreadable: not named
            continue
    return found


def latest_per_rank(items: list[tuple[str, dict]]) -> dict[int, tuple[str, dict]]:
    """rank -> its newest (path, report)."""
    out: dict[int, tuple[str, dict]] = {}
    for path, report in items:
        rank = report["totals"]["rank"]
        if rank not in out or created(report, path) >= created(out[rank][1], out[rank][0]):
            out[rank] = (path, report)
    return dict(sorted(out.items()))
