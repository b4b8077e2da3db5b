"""The proof of "a kind is one file": a package built in this test adds a new KV cache spec
kind (its spec class and one strategy file, nothing else), declares the strategy under the
``vllm_kv_strategies.strategies`` entry point group, and the Ascend adapter builds it
exactly: one raw buffer per part (int8 K and an fp16 per-token scale), shared by the layers
of a tensor (0.30: of each layer, as vllm-ascend 0.30 gives every non-hybrid layer its own),
each part viewed with num_blocks as dim 0, bound to its layer.

The kind: ``ToyQuantSpec`` (a ``FullAttentionSpec`` subclass, so vLLM's own planner groups
it): K in int8 plus one fp16 scale per token and head, no V; page = block_size x heads x
(head_size + 2) bytes.
"""

from __future__ import annotations

import copy
import sys
import textwrap

import pytest
import runner_factory as rf
import torch
from kv_compare import vllm_bound
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.core.registry import ENTRY_POINT_GROUP, default_registry, reset_default_registry

MODULE = "kvs_toy_quant_kind"
STRATEGY_FILE = '''
"""ToyQuant: int8 K plus an fp16 scale per token and head (the whole kind, one file)."""
from dataclasses import dataclass

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec

from vllm_kv_strategies.strategies import KVCacheStrategy, LayoutFamily, PagePart


@dataclass(frozen=True, kw_only=True)
class ToyQuantSpec(FullAttentionSpec):
    @property
    def page_size_bytes(self):
        return self.block_size * self.num_kv_heads * (self.head_size + 2)

    @property
    def real_page_size_bytes(self):  # unpadded (vLLM 0.30 compares the two)
        return self.page_size_bytes


class ToyQuantStrategy(KVCacheStrategy):
    name = "toy_quant"
    family = LayoutFamily.PER_PART

    @classmethod
    def spec_types(cls):
        return (ToyQuantSpec,)

    def page_parts(self, spec, dims):
        rows = (spec.block_size, spec.num_kv_heads)
        return (PagePart("k", torch.int8, (*rows, spec.head_size)), PagePart("k_scale", torch.float16, (*rows, 1)))
'''
A = "model.layers.{}.self_attn.attn".format


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(STRATEGY_FILE))
    dist = tmp_path / "kvs_toy_quant_kind-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kvs-toy-quant-kind\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntoy_quant = {MODULE}:ToyQuantStrategy\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_default_registry()
    yield sys.modules.get(MODULE) or __import__(MODULE)
    sys.modules.pop(MODULE, None)
    reset_default_registry()


def test_a_third_party_kind_is_built_by_the_ascend_adapter(toy_kind):
    spec = toy_kind.ToyQuantSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    assert spec.page_size_bytes == 128 * 2 * (64 + 2) == 16896
    assert default_registry().resolve(spec).name == "toy_quant"
    groups = [KVCacheGroupSpec([A(0)], spec), KVCacheGroupSpec([A(1)], spec)]
    if rf.RELEASE >= (0, 30):
        # vLLM 0.30's strided form: one backing of the two layers' 4 blocks each; vllm-ascend 0.30
        # gives every non-hybrid layer buffers of its own, and so does the plugin
        tensor = KVCacheTensor(size=2 * 4 * 16896, layers=[A(0), A(1)], layer_stride=4 * 16896, block_stride=16896)
        return _built_030(runner_for(KVCacheConfig(4, [tensor], groups)), KVCacheConfig(4, [tensor], groups))
    # Two layers of two groups share one tensor of 4 blocks (as vLLM's planner shares them).
    config = KVCacheConfig(4, [KVCacheTensor(4 * 16896, [A(0), A(1)])], groups)
    runner = runner_for(config)
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    kv = AscendAdapter().initialize_kv_cache_tensors(stock, runner, copy.deepcopy(config))
    for name in (A(0), A(1)):
        k, scale = kv[name]
        assert (tuple(k.shape), k.dtype, k.numel()) == ((4, 128, 2, 64), torch.int8, 4 * 16384)
        assert (tuple(scale.shape), scale.dtype, scale.numel() * 2) == ((4, 128, 2, 1), torch.float16, 4 * 512)
        assert vllm_bound(runner.compilation_config.static_forward_context[name].kv_cache) is kv[name]  # as vLLM binds
    assert [t.data_ptr() for t in kv[A(0)]] == [t.data_ptr() for t in kv[A(1)]]  # one set of buffers
    allocated = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for v in kv.values() for t in v}
    assert sum(allocated.values()) == 4 * 16896 and len(allocated) == 2
    assert len(runner.kv_caches) == 2


def runner_for(config):
    return rf.make_runner(config, attention_kind="attn")


def _built_030(runner, config):
    """0.30: each layer gets its own int8 K and fp16 scale buffers (4 blocks each), bound."""
    stock = patching.original(rf.NPUModelRunner, rf.stock_initializer(runner))
    kv = AscendAdapter().initialize_kv_cache_tensors(stock, runner, copy.deepcopy(config), **rf.stock_kwargs(runner, config))
    for name in (A(0), A(1)):
        k, scale = kv[name]
        assert (tuple(k.shape), k.dtype, k.numel()) == ((4, 128, 2, 64), torch.int8, 4 * 16384)
        assert (tuple(scale.shape), scale.dtype, scale.numel() * 2) == ((4, 128, 2, 1), torch.float16, 4 * 512)
        assert vllm_bound(runner.compilation_config.static_forward_context[name].kv_cache) is kv[name]
    storages = [t.untyped_storage().data_ptr() for v in kv.values() for t in v]
    assert len(set(storages)) == 4  # no buffer shared: two per layer
    allocated = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for v in kv.values() for t in v}
    assert sorted(allocated.values()) == [4 * 512, 4 * 512, 4 * 16384, 4 * 16384]
    assert sum(allocated.values()) == 2 * 4 * 16896
    assert len(runner.kv_caches) == 2


def test_without_the_package_the_kind_is_refused(toy_kind, monkeypatch):
    """The control: the same spec without its strategy is not built (stock in auto, an error with on)."""
    from vllm_kv_strategies.errors import UnsupportedSpecError
    from vllm_kv_strategies.core.registry import StrategyRegistry
    from vllm_kv_strategies.core.strategies import BUILTIN_STRATEGIES

    spec = toy_kind.ToyQuantSpec(block_size=128, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    builtins = StrategyRegistry()
    for strategy in BUILTIN_STRATEGIES:
        builtins.register(strategy)
    with pytest.raises(UnsupportedSpecError, match="ToyQuantSpec .*a subclass of FullAttentionSpec"):
        builtins.resolve(spec)
