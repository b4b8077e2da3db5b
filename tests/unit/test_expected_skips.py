"""``tests/conftest.py``: a module that skips whole in a cell must be declared for that cell in
``tests/expected_skips.toml``, and a declared module must skip; run on a copy of the hook in a
scratch tree, in a fresh pytest each time. Also: the repository's file is well formed and
names only modules that exist and cells of the matrix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def run_cell(tmp_path: Path, declared: str, cell: str = "cell-x") -> subprocess.CompletedProcess:
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (tests / "expected_skips.toml").write_text(declared)
    (tests / "test_skips_whole.py").write_text(
        'import pytest\npytest.importorskip("no_such_module_anywhere", reason="absent here")\n'
        "def test_a():\n    pass\n")
    (tests / "test_each_skips.py").write_text(
        'import pytest\n@pytest.mark.skip(reason="one")\ndef test_a():\n    pass\n'
        '@pytest.mark.skip(reason="two")\ndef test_b():\n    pass\n')
    (tests / "test_runs.py").write_text('import pytest\ndef test_a():\n    pass\n@pytest.mark.skip(reason="r")\ndef test_b():\n    pass\n')
    env = {**os.environ, "KV_TEST_CELL": cell}
    return subprocess.run([sys.executable, "-m", "pytest", str(tests), "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_an_undeclared_whole_module_skip_fails_the_cell(tmp_path):
    proc = run_cell(tmp_path, '["cell-x"]\n"tests/test_skips_whole.py" = "absent here"\n')
    assert proc.returncode == 1, proc.stdout
    assert ('FAILED tests/test_each_skips.py skipped whole in cell-x but expected_skips.toml does not declare it: add '
            '"tests/test_each_skips.py" = "<why it cannot run in cell-x>" under ["cell-x"], or make it run') in proc.stdout
    assert "test_skips_whole.py skipped whole" not in proc.stdout and "test_runs.py" not in proc.stdout.split("modules skipped")[-1]


def test_declared_skips_pass_and_a_declared_module_that_runs_fails(tmp_path):
    both = '["cell-x"]\n"tests/test_skips_whole.py" = "absent here"\n"tests/test_each_skips.py" = "each case elsewhere"\n'
    proc = run_cell(tmp_path, both)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 4 skipped" in proc.stdout
    proc = run_cell(tmp_path, both + '"tests/test_runs.py" = "stale"\n')
    assert proc.returncode == 1, proc.stdout
    assert ("FAILED tests/test_runs.py is declared to skip whole in cell-x (stale) but ran tests: remove it from "
            "expected_skips.toml") in proc.stdout


def test_without_a_cell_nothing_is_checked(tmp_path):
    proc = run_cell(tmp_path, "", cell="")
    assert proc.returncode == 0, proc.stdout


def test_the_repositorys_declarations_name_existing_modules_and_cells_with_reasons():
    table = tomllib.loads((TESTS / "expected_skips.toml").read_text())
    from vllm_kv_strategies.platforms.matrix import ASCEND_RELEASES, UPSTREAM_VLLM_RELEASES

    cells = {f"upstream-{v}" for v in UPSTREAM_VLLM_RELEASES} | {f"ascend-{a}" for _, a in ASCEND_RELEASES}
    assert set(table) == cells
    for cell, modules in table.items():
        for module, reason in modules.items():
            assert (TESTS.parent / module).is_file(), (cell, module)
            assert isinstance(reason, str) and len(reason) > 10, (cell, module)


def test_the_0_34_cell_runs_every_unit_module():
    """0.34 (no Model Runner V1) runs every tests/unit module; 0.33 and before skip only the
    resizable KV cache's, new in 0.34, and plan without V1 (tests/deploy plans there)."""
    table = tomllib.loads((TESTS / "expected_skips.toml").read_text())
    assert table["upstream-0.34.0"] == {}
    assert sorted(table["upstream-0.33.0"]) == ["tests/unit/test_plan_without_v1.py", "tests/unit/test_resizable_upstream.py"]
