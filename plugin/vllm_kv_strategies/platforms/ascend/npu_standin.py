"""Ascend planning on a machine without ``torch_npu`` (a workstation, a CI
box): vllm-ascend's own platform and runner code runs, on the meta device,
with stand-ins (:mod:`vllm_kv_strategies.deploy.standins`) for the NPU runtime modules it imports and
this machine lacks. For planning only: no NPU operation runs, and plan says
so in one line.

What the stand-ins answer where vllm-ascend asks at import or while it
builds a config and a model: ``torch_npu.npu.current_device() -> 0``,
``device_count() -> 1``, ``get_soc_version() -> 220`` (an A2 SoC, which the
910B's wheel is built for), ``is_available() -> False``; ``npu_format_cast`` is
the identity; ``torch.npu`` answers as ``torch_npu.npu``; torch's PrivateUse1
backend is named ``npu`` (what importing the real ``torch_npu`` does, so that
``torch.device("npu")`` parses) and HCCL is unavailable.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from unittest.mock import MagicMock

from vllm_kv_strategies.platforms.ascend.runner_releases import own_release

#: The NPU runtime modules vllm-ascend imports (0.11 - 0.30): torch_npu, CANN's acl,
#: torchair (0.11, 0.18), fla_npu (0.30's linear attention kernels), and torchvision
#: (its Qwen2-VL processors), each stood in only where it cannot be imported.
ROOTS = ("torch_npu", "acl", "torchair", "fla_npu", "torchvision")
#: torch_npu submodules made before vllm-ascend reaches them, so that attribute access and import agree.
_SUBMODULES = ("torch_npu.npu", "torch_npu.npu.streams", "torch_npu.npu.utils", "torch_npu._C", "torch_npu.profiler",
               "torch_npu.contrib", "torch_npu.op_plugin", "torch_npu.utils", "torch_npu.dynamo",
               "torchair.fx_summary", "torchair.npu_fx_compiler", "torchair.scope", "torchvision.transforms.v2")


def _identity(tensor, *args, **kwargs):
    return tensor


def configure_torch_npu(torch_npu) -> None:
    """The answers of a stood-in ``torch_npu`` (see the module doc)."""
    torch_npu.npu_format_cast = MagicMock(name="torch_npu.npu_format_cast", side_effect=_identity)
    npu = importlib.import_module("torch_npu.npu")
    npu.current_device = MagicMock(name="torch_npu.npu.current_device", return_value=0)
    npu.device_count = MagicMock(name="torch_npu.npu.device_count", return_value=1)
    npu.get_soc_version = MagicMock(name="torch_npu.npu.get_soc_version", return_value=220)
    npu.is_available = MagicMock(name="torch_npu.npu.is_available", return_value=False)
    streams = importlib.import_module("torch_npu.npu.streams")
    for module in (npu, streams):
        module.Stream = module.Event = MagicMock


def configure_torch() -> None:
    """``torch.npu``, which vllm-ascend reads at import (``torch.npu.NPUGraph | None``)."""
    import torch

    if not isinstance(getattr(torch, "npu", None), MagicMock):
        npu = MagicMock(name="torch.npu")
        npu.Stream = npu.Event = MagicMock
        npu.current_device.return_value = 0
        npu.device_count.return_value = 1
        npu.is_available.return_value = False
        torch.npu = npu


def name_npu_device() -> None:
    """What importing the real ``torch_npu`` does to torch: its PrivateUse1 backend
    named ``npu`` and ``torch.distributed.is_hccl_available`` (False here).
    Process-wide and not undoable (torch allows one rename)."""
    import torch
    import torch.distributed

    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    torch.distributed.is_hccl_available = lambda: False


def install() -> list[str]:
    """Stand in for the NPU runtime where ``torch_npu`` cannot be imported
    (before vLLM is imported: its platform plugin loads vllm-ascend); returns
    the modules stood in (none where ``torch_npu`` is real)."""
    from vllm_kv_strategies.deploy.standins import stand_in

    if importlib.util.find_spec("torch_npu") is not None and "torch_npu" not in sys.modules:
        return []
    configure_torch()
    added = stand_in(*ROOTS)
    if "torch_npu" in added:
        for name in _SUBMODULES:
            if name.split(".", 1)[0] in added:
                importlib.import_module(name)
        configure_torch_npu(sys.modules["torch_npu"])
        name_npu_device()
    row = own_release()
    if row is not None and row.ops_before_platform:  # its ops first: a circular import otherwise
        try:
            importlib.import_module("vllm_ascend.ops")
        except Exception:  # noqa: BLE001 - vLLM's import then says what is wrong
            pass
    return added


def npu_platform():
    """vllm-ascend's ``NPUPlatform``."""
    from vllm_ascend.platform import NPUPlatform

    return NPUPlatform()
