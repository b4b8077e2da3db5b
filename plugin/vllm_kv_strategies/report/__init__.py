"""The KV cache report: one summary line per worker, and an optional JSON file.

* :mod:`.write`: measures the tensors a worker built (imports torch; used in
  vLLM's workers): :func:`log_summary`, :func:`build_report`; :mod:`.specs`
  describes the KV cache specs (kinds, fields).
* :mod:`.schema`: file names, schema versions, validation against the shipped
  JSON Schema ``kv_cache_report.schema.json``; :mod:`.render`: the CLI's
  tables. Neither imports torch nor vLLM, so ``python -m vllm_kv_strategies
  report`` reads files at once.

Importing this package imports only the torch-free parts; the writer's names
(``log_summary``, ``build_report``, ``write_report``) load :mod:`.write` on
first use.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.report.schema import SCHEMA_VERSION, ReportError, load, load_dir
from vllm_kv_strategies.report.summary import KVCacheSummary

_WRITER = ("log_summary", "build_report", "write_report", "spec_kind", "MAX_REPORTED_ALIGNMENT")

__all__ = ["SCHEMA_VERSION", "KVCacheSummary", "ReportError", "load", "load_dir", *_WRITER]


def __getattr__(name: str) -> Any:
    if name in _WRITER:
        from vllm_kv_strategies.report import write

        return getattr(write, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
