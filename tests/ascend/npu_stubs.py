"""Stand-ins for the NPU-only modules vllm-ascend imports, so its real code runs on a CPU host
(vllm-ascend 0.11.0, 0.13.0, 0.18.0, 0.23.0 and 0.30.0; which modules each needs is in
``_ROOTS_BY_VERSION``).

``install(version)`` puts into ``sys.modules``:

* ``torch_npu``: a real ``types.ModuleType`` with a ``__spec__`` and ``__path__`` (so it looks
  like a package). Every ``torch_npu.<x>.<y>`` submodule is created on demand by a meta path
  finder as a package-like module as well; attributes that nobody defined are ``MagicMock``s.
  Explicit values: ``npu_format_cast`` is an identity function wrapped in a ``MagicMock`` (so a
  test can count the casts; 0.11's runner casts every attention view), ``npu.current_device() -> 0``,
  ``npu.get_soc_version() -> 220`` (an A2 SoC, matching the A2 build of the vllm-ascend wheel),
  ``npu.device_count() -> 1``, ``npu.Stream`` / ``npu.Event`` are the ``MagicMock`` class.
* ``torch.npu``: a ``MagicMock`` (vllm-ascend evaluates ``torch.npu.NPUGraph | None`` at import).
* ``torchvision``: package stub (transformers' Qwen2-VL processors import
  ``torchvision.transforms.v2``; the PyPI torchvision wheel needs CUDA ops and cannot load here).
* ``torchair``: package stub, only for the versions that import it (0.18.0 and 0.11.0).
* ``acl``: package stub, every release (CANN's Python runtime):
  ``vllm_ascend/device_allocator/camem.py`` does ``from acl.rt import memcpy`` and
  the worker (``vllm_ascend/worker/worker.py``; 0.11 ``worker_v1.py``) imports camem (0.30
  imports the worker on its own; the sleep mode tests import it on 0.11 - 0.23). ``fla_npu``: package stub, 0.30.0 only (the Ascend flash-linear-attention
  kernels): ``vllm_ascend/ops/gdn.py`` (reached from ``vllm_ascend.patch.worker`` through
  ``patch_qwen3_5``), ``ops/kda.py``, ``ops/kimi_kda.py`` import ``fla_npu.ops.ascendc``.
  0.30.0rc2 never imports ``triton_ascend`` itself (it looks up triton-ascend's ops through
  ``triton.language.extra.cann``, only when triton is installed, which it is not here), so that
  root is not stubbed.

For 0.23.0 it then imports ``vllm_ascend.ops`` before anything else of vllm-ascend:
importing ``vllm_ascend.worker.model_runner_v1`` first hits a circular import
(``DeviceOperator`` from a partially initialised ``vllm_ascend.device.device_op``).

Written for this project; it contains no vllm-ascend code. Calling ``install`` twice is a no-op.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections import Counter
from unittest.mock import MagicMock

from vllm_kv_strategies.platforms.ascend.npu_standin import configure_torch, configure_torch_npu, name_npu_device
from vllm_kv_strategies.deploy.standins import StandInLoader, is_stand_in

__all__ = ["install", "install_npu_device", "installed_version", "STUB_ROOTS", "is_stub", "format_cast_mock", "npu_calls"]

SUPPORTED_VERSIONS = ("0.30.0", "0.23.0", "0.18.0", "0.13.0", "0.11.0")

# Which stub packages each vllm-ascend version needs (see the probe notes).
_ROOTS_BY_VERSION = {
    "0.30.0": ("torch_npu", "torchvision", "acl", "fla_npu"),
    "0.23.0": ("torch_npu", "torchvision", "acl"),
    "0.18.0": ("torch_npu", "torchvision", "torchair", "acl"),
    "0.13.0": ("torch_npu", "torchvision", "acl"),
    "0.11.0": ("torch_npu", "torchair", "acl"),
}
STUB_ROOTS: tuple[str, ...] = ()

# torchair submodules that must exist before vllm-ascend 0.18 looks them up in sys.modules.
_TORCHAIR_PREIMPORT = ("torchair.fx_summary", "torchair.npu_fx_compiler", "torchair.scope")
# torch_npu submodules created eagerly so that `torch_npu.npu` is the same object whether it is
# reached by attribute access or by import.
_TORCH_NPU_PREIMPORT = (
    "torch_npu.npu",
    "torch_npu.npu.streams",
    "torch_npu.npu.utils",
    "torch_npu._C",
    "torch_npu.profiler",
    "torch_npu.contrib",
    "torch_npu.op_plugin",
    "torch_npu.utils",
    "torch_npu.dynamo",
)

_installed_version: str | None = None


class _StubFinder(importlib.abc.MetaPathFinder):
    """Answers for every module under the stubbed roots."""

    def __init__(self, roots: tuple[str, ...]):
        self.roots = set(roots)
        self.loader = StandInLoader()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


def is_stub(module) -> bool:
    return is_stand_in(module)


def format_cast_mock() -> MagicMock:
    """The MagicMock standing in for ``torch_npu.npu_format_cast`` (identity)."""
    return sys.modules["torch_npu"].npu_format_cast


def npu_calls() -> Counter:
    """Every call recorded so far on the stubbed NPU modules (``torch_npu`` and its submodules,
    ``torch.npu``), counted by the called name (``torch_npu.npu_format_cast``,
    ``torch.npu.synchronize``, ...): take it before and after a build and subtract, to see which
    NPU operations the build called."""
    import torch

    counts: Counter = Counter()
    roots = [(name, module) for name, module in list(sys.modules.items()) if module is not None and is_stub(module)]
    for prefix, module in roots:
        for attr, value in list(vars(module).items()):
            if isinstance(value, MagicMock):
                for call in value.mock_calls:
                    counts[".".join(filter(None, (prefix, attr, call[0])))] += 1
    npu = getattr(torch, "npu", None)
    if isinstance(npu, MagicMock):
        for call in npu.mock_calls:
            counts[f"torch.npu.{call[0]}"] += 1
    return counts


def installed_version() -> str | None:
    return _installed_version


def install(version: str = "0.23.0", *, import_ops: bool = True) -> None:
    """Install the stubs for vllm-ascend ``version`` (a post-release or a release candidate counts
    as its base release: 0.23.0.post1 is 0.23.0, 0.30.0rc2 is 0.30.0); then (0.23) import
    ``vllm_ascend.ops``."""
    global _installed_version, STUB_ROOTS
    # packaging directly, not versions.release: tools/make_venv_ascend.sh runs this before the plugin is installed.
    from packaging.version import Version

    version = Version(version).base_version
    if version not in _ROOTS_BY_VERSION:
        raise ValueError(f"unknown vllm-ascend version {version!r}; known: {SUPPORTED_VERSIONS}")
    if _installed_version is not None:
        if _installed_version != version:
            raise RuntimeError(
                f"NPU stubs for {_installed_version} are already installed; cannot switch to {version}"
            )
        return

    roots = _ROOTS_BY_VERSION[version]
    for root in roots:
        existing = sys.modules.get(root)
        if existing is not None and not is_stub(existing):
            raise RuntimeError(f"a real {root!r} is already imported; refusing to shadow it with a stub")
    sys.meta_path.insert(0, _StubFinder(roots))
    STUB_ROOTS = roots

    configure_torch()
    torch_npu = importlib.import_module("torch_npu")
    for name in _TORCH_NPU_PREIMPORT:
        importlib.import_module(name)
    configure_torch_npu(torch_npu)
    if "torchvision" in roots:
        tv = importlib.import_module("torchvision")
        tv.__version__ = "0.0.0+npu_stub"
        importlib.import_module("torchvision.transforms.v2")
    if "torchair" in roots:
        for name in _TORCHAIR_PREIMPORT:
            importlib.import_module(name)

    _installed_version = version
    if import_ops and version == "0.23.0":
        importlib.import_module("vllm_ascend.ops")


def install_npu_device() -> None:
    """What importing the real ``torch_npu`` also does to torch (the ``npu`` device name,
    no HCCL; :func:`vllm_kv_strategies.platforms.ascend.npu_standin.name_npu_device`). Process-wide and
    not undoable: call it only in a process of its own (``tests/ascend/plan_stubbed.py``),
    never in the pytest process."""
    name_npu_device()
