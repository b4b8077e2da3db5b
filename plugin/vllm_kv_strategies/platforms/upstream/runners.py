"""Which upstream model runner vLLM would build the KV cache with, per release, and whether
vLLM can start at all on this machine (``doctor``).

Up to 0.33 vLLM picks V1 or V2 (``VllmConfig.use_v2_model_runner``, ``VLLM_USE_V2_MODEL_RUNNER``,
V1 where Triton has no backend). 0.34 has no V1: GPUs run V2's ``GPUModelRunner``; its CPU
worker (``vllm/v1/worker/cpu_worker.py``) runs ``cpu/model_runner.CPUModelRunner``, a V2
subclass, on x86 (which needs Triton: ``CpuPlatform.check_and_update_config`` refuses x86 without
it) and ``cpu/standalone_model_runner.StandaloneCPUModelRunner`` on other CPUs without Triton
(``CpuPlatform.uses_standalone_cpu_model_runner``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_kv_strategies.platforms.upstream import facts
from vllm_kv_strategies.platforms.targets import PatchTarget


@dataclass(frozen=True)
class RunnerChoice:
    """The runner vLLM would build the KV cache with: its name, the target that covers it
    (None: the plugin patches nothing there), why this runner, where vLLM itself cannot
    start on this machine, why not (one sentence), and where vLLM refuses the engine options
    given, its words (then no runner is chosen: ``doctor`` says so and exits 2)."""

    runner: str
    target: PatchTarget | None
    why: str
    cannot_start: str | None = None
    refused: str | None = None


def _engine_config(engine_args: list[str], parse_only: bool = False):
    """vLLM's ``VllmConfig`` for the engine options (``parse_only``: their parsed namespace, where
    vLLM cannot make a config on this machine), or the one-line reason vLLM refuses them."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="doctor --"))

    def error(message: str):  # one line, not argparse's usage and exit
        raise ValueError(message)

    parser.error = error
    try:
        parsed = parser.parse_args(engine_args)
        return parsed if parse_only else EngineArgs.from_cli_args(parsed).create_engine_config()
    except Exception as exc:  # vLLM's own refusal of the options, said in one line
        return f"vLLM refuses the engine options given ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"


def _without_v1(engine_args: list[str], vllm_version: str | None) -> RunnerChoice:
    from vllm.platforms import CpuArchEnum, current_platform
    from vllm.triton_utils import HAS_TRITON

    removed = f"vLLM {vllm_version} has no Model Runner V1"
    cannot_start = None
    if current_platform.is_cpu() and current_platform.get_cpu_architecture() == CpuArchEnum.X86 and not HAS_TRITON:
        cannot_start = (f"vLLM {vllm_version} cannot start on this machine: its CPU platform needs Triton "
                        "(triton-cpu) on x86, and none is installed; the answers below are the plugin's")
    # the options vLLM's parser refuses, and where vLLM can start here the config it refuses
    refused = _engine_config(engine_args, parse_only=cannot_start is not None) if engine_args else None
    refused = refused if isinstance(refused, str) else None
    if not current_platform.is_cpu():
        return RunnerChoice(facts.V2.runner, facts.V2, f"{removed}: its GPU runner is V2", cannot_start, refused)
    if current_platform.uses_standalone_cpu_model_runner():
        return RunnerChoice("StandaloneCPUModelRunner", None,
                            f"{removed}; a CPU without Triton that is not x86 runs its standalone runner, "
                            "which the plugin does not patch", cannot_start, refused)
    return RunnerChoice("CPUModelRunner (V2)", facts.V2,
                        f"{removed}; its x86 CPU runner subclasses V2's GPUModelRunner", cannot_start, refused)


def runner_choice(engine_args: list[str], vllm_version: str | None) -> RunnerChoice:
    """The runner vLLM ``vllm_version`` would build the KV cache with. With vLLM engine
    options it is vLLM's own choice for them (``VllmConfig.use_v2_model_runner`` up to 0.33);
    without, what the release and the environment decide."""
    engine_args = engine_args[1:] if engine_args[:1] == ["--"] else engine_args
    if not facts.has_v1(vllm_version):
        return _without_v1(engine_args, vllm_version)
    if engine_args:
        config = _engine_config(engine_args)
        if isinstance(config, str):
            return RunnerChoice("none", None, "vLLM refuses the engine options given", refused=config)
        target = facts.V2 if config.use_v2_model_runner else facts.V1
        return RunnerChoice(target.runner, target, "vLLM's choice for the engine options given")
    flag = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if flag is not None:
        target = facts.V2 if flag.strip().lower() not in ("0", "false", "") else facts.V1
        return RunnerChoice(target.runner, target, f"VLLM_USE_V2_MODEL_RUNNER={flag}")
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        return RunnerChoice(facts.V1.runner, facts.V1, "Model Runner V2 needs Triton, which has no backend here")
    return RunnerChoice(facts.V2.runner, facts.V2, "vLLM's default where Triton works (a model feature V2 lacks "
                        "selects V1; pass engine options after -- to check)")
