"""plan's budget estimate against public startup logs (tests/deploy/startup_logs/*.toml).

For each log: device memory x utilisation - the weights - the overhead, with the constant plan
subtracted before (2 GiB) and with the terms it now computes (vllm_kv_strategies.deploy.overhead),
beside the logged "Available KV cache memory"; then the median and the worst |error| / logged
budget over all logs, over those the constants were read from (llm-d-planner's H100 sweep) and
over the others, and over the Ascend logs; the logs set aside with their reason.

    .nox/upstream-0-32-0/bin/python benchmarks/startup_logs.py [--markdown] [--plan-weights] [--check]

The weights are the log's "Model loading took" unless ``--plan-weights``: then plan's own weights
term (``plan --json`` with the installed vLLM: the checkpoint index or the model built on the
meta device), the estimate a user gets; a log whose model this vLLM cannot build keeps the logged
weights and is listed with plan's reason. ``--check``: exit 1 unless the summary equals what plan
prints (``deploy/budget.py``: ``PLAN_WEIGHTS`` / ``LOGGED_WEIGHTS``). Reads configs with
transformers (any cell's environment); ``--plan-weights`` imports vLLM.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugin"), str(ROOT / "tests" / "deploy")]

import published  # noqa: E402  (tests/deploy/published.py)
from vllm_kv_strategies.deploy import budget  # noqa: E402

GIB = 2**30


def summary(name: str, rows: list[tuple]) -> str:
    if not rows:
        return f"{name}: none"
    before, after = [abs(r[5]) for r in rows], [abs(r[7]) for r in rows]
    return (f"{name}: {len(rows)} logs: before median {statistics.median(before):.1%}, worst {max(before):.1%}; "
            f"now median {statistics.median(after):.1%}, worst {max(after):.1%}; "
            f"{sum(not r[8] for r in rows)} outside the bound (10 %, or 0.5 GiB under 5 GiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/plan.md)")
    parser.add_argument("--plan-weights", action="store_true", help="the weights as plan computes them (imports vLLM)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the summary is what plan prints")
    args = parser.parse_args(argv)
    logs = published.load()
    rows = []
    for log in logs:
        if log.set_aside:
            continue
        if args.plan_weights:
            log.plan_weights()
            print(f"weights: {log.name}: {log.weights_source}", file=sys.stderr, flush=True)
        old, new = log.estimates()
        logged, e = log.logged, log.engine()
        stated = e.vllm if e.vllm != published.NEWEST or published.NEWEST in log.data["release"] else "n/s"
        rows.append((log.name, f"{'vllm-ascend' if e.platform == 'npu' else 'vLLM'} {stated}", f"{e.platform} TP{e.tp} PP{e.pp}", logged / GIB, old / GIB,
                     (old - logged) / logged, new / GIB, (new - logged) / logged, published.within(new - logged, logged), log.data["source"]))
    if args.markdown:
        print("| log | release | parallel | logged GiB | 2 GiB constant | error | computed terms | error |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| [{r[0]}]({r[9]}) | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:+.1%} | {r[6]:.2f} | {r[7]:+.1%} |")
    else:
        print(f"{'log':60} {'parallel':14} {'logged':>7} {'before':>7} {'err':>7} {'now':>7} {'err':>7}")
        for r in rows:
            print(f"{r[0][:60]:60} {r[2]:14} {r[3]:7.2f} {r[4]:7.2f} {r[5]:+7.1%} {r[6]:7.2f} {r[7]:+7.1%}"
                  f"{'' if r[8] else '  OUTSIDE'}")
    print()
    print(summary("all", rows))
    print(summary("llm-d-planner's H100 sweep (the constants were read from it)", [r for r in rows if "llmd" in r[0]]))
    print(summary("the others", [r for r in rows if "llmd" not in r[0]]))
    print(summary("Ascend", [r for r in rows if r[0].startswith("npu-")]))
    for log in logs:
        if log.set_aside:
            print(f"set aside: {log.name}: {log.set_aside}")
    if args.check:
        after = [abs(r[7]) for r in rows]
        found = (len(rows), round(statistics.median(after), 3), round(max(after), 3))
        stated = budget.PLAN_WEIGHTS if args.plan_weights else budget.LOGGED_WEIGHTS
        if found != stated:
            print(f"check: deploy/budget.py states {stated}, the benchmark gives {found}", file=sys.stderr)
            return 1
        print(f"check: deploy/budget.py states {stated}, as the benchmark gives")
    return 0


if __name__ == "__main__":
    sys.exit(main())
