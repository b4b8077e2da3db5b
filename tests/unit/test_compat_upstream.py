"""What differs between the upstream vLLM releases of the support matrix (0.30,
0.31, 0.32, 0.33), as ``vllm_kv_strategies.compat`` handles it.

Each difference has two kinds of test: the probe's logic on stand-ins for
either form (runs on every release), and the probe against the installed
release's own code (what it finds must be what that release does). The
adapter's results on each release are compared with stock in
test_upstream_adapter.py.

| difference | 0.30 | 0.31 | 0.32 | 0.33 | compat |
|---|---|---|---|---|---|
| ``MLAAttentionSpec.storage_block_size`` overrides the views' kernel block size | yes | yes | field gone | gone | ``view_kernel_block_size`` |
| layers bound to kernel-block views (``map_kv_caches_to_kernel_blocks``, ``bind_kv_cache(layer_kv_caches=)``) | no | no | yes | yes | ``kernel_block_layer_views``, ``bind_upstream_kv_cache`` |
| ``KpoolTailSpec`` (``SlidingWindowSpec`` subclass) | yes | yes | gone | gone | none: the registry's MRO walk |
| ``block_stride_alignment`` (planner pads block strides) | no | int | int or ``MultipleOf`` | int or ``MultipleOf`` | none: strides come from the tensor |
| ``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` defined in | ``kv_cache_utils`` | same | same | ``kv_cache_planning`` | ``kv_cache_planner`` |
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu_model_runner", reason="needs vLLM's upstream runner (vLLM >= 0.30)")

import vllm.v1.kv_cache_interface as kvi  # noqa: E402
import vllm.v1.worker.utils as worker_utils  # noqa: E402

from vllm_kv_strategies import compat  # noqa: E402
from vllm_kv_strategies.errors import IncompatibleRunnerError  # noqa: E402
from vllm_kv_strategies.registry import default_registry  # noqa: E402

BF16 = torch.bfloat16
RELEASE = compat.release(compat.Installed.detect().vllm)
MLA_FIELDS = set(kvi.MLAAttentionSpec.__dataclass_fields__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MLAWithStorage(kvi.MLAAttentionSpec):
    """The 0.30 / 0.31 form on any release: an MLA spec with storage_block_size."""

    storage_block_size: int | None = None


# ---------------------------------------------------------------------------
# The support matrix
# ---------------------------------------------------------------------------


def test_upstream_matrix_lists_0_30_to_0_33_and_local_builds_match():
    assert compat.UPSTREAM_VLLM_RELEASES == ("0.30.0", "0.31.0", "0.32.0", "0.33.0")
    for version in ("0.30.0", "0.31.0+cpu", "0.32.0+cpu", "0.33.0", "0.33.0.post1"):
        assert compat.Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported
    for version in ("0.29.0", "0.34.0", "0.23.0", "0.33.1"):
        assert not compat.Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported


def test_installed_release_is_declared():
    """The test environments install declared releases only (else auto would stay stock)."""
    assert RELEASE in compat.UPSTREAM_VLLM_RELEASES


# ---------------------------------------------------------------------------
# MLA storage_block_size (0.30, 0.31)
# ---------------------------------------------------------------------------


def test_view_kernel_block_size_prefers_an_mla_storage_block_size():
    spec = MLAWithStorage(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16, storage_block_size=16)
    assert compat.view_kernel_block_size(spec, 32) == 16
    assert compat.view_kernel_block_size(spec, None) == 16
    unset = MLAWithStorage(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16)
    assert compat.view_kernel_block_size(unset, 32) == 32
    assert compat.view_kernel_block_size(unset, None) is None


def test_view_kernel_block_size_ignores_the_field_outside_mla_specs():
    # Stock tests isinstance(spec, MLAAttentionSpec); another spec with such an
    # attribute (0.30/0.31's HiddenStateCacheSpec has the field) keeps the kernel size.
    other = SimpleNamespace(storage_block_size=16)
    assert compat.view_kernel_block_size(other, 32) == 32
    full = kvi.FullAttentionSpec(block_size=64, num_kv_heads=1, head_size=64, dtype=BF16)
    assert compat.view_kernel_block_size(full, 32) == 32


def test_installed_allocate_kv_cache_honours_storage_block_size_iff_the_field_exists():
    """The probe (the field) and the release's allocate_kv_cache agree."""
    source = inspect.getsource(worker_utils.allocate_kv_cache)
    assert ("storage_block_size" in source) == ("storage_block_size" in MLA_FIELDS)
    if RELEASE in ("0.30.0", "0.31.0"):
        assert "storage_block_size" in MLA_FIELDS
    elif RELEASE in ("0.32.0", "0.33.0"):
        assert "storage_block_size" not in MLA_FIELDS


# ---------------------------------------------------------------------------
# Kernel-block layer views at binding (0.32)
# ---------------------------------------------------------------------------


def test_kernel_block_layer_views_is_none_without_vllm_mapping(monkeypatch):
    monkeypatch.delattr(worker_utils, "map_kv_caches_to_kernel_blocks", raising=False)
    assert compat.kernel_block_layer_views({"a": object()}, []) is None


def test_kernel_block_layer_views_uses_vllm_mapping(monkeypatch):
    calls = []

    def fake(kv_caches, attn_groups):
        calls.append((kv_caches, attn_groups))
        return {"a": "kernel view"}

    monkeypatch.setattr(worker_utils, "map_kv_caches_to_kernel_blocks", fake, raising=False)
    caches, groups = {"a": "manager view"}, ["group"]
    assert compat.kernel_block_layer_views(caches, groups) == {"a": "kernel view"}
    assert calls == [(caches, groups)]


def _recording_bind(with_layer_kv_caches: bool, calls: list):
    if with_layer_kv_caches:
        def bind(kv_caches, forward_context, runner_kv_caches, num_attn_module=1, kv_cache_groups=None,
                 layer_kv_caches=None):
            calls.append(dict(num_attn_module=num_attn_module, kv_cache_groups=kv_cache_groups,
                              layer_kv_caches=layer_kv_caches))
    else:
        def bind(kv_caches, forward_context, runner_kv_caches, num_attn_module=1, kv_cache_groups=None):
            calls.append(dict(num_attn_module=num_attn_module, kv_cache_groups=kv_cache_groups))
    return bind


def test_bind_without_layer_views_calls_the_0_30_signature(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_utils, "bind_kv_cache", _recording_bind(False, calls))
    compat.bind_upstream_kv_cache({}, {}, [], 2, ["g"], None)
    assert calls == [dict(num_attn_module=2, kv_cache_groups=["g"])]


def test_bind_passes_layer_views_to_the_0_32_signature(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_utils, "bind_kv_cache", _recording_bind(True, calls))
    compat.bind_upstream_kv_cache({}, {}, [], 1, ["g"], {"a": "kernel view"})
    assert calls == [dict(num_attn_module=1, kv_cache_groups=["g"], layer_kv_caches={"a": "kernel view"})]


def test_bind_refuses_layer_views_a_release_cannot_take(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_utils, "bind_kv_cache", _recording_bind(False, calls))
    with pytest.raises(IncompatibleRunnerError, match="layer_kv_caches"):
        compat.bind_upstream_kv_cache({}, {}, [], 1, ["g"], {"a": "kernel view"})
    assert calls == []


def test_installed_release_has_mapping_iff_bind_takes_layer_views():
    has_mapping = hasattr(worker_utils, "map_kv_caches_to_kernel_blocks")
    takes_views = "layer_kv_caches" in inspect.signature(worker_utils.bind_kv_cache).parameters
    assert has_mapping == takes_views
    if RELEASE in ("0.30.0", "0.31.0"):
        assert not has_mapping
    elif RELEASE in ("0.32.0", "0.33.0"):
        assert has_mapping


def test_installed_release_binds_layers_to_mapped_views():
    """On the installed release the binding reaches each layer: the mapped view
    where vLLM maps (0.32), else the cache itself."""

    class Layer:
        kv_cache = None

        def bind_kv_cache(self, kv_cache) -> None:
            self.kv_cache = kv_cache

    kv = {"model.layers.0.self_attn.attn": torch.zeros(4, 2, 16, 8)}
    forward_context = {"model.layers.0.self_attn.attn": Layer()}
    runner_kv_caches: list = []
    views = compat.kernel_block_layer_views(kv, [])
    compat.bind_upstream_kv_cache(kv, forward_context, runner_kv_caches, 1, None, views)
    assert runner_kv_caches == [kv["model.layers.0.self_attn.attn"]]
    bound = forward_context["model.layers.0.self_attn.attn"].kv_cache
    assert bound is kv["model.layers.0.self_attn.attn"]  # no group maps: the cache itself


# ---------------------------------------------------------------------------
# Spec classes that exist in some releases only
# ---------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(kvi, "KpoolTailSpec"), reason="KpoolTailSpec exists in vLLM 0.30 and 0.31 only")
def test_kpool_tail_spec_resolves_to_full_attention():
    tail = kvi.KpoolTailSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=16)
    assert default_registry().resolve(tail).name == "full_attention"


def test_spec_classes_the_strategies_serve_exist_in_every_release():
    assert {c.__name__ for c in compat.full_attention_spec_types()} == {
        "FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec"}
    assert {c.__name__ for c in compat.mla_spec_types()} == {"MLAAttentionSpec", "SlidingWindowMLASpec"}
    assert [c.__name__ for c in compat.mamba_spec_types()] == ["MambaSpec"]
    assert compat.uniform_type_specs_class() is kvi.UniformTypeKVCacheSpecs
    assert compat.has_strided_tensors()


# ---------------------------------------------------------------------------
# The planner's module (kv_cache_utils up to 0.32, kv_cache_planning from 0.33)
# ---------------------------------------------------------------------------


def _planner_module(monkeypatch, name, **functions):
    module = types.ModuleType(name)
    for attr, value in functions.items():
        setattr(module, attr, value)
    monkeypatch.setitem(sys.modules, name, module)


def _groups(*_):
    return "groups"


def _config(*_):
    return "config"


def test_kv_cache_planner_prefers_the_planning_module(monkeypatch):
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_planning",
                    get_kv_cache_groups=_groups, get_kv_cache_config_from_groups=_config)
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_utils",
                    get_kv_cache_groups=len, get_kv_cache_config_from_groups=len)
    assert compat.kv_cache_planner() == (_groups, _config)


def test_kv_cache_planner_falls_back_to_kv_cache_utils(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.v1.core.kv_cache_planning", None)  # import raises ModuleNotFoundError
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_utils",
                    get_kv_cache_groups=_groups, get_kv_cache_config_from_groups=_config)
    planner = compat.kv_cache_planner()
    assert (planner.get_kv_cache_groups, planner.get_kv_cache_config_from_groups) == (_groups, _config)


def test_kv_cache_planner_needs_both_functions_in_one_module(monkeypatch):
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_planning", get_kv_cache_groups=_groups)
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_utils", get_kv_cache_config_from_groups=_config)
    with pytest.raises(ImportError, match="vllm.v1.core.kv_cache_planning, vllm.v1.core.kv_cache_utils"):
        compat.kv_cache_planner()


def test_installed_planner_is_defined_where_the_release_defines_it():
    planner = compat.kv_cache_planner()
    expected = "vllm.v1.core.kv_cache_utils" if RELEASE in ("0.30.0", "0.31.0", "0.32.0") else "vllm.v1.core.kv_cache_planning"
    assert {f.__module__ for f in planner} == {expected}


# ---------------------------------------------------------------------------
# The patched method and the runner state the adapter reads (same in 0.30 - 0.32)
# ---------------------------------------------------------------------------


def test_stock_method_signature_is_the_adapters():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from vllm_kv_strategies import patching
    from vllm_kv_strategies.adapters.upstream import UpstreamAdapter

    stock = patching.original(GPUModelRunner, "initialize_kv_cache_tensors")
    stock_params = list(inspect.signature(stock).parameters)
    ours = list(inspect.signature(UpstreamAdapter.initialize_kv_cache_tensors).parameters)
    assert stock_params == ["self", "kv_cache_config", "kernel_block_sizes", "kv_cache_allocation_context"]
    assert ours == ["self", "stock", "runner", *stock_params[1:]]


def test_runner_sets_every_attribute_the_adapter_reads():
    import vllm.v1.worker.gpu_model_runner as gpu_model_runner

    from vllm_kv_strategies.adapters.upstream import UpstreamAdapter

    source = inspect.getsource(gpu_model_runner)
    for attr in UpstreamAdapter.runner_attrs:
        assert f"self.{attr} =" in source or f"self.{attr}:" in source, attr
