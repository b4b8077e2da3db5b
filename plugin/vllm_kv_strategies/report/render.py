"""Rendering reports for ``python -m vllm_kv_strategies report``: one report,
two compared (A and B), or every rank of a deployment. Torch-free; reports
come from :func:`.schema.load` (schema 1 files upgraded, unknown fields None).
"""

from __future__ import annotations

import hashlib
import json
import os

from vllm_kv_strategies.report.schema import ReportError, created, latest_per_rank
from vllm_kv_strategies.report.summary import BUILT_BY

TOTALS = ("raw_buffers", "bytes_allocated", "bytes_required", "alignment_padding", "unused_bytes", "duplicated_bytes",
          "num_blocks", "token_slots", "tokens", "max_concurrency")


def _num(value: int | float | None) -> str:
    """``1,024``, ``936.23`` (a concurrency), or ``-`` (not known)."""
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


def _counts(counts: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) if counts else "-"


def _built_by(report: dict) -> str:
    """``built by the plugin (KV_STRATEGIES=on)``, ``built by vLLM, checked by the plugin (...)``,
    ``built by stock vllm-ascend (observed; ...)``, ``built by stock vLLM (the plugin fell back: why; ...)``."""
    mode = f"KV_STRATEGIES={report['mode']}" if report.get("mode") else "mode not recorded"
    built_by = report["built_by"]
    if not built_by.startswith("stock"):
        return f"built by {BUILT_BY[built_by]} ({mode})"
    stock = "stock vllm-ascend" if (report.get("versions") or {}).get("vllm_ascend") else "stock vLLM"
    if built_by == "stock_observed":
        return f"built by {stock} (observed; {mode})"
    return f"built by {stock} (the plugin fell back: {report.get('fallback_reason') or 'reason not recorded'}; {mode})"


def _rank(report: dict) -> str:
    """``rank 2 of 4``, or with data parallel ``rank 1, data parallel engine 1`` (``of N`` where the
    worker was told N); then the pipeline stage and tensor parallel rank where there are several."""
    rank, world, p = report["totals"]["rank"], report.get("world_size"), report.get("parallel")
    if not p:
        return f"rank {rank}" + (f" of {world}" if world else "")
    dp, dp_size = p["data_parallel_rank"], p["data_parallel_size"]
    if dp > 0 or (dp_size or 1) > 1:
        text = f"rank {rank}, data parallel engine {dp}" + (f" of {dp_size}" if dp_size else "")
    else:
        text = f"rank {rank}" + (f" of {world}" if world else "")
    if p["pipeline_parallel_size"] > 1:
        text += f", pipeline stage {p['pipeline_parallel_rank']} of {p['pipeline_parallel_size']}"
    if p["tensor_parallel_size"] > 1:
        text += f", tensor parallel rank {p['tensor_parallel_rank']} of {p['tensor_parallel_size']}"
    return text


def describe(report: dict, path: str) -> str:
    """One line: what a report describes and how it was made."""
    v = report["versions"]
    parts = [
        str(path),
        _built_by(report),
        f"model {report['model']}" if report.get("model") else "model not recorded",
        f"vLLM {v['vllm']}" + (f" + vllm-ascend {v['vllm_ascend']}" if v.get("vllm_ascend") else ""),
        f"plugin {v['plugin']}",
    ]
    if report.get("runner"):
        parts.append(report["runner"])
    parts.append(_rank(report))
    parts.append(f"written {created(report, path)}" + ("" if report.get("created") else " (file time; schema 1)"))
    return ", ".join(parts)


def _spec_line(spec: dict) -> str:
    text = f"{spec['type']} ({spec['kind']}), block_size {spec['block_size']}"
    if spec.get("dtype"):
        text += f", {spec['dtype']}"
    if spec.get("state_dtypes"):
        text += f", states {' + '.join(f'{tuple(s)} {d}' for s, d in zip(spec['state_shapes'], spec['state_dtypes']))}"
    if "num_kv_heads" in spec and "head_size" in spec:
        text += f", {spec['num_kv_heads']} KV heads x {spec['head_size']}"
    if spec.get("sliding_window") is not None:
        text += f", sliding_window {spec['sliding_window']}"
    if spec.get("attention_chunk_size") is not None:
        text += f", attention_chunk_size {spec['attention_chunk_size']}"
    return text + f", page {spec['page_size_bytes']:,} bytes: {len(spec['layers'])} layer{'s' if len(spec['layers']) != 1 else ''}"


def _views(entry: dict) -> str:
    return "; ".join(f"{tuple(v['shape'])} {v['dtype']} @{v['buffer']}+{v['offset']}" for v in entry["views"])


def render(report: dict, path: str) -> str:
    """A readable table of one report."""
    t = report["totals"]
    lines = [f"KV cache report (schema {report['schema_version']}): {describe(report, path)}"]
    if report.get("kv_cache"):
        lines.append(f"KV cache groups (num_blocks {report['kv_cache']['num_blocks']:,}):")
        for group in report["kv_cache"]["groups"]:
            for spec in group["specs"]:
                lines.append(f"  group {group['id']}: {_spec_line(spec)}")
    width = max([24] + [len(e.get("kind") or e["spec_type"] or "-") for e in report["layers"].values()])
    lines.append(f"{'layer':48} {'kind':{width}} {'strategy':14} views (shape dtype @buffer+offset)")
    for name, entry in report["layers"].items():
        lines.append(f"{name:48} {entry.get('kind') or entry['spec_type'] or '-':{width}} {entry['strategy'] or '-':14} {_views(entry)}")
    lines.append("")
    for key in TOTALS:
        lines.append(f"{key:20} {_num(t[key]):>16}")
    if t.get("max_model_len"):
        lines.append(f"{'max_model_len':20} {_num(t['max_model_len']):>16}")
    lines.append(f"{'layers_per_kind':20} {_counts(t.get('layers_per_kind'))}")
    lines.append(f"{'layers_per_strategy':20} {_counts(t['layers_per_strategy'])}")
    return "\n".join(lines)


def _view_key(entry: dict | None) -> list:
    return [(v["shape"], v["stride"], v["dtype"]) for v in entry["views"]] if entry else []


def _place_key(entry: dict | None) -> list:
    return [(v["buffer"], v["offset"]) for v in entry["views"]] if entry else []


def check_same_model(a: dict, b: dict, path_a: str, path_b: str) -> None:
    """Raises ReportError when both reports name a model and the models differ."""
    if a.get("model") and b.get("model") and a["model"] != b["model"]:
        raise ReportError(
            f"A ({path_a}) describes model {a['model']!r} and B ({path_b}) model {b['model']!r}: "
            "refusing to compare two different models (--allow-different-models compares them anyway)"
        )


def compare(a: dict, b: dict, path_a: str = "A", path_b: str = "B", *, limit: int = 12) -> str:
    """Report ``b`` against report ``a``: totals (B - A, B / A), kinds, specs
    and the layers whose views (shape, stride, dtype) or placement differ."""
    ta, tb = a["totals"], b["totals"]
    lines = [f"A: {describe(a, path_a)}", f"B: {describe(b, path_b)}", ""]
    lines.append(f"{'':20} {'A':>16} {'B':>16} {'B - A':>16} {'B / A':>8}")
    for key in TOTALS:
        known = ta[key] is not None and tb[key] is not None
        ratio = f"{tb[key] / ta[key]:.3f}" if known and ta[key] else "-"
        delta = ("+" if tb[key] - ta[key] >= 0 else "") + _num(tb[key] - ta[key]) if known else "-"
        lines.append(f"{key:20} {_num(ta[key]):>16} {_num(tb[key]):>16} {delta:>16} {ratio:>8}")
    lines.append("")
    lines.append(f"layers by kind: A {_counts(ta.get('layers_per_kind'))}; B {_counts(tb.get('layers_per_kind'))}")
    lines.append(f"layers by strategy: A {_counts(ta['layers_per_strategy'])}; B {_counts(tb['layers_per_strategy'])}")
    if a.get("kv_cache") and b.get("kv_cache"):
        specs = [[(g["id"], _spec_line(s)) for g in r["kv_cache"]["groups"] for s in g["specs"]] for r in (a, b)]
        if specs[0] == specs[1]:
            lines.append(f"KV cache specs: equal ({len(specs[0])} in {len(a['kv_cache']['groups'])} groups)")
        else:
            lines.append("KV cache specs differ:")
            lines += [f"  A group {g}: {s}" for g, s in specs[0] if (g, s) not in specs[1]]
            lines += [f"  B group {g}: {s}" for g, s in specs[1] if (g, s) not in specs[0]]
    names = sorted(set(a["layers"]) | set(b["layers"]))
    differ = [n for n in names if _view_key(a["layers"].get(n)) != _view_key(b["layers"].get(n))]
    if not differ:
        lines.append(f"per-layer views (shape, stride, dtype): equal on all {len(names)} layers")
    else:
        lines.append(f"per-layer views (shape, stride, dtype) differ on {len(differ)} of {len(names)} layers:")
        for name in differ[:limit]:
            lines.append(f"  {name}")
            for label, report in (("A", a), ("B", b)):
                entry = report["layers"].get(name)
                shown = "; ".join(f"{tuple(v['shape'])} stride {tuple(v['stride'])} {v['dtype']}" for v in entry["views"]) if entry else "(no such layer)"
                lines.append(f"    {label}: {shown}")
        if len(differ) > limit:
            lines.append(f"  ... and {len(differ) - limit} more")
    moved = [n for n in names if n not in differ and _place_key(a["layers"].get(n)) != _place_key(b["layers"].get(n))]
    if moved:
        lines.append(f"placement (buffer, byte offset) differs on {len(moved)} layers with equal views: "
                     f"{', '.join(moved[:limit])}{', ...' if len(moved) > limit else ''}")
    return "\n".join(lines)


def layout_id(report: dict) -> str:
    """8 hex digits naming a rank's layout: its layers' views (shape, stride,
    dtype, buffer, offset) and its buffers' sizes."""
    layout = {
        "layers": {n: [(v["shape"], v["stride"], v["dtype"], v["buffer"], v["offset"]) for v in e["views"]]
                   for n, e in sorted(report["layers"].items())},
        "buffers": [b["bytes"] for b in report["buffers"]],
    }
    return hashlib.sha1(json.dumps(layout, sort_keys=True).encode()).hexdigest()[:8]


def _stage(report: dict) -> int:
    return (report.get("parallel") or {}).get("pipeline_parallel_rank") or 0


def _place(report: dict) -> str:
    """``dp/pp/tp`` ranks, e.g. ``1/0/0``; ``-`` where the report does not say (plugin 0.1.0)."""
    p = report.get("parallel")
    if not p:
        return "-"
    return f"{p['data_parallel_rank']}/{p['pipeline_parallel_rank']}/{p['tensor_parallel_rank']}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ranges(ranks: list[int]) -> str:
    """``0, 2-5, 9``: sorted ranks as runs."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _claimed_twice(items: list[tuple[str, dict]]) -> list[str]:
    """Ranks that two processes of one run both wrote: two workers numbered alike."""
    by_rank: dict[tuple[int, str], dict[int, dict]] = {}
    for _, r in items:
        if r.get("run_id") and r.get("pid") is not None:
            by_rank.setdefault((r["totals"]["rank"], r["run_id"]), {})[r["pid"]] = r
    return [
        f"rank {rank}: written by {len(pids)} processes of run {run} (pids {', '.join(map(str, sorted(pids)))}; "
        f"dp/pp/tp {', '.join(_place(pids[p]) for p in sorted(pids))}): two workers claim one rank, so only the newest "
        "is shown (plugin 0.1.0 numbered every data parallel engine's workers from 0)"
        for (rank, run), pids in sorted(by_rank.items()) if len(pids) > 1
    ]


def deployment(directory: str, items: list[tuple[str, dict]]) -> tuple[str, bool]:
    """Every rank's totals and the deployment's (see ``report DIR``).

    Args:
        items: every (path, report) in the directory (:func:`.schema.load_dir`);
            each rank is shown by its newest report.

    Returns:
        the text, and whether anything is flagged: a rank missing (up to the
        world size), a rank stock built (the fallback; observe where other
        ranks are not observed: a directory observed on every rank is not
        flagged), a rank two processes of one run wrote, ranks from different
        runs or of different models.
    """
    per_rank, found = latest_per_rank(items), len(items)
    reports = [r for _, r in per_rank.values()]
    world = max([r.get("world_size") or 0 for r in reports] + [max(per_rank) + 1])
    lines = [f"KV cache reports in {directory}: {_plural(found, 'report')}, "
             f"{_plural(len(per_rank), 'rank')} (each rank's newest report), world size {world}"]
    header = (f"{'rank':>4}  {'dp/pp/tp':8}  {'built by':14} {'mode':8} {'layers':>6} {'buffers':>7} {'bytes allocated':>16} "
              f"{'bytes required':>16} {'num_blocks':>10} {'tokens':>10}  {'layout':8}  file")
    lines.append(header)
    stages: dict[int, dict[str, list[int]]] = {}  # pipeline stage -> layout -> ranks: stages hold different layers
    for rank, (path, r) in per_rank.items():
        t = r["totals"]
        kinds = t.get("layers_per_kind") or t["layers_per_strategy"]
        layout = layout_id(r)
        stages.setdefault(_stage(r), {}).setdefault(layout, []).append(rank)
        lines.append(
            f"{rank:>4}  {_place(r):8}  {r['built_by']:14} {r.get('mode') or '-':8} {sum(kinds.values()):>6} {t['raw_buffers']:>7} "
            f"{t['bytes_allocated']:>16,} {t['bytes_required']:>16,} {t['num_blocks']:>10,} {_num(t['tokens']):>10}  {layout:8}  {os.path.basename(path)}"
        )
    allocated = sum(r["totals"]["bytes_allocated"] for r in reports)
    required = sum(r["totals"]["bytes_required"] for r in reports)
    tokens = sorted({r["totals"]["tokens"] for r in reports}, key=lambda n: -1 if n is None else n)
    lines.append(
        f"deployment ({_plural(len(per_rank), 'rank')}): {allocated:,} bytes allocated ({allocated / 2**30:.3f} GiB), "
        f"{required:,} required; tokens per rank (vLLM's capacity) "
        + (f"{_num(tokens[0])} on every rank" if len(tokens) == 1 else f"{_num(tokens[0])} to {_num(tokens[-1])}")
    )
    differ = {stage: layouts for stage, layouts in sorted(stages.items()) if len(layouts) > 1}
    if not differ:
        lines.append("layouts: the same on every rank" if len(stages) == 1 else
                     f"layouts: the same on every rank of each pipeline stage ({len(stages)} stages, each with its own layers)")
    else:
        lines.append("ranks whose layouts differ: " + "; ".join(
            f"layout {k} on rank{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}"
            + (f" (pipeline stage {stage})" if len(stages) > 1 else "")
            for stage, layouts in differ.items() for k, v in layouts.items()))
    flags = []
    missing = [rank for rank in range(world) if rank not in per_rank]
    if missing:
        flags.append(f"{'rank' if len(missing) == 1 else 'ranks'} {_ranges(missing)}: no report in this directory "
                     f"(world size {world}): the plugin did not run there (KV_STRATEGIES=off on that rank's node?) "
                     "or wrote elsewhere")
    flags += _claimed_twice(items)
    observed = all(r["built_by"] == "stock_observed" for r in reports)
    if observed:  # asked for: KV_STRATEGIES=observe on every rank
        lines.append("every rank observed (KV_STRATEGIES=observe): stock built each KV cache, the plugin described it")
    for rank, (_, r) in per_rank.items():
        if r["built_by"].startswith("stock") and not observed:
            flags.append(f"rank {rank}: the plugin neither built nor checked this KV cache ({_built_by(r).removeprefix('built by ')})")
    runs: dict[str, list[int]] = {}
    for rank, (_, r) in per_rank.items():
        runs.setdefault(r.get("run_id") or "not recorded", []).append(rank)
    if len(runs) > 1:
        flags.append("ranks from different runs (a rank's newest report may be left from an earlier run; "
                     "set KV_STRATEGIES_RUN_ID alike on every node of one deployment): "
                     + "; ".join(f"run {k}: {'rank' if len(v) == 1 else 'ranks'} {_ranges(v)}" for k, v in runs.items()))
    models = {r.get("model") for r in reports if r.get("model")}
    if len(models) > 1:
        flags.append(f"ranks of different models: {', '.join(sorted(models))}")
    if flags:
        lines.append("flagged:")
        lines += [f"  {f}" for f in flags]
    return "\n".join(lines), bool(flags)
