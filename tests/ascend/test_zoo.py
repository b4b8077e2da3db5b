"""The Ascend model zoo (``zoo_models``): published model configs at TP 1, 4 and 8, with and
without ``kv_transfer_config``, built with the spec classes the installed release's runner
produces and planned by that release's vLLM planner; stock ``NPUModelRunner`` against the
plugin (``KV_STRATEGIES=auto``) on the same config. Runs in every Ascend cell.

Each case gets one verdict, and the rule is asserted:

* ``identical``: the same layers, views (shape, dtype, stride), storages, byte offsets inside
  them and bytes;
* ``better``: the same layers, shapes and dtypes (never fewer blocks or tokens), fewer bytes
  (stock -> plugin in the table), or stock fails / corrupts (two layers alias a byte under
  different block indices) where the plugin builds;
* ``fallback``: auto leaves the runner stock, with exactly one warning, naming a layer, and the
  result is stock's (stock's error where stock fails);
* ``refused``: the plugin raises ``StockWouldFailError`` in every mode, only where stock fails
  or corrupts too.

Wherever the plugin builds, its caches are block-consistent, no two ``KVCacheTensor`` s share a
storage, every layer has at least ``num_blocks`` blocks and is bound to its module (in the form
the release's vLLM binds it) and in ``runner.kv_caches``, and it never allocates more than
stock, nor more than the config's ``KVCacheTensor`` s hold (besides the 2 MiB transfer alignment
of each raw buffer, which stock adds too). Anything else fails the case (a plugin bug).

CI runs :data:`CI_SLICE` (every spec kind, TP 1 and 4, with and without transfer); ``KV_ZOO=all``
runs the whole zoo (``tools/nox.sh -s zoo-ascend-0.23.0``, or any ``zoo-ascend-X``). The verdicts
are printed as a table at the end of the run.
"""

from __future__ import annotations

import logging
import os

import pytest
import runner_factory as rf

from vllm_kv_strategies.platforms.ascend import facts
import zoo_models
from kv_compare import (
    Built,
    block_conflicts,
    blocks_of,
    layers_sharing_storage,
    layout_signature,
    plugin_init,
    run,
    stock_init,
    storages,
    strided,
    tensors_sharing_storage,
)

from vllm_kv_strategies.platforms.ascend.runner import TRANSFER_ALIGNMENT
from vllm_kv_strategies.errors import StockWouldFailError

R = rf.RELEASE
#: What a 0.30 refusal by name (``platforms.ascend.strided.unbuilt_layout_reason``) says.
UNBUILT_030 = "the strategies do not build the vllm-ascend 0.30 layouts of "
#: 0.11 / 0.13: the plugin also resizes Qwen3-Next-type hybrids (``platforms.ascend.targets.HYBRID_SIZING``);
#: those models run at stock sizing and at the plugin's (both sides on the plugin-sized config).
SIZED = R in ((0, 11), (0, 13))
SIZED_MODELS = {"Qwen3-Next-80B-A3B", "Qwen3-Next-80B-A3B MTP", "Qwen3.5-style hybrid"}
#: The CI slice: each spec kind (full, MLA, sparse MLA, GDN and linear-attention hybrids,
#: sliding window, chunked local) once, with MTP layers, at TP 1 and 4, with and without transfer.
CI_SLICE = (
    "Qwen3-30B-A3B",
    "DeepSeek-V3 MTP",
    "DeepSeek-V3.2-Exp MTP",
    "Qwen3-Next-80B-A3B MTP",
    "MiniMax-M1",
    "Gemma-3-27B",
    "Llama-4-Scout-17B-16E",
)
WHOLE = os.environ.get("KV_ZOO", "").lower() == "all"


def _cases():
    names = list(zoo_models.MODELS) if WHOLE else list(CI_SLICE)
    tps = zoo_models.TPS if WHOLE else (1, 4)
    for name in names:
        for sizing in ("stock", "plugin") if SIZED and name in SIZED_MODELS else ("stock",):
            for tp in tps:
                for transfer in (False, True):
                    yield pytest.param(
                        name, sizing, tp, transfer,
                        id=f"{name.replace(' ', '_')}{'-sized' if sizing == 'plugin' else ''}-tp{tp}-{'kvt' if transfer else 'plain'}",
                    )


def _error(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:160]}"


def verdict(config, stock: Built, ours: Built, warnings: list[str]) -> tuple[str, str]:
    """(result, detail) of one case, asserting the zoo's rule; see the module docstring."""
    layers = [name for group in config.kv_cache_groups for name in group.layer_names]
    stock_conflicts = block_conflicts(stock.kv, config) if stock.kv is not None else []
    stock_bad = _error(stock.error) if stock.error is not None else (f"stock corrupts: {stock_conflicts[0]}" if stock_conflicts else "")
    fallbacks = [w for w in warnings if "falling back to stock" in w]

    if isinstance(ours.error, StockWouldFailError):
        assert stock_bad, f"refused ({_error(ours.error)}) where stock builds a block-consistent cache"
        return "refused", f"{type(ours.error).__name__} (stock: {stock_bad})"
    if fallbacks:
        assert len(warnings) == 1, warnings
        if strided(config) and UNBUILT_030 in fallbacks[0]:
            # 0.30's refusals by name: the feature and every spec class of the config, not a layer
            kinds = ", ".join(sorted({type(spec).__name__ for spec in rf._layer_specs(config).values()}))
            assert f"({kinds}) yet; stock builds them" in fallbacks[0], f"the fallback warning names not the config's kinds ({kinds}): {fallbacks[0]}"
        else:
            assert any(layer in fallbacks[0] for layer in layers), f"the fallback warning names no layer: {fallbacks[0]}"
        reason = fallbacks[0].split("falling back to stock KV cache for all layers: ", 1)[-1]
        if stock.error is not None:
            assert ours.error is not None and type(ours.error) is type(stock.error), (ours.error, stock.error)
            return "fallback", f"{reason[:160]} (stock fails too: {_error(stock.error)})"
        assert ours.error is None, f"auto stops where stock does not: {_error(ours.error)}"
        assert layout_signature(ours.kv) == layout_signature(stock.kv), "the fallback is not stock's build"
        return "fallback", reason[:200]
    assert ours.error is None, f"the plugin fails in auto without falling back: {_error(ours.error)}"
    assert not warnings, warnings

    # The plugin built: its own invariants, whatever stock did.
    kv = ours.kv
    assert set(kv) == set(layers)
    assert not block_conflicts(kv, config), block_conflicts(kv, config)
    if strided(config) and facts.is_hybrid(config):  # 0.30 hybrids: stock's one backing, regions per layer
        assert len({t.untyped_storage().data_ptr() for v in kv.values() for t in v}) == 1
    else:
        assert not tensors_sharing_storage(kv, config)
    if strided(config) and not facts.is_hybrid(config):  # 0.30: stock's private per-layer buffers
        assert not layers_sharing_storage(kv), layers_sharing_storage(kv)[:3]
    assert min(blocks_of(kv, config).values()) >= config.num_blocks
    assert not ours.unbound, f"layers the model cannot reach: {ours.unbound}"
    if stock.error is not None:
        return "better", f"stock fails: {_error(stock.error)}"
    if stock.unbound:
        missing = f"stock leaves {len(stock.unbound)} of {len(kv)} layers out of runner.kv_caches or unbound ({stock.unbound[0]}, ...)"
        stock_bad = "; ".join(filter(None, (stock_bad, missing)))
    assert set(stock.kv) == set(kv)
    same_views = all(
        [(tuple(t.shape), t.dtype) for t in kv[name]] == [(tuple(t.shape), t.dtype) for t in stock.kv[name]] for name in kv
    )
    assert same_views, "shapes or dtypes differ from stock"
    if layout_signature(kv) == layout_signature(stock.kv):
        assert not stock_conflicts
        return ("better", stock_bad) if stock.unbound else ("identical", "")
    assert ours.bytes <= stock.bytes, f"the plugin allocates more than stock: {stock.bytes:,} -> {ours.bytes:,}"
    if ours.bytes < stock.bytes:
        return "better", f"{stock.bytes:,} -> {ours.bytes:,} bytes" + (f"; {stock_bad}" if stock_bad else "")
    assert stock_conflicts or stock.unbound, "same bytes as stock but a different layout, and stock is block-consistent"
    return "better", stock_bad


@pytest.mark.parametrize("name,sizing,tp,transfer", list(_cases()))
def test_zoo(name, sizing, tp, transfer, monkeypatch, kv_log, zoo_table):
    model = zoo_models.MODELS[name]
    reason = model.unsupported()
    if reason:
        pytest.skip(f"{name} on vllm-ascend {rf.ASCEND_VERSION}: {reason}")
    mk = model.build(tp) if sizing == "stock" else model.build_sized(tp)
    config = mk.kv_cache_config
    stock = run(stock_init, mk.make_runner(kv_transfer=transfer), config)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    ours = run(plugin_init, mk.make_runner(kv_transfer=transfer), config)
    warnings = [r.getMessage() for r in kv_log.records if r.levelno >= logging.WARNING]
    kinds = "+".join(model.kinds) + (f" +{model.mtp} MTP" if model.mtp else "")
    row = [name + (" (plugin sizing)" if sizing == "plugin" else ""), tp, transfer, kinds, "FAILED", "", stock.bytes, ours.bytes]
    zoo_table.append(row)
    result, detail = verdict(config, stock, ours, warnings)
    if result in ("identical", "better") and ours.error is None and not warnings:  # the plugin built
        assert_within_config(ours, config, transfer)
    row[4:6] = result, detail


def assert_within_config(ours: Built, config, transfer: bool) -> None:
    """Issue 22's invariant: the plugin's storages hold at most the config's ``KVCacheTensor``
    bytes, besides the 2 MiB transfer alignment of each raw buffer (stock pads its buffers the
    same way; each storage is one raw buffer)."""
    padding = TRANSFER_ALIGNMENT * len(storages(ours.kv)) if transfer else 0
    budget = sum(t.size for t in config.kv_cache_tensors)
    assert ours.bytes - padding <= budget, f"the plugin allocates {ours.bytes - padding:,} bytes for a {budget:,}-byte config"


def test_the_zoo_checks_see_cross_block_aliasing():
    """The checks the verdicts rest on: two layers aliasing bytes under the same block index
    are fine; the same bytes under block 1 of one and block 0 of the other are a conflict, and
    so are two parts of one layer on the same bytes."""
    import torch

    config = rf.qwen3_8b(tp=8, num_blocks=2).kv_cache_config  # K / V pages of 32,768 bytes
    a, b = config.kv_cache_groups[0].layer_names[:2]
    raw, other = torch.zeros(3 * 32768, dtype=torch.int8), torch.zeros(2 * 32768, dtype=torch.int8)

    def part(buf, start):
        return buf[start : start + 2 * 32768].view(torch.bfloat16).view(2, 128, 1, 128)

    same = {a: (part(raw, 0), part(other, 0)), b: (part(raw, 0), part(other, 0))}
    assert block_conflicts(same, config) == []
    shifted = {a: (part(raw, 0), part(other, 0)), b: (part(raw, 32768), part(other, 0))}
    [conflict] = block_conflicts(shifted, config)
    assert conflict == f"{b} part 0 block 0 and {a} part 0 block 1 share bytes [32768, 65536)"
    overlapping = {a: (part(raw, 0), part(raw, 0))}
    assert block_conflicts(overlapping, config)[0].startswith(f"{a} part 0 block 0 and {a} part 1 block 0")


@pytest.mark.parametrize("raised", ["unsupported", "corrupt"])
def test_the_verdicts_of_a_fallback_and_of_a_refusal(raised, monkeypatch, kv_log):
    """The rule on the two outcomes the zoo does not meet today: a plan that fails leaves the
    runner stock in auto with one warning naming the layer (``fallback``, stock's result); a
    ``StockWouldCorruptError`` where stock builds a block-consistent cache breaks the rule."""
    from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
    from vllm_kv_strategies.errors import StockWouldCorruptError, UnsupportedSpecError

    mk = zoo_models.MODELS["Qwen3-30B-A3B"].build(4)
    config = mk.kv_cache_config
    layer = config.kv_cache_groups[0].layer_names[0]
    error = {"unsupported": UnsupportedSpecError, "corrupt": StockWouldCorruptError}[raised]

    def plan_runner(self, runner, kv_cache_config, kernel_block_sizes=None):
        raise error(f"layer {layer!r}: no strategy (test)")

    monkeypatch.setattr(AscendAdapter, "plan_runner", plan_runner)
    stock = run(stock_init, mk.make_runner(), config)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    ours = run(plugin_init, mk.make_runner(), config)
    warnings = [r.getMessage() for r in kv_log.records if r.levelno >= logging.WARNING]
    if raised == "unsupported":
        assert verdict(config, stock, ours, warnings) == ("fallback", f"layer {layer!r}: no strategy (test)")
    else:
        with pytest.raises(AssertionError, match="refused .* where stock builds a block-consistent cache"):
            verdict(config, stock, ours, warnings)
