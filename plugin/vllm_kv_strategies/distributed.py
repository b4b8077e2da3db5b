"""The plugin's settings across the processes of one deployment.

vLLM starts its engine core and workers from the process that runs
``vllm serve`` / ``LLM(...)`` (the driver); they inherit its environment,
except the workers of the Ray executor: ``RayDistributedExecutor`` sends each
worker, before it loads plugins (``WorkerWrapperBase.update_environment_variables``
runs before ``init_worker``), only the variables ``vllm.ray.ray_env.get_env_vars_to_copy``
names: vLLM's own, a few prefixes and the names listed in
``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY`` (vLLM 0.30 and later; earlier releases
have no such list). A worker on another node would otherwise take the switch
from its own node's environment.

:func:`carry_to_ray_workers` lists the plugin's variables there;
:func:`check_switch` records the driver's effective switch in
``KV_STRATEGIES_DRIVER_MODE`` (carried alike) and, in every later process,
logs one error when that process's switch differs from it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from vllm_kv_strategies import envs
from vllm_kv_strategies.logger import PREFIX, announce

#: vLLM's list of extra variable names its Ray executor copies to workers (``vllm.envs``).
RAY_EXTRA_ENV_VARS = "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"
#: Where the driver records its effective switch (see :func:`check_switch`).
DRIVER_MODE = "KV_STRATEGIES_DRIVER_MODE"


def plugin_variables() -> list[str]:
    """Every variable the plugin reads, in ``envs`` order."""
    return list(envs.environment_variables)


def carry_to_ray_workers() -> bool:
    """Add the plugin's variable names to ``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY``.

    Additive: the names already listed (by the user, or by an earlier process
    of this deployment) stay, in their order, and a name is never listed twice,
    so every process ends with the same value. Every name is listed, set or
    not: the executor copies only the names set in the driver
    (``if name in os.environ``), so an unset one costs nothing. Done only when
    vLLM is loaded in this process and registers the variable (``vllm.envs``;
    0.30+): an older vLLM would warn about an unknown ``VLLM_*`` variable.
    vLLM is never imported here.

    Returns:
        whether the variable changed.
    """
    vllm_envs = sys.modules.get("vllm.envs")
    if RAY_EXTRA_ENV_VARS not in (getattr(vllm_envs, "environment_variables", None) or ()):
        return False
    current = os.environ.get(RAY_EXTRA_ENV_VARS, "")
    listed = {name.strip() for name in current.split(",")}
    missing = [name for name in plugin_variables() if name not in listed]
    if not missing:
        return False
    os.environ[RAY_EXTRA_ENV_VARS] = ",".join([current, *missing] if current.strip() else missing)
    return True


def check_switch(mode: str) -> str | None:
    """Record this process's switch for the processes it starts, or check it
    against the one recorded by the driver.

    The first process of a deployment (``KV_STRATEGIES_DRIVER_MODE`` unset)
    sets ``KV_STRATEGIES_DRIVER_MODE`` to its effective ``KV_STRATEGIES``
    (``auto`` when unset). A later one (engine core, worker, Ray worker) whose
    switch differs logs one ERROR naming both values: its KV cache is built
    with a switch the user did not set where vLLM was started.

    Returns:
        the driver's switch when it differs from ``mode``, else None.
    """
    driver = envs.KV_STRATEGIES_DRIVER_MODE
    if not driver:
        os.environ[DRIVER_MODE] = mode
        return None
    if driver == mode:
        return None
    announce(
        logging.ERROR,
        "%s this process (pid %d on %s) runs with KV_STRATEGIES=%s, but the process that started this vLLM "
        "deployment runs with KV_STRATEGIES=%s (KV_STRATEGIES_DRIVER_MODE): this process follows its own. "
        "Set KV_STRATEGIES alike on every node, or only where vLLM starts (docs/using.md: Multi-node and Ray).",
        PREFIX,
        os.getpid(),
        socket.gethostname(),
        mode,
        driver,
    )
    return driver
