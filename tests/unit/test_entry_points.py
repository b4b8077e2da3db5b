"""``entry_points.toml`` is the one source of the package's entry points.

The build reads it through a hatchling metadata hook; if ``entry-points``
were missing from ``project.dynamic`` hatchling would silently build a wheel
without ``entry_points.txt`` and vLLM would never load the plugin. So the
TOML is compared with the installed distribution and with a freshly built
wheel.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest

import vllm_kv_strategies
from vllm_kv_strategies.core.registry import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[2]
DIST = "vllm-kv-strategies"


def toml_entry_points() -> dict[str, dict[str, str]]:
    with open(ROOT / "entry_points.toml", "rb") as f:
        return tomllib.load(f)["entry-points"]


def declared() -> set[tuple[str, str, str]]:
    """(group, name, value) of every entry point the TOML declares."""
    return {(g, n, v) for g, eps in toml_entry_points().items() for n, v in eps.items()}


def test_toml_declares_the_vllm_general_plugin():
    groups = toml_entry_points()
    # The name is what users put in VLLM_PLUGINS: it must not change silently.
    assert groups["vllm.general_plugins"] == {"kv_strategies": "vllm_kv_strategies:register"}
    # The group other packages add strategies to is documented, empty here.
    assert groups[ENTRY_POINT_GROUP] == {}
    assert set(groups) == {"vllm.general_plugins", ENTRY_POINT_GROUP}


def test_pyproject_reads_entry_points_from_the_hook():
    with open(ROOT / "pyproject.toml", "rb") as f:
        pyproject = tomllib.load(f)
    assert "entry-points" in pyproject["project"]["dynamic"]
    assert "entry-points" not in pyproject["project"]  # one source only
    assert pyproject["tool"]["hatch"]["metadata"]["hooks"]["custom"]["path"] == ".ci/entry_points_hook.py"


def test_installed_distribution_matches_the_toml():
    dist = distribution(DIST)
    installed = {(ep.group, ep.name, ep.value) for ep in dist.entry_points}
    scripts = {("console_scripts", "vllm-kv-strategies", "vllm_kv_strategies.__main__:cli")}  # pyproject.toml's
    assert installed == declared() | scripts, "stale install? reinstall with `pip install -e .`"
    assert dist.version == vllm_kv_strategies.__version__


def test_entry_point_loads_register():
    [ep] = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "kv_strategies"]
    assert ep.dist is not None and ep.dist.metadata["Name"] == DIST
    assert ep.load() is vllm_kv_strategies.register


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    """A wheel built (no isolation, offline) from a copy of the sources."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "entry_points.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    (src / ".ci").mkdir()
    shutil.copy2(ROOT / ".ci" / "entry_points_hook.py", src / ".ci" / "entry_points_hook.py")
    shutil.copytree(
        ROOT / "plugin", src / "plugin", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [wheel] = out.glob("*.whl")
    return wheel


def read_wheel_text(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        [name] = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name).decode()


def test_wheel_entry_points_match_the_toml(built_wheel):
    """The wheel's entry points are entry_points.toml's and the command pyproject.toml's
    ``[project.scripts]`` declares, nothing else."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # entry point names are case-sensitive
    parser.read_string(read_wheel_text(built_wheel, ".dist-info/entry_points.txt"))
    in_wheel = {(g, n, v) for g in parser.sections() for n, v in parser.items(g)}
    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {"vllm-kv-strategies": "vllm_kv_strategies.__main__:cli"}
    assert in_wheel == declared() | {("console_scripts", n, v) for n, v in scripts.items()}


def test_wheel_metadata_and_layout(built_wheel):
    assert built_wheel.name == f"vllm_kv_strategies-{vllm_kv_strategies.__version__}-py3-none-any.whl"
    metadata = read_wheel_text(built_wheel, ".dist-info/METADATA")
    assert f"Name: {DIST}\n" in metadata
    assert f"Version: {vllm_kv_strategies.__version__}\n" in metadata
    with zipfile.ZipFile(built_wheel) as zf:
        names = zf.namelist()
    # The import package sits at the top of the wheel, not under plugin/.
    assert "vllm_kv_strategies/__init__.py" in names
    assert "vllm_kv_strategies/core/strategies/mla.py" in names
    assert "vllm_kv_strategies/platforms/ascend/runner.py" in names and "vllm_kv_strategies/platforms/upstream/v2.py" in names
    assert not [n for n in names if n.startswith(("plugin/", "tests/"))]
