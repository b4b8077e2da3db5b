"""The upstream adapters build exactly what the installed vLLM's stock KV
cache code builds, for both model runners: V1's
``GPUModelRunner.initialize_kv_cache_tensors`` and V2's ``init_kv_cache``
(``vllm/v1/worker/gpu/attn_utils.py``, which Model Runner V2 calls), on vLLM
0.30 - 0.33 (the same tests run against each release's own code and planner;
the few that need a spec class or field one release lacks skip there, saying
why).

Both run on the same real ``KVCacheConfig`` (made by vLLM's own planner);
every layer's view must match in shape, stride, dtype, storage offset and
aliasing, and the layers must be bound to the same tensors (V1: also the
runner's ``kv_caches`` list).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu.model_runner", reason="needs vLLM's Model Runner V2 (vLLM >= 0.30)")

import vllm.v1.kv_cache_interface as kv_cache_interface  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

from vllm_kv_strategies.errors import UnsupportedSpecError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The harness, shared with the model zoo (tests/zoo); the other unit tests import it from here.
from upstream_harness import (  # noqa: E402,F401
    RUNNERS,
    Layer,
    alias_classes,
    assert_same,
    build,
    describe,
    make_config,
    make_runner,
    needs_v1,
    run_both,
)

BF16 = torch.bfloat16


@pytest.fixture(params=RUNNERS)
def version(request):
    """Each test runs against V1 and V2."""
    return request.param


def dense(n=3, **kw):
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, **kw)
    return {f"model.layers.{i}.self_attn.attn": spec for i in range(n)}


@pytest.mark.parametrize("layout", ["LBHNC", "LBNHC", "BLHNC"])
def test_dense_matches_stock(layout, version):
    config, stock, ours = run_both(dense(), layout, version=version)
    assert_same(stock, ours)
    (_, kv) = ours
    # 3 layers x 2 heads x 16 tokens x (64 + 64) x 2 bytes = 8192 bytes per block each
    assert config.kv_cache_tensors[0].block_stride in (8192, 3 * 8192)
    assert kv["model.layers.0.self_attn.attn"].dtype == BF16
    assert kv["model.layers.1.self_attn.attn"].shape == (config.num_blocks, 2, 16, 128)


def test_different_k_and_v_head_sizes_match_stock(version):
    config, stock, ours = run_both(dense(head_size_v=32), version=version)
    assert_same(stock, ours)
    assert ours[1]["model.layers.0.self_attn.attn"].shape[-1] == 64 + 32


def test_kernel_block_split_matches_stock(version):
    spec = FullAttentionSpec(block_size=32, num_kv_heads=2, head_size=64, dtype=BF16)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(2)}
    config, stock, ours = run_both(specs, kernel_block_sizes=[16], version=version)
    assert_same(stock, ours)
    assert ours[1]["model.layers.0.self_attn.attn"].shape == (2 * config.num_blocks, 2, 16, 128)


def test_sliding_window_and_full_groups_match_stock(version):
    full = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, sliding_window=128)
    specs = {f"model.layers.{i}.self_attn.attn": (swa if i % 2 else full) for i in range(4)}
    config, stock, ours = run_both(specs, version=version)
    assert len(config.kv_cache_groups) == 2
    assert_same(stock, ours)


def test_hybrid_mamba_and_attention_match_stock(version):
    mamba = MambaSpec(block_size=16, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, torch.float32))
    attn = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    specs = {f"model.layers.{i}.linear_attn": mamba for i in (0, 1, 2, 4, 5, 6)}
    specs |= {f"model.layers.{i}.self_attn.attn": attn for i in (3, 7)}
    config, stock, ours = run_both(specs, version=version)
    assert len(config.kv_cache_groups) == 4
    assert_same(stock, ours)
    (_, kv) = ours
    # Every group overlays the one backing allocation.
    assert len(alias_classes(kv)) == 1
    # Mamba pages are raw int8: conv 3*256*2 + ssm 2*64*64*4 = 34304 bytes.
    assert kv["model.layers.0.linear_attn"].dtype == torch.int8
    assert kv["model.layers.0.linear_attn"].shape[-1] == 34304


def test_mla_matches_stock(version):
    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=BF16)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(2)}
    hf = SimpleNamespace(model_type="deepseek_v2", kv_lora_rank=512, qk_rope_head_dim=64)
    config, stock, ours = run_both(specs, "LBNHC", hf_config=hf, version=version)
    assert_same(stock, ours)
    assert ours[1]["model.layers.1.self_attn.attn"].shape == (config.num_blocks, 1, 16, 576)


def spec_fields(cls) -> set[str]:
    return set(getattr(cls, "__dataclass_fields__", {}))


@pytest.mark.skipif(
    "storage_block_size" not in spec_fields(MLAAttentionSpec),
    reason="MLAAttentionSpec.storage_block_size exists in vLLM 0.30 and 0.31 only (0.32 dropped it)",
)
def test_mla_storage_block_size_views_match_stock(version):
    # vLLM 0.30/0.31 view an MLA cache with storage_block_size in blocks of that
    # many tokens, whatever the group's kernel block size.
    spec = MLAAttentionSpec(block_size=32, num_kv_heads=1, head_size=576, dtype=BF16, storage_block_size=16)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(2)}
    hf = SimpleNamespace(model_type="deepseek_v2", kv_lora_rank=512, qk_rope_head_dim=64)
    for kernel_block_sizes in (None, [32]):
        config, stock, ours = run_both(specs, "LBNHC", hf_config=hf, kernel_block_sizes=kernel_block_sizes, version=version)
        assert_same(stock, ours)
        assert ours[1]["model.layers.0.self_attn.attn"].shape == (2 * config.num_blocks, 1, 16, 576)


@pytest.mark.skipif(
    not hasattr(kv_cache_interface, "KpoolTailSpec"),
    reason="KpoolTailSpec (GLM-5.3 Flash's kpool indexer tail) exists in vLLM 0.30 and 0.31 only",
)
def test_kpool_tail_spec_matches_stock(version):
    # A SlidingWindowSpec subclass that the full attention strategy lists.
    tail = kv_cache_interface.KpoolTailSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=16)
    specs = {f"model.layers.{i}.self_attn.tail": tail for i in range(2)}
    _, stock, ours = run_both(specs, version=version)
    assert_same(stock, ours)


@pytest.mark.skipif(
    "block_stride_alignment" not in spec_fields(FullAttentionSpec),
    reason="KVCacheSpec.block_stride_alignment exists from vLLM 0.31",
)
@pytest.mark.parametrize("layout", ["LBHNC", "BLHNC"])
def test_block_stride_alignment_matches_stock(layout, version):
    # The planner pads the block stride beyond the page; the views take it from the tensor.
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16, block_stride_alignment=3 * 8192)
    config, stock, ours = run_both({f"model.layers.{i}.self_attn.attn": spec for i in range(2)}, layout, version=version)
    if layout == "BLHNC":  # block-major: 2 layers' pages (16384 bytes) padded to 24576 per block
        assert config.kv_cache_tensors[0].block_stride == 3 * 8192
    assert_same(stock, ours)


@needs_v1
def test_cross_layer_kv_sharing_matches_stock_v1():
    """V1 only: V2 reads cross-layer KV sharing from the model's real Attention
    modules (gpu/attn_utils.get_shared_kv_cache_layers), which the model zoo
    builds (tests/zoo)."""
    version = "v1"
    shared = {"model.layers.3.self_attn.attn": "model.layers.1.self_attn.attn"}
    config, stock, ours = run_both(dense(), shared=shared, version=version)
    assert_same(stock, ours)
    kv = ours[1]
    assert kv["model.layers.3.self_attn.attn"] is kv["model.layers.1.self_attn.attn"]


def test_test_fault_binds_two_layers_of_one_group_to_one_cache(monkeypatch, version):
    monkeypatch.setenv("KV_STRATEGIES_TEST_FAULT", "share_group_cache")
    _, stock, ours = run_both(dense(), version=version)
    kv = ours[1]
    assert kv["model.layers.1.self_attn.attn"] is kv["model.layers.0.self_attn.attn"]
    with pytest.raises(AssertionError):
        assert_same(stock, ours)


@needs_v1
def test_v1_subclass_that_overrides_the_build_gets_one_warning(kv_log):
    """A V1 runner subclass with its own ``initialize_kv_cache_tensors`` gets no plugin: its
    ``initialize_kv_cache`` (wrapped) says so once."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from vllm_kv_strategies import patching
    from vllm_kv_strategies.platforms.upstream.v1 import UpstreamV1Adapter

    adapter, specs = UpstreamV1Adapter(), dense()
    vllm_config, config = make_config(specs, "LBHNC", 1 << 22)
    stock_build = patching.original(GPUModelRunner, "initialize_kv_cache_tensors")

    class OwnBuild(GPUModelRunner):
        def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes):
            return {}

    def initialize_kv_cache(runner, kv_cache_config):  # the build step of GPUModelRunner.initialize_kv_cache, patched
        if isinstance(runner, OwnBuild):
            return runner.initialize_kv_cache_tensors(kv_cache_config, None)
        return adapter.initialize_kv_cache_tensors(stock_build, runner, kv_cache_config, None)

    adapter.initialize_kv_cache(initialize_kv_cache, make_runner(vllm_config, list(specs)), copy.deepcopy(config))
    assert kv_log.at(logging.WARNING) == []

    for _ in range(2):
        runner = make_runner(vllm_config, list(specs))
        runner.__class__ = OwnBuild
        adapter.initialize_kv_cache(initialize_kv_cache, runner, copy.deepcopy(config))
    assert kv_log.at(logging.WARNING) == [
        "kv_strategies: test_v1_subclass_that_overrides_the_build_gets_one_warning.<locals>.OwnBuild built its KV cache "
        "without GPUModelRunner.initialize_kv_cache_tensors (GPUModelRunner (V1)): the plugin did nothing in this worker"
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnclassifiedSpec(FullAttentionSpec):
    """A subclass no strategy lists, like a spec class a new release adds."""

    extra: int = 0


def test_unclassified_spec_falls_back_to_stock_in_auto_and_raises_when_on(monkeypatch, version, kv_log):
    spec = UnclassifiedSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(2)}
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    _, stock, ours = run_both(specs, version=version)
    assert_same(stock, ours)
    warnings = kv_log.at(logging.WARNING)
    assert len(warnings) == 1 and "UnclassifiedSpec" in warnings[0] and "model.layers." in warnings[0], warnings
    monkeypatch.setenv("KV_STRATEGIES", "on")
    with pytest.raises(UnsupportedSpecError, match="UnclassifiedSpec.*subclass of FullAttentionSpec"):
        run_both(specs, version=version)
