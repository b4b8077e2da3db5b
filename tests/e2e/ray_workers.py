"""Two vLLM workers as Ray actors, started the way vLLM's Ray executor starts them.

    RAY_ADDRESS=127.0.0.1:PORT python tests/e2e/ray_workers.py MODEL_DIR OUT_JSON

vLLM's CPU build cannot run its Ray executor (``--distributed-executor-backend
ray`` fails in ``vllm/v1/executor/ray_utils.py`` ``initialize_ray_cluster``
with ``ValueError: current platform cpu does not support ray.``: the CPU
platform declares no ``ray_device_key``). This script is the nearest real
form, with vLLM's own pieces only: ``load_general_plugins`` in this process
(the driver; the plugin registers as in an engine core), vLLM's
``RayWorkerWrapper`` as two Ray actors on the cluster at ``RAY_ADDRESS``, the
variables vLLM's ``RayDistributedExecutor`` sends them
(``get_env_vars_to_copy(exclude_vars=WORKER_SPECIFIC_ENV_VARS,
additional_vars=platform's)``, those set here) through
``update_environment_variables``, then ``init_worker`` (where each worker
loads the plugins), ``init_device`` (tensor parallel 2 over gloo),
``load_model``, and the KV cache planned here from the workers' specs with
vLLM's ``get_kv_cache_configs`` and built by ``initialize_from_config``, as
``EngineCore._initialize_kv_caches`` does (vLLM 0.32).

Writes what each worker saw: its ``KV_STRATEGIES*`` variables, what the plugin
decided there, whether the runner class is patched, and its KV cache shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def configure_logging(worker, logging_config) -> None:
    """vLLM's logging set-up in a worker actor, as ``RayWorkerProc`` (vLLM's
    Ray executor V2, 0.32's default) does first thing; ``RayWorkerWrapper``
    (V1) does not, and its workers' INFO lines, vLLM's and the plugin's, are dropped."""
    from vllm.logger import configure_logging

    configure_logging(logging_config)


def worker_state(worker) -> dict:
    """Runs inside a worker actor (``RayWorkerWrapper.execute_method``)."""
    import vllm_kv_strategies
    from vllm_kv_strategies import patching
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = worker.worker.model_runner
    return {
        "pid": os.getpid(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("KV_STRATEGIES")},
        "registered": vllm_kv_strategies._registered_platform,
        "patched": sorted(vars(GPUModelRunner).get(patching.MARKER, {})),
        "kv_caches": [[list(t.shape), str(t.dtype)] for t in runner.kv_caches],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out_json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from vllm.plugins import load_general_plugins

    load_general_plugins()  # as the engine core does: the plugin registers in the driver

    import ray
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.ray.ray_env import get_env_vars_to_copy
    from vllm.utils.network_utils import get_distributed_init_method, get_open_port
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm.v1.executor.ray_utils import WORKER_SPECIFIC_ENV_VARS, RayWorkerWrapper

    world = 2
    config = EngineArgs(
        model=args.model_dir, tokenizer=args.model_dir, tensor_parallel_size=world, max_model_len=1024,
        max_num_seqs=1, enforce_eager=True, seed=0,
    ).create_engine_config()

    ray.init(address=os.environ["RAY_ADDRESS"])
    actor = ray.remote(num_cpus=1)(RayWorkerWrapper)
    workers = [actor.remote(rpc_rank=rank) for rank in range(world)]

    def call(method, *method_args):
        return ray.get([w.execute_method.remote(method, *method_args) for w in workers])

    names = get_env_vars_to_copy(
        exclude_vars=WORKER_SPECIFIC_ENV_VARS, additional_vars=set(current_platform.additional_env_vars),
        destination="workers",
    )
    sent = {name: os.environ[name] for name in names if name in os.environ}
    ray.get([w.update_environment_variables.remote([sent] * world) for w in workers])
    call(configure_logging, config.logging_config)
    init_method = get_distributed_init_method("127.0.0.1", get_open_port())
    call("init_worker", [
        dict(vllm_config=config, local_rank=rank, rank=rank, distributed_init_method=init_method,
             is_driver_worker=rank == 0)
        for rank in range(world)
    ])
    call("init_device")
    call("load_model")
    specs = call("get_kv_cache_spec")
    layouts = call("get_supported_kv_cache_layouts")
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout

    layout = resolve_kv_cache_layout(config, layouts, [s for per_worker in specs for s in per_worker.values()])
    call("set_kv_cache_layout", layout.name)
    memory = call("determine_available_memory")
    kv_cache_configs = get_kv_cache_configs(config, specs, memory)
    for kv_cache_config in kv_cache_configs:
        kv_cache_config.kv_cache_layout = config.cache_config.kv_cache_layout
    call("initialize_from_config", kv_cache_configs)
    states = call(worker_state)
    doc = {
        "sent": {k: v for k, v in sorted(sent.items()) if k.startswith("KV_STRATEGIES")},
        "driver_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("KV_STRATEGIES")},
        "workers": states,
    }
    with open(args.out_json, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"ray_workers: wrote {args.out_json}", flush=True)
    for w in workers:
        ray.kill(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
