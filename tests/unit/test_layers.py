"""The package's import graph goes one way (CONTRIBUTING.md, "Where things live"):
a core that knows no platform, the report below the platforms, each platform
in its own package (``platforms/ascend``, ``platforms/upstream``) that never
imports the other, the platform interface above both, the CLI on top; no
import cycle between modules; no module over ~300 lines."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import vllm_kv_strategies

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import layout_metrics  # noqa: E402  (the repository's graph reader: tools/layout_metrics.py)

PACKAGE = Path(vllm_kv_strategies.__file__).parent
ROOT = PACKAGE.name
#: Layer of each unit (see :func:`unit`); a module may import its own unit or lower layers only.
LAYERS = {
    "_version": 0, "errors": 0, "logger": 0, "envs": 0, "versions": 0,
    "patching": 1,
    "core": 2, "strategies": 2,  # strategies, registry, plan, the strided byte-range model; the public names
    "report": 3,
    "deploy": 4,  # plan's engine: budgets, the model on meta, vLLM's planner
    "platforms.base": 5,  # PatchTarget, the base adapter, install / restore, fingerprints
    "platforms.ascend": 6, "platforms.upstream": 6,
    "platforms": 7,  # the interface: targets / install / uninstall per platform, the support matrix
    "__init__": 8, "distributed": 8, "deploy.front": 8,  # register(); plan's command line
    "__main__": 9,
}
PLATFORM_BASE = {"adapter", "targets", "fingerprint", "install"}
DEPLOY_FRONT = {"cli", "sweep", "render", "doctor"}
#: Units whose modules import no platform's own package (vllm-ascend, torch_npu); the plugin's
#: platform packages they never import either (checked by layer).
PLATFORM_FREE = ("core",)
MAX_LINES = 320


def unit(path: Path, root: Path = PACKAGE) -> str:
    """The unit (a key of :data:`LAYERS`) a file belongs to."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[0] == "platforms":
        if len(parts) > 2 or (len(parts) == 2 and parts[1] in ("ascend", "upstream")):
            return f"platforms.{parts[1]}"
        return "platforms.base" if parts[-1] in PLATFORM_BASE else "platforms"
    if parts[0] == "deploy":
        return "deploy.front" if parts[-1] in DEPLOY_FRONT else "deploy"
    return parts[0]


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under ``root``."""
    return {name: Path(path) for name, path in layout_metrics.find_modules(str(root.parent)).items()}


def external_imports(path: Path) -> set[str]:
    """Top-level names of the distributions a module imports (``vllm``, ``vllm_ascend``, ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its file (also inside
    functions; relative imports resolved): ``tools/layout_metrics.py``'s reading."""
    paths = layout_metrics.find_modules(str(root.parent))
    return {name: layout_metrics.imports_of(name, path, paths) for name, path in paths.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module."""
    return [component for component in layout_metrics.sccs(edges) if len(component) > 1]


def units_of() -> dict[str, str]:
    return {name: unit(path) for name, path in modules().items()}


def test_every_unit_has_a_layer():
    assert {unit(p) for p in modules().values()} <= set(LAYERS), {unit(p) for p in modules().values()} - set(LAYERS)


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_no_module_imports_a_layer_above_its_own():
    edges, of = graph(), units_of()
    upward = sorted(f"{m} ({of[m]}) imports {t} ({of[t]})" for m, targets in edges.items() for t in targets
                    if LAYERS[of[t]] > LAYERS[of[m]])
    assert upward == []


def test_the_platform_packages_never_import_each_other():
    edges, of = graph(), units_of()
    crossing = sorted(f"{m} imports {t}" for m, targets in edges.items() for t in targets
                      if {of[m], of[t]} == {"platforms.ascend", "platforms.upstream"})
    assert crossing == []


def test_the_core_knows_no_platform():
    """No core module imports a platform package of the plugin (checked above by layer) or
    vllm-ascend / torch_npu (a platform's spec classes are looked up in the module
    ``versions.PLATFORM_SPEC_MODULES`` names)."""
    found = {name: hits for name, path in modules().items()
             if unit(path) in PLATFORM_FREE and (hits := external_imports(path) & {"vllm_ascend", "torch_npu"})}
    assert found == {}


#: The modules that may compare release versions: the per-release tables and the support matrix.
VERSION_TABLES = {"platforms/matrix.py", "platforms/ascend/releases.py", "platforms/ascend/runner_releases.py"}


def version_comparisons(source: str) -> list[str]:
    """What in ``source`` compares release versions: packaging's ``Version(...)`` (by name or
    attribute), and a comparison with a version string (``== "0.23.0"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "Version":
            found.append("Version")
        elif isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Constant) and isinstance(side.value, str) and re.fullmatch(r"\d+\.\d+(\.\d+)?\S*", side.value)
                for side in (node.left, *node.comparators)):
            found.append("a version string")
    return found


def test_no_platform_or_core_module_branches_on_a_version_number():
    """A release's behaviour is a row of its platform's table (CONTRIBUTING.md: a new release is a
    row, not a branch): outside :data:`VERSION_TABLES` no core or platform module compares versions."""
    found = {rel: hits for p in modules().values()
             if (rel := p.relative_to(PACKAGE).as_posix()) not in VERSION_TABLES and rel.split("/")[0] in ("core", "platforms")
             and (hits := version_comparisons(p.read_text()))}
    assert found == {}
    assert sorted(version_comparisons("from packaging.version import Version\nif Version(v) < Version('0.13.0'): pass\n"
                                      "import packaging.version as pv\npv.Version(v)\nok = base == '0.23.0'\n"
                                      "ok = v.startswith('0.2') or name == 'ascend'\n")) == [
        "Version", "Version", "Version", "a version string"]


def test_no_module_is_over_about_300_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checker_sees_upward_imports_and_cycles(tmp_path):
    """The proof: relative and absolute imports (also inside a function) are found, a
    strategy importing an Ascend runner is an upward import, and a two-module loop a cycle."""
    root = tmp_path / ROOT
    for rel, text in {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/probe.py": "from ..platforms.ascend import runner\nfrom .. import report\n"
                         f"def f():\n    import {ROOT}.core.plan\n",
        "core/plan.py": f"from {ROOT}.core import probe\n",
        "report/__init__.py": "",
        "platforms/__init__.py": "",
        "platforms/ascend/__init__.py": "",
        "platforms/ascend/runner.py": "",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    edges = graph(root)
    assert edges[f"{ROOT}.core.probe"] == {f"{ROOT}.platforms.ascend.runner", f"{ROOT}.report", f"{ROOT}.core.plan"}
    assert unit(root / "platforms/ascend/runner.py", root) == "platforms.ascend"
    assert LAYERS[unit(root / "platforms/ascend/runner.py", root)] > LAYERS[unit(root / "core/probe.py", root)]
    assert cycles(edges) == [[f"{ROOT}.core.plan", f"{ROOT}.core.probe"]]
