"""Planning: which strategy builds each layer's cache, checked before allocating.

A :class:`KVCachePlan` is derived from a vLLM ``KVCacheConfig`` alone: every
layer's own spec (never a substring of its name, never only the group's merged
spec), the strategy the registry resolves for it, the parts of its page and the
``KVCacheTensor`` that serves it. Building the plan validates the config, so
nothing is allocated for a config that cannot be laid out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from vllm_kv_strategies.core.specs import layer_spec, tensor_layers, unpadded_page_bytes
from vllm_kv_strategies.errors import (
    KVCacheLayoutError,
    KVStrategiesError,
    ModelLayerMismatchError,
    UnsupportedSpecError,
)
from vllm_kv_strategies.logger import PREFIX, logger
from vllm_kv_strategies.core.registry import StrategyRegistry, default_registry
from vllm_kv_strategies.core.strategies import KVCacheStrategy, ModelDims, PagePart


@dataclass(frozen=True)
class LayerPlan:
    """How one layer's cache is built.

    Attributes:
        name: the layer name, e.g. ``model.layers.3.self_attn.attn``.
        group_id: index of its KV cache group.
        spec: the layer's own KV cache spec.
        strategy: the strategy the registry resolved for ``spec``.
        parts: ``strategy.page_parts(spec)``; their bytes add up to the page.
        tensor_id: index of the ``KVCacheTensor`` that serves it.
    """

    name: str
    group_id: int
    spec: Any
    strategy: KVCacheStrategy
    parts: tuple[PagePart, ...]
    tensor_id: int

    @property
    def page_bytes(self) -> int:
        """Bytes per block without padding (sum of the parts)."""
        return sum(p.nbytes for p in self.parts)

    @cached_property
    def padded_page_bytes(self) -> int:
        """Bytes per block the config reserves (``spec.page_size_bytes``; asked of the spec once,
        since vLLM computes it on every access)."""
        return self.spec.page_size_bytes

    @property
    def family(self):
        return self.strategy.family

    @property
    def kind(self) -> str:
        """What the summary line calls this layer (``sliding_window``, ...)."""
        return self.strategy.kind(self.spec)

    def describe(self) -> str:
        """``layer 'x' (FullAttentionSpec, full_attention)``, for errors."""
        return f"layer {self.name!r} ({type(self.spec).__name__}, {self.strategy.name})"


@dataclass
class KVCachePlan:
    """Per-layer plan of a ``KVCacheConfig``; see :func:`plan_kv_cache`."""

    kv_cache_config: Any
    layers: dict[str, LayerPlan] = field(default_factory=dict)

    @property
    def tensors(self) -> list[Any]:
        return list(self.kv_cache_config.kv_cache_tensors)

    def layers_of(self, tensor_id: int) -> list[LayerPlan]:
        return [lp for lp in self.layers.values() if lp.tensor_id == tensor_id]

    def strategy_counts(self) -> Counter[str]:
        return Counter(lp.strategy.name for lp in self.layers.values())

    def kind_counts(self) -> Counter[str]:
        """Layers per kind: strategy names, with windowed attention named as such."""
        return Counter(lp.kind for lp in self.layers.values())


def plan_kv_cache(
    kv_cache_config: Any,
    dims: ModelDims | Callable[[str], ModelDims] = ModelDims(),
    *,
    registry: StrategyRegistry | None = None,
    skip_layers: Collection[str] = (),
    model_layers: Collection[str] | None = None,
) -> KVCachePlan:
    """Resolve and check a strategy for every layer of ``kv_cache_config``.

    Args:
        kv_cache_config: vLLM's ``KVCacheConfig`` (either ``KVCacheTensor`` form).
        dims: model dimensions some specs lack (MLA nope/rope split), or a
            function giving them per layer name.
        registry: defaults to :func:`default_registry`.
        skip_layers: layers the runner handles alone (``runner_only_attn_layers``,
            cross-layer KV sharing); they need no tensor.
        model_layers: the attention layers the model has (the runner's
            ``static_forward_context``), when the runner binds every layer
            of the config by name; None skips that check.

    Raises:
        UnsupportedSpecError: a layer's spec type has no strategy.
        ModelLayerMismatchError: the config names layers ``model_layers`` lacks.
        KVCacheLayoutError: a layer is served by no tensor or by several; a
            strategy's parts disagree with the spec's page size; a strategy
            cannot split the spec (the message names the layer).
    """
    registry = registry or default_registry()
    tensor_of: dict[str, int] = {}
    for tid, tensor in enumerate(kv_cache_config.kv_cache_tensors):
        for name in tensor_layers(tensor):
            if name in tensor_of:
                raise KVCacheLayoutError(f"layer {name!r} is served by KV cache tensors {tensor_of[name]} and {tid}")
            tensor_of[name] = tid
    if model_layers is not None:
        named = {n for g in kv_cache_config.kv_cache_groups for n in g.layer_names} | set(tensor_of)
        missing = sorted(named - set(model_layers) - set(skip_layers))
        if missing:
            raise ModelLayerMismatchError(
                f"the KV cache config names {len(missing)} layers the model does not have "
                f"({', '.join(missing[:8])}{', ...' if len(missing) > 8 else ''}); the model has "
                f"{len(model_layers)} attention layers. A pipeline stage's config must list only its own layers."
            )

    plan = KVCachePlan(kv_cache_config)
    pages: dict[int, int] = {}  # id(spec) -> its unpadded page: layers of a group share their spec
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        for name in group.layer_names:
            if name in skip_layers:
                continue
            spec = layer_spec(group.kv_cache_spec, name)
            if name not in tensor_of:
                raise KVCacheLayoutError(
                    f"layer {name!r} ({type(spec).__name__}, group {gid}) is served by no KV cache tensor"
                )
            strategy, parts = _resolve_parts(registry, name, spec, dims(name) if callable(dims) else dims, pages)
            plan.layers[name] = LayerPlan(name, gid, spec, strategy, parts, tensor_of[name])
    return plan


def _resolve_parts(
    registry: StrategyRegistry, name: str, spec: Any, dims: ModelDims, pages: dict[int, int]
) -> tuple[KVCacheStrategy, tuple[PagePart, ...]]:
    """Resolve ``spec`` and check its parts against the spec's page size
    (``pages``: id(spec) -> its unpadded page, filled on first use).

    A third-party strategy that fails here is logged and refused (removed from
    the registry) and the spec is resolved again; a built-in one's error is
    raised again naming the layer.
    """
    while True:
        try:
            strategy = registry.resolve(spec)
        except UnsupportedSpecError as exc:
            raise UnsupportedSpecError(f"layer {name!r}: {exc}") from exc
        try:
            parts = strategy.page_parts(spec, dims)
            page = sum(p.nbytes for p in parts)
            unpadded = pages[id(spec)] if id(spec) in pages else pages.setdefault(id(spec), unpadded_page_bytes(spec))
            if page != unpadded:
                raise KVCacheLayoutError(
                    f"strategy {strategy.name} lays out {page} bytes per block "
                    f"({', '.join(f'{p.name} {p.nbytes}' for p in parts)}) but "
                    f"{type(spec).__name__} says {unpadded}"
                )
            return strategy, parts
        except Exception as exc:
            if registry.is_builtin(strategy):
                if isinstance(exc, KVStrategiesError):
                    raise type(exc)(f"layer {name!r} ({type(spec).__name__}): {exc}") from exc
                raise KVCacheLayoutError(
                    f"layer {name!r} ({type(spec).__name__}): strategy {strategy.name} failed: {exc!r}"
                ) from exc
            logger.warning("%s refused third-party strategy %r: %s", PREFIX, strategy, exc)
            registry.refuse(strategy)
