"""Release facts of upstream vLLM (0.30 - 0.34) in ``vllm_kv_strategies.platforms.upstream.facts``.

The upstream adapters call vLLM's own KV cache build unchanged (see
test_upstream_adapter.py and test_upstream_v2.py), so what differs between
releases is only what they patch and which spec classes exist:

| fact | 0.30 | 0.31 | 0.32 | 0.33 | 0.34 | where (``platforms``) |
|---|---|---|---|---|---|---|
| V1 ``GPUModelRunner.initialize_kv_cache_tensors`` / ``initialize_kv_cache`` | yes | yes | yes | yes | gone | ``upstream.facts.V1``, ``upstream.facts.has_v1`` |
| V2 ``gpu/model_runner.py`` ``init_kv_cache`` / ``GPUModelRunner.initialize_kv_cache`` | yes | yes | yes | yes | yes | ``upstream.facts.V2`` |
| V2 code ``auto`` patches | the release | same | same | same | its fingerprint | ``upstream.facts.v2_code_mismatch`` |
| ``KpoolTailSpec`` (``SlidingWindowSpec`` subclass) | yes | yes | gone | gone | gone | served by full attention where it exists |
| the planner's two steps | ``kv_cache_utils`` | same | same | ``kv_cache_planning`` | same | ``core.specs.kv_cache_planner`` |
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import types

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu.model_runner", reason="needs vLLM's Model Runner V2 (vLLM >= 0.30)")

import vllm.v1.kv_cache_interface as kvi  # noqa: E402

from vllm_kv_strategies import patching  # noqa: E402
from vllm_kv_strategies.platforms import matrix
from vllm_kv_strategies.core import specs  # noqa: E402
from vllm_kv_strategies.platforms.upstream import facts as upstream
from vllm_kv_strategies.core.registry import default_registry  # noqa: E402

BF16 = torch.bfloat16
RELEASE = matrix.release(matrix.Installed.detect().vllm)


def test_upstream_matrix_and_local_builds():
    for version in [f"{v}+cpu" for v in matrix.UPSTREAM_VLLM_RELEASES] + list(matrix.UPSTREAM_VLLM_RELEASES):
        assert matrix.Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported
    for version in ("0.29.0", "0.23.0", "0.99.0"):
        assert not matrix.Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported


def test_installed_release_is_declared():
    """The test environments install declared releases only (else auto would stay stock)."""
    assert RELEASE in matrix.UPSTREAM_VLLM_RELEASES


def _has_v1_module() -> bool:
    try:
        return importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is not None
    except ModuleNotFoundError:
        return False


def test_which_runners_a_release_has_is_read_from_its_version_and_matches_the_installed_files():
    assert [t.name for t in upstream.targets("0.33.0")] == ["upstream-v1", "upstream-v2"]
    assert [t.name for t in upstream.targets("0.30.0+cpu")] == ["upstream-v1", "upstream-v2"]
    for version in ("0.34.0", "0.34.0rc1", "0.35.1", None):  # V2, and its resizable KV cache's extend_kv_cache
        assert [t.name for t in upstream.targets(version)] == ["upstream-v2", "upstream-v2-extend"], version
    installed = matrix.Installed.detect().vllm
    assert upstream.has_v1(installed) is _has_v1_module(), installed


def test_the_release_table_covers_the_matrix_oldest_first():
    """Every supported release reads a row at or below it; an unparsable version the newest."""
    from packaging.version import Version

    firsts = [row.first for row in upstream.UPSTREAM_RELEASES]
    assert firsts == sorted(firsts, key=Version)
    assert Version(firsts[0]) <= min(map(Version, matrix.UPSTREAM_VLLM_RELEASES))
    assert upstream.upstream_release("0.33.0").first == "0.30.0"
    assert upstream.upstream_release("0.34.0rc1").first == "0.34.0"
    assert upstream.upstream_release("not-a-version") is upstream.UPSTREAM_RELEASES[-1]
    assert upstream.not_covered("0.33.0") == () and upstream.not_covered("0.34.0") == upstream.NOT_COVERED


def test_auto_patches_v2_from_0_34_only_with_the_fingerprint_its_cell_proved(monkeypatch):
    installed = matrix.Installed.detect().vllm
    assert upstream.v2_code_mismatch("0.33.0") is None  # before 0.34: the release's own cell
    assert upstream.v2_code_mismatch("0.35.0") == "the Model Runner V2 KV cache code of vLLM 0.35.0 was never fingerprinted"
    if upstream.has_v1(installed):
        return
    assert upstream.v2_fingerprint() == upstream.V2_FINGERPRINTS[matrix.exact_release(installed)]
    assert upstream.v2_code_mismatch(installed) is None
    monkeypatch.setitem(upstream.V2_FINGERPRINTS, matrix.exact_release(installed), "0123456789abcdef")
    assert "is not vLLM " in upstream.v2_code_mismatch(installed) and "a changed install" in upstream.v2_code_mismatch(installed)


@pytest.mark.parametrize("target", upstream.targets(matrix.Installed.detect().vllm), ids=lambda t: t.name)
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
    before_0_33 = RELEASE in ("0.30.0", "0.31.0", "0.32.0")
    expected = "vllm.v1.core.kv_cache_utils" if before_0_33 else "vllm.v1.core.kv_cache_planning"
    assert groups.__module__ == config.__module__ == expected


def _planner_module(monkeypatch, name, **functions):
    module = types.ModuleType(name)
    for attr, value in functions.items():
        setattr(module, attr, value)
    monkeypatch.setitem(sys.modules, name, module)


def _groups(*_):
    return "groups"


def _config(*_):
    return "config"


def test_the_planner_prefers_the_planning_module(monkeypatch):
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_planning",
                    get_kv_cache_groups=_groups, get_kv_cache_config_from_groups=_config)
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_utils",
                    get_kv_cache_groups=len, get_kv_cache_config_from_groups=len)
    assert specs.kv_cache_planner() == (_groups, _config)


def test_the_planner_falls_back_to_kv_cache_utils(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.v1.core.kv_cache_planning", None)  # import: ModuleNotFoundError
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_utils",
                    get_kv_cache_groups=_groups, get_kv_cache_config_from_groups=_config)
    assert specs.kv_cache_planner() == (_groups, _config)


def test_the_planner_needs_both_steps_in_one_module(monkeypatch):
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_planning", get_kv_cache_groups=_groups)
    _planner_module(monkeypatch, "vllm.v1.core.kv_cache_utils", get_kv_cache_config_from_groups=_config)
    with pytest.raises(ImportError, match="in vllm.v1.core.kv_cache_planning or vllm.v1.core.kv_cache_utils"):
        specs.kv_cache_planner()


def test_the_planner_does_not_hide_a_broken_planning_module(monkeypatch):
    """A planning module that exists but cannot import a dependency raises that error, rather
    than the planner falling back to a module without the functions."""
    import importlib as importlib_module

    real = importlib_module.import_module

    def broken(name, *args):
        if name == "vllm.v1.core.kv_cache_planning":
            raise ModuleNotFoundError("No module named 'some_dependency'", name="some_dependency")
        return real(name, *args)

    monkeypatch.setattr(importlib_module, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="some_dependency"):
        specs.kv_cache_planner()


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
