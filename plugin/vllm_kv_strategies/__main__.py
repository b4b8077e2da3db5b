"""Command line: ``python -m vllm_kv_strategies {strategies,matrix,doctor}``."""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__, compat


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


def _doctor(_: argparse.Namespace) -> int:
    import os
    from importlib.metadata import entry_points

    from . import envs

    installed = compat.Installed.detect()
    print(f"vllm-kv-strategies {__version__}")
    for name in ("vllm", "vllm_ascend", "torch", "torch_npu"):
        print(f"  {name:12} {getattr(installed, name) or 'not installed'}")
    print(f"platform: {installed.platform}; in support matrix: {'yes' if installed.supported else 'no'} ({compat.supported_releases()})")
    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "kv_strategies"]
    allowed = os.environ.get("VLLM_PLUGINS")
    visible = bool(eps) and (allowed is None or "kv_strategies" in allowed.split(","))
    print(f"entry point kv_strategies: {'visible to vLLM' if visible else 'NOT loaded by vLLM'}" + (f" (VLLM_PLUGINS={allowed!r})" if allowed is not None else ""))
    try:
        mode = envs.KV_STRATEGIES
    except ValueError as exc:
        print(exc)
        return 1
    active = visible and mode != "off" and (mode == "on" or installed.supported)
    print(f"KV_STRATEGIES={mode}: the plugin would {'patch the runner' if active else 'leave vLLM stock'}")
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
    sub.add_parser("doctor", help="check the installation; exit 0 when the plugin would be active").set_defaults(fn=_doctor)
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
