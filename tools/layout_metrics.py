"""The package's import graph (modules, layers, cycles) and the path of an Ascend KV cache init.

Static mode (default, any Python 3.11, stdlib only):

    python tools/layout_metrics.py [--src DIR] [--json OUT]

DIR is the directory that holds the ``vllm_kv_strategies`` package (default: this checkout's
``plugin``). Definitions:

* module: every ``.py`` file under the package, named dotted (``pkg/__init__.py`` is ``pkg``).
* edge: an ``import vllm_kv_strategies...`` or ``from vllm_kv_strategies... import name``
  anywhere in a file (also inside functions and ``if TYPE_CHECKING:``), relative imports
  resolved. ``from a.b import c`` is an edge to ``a.b.c`` where that is a module, else to the
  longest existing module prefix of ``a.b``. Self-edges are dropped; edges are counted distinct.
* lines: lines of the files, as ``wc -l`` counts them.
* cycles: strongly connected components of more than one module.
* layers: with each SCC condensed into one node, layer(m) = 0 if m imports no package module
  (outside its SCC), else 1 + the largest layer of what it imports; ``layers`` = max + 1.
* units: a module's first component under the package (``deploy``), and for ``platforms``
  its first two (``platforms.ascend``); ``<root>`` is the package's ``__init__``.

Trace mode (run with an Ascend cell's Python, e.g. ``.nox/ascend-0-30-0/bin/python``):

    python tools/layout_metrics.py --trace [--src DIR] [--json OUT]

imports DIR/../benchmarks/ascend_memory.py (DIR first on sys.path, so that checkout's package is
the one imported) and, for DeepSeek-V3 and Qwen3-Next, builds a runner and a kv_cache_config as
that benchmark's init-time table does, runs its ``plugin(runner, config)`` once untraced (warm-up),
then once more on a fresh runner and config under ``sys.setprofile``, recording 'call' events whose
code lives in the package. Two views of the called frames' modules:

* a) every call;
* b) config frames: calls whose frame holds the kv_cache_config object (``is``) among its locals
  at call time: the config's own path through the package.

Each view's sequence is collapsed (consecutive repeats of a module are one pass), then
``modules`` = distinct modules, ``passes`` = length of the collapsed sequence, ``climbs`` = passes
entering a module of a higher static layer than the previous pass's module (going back up the
import layers), ``returns`` = passes entering a module seen earlier in the collapsed sequence,
other than the immediately previous one. ``calls`` is the uncollapsed count. ``up-calls`` counts
calls (uncollapsed) whose caller is a package module of a lower static layer than the callee's: a
call that really goes up the import graph (a callback; a base class's method calling a subclass's);
a climb without one is the caller asking modules of two layers below it in turn.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys

PKG = "vllm_kv_strategies"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- static analysis

def find_modules(src: str) -> dict[str, str]:
    """Dotted module name -> path of every .py file under ``src/PKG``."""
    modules = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(src, PKG)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                parts = os.path.relpath(path, src)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = path
    return modules


def resolve(name: str, modules) -> str | None:
    """The longest existing module prefix of a dotted name (None outside the package)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def imports_of(module: str, path: str, modules) -> set[str]:
    """The package modules that ``module`` imports anywhere in its file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_pkg = os.path.basename(path) == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(resolve(a.name, modules) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package, level - 1 up
                package = module.split(".") if is_pkg else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                found.add(full if full in modules else resolve(base, modules))
    found.discard(None)
    found.discard(module)
    return found


def sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each after those it imports."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def unit_of(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "<root>"
    return ".".join(parts[:2]) if parts[0] == "platforms" and len(parts) > 1 else parts[0]


def analyse(src: str) -> dict:
    paths = find_modules(src)
    if not paths:
        sys.exit(f"no {PKG} package under {src}")
    graph = {m: imports_of(m, p, paths) for m, p in paths.items()}
    lines = {}
    for m, p in paths.items():
        with open(p, "rb") as f:
            lines[m] = f.read().count(b"\n")
    layer = {}
    comps = sccs(graph)
    for comp in comps:  # Tarjan emits a component after every component it reaches
        outside = {w for v in comp for w in graph[v]} - set(comp)
        value = 1 + max(layer[w] for w in outside) if outside else 0
        layer.update((v, value) for v in comp)
    units = {}
    for m in paths:
        u = units.setdefault(unit_of(m), {"modules": 0, "lines": 0})
        u["modules"] += 1
        u["lines"] += lines[m]
    return {
        "src": os.path.abspath(src),
        "modules": len(paths),
        "edges": sum(len(v) for v in graph.values()),
        "lines": sum(lines.values()),
        "cycles": [c for c in comps if len(c) > 1],
        "layers": max(layer.values()) + 1,
        "units": dict(sorted(units.items())),
        "per_module": {m: {"layer": layer[m], "lines": lines[m], "imports": sorted(graph[m])} for m in sorted(paths)},
    }


def short(module: str) -> str:
    return module[len(PKG) + 1:] if module.startswith(PKG + ".") else module


def print_static(s: dict) -> None:
    print(f"package {PKG} under {s['src']}")
    print(f"modules {s['modules']}, import edges {s['edges']}, lines {s['lines']:,}, "
          f"layers {s['layers']}, cycles {len(s['cycles'])}")
    for i, comp in enumerate(s["cycles"], 1):
        print(f"  cycle {i} ({len(comp)}): {', '.join(short(m) for m in comp)}")
    print("| unit | modules | lines |")
    print("|---|---|---|")
    for unit, u in s["units"].items():
        print(f"| {unit} | {u['modules']} | {u['lines']:,} |")


# ---------------------------------------------------------------- trace

def path_metrics(seq: list[str], layer: dict[str, int]) -> dict:
    """Collapse consecutive repeats, then count modules, passes, climbs and returns."""
    passes = [m for i, m in enumerate(seq) if i == 0 or m != seq[i - 1]]
    climbs = returns = 0
    for i in range(1, len(passes)):
        if layer[passes[i]] > layer[passes[i - 1]]:
            climbs += 1
        if passes[i] in passes[: i - 1]:
            returns += 1
    return {"calls": len(seq), "modules": len(set(passes)), "passes": len(passes),
            "climbs": climbs, "returns": returns, "sequence": passes}


def trace(src: str, static: dict) -> dict:
    import copy
    import importlib.util

    src = os.path.abspath(src)
    sys.path.insert(0, src)
    bench_path = os.path.join(os.path.dirname(src), "benchmarks", "ascend_memory.py")
    spec = importlib.util.spec_from_file_location("ascend_memory", bench_path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    pkg_file = os.path.realpath(sys.modules[PKG].__file__)
    if not pkg_file.startswith(os.path.realpath(src) + os.sep):
        sys.exit(f"{PKG} was imported from {pkg_file}, not from {src}")

    by_file = {os.path.realpath(os.path.join(src, *m.split(".")) + ".py"): m for m in static["per_module"]}
    by_file.update({os.path.realpath(os.path.join(src, *m.split("."), "__init__.py")): m for m in static["per_module"]})
    layer = {m: v["layer"] for m, v in static["per_module"].items()}
    # as the benchmark's init-time table: DeepSeek-V3 with 64 blocks, Qwen3-Next TP4 with 16, plugin-sized
    results = {}
    for name, blocks in (("DeepSeek-V3", 64), ("Qwen3-Next-80B-A3B TP4", 16)):
        model = bench.MODELS[name](blocks, True)
        try:  # warm-up: imports, caches
            bench.plugin(model.make_runner(), copy.deepcopy(model.kv_cache_config))
        except bench.KVStrategiesError:
            pass  # refused by name: the traced run reports it
        every, with_config, outcome = traced_init(bench, model, by_file)
        results[name] = {"outcome": outcome}
        for view, calls in (("every_call", every), ("config_frames", with_config)):
            results[name][view] = path_metrics([callee for callee, _ in calls], layer)
            results[name][view]["up_calls"] = sum(
                1 for callee, caller in calls if caller is not None and layer[callee] > layer[caller])
    return results


def traced_init(bench, model, by_file: dict[str, str]) -> tuple[list[tuple], list[tuple], str]:
    """One plugin init on a fresh runner and config under sys.setprofile: (callee, caller) package
    modules of every call (caller None outside the package), of the calls whose frame holds the
    config, and how the init ended."""
    import copy

    runner, config = model.make_runner(), copy.deepcopy(model.kv_cache_config)
    every, with_config, modules = [], [], {}

    def module_of(f: str) -> str | None:
        if f not in modules:
            modules[f] = by_file.get(os.path.realpath(f))
        return modules[f]

    def profile(frame, event, arg):
        if event != "call":
            return
        module = module_of(frame.f_code.co_filename)
        if module is None:
            return
        caller = module_of(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
        every.append((module, caller))
        if any(v is config for v in frame.f_locals.values()):
            with_config.append((module, caller))

    outcome = "ok"
    sys.setprofile(profile)
    try:
        bench.plugin(runner, config)
    except bench.KVStrategiesError as exc:  # a refusal still has a path: report it
        outcome = f"refused: {str(exc)[:200]}"
    finally:
        sys.setprofile(None)
    return every, with_config, outcome


def print_trace(results: dict) -> None:
    for name, r in results.items():
        print(f"\n{name}: {r['outcome']}")
        for view, label in (("every_call", "a) every call"), ("config_frames", "b) config frames")):
            v = r[view]
            print(f"  {label}: modules {v['modules']}, passes {v['passes']:,}, climbs {v['climbs']:,}, "
                  f"returns {v['returns']:,}, up-calls {v['up_calls']:,} (calls {v['calls']:,})")
        print("  b) path: " + " > ".join(short(m) for m in r["config_frames"]["sequence"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", metavar="DIR", default=os.path.join(REPO, "plugin"),
                    help=f"directory holding the {PKG} package (default: %(default)s)")
    ap.add_argument("--trace", action="store_true",
                    help="also trace the plugin's Ascend KV cache init (DeepSeek-V3, Qwen3-Next) through "
                         "DIR/../benchmarks/ascend_memory.py; run with an Ascend cell's Python")
    ap.add_argument("--json", metavar="OUT", help="also write everything (per-module layers included) here")
    args = ap.parse_args()
    static = analyse(args.src)
    print_static(static)
    out = {"static": static}
    if args.trace:
        out["trace"] = trace(args.src, static)
        print_trace(out["trace"])
        for r in out["trace"].values():  # view a's sequence is long: JSON keeps its counts
            del r["every_call"]["sequence"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
