"""End-to-end demo: tiny model -> ``vllm serve`` (CPU) -> one completion -> plugin summary.

    python tools/demo.py [--model-kind llama|qwen3_next|deepseek_v2] [--model-dir DIR] [--compare]
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
     group if it hangs); print time to ready / request / shutdown;
  7. show the worker's KV cache report (kept: the directory is printed).
--compare serves the same model twice, stock (KV_STRATEGIES=observe) and with the plugin
(KV_STRATEGIES=auto, or on when set so), keeps both reports and prints
`report STOCK PLUGIN` and its picture (`--plot`, which needs matplotlib).

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


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="demo.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-kind", default="llama",
                    choices=("llama", "qwen3_next", "deepseek_v2"))
    ap.add_argument("--model-dir", help="use this model instead of building one")
    ap.add_argument("--keep-model", action="store_true", help="do not delete the built model")
    ap.add_argument("--compare", action="store_true",
                    help="serve the model stock (KV_STRATEGIES=observe), then with the plugin (auto, or on when "
                    "KV_STRATEGIES=on), and print `report STOCK PLUGIN` and its picture")
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
    args.extra = args.serve_args[1:] if args.serve_args[:1] == ["--"] else args.serve_args
    if args.model_dir and not (Path(args.model_dir) / "config.json").is_file():
        ap.error(f"--model-dir {args.model_dir}: no config.json there")
    return args


def compare_modes(env: dict[str, str]) -> list[tuple[str, str]]:
    """``[(side, KV_STRATEGIES)]`` of --compare: stock observed, then the plugin (``on`` when the
    environment says so, else ``auto``)."""
    plugin = "on" if env.get("KV_STRATEGIES", "").strip().lower() == "on" else "auto"
    return [("stock", "observe"), ("plugin", plugin)]


def main(argv=None) -> int:
    args = parse_args(argv)
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
    name = f"tiny-{args.model_kind}" if not args.model_dir else os.path.basename(model_dir.rstrip("/"))
    try:
        if not args.compare:
            report_dir = os.environ.get("KV_STRATEGIES_REPORT") or tempfile.mkdtemp(prefix="kv-strategies-report-")
            rc = serve_once(args, model_dir, name, {"KV_STRATEGIES_REPORT": report_dir}, own_model=bool(tmp_model))
            show_reports([Path(report_dir)])
            return rc
        base = Path(os.environ.get("KV_STRATEGIES_REPORT") or tempfile.mkdtemp(prefix="kv-strategies-compare-"))
        dirs = []
        for side, mode in compare_modes(os.environ):
            print(f"==== {side}: KV_STRATEGIES={mode}, the same model {model_dir} ====", flush=True)
            dirs.append(base / side)
            rc = serve_once(args, model_dir, name, {"KV_STRATEGIES": mode, "KV_STRATEGIES_REPORT": str(dirs[-1])},
                            own_model=bool(tmp_model), allow_no_plugin=args.allow_no_plugin)
            if rc:
                return rc
        return show_reports(dirs, plot=base / "memory-maps.png")
    finally:
        if tmp_model and not args.keep_model:
            shutil.rmtree(tmp_model, ignore_errors=True)


def show_reports(dirs: list[Path], plot: Path | None = None) -> int:
    """``report`` of the worker's report in each of ``dirs`` (one: that report; two: stock against the
    plugin, and with ``plot`` their picture), saying where they are kept."""
    reports = [d / "kv_cache_report.latest.rank0.json" for d in dirs]
    missing = [str(r) for r in reports if not r.exists()]
    if missing:
        print(f"no KV cache report at {', '.join(missing)}", flush=True)
        return 1 if len(dirs) > 1 else 0
    print("KV cache report" + ("s (kept)" if len(dirs) > 1 else " (kept)") + ": " + ", ".join(map(str, reports)), flush=True)
    command = [sys.executable, "-m", "vllm_kv_strategies", "report", *map(str, dirs)]
    rc = subprocess.run(command, check=False).returncode
    if plot is not None:
        done = subprocess.run([*command, "--plot", str(plot)], check=False, capture_output=True, text=True)
        if plot.exists():  # its table is the one above
            print(f"the picture, stock above the plugin (report STOCK PLUGIN --plot): {plot}", flush=True)
        else:
            print(f"no picture: {(done.stderr.strip().splitlines() or ['report --plot failed'])[-1]}", flush=True)
    # report exits 1 when the two differ, which is what --compare shows
    return 0 if len(dirs) > 1 and rc in (0, 1) else rc


def serve_once(args, model_dir: str, name: str, env_updates: dict[str, str], own_model: bool,
               allow_no_plugin: bool | None = None) -> int:
    """Steps 2-6 for ``model_dir`` with ``env_updates`` over the environment; the exit code."""
    allow_no_plugin = args.allow_no_plugin if allow_no_plugin is None else allow_no_plugin
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, str(HERE / "vllm_cpu_serve.py"), "serve", model_dir,
        "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", name,
        "--max-model-len", "1024",
        "--enforce-eager",
        *args.extra,
    ]
    print("starting:", " ".join(cmd), flush=True)
    print("waiting for the server to answer GET /health (about 30-120 s on 2 cores; --verbose shows its log) ...", flush=True)
    env = {**default_env(), **env_updates}
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
        if own_model:  # the model built here: its answer means nothing
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
        elif allow_no_plugin:
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
    return rc


if __name__ == "__main__":
    sys.exit(main())
