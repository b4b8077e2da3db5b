"""The switch and the report directory reach every worker: vLLM's Ray executor
copies the plugin's variables (``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY``, read by
vLLM's own ``vllm.ray.ray_env.get_env_vars_to_copy``), and a process whose
switch differs from the driver's logs an error naming both.

The worker side runs as a Ray worker does, in this process: vLLM's
``WorkerWrapperBase.update_environment_variables`` applies the driver's
variables (computed by ``get_env_vars_to_copy`` after ``register()``), then
vLLM's ``load_general_plugins`` loads the plugin. ``tools/nox.sh -s ray``
runs the same with vLLM's ``RayWorkerWrapper`` actors on a Ray cluster.
"""

from __future__ import annotations

import logging
import os
import sys

import pytest

import vllm.envs  # noqa: F401  (loaded, as whenever vLLM calls register())
import vllm.plugins
from vllm.ray.ray_env import get_env_vars_to_copy
from vllm.v1.worker.worker_base import WorkerWrapperBase

import vllm_kv_strategies
from vllm_kv_strategies import distributed, envs

PLUGIN_VARIABLES = ["KV_STRATEGIES", "KV_STRATEGIES_REPORT", "KV_STRATEGIES_RUN_ID", "KV_STRATEGIES_DRIVER_MODE",
                    "KV_STRATEGIES_TEST_FAULT"]


def test_the_plugin_lists_every_variable_it_reads():
    assert distributed.plugin_variables() == list(envs.environment_variables)
    assert sorted(distributed.plugin_variables()) == sorted(PLUGIN_VARIABLES)


@pytest.mark.parametrize("mode", ["off", "on", "auto", "observe"])
def test_register_makes_vllms_ray_executor_copy_the_plugins_variables(monkeypatch, mode):
    monkeypatch.setenv("KV_STRATEGIES", mode)
    monkeypatch.setenv("KV_STRATEGIES_REPORT", "/shared/kv-reports")
    before = get_env_vars_to_copy()
    assert not set(PLUGIN_VARIABLES) & before  # the bug: vLLM alone copies none of them
    vllm_kv_strategies.register()
    copied = get_env_vars_to_copy(destination="workers")
    assert set(PLUGIN_VARIABLES) <= copied
    assert copied - before == set(PLUGIN_VARIABLES)
    # What the executor sends: the names set in the driver (ray_executor.py, ``if name in os.environ``).
    sent = {n: os.environ[n] for n in copied if n.startswith("KV_STRATEGIES") and n in os.environ}
    assert sent["KV_STRATEGIES"] == mode and sent["KV_STRATEGIES_REPORT"] == "/shared/kv-reports"
    assert sent["KV_STRATEGIES_DRIVER_MODE"] == mode


def test_names_the_user_listed_are_kept_in_order_and_none_twice(monkeypatch):
    monkeypatch.setenv(distributed.RAY_EXTRA_ENV_VARS, "MY_TOKEN, KV_STRATEGIES ,OTHER")
    assert distributed.carry_to_ray_workers() is True
    value = os.environ[distributed.RAY_EXTRA_ENV_VARS]
    assert value.startswith("MY_TOKEN, KV_STRATEGIES ,OTHER,")
    names = [n.strip() for n in value.split(",")]
    assert sorted(names) == sorted({*PLUGIN_VARIABLES, "MY_TOKEN", "OTHER"}) and len(names) == len(set(names))
    assert {"MY_TOKEN", "OTHER", *PLUGIN_VARIABLES} <= get_env_vars_to_copy()
    # Idempotent: a second process of the deployment (the engine core) inherits the value and keeps it.
    assert distributed.carry_to_ray_workers() is False
    assert os.environ[distributed.RAY_EXTRA_ENV_VARS] == value


def test_an_empty_user_list_gets_no_empty_name(monkeypatch):
    monkeypatch.setenv(distributed.RAY_EXTRA_ENV_VARS, "  ")
    distributed.carry_to_ray_workers()
    assert os.environ[distributed.RAY_EXTRA_ENV_VARS] == ",".join(distributed.plugin_variables())


def test_a_vllm_without_the_list_is_left_alone(monkeypatch):
    # vLLM 0.11 / 0.13 (vllm-ascend's) read no such variable: setting one there makes vLLM warn.
    monkeypatch.delitem(vllm.envs.environment_variables, distributed.RAY_EXTRA_ENV_VARS)
    assert distributed.carry_to_ray_workers() is False
    assert distributed.RAY_EXTRA_ENV_VARS not in os.environ
    monkeypatch.delitem(sys.modules, "vllm.envs")  # vLLM not loaded in this process: never imported here
    assert distributed.carry_to_ray_workers() is False
    assert distributed.RAY_EXTRA_ENV_VARS not in os.environ


@pytest.mark.parametrize(("value", "effective"), [(None, "auto"), ("ON", "on"), ("off", "off")])
def test_the_first_process_records_its_effective_switch(monkeypatch, value, effective):
    if value is not None:
        monkeypatch.setenv("KV_STRATEGIES", value)
    vllm_kv_strategies.register()
    assert os.environ[distributed.DRIVER_MODE] == effective


def _errors(kv_log) -> list[str]:
    return kv_log.at(logging.ERROR)


@pytest.mark.parametrize(("driver", "mine"), [("off", "on"), ("on", "off"), ("auto", "observe")])
def test_a_process_whose_switch_differs_from_the_drivers_logs_one_error_naming_both(monkeypatch, kv_log, driver, mine):
    monkeypatch.setenv(distributed.DRIVER_MODE, driver)
    monkeypatch.setenv("KV_STRATEGIES", mine)
    vllm_kv_strategies.register()
    vllm_kv_strategies.register()  # once per process
    [error] = _errors(kv_log)
    assert f"runs with KV_STRATEGIES={mine}, but the process that started this vLLM deployment runs with " \
           f"KV_STRATEGIES={driver}" in error
    assert error.startswith("kv_strategies: this process (pid ")
    assert os.environ[distributed.DRIVER_MODE] == driver  # the driver's stays, for the processes this one starts
    assert vllm_kv_strategies._registered_platform == ("off" if mine == "off" else "upstream")  # it follows its own


@pytest.mark.parametrize("mode", ["off", "on"])
def test_a_process_with_the_drivers_switch_logs_no_error(monkeypatch, kv_log, mode):
    monkeypatch.setenv(distributed.DRIVER_MODE, mode)
    monkeypatch.setenv("KV_STRATEGIES", mode)
    vllm_kv_strategies.register()
    assert _errors(kv_log) == []


# ---------------------------------------------------------------------------
# A worker as the Ray executor V1 starts one: its own node's environment, the
# driver's variables applied by vLLM's worker wrapper, then vLLM's plugin loader.
# ---------------------------------------------------------------------------


def driver_sends(monkeypatch, **settings: str) -> dict[str, str]:
    """What vLLM's Ray executor sends a worker from a driver with ``settings``, after register() there
    (``ray_executor.py``: the names ``get_env_vars_to_copy`` gives, those set in the driver)."""
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    vllm_kv_strategies.register()
    return {n: os.environ[n] for n in get_env_vars_to_copy(destination="workers") if n in os.environ}


def become_worker(monkeypatch, sent: dict[str, str], **node_env: str) -> None:
    """This process as a Ray worker of another node: the node's environment, then vLLM's
    ``WorkerWrapperBase.update_environment_variables`` and ``load_general_plugins``."""
    vllm_kv_strategies.unregister()
    for name in [*distributed.plugin_variables(), distributed.RAY_EXTRA_ENV_VARS]:
        monkeypatch.delenv(name, raising=False)
    for name, value in node_env.items():
        monkeypatch.setenv(name, value)
    WorkerWrapperBase(rpc_rank=1).update_environment_variables([{}, sent])  # rank 1's entry
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.setenv("VLLM_PLUGINS", "kv_strategies")
    vllm.plugins.load_general_plugins()


def test_a_worker_on_a_node_without_the_settings_follows_the_drivers_off(monkeypatch, kv_log):
    sent = driver_sends(monkeypatch, KV_STRATEGIES="off")
    kv_log.clear()
    become_worker(monkeypatch, sent)
    assert vllm_kv_strategies._registered_platform == "off" and os.environ["KV_STRATEGIES"] == "off"
    assert kv_log.at(logging.INFO) == ["kv_strategies: off (KV_STRATEGIES=off): nothing patched"]
    assert _errors(kv_log) == []


def test_a_worker_takes_the_drivers_report_directory_and_run_id(monkeypatch, kv_log, tmp_path):
    sent = driver_sends(monkeypatch, KV_STRATEGIES="on", KV_STRATEGIES_REPORT=str(tmp_path))
    kv_log.clear()
    become_worker(monkeypatch, sent, KV_STRATEGIES_REPORT="/node/local/dir", KV_STRATEGIES_RUN_ID="node-2")
    assert vllm_kv_strategies._registered_platform == "upstream"
    assert envs.KV_STRATEGIES_REPORT == str(tmp_path)  # the driver's directory, not the node's
    assert envs.KV_STRATEGIES_RUN_ID == sent["KV_STRATEGIES_RUN_ID"] != "node-2"  # one run id for the deployment
    assert any(line.startswith("kv_strategies: enabled (KV_STRATEGIES=on") for line in kv_log.at(logging.INFO))
    assert _errors(kv_log) == []


def test_a_worker_whose_node_sets_another_switch_than_the_driver_logs_an_error(monkeypatch, kv_log):
    sent = driver_sends(monkeypatch)  # the driver leaves KV_STRATEGIES unset: only its effective switch travels
    assert "KV_STRATEGIES" not in sent and sent["KV_STRATEGIES_DRIVER_MODE"] == "auto"
    kv_log.clear()
    become_worker(monkeypatch, sent, KV_STRATEGIES="off")
    assert vllm_kv_strategies._registered_platform == "off"
    [error] = _errors(kv_log)
    assert "runs with KV_STRATEGIES=off, but the process that started this vLLM deployment runs with " \
           "KV_STRATEGIES=auto" in error
