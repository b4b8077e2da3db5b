"""vLLM 0.34's CPU platform on an x86 machine without triton-cpu, for tests that build configs.

``CpuPlatform.check_and_update_config`` (``vllm/platforms/cpu.py``, 0.34) refuses x86 without
Triton, so on the cells' machines (the CUDA ``vllm`` wheel over the CPU torch,
``VLLM_TARGET_DEVICE=cpu``) no ``VllmConfig`` could be built. The unit tests build configs and
call the KV cache code on CPU tensors; they run no kernel. :func:`allow_config_without_triton`
lets that one check see Triton present, only while it runs; every other reading of
``HAS_TRITON`` (``doctor`` in a fresh interpreter included) sees the machine as it is.
"""

from __future__ import annotations


def allow_config_without_triton() -> bool:
    """Install the stand-in where vLLM's CPU platform would refuse this machine; True if it did."""
    try:
        from vllm.platforms import CpuArchEnum, current_platform
        from vllm.platforms.cpu import CpuPlatform
        import vllm.triton_utils as triton_utils
    except ImportError:  # no vLLM, or a release without these
        return False
    if (
        triton_utils.HAS_TRITON
        or not current_platform.is_cpu()
        or current_platform.get_cpu_architecture() != CpuArchEnum.X86
        or not hasattr(CpuPlatform, "uses_standalone_cpu_model_runner")  # 0.34's CPU platform
        or getattr(CpuPlatform, "_kv_tests_stand_in", False)
    ):
        return False
    check = CpuPlatform.check_and_update_config.__func__

    def check_with_triton_stated(cls, vllm_config):
        triton_utils.HAS_TRITON = True
        try:
            return check(cls, vllm_config)
        finally:
            triton_utils.HAS_TRITON = False

    CpuPlatform.check_and_update_config = classmethod(check_with_triton_stated)
    CpuPlatform._kv_tests_stand_in = True
    return True
