"""vllm-kv-strategies: the KV cache of every vLLM worker built by one strategy
per KV cache spec kind.

vLLM calls :func:`register` (entry point ``kv_strategies`` in the
``vllm.general_plugins`` group) in the API server, the engine core and every
worker. Importing this package imports neither torch nor vLLM.
"""

from __future__ import annotations

from ._version import __version__

#: What register() decided in this process: None (not yet), "off", "stock"
#: (left stock: unsupported release or a failure) or the patched platform.
_registered_platform: str | None = None


def register() -> None:
    """vLLM general plugin entry: patch the runner's KV cache initialisation.

    Reads ``KV_STRATEGIES`` (``auto`` | ``on`` | ``off``) and logs one INFO
    line through vLLM's logger saying what it patched or why it did not.
    Idempotent: a repeat call in one process does nothing.

    Raises:
        ValueError: ``KV_STRATEGIES`` has an invalid value. Nothing else
            escapes: any other failure is logged and leaves vLLM stock.
    """
    global _registered_platform
    from . import envs
    from .logger import PREFIX, logger

    mode = envs.KV_STRATEGIES  # an invalid value is the one error register() lets through
    envs.KV_STRATEGIES_TEST_FAULT  # fail at start-up, not at KV cache initialisation
    if _registered_platform is not None:  # decided already in this process
        return
    if mode == "off":
        _registered_platform = "off"
        logger.info("%s off (KV_STRATEGIES=off): nothing patched", PREFIX)
        return
    _registered_platform = "stock"  # until the adapter is installed
    try:
        from . import adapters, compat

        installed = compat.Installed.detect()
        if mode == "auto" and not installed.supported:
            logger.warning(
                "%s %s is not in the support matrix (%s); vLLM's stock KV cache is used. "
                "Set KV_STRATEGIES=on to patch anyway.",
                PREFIX,
                installed.describe(),
                compat.supported_releases(),
            )
            return
        if not installed.supported:
            logger.warning(
                "%s KV_STRATEGIES=on: patching %s, which is not in the support matrix (%s)",
                PREFIX,
                installed.describe(),
                compat.supported_releases(),
            )
        # Patches apply when each runner's module is imported (in workers), and
        # each logs what it replaced then; here they are only armed.
        logger.info(
            "%s enabled (KV_STRATEGIES=%s, %s): will build the KV cache of %s",
            PREFIX,
            mode,
            installed.describe(),
            " and ".join(t.runner for t in adapters.targets(installed.platform)),
        )
        adapters.install(installed.platform)
        _registered_platform = installed.platform
    except Exception as exc:  # vLLM does not catch errors raised by plugins
        logger.warning("%s not active, vLLM's stock KV cache is used: %r", PREFIX, exc)


def unregister() -> None:
    """Undo :func:`register`: restore the original runner methods."""
    global _registered_platform
    from . import adapters

    adapters.uninstall()
    _registered_platform = None
