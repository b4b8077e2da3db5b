"""``plan MODEL_DIR --sweep ARG=V1,V2,... [--sweep ARG=...] [--json OUT] [--plot FILE.png]``:
every combination of the swept engine arguments planned as one ``plan`` would
plan it (vLLM's parser, the model built on the meta device, vLLM's planner),
one progress line per combination, then one table: num_blocks, the tokens and
maximum concurrency vLLM would log, or vLLM's refusal in its words. ``--json``
writes all of it (``kind: "plan-sweep"``); ``--plot`` draws the tokens and the
maximum concurrency against the first swept argument, one line per value of
the others (matplotlib, optional). Exit 0 when at least one combination is
planned, 1 when none is, 2 for bad input.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from vllm_kv_strategies.deploy import output
from vllm_kv_strategies.deploy.errors import BadInput

#: plan's own options, which a sweep does not vary or pass on to each combination.
OWN = ("--sweep", "--plot", "--json")


def parse_sweeps(parser, specs: list[str]) -> list[tuple[str, list[str]]]:
    """``[(engine argument, its values)]`` of ``--sweep ARG=V1,V2,...``; :class:`BadInput` otherwise."""
    known = set(parser._option_string_actions)
    sweeps: list[tuple[str, list[str]]] = []
    for spec in specs:
        name, sep, listed = spec.partition("=")
        name = name.strip().removeprefix("--").replace("_", "-")
        values = [v.strip() for v in listed.split(",") if v.strip()]
        if not sep or not name or not values:
            raise BadInput(f"--sweep {spec}: give ARG=V1,V2,... (e.g. --sweep tensor-parallel-size=1,2,4,8)")
        if f"--{name}" not in known or f"--{name}" in OWN:
            raise BadInput(f"--sweep {spec}: {name} is not an engine argument of this vLLM (--help=<word> lists them)")
        if name in [n for n, _ in sweeps]:
            raise BadInput(f"--sweep {spec}: {name} is swept twice")
        sweeps.append((name, values))
    return sweeps


def _split(argv: list[str], drop: set[str]) -> tuple[list[str], list[str]]:
    """(``argv`` without the options in ``drop`` and their values, those options as given: ``--x 1`` / ``--x=1``)."""
    kept, dropped, value_next = [], [], False
    for token in argv:
        option = token.split("=", 1)[0].replace("_", "-") if token.startswith("--") else None
        if value_next:
            dropped[-1] += f" {token}"
            value_next = False
        elif option in drop:
            dropped.append(token)
            value_next = "=" not in token
        else:
            kept.append(token)
    return kept, dropped


def combination_argv(argv: list[str], sweeps: list[tuple[str, list[str]]], values: tuple[str, ...]) -> list[str]:
    """``argv`` without plan's sweep options and the swept arguments, then each swept argument's value."""
    out = _split(argv, set(OWN) | {f"--{name}" for name, _ in sweeps})[0]
    for (name, _), value in zip(sweeps, values):
        out += [f"--{name}", value]
    return out


def replaced(argv: list[str], sweeps: list[tuple[str, list[str]]]) -> list[str]:
    """The swept arguments ``argv`` also gives a value of, as given (each combination replaces them)."""
    return _split(argv, {f"--{name}" for name, _ in sweeps})[1]


def _matplotlib():
    """pyplot on the Agg backend; :class:`BadInput` where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadInput("--plot needs matplotlib, which is not installed here (pip install 'vllm-kv-strategies[plot]', "
                       "or pip install matplotlib); the table and --json need nothing more") from None
    return plt


def sweep(parser, argv: list[str], args, plan_once, progress) -> int:
    """The sweep (see the module doc); ``plan_once(argv) -> Prediction`` plans one combination,
    given as its command line."""
    start = time.monotonic()
    sweeps = parse_sweeps(parser, args.sweep)
    plt = _matplotlib() if args.plot else None
    for given in replaced(argv, sweeps):
        output.current.progress(f"plan: note: the sweep replaces {given} in each combination")
    combos = list(itertools.product(*(values for _, values in sweeps)))
    rows, first = [], None
    for i, values in enumerate(combos, 1):
        shown = ", ".join(f"{name}={value}" for (name, _), value in zip(sweeps, values))
        progress(f"sweep {i} of {len(combos)}: {shown}")
        row = {"values": dict(zip((n for n, _ in sweeps), values)), "num_blocks": None, "tokens": None,
               "max_concurrency": None, "max_model_len": None, "budget_bytes_per_worker": None, "refusal": None,
               "error": None}
        try:
            prediction = plan_once(combination_argv(argv, sweeps, values))
        except BadInput as exc:
            row["error"] = str(exc)
        else:
            first = first or prediction
            row.update(num_blocks=prediction.num_blocks, tokens=prediction.tokens,
                       max_concurrency=prediction.max_concurrency, budget_bytes_per_worker=prediction.budget.bytes,
                       refusal=prediction.refusal, max_model_len=prediction.vllm_config.model_config.max_model_len)
        rows.append(row)
    seconds = time.monotonic() - start
    output.current.answer("\n".join(table(args.model_dir, sweeps, rows, first, seconds)))
    data = {"kind": "plan-sweep", "model": args.model_dir, "platform": first.platform if first else None,
            "swept": dict(sweeps), "combinations": rows, "seconds": round(seconds, 2)}
    output.current.json(data)  # --json OUT; -: stdout
    if plt is not None:
        plt.close(plot(plt, args.plot, args.model_dir, sweeps, rows))
    return 0 if any(r["num_blocks"] for r in rows) else 1


def table(model_dir: str, sweeps, rows, first, seconds: float) -> list[str]:
    """The sweep's table; below it each refusal or error in full, by its row number."""
    names = [name for name, _ in sweeps]
    widths = [max(len(name), *(len(r["values"][name]) for r in rows)) for name in names]
    lines = [f"sweep: {model_dir}, {len(rows)} combinations of {', '.join(names)}"]
    if first is not None:
        lines += [first.platform, *(f"note: {n}" for n in first.notes if n.startswith("stand-ins"))]
    lines += ["", "  # " + " ".join(f"{n:>{w}}" for n, w in zip(names, widths))
              + f" {'num_blocks':>11} {'tokens':>12} {'max concurrency':>16}  vLLM"]
    footnotes = []
    for i, r in enumerate(rows, 1):
        cells = " ".join(f"{r['values'][n]:>{w}}" for n, w in zip(names, widths))
        said = r["refusal"] or r["error"]
        status = "planned" if not said else ("refuses (%d)" if r["refusal"] else "cannot plan (%d)") % i
        if said:
            footnotes.append(f"({i}) {said}")
        number = (lambda v, f: format(v, f) if v is not None else "-")
        lines.append(f"{i:>3} {cells} {number(r['num_blocks'], ','):>11} {number(r['tokens'], ','):>12} "
                     f"{number(r['max_concurrency'], '.2f') + ('x' if r['max_concurrency'] is not None else ''):>16}  {status}")
    if footnotes:
        lines += ["", "vLLM's words:" if any(r["refusal"] for r in rows) else "errors:", *footnotes]
    lines += ["", f"planned {len(rows)} combinations in {seconds:.1f} s"]
    return lines


def plot(plt, path: str, model_dir: str, sweeps, rows):
    """Tokens and maximum concurrency against the first swept argument, a line per value of the others;
    saved to ``path``, the figure returned open."""
    (x_name, x_values), others = sweeps[0], sweeps[1:]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for rest in itertools.product(*(values for _, values in others)) or [()]:
        label = ", ".join(f"{n}={v}" for (n, _), v in zip(others, rest)) or None
        picked = [r for r in rows if all(r["values"][n] == v for (n, _), v in zip(others, rest))]
        for ax, key in zip(axes, ("tokens", "max_concurrency")):
            points = [(x_values.index(r["values"][x_name]), r[key]) for r in picked if r[key] is not None]
            if points:
                ax.plot(*zip(*points), marker="o", label=label)
    for ax, title in zip(axes, ("KV cache size (tokens)", "maximum concurrency (x)")):
        ax.set_xticks(range(len(x_values)), x_values)
        ax.set_xlabel(x_name)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if others:
            ax.legend(fontsize=7)
    fig.suptitle(f"plan --sweep: {Path(model_dir).name} (vLLM's planner; refused combinations not drawn)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig
