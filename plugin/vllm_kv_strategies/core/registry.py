"""Strategy registry: spec class -> strategies, matched on the spec's own class.

Shaped like vLLM's ``vllm/v1/kv_cache_spec_registry.py`` (repeat registration
is a no-op, a conflict raises, an unknown spec gets an actionable message),
with one deliberate difference: a spec is served only by a strategy that lists
its exact class. vLLM subclasses specs for things other than layout
(``HiddenStateCacheSpec`` is an ``MLAAttentionSpec`` that stores hidden states),
so walking up the MRO would hand a class the plugin does not understand to the
strategy of its base; such a spec is unsupported instead, which leaves the
runner stock in ``auto``. Within one class, strategies with a ``matches``
predicate are tried before plain ones.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from vllm_kv_strategies.errors import UnsupportedSpecError
from vllm_kv_strategies.logger import PREFIX, logger
from vllm_kv_strategies.core.strategies import BUILTIN_STRATEGIES, REFUSED_SPEC_CLASSES, KVCacheStrategy

#: Entry point group through which other packages add strategies.
ENTRY_POINT_GROUP = "vllm_kv_strategies.strategies"


def _has_predicate(strategy: KVCacheStrategy) -> bool:
    return type(strategy).matches is not KVCacheStrategy.matches


class StrategyRegistry:
    """Maps KV cache spec classes to :class:`KVCacheStrategy` instances."""

    def __init__(self) -> None:
        self._by_type: dict[type, list[KVCacheStrategy]] = {}
        self._registered: list[KVCacheStrategy] = []

    def register(self, strategy: KVCacheStrategy | type[KVCacheStrategy]) -> KVCacheStrategy:
        """Register ``strategy`` for each class in its ``spec_types()``.

        Raises:
            TypeError: ``strategy`` is not a KVCacheStrategy.
            ValueError: another plain strategy already serves one of the classes.
        """
        if isinstance(strategy, type) and issubclass(strategy, KVCacheStrategy):
            strategy = strategy()
        if not isinstance(strategy, KVCacheStrategy):
            raise TypeError(f"{strategy!r} is not a KVCacheStrategy (class or instance)")
        if not isinstance(getattr(strategy, "name", None), str):
            raise TypeError(f"{type(strategy).__qualname__} has no str 'name'")
        spec_types = tuple(strategy.spec_types())
        if not spec_types and self.is_builtin(strategy):
            return strategy  # a kind the installed release does not define (e.g. no HiddenStateCacheSpec in vLLM 0.11)
        if not spec_types or not all(isinstance(t, type) for t in spec_types):
            raise TypeError(f"{type(strategy).__qualname__}.spec_types() must return classes, got {spec_types!r}")
        # Check every class before changing any: a refused strategy must not
        # stay registered for the classes listed before the clashing one.
        for spec_type in spec_types if not _has_predicate(strategy) else ():
            entries = self._by_type.get(spec_type, [])
            if any(type(s) is type(strategy) for s in entries):
                continue
            clash = [s for s in entries if not _has_predicate(s)]
            if clash:
                raise ValueError(
                    f"{spec_type.__name__} is already served by {clash[0]!r}; "
                    f"{strategy!r} needs a matches() predicate to share it"
                )
        for spec_type in spec_types:
            entries = self._by_type.setdefault(spec_type, [])
            if any(type(s) is type(strategy) for s in entries):
                continue
            entries.append(strategy)
            entries.sort(key=lambda s: not _has_predicate(s))
        if not any(type(s) is type(strategy) for s in self._registered):
            self._registered.append(strategy)
        return strategy

    def refuse(self, strategy: KVCacheStrategy) -> None:
        """Remove ``strategy`` from every spec class it serves."""
        for entries in self._by_type.values():
            if strategy in entries:
                entries.remove(strategy)

    @staticmethod
    def is_builtin(strategy: KVCacheStrategy) -> bool:
        return type(strategy) in BUILTIN_STRATEGIES

    def find(self, spec: Any) -> KVCacheStrategy | None:
        """The strategy for ``spec`` (matched on ``type(spec)`` exactly), or
        None if no strategy handles it."""
        for strategy in list(self._by_type.get(type(spec), ())):
            try:
                if strategy.matches(spec):
                    return strategy
            except Exception as exc:
                if self.is_builtin(strategy):
                    raise
                logger.warning("%s refused third-party strategy %r: matches() raised %r", PREFIX, strategy, exc)
                self.refuse(strategy)
        return None

    def resolve(self, spec: Any) -> KVCacheStrategy:
        """Like :meth:`find`, but raises :class:`UnsupportedSpecError` naming
        the spec type, why it is refused or which served class it derives
        from, and the registered kinds, when nothing matches."""
        strategy = self.find(spec)
        if strategy is None:
            cls = type(spec)
            reason = REFUSED_SPEC_CLASSES.get(cls.__name__)
            if reason is None:
                served = next((c for c in cls.__mro__[1:] if c in self._by_type), None)
                reason = (
                    f"a subclass of {served.__name__} that no strategy lists (it may change the layout)"
                    if served is not None
                    else "no strategy serves it"
                )
            raise UnsupportedSpecError(
                f"no KV cache strategy for spec type {cls.__qualname__} ({cls.__module__}): {reason}; "
                f"registered kinds: {self.describe()}. "
                f"Add one through the {ENTRY_POINT_GROUP!r} entry point group."
            )
        return strategy

    def strategies(self) -> list[KVCacheStrategy]:
        """The registered strategies, in the order they were registered (the
        built-in ones in ``BUILTIN_STRATEGIES`` order)."""
        seen: dict[type, KVCacheStrategy] = {}
        for entries in self._by_type.values():
            for s in entries:
                seen.setdefault(type(s), s)
        order = {type(s): i for i, s in enumerate(self._registered)}
        return sorted(seen.values(), key=lambda s: order[type(s)])

    def served_types(self, strategy: KVCacheStrategy) -> list[type]:
        """The spec classes ``strategy`` is registered for."""
        return [t for t, entries in self._by_type.items() if strategy in entries]

    @staticmethod
    def has_predicate(strategy: KVCacheStrategy) -> bool:
        return _has_predicate(strategy)

    def describe(self) -> str:
        """e.g. ``full_attention (FullAttentionSpec, SlidingWindowSpec); mla (...)``."""
        return "; ".join(
            f"{s.name} ({', '.join(t.__name__ for t in self.served_types(s))})" for s in self.strategies()
        )


def load_entry_point_strategies(registry: StrategyRegistry, eps: Iterable[Any] | None = None) -> None:
    """Add the strategies other packages declare under :data:`ENTRY_POINT_GROUP`.

    One that fails to import, is not a strategy, or clashes with a registered
    one is logged and refused; the others stay registered.
    """
    for ep in entry_points(group=ENTRY_POINT_GROUP) if eps is None else eps:
        try:
            strategy = registry.register(ep.load())
            logger.info("%s added strategy %s from entry point %s", PREFIX, strategy.name, ep.name)
        except Exception as exc:  # a broken third-party package must not stop vLLM
            logger.warning("%s refused strategy entry point %s = %s: %s", PREFIX, ep.name, ep.value, exc)


_default: StrategyRegistry | None = None
_lock = threading.Lock()


def default_registry() -> StrategyRegistry:
    """The process-wide registry: built-ins plus entry point strategies, built
    on first use (this imports vLLM's spec classes)."""
    global _default
    with _lock:
        if _default is None:
            registry = StrategyRegistry()
            for strategy in BUILTIN_STRATEGIES:
                registry.register(strategy)
            load_entry_point_strategies(registry)
            _default = registry
        return _default


def reset_default_registry() -> None:
    """Forget the process-wide registry (tests)."""
    global _default
    with _lock:
        _default = None
