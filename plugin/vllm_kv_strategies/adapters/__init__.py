"""Runner adapters, installed by ``register()`` from the declarations in
:mod:`vllm_kv_strategies.compat` (one :class:`~vllm_kv_strategies.compat.PatchTarget`
per runner).

Importing this package is cheap: an adapter module (which imports torch and
vLLM) loads only when its runner's module is imported, and only then is the
runner patched and the patch logged.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from .. import patching
from ..compat import ascend as ascend_facts
from ..compat import upstream as upstream_facts
from ..compat.targets import PatchTarget
from ..logger import PREFIX, logger


def targets(platform: str) -> tuple[PatchTarget, ...]:
    """What the plugin patches on ``platform`` (the installed release): the
    runners that release has (:func:`~vllm_kv_strategies.compat.upstream.targets`: no V1
    from vLLM 0.34), and on vllm-ascend 0.11 / 0.13 the hybrid page sizing
    (:func:`~vllm_kv_strategies.compat.ascend.targets`)."""
    if platform == "ascend":
        return ascend_facts.targets()
    from ..compat.matrix import Installed

    return upstream_facts.targets(Installed.detect().vllm)


def adapter_for(target: PatchTarget):
    module, name = target.adapter.split(":")
    return getattr(importlib.import_module(module), name)()


def install(platform: str) -> tuple[PatchTarget, ...]:
    """Patch ``platform``'s runners now, or as soon as each runner's module is
    imported. Idempotent. Each patch logs one INFO line naming what it
    replaced when (and only when) it is applied; a failure logs one warning
    and leaves that runner stock."""
    chosen = targets(platform)
    for target in chosen:

        def on_import(module: ModuleType, target: PatchTarget = target) -> None:
            try:
                if adapter_for(target).patch(module):
                    logger.info("%s patched %s (%s)", PREFIX, target.describe(), target.runner)
            except Exception as exc:  # never break the import of vLLM's runner
                logger.warning("%s could not patch %s, its KV cache stays stock: %r", PREFIX, target.describe(), exc)

        patching.cancel_pending(target.module)
        patching.when_imported(target.module, on_import)
    if platform == "upstream":  # a runner the plugin does not cover says so where it loads, never "patched"
        from ..compat.matrix import Installed

        for module_name, runner, why in upstream_facts.not_covered(Installed.detect().vllm):

            def uncovered(module: ModuleType, runner: str = runner, why: str = why) -> None:
                logger.warning("%s %s builds its KV cache stock in this worker: %s", PREFIX, runner, why)

            patching.cancel_pending(module_name)
            patching.when_imported(module_name, uncovered)
    return chosen


def uninstall() -> list[str]:
    """Restore every patched runner and drop pending patches. Returns what was
    restored (``target.describe()``)."""
    restored = []
    patching.cancel_pending()
    for target in (*upstream_facts.TARGETS, ascend_facts.SPLIT_INIT, ascend_facts.THREE_INITS, ascend_facts.HYBRID_SIZING,
                   ascend_facts.ASCEND_V2_ALLOCATION, ascend_facts.ASCEND_V2, ascend_facts.MULTI_GROUP_BUDGET):
        module = sys.modules.get(target.module)
        if module is None:
            continue
        try:
            if adapter_for(target).unpatch(module):
                restored.append(target.describe())
        except Exception as exc:
            logger.warning("%s could not restore %s: %r", PREFIX, target.describe(), exc)
    return restored
