"""End-to-end demo: tiny model -> ``vllm serve`` (CPU) -> one completion -> plugin summary.

    python tools/demo.py [--model-kind llama|qwen3_next|deepseek_v2] [--model-dir DIR]
                         [--allow-no-plugin] [--keep-model] [--verbose] [-- EXTRA_SERVE_ARGS...]

Steps (every wait is bounded; each long one first prints what it does and how long it takes):
  1. build a tiny model with tools/tiny_models.py into a temp dir (unless --model-dir);
  2. start ``vllm serve`` through tools/vllm_cpu_serve.py on 127.0.0.1 and a free port;
  3. wait for ``GET /health`` == 200;
  4. send one ``POST /v1/completions`` (temperature 0, a few tokens) and print it (the
     tiny model has random weights: its text is noise, and the demo says so);
  5. print every server log line that contains ``kv_strategies:`` (the plugin's
     lines, e.g. its KV cache summary).  None -> message + exit 1, unless
     --allow-no-plugin;
  6. stop the server with SIGINT and wait (then SIGTERM/SIGKILL on its process
     group if it hangs); print time to ready / request / shutdown.

The plugin's state comes from the environment (e.g. ``KV_STRATEGIES=on``).
Exit codes: 0 ok, 1 no plugin line, 2 server/request failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_TAG = "kv_strategies:"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 5.0, headers: dict[str, str] | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def default_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cache = os.path.join(tempfile.gettempdir(), "vllm-kv-strategies-e2e-cache")
    env.setdefault("VLLM_CACHE_ROOT", os.path.join(cache, "vllm"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache, "inductor"))
    return env


class Server:
    """``vllm serve`` child process with a thread collecting its log lines."""

    def __init__(self, cmd: list[str], env: dict[str, str], verbose: bool):
        self.lines: list[str] = []
        self.verbose = verbose
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,  # own process group: fallback kill reaches EngineCore/workers
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if self.verbose:
                print(f"[server] {line}", flush=True)

    def wait_ready(self, base: str, timeout: float, every: float = 15.0) -> float:
        """Seconds until ``GET /health`` answers 200; a progress line every
        ``every`` seconds (with the server's last log line) unless verbose."""
        t0 = time.perf_counter()
        next_note = t0 + every
        while time.perf_counter() - t0 < timeout:
            if not self.verbose and time.perf_counter() >= next_note:
                next_note += every
                # the message of vLLM's last line, without its "(Process pid=…) LEVEL time [file:line]" prefix
                last = self.lines[-1].split("] ", 1)[-1][:100] if self.lines else "(no output yet)"
                print(f"  ... still starting ({time.perf_counter() - t0:.0f} s); last server line: {last}", flush=True)
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early with rc={self.proc.returncode}")
            try:
                status, _ = http("GET", base + "/health", timeout=2.0)
                if status == 200:
                    return time.perf_counter() - t0
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"server not ready after {timeout:.0f} s")

    def stop(self, timeout: float) -> tuple[float, int | None]:
        t0 = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"server ignored SIGINT for {timeout:.0f} s; SIGTERM to its group", flush=True)
                self._signal_group(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        return time.perf_counter() - t0, self.proc.returncode

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the group this script created
        except ProcessLookupError:
            pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-kind", default="llama",
                    choices=("llama", "qwen3_next", "deepseek_v2"))
    ap.add_argument("--model-dir", help="use this model instead of building one")
    ap.add_argument("--keep-model", action="store_true", help="do not delete the built model")
    ap.add_argument("--prompt", default="Paris is the capital of")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--stop-timeout", type=float, default=60.0)
    ap.add_argument("--allow-no-plugin", action="store_true",
                    help=f"exit 0 even if no '{PLUGIN_TAG}' log line appears")
    ap.add_argument("--verbose", action="store_true",
                    help="echo the server's whole log as it comes, prefixed [server] (default: only its kv_strategies: lines)")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER,
                    help="extra `vllm serve` arguments after `--`")
    args = ap.parse_args(argv)
    extra = args.serve_args[1:] if args.serve_args[:1] == ["--"] else args.serve_args

    tmp_model = None
    if args.model_dir:
        model_dir = args.model_dir
    else:
        sys.path.insert(0, str(HERE))
        import tiny_models

        tmp_model = tempfile.mkdtemp(prefix=f"tiny-{args.model_kind}-")
        print(f"building a tiny {args.model_kind} model (random weights, tokenizer trained here; about 5-30 s) ...", flush=True)
        t = time.perf_counter()
        tiny_models.build(args.model_kind, tmp_model)
        print(f"built tiny {args.model_kind} model in {tmp_model} "
              f"({time.perf_counter() - t:.1f} s)", flush=True)
        model_dir = tmp_model

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    name = f"tiny-{args.model_kind}" if not args.model_dir else os.path.basename(model_dir.rstrip("/"))
    cmd = [
        sys.executable, str(HERE / "vllm_cpu_serve.py"), "serve", model_dir,
        "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", name,
        "--max-model-len", "1024",
        "--enforce-eager",
        *extra,
    ]
    print("starting:", " ".join(cmd), flush=True)
    print("waiting for the server to answer GET /health (about 30-120 s on 2 cores; --verbose shows its log) ...", flush=True)
    env = default_env()
    own_report_dir = not env.get("KV_STRATEGIES_REPORT")  # the user's directory is kept
    if own_report_dir:
        env["KV_STRATEGIES_REPORT"] = tempfile.mkdtemp(prefix="kv-strategies-report-")
    rc = 0
    t_start = time.perf_counter()
    server = Server(cmd, env, args.verbose)
    try:
        try:
            ready_s = server.wait_ready(base, args.ready_timeout)
        except (RuntimeError, TimeoutError) as e:
            print(f"ERROR: {e}", flush=True)
            print("---- last server log lines ----")
            print("\n".join(server.lines[-40:]))
            return 2
        print(f"server ready on {base} after {ready_s:.1f} s", flush=True)

        body = {
            "model": name,
            "prompt": args.prompt,
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        print(f"sending one completion request ({args.max_tokens} tokens) ...", flush=True)
        t = time.perf_counter()
        try:
            status, text = http("POST", base + "/v1/completions", body, timeout=args.request_timeout)
        except (urllib.error.URLError, OSError) as e:
            print(f"ERROR: completion request failed: {e}", flush=True)
            return 2
        req_s = time.perf_counter() - t
        resp = json.loads(text)
        choice = resp["choices"][0]
        print(f"completion ({req_s:.2f} s, HTTP {status}): prompt={args.prompt!r}")
        print(f"  text: {choice['text']!r}")
        if tmp_model:  # the model built here: its answer means nothing
            print("  (the tiny model has random weights, so this text is noise: it shows that vLLM served the request. "
                  "What the demo shows is below: the plugin's kv_strategies: lines and the KV cache report.)")
        if choice.get("token_ids") is not None:
            print(f"  token_ids: {choice['token_ids']}")
        print(f"  finish_reason: {choice.get('finish_reason')}  usage: {resp.get('usage')}")

        time.sleep(0.5)  # let the reader thread catch up
        plugin_lines = [ln for ln in server.lines if PLUGIN_TAG in ln]
        if plugin_lines:
            print(f"plugin log lines ({len(plugin_lines)}):")
            for ln in plugin_lines:
                print("  " + ln)
        elif args.allow_no_plugin:
            print(f"no '{PLUGIN_TAG}' line in the server log (allowed by --allow-no-plugin)")
        else:
            print(f"ERROR: no '{PLUGIN_TAG}' line in the server log: the vllm-kv-strategies "
                  "plugin did not load or did not report (is it installed? KV_STRATEGIES?)")
            rc = 1
    finally:
        print("stopping the server (SIGINT; a few seconds) ...", flush=True)
        stop_s, server_rc = server.stop(args.stop_timeout)
        print(f"server stopped in {stop_s:.1f} s (rc={server_rc}); "
              f"total {time.perf_counter() - t_start:.1f} s", flush=True)
        if tmp_model and not args.keep_model:
            shutil.rmtree(tmp_model, ignore_errors=True)
    report = Path(env["KV_STRATEGIES_REPORT"]) / "kv_cache_report.latest.rank0.json"
    if report.exists():  # the worker's JSON report, as `python -m vllm_kv_strategies report` shows it
        kept = "" if not own_report_dir else " (a temporary directory, removed now; KV_STRATEGIES_REPORT=DIR keeps it)"
        print(f"KV cache report {report}{kept}:")
        subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", str(report)], check=False)
    if own_report_dir:
        shutil.rmtree(env["KV_STRATEGIES_REPORT"], ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
