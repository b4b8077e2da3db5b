"""How long ``plan --help`` takes, against ``import vllm``, in the same environment.

    .nox/upstream-0-34-0/bin/python benchmarks/plan_help.py [--repeats 9] [--json OUT]

Wall time of two fresh interpreters, run in pairs (one of each, alternating which goes first, so
that a busy machine slows both alike): ``python -m vllm_kv_strategies plan --help`` (plan's own
options; vLLM's engine options stay behind ``--help=all`` / ``--help=<group>``) and
``python -c 'import vllm'``. Prints the median of each and of the pairs' ratios; exit 1 when the
median of ``plan --help`` is over a second (the target on a 2-core CPU machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "plan --help": [sys.executable, "-m", "vllm_kv_strategies", "plan", "--help"],
    "import vllm": [sys.executable, "-c", "import vllm"],
}
TARGET_S = 1.0


def wall_s(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, timeout=600)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="pairs of runs (default 9)")
    parser.add_argument("--json", metavar="OUT", help="also write the timings as JSON")
    args = parser.parse_args(argv)
    wall_s(COMMANDS["import vllm"])  # untimed: the file cache warm for both
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for i in range(args.repeats):
        order = list(COMMANDS) if i % 2 == 0 else list(reversed(COMMANDS))
        for name in order:
            times[name].append(wall_s(COMMANDS[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = statistics.median(h / v for h, v in zip(times["plan --help"], times["import vllm"]))
    for name, value in medians.items():
        print(f"{name:12} median {value:6.3f} s  ({', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"plan --help / import vllm: median of {args.repeats} pairs {ratio:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeats": args.repeats, "seconds": times, "medians": medians, "ratio": ratio}, f, indent=1)
    return 0 if medians["plan --help"] <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
