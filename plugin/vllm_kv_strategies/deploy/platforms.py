"""The platform a plan plans for: the card's (``--device``), as vLLM on that
card would run, else the installed one.

vLLM decides block sizes and attention backends through its
``current_platform`` (``check_and_update_config``, ``get_attn_backend_cls``,
``update_block_size_for_backend``): vLLM's CPU build plans the CPU's rules
(128-token blocks, or 32-token multiples). For a named card, plan makes
``current_platform`` an instance of vLLM's own platform class for it,
answering the device queries (capability, name, memory) with the card's facts:

* CUDA: a subclass of vLLM's ``CudaPlatformBase`` (the class
  ``vllm.platforms.cuda`` picks on a host with NVML) whose capability is the card's;
* ROCm: vLLM's ``RocmPlatform``, its ``amdsmi`` queries answered with the card's
  GCN architecture (``gfx942`` for MI300X);
* Ascend: vllm-ascend's ``NPUPlatform`` (vllm-ascend must be installed; torch_npu
  is stood in where missing by the stand-in the command line passes in as ``npu``:
  :mod:`vllm_kv_strategies.platforms.ascend.npu_standin`).

The compiled kernels those platforms import at module level are stood in
where this machine lacks them (:mod:`.standins`). ``import vllm`` resolves the
platform once (its ``env_override`` asks for it); plan then replaces it in
``vllm.platforms`` and in every module that bound it (``from vllm.platforms
import current_platform``) before anything is planned. Where vLLM finds no platform (its CUDA
wheel on a machine without CUDA: 0.33 / 0.34 have no CPU build) a card must be named
(:data:`NO_PLATFORM`), and the operators vLLM's compiled extensions would register are stood in.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from vllm_kv_strategies.deploy.budget import DEVICES
from vllm_kv_strategies.versions import Versions

#: What each platform's vLLM modules import at module level that another platform's build lacks.
KERNELS = {
    "cuda": ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn", "tilelang", "deep_gemm"),  # DeepSeek-V4: mHC, indexer
    "rocm": ("amdsmi", "vllm._rocm_C", "vllm._C_stable_libtorch"),
}

#: The cards a planned node has: as many as the deployment asks for (vLLM checks a
#: single node's world size against ``device_count()``).
NODE_CARDS = 1 << 16

#: The operator namespaces whose kernels a platform's layers look up when built.
OPS = {"cuda": ("_C", "_C_cache_ops", "_moe_C"), "rocm": ("_C", "_C_cache_ops", "_moe_C", "_rocm_C"),
       "cpu": ("_C", "_C_cache_ops")}
#: vLLM's compiled extensions, one of which registers ``torch.ops._C`` where they load.
COMPILED = ("vllm._C", "vllm._C_stable_libtorch")


def _stand_in_missing_ops(kind: str) -> None:
    """The platform planned is this machine's own: its operators stood in (:func:`.standins.lenient_ops`)
    only where none of vLLM's compiled extensions loads here (vLLM's CUDA wheel on a machine without
    CUDA: vLLM 0.33 / 0.34 have no CPU build); where one loads, the real operators alone answer. A platform
    plugin's (vllm-ascend's: its own operators, torch_npu stood in) is left as it is."""
    import importlib

    from vllm_kv_strategies.deploy.standins import is_stand_in, lenient_ops

    if kind not in OPS:
        return
    for name in COMPILED:
        try:
            if not is_stand_in(importlib.import_module(name)):
                return
        except ImportError:
            continue
    lenient_ops(*OPS[kind])


def planned_kind(device: str | None) -> str | None:
    """The platform kind of ``--device`` (``cuda``, ``rocm``, ``npu``), or None (none named)."""
    return DEVICES[device].platform if device in DEVICES else None


def no_platform(platform) -> bool:
    """vLLM found no platform: unspecified and of no device (vllm-ascend 0.11's NPU platform also
    answers ``is_unspecified()``, with its device type ``npu``)."""
    return platform.is_unspecified() and not getattr(platform, "device_type", "")


def installed_kind(platform) -> str:
    if no_platform(platform):
        return "no platform"
    return "npu" if platform.device_type == "npu" else ("rocm" if platform.is_rocm() else platform.device_type)


#: The one line for no ``--device`` where vLLM finds no platform (a CUDA build on a machine without a GPU).
NO_PLATFORM = ("vLLM {version} finds no platform on this machine (a build for a device this machine lacks, e.g. "
               "the CUDA wheel without a GPU): name the card to plan for with --device NAME (h100-80g, a100-80g, "
               "mi300x, 910b-64g, ...; --help lists them), or set VLLM_TARGET_DEVICE=cpu for vLLM's CPU platform")


def _host() -> Any:
    """vLLM's CPU platform, for an Ascend card where neither vllm-ascend nor any other platform is installed."""
    from vllm.platforms.cpu import CpuPlatform

    return CpuPlatform()


def _cuda(card) -> Any:
    from vllm_kv_strategies.deploy.standins import stand_in

    stand_in(*KERNELS["cuda"])
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    major, minor = card.capability

    class PlannedCudaPlatform(CudaPlatformBase):
        """vLLM's CUDA platform answering for the card named (no NVML, no CUDA here)."""

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return card.what

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return card.bytes

        @classmethod
        def is_fully_connected(cls, physical_device_ids) -> bool:
            return True

        @classmethod
        def log_warnings(cls):
            return None

        @classmethod
        def device_count(cls) -> int:
            return NODE_CARDS

        @classmethod
        def current_device(cls) -> int:
            return 0  # torch.cuda's asks for CUDA, which this torch may lack; a layer's tensors on it are on meta

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return 1  # sizes kernels' workspaces only (e.g. CUTLASS MLA's), never the KV cache

    return PlannedCudaPlatform()


def _rocm(card) -> Any:
    from vllm_kv_strategies.deploy.standins import stand_in

    stood = stand_in(*KERNELS["rocm"])
    if "amdsmi" in stood:
        amdsmi = sys.modules["amdsmi"]
        amdsmi.amdsmi_get_processor_handles.return_value = [0]
        amdsmi.amdsmi_get_gpu_asic_info.return_value = {
            "target_graphics_version": card.capability, "device_id": "", "market_name": card.what}
        amdsmi.amdsmi_get_gpu_memory_total.return_value = card.bytes
    from vllm.platforms.rocm import RocmPlatform

    return RocmPlatform()


def _npu(card, npu: Any) -> Any:
    import importlib.util

    return npu.npu_platform() if npu is not None and importlib.util.find_spec("vllm_ascend") is not None else None


def use(device: str | None, npu: Any = None) -> str:
    """Make the card's platform vLLM's ``current_platform`` (none named: the
    installed one stays); returns the line saying which platform is planned and why.
    ``npu``: the Ascend stand-in (``npu_platform()``: vllm-ascend's ``NPUPlatform``), or None."""
    import vllm.platforms

    installed = vllm.platforms.current_platform
    if device is None and no_platform(installed):
        from vllm_kv_strategies.deploy.errors import BadInput

        raise BadInput(NO_PLATFORM.format(version=Versions.detect().vllm))
    if device is None:
        _stand_in_missing_ops(installed_kind(installed))
        return (f"platform: {installed_kind(installed)} (vLLM's platform in this environment; name a card with "
                "--device to plan for its platform)")
    card = DEVICES[device]
    if installed_kind(installed) == card.platform:
        return f"platform: {card.platform} (--device {device}: {card.what}; the platform installed here too)"
    new = _npu(card, npu) if card.platform == "npu" else {"cuda": _cuda, "rocm": _rocm}[card.platform](card)
    if new is None and no_platform(installed):  # an Ascend card, and no platform at all: the host's CPU
        _INSTALLED.append(installed)
        _replace(installed, _host())
        _stand_in_missing_ops("cpu")
        return (f"platform: cpu (--device {device} is an Ascend card, and neither vllm-ascend, its vLLM platform, nor "
                "any other is installed here: planned on vLLM's CPU platform with the card's memory; install "
                "vllm-ascend for its block sizes)")
    if new is None:  # an Ascend card where vllm-ascend, its platform, is not installed
        return (f"platform: {installed_kind(installed)} (--device {device} is an Ascend card, and vllm-ascend, its vLLM "
                "platform, is not installed here: planned on this environment's platform with the card's memory; "
                "install vllm-ascend for its block sizes)")
    _INSTALLED.append(installed)
    if card.platform in OPS:
        from vllm_kv_strategies.deploy.standins import lenient_ops, lenient_triton

        lenient_ops(*OPS[card.platform])
        lenient_triton()
    _replace(installed, new)
    here = ("machine (where vLLM finds no platform of its own)" if no_platform(installed)
            else f"{installed_kind(installed)} machine")
    capability = (f"compute capability {card.capability[0]}.{card.capability[1]}" if card.platform == "cuda"
                  else str(card.capability))
    return (f"platform: {card.platform} (--device {device}: {card.what}, {capability}), vLLM's "
            f"{type(new).__mro__[1 if card.platform == 'cuda' else 0].__name__} planned from this "
            f"{here}: that platform's block sizes and attention backends")


_INSTALLED: list[Any] = []


def restore() -> None:
    """The installed platform back as ``current_platform`` after a plan for another card (plan
    runs in-process in tests and tools)."""
    if not _INSTALLED:
        return
    import vllm.platforms

    _replace(vllm.platforms._current_platform, _INSTALLED.pop())


def _replace(old, new) -> None:
    """``new`` as vLLM's ``current_platform``, in ``vllm.platforms`` and every module that bound ``old``;
    vLLM's attention-backend choices made for ``old`` forgotten."""
    import vllm.platforms

    vllm.platforms._current_platform = new
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if namespace is not None and namespace.get("current_platform") is old:
            namespace["current_platform"] = new
    selector = sys.modules.get("vllm.v1.attention.selector")  # its backend choices, cached per configuration
    for name in ("_cached_get_attn_backend", "_cached_get_mamba_attn_backend"):
        cached = getattr(selector, name, None)
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()


def prepare(device: str | None, config: dict | None = None, npu: Any = None) -> None:
    """Before vLLM is imported: for a multimodal ``config`` (a ``vision_config``
    or ``audio_config``), the vision packages stood in where missing (its
    processors import torchvision; the KV cache does not depend on them).
    Where vllm-ascend is installed, its platform plugin loads for an Ascend
    card or none named (torch_npu stood in where missing: ``npu.install()``,
    :mod:`vllm_kv_strategies.platforms.ascend.npu_standin`)
    and stays out for another platform's card (``VLLM_PLUGINS``: the other
    plugins, unless the environment sets it)."""
    import importlib.util
    import os

    if any(key.endswith(("vision_config", "audio_config")) for key in config or {}):
        from vllm_kv_strategies.deploy.standins import stand_in

        stand_in("torchvision")

    if importlib.util.find_spec("vllm_ascend") is None:
        return
    if planned_kind(device) in (None, "npu"):
        if npu is not None:
            npu.install()
        return
    from importlib.metadata import entry_points

    names = {ep.name for group in ("vllm.platform_plugins", "vllm.general_plugins") for ep in entry_points(group=group)
             if not ep.value.startswith("vllm_ascend")}
    os.environ.setdefault("VLLM_PLUGINS", ",".join(sorted(names)))


#: What ``plan`` says where it plans past vLLM 0.34's missing-Triton refusal (:func:`config_without_triton`).
PLANNED_WITHOUT_TRITON = ("vLLM {version} cannot start on this machine (its CPU platform needs triton-cpu on x86); "
                          "planned as that platform would plan with Triton, which the KV cache does not depend on")


@contextlib.contextmanager
def config_without_triton(notes: list[str]):
    """Within: vLLM 0.34's CPU platform on an x86 machine without Triton builds configs as
    if Triton were there (``CpuPlatform.check_and_update_config`` refuses x86 without it, a
    fact about running kernels, not about the KV cache); the sentence saying so is appended
    to ``notes``. Elsewhere (Triton present, a GPU platform, another release) nothing changes."""
    from vllm.platforms import CpuArchEnum, current_platform

    import vllm.triton_utils as triton_utils

    refuses = (not triton_utils.HAS_TRITON and current_platform.is_cpu()
               and current_platform.get_cpu_architecture() == CpuArchEnum.X86
               # 0.34's CPU platform; asked of the class: an instance answers any name (Platform.__getattr__, a warning)
               and hasattr(type(current_platform), "uses_standalone_cpu_model_runner"))
    if not refuses:
        yield
        return
    cls = type(current_platform)
    check = vars(cls)["check_and_update_config"]

    def check_with_triton_stated(klass, vllm_config):
        triton_utils.HAS_TRITON = True
        try:
            return check.__func__(klass, vllm_config)
        finally:
            triton_utils.HAS_TRITON = False

    cls.check_and_update_config = classmethod(check_with_triton_stated)
    try:
        yield
    finally:
        cls.check_and_update_config = check
    notes.append(PLANNED_WITHOUT_TRITON.format(version=Versions.detect().vllm))
