"""Validation before allocation, safe fallback, clean failure, misbehaving
third-party strategies (upstream adapter; the Ascend ones are in tests/ascend)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from test_upstream_adapter import dense, make_config, make_runner, run_both
from upstream_harness import through_adapter

from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

from vllm_kv_strategies import patching
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.plan import plan_kv_cache
from vllm_kv_strategies.core.registry import default_registry
from vllm_kv_strategies.core.strategies import FullAttentionStrategy, KVCacheStrategy, PagePart

BF16 = torch.bfloat16
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(2)]
SPEC = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)  # 4096 B/block


def strided_config(size=16384 * 2, num_blocks=4, block_stride=4096, layer_stride=16384):
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[KVCacheTensor(size=size, layers=NAMES, layer_stride=layer_stride, block_stride=block_stride)],
        kv_cache_groups=[KVCacheGroupSpec(list(NAMES), SPEC)],
    )


def ours(runner, config):
    """The plugin's build on the release's first runner (V1 up to vLLM 0.33, V2 on 0.34)."""
    return through_adapter(runner, copy.deepcopy(config))


def fresh_runner():
    vllm_config, _ = make_config({NAMES[0]: SPEC}, "LBHNC", 1 << 20)
    return make_runner(vllm_config, NAMES)


def test_a_tensor_too_small_for_its_layers_is_refused_before_allocating(monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES", "on")
    calls = []
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: calls.append(a) or pytest.fail("allocated"))
    runner = fresh_runner()
    with pytest.raises(KVCacheLayoutError) as info:
        ours(runner, strided_config(size=16384 * 2 - 1))
    message = str(info.value)
    assert "model.layers.0.self_attn.attn" in message and "FullAttentionSpec" in message
    assert "needs 32768 bytes for 4 blocks but has 32767" in message
    assert calls == [] and runner.kv_caches == []


def test_a_layer_served_by_two_tensors_is_refused():
    config = strided_config()
    config.kv_cache_tensors.append(KVCacheTensor(size=32768, layers=[NAMES[0]], layer_stride=16384, block_stride=4096))
    with pytest.raises(KVCacheLayoutError, match="served by KV cache tensors 0 and 1"):
        plan_kv_cache(config)


def test_a_layer_served_by_no_tensor_is_refused():
    config = strided_config()
    config.kv_cache_tensors[0].layers = [NAMES[0]]
    with pytest.raises(KVCacheLayoutError, match=r"'model.layers.1.self_attn.attn' \(FullAttentionSpec, group 0\) is served by no KV cache tensor"):
        plan_kv_cache(config)


def test_an_allocation_failure_upstream_is_stocks_and_binds_nothing(monkeypatch):
    """Upstream, vLLM's own allocate_kv_cache allocates: its error propagates
    unchanged and nothing is bound (the Ascend adapter's own allocation raises
    KVCacheAllocationError: tests/ascend/test_reliability_ascend.py)."""

    def oom(*args, **kwargs):
        raise RuntimeError("CPU out of memory")

    monkeypatch.setattr(torch, "zeros", oom)
    runner = fresh_runner()
    with pytest.raises(RuntimeError, match="CPU out of memory"):
        ours(runner, strided_config())
    assert runner.kv_caches == []
    assert all(layer.kv_cache is None for layer in runner.compilation_config.static_forward_context.values())


def test_any_failure_while_planning_falls_back_in_auto_and_raises_when_on(monkeypatch, kv_log):
    """An error the plugin did not foresee (a bug, a runner of another shape)
    raised before allocation leaves the runner stock in auto, with one warning."""
    from vllm_kv_strategies.platforms.upstream import v1 as upstream, v2 as upstream_v2

    def broken(*args, **kwargs):
        raise AttributeError("'GPUModelRunner' object has no attribute 'renamed_in_a_future_release'")

    monkeypatch.setattr(upstream, "plan_upstream", broken)
    monkeypatch.setattr(upstream_v2, "plan_upstream", broken)  # V2's adapter holds the name too (vLLM 0.34: V2 only)
    runner = fresh_runner()
    sentinel = {"stock": True}
    stock = lambda *args: sentinel  # noqa: E731
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    for _ in range(2):  # one warning per worker, however often the build runs
        assert through_adapter(runner, strided_config(), stock=stock) is sentinel
    [warning] = kv_log.at(logging.WARNING)
    assert "falling back to stock KV cache for all layers" in warning and "renamed_in_a_future_release" in warning
    monkeypatch.setenv("KV_STRATEGIES", "on")
    with pytest.raises(AttributeError, match="renamed_in_a_future_release"):
        through_adapter(runner, strided_config(), stock=stock)


class WrongPage(KVCacheStrategy):
    """A third-party strategy that claims full attention but forgets V."""

    name = "wrong_page"

    @classmethod
    def spec_types(cls):
        return (FullAttentionSpec,)

    def matches(self, spec):
        return True

    def page_parts(self, spec, dims):
        return (PagePart("k", spec.dtype, (spec.block_size, spec.num_kv_heads, spec.head_size)),)


def plan_refusing_the_third_party_strategy(kv_log) -> str:
    """Plan with a misbehaving third-party strategy registered; check the
    built-in served every layer; return the one warning logged."""
    plan = plan_kv_cache(strided_config())
    assert {lp.strategy.name for lp in plan.layers.values()} == {"full_attention"}
    [warning] = kv_log.at(logging.WARNING)
    return warning


def test_a_third_party_strategy_with_a_wrong_page_is_refused_and_builtins_keep_working(kv_log):
    registry = default_registry()
    registry.register(WrongPage)
    assert registry.resolve(SPEC).name == "wrong_page"
    warning = plan_refusing_the_third_party_strategy(kv_log)
    assert "refused third-party strategy WrongPage()" in warning and "2048" in warning and "4096" in warning
    assert registry.resolve(SPEC).name == "full_attention"


def test_a_builtin_whose_parts_disagree_with_the_spec_raises(monkeypatch):
    monkeypatch.setattr(FullAttentionStrategy, "page_parts", WrongPage.page_parts)
    with pytest.raises(KVCacheLayoutError, match=r"strategy full_attention lays out 2048 bytes per block \(k 2048\) but FullAttentionSpec says 4096"):
        plan_kv_cache(strided_config())


class RaisingPredicate(WrongPage):
    name = "raising_predicate"

    def matches(self, spec):
        raise RuntimeError("vendor predicate bug")


def test_a_third_party_predicate_that_raises_is_refused(kv_log):
    default_registry().register(RaisingPredicate)
    warning = plan_refusing_the_third_party_strategy(kv_log)
    assert "refused third-party strategy RaisingPredicate()" in warning and "vendor predicate bug" in warning


class Nameless(KVCacheStrategy):
    @classmethod
    def spec_types(cls):
        return (FullAttentionSpec,)

    def matches(self, spec):
        return True

    def page_parts(self, spec, dims):
        return FullAttentionStrategy().page_parts(spec, dims)


class StringTypes(Nameless):
    name = "string_types"

    @classmethod
    def spec_types(cls):
        return ("FullAttentionSpec",)


@pytest.mark.parametrize(("strategy", "message"), [(Nameless, "has no str 'name'"), (StringTypes, "must return classes")])
def test_malformed_third_party_strategies_are_refused_at_registration(strategy, message):
    registry = default_registry()
    with pytest.raises(TypeError, match=message):
        registry.register(strategy)
    assert registry.resolve(SPEC).name == "full_attention"
    assert "string_types" not in registry.describe()
