"""Runner adapters, one module per model runner, installed by ``register()``.

Importing this package is cheap: adapter modules (which import torch and
vLLM) load only when their runner module is imported.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .. import compat, patching
from ..logger import PREFIX, logger

#: platform -> (adapter module, adapter class). One adapter per runner.
ADAPTERS: dict[str, tuple[str, str]] = {
    "upstream": ("vllm_kv_strategies.adapters.upstream", "UpstreamAdapter"),
    "ascend": ("vllm_kv_strategies.adapters.ascend", "AscendAdapter"),
}


def _adapter(platform: str):
    module, name = ADAPTERS[platform]
    return getattr(importlib.import_module(module), name)()


def target_of(platform: str) -> compat.PatchTarget:
    return compat.ascend_target() if platform == "ascend" else compat.UPSTREAM_TARGET


def install(platform: str) -> compat.PatchTarget:
    """Patch ``platform``'s runner class now, or as soon as its module is
    imported. Idempotent. Returns the target."""
    target = target_of(platform)

    def on_import(module: ModuleType) -> None:
        try:
            adapter = _adapter(platform)
            cls = adapter.resolve_class(module)
            if adapter.patch(cls):
                logger.debug("%s patched %s.%s", PREFIX, target.module, target.qualname)
        except Exception as exc:  # never break the import of vLLM's runner
            logger.warning("%s could not patch %s.%s, stock is used: %r", PREFIX, target.module, target.qualname, exc)

    patching.cancel_pending(target.module)
    patching.when_imported(target.module, on_import)
    return target


def uninstall() -> list[str]:
    """Restore every patched runner class and drop pending patches.
    Returns the qualified names of the classes restored."""
    restored = []
    patching.cancel_pending()
    for platform in ADAPTERS:
        target = target_of(platform)
        module = importlib.sys.modules.get(target.module)
        cls = getattr(module, target.qualname, None) if module else None
        if cls is not None and patching.unpatch_methods(cls):
            restored.append(f"{target.module}.{target.qualname}")
    return restored
