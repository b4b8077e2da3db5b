"""What README.md, CONTRIBUTING.md and docs/ say about this repository, checked against it
(tests/docs/claims.py reads the claims; the docs session runs this module):

* every repository path they name exists, and every entry of the source layout they draw;
* every cell and nox session they name is one the noxfile has (``tools/nox.sh -l``: the cells come
  from the package's support matrix, so a new release's cell needs no change here), a session
  said to be "not in CI" is not a default one, and a table row that names cells and the test
  directories they run names only directories the noxfile's cell runs (its description);
* every command of this repository they show in a bash block answers ``--help`` (with the
  environment it names, ``.nox/<env>/bin/python``, where that is built; a command that needs vLLM or
  vllm-ascend with a built cell's interpreter, ``.nox/<cell>/bin/python``, or
  ``$KV_DOCS_NOX/<cell>/bin/python``; skipped, saying so, when no such cell is built here);
* every section that states a time or a disk size also states the date and the machine.

The ``*_fails_*`` tests feed the same checks a changed document or repository and see them fail.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import claims  # noqa: E402

DOCS = claims.documents()
COMMANDS = claims.commands(DOCS)
NOX_DIR = Path(os.environ.get("KV_DOCS_NOX", claims.ROOT / ".nox"))


@pytest.fixture(scope="module")
def nox_list() -> list[tuple[str, bool, str]]:
    return claims.nox_list()


@pytest.fixture(scope="module")
def sessions(nox_list) -> dict[str, bool]:
    return {name: default for name, default, _ in nox_list}


@pytest.fixture(scope="module")
def descriptions(nox_list) -> dict[str, str]:
    return {name: description for name, _, description in nox_list}


def test_readme_is_short():
    assert len(DOCS["README.md"].splitlines()) <= 250


def test_named_paths_exist():
    assert claims.path_problems(DOCS) == []


def test_source_layout_lists_what_is_there():
    assert claims.tree_problems(DOCS) == []


def test_named_cells_and_sessions_exist(sessions):
    assert claims.session_problems(DOCS, sessions) == []


def test_cells_run_the_tests_the_docs_say(descriptions):
    assert claims.table_problems(DOCS, descriptions) == []


def test_figures_are_dated_with_the_machine():
    assert claims.figure_problems(DOCS) == []


def test_commands_are_found():
    # The README's two commands and the package's own; a parser that finds nothing checks nothing.
    assert {("bash", "tools/demo.sh"), ("bash", "tools/test.sh")} <= set(COMMANDS)
    assert any(c[1:3] == ("-m", "vllm_kv_strategies") for c in COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=[" ".join(c) for c in sorted(COMMANDS)])
def test_command_answers_help(command):
    named = NOX_DIR / Path(command[0]).relative_to(".nox") if command[0].startswith(".nox/") else None
    # the environment the docs name where it is built (else the cells', as for a command that needs vLLM)
    pythons = [named if named is not None and named.exists() else Path(sys.executable)]
    proc = claims.run_help(command, str(pythons[0]))
    missing = re.search(r"No module named '([\w.]+)'|No package metadata was found for ([\w.-]+)", proc.stdout + proc.stderr)
    if proc.returncode != 0 and missing and pythons[0] != named:  # needs vLLM, vllm-ascend or torch
        cells = claims.cell_pythons(NOX_DIR)
        if not cells:
            pytest.skip(f"needs {missing[1] or missing[2]}, and no cell environment is built under {NOX_DIR}")
        for python in cells:
            pythons.append(python)
            proc = claims.run_help(command, str(python))
            if proc.returncode == 0:
                break
    tried = [str(p) for p in pythons]
    assert proc.returncode == 0, f"{' '.join(command)} --help (shown in {COMMANDS[command]}), tried {tried}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert (proc.stdout + proc.stderr).strip(), "no help text"


# -- the checks fail where the documents and the repository part ---------------------------------


def test_a_removed_path_fails(tmp_path):
    shutil.copytree(claims.ROOT / "docs", tmp_path / "docs")
    for name in ("README.md", "CONTRIBUTING.md", "noxfile.py", "mkdocs.yml", "entry_points.toml", "pyproject.toml"):
        shutil.copy(claims.ROOT / name, tmp_path / name)
    for top in ("tools", "plugin", "tests", "benchmarks", "requirements", ".ci"):
        shutil.copytree(claims.ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    assert claims.path_problems(claims.documents(tmp_path), tmp_path) == []
    (tmp_path / "tools" / "install_in_ascend_image.sh").unlink()
    (tmp_path / "plugin" / "vllm_kv_strategies" / "platforms" / "matrix.py").unlink()
    problems = claims.path_problems(claims.documents(tmp_path), tmp_path)
    assert any("'tools/install_in_ascend_image.sh'" in p for p in problems), problems
    assert any("platforms/matrix.py" in p for p in problems), problems
    # the trees list it inside platforms/ (a nested entry), and the file its description names
    tree = claims.tree_problems(claims.documents(tmp_path), tmp_path)
    assert any("'platforms/matrix.py'" in p for p in tree), tree
    (tmp_path / "plugin" / "vllm_kv_strategies" / "platforms" / "ascend" / "allocate.py").unlink()
    assert any("'platforms/ascend/allocate.py'" in p for p in claims.tree_problems(claims.documents(tmp_path), tmp_path))
    shutil.rmtree(tmp_path / "plugin" / "vllm_kv_strategies" / "deploy")
    assert any("'deploy/'" in p for p in claims.tree_problems(claims.documents(tmp_path), tmp_path))


def test_a_removed_or_renamed_session_fails(sessions):
    cell = next(name for name, default in sessions.items() if default and name.startswith("ascend-"))
    gone = {k: v for k, v in sessions.items() if k not in (cell, "distributed")}
    problems = claims.session_problems(DOCS, gone)
    assert any(f"{cell!r}" in p for p in problems), problems
    assert any("'distributed'" in p for p in problems), problems
    # a session the docs call "not in CI" that became a default one
    problems = claims.session_problems(DOCS, {**sessions, "distributed": True})
    assert any("`tools/nox.sh -s distributed` is not in CI" in p for p in problems), problems
    # a stale cell name, and a .nox environment of no session
    assert claims.session_problems({"x.md": "run `upstream-0.1.0` in `.nox/ascend-0-1-0`"}, sessions) == [
        f"x.md: names the cell or session 'ascend-0-1-0'; the noxfile has {sorted(sessions)}",
        f"x.md: names the cell or session 'upstream-0.1.0'; the noxfile has {sorted(sessions)}",
    ]


def test_a_cell_said_to_run_tests_it_does_not_run_fails(descriptions):
    cell = next(name for name, description in descriptions.items() if name.startswith("upstream-") and "tests/e2e" not in description)
    row = {"x.md": f"| cell | tests |\n|---|---|\n| `{cell}` | `tests/unit`, `tests/e2e` (pipeline parallel) |\n"}
    assert claims.table_problems(row, descriptions) == [
        f"x.md: says `{cell}` runs tests/e2e; the noxfile's cell runs: {descriptions[cell]}"
    ]


def test_an_undated_figure_fails():
    undated = {"x.md": "# Speed\n\nThe cell takes 6.2 min on this machine.\n"}
    assert claims.figure_problems(undated) == ["x.md: section 'Speed' states ['6.2 min'] without the date and machine (cores) they were measured on"]
    dated = {"x.md": "# Speed\n\nThe cell took 6.2 min (2026-12-04, 2 cores).\n"}
    assert claims.figure_problems(dated) == []
