"""plan's own options, read before vLLM is imported (:func:`own_parser`), its help (examples,
a usage line naming every option) and ``--device list``."""

from __future__ import annotations

import argparse
import textwrap

from vllm_kv_strategies.deploy.errors import BadInput

DESCRIPTION = (
    "How much KV cache a deployment gets, before anything starts: the model in MODEL_DIR (config.json "
    "alone suffices: no weights, no tokenizer, no network) is built on the meta device and planned by the "
    "installed vLLM's own planner for the engine arguments given (every `vllm serve` engine argument: "
    "--tensor-parallel-size, --pipeline-parallel-size, --max-model-len, --block-size, --kv-cache-dtype, ...). "
    "Prints per rank the KV cache groups (kind, layers, block size, page bytes), num_blocks, the tokens and "
    "the maximum concurrency vLLM would log, or vLLM's own refusal. The budget is exact with "
    "--kv-cache-memory-bytes; with --device NAME or --device-memory-gib GIB instead it is an estimate "
    "(memory x --gpu-memory-utilization - weights - overhead, each term shown). "
    "Exit 0: planned; 1: vLLM refuses the budget; 2: bad input."
)
PROG = "vllm-kv-strategies plan"
USAGE = ("%(prog)s MODEL_DIR [vLLM engine arguments] [--kv-cache-memory-bytes N] [--device NAME | --device list] "
         "[--device-memory-gib GIB] [--overhead-gib GIB] [--stage-budgets N0,N1,...] [--sweep ARG=V1,V2,...] "
         "[--plot FILE.png] [--json OUT] [--quiet | --verbose]")
EPILOG = """examples:
  %(prog)s ./Llama-3.1-8B --kv-cache-memory-bytes 20G    # exact, for a known budget per worker
  %(prog)s ./Llama-3.1-8B --device h100-80g -tp 2        # estimated from an H100's memory
  %(prog)s ./Llama-3.1-8B --device h100-80g --json -     # the plan as JSON on stdout
  %(prog)s ./Llama-3.1-8B --device a100-40g --sweep max-model-len=4096,32768
  %(prog)s --device list                                 # the cards, their memory and its source

vLLM's engine arguments: --help=ParallelConfig, --help=CacheConfig, --help=ModelConfig, ... (a group),
--help=<word> (the options matching it), --help=all (all of them); --help=plan: this command's own.
Exit 0: planned; 1: vLLM refuses the budget; 2: bad input (one line on stderr)."""



def own_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from vllm_kv_strategies.deploy.budget import DEVICES

    group = parser.add_argument_group("plan", "this command's own options (the others are vLLM's engine arguments)")
    group.add_argument("model_dir", metavar="MODEL_DIR", help="a local model directory with a config.json")
    group.add_argument("--json", dest="json_out", metavar="OUT", help="also write the plan as JSON to OUT; -: to "
                       "stdout (the table then goes to stderr)")
    group.add_argument("--device", choices=sorted(DEVICES), type=str.lower, metavar="NAME",
                       help="plan for this card: its vLLM platform and, without --kv-cache-memory-bytes, a budget "
                       f"estimated from its memory ({', '.join(sorted(DEVICES))}; --device list: their memory and its source)")
    group.add_argument("--stage-budgets", metavar="N0,N1,...", type=_byte_list,
                       help="an exact KV cache budget per worker for each pipeline stage, in bytes (stages carry "
                       "different weights, so vLLM's workers measure different budgets)")
    group.add_argument("--sweep", action="append", metavar="ARG=V1,V2,...", help="plan every combination of the "
                       "values of these engine arguments (repeatable: tensor-parallel-size=1,2,4,8) and print one table")
    group.add_argument("--plot", metavar="FILE.png", help="with --sweep: draw tokens and maximum concurrency against "
                       "the swept values; on vllm-ascend without --sweep: the stock and plugin sides' KV cache memory "
                       "maps (needs matplotlib: pip install 'vllm-kv-strategies[plot]')")
    group.add_argument("--device-memory-gib", type=float, metavar="GIB", help="estimate the budget for a device of GIB GiB")
    group.add_argument("--overhead-gib", type=float, metavar="GIB",
                       help="what the estimate subtracts for activations, graphs and the runtime, as one figure "
                       "(default: computed for the model and the engine arguments, each term shown)")
    group.add_argument("--quiet", action="store_true", help="no progress lines; vLLM logs errors only (-q is vLLM's "
                       "--quantization: vllm-kv-strategies -q plan ... is the short form)")
    group.add_argument("--verbose", action="store_true", help="vLLM's INFO lines too, on stderr")
    return parser


def own_help(argv: list[str]) -> bool:
    """``-h`` / ``--help``: plan's own options, printed without importing vLLM (its engine
    options: ``--help=all`` / ``--help=<group>``, through vLLM's parser). Returns whether it did."""
    if not any(a in ("-h", "--help") for a in argv):
        return False
    parser = argparse.ArgumentParser(prog=PROG, description=textwrap.fill(DESCRIPTION, 100), epilog=EPILOG, usage=USAGE, add_help=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    own_arguments(parser).print_help()
    return True


def own_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """plan's own options alone, read before vLLM is imported; a mistake in them is :class:`BadInput`."""
    parser = own_arguments(argparse.ArgumentParser(add_help=False, prog=prog))

    def error(message: str):
        raise BadInput(f"invalid argument: {message}")

    parser.error = error
    return parser


def device_list(argv: list[str]) -> bool:
    """``--device list``: the cards, their memory and where the figure comes from (with ``--json OUT``
    as JSON, ``-``: stdout, written as every command writes its JSON: :class:`.output.Output`).
    Returns whether it answered.

    Raises:
        BadInput: ``--json OUT`` cannot be written."""
    lowered = [a.lower() for a in argv]
    if "--device=list" not in lowered and not any(a == "--device" and b == "list" for a, b in zip(lowered, lowered[1:])):
        return False
    from vllm_kv_strategies.deploy.budget import DEVICES
    from vllm_kv_strategies.deploy.inputs import check_writable
    from vllm_kv_strategies.deploy.output import STDOUT, Output

    out = next((b for a, b in zip(argv, argv[1:]) if a == "--json"), None) or next(
        (a.split("=", 1)[1] for a in argv if a.startswith("--json=")), None)
    if out is not None:
        check_writable("--json", None if out == STDOUT else out)
        Output(json_path=out).json({"kind": "devices", "devices": [
            {"name": n, "gib": c.gib, "bytes": c.bytes, "platform": c.platform, "card": c.what, "source": c.source}
            for n, c in sorted(DEVICES.items())]})
        return True
    print(f"{'NAME':10} {'GiB':>7} {'platform':8} card; source of the memory figure")
    for name, card in sorted(DEVICES.items()):
        print(f"{name:10} {card.gib:7.2f} {card.platform:8} {card.what}; {card.source}")
    return True


def _byte_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole byte counts, one per pipeline stage") from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every budget must be positive")
    return values
