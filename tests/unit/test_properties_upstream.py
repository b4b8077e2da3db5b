"""Property-based tests: the upstream adapters (V1 and V2) equal stock on random configs.

Hypothesis draws random sets of layer specs (``FullAttentionSpec``,
``SlidingWindowSpec``, ``MLAAttentionSpec``, ``MambaSpec``: block sizes, head
counts, K/V head sizes, dtypes, Mamba states of mixed dtypes), a KV cache layout,
``num_blocks``, kernel block sizes per group and cross-layer KV sharing. vLLM
0.32's own planner (``get_kv_cache_groups`` + ``get_kv_cache_config_from_groups``)
turns them into a ``KVCacheConfig``; for each runner (V1's
``GPUModelRunner.initialize_kv_cache_tensors`` and V2's ``init_kv_cache``) stock and the
plugin build it, and every layer must come out the same: shape, stride, dtype, storage
offset, aliasing, binding and bytes allocated (``assert_same`` of test_upstream_adapter).
Where stock raises, the plugin must raise too. The plugin must plan every config stock
builds (no fallback warning), per-token-head int8 / fp8 / int4 pages (made by the Triton
backend's ``customize_spec``) included, except specs the strategies refuse (per-token-head
pages of different K and V widths, which Triton's reader cannot split), which must fall back
to stock (the default ``auto``) with one warning and so equal it. Configs vLLM's
planner cannot plan are counted and skipped. Bugs found are pinned by xfail(strict) regression
tests at the end; the random run counts configs that hit them (``known_bug``) instead of failing.

Reproducible: ``derandomize=True`` and no example database. The number of examples
run and what they covered (planner refusals, layouts, kinds, ...) is written to the
terminal at the end of the module, also under ``-q``, and kept in ``STATS``.

Run: ``tools/nox.sh -s upstream-0.32.0 -- tests/unit/test_properties_upstream.py``
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu.model_runner", reason="needs vLLM's Model Runner V2 (vLLM >= 0.30)")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, event, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_upstream_adapter import RUNNERS, assert_same, build, make_runner  # noqa: E402  (tests/unit is on sys.path)
from upstream_harness import HAS_V1, through_adapter  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVQuantMode,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE  # noqa: E402
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend  # noqa: E402
from vllm.v1.kv_cache_interface import get_kv_quant_mode  # noqa: E402

from vllm_kv_strategies.errors import KVCacheLayoutError  # noqa: E402
from vllm_kv_strategies.core.specs import kv_cache_planner  # noqa: E402
from vllm_kv_strategies.logger import reset_warn_once  # noqa: E402

get_kv_cache_groups, get_kv_cache_config_from_groups = kv_cache_planner()

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
PER_TOKEN_HEAD = ("int8_per_token_head", "fp8_per_token_head", "int4_per_token_head")


def refused_per_token_head(spec) -> bool:
    """A per-token-head page of different K and V widths: Triton's reader splits the cell in halves."""
    mode = getattr(spec, "kv_quant_mode", KVQuantMode.NONE)
    return mode.is_per_token_head and spec.head_size != getattr(spec, "head_size_v", spec.head_size)
DTYPES = (BF16, FP16, FP32)
LAYOUTS = ("LBHNC", "LBNHC", "BLHNC")
EXTRA_LAYOUTS = ("LHBNC", "BLNHC", "BHLNC")
MAX_EXAMPLES = 300

STATS: dict[str, Counter] = {}

_BASE_CONFIG: VllmConfig | None = None


def base_config() -> VllmConfig:
    """``VllmConfig()`` takes ~0.15 s; build it once and deep-copy it per example."""
    global _BASE_CONFIG
    if _BASE_CONFIG is None:
        _BASE_CONFIG = VllmConfig()
    return copy.deepcopy(_BASE_CONFIG)


# ---------------------------------------------------------------------------------------------
# generators


@st.composite
def attention_family(draw, kind: str, mla_dims: tuple[int, int]):
    block_size = draw(st.sampled_from((16, 32, 64)))
    dtype = draw(st.sampled_from(DTYPES))
    if kind == "mla":
        return MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=sum(mla_dims), dtype=dtype)
    heads = draw(st.integers(1, 4))
    head_size = draw(st.sampled_from((8, 16, 32, 64, 128)))
    head_size_v = draw(st.sampled_from((None, None, 8, 32, 64)))
    kw = dict(block_size=block_size, num_kv_heads=heads, head_size=head_size, dtype=dtype)
    quant = draw(st.sampled_from(("none",) * 6 + ("fp8", *PER_TOKEN_HEAD)))
    if quant == "fp8":  # dense fp8 pages (per-tensor scales): the plugin builds them
        kw.update(dtype=torch.float8_e4m3fn, kv_quant_mode=KVQuantMode.FP8_PER_TENSOR)
    elif quant in PER_TOKEN_HEAD:  # inline fp32 scales per token and head (quant_attention)
        kw.update(dtype=STR_DTYPE_TO_TORCH_DTYPE[quant], kv_quant_mode=get_kv_quant_mode(quant))
    if head_size_v is not None:
        kw["head_size_v"] = head_size_v
    if kind == "swa":
        spec = SlidingWindowSpec(sliding_window=draw(st.sampled_from((32, 64, 128))), **kw)
    else:
        spec = FullAttentionSpec(**kw)
    return TritonAttentionBackend.customize_spec(spec)  # the page vLLM's GPU runner gives it


@st.composite
def mamba_family(draw):
    block_size = draw(st.sampled_from((16, 32, 64)))
    n_states = draw(st.integers(1, 2))
    shapes, dtypes = [], []
    for i in range(n_states):
        if i == 0:
            shape = (draw(st.integers(1, 4)), draw(st.sampled_from((8, 16, 32, 64))))
        else:
            shape = (draw(st.integers(1, 4)), draw(st.sampled_from((4, 8, 16))), draw(st.sampled_from((4, 8, 16))))
        shapes.append(shape)
        dtypes.append(draw(st.sampled_from(DTYPES)))
    return MambaSpec(block_size=block_size, shapes=tuple(shapes), dtypes=tuple(dtypes))


@st.composite
def upstream_case(draw):
    """Layer specs (dict, in model order), layout, num_blocks, KV sharing, kernel block choice."""
    mla_dims = (draw(st.sampled_from((32, 64, 128, 512))), draw(st.sampled_from((16, 32, 64))))
    kinds = draw(st.lists(st.sampled_from(("fa", "swa", "mla", "mamba")), min_size=1, max_size=4))
    families = []
    for kind in kinds:
        spec = draw(mamba_family()) if kind == "mamba" else draw(attention_family(kind, mla_dims))
        families.append((kind, spec, draw(st.integers(1, 3))))
    specs: dict[str, object] = {}
    attn_layers: list[str] = []
    index = 0
    # interleave the families' layers in a drawn order, as real models interleave layer types
    order = [fid for fid, (_, _, n) in enumerate(families) for _ in range(n)]
    order = draw(st.permutations(order))
    for fid in order:
        kind, spec, _ = families[fid]
        name = f"model.layers.{index}." + ("linear_attn" if kind == "mamba" else "self_attn.attn")
        specs[name] = spec
        if kind != "mamba":
            attn_layers.append(name)
        index += 1
    shared = {}
    if attn_layers and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 2))):
            shared[f"model.layers.{index}.self_attn.attn"] = draw(st.sampled_from(attn_layers))
            index += 1
    layout = draw(st.sampled_from(LAYOUTS + LAYOUTS + EXTRA_LAYOUTS))
    num_blocks = draw(st.integers(1, 6))
    # per group: None (no kernel blocks list), or a fraction of the group's block size
    kernel = draw(st.one_of(st.none(), st.lists(st.sampled_from((1, 2, 2, 4)), min_size=1, max_size=6)))
    return dict(specs=specs, mla_dims=mla_dims, shared=shared, layout=layout, num_blocks=num_blocks, kernel=kernel)


# ---------------------------------------------------------------------------------------------
# running stock and the plugin


def plan(specs: dict, layout: str, num_blocks: int):
    vllm_config = base_config()
    vllm_config.cache_config.kv_cache_layout = layout
    vllm_config.cache_config.num_gpu_blocks_override = num_blocks
    groups = get_kv_cache_groups(vllm_config, dict(specs))
    config = get_kv_cache_config_from_groups(vllm_config, groups, 1 << 40)
    assert config.num_blocks == num_blocks
    return vllm_config, config


def kernel_block_sizes(config, kernel) -> list[int] | None:
    """Group block size divided by the drawn factor (only for attention groups whose block size
    it divides into whole tokens); Mamba groups keep their block size."""
    if kernel is None:
        return None
    sizes = []
    for gid, group in enumerate(config.kv_cache_groups):
        bs = group.kv_cache_spec.block_size
        factor = kernel[gid % len(kernel)]
        is_mamba = isinstance(group.kv_cache_spec, MambaSpec)
        sizes.append(bs if is_mamba or bs % factor else bs // factor)
    return sizes


def run_case(case: dict, stats: Counter, log) -> None:
    stats["examples"] += 1
    try:
        vllm_config, config = plan(case["specs"], case["layout"], case["num_blocks"])
    except Exception as exc:  # noqa: BLE001 - vLLM's planner refuses (or trips over) some drawn sets
        # (e.g. StopIteration from _get_packed_kv_cache_groups, a vLLM 0.32 planner bug: BLHNC,
        # SlidingWindowSpec(32, 2 heads, 128 / v 64, fp16), 2 x SlidingWindowSpec(32, 1, 8, bf16),
        # FullAttentionSpec(16, 2, 64 / v 32, fp16))
        stats[f"planner refused ({type(exc).__name__})"] += 1
        event(f"planner refused: {type(exc).__name__}")
        return
    kbs = kernel_block_sizes(config, case["kernel"])
    hf = SimpleNamespace(model_type="deepseek_v2", kv_lora_rank=case["mla_dims"][0], qk_rope_head_dim=case["mla_dims"][1])
    object.__setattr__(vllm_config, "model_config", SimpleNamespace(hf_config=hf, hf_text_config=hf))
    names = list(case["specs"])
    refused = any(refused_per_token_head(s) for s in case["specs"].values())
    if case["shared"] and not HAS_V1:  # only V1 takes sharing from a runner attribute (see below)
        stats["cross-layer sharing, no V1 to compare on"] += 1
        return
    for version in RUNNERS:
        if version == "v2" and case["shared"]:
            continue  # V2 takes cross-layer sharing from real Attention modules (the zoo covers it)
        log.clear()
        reset_warn_once()  # each runner stands for a worker of its own
        stock_exc = ours_exc = None
        try:
            stock = build(version, vllm_config, config, names, copy.deepcopy(kbs), plugin=False, shared=case["shared"])
        except Exception as exc:  # noqa: BLE001 - compared with the plugin's below
            stock_exc = exc
        try:
            ours = build(version, vllm_config, config, names, copy.deepcopy(kbs), plugin=True, shared=case["shared"])
        except Exception as exc:  # noqa: BLE001
            ours_exc = exc
        if stock_exc is not None:
            assert ours_exc is not None, f"{version}: stock raised {stock_exc!r} but the plugin built a KV cache"
            stats[f"both raised ({type(stock_exc).__name__} / {type(ours_exc).__name__})"] += 1
            event("both raised")
            continue
        if ours_exc is not None:
            raise AssertionError(f"{version}: stock built the KV cache but the plugin raised {ours_exc!r}") from ours_exc
        assert_same(stock, ours)
        warnings = log.at(logging.WARNING)
        if refused:
            assert len(warnings) == 1 and "_PER_TOKEN_HEAD" in warnings[0] and "head_size_v" in warnings[0], warnings
        else:
            assert warnings == [], f"{version}: the plugin fell back on a config it should plan: {warnings}"
        stats[f"compared {version}"] += 1
    stats["compared"] += 1
    stats[f"groups={len(config.kv_cache_groups)}"] += 1
    stats[f"layout={case['layout']}"] += 1
    if kbs is not None and any(kb != g.kv_cache_spec.block_size for kb, g in zip(kbs, config.kv_cache_groups)):
        stats["kernel blocks split"] += 1
    if case["shared"]:
        stats["cross-layer sharing"] += 1
    modes = {getattr(s, "kv_quant_mode", KVQuantMode.NONE) for s in case["specs"].values()}
    if KVQuantMode.FP8_PER_TENSOR in modes:
        stats["fp8 pages"] += 1
    if refused:
        stats["per-token-head, K/V widths differ (stock fallback)"] += 1
    elif any(m.is_per_token_head for m in modes):
        stats["per-token-head pages"] += 1
    kinds = {type(s).__name__ for s in case["specs"].values()}
    stats["kinds=" + "+".join(sorted(kinds))] += 1
    event("compared")


def known_bug(case: dict, exc: BaseException) -> str | None:
    """Failures of the plugin already reported (see the regression tests at the end); the
    property test records them instead of failing, the xfail(strict) tests pin them."""
    return None


def report_line(name: str, stats: Counter) -> str:
    return f"\n[{name}] {stats['examples']} examples: " + ", ".join(
        f"{k} {v}" for k, v in sorted(stats.items()) if k != "examples"
    )


@pytest.fixture(scope="module")
def stats_of(request):
    """Counters per property; written to the terminal (even under -q and capture) at the end."""
    yield STATS
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    for name, stats in STATS.items():
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(report_line(name, stats))
        else:  # pragma: no cover
            print(report_line(name, stats))


# ---------------------------------------------------------------------------------------------
# the properties

# Explicit examples: every configuration that ever failed while this file was written, plus a few
# fixed shapes that must always be covered.
_SPEC_DENSE = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=BF16)
_SPEC_MAMBA = MambaSpec(block_size=16, shapes=((3, 64), (2, 16, 16)), dtypes=(BF16, FP32))
_FIXED_CASES = [
    # U1 (found by this test): stock builds it, the plugin refuses (LHBNC: block stride < page)
    dict(
        specs={"model.layers.0.self_attn.attn": FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype=BF16)},
        mla_dims=(32, 16), shared={}, layout="LHBNC", num_blocks=1, kernel=None,
    ),
    dict(
        specs={f"model.layers.{i}.self_attn.attn": _SPEC_DENSE for i in range(3)},
        mla_dims=(512, 64), shared={}, layout="BLHNC", num_blocks=3, kernel=None,
    ),
    dict(
        specs={"model.layers.0.linear_attn": _SPEC_MAMBA, "model.layers.1.self_attn.attn": _SPEC_DENSE},
        mla_dims=(512, 64), shared={"model.layers.2.self_attn.attn": "model.layers.1.self_attn.attn"},
        layout="LBNHC", num_blocks=2, kernel=[2],
    ),
]


def _with_examples(fn):
    for case in _FIXED_CASES:
        fn = example(case=case)(fn)
    return fn


@_with_examples
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=upstream_case())
def test_upstream_adapter_equals_stock_on_random_configs(case, stats_of, kv_log):
    reset_warn_once()  # each drawn config stands for a fresh worker
    run_case(case, stats_of.setdefault("upstream_equals_stock", Counter()), kv_log)


def test_property_run_covered_every_kind(stats_of):
    """The random run above really compared (not only refused) configs of each kind."""
    stats = stats_of.get("upstream_equals_stock")
    if stats is None or stats["examples"] < MAX_EXAMPLES:
        pytest.skip("run together with test_upstream_adapter_equals_stock_on_random_configs")
    assert stats["compared"] >= MAX_EXAMPLES // 2, stats
    assert stats["compared v2"] >= MAX_EXAMPLES // 3, stats
    kinds = {k for k in stats if k.startswith("kinds=")}
    for name in ("FullAttentionSpec", "SlidingWindowSpec", "MLAAttentionSpec", "MambaSpec"):
        assert any(name in k for k in kinds), (name, stats)
    for layout in LAYOUTS:
        assert stats[f"layout={layout}"] > 0, stats
    assert stats["kernel blocks split"] > 0, stats
    assert stats["cross-layer sharing"] > 0 if HAS_V1 else stats["cross-layer sharing, no V1 to compare on"] > 0, stats
    assert stats["fp8 pages"] > 0 and stats["per-token-head pages"] > 0, stats
    assert stats["per-token-head, K/V widths differ (stock fallback)"] > 0, stats


# ---------------------------------------------------------------------------------------------
# regression tests: plugin bugs the property found (xfail until fixed; strict, so a fix shows)


def test_regression_u1_lhbnc_layout_matches_stock():
    """U1 (fixed): with the LHBNC layout (heads outside blocks) a tensor's block_stride is one
    head's slice, smaller than the page; the bounds check once refused it where stock builds it."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype=BF16)
    case = dict(
        specs={"model.layers.0.self_attn.attn": spec}, mla_dims=(32, 16), shared={}, layout="LHBNC",
        num_blocks=1, kernel=None,
    )
    vllm_config, config = plan(case["specs"], "LHBNC", 1)
    assert config.kv_cache_tensors[0].block_stride < spec.page_size_bytes  # 512 < 1024
    names = list(case["specs"])
    stock_runner, ours_runner = make_runner(vllm_config, names), make_runner(vllm_config, names)
    stock = through_adapter(stock_runner, copy.deepcopy(config), plugin=False)
    ours = through_adapter(ours_runner, copy.deepcopy(config))
    assert_same((stock_runner, stock), (ours_runner, ours))
