"""Under Ray: the switch set in the driver reaches workers whose node does not set it.

A local Ray cluster (``ray start --head --block``, 127.0.0.1, 2 CPUs) is
started with an environment holding no ``KV_STRATEGIES*`` variable; its
workers take their environment from it, as workers on another node would.
vLLM's CPU build cannot run vLLM's Ray executor (``ValueError: current
platform cpu does not support ray.``), so ``ray_workers.py`` drives two of
vLLM's ``RayWorkerWrapper`` actors (tensor parallel 2) through the steps vLLM's
Ray executor V1 and engine core take, KV cache included (see its docstring).

With ``KV_STRATEGIES=off`` in the driver no worker patches anything; with
``on`` both build through the strategies, log one summary line each and write
one report per rank, with the KV cache views stock builds (``observe``, same
cluster); ``report DIR`` sums both ranks. A cluster whose environment sets
``KV_STRATEGIES=off`` under a driver that leaves it unset makes every worker
log the error naming both switches.

Needs ``ray`` (pinned in ``requirements/ray/upstream-0.32.0.txt``): run
``tools/nox.sh -s ray``. About 6 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not in this cell's pins; tools/nox.sh -s ray runs this file")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools"))

pytestmark = pytest.mark.e2e
TIMEOUT = float(os.environ.get("E2E_RUN_TIMEOUT", "900"))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "RAY_", "VLLM_RAY"))}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """``ray start --head --block`` in ``env``; :meth:`stop` ends it (and only it)."""

    def __init__(self, **env: str) -> None:
        self.port = free_port()
        self.temp = tempfile.mkdtemp(prefix="kvray-", dir="/tmp")  # Ray's socket paths must stay short
        ray_cli = shutil.which("ray", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        assert ray_cli, "no ray command beside this Python or on PATH"
        self.log = open(os.path.join(self.temp, "head.log"), "w+")
        self.proc = subprocess.Popen(
            [ray_cli, "start", "--head", "--block", f"--port={self.port}", "--num-cpus=2",
             "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
             f"--temp-dir={self.temp}"],
            env=clean_env(**env), stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in Path(self.log.name).read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, Path(self.log.name).read_text()[-3000:]
            time.sleep(1)
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)  # --block: Ray stops the processes this head started
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import tiny_models

    path = tmp_path_factory.mktemp("ray") / "llama"
    tiny_models.build("llama", str(path))
    return path


@pytest.fixture(scope="module")
def clean_cluster():
    cluster = Cluster()
    yield cluster
    cluster.stop()


def drive(cluster: Cluster, model: Path, out: Path, **driver_env: str) -> tuple[dict, str]:
    """Two vLLM Ray workers on ``cluster``; ``driver_env`` is set in the driver only."""
    env = clean_env(RAY_ADDRESS=cluster.address, RAY_DEDUP_LOGS="0", VLLM_CPU_OMP_THREADS_BIND="0|1", **driver_env)
    proc = subprocess.run([sys.executable, str(HERE / "ray_workers.py"), str(model), str(out)],
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return json.loads(out.read_text()), log


def plugin_lines(log: str, pid: int) -> list[str]:
    """The plugin's lines that Ray forwarded from the worker process ``pid``."""
    return [ln for ln in log.splitlines() if re.search(rf"\(RayWorkerWrapper pid={pid}\)", ln) and "kv_strategies:" in ln]


def show(capsys, title: str, lines: list[str]) -> None:
    with capsys.disabled():
        print(f"\n[{title}]", *lines, sep="\n  ")


def test_off_on_and_observe_set_in_the_driver_only(clean_cluster, model, tmp_path, capsys):
    off, off_log = drive(clean_cluster, model, tmp_path / "off.json", KV_STRATEGIES="off")
    stock_dir, on_dir = tmp_path / "stock", tmp_path / "on"
    stock, _ = drive(clean_cluster, model, tmp_path / "observe.json", KV_STRATEGIES="observe",
                     KV_STRATEGIES_REPORT=str(stock_dir))
    on, on_log = drive(clean_cluster, model, tmp_path / "on.json", KV_STRATEGIES="on", KV_STRATEGIES_REPORT=str(on_dir))

    assert off["sent"]["KV_STRATEGIES"] == "off" and len(off["workers"]) == 2
    for worker in off["workers"]:  # the node has no KV_STRATEGIES: the driver's reached it
        assert worker["env"]["KV_STRATEGIES"] == "off" and worker["registered"] == "off" and worker["patched"] == []
        [line] = plugin_lines(off_log, worker["pid"])
        assert "INFO" in line and "kv_strategies: off (KV_STRATEGIES=off): nothing patched" in line
    assert "kv_strategies: rank" not in off_log and "patched vllm" not in off_log

    for rank, worker in enumerate(on["workers"]):
        assert worker["env"]["KV_STRATEGIES"] == "on" and worker["registered"] == "upstream"
        assert worker["env"]["KV_STRATEGIES_REPORT"] == str(on_dir)
        assert worker["patched"] == ["initialize_kv_cache", "initialize_kv_cache_tensors"]
        lines = plugin_lines(on_log, worker["pid"])
        assert len([ln for ln in lines if "kv_strategies: enabled (KV_STRATEGIES=on" in ln]) == 1
        [summary] = [ln for ln in lines if f"kv_strategies: rank {rank}: vLLM built and the plugin checked 4 layers (full_attention=4)" in ln]
        assert not [ln for ln in lines if "ERROR" in ln]
        report = json.loads((on_dir / f"kv_cache_report.latest.rank{rank}.json").read_text())
        assert report["built_by"] == "vllm_checked" and report["world_size"] == 2 and report["pid"] == worker["pid"]
        assert report["run_id"] == on["sent"]["KV_STRATEGIES_RUN_ID"]  # one run for both ranks
        assert worker["kv_caches"] == stock["workers"][rank]["kv_caches"]  # what stock builds
        compared = subprocess.run(
            [sys.executable, "-m", "vllm_kv_strategies", "report", str(stock_dir / f"kv_cache_report.latest.rank{rank}.json"),
             str(on_dir / f"kv_cache_report.latest.rank{rank}.json")], capture_output=True, text=True, timeout=120)
        assert compared.returncode == 0, compared.stderr
        assert "per-layer views (shape, stride, dtype): equal on all 4 layers" in compared.stdout
        assert "KV cache specs: equal" in compared.stdout
    assert len(list(on_dir.glob("kv_cache_report.2*.rank*.json"))) == 2  # one report per rank

    summed = subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", str(on_dir)],
                            capture_output=True, text=True, timeout=120)
    assert summed.returncode == 0, summed.stdout + summed.stderr
    lines = summed.stdout.splitlines()
    show(capsys, "KV_STRATEGIES=off in the driver: the workers' lines", [ln for w in off["workers"] for ln in plugin_lines(off_log, w["pid"])])
    show(capsys, "KV_STRATEGIES=on in the driver: the workers' lines", [ln for w in on["workers"] for ln in plugin_lines(on_log, w["pid"])])
    show(capsys, f"report {on_dir}", lines)
    assert lines[0] == f"KV cache reports in {on_dir}: 2 reports, 2 ranks (each rank's newest report), world size 2"
    assert [ln.split()[:4] for ln in lines[2:4]] == [["0", "0/0/0", "vllm_checked", "on"], ["1", "0/0/1", "vllm_checked", "on"]]
    assert lines[4].startswith("deployment (2 ranks): 2,147,483,648 bytes allocated")
    assert lines[5] == "layouts: the same on every rank"


def test_a_node_whose_environment_sets_another_switch_logs_the_error(model, tmp_path, capsys):
    cluster = Cluster(KV_STRATEGIES="off")
    try:
        result, log = drive(cluster, model, tmp_path / "differs.json")  # the driver: KV_STRATEGIES unset (auto)
    finally:
        cluster.stop()
    assert "KV_STRATEGIES" not in result["sent"] and result["sent"]["KV_STRATEGIES_DRIVER_MODE"] == "auto"
    for worker in result["workers"]:
        assert worker["registered"] == "off"  # the node's own switch: the V1 executor did not send one
        [error] = [ln for ln in plugin_lines(log, worker["pid"]) if "ERROR" in ln]
        assert "runs with KV_STRATEGIES=off, but the process that started this vLLM deployment runs with " \
               "KV_STRATEGIES=auto" in error
        show(capsys, "a node with KV_STRATEGIES=off under a driver without it", [error])
