"""The platforms: what the plugin patches on the installed release, through one small
interface that ``register()``, ``doctor``, report and ``plan`` use.

* :mod:`.ascend`: vllm-ascend's runners (V1 and V2), its worker's budget step, its
  release facts and its side of ``plan``;
* :mod:`.upstream`: vLLM's own runners (V2; V1 up to 0.33, in ``upstream/v1.py``), its
  release facts and its side of ``plan``;
* shared by both: :mod:`.targets` (a patch target), :mod:`.adapter` (the base adapter),
  :mod:`.install` (patching from targets), :mod:`.fingerprint`, and :mod:`.matrix` (the
  support matrix: which installed release ``auto`` patches).

Importing this package is cheap: an adapter module (which imports torch and
vLLM) loads only when its runner's module is imported, and only then is the
runner patched and the patch logged.
"""

from __future__ import annotations

from types import ModuleType

from vllm_kv_strategies import patching
from vllm_kv_strategies.logger import PREFIX, logger
from vllm_kv_strategies.platforms.ascend import facts as ascend_facts
from vllm_kv_strategies.platforms.install import adapter_for, patch_when_imported, restore
from vllm_kv_strategies.platforms.targets import PatchTarget
from vllm_kv_strategies.platforms.upstream import facts as upstream_facts

__all__ = ["PLATFORMS", "adapter_for", "install", "targets", "uninstall"]

#: The platforms, as ``Installed.platform`` names them.
PLATFORMS = ("ascend", "upstream")


def targets(platform: str) -> tuple[PatchTarget, ...]:
    """What the plugin patches on ``platform`` (the installed release): the
    runners that release has (:func:`~vllm_kv_strategies.platforms.upstream.facts.targets`: no V1
    from vLLM 0.34), and on vllm-ascend 0.11 / 0.13 the hybrid page sizing
    (:func:`~vllm_kv_strategies.platforms.ascend.facts.targets`)."""
    if platform == "ascend":
        return ascend_facts.targets()
    from vllm_kv_strategies.platforms.matrix import Installed

    return upstream_facts.targets(Installed.detect().vllm)


def install(platform: str) -> tuple[PatchTarget, ...]:
    """Patch ``platform``'s runners now, or as soon as each runner's module is
    imported (:func:`~.install.patch_when_imported`: idempotent, one INFO line per
    patch applied, one warning per failure, which leaves that runner stock).
    Upstream, a runner the plugin does not cover logs one warning where it loads."""
    chosen = targets(platform)
    patch_when_imported(chosen)
    if platform == "upstream":  # a runner the plugin does not cover says so where it loads, never "patched"
        from vllm_kv_strategies.platforms.matrix import Installed

        for module_name, runner, why in upstream_facts.not_covered(Installed.detect().vllm):

            def uncovered(module: ModuleType, runner: str = runner, why: str = why) -> None:
                logger.warning("%s %s builds its KV cache stock in this worker: %s", PREFIX, runner, why)

            patching.cancel_pending(module_name)
            patching.when_imported(module_name, uncovered)
    return chosen


def uninstall() -> list[str]:
    """Restore every patched runner of both platforms and drop pending patches.
    Returns what was restored (``target.describe()``)."""
    return restore((*upstream_facts.TARGETS, *ascend_facts.ALL_TARGETS))
