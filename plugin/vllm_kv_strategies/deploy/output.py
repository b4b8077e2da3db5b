"""Where a command's lines go: its answer on stdout; progress, notes and vLLM's own log
lines on stderr, so that stdout holds the answer alone.

* ``--json -``: the JSON on stdout, the human lines on stderr (none with ``-q``);
* ``-q`` / ``--quiet``: no progress lines, vLLM logs errors only;
  ``-v`` / ``--verbose``: vLLM's INFO lines too (``-vv``: DEBUG), on stderr. They set
  ``VLLM_LOGGING_LEVEL`` for the command; without them a ``VLLM_LOGGING_LEVEL`` in the
  environment holds, else the command's default (``plan``: ERROR, the others: WARNING);
* vLLM logs to ``VLLM_LOGGING_STREAM``, which the command sets to stderr unless the
  environment names a stream; a vLLM configured before the command (in one process)
  has its stdout handlers pointed at stderr while the command runs, then back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterator

#: ``--json -``: the JSON on stdout.
STDOUT = "-"
#: The flags, their short forms outside ``plan`` (where vLLM's ``-q`` is ``--quantization``).
QUIET, VERBOSE = ("-q", "--quiet"), ("-v", "--verbose", "-vv")


class Output:
    """The running command's output: where its answer and its progress lines go."""

    def __init__(self, verbosity: int = 0, json_path: str | None = None):
        self.verbosity, self.json_path = verbosity, json_path

    @property
    def json_on_stdout(self) -> bool:
        return self.json_path == STDOUT

    def answer(self, text: str) -> None:
        """The command's human answer: stdout, or stderr when the JSON takes stdout (none with ``-q``)."""
        if not self.json_on_stdout:
            print(text, flush=True)
        elif self.verbosity >= 0:
            print(text, file=sys.stderr, flush=True)

    def progress(self, text: str) -> None:
        """A line on stderr before a slow step (none with ``-q``)."""
        if self.verbosity >= 0:
            print(text, file=sys.stderr, flush=True)

    def json(self, data: Any) -> None:
        """The JSON answer to ``--json PATH`` (``-``: stdout), when one was asked for."""
        text = json.dumps(data, indent=1) + "\n"
        if self.json_on_stdout:
            sys.stdout.write(text)
            sys.stdout.flush()
        elif self.json_path:
            Path(self.json_path).write_text(text)


#: The running command's :class:`Output` (:func:`command` sets it).
current = Output()


def peel(argv: list[str]) -> tuple[int, list[str]]:
    """(verbosity, the rest): the leading ``-q`` / ``-v`` flags of ``argv`` (before the subcommand)."""
    verbosity, rest = 0, list(argv)
    while rest and rest[0] in (*QUIET, *VERBOSE):
        flag = rest.pop(0)
        verbosity = -1 if flag in QUIET else verbosity + (2 if flag == "-vv" else 1)
    return verbosity, rest


def _level(verbosity: int, default: str) -> str:
    if verbosity < 0:
        return "ERROR"
    if verbosity > 0:
        return "INFO" if verbosity == 1 else "DEBUG"
    return (os.environ.get("VLLM_LOGGING_LEVEL") or default).upper()


def _writes_stdout(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            and stream is not None and stream in (sys.stdout, sys.__stdout__))


@contextlib.contextmanager
def command(verbosity: int = 0, json_path: str | None = None, default_level: str = "WARNING") -> Iterator[Output]:
    """Run a command with :data:`current` set and vLLM's logging on stderr at the command's level;
    the environment, vLLM's logger and :data:`current` are as they were afterwards."""
    global current
    level = _level(verbosity, default_level)
    names = ("VLLM_LOGGING_LEVEL", "VLLM_LOGGING_STREAM")
    saved_env = {name: os.environ.get(name) for name in names}
    os.environ["VLLM_LOGGING_LEVEL"] = level
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    vllm_logger = logging.getLogger("vllm")
    configured, saved_level = bool(vllm_logger.handlers), vllm_logger.level
    moved = [handler for handler in vllm_logger.handlers if _writes_stdout(handler)]
    for handler in moved:
        handler.setStream(sys.stderr)
    if configured:
        vllm_logger.setLevel(level)
    saved_current, current = current, Output(verbosity, json_path)
    try:
        yield current
    finally:
        current = saved_current
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for handler in moved:
            handler.setStream(sys.stdout)
        if configured:
            vllm_logger.setLevel(saved_level)
        elif vllm_logger.handlers and saved_env["VLLM_LOGGING_STREAM"] is None:  # configured meanwhile: as vLLM would have
            for handler in vllm_logger.handlers:
                if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is sys.stderr:
                    handler.setStream(sys.stdout)
            vllm_logger.setLevel((saved_env["VLLM_LOGGING_LEVEL"] or "INFO").upper())
