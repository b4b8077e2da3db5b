"""Command line: ``vllm-kv-strategies {strategies,matrix,doctor,report,plan}`` (the same as
``python -m vllm_kv_strategies ...``).

``report`` reads files only (no torch, no vLLM); ``strategies`` and ``doctor``
import vLLM (10-30 s on a CPU) and say so on stderr first. Every subcommand that
answers takes ``--json OUT`` (``-``: stdout, the human lines then on stderr); ``-q`` /
``-v`` before the subcommand set how much is said besides the answer (:mod:`.deploy.output`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from vllm_kv_strategies._version import __version__
from vllm_kv_strategies.deploy import output
from vllm_kv_strategies.deploy.errors import BadInput


def _strategies(_: argparse.Namespace) -> int:
    output.current.progress("strategies: importing vLLM's KV cache spec classes (10-30 s on a CPU) ...")
    from vllm_kv_strategies.core.registry import default_registry

    registry, rows = default_registry(), []
    for strategy in registry.strategies():
        types = [t.__name__ for t in registry.served_types(strategy)]
        where = f"{type(strategy).__module__}.{type(strategy).__qualname__}"
        rows.append({"name": strategy.name, "class": where, "spec_types": types,
                     "matches_predicate": registry.has_predicate(strategy)})
        extra = " (with a matches() predicate)" if registry.has_predicate(strategy) else ""
        output.current.answer(f"{strategy.name:16} {where}: {', '.join(types)}{extra}")
    output.current.json({"kind": "strategies", "strategies": rows})
    return 0


def _matrix(args: argparse.Namespace) -> int:
    from vllm_kv_strategies.platforms import matrix as support
    from vllm_kv_strategies.platforms.ascend import facts as ascend_facts
    from vllm_kv_strategies.platforms.ascend import releases as ascend_releases
    from vllm_kv_strategies.platforms.upstream import facts as upstream_facts

    def patches(targets) -> list[str]:  # what auto patches there: module.attribute
        return [target.qualified(attribute) for target in targets for attribute in target.attributes]

    matrix = {
        "upstream": [{"vllm": v, "patches": patches(upstream_facts.targets(v))} for v in support.UPSTREAM_VLLM_RELEASES],
        "ascend": [
            {"vllm": v, "vllm_ascend": a, "vllm_ascend_pin": ascend_releases.CELL_PINS[a],
             "patches": patches(ascend_facts.targets(ascend_releases.CELL_PINS[a]))}
            for v, a in support.ASCEND_RELEASES
        ],
        # every vllm-ascend release on the index, and what auto does with it
        "ascend_releases": [row.as_dict() for row in ascend_releases.index_table()],
    }
    lines = [support.supported_releases()]
    for cell in matrix["ascend"]:
        lines.append(f"  vllm-ascend {cell['vllm_ascend_pin']} patches: {', '.join(cell['patches'])}")
    lines += ["\nvllm-ascend releases on the package index (auto patches 'own cell' and 'same code as cell'):",
              f"  {'vllm-ascend':14} {'vLLM':8} {'auto':32} why"]
    for row in ascend_releases.index_table():
        auto = f"{row.status} {row.cell}" if row.cell else "stock"
        lines.append(f"  {row.version:14} {row.vllm:8} {auto:32} {row.why}")
    if args.json == output.STDOUT:  # machine-readable alone: one line of JSON, as before
        print(json.dumps(matrix))
        return 0
    output.current.answer("\n".join(lines))
    output.current.json(matrix)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from vllm_kv_strategies.deploy.doctor import doctor

    return doctor(args.engine_args)


def _report(args: argparse.Namespace) -> int:
    """Exit 0: rendered; 1: ``report DIR`` flagged a rank, or a plan and a run differ; 2: a path
    is not a readable report (one line on stderr). ``--json``: the reports read and the outcome."""
    from vllm_kv_strategies.report import schema

    try:
        facts = {"kind": "report", "paths": args.paths, "reports": []}
        facts["exit"] = _render_reports(args, facts)
    except (schema.ReportError, BadInput) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    output.current.json(facts)
    return facts["exit"]


def _check_writable(flag: str, path: str | None) -> None:
    """:class:`BadInput` for an output path that cannot be written (``-``: stdout, always)."""
    from vllm_kv_strategies.deploy.inputs import check_writable

    check_writable(flag, None if path == output.STDOUT else path)


def _render_reports(args: argparse.Namespace, facts: dict) -> int:
    from vllm_kv_strategies.report import plan_file, render, schema

    say = output.current.answer

    def one(path: str) -> tuple[str, dict]:
        if not os.path.isdir(path):
            found = path, schema.load(path)
        else:
            ranks = schema.latest_per_rank(schema.load_dir(path))
            if len(ranks) != 1:
                what = "to draw" if args.plot and len(args.paths) == 1 else "on each side to compare"
                raise schema.ReportError(f"{path}: holds reports of {len(ranks)} ranks; name one rank's report file {what}")
            found = next(iter(ranks.values()))
        facts["reports"].append({"path": found[0], "report": found[1]})
        return found

    if args.budget is not None and (not args.plot or args.budget <= 0):  # the map's width
        raise schema.ReportError(f"--budget {args.budget}: a positive number of bytes, with --plot")
    if args.plot:  # before anything is read: matplotlib installed, the file writable, its format known
        from vllm_kv_strategies.report import plot

        plot.check_target(args.plot)
    plans = [p for p in args.paths if plan_file.is_plan(p)]
    if plans and (len(args.paths) != 2 or plans != args.paths[:1]):
        wrong = next((p for p in plans if p != args.paths[0]), plans[0]) if len(args.paths) == 2 else plans[0]
        what = ("a plan file too, not a run's report" if len(plans) == 2 else "a plan file, given second"
                if wrong != args.paths[0] else "a plan file (plan --json)")
        raise schema.ReportError(
            f"{wrong}: {what}; compare a plan with a run's report: report PLAN RUN_REPORT "
            "(the plan first, then one report file or a directory holding one rank)"
        )
    if args.plot and plans:
        raise schema.ReportError(f"--plot {args.plot}: draws run reports; plan --plot draws a plan's sides")
    if args.plot and len(args.paths) == 1:
        path, report = one(args.paths[0])  # a directory: its one rank's newest
        say(render.render(report, path) + "\n" + plot.plot_reports([(path, report)], args.plot, args.budget))
        return 0
    if len(args.paths) == 1 and os.path.isdir(args.paths[0]):
        items = schema.load_dir(args.paths[0])
        facts["reports"] = [{"path": path, "report": report} for path, report in items]
        text, flagged = render.deployment(args.paths[0], items)
        say(text)
        facts["flagged"] = bool(flagged)
        return 1 if flagged else 0
    if len(args.paths) == 1:
        say(render.render(one(args.paths[0])[1], args.paths[0]))
        return 0
    if len(args.paths) == 2 and plans:  # prediction against a run
        plan = plan_file.load(args.paths[0])
        facts["plan"] = plan
        (path_b, b) = one(args.paths[1])
        if not args.allow_different_models:
            plan_file.check_same_model(plan, args.paths[0], b, path_b)
        text, equal = plan_file.compare(plan, args.paths[0], b, path_b)
        say(text)
        facts["equal"] = equal
        return 0 if equal else 1
    (path_a, a), (path_b, b) = one(args.paths[0]), one(args.paths[1])
    if not args.allow_different_models:
        render.check_same_model(a, b, path_a, path_b)
    say(render.compare(a, b, path_a, path_b))
    if args.plot:
        say(plot.plot_reports([(path_a, a), (path_b, b)], args.plot, args.budget))
    return 0


#: ``--json OUT`` of every subcommand that answers.
JSON_HELP = "also write the answer as JSON to OUT; -: to stdout (the human lines then go to stderr)"


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(the command's parser, report's)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines; vLLM logs errors only")
    common.add_argument("-v", "--verbose", action="count", default=0,
                        help="vLLM's INFO lines too (-vv: DEBUG), on stderr (VLLM_LOGGING_LEVEL)")
    parser = argparse.ArgumentParser(
        prog="vllm-kv-strategies", parents=[common],
        description="vllm-kv-strategies: vLLM's KV cache built by one strategy per KV cache spec kind. "
        "Switch with KV_STRATEGIES=auto|on|off|observe. The same as python -m vllm_kv_strategies. "
        "-q / -v go before the subcommand (plan MODEL_DIR ... -q is vLLM's --quantization).",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("strategies", parents=[common], help="list the registered strategies and the spec types they serve")
    p.add_argument("--json", metavar="OUT", nargs="?", const=output.STDOUT, help=JSON_HELP + " (alone: -)")
    p.set_defaults(fn=_strategies)
    p = sub.add_parser("matrix", parents=[common], help="print the supported vLLM / vllm-ascend releases")
    p.add_argument("--json", metavar="OUT", nargs="?", const=output.STDOUT, help=JSON_HELP + " (alone: -, one line)")
    p.set_defaults(fn=_matrix)
    doctor_help = "check the installation; exit 0 when the plugin would be active"
    p = sub.add_parser(
        "doctor", parents=[common],
        help=doctor_help,
        description=f"{doctor_help}. Prints the installed vLLM, vllm-ascend, torch and torch_npu versions, "
        "whether they are in the support matrix, the runner methods the plugin replaces and whether the "
        "installed class has them, which model runner (V1 or V2 up to vLLM 0.33; 0.34 has V2 only) vLLM would build the KV cache with and "
        "whether the plugin covers it, whether vLLM loads the entry point, and what KV_STRATEGIES would do. "
        "vLLM engine options after -- (e.g. -- --model ./tiny-llama --enforce-eager) make the runner choice "
        "vLLM's own for those options; exit 2 when vLLM refuses them or --model names no local directory.",
    )
    p.add_argument("--json", metavar="OUT", help=JSON_HELP)
    p.add_argument("engine_args", nargs=argparse.REMAINDER, help="-- then vLLM engine options (optional)")
    p.set_defaults(fn=_doctor)
    p = sub.add_parser(
        "report", parents=[common],
        help="render a KV cache report (written with KV_STRATEGIES_REPORT=DIR), compare two, or sum up a directory",
        description="FILE: render one report. A B: compare two (e.g. KV_STRATEGIES=observe against on), "
        "labelled A and B; a directory holding one rank stands for its newest report. DIR: every rank's newest "
        "report in DIR and the deployment's totals; exit 1 when a rank is missing or stock built it (a fallback, or "
        "observe on some ranks only). PLAN REPORT: a plan file (plan --json) against a run's report, exit 1 when "
        "they differ. Exit 2, with one line, when a path is not a readable report. Reads files only (no torch, no vLLM).",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="FILE, A B, or DIR")
    p.add_argument("--json", metavar="OUT", help=JSON_HELP)
    p.add_argument("--allow-different-models", action="store_true", help="compare reports of two different models")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the KV cache as a memory map (two: A above B, one "
                   "scale) to FILE.png; needs matplotlib (pip install 'vllm-kv-strategies[plot]')")
    p.add_argument("--budget", type=int, metavar="BYTES", help="with --plot: the KV cache budget per worker, the "
                   "map's width, where the report does not record it (kv_cache.budget_bytes)")
    p.set_defaults(fn=_report)
    report_parser = p
    sub.add_parser("plan", add_help=False, help="how much KV cache a deployment gets, before anything starts "
                   "(plan MODEL_DIR [vLLM engine arguments] [--json OUT]; plan --help for its options)")
    return parser, report_parser


def main(argv: list[str] | None = None) -> int:
    """The command; returns its exit status (2: bad input, one line on stderr)."""
    verbosity, argv = output.peel(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plan"]:  # its arguments are vLLM's engine arguments, parsed by vLLM's own parser
        from vllm_kv_strategies.deploy.cli import run  # noqa: I001
        return run(argv[1:], verbosity)
    parser, report_parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "report" and len(args.paths) > 2:  # the report subcommand's usage, not the top level's
        report_parser.error(f"{len(args.paths)} paths given: report takes one FILE or DIR, or two reports A B to compare")
    verbosity = -1 if args.quiet or verbosity < 0 else verbosity + args.verbose
    try:
        _check_writable("--json", args.json)  # before anything is read or imported
        with output.command(verbosity, args.json):
            return args.fn(args)
    except BadInput as exc:
        print(f"{args.command}: error: {exc}", file=sys.stderr)
        return 2


def cli() -> None:
    """The ``vllm-kv-strategies`` console script and ``python -m vllm_kv_strategies``: :func:`main`,
    its status as the exit status; a reader that leaves (``report DIR | head``) ends it quietly."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # no traceback, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    cli()
