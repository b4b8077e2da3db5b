"""What every runner adapter shares: the switch's policy (plan, or stock with
one warning, or observe), the report, the test-only fault, and installing the
replacements a :class:`~vllm_kv_strategies.platforms.targets.PatchTarget` declares."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vllm_kv_strategies import envs, patching
from vllm_kv_strategies.patching import owner_and_name
from vllm_kv_strategies.platforms.targets import PatchTarget
from vllm_kv_strategies.errors import KVCacheAllocationError, NothingToBuildError, StockWouldFailError, missing_input
from vllm_kv_strategies.logger import PREFIX, logger, warn_once
from vllm_kv_strategies.core.plan import KVCachePlan
from vllm_kv_strategies.report import log_summary
from vllm_kv_strategies.core.strategies import ModelDims

#: Attribute set on a runner while its stock KV cache build runs as the
#: fallback, so the plugin's other patched methods it calls stay stock too.
_STOCK_FLAG = "_kv_strategies_stock"
#: Attribute set on a runner once its patched KV cache build ran (see :meth:`RunnerAdapter.checked_initialize`).
_BUILT_FLAG = "_kv_strategies_built"


class RunnerAdapter:
    """Builds (or wraps) one runner's KV cache with the strategies.

    Subclasses set :attr:`target` and return their replacements from
    :meth:`replacements`: attribute (as in ``target.attributes``) ->
    ``fn(stock, *args, **kwargs)``, where ``stock`` is the original and, for a
    method, ``args[0]`` is the runner. A classmethod is replaced by a
    classmethod: ``stock`` is the original bound to the class the call went
    through, and ``args[0]`` is that class.
    """

    target: PatchTarget
    #: ``built_by`` when the plugin planned the build (:data:`~vllm_kv_strategies.report.summary.BUILT_BY`):
    #: ``plugin`` where its layout code allocates, ``vllm_checked`` where vLLM's own code does.
    built_with_plan = "plugin"
    #: Why the last :meth:`plan_or_fallback` fell back to stock (None: it did not).
    fallback_reason: str | None = None

    def replacements(self) -> dict[str, Callable[..., Any]]:
        raise NotImplementedError

    # -- install -----------------------------------------------------------
    def patch(self, module: Any) -> bool:
        """Replace every declared attribute of ``module``; False when they
        already were (a repeat is a no-op).

        Raises:
            AttributeError: an owner lacks a declared attribute; nothing is
                changed on that owner.
        """
        by_owner: dict[Any, dict[str, Callable[..., Any]]] = {}
        for attribute, fn in self.replacements().items():
            owner, name = owner_and_name(module, attribute)
            stock = vars(owner).get(name)
            if stock is None:
                raise AttributeError(f"{self.target.qualified(attribute)} does not exist")

            def make(fn: Callable[..., Any] = fn, stock: Any = stock) -> Any:
                if isinstance(stock, classmethod):

                    @functools.wraps(stock.__func__)
                    def bound(cls: type, *args: Any, **kwargs: Any) -> Any:
                        return fn(stock.__get__(None, cls), cls, *args, **kwargs)

                    return classmethod(bound)

                @functools.wraps(stock)
                def replacement(*args: Any, **kwargs: Any) -> Any:
                    return fn(stock, *args, **kwargs)

                return replacement

            by_owner.setdefault(owner, {})[name] = make()
        changed = False
        for owner, replacements in by_owner.items():
            changed |= patching.patch_methods(owner, replacements)
        return changed

    def patch_published(self, module: Any, mismatch: str | None) -> bool:
        """:meth:`patch`, unless ``mismatch`` says the installed code is not
        the release's published code (a ``code_mismatch`` of
        :mod:`~vllm_kv_strategies.platforms.ascend.releases`): then ``auto``
        leaves it stock with one warning and ``on`` / ``observe`` patch it,
        warning once."""
        if mismatch is not None:
            if envs.KV_STRATEGIES == "auto":
                warn_once(f"{PREFIX} {mismatch}; {self.target.runner} stays stock (KV_STRATEGIES=on patches it anyway)")
                return False
            warn_once(f"{PREFIX} {mismatch}; patching it anyway (KV_STRATEGIES={envs.KV_STRATEGIES})")
        return RunnerAdapter.patch(self, module)

    def unpatch(self, module: Any) -> bool:
        """Restore the originals; False when nothing was patched."""
        owners = {owner_and_name(module, a)[0] for a in self.target.attributes}
        return any([patching.unpatch_methods(owner) for owner in owners])

    # -- the switch's policy -------------------------------------------------
    @staticmethod
    def observing() -> bool:
        return envs.KV_STRATEGIES == "observe"

    def plan_or_fallback(self, plan: Callable[[], Any]) -> Any:
        """``plan()``, or None for "build this runner stock".

        Any failure while planning (nothing is allocated yet) leaves the whole
        runner stock in ``auto``, with one warning per worker naming the layer,
        its spec and the reason (kept in :attr:`fallback_reason` for the
        report); ``KV_STRATEGIES=on`` raises it, unless the plan read an input
        the replaced function does not read and found nothing there
        (:func:`~vllm_kv_strategies.errors.missing_input`: stock in every mode,
        one warning). A config with no layer to build
        (:class:`~vllm_kv_strategies.errors.NothingToBuildError`) is stock's, silently. A
        :class:`~vllm_kv_strategies.errors.StockWouldFailError` (stock would
        corrupt the cache or fail on it too) is raised in every mode.
        """
        self.fallback_reason = None
        try:
            return plan()
        except StockWouldFailError:
            raise
        except NothingToBuildError:
            return None
        except Exception as exc:
            missing = missing_input(exc)
            if envs.KV_STRATEGIES == "on" and missing is None:
                raise
            reason = f"its input has no {missing}" if missing else str(exc)
            warn_once(f"{PREFIX} falling back to stock KV cache for all layers: {reason}")
            self.fallback_reason = reason
            return None

    @staticmethod
    def building_stock(runner: Any) -> bool:
        """Whether ``runner`` is inside its stock build (the fallback)."""
        return bool(vars(runner).get(_STOCK_FLAG, False))

    @staticmethod
    @contextmanager
    def stock_build(runner: Any) -> Iterator[None]:
        """Mark ``runner`` as building its KV cache stock for the duration."""
        vars(runner)[_STOCK_FLAG] = True
        try:
            yield
        finally:
            vars(runner).pop(_STOCK_FLAG, None)

    @staticmethod
    def mark_built(runner: Any) -> None:
        """Record on ``runner`` that the patched KV cache build ran (plugin or stock fallback)."""
        vars(runner)[_BUILT_FLAG] = True

    def checked_initialize(self, stock: Any, runner: Any, build: str, *args: Any, **kwargs: Any) -> Any:
        """The stock ``initialize_kv_cache``, then one warning when it built the
        KV cache without ``build``, the patched method (which calls
        :meth:`mark_built`): a runner subclass overriding the build, such as
        vllm-ascend's ``NPUModelRunner310`` (310P), gets no plugin, and its
        worker's log says so instead of only ``patched``."""
        vars(runner).pop(_BUILT_FLAG, None)
        result = stock(runner, *args, **kwargs)
        if not vars(runner).pop(_BUILT_FLAG, False):
            warn_once(
                f"{PREFIX} {type(runner).__qualname__} built its KV cache without {build} "
                f"({self.target.runner}): the plugin did nothing in this worker"
            )
        return result

    # -- helpers for replacements -----------------------------------------
    @staticmethod
    def layer_dims(hf_config: Any, forward_context: dict[str, Any], model_dtype: Any = None) -> Callable[[str], ModelDims]:
        """Per layer: dimensions from its attention module, else the HF config,
        and the model's dtype (``model_config.dtype``) where given."""
        return lambda name: ModelDims.from_objects(forward_context.get(name), hf_config, model_dtype=model_dtype)

    def report(
        self, plan: KVCachePlan | None, kv_caches: dict[str, Any], kv_cache_config: Any, configs: Any = None,
        modules: dict[str, Any] | None = None, resizable: dict[str, Any] | None = None,
    ) -> None:
        """The summary line (and the JSON report where asked) of what was built,
        and by whom: :attr:`built_with_plan` with a ``plan``; else stock
        (``stock_observed`` in observe mode, ``stock_fallback`` with
        :attr:`fallback_reason`). ``configs``, anything with vLLM's
        ``model_config`` and ``parallel_config`` (the runner, or its
        ``VllmConfig``), names the model, the worker's data parallel rank and
        vLLM's capacity; ``modules`` (layer -> attention module; defaults to
        its ``static_forward_context``) each layer's own window; ``resizable`` which views of a
        resizable KV cache these are (:func:`~vllm_kv_strategies.report.write.build_report`)."""
        vllm_config = getattr(configs, "vllm_config", configs)
        if modules is None:
            compilation = getattr(configs, "compilation_config", None) or getattr(vllm_config, "compilation_config", None)
            modules = getattr(compilation, "static_forward_context", None)
        built_by = self.built_with_plan if plan is not None else "stock_observed" if self.observing() else "stock_fallback"
        log_summary(
            plan, kv_caches, kv_cache_config=kv_cache_config, mode=envs.KV_STRATEGIES,
            model=getattr(getattr(configs, "model_config", None), "model", None), runner=self.target.runner,
            parallel_config=getattr(configs, "parallel_config", None), built_by=built_by,
            fallback_reason=self.fallback_reason if built_by == "stock_fallback" else None,
            vllm_config=vllm_config, modules=modules, resizable=resizable,
        )

    @staticmethod
    def inject_test_fault(plan: KVCachePlan, kv_caches: dict[str, Any], forward_context: dict[str, Any] | None = None) -> None:
        """``KV_STRATEGIES_TEST_FAULT=share_group_cache``: bind the second layer
        of the first group with two or more layers to the first one's cache.
        With ``forward_context`` (caches bound already) the layer is rebound."""
        if envs.KV_STRATEGIES_TEST_FAULT != "share_group_cache":
            return
        by_group: dict[int, list[str]] = {}
        for lp in plan.layers.values():
            by_group.setdefault(lp.group_id, []).append(lp.name)
        for names in by_group.values():
            if len(names) >= 2:
                logger.warning("%s TEST FAULT: %s bound to the cache of %s", PREFIX, names[1], names[0])
                kv_caches[names[1]] = kv_caches[names[0]]
                if forward_context is not None:  # bound already: bind the second layer again, as stock binds
                    layer, cache = forward_context[names[1]], kv_caches[names[0]]
                    layer.bind_kv_cache(cache) if hasattr(layer, "bind_kv_cache") else setattr(layer, "kv_cache", cache)
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
        raise KVCacheAllocationError(f"allocating {nbytes} bytes of KV cache for layer {layer!r} failed{free}: {exc}") from exc
