"""Release facts of upstream vLLM (0.30 - 0.33) in ``vllm_kv_strategies.compat``.

The upstream adapters call vLLM's own KV cache build unchanged (see
test_upstream_adapter.py and test_upstream_v2.py), so what differs between
releases is only what they patch and which spec classes exist:

| fact | 0.30 | 0.31 | 0.32 | 0.33 | compat |
|---|---|---|---|---|---|
| V1 ``GPUModelRunner.initialize_kv_cache_tensors`` / ``initialize_kv_cache`` | yes | yes | yes | yes | ``upstream.V1`` |
| V2 ``gpu/model_runner.py`` ``init_kv_cache`` / ``GPUModelRunner.initialize_kv_cache`` | yes | yes | yes | yes | ``upstream.V2`` |
| ``KpoolTailSpec`` (``SlidingWindowSpec`` subclass) | yes | yes | gone | gone | served by full attention where it exists |
| the planner's two steps | ``kv_cache_utils`` | same | same | ``kv_cache_planning`` | ``specs.kv_cache_planner`` |
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu_model_runner", reason="needs vLLM's upstream runner (vLLM >= 0.30)")

import vllm.v1.kv_cache_interface as kvi  # noqa: E402

from vllm_kv_strategies import compat, patching  # noqa: E402
from vllm_kv_strategies.compat import specs, upstream  # noqa: E402
from vllm_kv_strategies.registry import default_registry  # noqa: E402

BF16 = torch.bfloat16
RELEASE = compat.release(compat.Installed.detect().vllm)


def test_upstream_matrix_and_local_builds():
    for version in [f"{v}+cpu" for v in compat.UPSTREAM_VLLM_RELEASES] + list(compat.UPSTREAM_VLLM_RELEASES):
        assert compat.Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported
    for version in ("0.29.0", "0.23.0", "0.99.0"):
        assert not compat.Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported


def test_installed_release_is_declared():
    """The test environments install declared releases only (else auto would stay stock)."""
    assert RELEASE in compat.UPSTREAM_VLLM_RELEASES


@pytest.mark.parametrize("target", upstream.TARGETS, ids=lambda t: t.name)
def test_every_declared_attribute_exists_in_the_installed_release(target):
    module = importlib.import_module(target.module)
    for attribute in target.attributes:
        owner, name = patching.owner_and_name(module, attribute)
        assert callable(vars(owner).get(name)), target.qualified(attribute)
    assert target.why and target.mirrors and target.remove_when


def test_v2_model_runner_calls_init_kv_cache_by_the_name_it_imports():
    """The V2 seam: gpu/model_runner.py binds attn_utils.init_kv_cache by name and
    GPUModelRunner.initialize_kv_cache calls that name."""
    import vllm.v1.worker.gpu.attn_utils as attn_utils
    import vllm.v1.worker.gpu.model_runner as model_runner

    assert patching.original(model_runner, "init_kv_cache") is attn_utils.init_kv_cache
    source = inspect.getsource(patching.original(model_runner.GPUModelRunner, "initialize_kv_cache"))
    assert "init_kv_cache(" in source


def test_the_planner_is_found_where_the_release_defines_it():
    groups, config = specs.kv_cache_planner()
    assert groups.__name__ == "get_kv_cache_groups"
    assert config.__name__ == "get_kv_cache_config_from_groups"
    assert groups.__module__ in ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")


@pytest.mark.skipif(not hasattr(kvi, "KpoolTailSpec"), reason="KpoolTailSpec exists in vLLM 0.30 and 0.31 only")
def test_kpool_tail_spec_resolves_to_full_attention():
    tail = kvi.KpoolTailSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=16)
    assert default_registry().resolve(tail).name == "full_attention"


def test_spec_helpers_on_the_installed_release():
    assert specs.uniform_type_specs_class() is kvi.UniformTypeKVCacheSpecs
    assert specs.has_strided_tensors()
    assert specs.vllm_spec_class("MLAAttentionSpec") is kvi.MLAAttentionSpec
    assert specs.vllm_spec_class("NoSuchSpec") is None
    assert specs.spec_classes("FullAttentionSpec", "NoSuchSpec") == (kvi.FullAttentionSpec,)
