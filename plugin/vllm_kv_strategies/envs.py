"""Environment variables read by vllm-kv-strategies.

Same pattern as ``vllm.envs``: one lazy ``dict[str, Callable]``, read on every
attribute access. The names carry no ``VLLM_`` prefix on purpose: vLLM warns
about unknown ``VLLM_*`` variables and can be told to reject them.
"""

from __future__ import annotations

import os
from typing import Any, Callable

MODES = ("auto", "on", "off")
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
    "KV_STRATEGIES": _choice("KV_STRATEGIES", "auto", MODES),
    # A directory: each worker also writes its KV cache report there as
    # kv_cache_report.rank{rank}.json (see `python -m vllm_kv_strategies report`).
    "KV_STRATEGIES_REPORT": lambda: os.getenv("KV_STRATEGIES_REPORT", ""),
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
