"""vllm-ascend 0.30 (cell ascend-0.30.0 only): never beyond the device's KV cache budget.

Each test runs a worker end to end (tests/ascend/worker_030.py): the real
``NPUWorker.determine_available_memory`` (its multi-group scale, wrapped by the plugin or not, and the
layerwise-reuse factor after it; only the device measurement stood in for), vLLM's (patched) planner on
the budget it returns, stock's own ``apply_layerwise_kv_cache_plan``, then the runner's
``initialize_kv_cache_tensors``. What it checks:

* one decision: the budget step plans the config exactly as allocation will see it, so a runner whose
  budget was left unscaled is built as vLLM's overlay or raises ``UnscaledBudgetError`` in every mode
  (every refusal site of the adapter forced in turn); a refusal the budget step sees keeps stock's
  scale, and stock builds within it;
* layerwise KV cache reuse (a layerwise-reuse connector): the budget stays stock's, the build is
  stock's, within the budget;
* the guard: bytes about to be allocated beyond the measured budget (or ``--kv-cache-memory-bytes``)
  raise ``KVBudgetExceededError`` before anything is allocated, whichever path allocates;
* a property over random multi-group configs x connector / flag settings: in ``auto``, what is
  allocated never exceeds the measured budget (plus stock's 2 MiB alignment per raw buffer).
"""

from __future__ import annotations

import inspect
import logging
import sys

import pytest
import runner_factory as rf
import worker_030 as w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vllm_kv_strategies.platforms.ascend import runner as ascend_adapter
from vllm_kv_strategies.platforms.ascend import overlay as ascend_overlay
from vllm_kv_strategies.platforms.ascend.budget import TRANSFER_ALIGNMENT, decision_of, overlay_committed
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import KVBudgetExceededError, KVCacheLayoutError, UnscaledBudgetError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's worker budget step only")

MiB = 1 << 20


def gpt_oss_like(num_layers: int = 12):
    """gpt-oss-like: sliding (128) / full alternating, 8 KV heads x 64, bf16: 2 groups."""
    return rf.gqa_model("gpt-oss-like", num_blocks=4, num_layers=num_layers, num_kv_heads=8, head_dim=64,
                        layer_types=["sliding_attention", "full_attention"] * (num_layers // 2), sliding_window=128,
                        max_model_len=1024)


def gemma3_like():
    """Gemma-3-like: 5 sliding (256) : 1 full, 16 KV heads x 128, bf16, 12 layers."""
    return rf.gqa_model("gemma-3-like", num_blocks=4, num_layers=12, num_kv_heads=16, head_dim=128,
                        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 2, sliding_window=256,
                        max_model_len=1024)


def layerwise_connector():
    """AscendStoreConnector on the memcache backend with ``use_layerwise`` and 2 shared buffers."""
    from vllm.config.kv_transfer import KVTransferConfig

    return KVTransferConfig(kv_connector="AscendStoreConnector", kv_role="kv_both", kv_connector_extra_config={
        "backend": "memcache", "use_layerwise": True, "layerwise_num_shared_buffers": 2})


def runner_for(connector: str = "none", paged_attention: bool = False, kv_cache_memory_bytes: int | None = None):
    """config -> a gpt-oss-type runner for it, with ``connector`` ``none``, ``transfer``
    (Mooncake, 2 MiB aligned buffers) or ``layerwise`` (:func:`layerwise_connector`)."""

    def make(config):
        runner = rf.make_runner(config, model_type="gpt_oss", kv_transfer=connector == "transfer",
                                paged_attention=paged_attention)
        if connector == "layerwise":
            object.__setattr__(runner.vllm_config, "kv_transfer_config", layerwise_connector())
        runner.vllm_config.cache_config.kv_cache_memory_bytes = kv_cache_memory_bytes
        return runner

    return make


def within_budget(d: w.Deployment) -> bool:
    return d.allocated <= d.measured + d.buffers * TRANSFER_ALIGNMENT


# -- layerwise KV cache reuse ---------------------------------------------------------------------

#: model -> (measured budget, budget after the worker's step, num_blocks, bytes allocated incl. 2 MiB per
#: buffer): stock's numbers, which the plugin now gives too (it was unscaled, then fell back to stock).
LAYERWISE = {
    "gpt-oss-like": (gpt_oss_like, 67_108_864, 80_530_636, 51, 66_846_720 + 8 * 2 * MiB),
    "gemma-3-like": (gemma3_like, 134_217_728, 53_687_090, 25, 131_072_000 + 8 * 2 * MiB),
}


@pytest.mark.parametrize("model", LAYERWISE)
def test_layerwise_reuse_stays_within_the_budget(model, monkeypatch):
    """The budget step plans the config with stock's layerwise plan applied, sees the layerwise
    refusal and keeps stock's scale; stock builds within the budget, the plugin no more."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    make, measured, budget, blocks, allocated = LAYERWISE[model]
    stock = w.deployment(runner_for("layerwise"), make(), measured, monkeypatch, plugin=False, num_layers=12)
    ours = w.deployment(runner_for("layerwise"), make(), measured, monkeypatch, plugin=True, num_layers=12)
    assert (stock.budget, stock.num_blocks, stock.allocated) == (budget, blocks, allocated)
    assert (ours.budget, ours.num_blocks, ours.allocated) == (budget, blocks, allocated)
    assert within_budget(stock) and within_budget(ours) and ours.allocated <= stock.allocated


def test_the_decision_is_recorded_with_the_layerwise_refusal(monkeypatch):
    with w.plugin_patches():
        runner = runner_for("layerwise")(gpt_oss_like().kv_cache_config)
        budget = w.budget_step(runner, gpt_oss_like().specs, 1 << 26, monkeypatch, num_layers=12)
    decision = decision_of(runner)
    assert (decision.measured, decision.granted, decision.overlay) == (1 << 26, 1 << 25, False)
    assert "layerwise KV cache reuse" in decision.reason and not overlay_committed(runner)
    assert budget == int((1 << 25) * 2.4)  # stock's layerwise factor: 12 layers on 5 buffer assignments


# -- every refusal site, forced after an unscaled budget step -------------------------------------


def is_function(obj) -> bool:
    """A plain or cached (``functools.cache``) function: what a planner may call to refuse."""
    return inspect.isfunction(obj) or inspect.isfunction(getattr(obj, "__wrapped__", None))


def calls_in(fn) -> list[tuple[object, str]]:
    """``(owner, name)`` of every function ``fn`` calls by a module's attribute (``facts.X``,
    ``v2.X``) or by its module's global name, nested code (comprehensions, lambdas) included:
    read from its bytecode, so a call added to ``fn`` is found without editing a list."""
    import dis
    import types

    module = sys.modules[fn.__module__]
    found: list[tuple[object, str]] = []

    def walk(code) -> None:
        instructions = list(dis.get_instructions(code))
        for i, ins in enumerate(instructions):
            if ins.opname != "LOAD_GLOBAL":
                continue
            target = vars(module).get(ins.argval)
            following = instructions[i + 1] if i + 1 < len(instructions) else None
            if isinstance(target, types.ModuleType) and following is not None and following.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                if is_function(getattr(target, following.argval, None)):
                    found.append((target, following.argval))
            elif is_function(target):
                found.append((module, ins.argval))
        for const in code.co_consts:
            if inspect.iscode(const):
                walk(const)

    walk(fn.__code__)
    return list(dict.fromkeys(found))


def refusal_sites() -> list[tuple[object, str]]:
    """Every function the allocation's planning calls (``AscendAdapter.plan_runner`` and its
    :func:`overlay_plan`): release facts (``platforms.ascend.facts``) and the adapters' module functions.
    Each may refuse; a site added to either is covered here without editing this list."""
    return list(dict.fromkeys(calls_in(ascend_adapter.AscendAdapter.plan_runner) + calls_in(ascend_overlay.overlay_plan)))


def site_id(site) -> str:
    owner, name = site
    return f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"


#: Sites of the planning that the overlay's path does not call (forcing them changes nothing there).
OFF_THE_OVERLAY_PATH = {
    "facts.hybrid_corruption": "hybrids (Mamba + attention) only",
    "facts.legacy_sparse_form": "sparse attention (use_sparse) runners only",
    "runner.overlay_wanted": "not asked once the budget step committed the overlay",
    "runner.normalize_legacy_specs": "legacy sparse forms only (0.11-0.13 DeepSeek V3.2)",
    "runner.restate_bsh": "the BSH int8 layout only",
    "runner.plan_layout": "the per-layer (non-overlay) layouts",
    "facts.stock_shares_buffers": "the per-layer (non-overlay) layouts",
    "facts.interleaved_kv_layers": "the per-layer (non-overlay) layouts",
    "facts.coallocated_groups": "the per-layer (non-overlay) layouts",
    "facts.mamba_states_interleaved": "the per-layer (non-overlay) layouts",
    "facts.stock_shares_hybrid_tensors": "the per-layer (non-overlay) layouts",
}
SITES = [s for s in refusal_sites() if site_id(s) not in OFF_THE_OVERLAY_PATH]


def _force(monkeypatch, owner, name, calls, planner=(ascend_adapter.AscendAdapter, "plan_runner"), when=lambda: True):
    """Make ``owner.name`` refuse while the allocation plans (inside ``planner``, where ``when()``
    holds); elsewhere (the views after allocation, the budget step's own planning) it runs as before."""
    real, planning = getattr(owner, name), []
    cls, method = planner
    real_plan = getattr(cls, method)

    def refuse(*args, **kwargs):
        if not planning:
            return real(*args, **kwargs)
        calls.append(name)
        raise KVCacheLayoutError(f"forced refusal at {name}")

    def plan(self, *args, **kwargs):
        if not when():
            return real_plan(self, *args, **kwargs)
        planning.append(True)
        try:
            return real_plan(self, *args, **kwargs)
        finally:
            planning.pop()

    monkeypatch.setattr(owner, name, refuse)
    monkeypatch.setattr(cls, method, plan)


def test_the_sites_cover_the_adapter():
    names = {name for _, name in refusal_sites()}
    assert {"stock_only_kind", "strided_layout_gap", "hybrid_corruption", "overlay_form_refusal", "plan_kv_cache",
            "private_layer_config", "overlay_plan", "check_within_config", "layer_regions"} <= names


def test_every_site_is_forced_or_declared_off_the_overlay_path():
    """A planning call added to the adapter is forced below, or declared here with why not."""
    ids = {site_id(s) for s in refusal_sites()}
    assert set(OFF_THE_OVERLAY_PATH) <= ids, set(OFF_THE_OVERLAY_PATH) - ids


@pytest.mark.parametrize("mode", ["auto", "on"])
@pytest.mark.parametrize("site", SITES, ids=site_id)
def test_a_refusal_after_an_unscaled_budget_step_never_reaches_stock(site, mode, monkeypatch):
    """Budget left whole for the overlay, then the site refuses at allocation: UnscaledBudgetError in
    every mode, naming the refusal and both byte counts, with nothing allocated; stock's private
    buffers (2 x the budget) never."""
    monkeypatch.setenv("KV_STRATEGIES", mode)
    owner, name = site
    calls, allocated = [], []
    real = rf.NPUModelRunner._allocate_int8_cache_tensor
    monkeypatch.setattr(rf.NPUModelRunner, "_allocate_int8_cache_tensor",
                        lambda self, *a: allocated.append(a) or real(self, *a))
    measured = 1 << 26

    def force(runner):
        assert overlay_committed(runner) and decision_of(runner).granted == measured
        _force(monkeypatch, owner, name, calls)

    with pytest.raises(UnscaledBudgetError) as raised:
        w.deployment(runner_for(), gpt_oss_like(), measured, monkeypatch, plugin=True, before_build=force)
    assert calls, f"{site_id(site)} is not called on the overlay's path: declare it in OFF_THE_OVERLAY_PATH"
    assert f"forced refusal at {name}" in str(raised.value) and f"{measured}-byte budget unscaled" in str(raised.value)
    import re

    need, plan = map(int, re.search(r"would need (\d+) bytes for a (\d+)-byte plan", str(raised.value)).groups())
    assert need == 2 * plan and plan <= measured  # two groups of equal pages: private buffers are 2 x the backing
    assert allocated == []


@pytest.mark.parametrize("site", [s for s in SITES if s[1] in ("stock_only_kind", "strided_layout_gap", "overlay_form_refusal")],
                         ids=site_id)
def test_a_refusal_at_the_budget_step_keeps_stocks_scale_and_stock_builds_within_it(site, monkeypatch):
    """The same refusal seen at the budget step: stock's scale stays and is recorded, and the
    build (stock's, in auto) allocates within the measured budget."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    owner, name = site
    _force(monkeypatch, owner, name, [])
    measured = 1 << 26
    built = w.deployment(runner_for(), gpt_oss_like(), measured, monkeypatch, plugin=True)
    # stock's per-layer form: 6 full-attention layers K|V in one buffer, 6 sliding ones K and V apart
    assert (built.budget, built.num_blocks, built.buffers, built.allocated) == (measured // 2, 21, 18, 66_060_288)


# -- the guard at allocation -----------------------------------------------------------------------


def test_the_plugins_layout_beyond_kv_cache_memory_bytes_raises_before_allocating(monkeypatch):
    """A config vLLM planned beyond ``--kv-cache-memory-bytes`` (as an engine given the wrong
    bytes would): the plugin's overlay would allocate more than the budget, so it raises first."""
    from kv_compare import refused_before_allocating

    mk = gpt_oss_like()
    backing = mk.kv_cache_config.kv_cache_tensors[0].size
    runner = runner_for(kv_cache_memory_bytes=backing - 1)(mk.kv_cache_config)
    error = refused_before_allocating(runner, mk.kv_cache_config, KVBudgetExceededError, monkeypatch)
    assert str(error) == (
        f"the plugin's KV cache layout (NPUModelRunner) would allocate {backing} bytes in 1 raw buffers, beyond "
        f"--kv-cache-memory-bytes ({backing - 1} bytes); nothing was allocated"
    )


def test_stocks_build_beyond_kv_cache_memory_bytes_raises_before_allocating(monkeypatch):
    """``--kv-cache-memory-bytes`` (stock's worker never scales it) with an overlay the plugin
    refuses (paged attention): stock's private buffers would need 2 x the budget. In auto the
    fallback is measured on the meta device first and refused, naming both byte counts."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    mk = gpt_oss_like()
    backing = mk.kv_cache_config.kv_cache_tensors[0].size
    runner = runner_for(paged_attention=True, kv_cache_memory_bytes=backing)(mk.kv_cache_config)
    from vllm_kv_strategies.platforms.ascend.budget import BudgetDecision, record

    record(runner, BudgetDecision(backing, backing, overlay=False))  # the worker's step recorded its budget
    allocated = []
    real = rf.NPUModelRunner._allocate_int8_cache_tensor
    monkeypatch.setattr(rf.NPUModelRunner, "_allocate_int8_cache_tensor",
                        lambda self, *a: allocated.append(self.device) or real(self, *a))
    import kv_compare as kc

    with pytest.raises(KVBudgetExceededError, match=rf"stock's KV cache build .* would allocate {2 * backing} bytes in "
                                                    rf"24 raw buffers, beyond the KV cache budget the worker measured"):
        kc.plugin_init(runner, mk.kv_cache_config)
    assert all(device.type == "meta" for device in allocated) and runner.kv_caches == []


# -- the property -----------------------------------------------------------------------------------


@st.composite
def multi_group_models(draw):
    """2-6 sliding-window / full-attention pairs in a random pattern, 1-8 KV heads of 64 or 128,
    block 128 or 256, window 128-1024."""
    pairs = draw(st.integers(1, 3)) * 2
    types = draw(st.lists(st.sampled_from(["sliding_attention", "full_attention"]), min_size=pairs, max_size=pairs))
    if len(set(types)) == 1:
        types[0] = "full_attention" if types[0] == "sliding_attention" else "sliding_attention"
    return rf.gqa_model("random", num_blocks=4, num_layers=len(types), num_kv_heads=draw(st.sampled_from([1, 2, 8])),
                        head_dim=draw(st.sampled_from([64, 128])), block_size=draw(st.sampled_from([128, 256])),
                        layer_types=types, sliding_window=draw(st.sampled_from([128, 512, 1024])), max_model_len=2048)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@example(mk=gpt_oss_like(), connector="layerwise", paged_attention=False, measured=64 * MiB)  # the cases
@example(mk=gemma3_like(), connector="layerwise", paged_attention=False, measured=128 * MiB)
@example(mk=gpt_oss_like(), connector="transfer", paged_attention=True, measured=64 * MiB)
@given(mk=multi_group_models(), connector=st.sampled_from(["none", "transfer", "layerwise"]),
       paged_attention=st.booleans(), measured=st.sampled_from([24 * MiB, 64 * MiB, 200 * MiB]))
def test_auto_never_allocates_beyond_the_budget(mk, connector, paged_attention, measured):
    from _pytest.monkeypatch import MonkeyPatch

    with MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("KV_STRATEGIES", "auto")
        built = w.deployment(runner_for(connector, paged_attention), mk, measured, monkeypatch, plugin=True,
                             max_model_len=2048, num_layers=len(mk.specs))
    assert within_budget(built), (built.allocated, built.measured, built.buffers)


# -- Ascend's Model Runner V2: vLLM's overlay too --------------------------------------------------

#: model -> (stock's budget after its step, stock's num_blocks, the plugin's num_blocks, both sides'
#: bytes allocated) at a 1 GiB measured budget, the worker's runner Ascend's V2.
V2_OVERLAY = {
    "gpt-oss-like": (gpt_oss_like, 536_870_912, 341, 682, 1_072_693_248, 1_072_693_248),
    "gemma-3-like": (gemma3_like, 178_956_970, 85, 512, 1_069_547_520, 1_073_741_824),
}


@pytest.mark.parametrize("model", V2_OVERLAY)
def test_ascend_v2_builds_vllms_overlay_and_leaves_the_budget_whole(model, monkeypatch, kv_log):
    """V2's worker scales the budget for its per-layer buffers (0.5 / about 1/6); with the plugin
    the budget step decides the overlay for the V2 runner, the budget stays whole, and V2's
    allocation builds one backing of the config's bytes: 2.0x / 6.0x stock's blocks; the log
    names the V2 runner."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    make, stock_budget, stock_blocks, our_blocks, stock_bytes, our_bytes = V2_OVERLAY[model]
    measured = 1 << 30
    stock = w.deployment_v2(make(), measured, monkeypatch, plugin=False, model_type="gpt_oss")
    ours = w.deployment_v2(make(), measured, monkeypatch, plugin=True, model_type="gpt_oss")
    assert (stock.budget, stock.num_blocks, stock.allocated) == (stock_budget, stock_blocks, stock_bytes)
    assert (ours.budget, ours.num_blocks, ours.allocated, ours.buffers) == (measured, our_blocks, our_bytes, 1)
    assert within_budget(stock) and within_budget(ours)
    assert ours.num_blocks / stock.num_blocks >= (1.9 if model == "gpt-oss-like" else 5.5)
    assert any("budget left unscaled" in m and "NPUModelRunner (Ascend V2)" in m for m in kv_log.at(logging.INFO))


def test_ascend_v2_overlay_views_follow_v2s_rules(monkeypatch):
    """Layer i of a tensor is the region offset + i x layer_stride of the one backing; its K and V
    interleave per kernel block with V2's pitch (the physical page over the kernel blocks per
    block), V half a kernel block after K: the form V2 gives attention in its hybrid backings."""
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    mk = gpt_oss_like()
    ours = w.deployment_v2(mk, 1 << 26, monkeypatch, plugin=True, model_type="gpt_oss")
    kv = ours.kv_caches
    base = min(k.storage_offset() for k, _ in kv.values())
    config = rf.build_kv_cache_config(dict(mk.specs), 0, available_memory=1 << 26, max_model_len=1024)
    for tensor in config.kv_cache_tensors:
        for index, name in enumerate(tensor.layers):
            k, v = kv[name]
            spec = mk.specs[name]
            r = spec.block_size // k.shape[1]
            assert (k.storage_offset() - base) * k.element_size() == tensor.offset + index * tensor.layer_stride
            assert k.stride(0) * k.element_size() == spec.page_size_bytes // r
            assert (v.storage_offset() - k.storage_offset()) * k.element_size() * 2 * r == spec.page_size_bytes
            assert k.shape == v.shape == (config.num_blocks * r, k.shape[1], spec.num_kv_heads, spec.head_size)


def test_ascend_v2_keeps_stocks_scale_where_it_would_refuse_the_overlay(monkeypatch, kv_log):
    """Paged-attention kernels need contiguous K/V: no overlay on V2 either; stock's scale stays
    with one warning naming the runner and why, and stock's per-layer build fits the budget."""


    monkeypatch.setenv("KV_STRATEGIES", "auto")
    ours = w.deployment_v2(gpt_oss_like(), 1 << 26, monkeypatch, plugin=True, model_type="gpt_oss", paged_attention=True)
    assert ours.budget == 1 << 25 and within_budget(ours) and ours.buffers == 24
    [warning] = [m for m in kv_log.at(logging.WARNING) if "budget scale" in m]
    assert "stock's multi-group KV cache budget scale (0.5000) stays" in warning
    assert "paged-attention kernels need contiguous K/V caches" in warning


def v2_refusal_sites() -> list[tuple[object, str]]:
    """Every function Ascend V2's allocation planning (``plan_v2``) calls."""
    from vllm_kv_strategies.platforms.ascend import runner_v2 as adapter_v2

    return calls_in(adapter_v2.AscendV2AllocationAdapter.plan_v2)


#: V2 planning calls the overlay's path does not make.
V2_OFF_THE_OVERLAY_PATH = {
    "v2_layout.unbuilt_reason": "the per-layer (non-overlay) layouts",
    "runner_v2.plan_layout": "the per-layer (non-overlay) layouts",
    "facts.private_layer_config": "the per-layer (non-overlay) layouts",
    "v2_layout.hybrid_stride_misfit": "hybrids (the overlay checks its strides in overlay_refusal)",
}
V2_SITES = [s for s in v2_refusal_sites() if site_id(s) not in V2_OFF_THE_OVERLAY_PATH]


def test_every_v2_site_is_forced_or_declared_off_the_overlay_path():
    ids = {site_id(s) for s in v2_refusal_sites()}
    assert set(V2_OFF_THE_OVERLAY_PATH) <= ids, set(V2_OFF_THE_OVERLAY_PATH) - ids


@pytest.mark.parametrize("site", V2_SITES, ids=site_id)
def test_a_refusal_after_an_unscaled_budget_step_never_reaches_stock_v2(site, monkeypatch):
    """As on V1: the V2 runner's budget left whole, then a site of V2's planning refuses:
    UnscaledBudgetError in auto, nothing allocated."""
    from vllm_kv_strategies.platforms.ascend import runner_v2 as adapter_v2

    monkeypatch.setenv("KV_STRATEGIES", "auto")
    owner, name = site
    calls = []

    def allocating() -> bool:  # the V2 runner's initialize_kv_cache, its budget left whole (not the budget step)
        pending = adapter_v2._pending
        return bool(pending) and pending[-1] is not None and overlay_committed(pending[-1])

    _force(monkeypatch, owner, name, calls, (adapter_v2.AscendV2AllocationAdapter, "plan_v2"), allocating)
    with pytest.raises(UnscaledBudgetError) as raised:
        w.deployment_v2(gpt_oss_like(), 1 << 26, monkeypatch, plugin=True, model_type="gpt_oss")
    assert calls, f"{site_id(site)} is not called on the overlay's path: declare it in V2_OFF_THE_OVERLAY_PATH"
    assert f"forced refusal at {name}" in str(raised.value) and "Ascend Model Runner V2" in str(raised.value)
