"""The HCCL buffers vllm-ascend's profile run allocates beyond the runtime figure: the ``mc2``
communicator of its MoE dispatch, sized by ``HCCL_BUFFSIZE`` (one term of plan's estimate,
:func:`.overhead.terms`), and the Ascend facts it depends on (the card's family, the environment).

The runtime figure at tensor parallel > 1 (:data:`.overhead.RUNTIME`) stands for communicators of
HCCL's default size; a deployment that sets ``HCCL_BUFFSIZE`` (public DeepSeek-V4 launch scripts for
vllm-ascend set 1,024 - 2,560 MB) moves only the ``mc2`` communicator's, by twice the difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

if TYPE_CHECKING:
    from vllm_kv_strategies.deploy.shape import Shape

MIB = 2**20

#: CANN's default ``HCCL_BUFFSIZE``, MB (MiB): an HCCL communicator holds 2 x HCCL_BUFFSIZE, its
#: send and receive buffers (CANN's environment variable reference, "HCCL_BUFFSIZE"). vllm-ascend
#: gives each of its process groups 200 (``get_hccl_config_for_pg_options``; the DP group 50) but
#: the ``mc2`` group of its MoE dispatch / combine kernels, which takes HCCL_BUFFSIZE:
#: :data:`.overhead.RUNTIME`'s TP > 1 figure stands for communicators of this size.
HCCL_DEFAULT_BUFFSIZE = 200


def runs_mc2(shape: Shape, engine) -> bool:
    """Whether vllm-ascend's profile run dispatches the MoE through MC2 for ``engine`` (an
    :class:`.overhead.Engine`): its ``profile_run`` first runs a forward of the MC2 capacity's
    tokens, "because MC2 consumes additional NPU memory", where ``select_moe_comm_method`` picks
    MC2 (or fused MC2) for it. That takes expert parallel over more than one rank (``tp x dp``);
    then on an A2 (910B) at least 16 ranks, and from 0.18 at most 24 experts on each; on an A3 or
    A5 any; a 310P never (all-gather); from 0.30 not with LoRA (all-to-all: 0.23 had no such case)."""
    ranks = engine.tp * engine.dp
    if engine.platform != "npu" or not shape.experts or not engine.expert_parallel or ranks < 2:
        return False
    if engine.lora and Version(engine.vllm) >= Version("0.30"):
        return False
    if engine.soc == "A2":
        return ranks >= 16 and (Version(engine.vllm) < Version("0.18") or shape.experts // ranks <= 24)
    return engine.soc in ("A3", "A5")


def mc2_buffers(shape: Shape, engine) -> int:
    """Bytes the ``mc2`` communicator's buffers take beyond the size :data:`.overhead.RUNTIME` holds:
    2 x (``HCCL_BUFFSIZE`` - :data:`HCCL_DEFAULT_BUFFSIZE`) MiB (negative below it) where the
    profile runs MC2 (:func:`runs_mc2`), which allocates them (HCCL allocates a communicator's
    buffer on its first use: ``HcclGetHcclBuffer``), so that vLLM counts them in
    ``non_torch_increase``; 0 elsewhere."""
    if not runs_mc2(shape, engine):
        return 0
    return 2 * (engine.hccl_buffsize - HCCL_DEFAULT_BUFFSIZE) * MIB


#: vllm-ascend's device families (``AscendDeviceType``) by the SoC of a ``--device`` card.
SOC_FAMILY = {"Ascend910B": "A2", "Ascend910_93": "A3", "Ascend310P": "310P"}


def ascend_family(device: str | None) -> str:
    """The Ascend family plan's estimate takes: ``--device``'s (:data:`SOC_FAMILY`), else what the
    installed vllm-ascend detects on this host (``get_ascend_device_type``), else ``A2``."""
    from vllm_kv_strategies.deploy.budget import DEVICES

    if device:
        return SOC_FAMILY.get(DEVICES[device].capability, "A2")
    try:
        from vllm_ascend.utils import get_ascend_device_type

        return get_ascend_device_type().name.lstrip("_")
    except Exception:  # no vllm-ascend, or no card to ask (a laptop's planning environment)
        return "A2"


def buffsize_from_env(environ) -> int:
    """``HCCL_BUFFSIZE`` of ``environ`` (a mapping such as ``os.environ``), MB: CANN's default
    :data:`HCCL_DEFAULT_BUFFSIZE` where it is unset or empty.

    Raises:
        ValueError: not an integer of at least 1 (CANN's range).
    """
    text = (environ.get("HCCL_BUFFSIZE") or "").strip()
    if not text:
        return HCCL_DEFAULT_BUFFSIZE
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValueError(f"HCCL_BUFFSIZE={text!r}: CANN takes a whole number of MB, at least 1")
    return int(text)
