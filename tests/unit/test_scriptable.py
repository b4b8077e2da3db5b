"""The command line in scripts (issue 46): ``--json -`` on every subcommand that answers puts
pure JSON on stdout (the human lines on stderr), ``-q`` / ``-v`` set how much is said besides,
vLLM's own log lines never reach stdout, and an input another one overrides gets a note.
On real vLLM (the fresh interpreters: vLLM's logging as a user's process configures it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from test_bad_inputs import BUDGET, LLAMA
from test_report import reports  # noqa: F401  (the module-scoped real reports)

from vllm_kv_strategies.__main__ import main
from vllm_kv_strategies.deploy import cli


def command(*argv: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KV_STRATEGIES", "VLLM_LOGGING"))}
    return subprocess.run([sys.executable, "-m", "vllm_kv_strategies", *argv], env={**clean, **env},
                          capture_output=True, text=True, timeout=300)


def vllm_info(text: str) -> bool:
    """Whether ``text`` holds a vLLM INFO log line ("INFO 12-07 08:51:23 [...]", after a process
    prefix such as "(EngineCore pid=1) " on some releases)."""
    return re.search(r"(^|\s)INFO \d\d-\d\d ", text, re.M) is not None


def model(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(LLAMA))
    return str(tmp_path / "model")


def test_plan_json_on_stdout_verbose_logs_on_stderr(tmp_path):
    """``-v plan ... --json -``: stdout is the plan's JSON alone (8 layers x 128 tokens x (K, V) x 2
    heads x 64 x 2 bytes = 524,288 bytes a block: 2**26 // 524,288 = 128 blocks); the table and
    vLLM's INFO lines on stderr."""
    proc = command("-v", "plan", model(tmp_path), "--kv-cache-memory-bytes", BUDGET, "--json", "-")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert (data["kind"], data["num_blocks"]) == ("plan", 2**26 // 524_288 == 128 and 128)
    assert "num_blocks" in proc.stderr and vllm_info(proc.stderr)


def test_plan_quiet_says_the_answer_alone(tmp_path):
    proc = command("-q", "plan", model(tmp_path), "--kv-cache-memory-bytes", BUDGET, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "plan: importing vLLM" not in proc.stderr and not vllm_info(proc.stderr + proc.stdout)
    assert "num_blocks" in proc.stdout


def test_doctor_json_on_stdout_and_vllm_lines_off_it(tmp_path):
    """With engine options vLLM configures its logging and logs (INFO: the architecture resolved;
    WARNING: no Triton): on stderr, with -v; stdout is the JSON alone (was: vLLM's lines between doctor's)."""
    proc = command("-v", "doctor", "--json", "-", "--", "--model", model(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout)
    assert (facts["kind"], facts["active"], facts["exit"], facts["mode"]) == ("doctor", True, 0, "auto")
    assert all(all(t["attributes"].values()) for t in facts["patch_targets"])
    assert proc.stderr.splitlines()[-1] == "KV_STRATEGIES=auto: the plugin would patch the runner"
    assert not vllm_info(proc.stdout)
    if facts["runner"]["cannot_start"] is None:  # vLLM makes the engine config here (not 0.34 without triton-cpu)
        assert vllm_info(proc.stderr) and "Resolved architecture: LlamaForCausalLM" in proc.stderr


def test_report_json_one_and_two(reports, capsys):  # noqa: F811
    assert main(["report", str(reports["stock"]), "--json", "-"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["kind"] == "report" and [r["path"] for r in data["reports"]] == [str(reports["stock"])]
    assert data["reports"][0]["report"]["built_by"] == "stock_observed" and data["exit"] == 0
    assert captured.err.startswith("KV cache report (schema 3): ")
    assert main(["report", str(reports["stock"]), str(reports["plugin"]), "--json", "-", "-q"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [r["report"]["mode"] for r in data["reports"]] == ["observe", "on"] and captured.err == ""


def test_report_json_of_a_deployment_to_a_file(reports, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "deploy.json"
    assert main(["report", str(reports["deploy"]), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["report"]["totals"]["rank"] for r in data["reports"]] == [0, 1] and data["flagged"] is False
    assert "deployment" in capsys.readouterr().out


def test_strategies_and_matrix_json(capsys, tmp_path):
    assert main(["strategies", "--json", "-"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["strategies"]
    assert rows[0]["name"] == "full_attention" and "FullAttentionSpec" in rows[0]["spec_types"]
    assert any(line.startswith("full_attention ") for line in captured.err.splitlines())
    assert main(["matrix", "--json"]) == 0  # alone: one line on stdout, as before
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and json.loads(line)["upstream"]
    assert main(["matrix", "--json", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text()) == json.loads(line)
    assert "vllm-ascend releases on the package index" in capsys.readouterr().out


def test_a_card_s_memory_overridden_gets_a_note(tmp_path, capsys):
    assert cli.run([model(tmp_path), "--device", "h100-80g", "--device-memory-gib", "10"]) == 0
    assert ("note: --device-memory-gib 10 overrides h100-80g's memory (79.11 GiB) in the estimate; --device h100-80g "
            "sets the platform\n") in capsys.readouterr().out
