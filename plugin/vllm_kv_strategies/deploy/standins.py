"""Stand-ins, for planning only, for modules a model's code imports and the
planning machine lacks: the compiled kernels of another platform (CUDA's
``vllm.vllm_flash_attn``, ROCm's ``amdsmi``), a device runtime (``torch_npu``),
a vision package (``torchvision``). On the meta device no kernel runs and no
device is touched: what the modules import is irrelevant to the KV cache a
model's attention layers declare.

A stand-in module is package-like (``import a.b.c`` below it works); each
attribute nobody set is a :class:`unittest.mock.MagicMock` named after it, so a
module can import names from it, subclass them or test them at import time.
The modules stood in are listed (:func:`stood_in`) and plan says so in one line.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from unittest.mock import MagicMock

_MARK = "__kv_plan_stand_in__"
_ROOTS: set[str] = set()
_NAMES: list[str] = []


class StandInModule(types.ModuleType):
    """A package-like module whose unknown public attributes are cached MagicMocks."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class StandInLoader(importlib.abc.Loader):
    """Makes a :class:`StandInModule` for any name its finder answers."""

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = []
        module.__file__ = f"<planning stand-in {spec.name}>"
        setattr(module, _MARK, True)
        return module

    def exec_module(self, module):
        return None


class _Finder(importlib.abc.MetaPathFinder):
    """Answers for every module under the roots stood in, before the real finders."""

    loader = StandInLoader()

    def find_spec(self, fullname, path=None, target=None):
        if not any(fullname == root or fullname.startswith(root + ".") for root in _ROOTS):
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


_FINDER = _Finder()


def is_stand_in(module) -> bool:
    return bool(getattr(module, _MARK, False))


def stand_in(*roots: str) -> list[str]:
    """Stand in for each of ``roots`` (a module and everything below it) that
    cannot be imported here; returns those stood in. A root imported for real
    (or already stood in) stays as it is."""
    added = []
    for root in roots:
        present = sys.modules.get(root)
        if root in _ROOTS or (present is not None and not is_stand_in(present)):
            continue
        try:
            importlib.import_module(root)
            continue
        except Exception:  # missing, or present and failing at import (a kernel library of another platform)
            for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
                del sys.modules[name]
        _ROOTS.add(root)
        added.append(root)
    if added:
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        for root in added:
            importlib.import_module(root).__version__ = "0.0.0+planning.stand.in"  # transformers parses it
        _NAMES.extend(added)
    return added


def stood_in() -> list[str]:
    """The modules stood in so far in this process."""
    return list(_NAMES)


def note(name: str) -> None:
    """Name one more stand-in (a layer stood in by a platform's plan) in :func:`line`, once."""
    if name not in _NAMES:
        _NAMES.append(name)


def line() -> str | None:
    """The one line plan prints about its stand-ins, or None."""
    if not _NAMES:
        return None
    return (f"stand-ins for planning only, on the meta device (not installed or not loadable here; nothing of them "
            f"runs): {', '.join(_NAMES)}")


_LENIENT: list[str] = []


def lenient_ops(*namespaces: str) -> None:
    """While a model is built (:func:`building`), ``torch.ops.<namespace>``
    answers an operator this build did not register (another platform's
    kernel, which a layer looks up when built: ``torch.ops._C.gelu_tanh_and_mul``)
    with a stand-in; registered operators are the real ones. Outside the build
    the namespaces are torch's (vLLM probes them with ``hasattr`` at import)."""
    for name in namespaces:
        if name not in _LENIENT:
            _LENIENT.append(name)
            _NAMES.append(f"torch.ops.{name}'s missing operators")


#: vLLM's modules that probe ``torch.ops._C`` at import and register fake kernels for what they find.
_PROBING = ("vllm._custom_ops", "vllm._cpu_ops")


@contextlib.contextmanager
def building():
    """The window of a model's build: the namespaces of :func:`lenient_ops` lenient."""
    import torch

    if _LENIENT:  # their imports register fake kernels for the operators they find (hasattr): before the window
        for name in _PROBING:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
    saved = {name: torch.ops.__dict__.get(name) for name in _LENIENT}
    for name in _LENIENT:
        torch.ops.__dict__[name] = _LenientOps(getattr(torch.ops, name))
    # streams and events a model makes when built (DeepSeek-V4's, Kimi's): this torch may have no CUDA
    cuda = {name: getattr(torch.cuda, name) for name in ("Stream", "Event")} if not torch.cuda.is_available() else {}
    for name in cuda:
        setattr(torch.cuda, name, MagicMock)
    try:
        yield
    finally:
        for name, real in cuda.items():
            setattr(torch.cuda, name, real)
        for name, real in saved.items():
            if real is None:
                torch.ops.__dict__.pop(name, None)
            else:
                torch.ops.__dict__[name] = real


class _LenientOps:
    def __init__(self, real):
        self._real = real

    def __getattr__(self, name: str):
        try:
            return getattr(self._real, name)
        except AttributeError:
            if name.startswith("__"):
                raise
            return MagicMock(name=f"torch.ops.{self._real.name}.{name}")


def lenient_triton() -> None:
    """Where vLLM runs without triton (its CPU build disables a triton that has
    no CPU backend: ``vllm.triton_utils``' placeholder), the placeholder made to
    answer what a GPU platform's modules read from it at import: a
    ``triton.Config`` keeps its arguments (vLLM filters autotune configs by
    ``num_stages`` for a Hopper card), and every ``triton.language`` name a
    kernel module reads (``tl.bfloat16``) is a stand-in."""
    import vllm.triton_utils as triton_utils

    if triton_utils.HAS_TRITON:
        return
    triton = triton_utils.triton
    if not isinstance(getattr(triton, "Config", None), type):
        triton.Config = _Config
        language = triton_utils.tl
        language.__class__ = type("LenientTritonLanguage", (type(language),), {"__getattr__": _stand_in_attribute})
        _NAMES.append("vLLM's triton placeholder (kernel modules' names)")


def _stand_in_attribute(module, name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    value = MagicMock(name=f"{module.__name__}.{name}")
    setattr(module, name, value)
    return value


class _Config:
    """A triton autotune config's arguments, as ``triton.Config`` keeps them."""

    def __init__(self, kwargs=None, num_warps: int = 4, num_stages: int = 3, **options):
        self.kwargs, self.num_warps, self.num_stages = dict(kwargs or {}), num_warps, num_stages
        self.__dict__.update(options)


#: Packages plan never stands in: a missing one is a broken environment, not a kernel.
_NEVER = {"vllm", "vllm_ascend", "vllm_kv_strategies", "torch", "transformers"}
#: Modules an import failed on while vLLM inspected or built a model (:func:`record_missing`).
_MISSING: list[str] = []


#: Where the code importing a missing package must live for plan to stand in for it: a model's
#: modules, its layers, attention backends and kernels (not, e.g., a KV connector's transfer engine).
_MODEL_CODE = ("model_executor", "models", "attention", "ops", "kernels")


def record_missing(exc: BaseException) -> None:
    """Note the module a ``ModuleNotFoundError`` (anywhere in ``exc``'s chain) names, where a
    model's code imported it."""
    import traceback

    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.__traceback__ is not None:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
            if frames and any(part in _MODEL_CODE for part in frames[-1].filename.replace("\\", "/").split("/")):
                _MISSING.append(exc.name)
        exc = exc.__cause__ or exc.__context__


def stand_in_missing(exc: BaseException) -> str | None:
    """After a failed inspection or build: stand in for the module it could not import
    (``exc``'s chain or one recorded while vLLM inspected the model), if plan may; returns
    its root, or None (nothing to stand in: the failure is not a missing kernel package)."""
    record_missing(exc)
    for name in reversed(_MISSING):
        root = name if name.startswith("torch.") else name.split(".")[0]  # torch.npu: a device module torch lacks
        if root not in _NEVER and stand_in(root):
            _MISSING.clear()
            return root
    _MISSING.clear()
    return None
