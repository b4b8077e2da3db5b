"""The strategy registry: exact-class resolution (a subclass no strategy lists is not
served), predicates, conflicts, entry points."""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
from dataclasses import dataclass

import pytest
import torch

from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    SparseCacheRole,
)
from vllm_kv_strategies.errors import UnsupportedSpecError
from vllm_kv_strategies.core.registry import (
    ENTRY_POINT_GROUP,
    StrategyRegistry,
    default_registry,
    reset_default_registry,
)
from vllm_kv_strategies.core.strategies import (
    BUILTIN_STRATEGIES,
    FullAttentionStrategy,
    KVCacheStrategy,
    MambaStrategy,
    MLAStrategy,
    PagePart,
    SparseMLAStrategy,
)

BF16 = torch.bfloat16


def full(**kw):
    return FullAttentionSpec(**{**dict(block_size=16, num_kv_heads=8, head_size=128, dtype=BF16), **kw})


def mla(**kw):
    return MLAAttentionSpec(**{**dict(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16), **kw})


def indexer():
    return mla(head_size=132, dtype=torch.uint8, cache_role=SparseCacheRole.INDEXER)


def mamba():
    return MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, torch.float32))


@dataclass(frozen=True, kw_only=True)
class VendorMLASpec(MLAAttentionSpec):
    """A vendor's MLA spec subclass (as vllm-ascend has)."""

    vendor_flag: bool = True


@dataclass(frozen=True, kw_only=True)
class VendorFullSpec(FullAttentionSpec):
    vendor_flag: bool = True


@dataclass(frozen=True)
class OwnSpec(KVCacheSpec):
    """A spec type no built-in strategy knows."""

    width: int = 8

    @property
    def page_size_bytes(self) -> int:
        return self.block_size * self.width


class OwnStrategy(KVCacheStrategy):
    name = "own"

    @classmethod
    def spec_types(cls):
        return (OwnSpec,)

    def page_parts(self, spec, dims):
        return (PagePart("own", torch.uint8, (spec.block_size, spec.width)),)


class SecondFullStrategy(KVCacheStrategy):
    """A plain (no predicate) strategy for a class full attention already serves."""

    name = "second_full"

    @classmethod
    def spec_types(cls):
        return (FullAttentionSpec,)

    def page_parts(self, spec, dims):
        return ()


class OwnAndFullStrategy(SecondFullStrategy):
    """Plain; its own spec type first, then one that clashes."""

    name = "own_and_full"

    @classmethod
    def spec_types(cls):
        return (OwnSpec, FullAttentionSpec)


class WideFullStrategy(SecondFullStrategy):
    """Shares FullAttentionSpec through a predicate."""

    name = "wide_full"

    def matches(self, spec):
        return spec.head_size > 256


@pytest.fixture
def builtins() -> StrategyRegistry:
    registry = StrategyRegistry()
    for strategy in BUILTIN_STRATEGIES:
        registry.register(strategy)
    return registry


# ---------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (full(), FullAttentionStrategy),
        (
            SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, sliding_window=8),
            FullAttentionStrategy,
        ),
        (
            ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, attention_chunk_size=8),
            FullAttentionStrategy,
        ),
        (mla(), MLAStrategy),
        (indexer(), SparseMLAStrategy),
        (mamba(), MambaStrategy),
    ],
    ids=["full", "sliding", "chunked", "mla", "indexer", "mamba"],
)
def test_builtin_specs_resolve(builtins, spec, expected):
    assert type(builtins.resolve(spec)) is expected


def test_mla_spec_does_not_resolve_to_full_attention(builtins):
    # MLAAttentionSpec subclasses FullAttentionSpec: the most specific class wins.
    assert issubclass(MLAAttentionSpec, FullAttentionSpec)
    assert type(builtins.resolve(mla())) is MLAStrategy
    assert not isinstance(builtins.resolve(mla()), FullAttentionStrategy)


def test_subclasses_no_strategy_lists_are_not_served(builtins):
    """A subclass may change what a page means (HiddenStateCacheSpec is an MLAAttentionSpec
    that stores hidden states): the registry never hands it to its base class's strategy."""
    vendor_mla = VendorMLASpec(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16)
    vendor_indexer = VendorMLASpec(
        block_size=64, num_kv_heads=1, head_size=132, dtype=torch.uint8, cache_role=SparseCacheRole.INDEXER
    )
    vendor_full = VendorFullSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=BF16)
    for spec, base in ((vendor_mla, "MLAAttentionSpec"), (vendor_indexer, "MLAAttentionSpec"), (vendor_full, "FullAttentionSpec")):
        assert builtins.find(spec) is None
        with pytest.raises(UnsupportedSpecError, match=f"{type(spec).__name__} .*a subclass of {base} that no strategy lists"):
            builtins.resolve(spec)


def test_a_strategy_that_lists_a_subclass_serves_it(builtins):
    class VendorMLAStrategy(MLAStrategy):
        name = "vendor_mla"

        @classmethod
        def spec_types(cls):
            return (VendorMLASpec,)

    builtins.register(VendorMLAStrategy)
    assert builtins.resolve(VendorMLASpec(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16)).name == "vendor_mla"
    assert type(builtins.resolve(mla())) is MLAStrategy  # the base class keeps its own


def test_predicate_strategies_are_tried_first_whatever_the_order():
    registry = StrategyRegistry()
    registry.register(FullAttentionStrategy)
    registry.register(MLAStrategy)  # the plain one first ...
    registry.register(SparseMLAStrategy)  # ... then the one with a predicate
    assert type(registry.resolve(indexer())) is SparseMLAStrategy
    assert type(registry.resolve(mla())) is MLAStrategy


def test_predicate_strategy_can_share_a_class_with_a_plain_one(builtins):
    wide = builtins.register(WideFullStrategy)
    assert builtins.resolve(full(head_size=512)) is wide
    assert type(builtins.resolve(full(head_size=128))) is FullAttentionStrategy


def test_find_returns_none_and_resolve_raises_for_unknown_specs(builtins):
    spec = VendorFullSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=BF16)
    assert builtins.find(spec) is None
    with pytest.raises(UnsupportedSpecError) as info:
        builtins.resolve(spec)
    message = str(info.value)
    assert "VendorFullSpec" in message
    assert "test_registry" in message
    for kind in ("full_attention", "mla", "sparse_mla", "mamba"):
        assert f"{kind} (" in message
    assert ENTRY_POINT_GROUP in message


def test_unknown_spec_message_names_a_test_class(builtins):
    with pytest.raises(UnsupportedSpecError, match=r"OwnSpec \(test_registry\)"):
        builtins.resolve(OwnSpec(block_size=16))


def test_describe_lists_kinds_and_their_spec_classes(builtins):
    kinds = {entry.split(" (")[0]: entry.split(" (")[1].rstrip(")").split(", ") for entry in builtins.describe().split("; ")}
    # upstream vLLM: no vllm-ascend spec classes, so no fa_quant_mla / sparse_mla_c8 (skipped, not registered)
    assert set(kinds) == {
        "full_attention", "quant_attention", "bsh_attention", "sparse_mla", "fp8_ds_mla", "mla", "mamba", "hidden_state"
    }
    assert kinds["bsh_attention"] == ["BSHAttentionSpec"]  # the plugin's restatement (vllm-ascend 0.11's int8 layout)
    assert kinds["full_attention"][:3] == ["FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec"]
    assert kinds["quant_attention"] == kinds["full_attention"]
    assert kinds["fp8_ds_mla"] == ["MLAAttentionSpec"]
    assert kinds["mla"] == ["MLAAttentionSpec", "SlidingWindowMLASpec"]
    assert kinds["sparse_mla"] == ["MLAAttentionSpec", "SlidingWindowMLASpec", "LegacySparseMLASpec"]
    assert (kinds["mamba"], kinds["hidden_state"]) == (["MambaSpec"], ["HiddenStateCacheSpec"])


# ---------------------------------------------------------------------------
# Registration rules
# ---------------------------------------------------------------------------


def test_registering_the_same_strategy_twice_is_a_no_op(builtins):
    before = builtins.describe()
    first = builtins.resolve(full())
    builtins.register(FullAttentionStrategy)
    builtins.register(FullAttentionStrategy())
    assert builtins.describe() == before
    assert len(builtins.strategies()) == 8
    assert builtins.resolve(full()) is first


def test_instances_and_classes_are_accepted():
    registry = StrategyRegistry()
    instance = OwnStrategy()
    assert registry.register(instance) is instance
    assert registry.resolve(OwnSpec(block_size=4)) is instance


def test_a_second_plain_strategy_for_a_class_is_a_conflict(builtins):
    with pytest.raises(ValueError) as info:
        builtins.register(SecondFullStrategy)
    assert "FullAttentionSpec" in str(info.value)
    assert "FullAttentionStrategy()" in str(info.value)
    assert type(builtins.resolve(full())) is FullAttentionStrategy


def test_a_refused_strategy_leaves_nothing_registered(builtins):
    before = builtins.describe()
    with pytest.raises(ValueError):
        builtins.register(OwnAndFullStrategy)
    # Its own spec type, listed before the clashing one, must not be served.
    assert builtins.find(OwnSpec(block_size=16)) is None
    assert builtins.describe() == before
    assert "own_and_full" not in [s.name for s in builtins.strategies()]


@pytest.mark.parametrize("bad", [object(), FullAttentionSpec, int, "FullAttentionStrategy"])
def test_non_strategies_are_a_type_error(bad):
    with pytest.raises(TypeError, match="is not a KVCacheStrategy"):
        StrategyRegistry().register(bad)


def test_default_registry_is_built_once_and_reset():
    first = default_registry()
    assert default_registry() is first
    assert sorted(s.name for s in first.strategies()) == [
        "bsh_attention", "fp8_ds_mla", "full_attention", "hidden_state", "mamba", "mla", "quant_attention", "sparse_mla"
    ]
    reset_default_registry()
    assert default_registry() is not first


# ---------------------------------------------------------------------------
# Strategies from other installed packages (entry point group)
# ---------------------------------------------------------------------------

THIRD_PARTY_MODULE = "kvs_thirdparty_pkg"

THIRD_PARTY_SOURCE = '''
"""A third-party package adding a strategy for its own KV cache spec type."""
from dataclasses import dataclass

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheSpec
from vllm_kv_strategies.strategies import KVCacheStrategy, PagePart


@dataclass(frozen=True)
class ToySpec(KVCacheSpec):
    width: int = 24

    @property
    def page_size_bytes(self):
        return self.block_size * self.width * 2


class ToyStrategy(KVCacheStrategy):
    name = "toy"

    @classmethod
    def spec_types(cls):
        return (ToySpec,)

    def page_parts(self, spec, dims):
        return (PagePart("toy", torch.float16, (spec.block_size, spec.width)),)


@dataclass(frozen=True)
class GreedySpec(KVCacheSpec):
    pass


class GreedyStrategy(KVCacheStrategy):
    """Plain strategy for its own spec and FullAttentionSpec: a conflict."""

    name = "greedy"

    @classmethod
    def spec_types(cls):
        return (GreedySpec, FullAttentionSpec)

    def page_parts(self, spec, dims):
        return ()


def not_a_strategy():
    return None


NOT_A_STRATEGY = 42
'''


def install_fake_distribution(root, entry_points: dict[str, str]) -> None:
    """Write a module and a ``*.dist-info`` declaring ``entry_points`` under
    the strategies group into ``root`` (then put on sys.path)."""
    (root / f"{THIRD_PARTY_MODULE}.py").write_text(textwrap.dedent(THIRD_PARTY_SOURCE))
    dist_info = root / "kvs_thirdparty_pkg-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvs-thirdparty-pkg\nVersion: 1.0\n")
    lines = [f"[{ENTRY_POINT_GROUP}]"] + [f"{name} = {value}" for name, value in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """Returns ``install(entry_points)``: makes the fake distribution
    importable and discoverable; removes it (and its module) afterwards."""

    def install(entry_points: dict[str, str]):
        install_fake_distribution(tmp_path, entry_points)
        monkeypatch.syspath_prepend(str(tmp_path))
        reset_default_registry()

    yield install
    sys.modules.pop(THIRD_PARTY_MODULE, None)
    reset_default_registry()


def test_entry_point_strategy_resolves_its_own_spec(third_party, kv_log):
    third_party({"toy": f"{THIRD_PARTY_MODULE}:ToyStrategy"})
    registry = default_registry()
    toy_module = sys.modules[THIRD_PARTY_MODULE]
    spec = toy_module.ToySpec(block_size=16)
    strategy = registry.resolve(spec)
    assert type(strategy) is toy_module.ToyStrategy
    assert strategy.page_size_bytes(spec, None) == 768 == spec.page_size_bytes  # 16 x 24 x 2
    # Built-ins are still there.
    assert type(registry.resolve(full())) is FullAttentionStrategy
    assert type(registry.resolve(indexer())) is SparseMLAStrategy
    assert "toy (ToySpec)" in registry.describe()
    assert kv_log.at(logging.INFO) == ["kv_strategies: added strategy toy from entry point toy"]
    assert kv_log.at(logging.WARNING) == []


def test_a_registry_without_entry_points_refuses_the_third_party_spec(third_party):
    third_party({"toy": f"{THIRD_PARTY_MODULE}:ToyStrategy"})
    toy = importlib.import_module(THIRD_PARTY_MODULE).ToySpec(block_size=16)
    registry = StrategyRegistry()  # built-ins only, no entry points
    for strategy in BUILTIN_STRATEGIES:
        registry.register(strategy)
    with pytest.raises(UnsupportedSpecError, match="ToySpec"):
        registry.resolve(toy)


def test_broken_entry_points_are_logged_and_refused(third_party, kv_log):
    third_party(
        {
            "missing": "kvs_no_such_module_anywhere:Strategy",
            "noattr": f"{THIRD_PARTY_MODULE}:NoSuchStrategy",
            "function": f"{THIRD_PARTY_MODULE}:not_a_strategy",
            "constant": f"{THIRD_PARTY_MODULE}:NOT_A_STRATEGY",
            "greedy": f"{THIRD_PARTY_MODULE}:GreedyStrategy",
            "toy": f"{THIRD_PARTY_MODULE}:ToyStrategy",
        }
    )
    registry = default_registry()  # must not raise
    warnings = kv_log.at(logging.WARNING)
    assert len(warnings) == 5, warnings
    for name in ("missing", "noattr", "function", "constant", "greedy"):
        [line] = [w for w in warnings if f"refused strategy entry point {name} = " in w]
        assert line.startswith("kv_strategies:")
    assert any("No module named 'kvs_no_such_module_anywhere'" in w for w in warnings)
    assert any("already served by FullAttentionStrategy()" in w for w in warnings)
    # The good one next to them is added, built-ins are untouched.
    toy_module = sys.modules[THIRD_PARTY_MODULE]
    assert type(registry.resolve(toy_module.ToySpec(block_size=16))) is toy_module.ToyStrategy
    assert type(registry.resolve(full())) is FullAttentionStrategy
    assert type(registry.resolve(mla())) is MLAStrategy
    assert type(registry.resolve(indexer())) is SparseMLAStrategy
    assert type(registry.resolve(mamba())) is MambaStrategy
    # The refused greedy strategy serves nothing, not even its own spec.
    with pytest.raises(UnsupportedSpecError, match="GreedySpec"):
        registry.resolve(toy_module.GreedySpec(block_size=16))
    assert sorted(s.name for s in registry.strategies()) == [
        "bsh_attention", "fp8_ds_mla", "full_attention", "hidden_state", "mamba", "mla", "quant_attention", "sparse_mla", "toy"
    ]
