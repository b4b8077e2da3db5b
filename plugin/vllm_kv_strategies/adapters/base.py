"""What every runner adapter shares: planning from runner state, the stock
fallback, the test-only fault, and install / uninstall on the runner class."""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from .. import compat, envs, patching
from ..errors import IncompatibleRunnerError, KVCacheAllocationError, UnsupportedSpecError
from ..logger import PREFIX, logger
from ..plan import KVCachePlan, plan_kv_cache
from ..strategies import ModelDims


class RunnerAdapter(ABC):
    """Replaces the KV cache methods of one model runner class.

    Subclasses name their :class:`~vllm_kv_strategies.compat.PatchTarget` and
    implement the replacements; each replacement receives the stock method as
    its first argument so it can fall back to it.
    """

    target: compat.PatchTarget
    #: Runner attributes the replacements read; a runner lacking one is an
    #: unsupported release (stock is kept in ``auto``).
    runner_attrs: tuple[str, ...] = ()

    @abstractmethod
    def replacements(self) -> dict[str, Callable[..., Any]]:
        """method name -> ``fn(stock, runner, *args, **kwargs)``."""

    # -- install ---------------------------------------------------------
    def resolve_class(self, module: Any = None) -> type:
        module = module or importlib.import_module(self.target.module)
        return getattr(module, self.target.qualname)

    def patch(self, cls: type) -> bool:
        """Patch ``cls``; False when it already was (a repeat is a no-op)."""
        wrapped = {}
        for name, fn in self.replacements().items():
            stock = cls.__dict__[name] if name in cls.__dict__ else None

            def make(fn: Callable[..., Any] = fn, stock: Any = stock) -> Callable[..., Any]:
                @functools.wraps(stock)
                def method(runner: Any, *args: Any, **kwargs: Any) -> Any:
                    return fn(stock, runner, *args, **kwargs)

                return method

            wrapped[name] = make()
        return patching.patch_methods(cls, wrapped)

    # -- helpers for replacements -----------------------------------------
    @staticmethod
    def layer_dims(runner: Any) -> Callable[[str], ModelDims]:
        """Per layer: dimensions from its attention module, else the HF config."""
        model_config = getattr(runner, "model_config", None) or runner.vllm_config.model_config
        hf = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
        layers = runner.compilation_config.static_forward_context
        return lambda name: ModelDims.from_objects(layers.get(name), hf)

    def plan_or_fallback(self, runner: Any, kv_cache_config: Any) -> KVCachePlan | None:
        """Plan every layer; None means "use stock for this runner".

        In ``auto`` a spec kind no strategy handles, or a runner without the
        state this adapter reads, keeps stock behaviour for all layers (never a
        mix) with one warning; with ``KV_STRATEGIES=on`` the error propagates.
        """
        try:
            missing = [a for a in self.runner_attrs if not hasattr(runner, a)]
            if missing:
                raise IncompatibleRunnerError(
                    f"{type(runner).__qualname__} has no {', '.join(missing)}; this release is not supported"
                )
            return plan_kv_cache(
                kv_cache_config,
                self.layer_dims(runner),
                skip_layers=set(getattr(runner, "runner_only_attn_layers", ()) or ()),
            )
        except (UnsupportedSpecError, IncompatibleRunnerError) as exc:
            if envs.KV_STRATEGIES == "on":
                raise
            logger.warning("%s falling back to stock KV cache for all layers: %s", PREFIX, exc)
            return None

    @staticmethod
    def inject_test_fault(plan: KVCachePlan, kv_caches: dict[str, Any]) -> None:
        """``KV_STRATEGIES_TEST_FAULT=share_group_cache``: bind the second layer
        of the first group with two or more layers to the first one's cache."""
        if envs.KV_STRATEGIES_TEST_FAULT != "share_group_cache":
            return
        by_group: dict[int, list[str]] = {}
        for lp in plan.layers.values():
            by_group.setdefault(lp.group_id, []).append(lp.name)
        for names in by_group.values():
            if len(names) >= 2:
                logger.warning("%s TEST FAULT: %s bound to the cache of %s", PREFIX, names[1], names[0])
                kv_caches[names[1]] = kv_caches[names[0]]
                return
        logger.warning("%s TEST FAULT: no KV cache group has two layers of its own; nothing injected", PREFIX)


def allocate_bytes(nbytes: int, device: Any, layer: str) -> Any:
    """``torch.zeros(nbytes, int8)`` on ``device``; a failure becomes a
    :class:`KVCacheAllocationError` naming the layer, the bytes asked for and,
    where the device reports it, the bytes free."""
    import torch

    try:
        return torch.zeros(nbytes, dtype=torch.int8, device=device)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        free = ""
        device_type = getattr(device, "type", str(device))
        module = getattr(torch, device_type, None)
        if device_type != "cpu" and hasattr(module, "mem_get_info"):
            try:
                free = f" ({module.mem_get_info(device)[0]} bytes free)"
            except Exception:
                pass
        raise KVCacheAllocationError(
            f"allocating {nbytes} bytes of KV cache for layer {layer!r} failed{free}: {exc}"
        ) from exc
