"""register() on vllm-ascend: the installed release's NPUModelRunner KV cache methods
(``platforms.ascend.facts.target()``: 0.13+ the initialisation and its two halves, 0.11 its three
complete initialisations) are replaced on the class that defines them, reversibly; ``off``
never touches it."""

from __future__ import annotations

import copy
import logging

import pytest
import runner_factory as rf
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

import vllm_kv_strategies
from vllm_kv_strategies import platforms, patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.platforms.ascend import facts

TARGET = facts.target()
METHODS = tuple(attribute.removeprefix("NPUModelRunner.") for attribute in TARGET.attributes)
#: The methods that build the KV cache (the last, ``initialize_kv_cache``, calls one of them).
BUILDS = METHODS[:-1]
NPU = rf.NPUModelRunner


@pytest.fixture
def originals(monkeypatch):
    vllm_kv_strategies.unregister()
    saved = {m: NPU.__dict__[m] for m in METHODS}
    gpu = GPUModelRunner.__dict__["initialize_kv_cache_tensors"]
    yield saved, gpu
    vllm_kv_strategies.unregister()
    assert {m: NPU.__dict__[m] for m in METHODS} == saved


def test_target_is_the_installed_releases_methods():
    expected = facts.THREE_INITS if rf.RELEASE < (0, 13) else facts.SPLIT_INIT
    # then, on 0.11 / 0.13, the hybrid page sizing (test_hybrid_sizing)
    assert TARGET == expected == platforms.targets("ascend")[0] and AscendAdapter().target == expected
    assert all(m in NPU.__dict__ for m in METHODS)
    assert issubclass(NPU, GPUModelRunner) == (rf.RELEASE >= (0, 13))  # 0.11 does not subclass it


def test_other_releases_methods_do_not_patch(originals):
    """The tripwire: another release's method names fail at patch time (stock stays)."""
    other = facts.SPLIT_INIT if TARGET is facts.THREE_INITS else facts.THREE_INITS
    with pytest.raises(AttributeError, match="does not define"):
        patching.patch_methods(NPU, {a.removeprefix("NPUModelRunner."): (lambda *a: None) for a in other.attributes})
    assert not patching.is_patched(NPU)


def test_off_leaves_the_class_untouched(monkeypatch, originals):
    saved, gpu = originals
    monkeypatch.setenv("KV_STRATEGIES", "off")
    vllm_kv_strategies.register()
    assert all(NPU.__dict__[m] is saved[m] for m in METHODS)
    assert not patching.is_patched(NPU)


def test_auto_patches_npu_runner_and_unpatch_restores_identity(monkeypatch, originals):
    saved, gpu = originals
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    vllm_kv_strategies.register()
    vllm_kv_strategies.register()  # a repeat is a no-op
    for m in METHODS:
        assert NPU.__dict__[m] is not saved[m]
        assert NPU.__dict__[m].__wrapped__ is saved[m]
    assert GPUModelRunner.__dict__["initialize_kv_cache_tensors"] is gpu  # NPU overrides it
    vllm_kv_strategies.unregister()
    assert all(NPU.__dict__[m] is saved[m] for m in METHODS)
    vllm_kv_strategies.register()
    assert NPU.__dict__[METHODS[1]].__wrapped__ is saved[METHODS[1]]


@pytest.mark.skipif(rf.RELEASE < (0, 13), reason="vllm-ascend 0.11 has no _allocate / _reshape halves")
def test_callers_of_each_half_get_the_strategies_result(monkeypatch, originals, kv_log):
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    vllm_kv_strategies.register()
    if rf.RELEASE >= (0, 30):
        return _halves_030(monkeypatch, kv_log)
    model = rf.t_hyb_toy()
    runner = model.make_runner()
    config = copy.deepcopy(model.kv_cache_config)
    raws = runner._allocate_kv_cache_tensors(config)
    caches = runner._reshape_kv_cache_tensors(config, raws)
    whole = model.make_runner().initialize_kv_cache_tensors(copy.deepcopy(model.kv_cache_config))
    assert caches.keys() == whole.keys()
    for name in caches:
        assert [tuple(t.shape) for t in caches[name]] == [tuple(t.shape) for t in whole[name]]
    # one raw buffer per KVCacheTensor, shared by its layers (never one per layer): 0.18+ sizing,
    # and on 0.13 T-HYB's K page is its ssm state (16,384 bytes, Mamba page 2 K pages), so the
    # states lie inside the K/V blocks
    assert len({raws[n].data_ptr() for n in raws}) == len(config.kv_cache_tensors)
    assert not any(isinstance(raw, tuple) for raw in raws.values())
    assert runner.hybrid_with_attn_and_mamba is True


def _halves_030(monkeypatch, kv_log):
    """0.30 (halves called as its initialize_kv_cache_tensors calls them, with the kernel block
    sizes): on a config the strategies build (2 dense layers, K|V interleaved, and DeepSeek-V3's
    nope / rope), the plugin plans every call (no warning) and each layer gets private raw
    buffers, as stock; on 2 dense layers whose pages are padded, which they refuse by name
    (stock's trim path), auto gives stock's halves: a private raw buffer per layer, one warning."""
    planned = []
    real_plan = AscendAdapter.plan_runner
    monkeypatch.setattr(AscendAdapter, "plan_runner", lambda self, *a, **k: planned.append(a[0]) or real_plan(self, *a, **k))
    built = [
        (rf.gqa_model("dense", num_blocks=4, num_layers=2, num_kv_heads=2, head_dim=64), [1, 1], 4 * 2 * 128 * 2 * 64 * 2),
        (rf.deepseek_v3(num_blocks=4, num_layers=2), [2, 2], 4 * 128 * 576 * 2),
    ]
    for model, raws_per_layer, layer_bytes in built:
        runner = model.make_runner()
        config = copy.deepcopy(model.kv_cache_config)
        raws = runner._allocate_kv_cache_tensors(config)
        caches = runner._reshape_kv_cache_tensors(config, raws, rf.kernel_block_sizes(runner, config))
        whole = model.make_runner().initialize_kv_cache_tensors(copy.deepcopy(model.kv_cache_config), **rf.stock_kwargs(runner, config))
        assert planned.count(runner) == 2, model.name  # both halves planned by the strategies
        assert caches.keys() == whole.keys() == raws.keys()
        for name in caches:
            assert [(tuple(t.shape), t.stride()) for t in caches[name]] == [(tuple(t.shape), t.stride()) for t in whole[name]]
        buffers = {name: raw if isinstance(raw, tuple) else (raw,) for name, raw in raws.items()}
        assert [len(b) for b in buffers.values()] == raws_per_layer
        assert sum(b.numel() for bs in buffers.values() for b in bs) == 2 * layer_bytes
        assert len({b.data_ptr() for bs in buffers.values() for b in bs}) == sum(raws_per_layer)
        assert runner.hybrid_with_attn_and_mamba is False
    assert not [r for r in kv_log.records if r.levelno >= logging.WARNING]

    import stock_cases_030

    model = stock_cases_030.padded_dense()
    runner = model.make_runner()
    config = copy.deepcopy(model.kv_cache_config)
    raws = runner._allocate_kv_cache_tensors(config)
    caches = runner._reshape_kv_cache_tensors(config, raws, rf.kernel_block_sizes(runner, config))
    whole = model.make_runner().initialize_kv_cache_tensors(copy.deepcopy(model.kv_cache_config), **rf.stock_kwargs(runner, config))
    assert caches.keys() == whole.keys()
    for name in caches:
        assert [(tuple(t.shape), t.stride()) for t in caches[name]] == [(tuple(t.shape), t.stride()) for t in whole[name]]
    assert len({t.untyped_storage().data_ptr() for v in caches.values() for t in v}) == 2  # stock's private buffers
    assert {t.untyped_storage().nbytes() for v in caches.values() for t in v} == {8 * 34_304}
    assert runner.hybrid_with_attn_and_mamba is False
    warnings = {r.getMessage() for r in kv_log.records if r.levelno >= logging.WARNING}
    assert len(warnings) == 1 and "padded attention pages of FullAttentionSpec" in warnings.pop()


@pytest.mark.skipif(rf.RELEASE >= (0, 13), reason="vllm-ascend 0.11's three initialisations")
@pytest.mark.parametrize("model", ["qwen3_8b", "deepseek_v3", "deepseek_v32", "qwen3_next"])
def test_each_0_11_initialisation_gets_the_strategies_result(monkeypatch, originals, model):
    """Whichever of the three ``initialize_kv_cache`` calls, the plugin builds the config."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    vllm_kv_strategies.register()
    mk = getattr(rf, model)()
    results = [getattr(mk.make_runner(), m)(copy.deepcopy(mk.kv_cache_config)) for m in BUILDS]
    for other in results[1:]:
        assert other.keys() == results[0].keys()
        for name in other:
            assert [(t.shape, t.dtype, t.stride()) for t in other[name]] == [
                (t.shape, t.dtype, t.stride()) for t in results[0][name]
            ]


def build_as_vllm_ascend(runner, config):
    """What NPUModelRunner.initialize_kv_cache does to build: call the runner's own initialisation."""
    return runner.initialize_kv_cache_tensors(config)


def test_a_subclass_that_overrides_the_build_gets_one_warning(monkeypatch, originals, kv_log):
    """A runner subclass with its own initialisation (vllm-ascend's NPUModelRunner310 on 310P)
    gets no plugin: its worker says so once, instead of only "patched"."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    vllm_kv_strategies.register()
    adapter = AscendAdapter()
    model = rf.qwen3_8b()
    runner = model.make_runner()
    adapter.initialize_kv_cache(build_as_vllm_ascend, runner, copy.deepcopy(model.kv_cache_config))
    assert kv_log.at(logging.WARNING) == [] and runner.kv_caches

    class NPUModelRunnerOwnBuild(NPU):
        def initialize_kv_cache_tensors(self, kv_cache_config):
            return {}

    for _ in range(2):
        other = model.make_runner()
        other.__class__ = NPUModelRunnerOwnBuild
        adapter.initialize_kv_cache(build_as_vllm_ascend, other, copy.deepcopy(model.kv_cache_config))
    assert kv_log.at(logging.WARNING) == [
        "kv_strategies: test_a_subclass_that_overrides_the_build_gets_one_warning.<locals>.NPUModelRunnerOwnBuild "
        "built its KV cache without NPUModelRunner.initialize_kv_cache_tensors (NPUModelRunner): the plugin did "
        "nothing in this worker"
    ]


def test_the_310p_runner_overrides_the_build_but_not_its_caller():
    """The fact the warning rests on, where the release has a 310P runner (0.18+)."""
    runner_310p = pytest.importorskip("vllm_ascend._310p.model_runner_310p", reason="no 310P runner before vllm-ascend 0.18")
    cls = runner_310p.NPUModelRunner310
    assert issubclass(cls, NPU)
    assert "initialize_kv_cache_tensors" in cls.__dict__ and "initialize_kv_cache" not in cls.__dict__


# ---------------------------------------------------------------------------
# Exact release identity: the installed code is the code the table fingerprinted
# ---------------------------------------------------------------------------


def test_installed_runner_code_has_the_published_fingerprint():
    """The fingerprint tools/ascend_releases.py computed from the published archive equals the
    installed module's, computed as the adapter does at patch time: the table and the runtime
    check agree, and this cell's release is the one its row names."""
    from importlib.metadata import version

    from vllm_kv_strategies.platforms.ascend import releases as rel
    from vllm_kv_strategies.platforms.fingerprint import module_fingerprint

    installed = version("vllm-ascend")
    module = __import__(TARGET.module, fromlist=["NPUModelRunner"])
    assert module_fingerprint(module, "NPUModelRunner", rel.FINGERPRINTED_METHODS) == rel.FINGERPRINTS[installed]
    assert rel.code_mismatch(module, installed) is None
    assert rel.classify(installed).status == rel.OWN_CELL and rel.CELL_PINS[rel.classify(installed).vllm] == installed


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_a_changed_install_stays_stock_in_auto(monkeypatch, originals, kv_log, mode):
    """A runner module whose KV methods are not the published release's (a locally changed
    install) is not patched in auto (one warning); on patches it, warning that no test ran it."""
    from importlib.metadata import version

    from vllm_kv_strategies.platforms.ascend import releases as rel

    saved, _ = originals
    installed = version("vllm-ascend")
    monkeypatch.setitem(rel.FINGERPRINTS, installed, "0123456789abcdef")
    monkeypatch.setenv("KV_STRATEGIES", mode)
    vllm_kv_strategies.register()
    assert patching.is_patched(NPU) is (mode == "on")
    if mode == "auto":
        assert all(NPU.__dict__[m] is saved[m] for m in METHODS)
    [warning] = [w for w in kv_log.at(logging.WARNING) if "fingerprint" in w]
    assert f"are not those published as vllm-ascend {installed} (0123456789abcdef): a changed install" in warning
    assert warning.endswith(
        f"; {TARGET.runner} stays stock (KV_STRATEGIES=on patches it anyway)" if mode == "auto"
        else "; patching it anyway (KV_STRATEGIES=on)"
    )
