"""The package's import graph goes one way: release facts and strategies below
planning, layout below the adapters that patch runners, nothing importing a
module above it (no import back up the layers), no module over ~300 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_kv_strategies

PACKAGE = Path(vllm_kv_strategies.__file__).parent
#: Layer of each top-level module or subpackage; a module may import its own
#: layer or lower ones only.
LAYERS = {
    "_version": 0, "errors": 0, "logger": 0, "envs": 0,
    "compat": 1, "patching": 1,
    "strategies": 2,
    "registry": 3,
    "plan": 4,
    "layout": 5, "report": 5,
    "adapters": 6,
    "__init__": 7, "distributed": 7, "deploy": 7,
    "__main__": 8,
}
MAX_LINES = 320


def unit(path: Path) -> str:
    """The top-level module or subpackage a file belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported_units(path: Path, root: Path = PACKAGE) -> set[str]:
    """The package's units a module imports (relative or absolute imports)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                up = node.level - 1
                parts = list(path.relative_to(root).parts[:-1])
                base = parts[: len(parts) - up] if up <= len(parts) else None
                if base is None:
                    continue
                target = [*base, *(node.module.split(".") if node.module else [])]
                if target:
                    found.add(target[0])
                else:  # "from .. import x" at the top: each name is a unit
                    found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("vllm_kv_strategies"):
                parts = node.module.split(".")[1:]
                found.update([parts[0]] if parts else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("vllm_kv_strategies."):
                    found.add(alias.name.split(".")[1])
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_unit_has_a_layer():
    assert {unit(p) for p in modules()} <= set(LAYERS), {unit(p) for p in modules()} - set(LAYERS)


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{p.relative_to(PACKAGE)} imports {u}"
        for p in modules()
        for u in imported_units(p)
        if u in LAYERS and LAYERS[u] > LAYERS[unit(p)]
    ]
    assert upward == []


def test_strategies_and_layout_never_import_adapters_or_patching():
    for p in modules():
        if unit(p) in ("strategies", "layout", "compat", "plan", "registry"):
            assert not imported_units(p) & {"adapters", "patching", "__init__"}, p


def test_no_module_is_over_about_300_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checker_sees_upward_imports(tmp_path):
    """The proof: relative and absolute imports of an adapter from a strategy are found."""
    fake = tmp_path / "strategies" / "probe.py"
    fake.parent.mkdir()
    fake.write_text("from ..adapters import base\nfrom .. import report\nimport vllm_kv_strategies.plan\n")
    assert imported_units(fake, tmp_path) == {"adapters", "report", "plan"}
