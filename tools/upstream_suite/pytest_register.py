"""pytest plugin for an upstream project's own test suite (``-p pytest_register``).

Loaded by ``tools/upstream_suite/run.py`` into a run of vllm-ascend's ``tests/ut`` or vLLM's
``tests/v1/worker`` taken from the release's source distribution. It does two things, both
before any test module is imported:

* with ``KV_SUITE_NPU_STANDIN=1``, stands in for the NPU runtime as ``plan`` does
  (``vllm_kv_strategies.platforms.ascend.npu_standin``): vllm-ascend 0.11 - 0.18's test
  ``conftest.py`` imports ``torch_npu`` before it mocks anything, and 0.23's mocks lack
  submodules its worker imports (``torch_npu.op_plugin``); the suite's own mocks go on top;
* stands in (``vllm_kv_strategies.deploy.standins.stand_in``) for the modules named in
  ``KV_SUITE_STAND_IN`` (comma-separated) that cannot be imported in the cell's environment
  (torchvision: transformers' Qwen2-VL processors import it, and vllm-ascend's worker patches
  import those); the suite's own ``conftest.py`` then installs its ``torch_npu`` mocks on top,
  as it does on any CPU host;
* calls this plugin's entry point in vLLM's ``vllm.general_plugins`` group the way vLLM's
  plugin loader does (``entry_point.load()()``), so that ``KV_STRATEGIES`` (``off``, ``auto``,
  ``on``) decides what is patched, exactly as in a served vLLM process.

* leaves to the process's exit a zmq context a test dropped without closing it: the garbage
  collector no longer terminates it (pyzmq's ``Context.__del__`` -> ``destroy()`` -> ``term()``).
  vllm-ascend 0.18's Mooncake connector tests leave a sending thread blocked in ``recv`` on a
  socket of such a context; ``term()`` waits for that socket, so the first garbage collection
  after it (in a later test, or pytest's own at the end) waited forever, in every mode alike. A
  test's outcome does not depend on it: an unclosed context only stays open until the process
  exits, as its sockets do.

A run that hangs can be read: ``SIGUSR1`` makes this process print every thread's stack to stderr
(``faulthandler.register``); ``run.py`` sends it before it kills a run past the suite's ``timeout_s``.

The plugin's decision is written to ``KV_SUITE_DECISION`` (a file) so the run can show it.
"""

from __future__ import annotations

import faulthandler
import importlib.metadata
import os
import signal

ENTRY_POINT = "kv_strategies"


faulthandler.register(signal.SIGUSR1, all_threads=True)


def _zmq_contexts_left_to_exit() -> None:
    try:
        import zmq
    except ImportError:  # a cell without pyzmq: no zmq context to terminate
        return

    def __del__(self):  # noqa: N807  (pyzmq's would terminate it: see the module's docstring)
        pass

    zmq.Context.__del__ = __del__


_zmq_contexts_left_to_exit()

# Before the suite's conftest.py files import anything.
if os.environ.get("KV_SUITE_NPU_STANDIN") == "1":  # vllm-ascend 0.11 - 0.23's suites
    from vllm_kv_strategies.platforms.ascend.npu_standin import install

    install()
_STAND_IN = [name for name in os.environ.get("KV_SUITE_STAND_IN", "").split(",") if name]
if _STAND_IN:
    from vllm_kv_strategies.deploy.standins import stand_in

    stand_in(*_STAND_IN)


def pytest_configure(config):  # after the initial conftest.py files: their mocks are in place
    [entry_point] = importlib.metadata.entry_points(group="vllm.general_plugins", name=ENTRY_POINT)
    entry_point.load()()
    decision = os.environ.get("KV_SUITE_DECISION")
    if decision:
        import vllm_kv_strategies

        with open(decision, "w") as out:
            out.write(f"{vllm_kv_strategies._registered_platform}\n")
