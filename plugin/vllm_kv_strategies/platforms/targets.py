"""The declaration of one patched runner: where, what, why, and until when.

Each runner the plugin patches is declared once, in the compatibility module
of its platform (:mod:`.upstream`, :mod:`.ascend`), in the spirit of the
Why / How / Related PR / Future Plan notes of vllm-ascend's ``patch/``
package. :mod:`vllm_kv_strategies.platforms` installs the declarations;
``doctor`` prints them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PatchTarget:
    """A runner whose KV cache build the plugin replaces or wraps.

    Attributes:
        name: short id used in logs and reports, e.g. ``"upstream-v1"``.
        runner: what users call it, e.g. ``"GPUModelRunner (V1)"``.
        module: the module that defines the patched attributes; patching
            waits until it is imported.
        attributes: dotted paths inside ``module``, ``"Class.method"`` or a
            module-level ``"function"``; each is replaced on the object that
            defines it and restored by ``unregister()``.
        adapter: ``"module:Class"`` of the adapter that provides the
            replacements (imported only once ``module`` is).
        why: what the replacement adds or changes.
        mirrors: the upstream code (function, file, release or PR) whose
            behaviour the replacement follows or wraps.
        remove_when: when this patch can go.
    """

    name: str
    runner: str
    module: str
    attributes: tuple[str, ...]
    adapter: str
    why: str
    mirrors: str
    remove_when: str

    def qualified(self, attribute: str) -> str:
        return f"{self.module}.{attribute}"

    def binding(self, name: str) -> Any:
        """``name`` as the patched module's own code looks it up when it runs:
        the module's global (``from x import name`` in that module), which a
        test or another plugin may have rebound. A replacement reads its
        inputs through this, so that it reads what the function it replaces
        reads, from where that one reads it.

        Raises:
            AttributeError: the module has no such global (or is not imported).
        """
        module = sys.modules.get(self.module)
        if module is None:
            raise AttributeError(f"{self.module} is not imported, so it binds no {name!r}")
        return getattr(module, name)

    def describe(self) -> str:
        """``module.{Class.method, function}``: what is patched, for logs."""
        return f"{self.module}.{{{', '.join(self.attributes)}}}"
