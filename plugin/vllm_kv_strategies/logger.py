"""The plugin's logger: a child of vLLM's ``vllm`` logger.

vLLM configures handlers and format on the ``vllm`` logger only (it does not
propagate to the root logger), so a child named ``vllm.kv_strategies`` prints
in vLLM's style without importing vLLM here.

vLLM 0.32's API server loads general plugins while it builds its argument
parser, before it configures logging: a line logged by ``register()`` there
would reach no handler (INFO is dropped, a warning prints unformatted).
:func:`announce` holds such lines until vLLM configures logging in that
process, so every process that registers says what it did, once.
"""

from __future__ import annotations

import atexit
import logging
import sys

logger = logging.getLogger("vllm.kv_strategies")

#: Every line users may grep for starts with this.
PREFIX = "kv_strategies:"

#: Lines held until logging is configured: (level, message, args).
_pending: list[tuple[int, str, tuple]] = []
#: vLLM's function wrapped to flush them: (module, attribute name, original).
_hook: tuple[object, str, object] | None = None
_at_exit = False
#: vLLM's logging set-up, newest name first (``configure_logging`` calls it
#: through the module, ``vllm/logger.py``, 0.32; earlier releases configure
#: at import, before any plugin loads).
_CONFIGURE = ("_configure_vllm_root_logger", "configure_logging")


def announce(level: int, msg: str, *args: object) -> None:
    """Log ``msg % args`` at ``level`` now if a handler would print it, else
    as soon as vLLM configures logging in this process (or at exit).

    Never imports vLLM: the hook is set on ``vllm.logger`` only when that
    module is loaded already (it is whenever vLLM calls ``register()``).
    """
    if logger.hasHandlers():
        logger.log(level, msg, *args, stacklevel=2)  # vLLM's format names the caller's file and line
        return
    _pending.append((level, msg, args))
    _install_hook()


def error_now(msg: str, *args: object) -> None:
    """Log an ERROR at once, in vLLM's format: where vLLM has not configured
    logging yet (0.32's API server loads plugins first), configure it now as
    vLLM would from its environment (``vllm/logger.py``'s
    ``_configure_vllm_root_logger()``, no config), since the process stops
    next and will never configure it. Without that function, as
    :func:`logging.Logger.error` (a bare line on stderr)."""
    if not logger.hasHandlers():
        configure = getattr(sys.modules.get("vllm.logger"), _CONFIGURE[0], None)
        if callable(configure):
            try:
                configure()
            except Exception:  # never hide the error behind a logging failure
                pass
    logger.error(msg, *args, stacklevel=2)


def flush() -> None:
    """Log the held lines (idempotent) and drop the hook."""
    global _hook
    if _hook is not None:
        module, name, original = _hook
        if getattr(module, name, None) is not original:
            setattr(module, name, original)
        _hook = None
    while _pending:
        level, msg, args = _pending.pop(0)
        logger.log(level, msg, *args)


def _install_hook() -> None:
    global _hook, _at_exit
    if not _at_exit:  # a process that never configures logging says it at exit (warnings at least)
        atexit.register(flush)
        _at_exit = True
    if _hook is not None:
        return
    module = sys.modules.get("vllm.logger")
    name = next((n for n in _CONFIGURE if callable(getattr(module, n, None))), None)
    if name is None:
        return
    original = getattr(module, name)

    def configure_then_flush(*args: object, **kwargs: object) -> object:
        try:
            return original(*args, **kwargs)
        finally:
            flush()

    configure_then_flush.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(module, name, configure_then_flush)
    _hook = (module, name, original)


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
