"""The plan on the terminal (:func:`table`) and as JSON (:func:`as_json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_kv_strategies._version import __version__
from vllm_kv_strategies.deploy.predict import stage_rows
from vllm_kv_strategies.core.specs import layer_spec, required_bytes, tensor_layers
from vllm_kv_strategies.report.plan_file import KIND, PLAN_VERSION
from vllm_kv_strategies.report.specs import describe_groups, own_spec, spec_kind



def _installed() -> dict[str, str | None]:
    from vllm_kv_strategies.versions import Versions

    installed = Versions.detect()
    return {"plugin": __version__, "vllm": installed.vllm, "vllm_ascend": installed.vllm_ascend, "torch": installed.torch}


def _rank_ids(vllm_config, worker: int) -> tuple[int, int]:
    tp = vllm_config.parallel_config.tensor_parallel_size
    return worker // tp, worker % tp


def group_rows(kv_cache_config, modules: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per group: id, kind(s) (each layer by its own spec: its attention
    module's window, :func:`~vllm_kv_strategies.report.specs.own_spec`), layer
    count, block size (tokens), page bytes (per layer, padded as vLLM plans
    it), num_blocks and token slots (num_blocks x block size; vLLM's capacity
    in tokens is the plan's ``tokens``)."""
    rows = []
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        own = [own_spec(layer_spec(spec, name), (modules or {}).get(name)) for name in group.layer_names]
        kinds = sorted({spec_kind(s) for s in own}) if own else [spec_kind(spec)]
        page = max(s.page_size_bytes for s in own) if own else spec.page_size_bytes
        rows.append({
            "id": gid, "kind": "+".join(kinds), "layers": len(group.layer_names), "block_size": spec.block_size,
            "page_bytes": page, "num_blocks": kv_cache_config.num_blocks,
            "token_slots": kv_cache_config.num_blocks * spec.block_size,
        })
    return rows


def _modules(prediction, worker: int) -> dict[str, Any]:
    """The worker's pipeline stage's attention modules (its static forward context)."""
    return prediction.stages[worker // prediction.vllm_config.parallel_config.tensor_parallel_size]["layers"]


def _size(nbytes: int) -> str:
    """Bytes in GiB to two decimals, or in MiB / KiB where that would read 0.00 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale * 0.01 or unit == "KiB":
            return f"{nbytes / scale:.2f} {unit}"


def headline(prediction, model_dir: str) -> list[str]:
    config = prediction.vllm_config
    p, m = config.parallel_config, config.model_config
    versions = _installed()
    release = f"vLLM {versions['vllm']}" + (f" + vllm-ascend {versions['vllm_ascend']}" if versions["vllm_ascend"] else "")
    params = ", ".join(f"{n:,} ({_size(b)})" for n, b in zip(prediction.params, prediction.param_bytes))
    return [
        f"plan: {model_dir} ({', '.join(m.architectures or [])}), {release}, device {config.device_config.device_type}",
        *([prediction.platform] if prediction.platform else []),
        f"parallel: tensor {p.tensor_parallel_size} x pipeline {p.pipeline_parallel_size} = {len(prediction.specs)} "
        f"worker{'s' if len(prediction.specs) != 1 else ''} per engine" + (
            f" x data parallel {p.data_parallel_size} = {len(prediction.specs) * p.data_parallel_size:,} workers "
            "(each engine plans alike)" if p.data_parallel_size > 1 else "") + "; "
        f"max model len {m.max_model_len:,}, max num seqs {config.scheduler_config.max_num_seqs}",
        f"model: {params} parameters per rank (per pipeline stage), dtype {str(m.dtype).removeprefix('torch.')}, "
        f"kv cache dtype {config.cache_config.cache_dtype}",
        *prediction.budget.lines(),
        *(f"note: {note}" for note in prediction.notes),
    ]


def table(prediction, model_dir: str) -> str:
    """The readable plan: the headline, one line per rank and group, vLLM's capacity or refusal."""
    lines = headline(prediction, model_dir)
    if prediction.refusal and not prediction.budget.exact and prediction.budget.bytes <= 0:
        lines.append(f"the estimate leaves no memory for the KV cache ({prediction.budget.bytes:,} bytes): the weights "
                     "and the overhead exceed the device memory x utilisation; plan with more tensor or pipeline "
                     "parallelism, a larger device, or an exact --kv-cache-memory-bytes")
        return "\n".join(lines)
    if prediction.refusal:
        lines.append(f"vLLM refuses (its own words): {prediction.refusal}")
        return "\n".join(lines + ascend_lines(prediction))
    lines.append("")
    if not any(w.kv_cache_groups for w in prediction.workers):  # EngineCore._initialize_kv_caches: attention free
        lines.append("no layer of this model has a KV cache spec (attention free, or encoder-only attention): "
                     "vLLM's engine gives it no KV cache memory and allocates no KV cache tensors")
        lines.append(f"planned in {prediction.seconds:.1f} s")
        return "\n".join(lines)
    lines.append(f"{'rank':>4} {'pp':>3} {'tp':>3} {'group':>5} {'kind':28} {'layers':>6} {'block':>6} "
                 f"{'page bytes':>12} {'num_blocks':>11} {'token slots':>12}")
    for worker, kv_cache_config in enumerate(prediction.workers):
        pp, tp = _rank_ids(prediction.vllm_config, worker)
        for row in group_rows(kv_cache_config, _modules(prediction, worker)):
            lines.append(f"{worker:>4} {pp:>3} {tp:>3} {row['id']:>5} {row['kind']:28} {row['layers']:>6} "
                         f"{row['block_size']:>6} {row['page_bytes']:>12,} {row['num_blocks']:>11,} {row['token_slots']:>12,}")
    lines += [""] + stage_lines(prediction)
    if prediction.log_lines:  # before vLLM 0.30: the release's own two lines
        lines.append("vLLM would log: " + ", ".join(prediction.log_lines))
    elif prediction.tokens is not None:
        lines.append(f"vLLM would log: KV cache size: {prediction.tokens:,} tokens, Maximum concurrency for "
                     f"{prediction.vllm_config.model_config.max_model_len:,} tokens per request: {prediction.max_concurrency:.2f}x")
        engines = prediction.vllm_config.parallel_config.data_parallel_size
        if engines > 1:
            lines.append(f"  that is per engine; the deployment's {engines} engines together: {prediction.tokens * engines:,} "
                         f"tokens, {prediction.max_concurrency * engines:.2f}x concurrency")
    distinct = {side.line(): w for w, side in reversed(list(enumerate(prediction.sides)))}
    for line, worker in sorted(distinct.items(), key=lambda item: item[1]):
        lines.append(line if len(distinct) == 1 else f"rank {worker}: {line}")
    lines += ascend_lines(prediction)[1 if lines[-1] == "" else 0:]  # one blank line before the sides
    lines.append(f"planned in {prediction.seconds:.1f} s")
    return "\n".join(lines)


def stage_lines(prediction) -> list[str]:
    """With pipeline stages: each stage's budget per worker and the blocks it alone would hold;
    the stage with the fewest limits num_blocks (vLLM gives every worker the smallest count)."""
    rows = stage_rows(prediction)
    if len(rows) < 2:
        return []
    out = []
    for r in rows:
        weights = "" if r["exact"] or r["weights_bytes"] is None else f" (estimate: weights {r['weights_bytes']:,} bytes)"
        alone = f", holds {r['blocks_alone']:,} blocks alone" if r["blocks_alone"] is not None else ""
        out.append(f"stage {r['stage']}: budget {r['budget_bytes']:,} bytes per worker{weights}{alone}"
                   + ("  <- limits num_blocks" if r["limits"] else ""))
    return out + [""]


def _beyond(budget, excess: int) -> str:
    """What ``excess`` bytes allocated beyond the budget mean: with a device
    estimate, against the memory the utilisation leaves free."""
    terms = {name: value for name, value, _ in budget.terms}
    if budget.exact or "device memory" not in terms:
        return (f"{excess:,} bytes beyond the budget: out of memory at KV cache initialisation unless the device "
                "has that much free beyond it")
    headroom = terms["device memory"] - terms["device memory"] * terms["utilisation"] // 1000
    if excess > headroom:
        return (f"{excess:,} bytes beyond the budget, more than the {headroom:,} bytes the utilisation leaves free on "
                "the device: out of memory at KV cache initialisation")
    return f"{excess:,} bytes beyond the budget, taken from the {headroom:,} bytes the utilisation leaves free on the device"


def _slots(side) -> int:
    """The side's token slots (num_blocks x block size) of its smallest attention group (0: none)."""
    slots = [row["token_slots"] for row in group_rows(side.workers[0]) if "attention" in row["kind"] or "mla" in row["kind"]]
    return min(slots, default=0)


def ascend_lines(prediction) -> list[str]:
    """On vllm-ascend, one paragraph per side: its budget after the worker's
    step, vLLM's plan of it and what its own build allocates."""
    if not prediction.ascend:
        return []
    release = _installed()["vllm_ascend"]
    lines = [""]
    for name, label in (("stock", f"stock vllm-ascend {release}"), ("plugin", "with the plugin")):
        side = prediction.ascend[name]
        stock_scale = prediction.ascend["stock"].scale
        step = (f"its worker's budget step scales it by {side.scale:.4f} to {side.budget:,} bytes for vLLM's planner"
                if side.scale != 1.0 else "the budget step leaves it whole: the plugin builds vLLM's overlay"
                if stock_scale != 1.0 else "the worker's budget step leaves it whole")
        lines.append(f"{label}: KV cache memory {side.available:,} bytes per worker; {step}")
        if side.refusal:
            lines.append("  vLLM refuses, in the words above" if side.refusal == prediction.refusal
                         else f"  vLLM refuses (its own words): {side.refusal}")
            continue
        blocks = ", ".join(sorted({f"{row['kind']} {row['block_size']}" for row in group_rows(side.workers[0])}))
        capacity = ("; vLLM would log: " + ", ".join(side.log_lines) if side.log_lines else
                    f"; vLLM would log KV cache size: {side.tokens:,} tokens ({side.max_concurrency:.2f}x)"
                    if side.tokens is not None else f"; {_slots(side):,} token slots per attention group" if _slots(side) else "")
        lines.append(f"  num_blocks {side.num_blocks:,} (block size: {blocks}){capacity}")
        if side.plugin_refusal:
            lines.append(f"  the plugin would not build it (KV_STRATEGIES=auto: stock builds this config, one warning): "
                         f"{side.plugin_refusal}")
        if side.build_error:
            what = "plan could not build its KV cache" if side.not_planned else "its own KV cache build raises on this config"
            lines.append(f"  {what}: {side.build_error}")
            continue
        allocated = max(side.allocated)
        share = f" = {allocated / side.available:.2f} x the KV cache memory" if side.available > 0 else ""
        if len(set(side.allocated)) == 1:
            lines.append(f"  allocates {allocated:,} bytes per worker{share}")
        else:  # pipeline stages of different layer counts: the planner gives every worker the same num_blocks
            tp = prediction.vllm_config.parallel_config.tensor_parallel_size
            stages = ", ".join(f"stage {s}: {b:,}" for s, b in enumerate(side.allocated[::tp]))
            lines.append(f"  allocates per worker, by pipeline stage, {stages} bytes; at most {allocated:,}{share}")
        if allocated > side.available:
            lines.append("  " + _beyond(prediction.budget, allocated - side.available))
    stock, plugin = prediction.ascend["stock"], prediction.ascend["plugin"]
    if stock.allocated and plugin.allocated:
        tokens = ((f"tokens {plugin.tokens / stock.tokens:.2f} x" if stock.tokens and plugin.tokens else
                  f"attention token slots {_slots(plugin) / _slots(stock):.2f} x" if _slots(stock) else ""))
        lines.append(f"plugin / stock per worker: bytes allocated {sum(plugin.allocated) / sum(stock.allocated):.2f} x"
                     + (f", {tokens}" if tokens else ""))
    return lines


def _deployment(prediction) -> dict:
    """The data parallel deployment's totals beside the per-engine figures (each engine plans alike)."""
    engines = prediction.vllm_config.parallel_config.data_parallel_size
    return {"engines": engines, "workers": len(prediction.specs) * engines,
            "tokens": prediction.tokens * engines if prediction.tokens is not None else None,
            "max_concurrency": prediction.max_concurrency * engines if prediction.max_concurrency is not None else None}


def as_json(prediction, model_dir: str) -> dict:
    """The plan as a JSON object (``kind: "plan"``); ``ranks[i].num_blocks``
    and ``ranks[i].groups[j].num_blocks`` are vLLM's planned block counts."""
    config = prediction.vllm_config
    p = config.parallel_config
    ranks = []
    for worker, kv_cache_config in enumerate(prediction.workers):
        pp, tp = _rank_ids(config, worker)
        modules = _modules(prediction, worker)
        groups, _ = describe_groups(kv_cache_config, modules)
        for group, row in zip(groups, group_rows(kv_cache_config, modules)):
            group.update(num_blocks=row["num_blocks"], token_slots=row["token_slots"], block_size=row["block_size"],
                         kind=row["kind"])
        ranks.append({
            "rank": worker, "pipeline_parallel_rank": pp, "tensor_parallel_rank": tp,
            "num_blocks": kv_cache_config.num_blocks,
            "bytes_required": required_bytes(list(kv_cache_config.kv_cache_tensors)),
            "tensors": [{"size": t.size, "layers": tensor_layers(t)}
                        for t in kv_cache_config.kv_cache_tensors],
            "groups": groups,
        })
    return {
        "kind": KIND,
        "plan_version": PLAN_VERSION,
        "model": model_dir,
        "architectures": list(config.model_config.architectures or []),
        "versions": _installed(),
        "device": config.device_config.device_type,
        "platform": prediction.platform,
        "parallel": {"tensor_parallel_size": p.tensor_parallel_size, "pipeline_parallel_size": p.pipeline_parallel_size,
                     "data_parallel_size": p.data_parallel_size},
        "max_model_len": config.model_config.max_model_len,
        "budget": prediction.budget.as_json(),
        "params_per_stage": prediction.params,
        "param_bytes_per_stage": prediction.param_bytes,
        "refusal": prediction.refusal,
        "num_blocks": prediction.num_blocks,
        "tokens": prediction.tokens,
        "max_concurrency": prediction.max_concurrency,
        "deployment": _deployment(prediction),
        "stages": stage_rows(prediction),
        # on vllm-ascend each side is its own plan: "ascend" below
        "stock_bytes_per_worker": (prediction.ascend["stock"].allocated if prediction.ascend else
                                   [side.stock_bytes for side in prediction.sides]),
        "plugin": None if prediction.ascend else [
            {"layers_per_strategy": side.plugin_layers, "refusal": side.plugin_refusal,
             "stock_would_fail": side.stock_would_fail} for side in prediction.sides],
        "ranks": ranks,
        "ascend": {name: side.as_json() for name, side in prediction.ascend.items()} if prediction.ascend else None,
        "seconds": round(prediction.seconds, 2),
    }


def memory_maps(prediction, model_dir: str, path: str) -> str:
    """``plan --plot`` without ``--sweep`` (vllm-ascend): the first worker's KV cache of each side
    that was built, stock above the plugin on one scale (:mod:`vllm_kv_strategies.report.plot`); the
    line saying where, or why nothing was drawn."""
    from vllm_kv_strategies.report.memory_map import memory_map
    from vllm_kv_strategies.report.plot import draw, pyplot

    who = {"stock": "stock vllm-ascend", "plugin": "with the plugin (KV_STRATEGIES=auto)"}
    built = [(name, side) for name, side in (prediction.ascend or {}).items() if side.memory_map]
    if not built:
        return f"--plot {path}: not drawn: neither side's KV cache was built (see above)"
    maps = [memory_map(side.memory_map, f"{name}: {who[name]}, worker 0, planned on the meta device") for name, side in built]
    fig = draw(maps, path, f"plan: {Path(model_dir).name}, the KV cache of each side as its runner builds it")
    pyplot().close(fig)
    return f"memory map{'s' if len(maps) == 2 else ''} written to {path}" + (
        "" if len(maps) == 2 else f" ({built[0][0]} only: the other side's KV cache was not built)")
