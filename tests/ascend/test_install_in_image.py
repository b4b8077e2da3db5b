"""docs/ascend.md's install into vllm-ascend's container image, run against this Ascend cell's
environment: the steps of ``tools/install_in_ascend_image.sh``, which the page tells users to run.

The wheel is built from this checkout with ``pip wheel --no-deps`` (hatchling from the cell's pins,
no build isolation: the test reaches no index), and installed with the script into a virtual
environment layered on the cell's (a ``.pth`` file naming the cell's site-packages), as the image
holds vLLM, vllm-ascend and torch beside it: the plugin that runs is the wheel's. ``PYTHON`` is this
environment's interpreter with the NPU modules stubbed (``tests/ascend/npu_python.py``), as
``torch_npu`` imports on an Ascend host. What no test here runs: the image itself (CANN, the real
``torch_npu``, the driver) and ``vllm serve`` on an NPU.

It runs in the newest Ascend cell only (about 75 s: two imports of vLLM and vllm-ascend), to keep
CI's time; ``doctor`` on every release is ``test_doctor_ascend.py``'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_kv_strategies.platforms import matrix
from vllm_kv_strategies.platforms.matrix import release

REPO = Path(__file__).resolve().parents[2]
ASCEND = version("vllm-ascend")
NEWEST = max((a for _, a in matrix.ASCEND_RELEASES), key=Version)
newest_cell_only = pytest.mark.skipif(
    release(ASCEND) != NEWEST, reason=f"runs in the newest Ascend cell, ascend-{NEWEST}, to keep CI's time (about 75 s)"
)


@newest_cell_only
def test_the_documented_steps_install_and_check_the_wheel(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    [wheel] = dist.glob("vllm_kv_strategies-*-py3-none-any.whl")

    venv = tmp_path / "image-python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    layered = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(layered, "ascend_cell.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = tmp_path / "npu-python"
    python.write_text(f'#!/bin/sh\nexec "{venv / "bin" / "python"}" "{REPO / "tests" / "ascend" / "npu_python.py"}" "$@"\n')
    python.chmod(0o755)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_PLUGINS", "PYTHONPATH"))}
    env.update(PYTHON=str(python), PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1")
    proc = subprocess.run(["bash", str(REPO / "tools" / "install_in_ascend_image.sh"), str(wheel)],
                          env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    # 2. the wheel's plugin, not the cell's copy, is the one that runs
    [where] = [ln for ln in out.splitlines() if ln.startswith("vllm-kv-strategies ") and " from " in ln]
    assert where.split(" from ")[1].startswith(str(venv)), where
    # 3. doctor: this release, its runner's methods, active in auto
    assert f"  vllm_ascend  {ASCEND}" in out
    assert f"platform: ascend; proven by the plugin's tests: yes (vllm-ascend {ASCEND}: own cell ascend-{release(ASCEND)})" in out
    assert "entry point kv_strategies: visible to vLLM" in out
    assert "KV_STRATEGIES=auto: the plugin would patch the runner" in out
    # 4. vLLM's plugin loader loaded it, as vllm serve does
    assert "kv_strategies: enabled (KV_STRATEGIES=auto" in out, out[-3000:]
    assert out.rstrip().endswith("(KV_STRATEGIES=off turns the plugin off)")


def test_a_wrong_wheel_argument_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "tools" / "install_in_ascend_image.sh"), str(tmp_path / "missing.whl")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"install_in_ascend_image: give the plugin's wheel file (got '{tmp_path / 'missing.whl'}'); build it with: pip wheel --no-deps -w dist ."
    ]
