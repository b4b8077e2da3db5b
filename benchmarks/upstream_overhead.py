"""Overhead of the plugin on vLLM's own runner (vLLM CPU build), as ratios to stock.

    .nox/upstream-0-32-0/bin/python benchmarks/upstream_overhead.py [--repeats 3] [--quick] [--json OUT]

1. register(): ms to import the plugin and call register() in a fresh process that has
   imported vLLM already (as in every vLLM process), against `import vllm` alone; median.
2. KV cache initialisation, plugin / stock, for a 61-layer DeepSeek-V3 (MLA) and a
   48-layer Qwen3-Next (36 gated delta net + 12 full attention) config planned by
   vLLM's own KV cache tools, on CPU tensors; median of --repeats runs.
3. Tiny models served by vLLM on the CPU (tests/e2e/run_generate.py, one sequence at a
   time): time to ready (LLM init) and decode tokens per second, plugin on / off,
   runs alternating on and off.
--quick: 1 repeat, llama only; checks that the benchmark runs (CI), timings not judged.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def fresh_ms(code: str, repeats: int, env: dict | None = None, setup: str = "") -> float:
    """Median ms of ``code`` in a fresh interpreter, after the untimed ``setup``."""
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", f"{setup}\nimport time; t = time.perf_counter()\n{code}\nprint((time.perf_counter() - t) * 1e3)"],
            capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300, check=True,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def init_ratio(repeats: int) -> list[dict]:
    sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
    import torch
    from test_upstream_adapter import make_config, make_runner
    from types import SimpleNamespace
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, MLAAttentionSpec
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from vllm_kv_strategies import patching
    from vllm_kv_strategies.platforms.upstream.v1 import UpstreamV1Adapter

    bf16 = torch.bfloat16
    mla = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=bf16)
    gdn = MambaSpec(block_size=1024, shapes=((3, 2048), (8, 128, 128)), dtypes=(bf16, torch.float32))
    attn = FullAttentionSpec(block_size=1024, num_kv_heads=1, head_size=256, dtype=bf16)
    cases = {
        "DeepSeek-V3 (61 MLA layers)": ({f"model.layers.{i}.self_attn.attn": mla for i in range(61)},
                                        SimpleNamespace(model_type="deepseek_v3", kv_lora_rank=512, qk_rope_head_dim=64)),
        "Qwen3-Next (48 layers)": ({(f"model.layers.{i}.self_attn.attn" if i % 4 == 3 else f"model.layers.{i}.linear_attn"):
                                    (attn if i % 4 == 3 else gdn) for i in range(48)}, None),
    }
    stock = patching.original(GPUModelRunner, "initialize_kv_cache_tensors")
    rows = []
    for name, (specs, hf) in cases.items():
        vllm_config, config = make_config(specs, "LBHNC", 512 << 20, hf)
        timings = {"stock": [], "plugin": []}
        for _ in range(repeats):
            for side in ("stock", "plugin"):
                runner = make_runner(vllm_config, list(specs))
                cfg = copy.deepcopy(config)
                start = time.perf_counter()
                if side == "stock":
                    stock(runner, cfg, None)
                else:
                    UpstreamV1Adapter().initialize_kv_cache_tensors(stock, runner, cfg, None)
                timings[side].append(time.perf_counter() - start)
        s, p = (statistics.median(timings[k]) for k in ("stock", "plugin"))
        rows.append({"case": name, "stock_ms": s * 1e3, "plugin_ms": p * 1e3, "ratio": p / s})
    return rows


def tiny_models(kinds: list[str], repeats: int) -> list[dict]:
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import tiny_models

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            model = os.path.join(tmp, kind)
            tiny_models.build(kind, model)
            runs = {"on": [], "off": []}
            for _ in range(repeats):
                for mode in ("off", "on"):
                    out = os.path.join(tmp, f"{kind}-{mode}.json")
                    subprocess.run(
                        [sys.executable, os.path.join(REPO, "tests", "e2e", "run_generate.py"), model, out],
                        env={**os.environ, "KV_STRATEGIES": mode}, capture_output=True, text=True, timeout=900, check=True,
                    )
                    doc = json.load(open(out))
                    tokens = sum(len(r["token_ids"]) for r in doc["results"])
                    runs[mode].append((doc["timings_s"]["llm_init"], tokens / doc["timings_s"]["generate"]))
            ready = {m: statistics.median(r[0] for r in runs[m]) for m in runs}
            tps = {m: statistics.median(r[1] for r in runs[m]) for m in runs}
            rows.append({"model": kind, "ready_s": ready, "decode_tok_s": tps,
                         "ready_ratio": ready["on"] / ready["off"], "decode_ratio": tps["on"] / tps["off"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    results = {}

    reg = fresh_ms("import vllm_kv_strategies; vllm_kv_strategies.register()", max(3, repeats), {"KV_STRATEGIES": "auto"},
                   setup="import vllm, vllm.plugins")
    imp = fresh_ms("import vllm", max(1, repeats))
    results["register"] = {"register_ms": reg, "import_vllm_ms": imp, "ratio": reg / imp}
    print(f"| import + register() in a process that imported vLLM | {reg:.1f} ms | `import vllm` alone | {imp:.0f} ms | ratio {reg / imp:.4f} |")

    results["init"] = init_ratio(repeats)
    print("\n| KV cache init (CPU tensors) | stock ms | plugin ms | plugin / stock |\n|---|---|---|---|")
    for r in results["init"]:
        print(f"| {r['case']} | {r['stock_ms']:.1f} | {r['plugin_ms']:.1f} | {r['ratio']:.2f} |")

    results["tiny"] = tiny_models(["llama"] if args.quick else ["llama", "qwen3_next", "deepseek_v2"], repeats)
    print("\n| tiny model | ready off s | ready on s | on / off | decode tok/s off | on | on / off |\n|---|---|---|---|---|---|---|")
    for r in results["tiny"]:
        print(f"| {r['model']} | {r['ready_s']['off']:.1f} | {r['ready_s']['on']:.1f} | {r['ready_ratio']:.2f} | "
              f"{r['decode_tok_s']['off']:.1f} | {r['decode_tok_s']['on']:.1f} | {r['decode_ratio']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
