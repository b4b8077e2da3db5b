"""Environment variables read by vllm-kv-strategies.

Same pattern as ``vllm.envs``: one lazy ``dict[str, Callable]``, read on every
attribute access. The names carry no ``VLLM_`` prefix on purpose: vLLM warns
about unknown ``VLLM_*`` variables and can be told to reject them.
"""

from __future__ import annotations

import os
from typing import Any, Callable

MODES = ("auto", "on", "off", "observe")
TEST_FAULTS = ("", "share_group_cache")


def _choice(name: str, default: str, choices: tuple[str, ...]) -> Callable[[], str]:
    def read() -> str:
        value = (os.getenv(name) or default).strip().lower()  # set but empty = default
        if value not in choices:
            shown = ", ".join("unset (or empty)" if c == "" else repr(c) for c in choices)
            raise ValueError(
                f"{name}={os.environ[name]!r} is not valid; use one of {shown}."
            )
        return value

    return read


# begin-env-vars-definition
environment_variables: dict[str, Callable[[], Any]] = {
    # The switch. "auto" (default): patch when the installed vLLM /
    # vllm-ascend release is in the support matrix. "on": patch on any
    # release, warning on undeclared ones. "off": patch nothing.
    # "observe": stock builds the KV cache; the plugin wraps the runner only
    # to describe what stock built (summary line, report), on any release.
    "KV_STRATEGIES": _choice("KV_STRATEGIES", "auto", MODES),
    # A directory: each worker also writes its KV cache report there as
    # kv_cache_report.<UTC time>.<pid>.rank<r>.json and replaces
    # kv_cache_report.latest.rank<r>.json (see `python -m vllm_kv_strategies report`).
    "KV_STRATEGIES_REPORT": lambda: os.getenv("KV_STRATEGIES_REPORT", ""),
    # The run a report belongs to (`report DIR` groups ranks by it). Unset:
    # the first vLLM process that registers the plugin sets it to
    # "<UTC time>-<pid>", and the processes it starts inherit it. Set it to
    # one value on every node of a multi-node deployment.
    "KV_STRATEGIES_RUN_ID": lambda: os.getenv("KV_STRATEGIES_RUN_ID", "").strip(),
    # Set by the plugin, not by you: the effective KV_STRATEGIES of the first
    # vLLM process of a deployment (vllm serve / LLM(...)), inherited by the
    # processes it starts and copied to Ray workers. A process whose own
    # switch differs logs an error naming both (see docs/using.md, Multi-node and Ray).
    "KV_STRATEGIES_DRIVER_MODE": lambda: os.getenv("KV_STRATEGIES_DRIVER_MODE", "").strip().lower(),
    # Test only. "share_group_cache" binds the second layer of the first KV
    # cache group with two or more layers to the first layer's cache, a fault
    # the end-to-end tests must detect. Never set it in production.
    "KV_STRATEGIES_TEST_FAULT": _choice("KV_STRATEGIES_TEST_FAULT", "", TEST_FAULTS),
}
# end-env-vars-definition


def __getattr__(name: str) -> Any:
    if name in environment_variables:
        return environment_variables[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(environment_variables)
