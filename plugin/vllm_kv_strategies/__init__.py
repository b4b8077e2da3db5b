"""vllm-kv-strategies: the KV cache of every vLLM worker built by one strategy
per KV cache spec kind.

vLLM calls :func:`register` (entry point ``kv_strategies`` in the
``vllm.general_plugins`` group) in the API server, the engine core and every
worker. Importing this package imports neither torch nor vLLM.
"""

from __future__ import annotations

from vllm_kv_strategies._version import __version__

#: What register() decided in this process: None (not yet), "off", "stock"
#: (left stock: unsupported release or a failure) or the patched platform.
_registered_platform: str | None = None


def register() -> None:
    """vLLM general plugin entry: patch the runner's KV cache initialisation.

    Reads ``KV_STRATEGIES`` (``auto`` | ``on`` | ``off`` | ``observe``) and
    logs one line through vLLM's logger saying what it patched or why it did
    not (held until vLLM configures logging in this process, see
    :func:`vllm_kv_strategies.logger.announce`). ``observe`` wraps the runner
    like ``on`` but the adapters let stock build and only report it. Sets
    ``KV_STRATEGIES_RUN_ID`` when unset, so the processes vLLM starts from
    this one write their reports under one run id. Lists the plugin's
    variables in ``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY`` so that vLLM's Ray
    executor copies them to its workers, and logs an error when this process's
    switch differs from the one of the process that started the deployment
    (:mod:`vllm_kv_strategies.distributed`). Idempotent: a repeat call in one
    process does nothing.

    Raises:
        ValueError: ``KV_STRATEGIES`` or ``KV_STRATEGIES_TEST_FAULT`` has an
            invalid value; one ERROR line in vLLM's format naming the valid
            values is logged first (vLLM's logging configured for it where
            vLLM has not yet: :func:`~vllm_kv_strategies.logger.error_now`;
            vLLM does not catch the error: its traceback follows). Nothing else
            escapes: any other failure is logged and leaves vLLM stock.
    """
    global _registered_platform
    import logging
    import os
    import time

    from vllm_kv_strategies import envs
    from vllm_kv_strategies.logger import PREFIX, announce, error_now, logger

    try:  # an invalid value is the one error register() lets through
        mode = envs.KV_STRATEGIES
        envs.KV_STRATEGIES_TEST_FAULT  # fail at start-up, not at KV cache initialisation
    except ValueError as exc:
        error_now("%s %s vLLM cannot start with it.", PREFIX, exc)
        raise
    if _registered_platform is not None:  # decided already in this process
        return
    from vllm_kv_strategies.distributed import carry_to_ray_workers, check_switch

    carry_to_ray_workers()  # before this process can start Ray workers
    check_switch(mode)
    if mode == "off":
        _registered_platform = "off"
        announce(logging.INFO, "%s off (KV_STRATEGIES=off): nothing patched", PREFIX)
        return
    if not os.environ.get("KV_STRATEGIES_RUN_ID", "").strip():
        os.environ["KV_STRATEGIES_RUN_ID"] = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    _registered_platform = "stock"  # until the adapter is installed
    try:
        from vllm_kv_strategies import platforms
        from vllm_kv_strategies.platforms import matrix

        installed = matrix.Installed.detect()
        if mode == "auto" and not installed.supported:
            announce(
                logging.WARNING,
                "%s %s is not proven by the plugin's tests (%s); vLLM's stock KV cache is used. "
                "Set KV_STRATEGIES=on to patch anyway.",
                PREFIX,
                installed.describe(),
                installed.coverage(),
            )
            return
        if not installed.supported:
            announce(
                logging.WARNING,
                "%s KV_STRATEGIES=%s: %s %s, which the plugin's tests do not prove (%s)",
                PREFIX,
                mode,
                "patching" if mode == "on" else "wrapping, to report stock's KV cache,",
                installed.describe(),
                installed.coverage(),
            )
        # Patches apply when each runner's module is imported (in workers), and
        # each logs what it replaced then; here they are only armed.
        runners = " and ".join(dict.fromkeys(t.runner for t in platforms.targets(installed.platform)))
        if mode == "observe":
            announce(logging.INFO, "%s observing (KV_STRATEGIES=observe, %s): stock builds the KV cache of %s; "
                     "the plugin reports it", PREFIX, installed.describe(), runners)
        else:
            announce(logging.INFO, "%s enabled (KV_STRATEGIES=%s, %s): will build the KV cache of %s", PREFIX, mode,
                     installed.describe(), runners)
        platforms.install(installed.platform)
        _registered_platform = installed.platform
    except Exception as exc:  # vLLM does not catch errors raised by plugins
        announce(logging.WARNING, "%s not active, vLLM's stock KV cache is used: %r", PREFIX, exc)


def unregister() -> None:
    """Undo :func:`register`: restore the original runner methods."""
    global _registered_platform
    from vllm_kv_strategies import platforms

    platforms.uninstall()
    _registered_platform = None
