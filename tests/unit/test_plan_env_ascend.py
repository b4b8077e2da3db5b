"""tools/plan_env_ascend.sh's input checks, before it builds anything (the build itself: measured in
docs/plan.md, and its pins are the Ascend cells')."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "plan_env_ascend.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_a_release_without_pins_is_one_line_exit_2(tmp_path):
    result = run("0.99.0", str(tmp_path / "env"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "plan_env_ascend: no pins for vllm-ascend 0.99.0 (known: 0.11.0 0.13.0 0.18.0 0.23.0 0.30.0)\n"
    assert not (tmp_path / "env").exists()


def test_an_existing_directory_is_one_line_exit_2(tmp_path):
    result = run("0.30.0", str(tmp_path))
    assert (result.returncode, result.stderr) == (2, f"plan_env_ascend: {tmp_path} exists; give a new directory\n")


def test_help_and_usage():
    shown = run("--help")
    assert shown.returncode == 0 and "Usage: tools/plan_env_ascend.sh VERSION DIR" in shown.stdout
    assert run("0.30.0").returncode == 2
