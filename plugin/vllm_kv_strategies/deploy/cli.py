"""``vllm-kv-strategies plan MODEL_DIR [vLLM engine arguments] [--json OUT]``.

The engine arguments are parsed by the installed vLLM's own parser
(``FlexibleArgumentParser`` + ``EngineArgs.add_cli_args``), the engine config
made by ``EngineArgs.from_cli_args(...).create_engine_config()``, the model
built on the meta device and planned by vLLM's planner (:mod:`.predict`).
Bad input (no directory, no ``config.json``, remote code, an architecture
this vLLM does not know, an argument vLLM rejects) is one line on stderr and
exit 2 (checked before vLLM is imported wherever the check does not need it); a
budget vLLM refuses is printed with vLLM's own words and exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time

from vllm_kv_strategies.deploy import output
from vllm_kv_strategies.deploy.errors import BadInput, _described, _one_line, _rejection
from vllm_kv_strategies.deploy.inputs import check_before_vllm, check_outputs, join_negative_values
from vllm_kv_strategies.deploy.options import DESCRIPTION, EPILOG, PROG, USAGE, device_list, own_arguments, own_help, own_parser

__all__ = ["own_arguments", "run", "plan_once", "parse", "notes"]

def _progress(message: str) -> None:
    output.current.progress(f"plan: {message} ...")


def on_ascend() -> bool:
    """Whether the platform planned is vllm-ascend's: then each side, stock and the plugin,
    is planned and built by its own code (:mod:`vllm_kv_strategies.platforms.ascend.plan`)."""
    from vllm.platforms import current_platform

    return current_platform.device_type == "npu"


def check_architecture(config: dict) -> None:
    """:class:`BadInput` when none of the config's ``architectures`` is in vLLM's model registry."""
    from vllm.model_executor.models import ModelRegistry

    archs = config.get("architectures") or []
    known = set(ModelRegistry.get_supported_archs())
    if archs and not any(a in known for a in archs):
        raise BadInput(f"architecture {', '.join(archs)} is not one this vLLM knows ({len(known)} architectures registered)")


def engine_parser():
    from vllm.engine.arg_utils import EngineArgs
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM 0.11
        from vllm.utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog=PROG, description=textwrap.fill(DESCRIPTION, 100), epilog=EPILOG, usage=USAGE,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
    own_arguments(parser)
    EngineArgs.add_cli_args(parser)

    def error(message: str):
        raise BadInput(f"invalid argument: {_one_line(message)}")  # pydantic's JSON errors span lines

    parser.error = error
    return parser


def run(argv: list[str], verbosity: int = 0) -> int:
    """The command; returns its exit status. ``verbosity``: -1 quiet, 1 / 2 verbose (:mod:`.output`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = join_negative_values(argv)
    try:
        if device_list(argv):  # before anything else is read
            return 0
        known = own_parser().parse_known_args(argv)[0] if not any(a.startswith(("-h", "--help")) for a in argv) else None
        verbosity = -1 if known and known.quiet else (max(verbosity, 1) if known and known.verbose else verbosity)
        with output.command(verbosity, known and known.json_out, default_level="ERROR"):  # vLLM's lines: stderr
            return _run(argv)
    except BadInput as exc:
        print(f"plan: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if "vllm_kv_strategies.deploy.platforms" in sys.modules:
            sys.modules["vllm_kv_strategies.deploy.platforms"].restore()  # the installed platform again


def _run(argv: list[str]) -> int:
    start, device, config = time.monotonic(), None, None
    if own_help(argv):
        raise SystemExit(0)
    if not any(a.startswith("--help") for a in argv):
        known = own_parser().parse_known_args(argv)[0]
        config, device = check_before_vllm(known, argv), known.device
    else:  # vLLM's engine options through its parser: on the platform --device names, where one is named
        device = own_parser().parse_known_args(["-", *argv])[0].device
    from vllm_kv_strategies.deploy import platforms
    from vllm_kv_strategies.platforms.ascend import npu_standin

    platforms.prepare(device, config, npu_standin)  # before vLLM is imported: which platform plugins it may load
    _progress("importing vLLM (10-30 s on a CPU)")
    try:
        platform_line = platforms.use(device, npu_standin)
        parser = engine_parser()
    except BadInput:
        raise
    except Exception as exc:  # vLLM or its platform plugin cannot load here
        raise BadInput(f"cannot import vLLM's engine arguments here: {type(exc).__name__}: {_one_line(exc)}") from None
    args = parse(parser, argv)
    check_architecture(config)
    if args.plot and not args.sweep and not on_ascend():
        raise BadInput(f"--plot {args.plot}: draws a sweep (give --sweep ARG=V1,V2,... too), or on vllm-ascend the "
                       "stock and plugin sides' memory maps")
    if args.plot:
        from vllm_kv_strategies.deploy.sweep import _matplotlib

        _matplotlib()  # installed, before anything is planned
    if args.sweep:
        from vllm_kv_strategies.deploy.sweep import sweep

        return sweep(parser, argv, args, lambda combo: plan_once(parse(parser, combo), platform_line), _progress)
    prediction = plan_once(args, platform_line)
    prediction.seconds = time.monotonic() - start
    from vllm_kv_strategies.deploy import render

    output.current.answer(render.table(prediction, args.model_dir))
    output.current.json(render.as_json(prediction, args.model_dir))
    if args.plot:
        output.current.answer(render.memory_maps(prediction, args.model_dir, args.plot))
    plugin_side = prediction.ascend and prediction.ascend["plugin"]
    refused = prediction.refusal or (plugin_side and plugin_side.build_error and not plugin_side.not_planned)
    return 1 if refused else 0


def parse(parser, argv: list[str]):
    """The arguments, checked (:func:`check_outputs`), as vLLM's ``EngineArgs`` reads them for plan."""
    args = parser.parse_args(argv)
    args.argv = argv
    check_outputs(args)
    args.model, args.skip_tokenizer_init = args.model_dir, True
    args.offload_gib, args.cpu_offload_gb = getattr(args, "cpu_offload_gb", 0) or 0, 0  # not on meta: the estimate subtracts it
    return args


def plan_once(args, platform_line: str = ""):
    """The :class:`~.predict.Prediction` for ``args`` (:func:`parse`'s); :class:`BadInput` for a
    configuration vLLM will not make or a model it cannot build. A package the model's modules
    import and this machine lacks (a kernel library: ``cutlass``) is stood in and the plan retried."""
    from vllm_kv_strategies.deploy import standins

    while True:
        try:
            return _plan_once(args, platform_line)
        except BadInput as exc:
            root = exc.__context__ and standins.stand_in_missing(exc.__context__)
            if not root:
                raise
            _progress(f"{root} (imported by the model's modules) is not installed here: stood in for planning, again")


def _plan_once(args, platform_line: str):
    from vllm.engine.arg_utils import EngineArgs

    from vllm_kv_strategies.deploy import model, predict, standins

    budget_for = budget_source(args)
    try:
        platform_notes: list[str] = []
        vllm_config = predict.engine_config(EngineArgs.from_cli_args(args), platform_notes)
    except Exception as exc:  # vLLM's own validation of the arguments and the config
        raise BadInput(_rejection(exc)) from None
    problem = model.pipeline_problem(vllm_config, _one_line)
    if problem:
        raise BadInput(problem)
    stages = vllm_config.parallel_config.pipeline_parallel_size
    if args.stage_budgets and len(args.stage_budgets) != stages:
        raise BadInput(f"--stage-budgets {','.join(map(str, args.stage_budgets))}: {len(args.stage_budgets)} budgets for "
                       f"{stages} pipeline stage{'s' if stages != 1 else ''}")
    if (vllm_config.cache_config.kv_cache_memory_bytes is None and args.device is None and args.device_memory_gib is None
            and not args.stage_budgets):
        raise BadInput("give the KV cache budget per worker: --kv-cache-memory-bytes N (exact), "
                       "or --device NAME / --device-memory-gib GIB (an estimate)")
    try:
        if on_ascend():
            from vllm_kv_strategies.platforms.ascend.plan import predict_ascend

            prediction = predict_ascend(EngineArgs.from_cli_args(args), budget_for, progress=_progress)
        else:
            from vllm_kv_strategies.platforms.upstream import plan as upstream_plan

            with standins.building(), model.on_meta(default=False):  # the planned platform's backends, imported
                prediction = predict.predict(vllm_config, budget_for, progress=_progress, stage_bytes=args.stage_budgets,
                                             sides=upstream_plan.sides)
    except BadInput:
        raise
    except Exception as exc:  # vLLM fails to build the model without weights (e.g. on data it computes at build)
        raise BadInput(f"cannot plan: vLLM could not build {args.model_dir} on the meta device for these arguments "
                       f"({_described(exc)})") from None
    prediction.platform = platform_line
    prediction.notes = [*platform_notes, *notes(args, prediction)] + [line for line in [standins.line()] if line]
    return prediction


def notes(args, prediction) -> list[str]:
    """Arguments given that the plan does not follow: ``--block-size`` where the platform plans other
    blocks (vllm-ascend's 128 tokens; a hybrid's aligned pages), ``--device`` / ``--device-memory-gib``
    beside an exact budget (and whether that card holds it and the largest rank's weights)."""
    out = []
    planned = sorted({g.kv_cache_spec.block_size for w in prediction.workers for g in w.kv_cache_groups})
    if args.block_size is not None and planned and args.block_size not in planned:
        out.append(f"--block-size {args.block_size} given; the blocks planned are of "
                   f"{', '.join(map(str, planned))} tokens, as vLLM's platform sets them for this model")
    if args.device and args.device_memory_gib and not prediction.budget.exact:
        from vllm_kv_strategies.deploy.budget import DEVICES

        out.append(f"--device-memory-gib {args.device_memory_gib:g} overrides {args.device}'s memory "
                   f"({DEVICES[args.device].gib:.2f} GiB) in the estimate; --device {args.device} sets the platform")
    if prediction.budget.exact and (args.device or args.device_memory_gib):
        from vllm_kv_strategies.deploy.budget import device_memory

        given = f"--device {args.device}" if args.device else f"--device-memory-gib {args.device_memory_gib:g}"
        memory, _ = device_memory(args.device, args.device_memory_gib)
        weights = max(prediction.param_bytes, default=0)
        if prediction.budget.bytes + weights > memory:
            out.append(f"{given} does not hold the exact budget: {prediction.budget.bytes:,} bytes of KV cache and "
                       f"{weights:,} bytes of weights on the largest rank exceed its {memory:,} bytes; vLLM would run "
                       "out of memory at KV cache initialisation there")
        else:
            out.append(f"{given} {'sets the platform only' if args.device else 'is not used'}: the budget given is exact")
    return out


def budget_source(args):
    """The budget as a function of (the engine config, the largest rank's
    parameter bytes) (:mod:`.budget`): exact where the config has
    ``kv_cache_memory_bytes`` (``--kv-cache-memory-bytes``, or the platform's:
    vLLM's CPU platform sets it from ``VLLM_CPU_KVCACHE_SPACE``), else an
    estimate for ``--device`` / ``--device-memory-gib``."""
    from vllm_kv_strategies.deploy import budget, overhead

    def source(vllm_config, meta_bytes: int):
        cache = vllm_config.cache_config
        if cache.kv_cache_memory_bytes is not None:
            given = args.kv_cache_memory_bytes == cache.kv_cache_memory_bytes
            replaced = f", replacing --kv-cache-memory-bytes {args.kv_cache_memory_bytes:,}" if args.kv_cache_memory_bytes else ""
            return budget.exact(cache.kv_cache_memory_bytes, "--kv-cache-memory-bytes" if given else
                                f"kv_cache_memory_bytes set by vLLM's platform (VLLM_CPU_KVCACHE_SPACE on the CPU{replaced})")
        p = vllm_config.parallel_config
        weights = budget.weights_per_rank(args.model_dir, p.tensor_parallel_size * p.pipeline_parallel_size, meta_bytes,
                                          args.offload_gib, budget.online_quantization(vllm_config))
        memory = budget.device_memory(args.device, args.device_memory_gib)
        # vLLM 0.34 sizes the KV cache after warm-up on CUDA / ROCm unless told not to
        from vllm.platforms import current_platform  # the planned platform: the card's, or the host's

        resizable = hasattr(cache, "resolved_gpu_memory_utilization") and getattr(
            args, "enable_extensible_kv_cache", None) is not False and cache.num_gpu_blocks_override is None and (
            current_platform.is_cuda_alike())
        given = any(a.split("=")[0] in ("--gpu-memory-utilization", "--gpu_memory_utilization") for a in args.argv)
        return budget.estimate(memory, cache.gpu_memory_utilization, weights, overhead.for_plan(vllm_config, args.overhead_gib, args.model_dir, args.device),
                               resizable, given, rocm=current_platform.is_rocm())

    return source
