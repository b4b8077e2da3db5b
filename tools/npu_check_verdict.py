"""The verdict of tools/npu_check.py on one model and runner: the stock run (``KV_STRATEGIES=off``)
against the plugin's (``KV_STRATEGIES=on``). Pure functions over the runs' files, no vLLM.

A run is a dict: ``rc``, ``log`` (its text), ``out`` (run_generate's JSON with the ``probe`` of
tools/npu_check_run.py, or None) and ``reports`` (the plugin's report files written, parsed).

Checks, each a line of the verdict, each failing the check when it does not hold:

* both runs exit 0 (a stock run that fails is *stock failed*, stated, not compared);
* greedy tokens equal and every logprob within ``atol`` (default 0: identical), top-k sets equal;
* the stock run has no ``kv_strategies: rank`` line and writes no report; the plugin's run has a
  summary line and a report for every worker;
* the plugin's report against what the worker holds: ``bytes_allocated`` = the bytes of the
  distinct storages behind the layers' caches, ``num_blocks`` = vLLM's ``num_gpu_blocks``;
* the plugin's run against stock's: ``num_blocks`` and vLLM's KV cache tokens (its ``KV cache size:
  N tokens`` line) never fewer, bytes never more than stock's or the report's budget (or, where more,
  the NPU memory in use within vLLM's default 0.9 of the device: 0.30's overlay); the gain
  (tokens on / tokens off) is printed (1.00 where the plugin builds as stock; 0.30's multi-group
  overlay: above 1);
* the NPU memory in use after the KV cache is built (``torch.npu.mem_get_info``): the change from
  stock to the plugin within ``mem_tol`` bytes of the change in KV cache bytes, and the memory in
  use at least the plugin's KV cache bytes. Where no NPU is measured (the dry run) the check says
  so and is listed as not exercised.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from compare_outputs import compare  # noqa: E402

SUMMARY = re.compile(r"kv_strategies: rank \d+: (?!report written)")  # a summary line per worker
#: vLLM's default --gpu-memory-utilization (the check does not set it): the share of the device vLLM may use.
GPU_MEMORY_UTILIZATION = 0.9
VLLM_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")


def kv_lines(log: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"kv_strategies:.*", log)]


def vllm_tokens(log: str) -> int | None:
    found = VLLM_TOKENS.findall(log)
    return int(found[-1].replace(",", "")) if found else None


def _error_line(log: str) -> str:
    lines = [ln for ln in log.splitlines() if "Error" in ln or "error" in ln]
    return (lines[-1] if lines else (log.strip().splitlines() or ["(empty log)"])[-1])[:300]


def judge(off: dict, on: dict, atol: float = 0.0, mem_tol: int = 256 << 20) -> dict:
    """``{"status": "passed" | "FAILED" | "stock failed" | "neither ran", "checks": [(ok, text)],
    "figures": {...}, "not_exercised": [text]}``."""
    checks: list[tuple[bool, str]] = []
    figures: dict = {}
    not_exercised: list[str] = []
    if off["rc"] != 0 or on["rc"] != 0:
        if off["rc"] != 0 and on["rc"] != 0:
            status = "neither ran"
            not_exercised.append(f"neither run started or finished (stock: {_error_line(off['log'])})")
        elif off["rc"] != 0:
            status = "stock failed"
            not_exercised.append(f"stock failed (rc {off['rc']}: {_error_line(off['log'])}); the plugin's run "
                                 "finished; nothing to compare it with")
        else:
            status = "FAILED"
            checks.append((False, f"the plugin's run failed (rc {on['rc']}): {_error_line(on['log'])}"))
        return {"status": status, "checks": checks, "figures": figures, "not_exercised": not_exercised}

    d = compare(off["out"], on["out"])
    same = d.tokens_equal and not d.topk_sets_differ and d.max_abs_logprob_diff <= atol
    checks.append((same, f"greedy tokens equal: {d.tokens_equal} (first difference {d.first_token_diff}); "
                         f"largest logprob difference {d.max_abs_logprob_diff:.3g} (allowed {atol:g}); "
                         f"top-k sets differ: {d.topk_sets_differ}"))
    checks.append((not SUMMARY.search(off["log"]) and not off["reports"],
                   f"stock run: {len(SUMMARY.findall(off['log']))} kv_strategies rank lines, "
                   f"{len(off['reports'])} reports (0 and 0: nothing patched)"))
    workers = on["out"]["probe"]["workers"]
    summaries = len(SUMMARY.findall(on["log"]))
    checks.append((summaries >= len(workers) and len(on["reports"]) >= len(workers),
                   f"plugin run: {summaries} summary lines, {len(on['reports'])} reports for {len(workers)} workers"))
    pw, sw = workers[0], off["out"]["probe"]["workers"][0]
    report = on["reports"][0] if on["reports"] else None
    if report is not None:
        t = report["totals"]
        figures.update(report_bytes=t["bytes_allocated"], report_num_blocks=t["num_blocks"],
                       report_token_slots=t.get("token_slots"), built_by=report.get("built_by"),
                       budget=report["kv_cache"].get("budget_bytes"))
        checks.append((t["bytes_allocated"] == pw["kv_bytes"],
                       f"report bytes_allocated {t['bytes_allocated']:,} = bytes the worker holds {pw['kv_bytes']:,} "
                       f"({pw['kv_storages']} storages)"))
        checks.append((t["num_blocks"] == pw["num_blocks"],
                       f"report num_blocks {t['num_blocks']:,} = vLLM's num_gpu_blocks {pw['num_blocks']:,}"))
    tok_off, tok_on = vllm_tokens(off["log"]), vllm_tokens(on["log"])
    figures.update(stock_bytes=sw["kv_bytes"], plugin_bytes=pw["kv_bytes"], stock_num_blocks=sw["num_blocks"],
                   plugin_num_blocks=pw["num_blocks"], stock_tokens=tok_off, plugin_tokens=tok_on,
                   block_size=pw["block_size"], runner_class=pw["runner"])
    figures["gain"] = round(tok_on / tok_off, 3) if tok_on and tok_off else None
    checks.append((pw["num_blocks"] >= sw["num_blocks"],
                   f"num_blocks: plugin {pw['num_blocks']:,} >= stock {sw['num_blocks']:,}"))
    checks.append((tok_off is not None and tok_on is not None and tok_on >= tok_off,
                   f"vLLM's KV cache tokens: plugin {tok_on} >= stock {tok_off} (gain {figures['gain']})"))
    cap = max(sw["kv_bytes"], figures.get("budget") or 0)
    if pw["kv_bytes"] <= cap or not pw["npu"]:
        checks.append((pw["kv_bytes"] <= cap, f"KV cache bytes: plugin {pw['kv_bytes']:,} <= max(stock {sw['kv_bytes']:,}, "
                                              f"the report's budget {figures.get('budget')})"))
    else:  # more than stock (0.30's multi-group overlay: stock scales its budget down): within vLLM's share
        limit = int(pw["npu"]["total"] * GPU_MEMORY_UTILIZATION)
        checks.append((pw["npu"]["in_use"] <= limit,
                       f"KV cache bytes: plugin {pw['kv_bytes']:,} > stock {sw['kv_bytes']:,}, NPU memory in use "
                       f"{pw['npu']['in_use']:,} <= {GPU_MEMORY_UTILIZATION} x total {pw['npu']['total']:,} = {limit:,}"))
    if pw["npu"] and sw["npu"]:
        used_delta = pw["npu"]["in_use"] - sw["npu"]["in_use"]
        kv_delta = pw["kv_bytes"] - sw["kv_bytes"]
        figures.update(stock_npu_in_use=sw["npu"]["in_use"], plugin_npu_in_use=pw["npu"]["in_use"],
                       npu_total=pw["npu"]["total"])
        checks.append((abs(used_delta - kv_delta) <= mem_tol,
                       f"NPU memory in use: plugin - stock = {used_delta:+,} bytes; KV cache plugin - stock = {kv_delta:+,} "
                       f"(allowed apart: {mem_tol:,})"))
        checks.append((pw["npu"]["in_use"] >= pw["kv_bytes"],
                       f"NPU memory in use {pw['npu']['in_use']:,} >= the plugin's KV cache {pw['kv_bytes']:,}"))
    else:
        not_exercised.append("NPU memory in use (torch.npu.mem_get_info) against the plugin's figure: no NPU in "
                             "this process (torch.npu absent)")
    status = "passed" if all(ok for ok, _ in checks) else "FAILED"
    return {"status": status, "checks": checks, "figures": figures, "not_exercised": not_exercised}


def load_run(base: Path) -> dict:
    """The files of one run written by npu_check.py: BASE.rc, BASE.log, BASE.json, BASE.reports/."""
    rc_file = base.with_suffix(".rc")
    out = base.with_suffix(".json")
    folder = base.with_suffix(".reports")  # each rank's report, not the .latest. copy of it
    reports = sorted(p for p in folder.glob("kv_cache_report.*.rank*.json") if ".latest." not in p.name)
    return {
        "rc": int(rc_file.read_text().strip()) if rc_file.exists() else -1,
        "log": base.with_suffix(".log").read_text(errors="replace") if base.with_suffix(".log").exists() else "",
        "out": json.loads(out.read_text()) if out.exists() else None,
        "reports": [json.loads(p.read_text()) for p in reports],
    }
