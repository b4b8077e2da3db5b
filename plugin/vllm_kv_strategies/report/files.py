"""Writing report files: new names per run, and the ``latest`` copy
(torch-free; :mod:`.write` builds the report)."""

from __future__ import annotations

import json
import os
from datetime import datetime

from vllm_kv_strategies.report.schema import file_name, latest_name, utc_now


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
        NotADirectoryError: ``directory`` is a file (``KV_STRATEGIES_REPORT``
            names a directory).
        OSError: the directory or a file cannot be written.
    """
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(
            f"{directory} is a file, not a directory: KV_STRATEGIES_REPORT names the directory the reports go to"
        )
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
