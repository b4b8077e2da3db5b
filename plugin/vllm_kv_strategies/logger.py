"""The plugin's logger: a child of vLLM's ``vllm`` logger.

vLLM configures handlers and format on the ``vllm`` logger only (it does not
propagate to the root logger), so a child named ``vllm.kv_strategies`` prints
in vLLM's style without importing vLLM here.
"""

import logging

logger = logging.getLogger("vllm.kv_strategies")

#: Every line users may grep for starts with this.
PREFIX = "kv_strategies:"

#: Messages :func:`warn_once` logged already in this process.
_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log ``message`` at WARNING the first time this process sees it: one
    warning per worker, however often vLLM builds its KV cache."""
    if message not in _warned:
        _warned.add(message)
        logger.warning("%s", message)


def reset_warn_once() -> None:
    """Forget what :func:`warn_once` logged (tests)."""
    _warned.clear()
