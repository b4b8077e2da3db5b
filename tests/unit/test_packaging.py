"""The distributions users get: the sdist carries what its scripts and tests
need, the wheel the report schema and the licence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import vllm_kv_strategies

ROOT = Path(__file__).resolve().parents[2]
#: Directories whose every file the sdist ships (scripts, tests, pins, benchmarks).
SHIPPED_DIRS = ("plugin", "tests", "tools", "benchmarks", "requirements", ".ci", "docs")
SHIPPED_FILES = ("noxfile.py", "mkdocs.yml", "pyproject.toml", "entry_points.toml", "README.md", "CHANGELOG.md",
                 "CONTRIBUTING.md", "LICENSE")


def source_files() -> set[str]:
    files = set(SHIPPED_FILES)
    for top in SHIPPED_DIRS:
        for dirpath, dirnames, filenames in os.walk(ROOT / top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            files |= {str((Path(dirpath) / f).relative_to(ROOT)) for f in filenames if not f.endswith(".pyc")}
    return files


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[Path, Path]:
    """The sdist built from this checkout, and the wheel built from that sdist
    (what `python -m build` does), without isolation: hatchling from the pins."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [sdist], [wheel] = out.glob("*.tar.gz"), out.glob("*.whl")
    return sdist, wheel


def test_sdist_ships_what_its_scripts_and_tests_need(dists):
    sdist, _ = dists
    prefix = f"vllm_kv_strategies-{vllm_kv_strategies.__version__}/"
    with tarfile.open(sdist) as tf:
        names = {n.removeprefix(prefix) for n in tf.getnames() if n.startswith(prefix)}
    missing = source_files() - names - {"PKG-INFO"}
    assert not missing, f"not in the sdist: {sorted(missing)}"
    # The scripts' own needs, named: the nox cells' pins, nox's pins, the cell checker.
    assert {"noxfile.py", "requirements/nox.txt", "requirements/upstream-0.32.0.txt", "tools/cell_env.py", ".ci/run"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_wheel_ships_the_report_schema_and_the_licence(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "vllm_kv_strategies/report/kv_cache_report.schema.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0\n" in metadata and "License-File: LICENSE\n" in metadata


def test_licence_file_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_no_developer_machine_paths_in_the_sources():
    import re

    local = re.compile("/" + "(work|root|home/[a-z])" + "/")  # spelled apart so this file passes
    # tests/deploy/startup_logs quotes public logs line for line: their paths are their authors' machines'
    found = [f for f in sorted(source_files()) if not f.endswith((".whl", ".gz"))
             and not f.startswith("tests/deploy/startup_logs/")
             and local.search((ROOT / f).read_text(errors="replace"))]
    assert not found, f"paths of a developer's machine in: {found}"


#: The command line's console script, as pyproject.toml declares it.
SCRIPT = ("vllm-kv-strategies", "vllm_kv_strategies.__main__:cli")


def test_the_command_is_declared_and_is_python_m_s_main(monkeypatch, capsys):
    """``vllm-kv-strategies`` resolves to the function ``python -m vllm_kv_strategies`` runs, which
    exits with :func:`main`'s status."""
    import tomllib
    from importlib.metadata import EntryPoint

    from vllm_kv_strategies import __main__ as command

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == dict([SCRIPT])
    entry = EntryPoint(name=SCRIPT[0], value=scripts[SCRIPT[0]], group="console_scripts").load()
    assert entry is command.cli
    assert "\n    cli()\n" in Path(command.__file__).read_text().split('if __name__ == "__main__":')[1] + "\n"
    monkeypatch.setattr(sys, "argv", [SCRIPT[0], "matrix", "--json", "-"])
    with pytest.raises(SystemExit) as exited:
        entry()
    assert exited.value.code == 0
    assert command.main(["matrix", "--json", "-"]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == second and json.loads(first)["upstream"]


def test_the_wheel_installs_the_command(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        entry_points = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert f"[console_scripts]\n{SCRIPT[0]} = {SCRIPT[1]}\n" in entry_points
    assert "[vllm.general_plugins]\nkv_strategies = vllm_kv_strategies:register\n" in entry_points
