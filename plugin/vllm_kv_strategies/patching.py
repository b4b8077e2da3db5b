"""Reversible patches of runner methods and module functions, applied when
their module loads.

* :func:`patch_methods` replaces methods on the class that defines them (or
  functions on their module) and records the originals there (``__kv_strategies_originals__``): the
  record is the idempotency marker, and :func:`unpatch_methods` restores the
  original function objects.
* :func:`when_imported` runs a callback once a module has been imported: now,
  if it already is, or right after its first import. ``register()`` thus
  costs microseconds in processes that never load a model runner (the API
  server), and the runner module is patched before any caller sees it.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

MARKER = "__kv_strategies_originals__"


def is_patched(cls: type) -> bool:
    return MARKER in cls.__dict__


def original(cls: type, name: str) -> Any:
    """The stock attribute ``name`` of ``cls``, patched or not."""
    return cls.__dict__.get(MARKER, {}).get(name, cls.__dict__.get(name))


def owner_and_name(module: Any, attribute: str) -> tuple[Any, str]:
    """Where a declared attribute lives: ``"Class.method"`` -> (the class,
    ``"method"``); ``"function"`` -> (the module, ``"function"``).

    Raises:
        AttributeError: ``module`` has no such class.
    """
    owner_path, _, name = attribute.rpartition(".")
    owner = module
    for part in owner_path.split(".") if owner_path else ():
        owner = getattr(owner, part)
    return owner, name


def patch_methods(cls: type, replacements: dict[str, Callable[..., Any]]) -> bool:
    """Replace methods that ``cls`` itself defines. Returns False (and changes
    nothing) when ``cls`` is already patched.

    Raises:
        AttributeError: ``cls`` does not define one of the methods itself
            (patching an inherited one would miss overrides); nothing is changed.
    """
    if is_patched(cls):
        return False
    missing = [name for name in replacements if name not in cls.__dict__]
    if missing:
        raise AttributeError(f"{cls.__qualname__} does not define {', '.join(missing)}")
    originals = {name: cls.__dict__[name] for name in replacements}
    for name, fn in replacements.items():
        # a classmethod's own __wrapped__ is read-only: mark the function it wraps
        getattr(fn, "__func__", fn).__wrapped__ = originals[name]  # type: ignore[attr-defined]
        setattr(cls, name, fn)
    setattr(cls, MARKER, originals)
    return True


def unpatch_methods(cls: type) -> bool:
    """Restore the original methods. Returns False if ``cls`` was not patched."""
    originals = cls.__dict__.get(MARKER)
    if originals is None:
        return False
    for name, fn in originals.items():
        setattr(cls, name, fn)
    delattr(cls, MARKER)
    return True


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of watched modules so callbacks run after exec."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.callbacks or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.name = None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        callbacks = self.callbacks
        exec_module = loader.exec_module

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            for callback in callbacks.pop(fullname, []):
                callback(module)

        loader.exec_module = exec_then_call  # type: ignore[method-assign]
        return spec


_finder = _PostImportFinder()


def when_imported(module_name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    _finder.callbacks.setdefault(module_name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def cancel_pending(module_name: str | None = None) -> None:
    """Drop callbacks not yet run (all, or those of one module)."""
    if module_name is None:
        _finder.callbacks.clear()
    else:
        _finder.callbacks.pop(module_name, None)
    if not _finder.callbacks and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
