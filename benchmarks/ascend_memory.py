"""Memory, capacity and init time: stock vllm-ascend against the plugin, side by side.

Run in an Ascend cell's environment (tools/nox.sh -s ascend-X builds it in .nox/ascend-X with dashes):

    .nox/ascend-0-23-0/bin/python benchmarks/ascend_memory.py [--budget-mib 1024] [--repeats 5] [--quick]
        [--only {memory,init}] [--json OUT]

For the real layer configurations of Qwen3-Next-80B-A3B (TP 4), DeepSeek-V3 (MLA),
DeepSeek-V3.2-Exp (sparse MLA) and Qwen3-8B (dense), with the same per-device KV
budget, the stock NPUModelRunner methods and the plugin's run in one process on CPU
tensors (torch_npu stubbed, tests/ascend/npu_stubs.py), with and without
kv_transfer_config. Each side is planned by vLLM's rule (num_blocks = budget // bytes
per block) with its own sizing: on vllm-ascend 0.11 / 0.13 the plugin also sizes hybrid
pages (Qwen3-Next: attention block 512 instead of 384 at TP4, K page = ssm state), so
its Qwen3-Next config has fewer, larger blocks than stock's at the same budget and
allocates exactly that budget, where stock allocates 2x (0.13) or 4x (0.11) of its own.
Both sides are measured by the same code (the plugin's report, which counts storages
and view extents). Then the KV cache initialisation time of 61-layer DeepSeek-V3 and
48-layer Qwen3-Next (one config for both sides), paired: after one unmeasured run of
each side, each of --repeats pairs runs stock and the plugin back to back (which goes
first alternates), each on a fresh runner and its own deep copy of the config;
plugin / stock is the median of the pairs' ratios (robust to load that other processes
put on the machine), shown with each side's median in ms. --only memory / --only init
runs one section (default both).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ascend"))
os.environ.setdefault("KV_STRATEGIES", "off")  # both sides are called explicitly

import importlib.metadata  # noqa: E402

import npu_stubs  # noqa: E402

npu_stubs.install(importlib.metadata.version("vllm-ascend"))

import logging  # noqa: E402

import runner_factory as rf  # noqa: E402

logging.getLogger("vllm.kv_strategies").setLevel(logging.WARNING)  # no summary lines in the tables

from vllm_kv_strategies import patching  # noqa: E402
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter  # noqa: E402
from vllm_kv_strategies.errors import KVStrategiesError  # noqa: E402
from vllm_kv_strategies.report import build_report  # noqa: E402

#: name -> build(num_blocks, plugin_sizing): plugin_sizing=True sizes the config as the front-end
#: does with the plugin registered (hybrid models on vllm-ascend 0.11 / 0.13; else the same).
MODELS = {
    "Qwen3-Next-80B-A3B TP4": lambda n, sized: rf.qwen3_next(tp=4, num_blocks=n, plugin_sizing=sized),
    "DeepSeek-V3": lambda n, sized: rf.deepseek_v3(num_blocks=n),
    "DeepSeek-V3.2-Exp": lambda n, sized: rf.deepseek_v32(num_blocks=n),
    "Qwen3-8B": lambda n, sized: rf.qwen3_8b(num_blocks=n),
}


def stock(runner, config):
    """The stock initialisation this release's initialize_kv_cache would call, with the arguments
    it passes (0.30: kernel_block_sizes, kv_cache_allocation_context)."""
    name = rf.stock_initializer(runner)
    return patching.original(rf.NPUModelRunner, name)(runner, config, **rf.stock_kwargs(runner, config))


def plugin(runner, config):
    stock_method = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    return AscendAdapter().initialize_kv_cache_tensors(stock_method, runner, config, **rf.stock_kwargs(runner, config))


def measure(model, fn, transfer: bool) -> dict:
    """The report's totals of one side. Where the strategies refuse the config by name
    (vllm-ascend 0.30: hybrids, sparse MLA), the plugin side is ``{"refused": reason}`` (in
    ``auto`` stock builds it) and stock's side is measured from its storages alone (no plan)."""
    runner = model.make_runner(kv_transfer=transfer)
    config = copy.deepcopy(model.kv_cache_config)
    try:
        plan = AscendAdapter().plan_runner(runner, copy.deepcopy(config)).plan
    except KVStrategiesError as exc:  # refused by name (0.30 kinds; a hybrid beyond the config on 0.11 / 0.13)
        plan = None
        if fn is plugin:
            return {"refused": str(exc)[:300]}
    try:
        caches = fn(runner, config)
    except Exception as exc:  # stock fails on some configs of some releases
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    if plan is None:
        sizes = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for v in caches.values() for t in v}
        del caches
        return {"bytes_allocated": sum(sizes.values()), "raw_buffers": len(sizes), "num_blocks": config.num_blocks}
    totals = build_report(plan, caches, kv_cache_config=model.kv_cache_config)["totals"]  # the config's own tensors: what was planned
    del caches
    return totals


def blocks_for(budget: int, build) -> int:
    probe = build(4)
    tensors = probe.kv_cache_config.kv_cache_tensors
    if any(hasattr(t, "layer_stride") for t in tensors):
        # vLLM 0.30's strided form: a tensor's size is its whole backing, which several tensors
        # (a hybrid's groups) may share; what one block costs is what stock allocates for it
        caches = stock(probe.make_runner(), copy.deepcopy(probe.kv_cache_config))
        sizes = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for v in caches.values() for t in v}
        per_block = sum(sizes.values()) // 4
    else:
        per_block = sum(t.size for t in tensors) // 4
    return max(1, budget // per_block)


#: vllm-ascend 0.30: multi-group models (layer specs only), name -> gqa_model arguments.
MULTI_GROUP = {
    "gpt-oss-120b-like (36 layers, sliding 128 / full)": dict(
        num_layers=36, num_kv_heads=8, head_dim=64, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 18),
    "gemma-3-27b-like (62 layers, 5 sliding 1024 : 1 full)": dict(
        num_layers=62, num_kv_heads=16, head_dim=128, sliding_window=1024,
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 10 + ["sliding_attention"] * 2),
    "dense control (36 full layers, 8 x 128)": dict(num_layers=36, num_kv_heads=8, head_dim=128),
}


def multi_group_rows(budget: int, results: dict) -> None:
    """vllm-ascend 0.30's worker end to end on each side and each runner (V1, Ascend's V2):
    ``NPUWorker.determine_available_memory`` (only the device measurement stood in for:
    ``budget`` bytes free for the KV cache), vLLM's (patched) planner, the build
    (tests/ascend/worker_030.py). Stock scales the budget
    (``NPUWorker._scale_kv_cache_memory_for_multi_group``) and gives every layer a private
    buffer; the plugin leaves it whole where it builds vLLM's overlay."""
    from _pytest.monkeypatch import MonkeyPatch

    import worker_030 as w

    print()
    print(f"vllm-ascend 0.30 multi-group models, per-device KV budget {budget >> 20} MiB, the worker's budget step on both sides")
    print("| model | runner | transfer | side | budget after the worker's step | bytes allocated | bytes required | num_blocks | tokens | plugin / stock |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, kw in MULTI_GROUP.items():
        probe = rf.gqa_model(name, num_blocks=4, max_model_len=4096, **kw)
        block = min(s.block_size for s in probe.specs.values())
        for runner in ("V1", "V2"):
            for transfer in (False, True):
                row, tokens = {"model": name, "runner": runner, "transfer": transfer}, {}
                for side in ("stock", "plugin"):
                    with MonkeyPatch.context() as monkeypatch:
                        monkeypatch.setenv("KV_STRATEGIES", "auto")
                        if runner == "V1":
                            def runner_for(config, transfer=transfer):
                                return rf.make_runner(config, model_type="gpt_oss", kv_transfer=transfer)

                            d = w.deployment(runner_for, probe, budget, monkeypatch, plugin=side == "plugin", max_model_len=4096)
                        else:
                            d = w.deployment_v2(probe, budget, monkeypatch, plugin=side == "plugin", max_model_len=4096,
                                                model_type="gpt_oss", kv_transfer=transfer)
                    tokens[side] = d.num_blocks * block
                    row[side] = {"budget": d.budget, "bytes_allocated": d.allocated, "bytes_required": d.required,
                                 "num_blocks": d.num_blocks, "tokens": tokens[side]}
                    over = f"{tokens['plugin'] / tokens['stock']:.3f}" if side == "plugin" else ""
                    print(f"| {name} | {runner} | {transfer} | {side} | {d.budget:,} | {d.allocated:,} | {d.required:,} | "
                          f"{d.num_blocks} | {tokens[side]:,} | {over} |")
                    del d
                row["plugin_over_stock_tokens"] = tokens["plugin"] / tokens["stock"]
                results["multi_group"].append(row)


def slug(name: str) -> str:
    """``gpt-oss-120b-like`` of ``gpt-oss-120b-like (36 layers, ...)``: a directory name."""
    return name.split(" (")[0].replace(" ", "-")


def write_reports(budget: int, directory: str, names=None) -> dict[str, dict[str, str]]:
    """vllm-ascend 0.30's multi-group models (:data:`MULTI_GROUP`, ``names`` of them; default all)
    on the V1 runner, each side end to end as in :func:`multi_group_rows`, as KV cache reports:
    ``DIR/<model>/plugin/`` written by the plugin itself (``KV_STRATEGIES_REPORT``), ``DIR/<model>/stock/``
    stock's build described as ``KV_STRATEGIES=observe`` describes it; both record the device's
    ``budget`` (``kv_cache.budget_bytes``) before the worker's budget step. Returns
    {model: {side: the report file}}; ``report STOCK PLUGIN --plot FILE.png`` draws them."""
    from _pytest.monkeypatch import MonkeyPatch

    import worker_030 as w
    from vllm_kv_strategies.report import schema, write_report

    out: dict[str, dict[str, str]] = {}
    for name in names or MULTI_GROUP:
        probe = rf.gqa_model(name, num_blocks=4, max_model_len=4096, **MULTI_GROUP[name])
        out[slug(name)] = {}
        for side in ("stock", "plugin"):
            where = os.path.join(directory, slug(name), side)
            with MonkeyPatch.context() as monkeypatch:
                monkeypatch.setenv("KV_STRATEGIES", "auto")
                monkeypatch.setenv("KV_STRATEGIES_REPORT", where)
                d = w.deployment(lambda config: rf.make_runner(config, model_type="gpt_oss"), probe, budget, monkeypatch,
                                 plugin=side == "plugin", max_model_len=4096)
                if side == "stock":  # stock's own code writes none
                    write_report(build_report(None, d.kv_caches, kv_cache_config=d.kv_cache_config, mode="observe",
                                              model=slug(name), runner="NPUModelRunner (V1)"), where)
            path = os.path.join(where, schema.latest_name(0))
            with open(path) as f:
                report = json.load(f)
            report["model"], report["kv_cache"]["budget_bytes"] = slug(name), budget
            with open(path, "w") as f:
                json.dump(report, f, indent=1)
            out[slug(name)][side] = path
    return out


def _timed(fn, model) -> float:
    runner = model.make_runner()
    config = copy.deepcopy(model.kv_cache_config)
    start = time.perf_counter()
    fn(runner, config)
    return time.perf_counter() - start


def init_time(model, repeats: int) -> dict:
    """``repeats`` pairs: stock and plugin back to back on fresh runners and configs, alternating
    which goes first; the median of each side and of the per-pair plugin / stock ratios."""
    stock_s, plugin_s, ratios = [], [], []
    for i in range(repeats):
        order = ((stock, stock_s), (plugin, plugin_s)) if i % 2 == 0 else ((plugin, plugin_s), (stock, stock_s))
        for fn, times in order:
            times.append(_timed(fn, model))
        ratios.append(plugin_s[-1] / stock_s[-1])
    return {"stock_s": statistics.median(stock_s), "plugin_s": statistics.median(plugin_s),
            "plugin_over_stock": statistics.median(ratios), "ratios": ratios}


def memory_rows(budget: int, results: dict) -> None:
    print(f"| model | transfer | side | bytes allocated | bytes required | allocated / required | padding per buffer | num_blocks | token slots | plugin / stock |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, build in MODELS.items():
        sides = {}
        for side, fn, sized in (("stock", stock, False), ("plugin", plugin, True)):
            sides[side] = (build(blocks_for(budget, lambda n: build(n, sized)), sized), fn)
        for transfer in (False, True):
            row = {"model": name, "transfer": transfer}
            for side, (model, fn) in sides.items():
                t = measure(model, fn, transfer)
                row[side] = t
                if "error" in t or "refused" in t:
                    print(f"| {name} | {transfer} | {side} | {t.get('error') or 'refused: ' + t['refused']} ||||||||")
                    continue
                if "bytes_required" not in t:  # stock's build of a config the strategies refuse
                    print(f"| {name} | {transfer} | {side} | {t['bytes_allocated']:,} | - | - | - | {t['num_blocks']} | - | |")
                    continue
                ratio = t["bytes_allocated"] / t["bytes_required"]
                pad = (t["alignment_padding"] + t["unused_bytes"]) / max(1, t["raw_buffers"])
                over = ""
                if side == "plugin" and "error" not in row["stock"] and "refused" not in t:
                    row["plugin_over_stock"] = t["bytes_allocated"] / row["stock"]["bytes_allocated"]
                    over = f"{row['plugin_over_stock']:.3f}"
                print(f"| {name} | {transfer} | {side} | {t['bytes_allocated']:,} | {t['bytes_required']:,} | {ratio:.3f} | {pad:,.0f} | {t['num_blocks']} | {t['token_slots']:,} | {over} |")
            results["memory"].append(row)

    if rf.RELEASE >= (0, 30):
        multi_group_rows(max(budget, 128 << 20), results)  # --quick's 16 MiB holds no Gemma-3-like block on stock's side


def init_rows(repeats: int, results: dict) -> None:
    print()
    print(f"KV cache init time, {repeats} pairs (stock and plugin back to back, alternating first)")
    print("| model | stock init (ms, median) | plugin init (ms, median) | plugin / stock (median of pairs) |")
    print("|---|---|---|---|")
    for name, build in (("DeepSeek-V3 (61 layers)", lambda: rf.deepseek_v3(num_blocks=64)), ("Qwen3-Next-80B-A3B (48 layers)", lambda: rf.qwen3_next(tp=4, num_blocks=16, plugin_sizing=True))):
        model = build()
        try:
            _timed(stock, model)
        except Exception as exc:
            print(f"| {name} | stock failed: {exc} | | |")
            results["init_time"].append({"model": name, "stock_error": str(exc)[:300], "repeats": repeats})
            continue
        try:
            _timed(plugin, model)
        except KVStrategiesError as exc:  # refused by name, stock builds it
            s = statistics.median(_timed(stock, model) for _ in range(repeats))
            print(f"| {name} | {s * 1e3:.1f} | refused: {exc} | |")
            results["init_time"].append({"model": name, "stock_s": s, "refused": str(exc)[:300], "repeats": repeats})
            continue
        r = init_time(model, repeats)
        print(f"| {name} | {r['stock_s'] * 1e3:.1f} | {r['plugin_s'] * 1e3:.1f} | {r['plugin_over_stock']:.2f} |")
        results["init_time"].append({"model": name, "repeats": repeats, **r})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-mib", type=int, default=1024, help="per-device KV budget (MiB)")
    ap.add_argument("--repeats", type=int, default=5, help="stock / plugin pairs per init-time median")
    ap.add_argument("--quick", action="store_true", help="tiny budget and 1 repeat: checks the benchmark runs (CI)")
    ap.add_argument("--only", choices=("memory", "init"), help="run one section (default: both)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--reports", metavar="DIR", help="only write the multi-group models' KV cache reports, stock and "
                    "the plugin (vllm-ascend 0.30), to DIR/<model>/<side>/ (report STOCK PLUGIN --plot FILE.png draws them)")
    args = ap.parse_args()
    budget = (16 if args.quick else args.budget_mib) << 20
    repeats = 1 if args.quick else args.repeats
    version = importlib.metadata.version("vllm-ascend")
    results = {"vllm_ascend": version, "budget_bytes": budget, "memory": [], "init_time": [], "multi_group": []}

    if args.reports:
        for model, sides in write_reports(max(budget, 128 << 20), args.reports).items():
            print(f"{model}: {sides['stock']} {sides['plugin']}")
        return
    print(f"vllm-ascend {version}, per-device KV budget {budget >> 20} MiB")
    if args.only != "init":
        memory_rows(budget, results)

    if args.only != "memory":
        init_rows(repeats, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
