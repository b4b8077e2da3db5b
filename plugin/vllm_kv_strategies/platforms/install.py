"""Patching a platform's runners from its declared targets (:class:`~.targets.PatchTarget`):
now if the runner's module is imported, else when it is; and restoring them. The
platform packages' own code may use this; which targets a platform has is theirs to say."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from types import ModuleType

from vllm_kv_strategies import patching
from vllm_kv_strategies.logger import PREFIX, logger
from vllm_kv_strategies.platforms.targets import PatchTarget


def adapter_for(target: PatchTarget):
    """A new instance of the adapter ``target`` names (``module:Class``)."""
    module, name = target.adapter.split(":")
    return getattr(importlib.import_module(module), name)()


def patch_when_imported(chosen: Iterable[PatchTarget]) -> None:
    """Patch each target's runner now, or as soon as its module is imported. Idempotent. Each
    patch logs one INFO line naming what it replaced when (and only when) it is applied; a
    failure logs one warning and leaves that runner stock."""
    for target in chosen:

        def on_import(module: ModuleType, target: PatchTarget = target) -> None:
            try:
                if adapter_for(target).patch(module):
                    logger.info("%s patched %s (%s)", PREFIX, target.describe(), target.runner)
            except Exception as exc:  # never break the import of vLLM's runner
                logger.warning("%s could not patch %s, its KV cache stays stock: %r", PREFIX, target.describe(), exc)

        patching.cancel_pending(target.module)
        patching.when_imported(target.module, on_import)


def restore(every: Iterable[PatchTarget]) -> list[str]:
    """Drop pending patches and restore each patched runner of ``every``. Returns what was
    restored (``target.describe()``)."""
    restored = []
    patching.cancel_pending()
    for target in every:
        module = sys.modules.get(target.module)
        if module is None:
            continue
        try:
            if adapter_for(target).unpatch(module):
                restored.append(target.describe())
        except Exception as exc:
            logger.warning("%s could not restore %s: %r", PREFIX, target.describe(), exc)
    return restored
