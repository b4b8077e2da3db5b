"""README.md's `plan` examples run as written (the bash block that shows them, read from the
README), and say what the README says they do: the 70B exact budget's blocks and capacity, the
A100 40GB estimate's budget, and the plan file of the third."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from vllm_kv_strategies.deploy import cli

REPO = Path(__file__).resolve().parents[2]


def readme_plans() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    [block] = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "vllm_kv_strategies plan" in b]
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert all(c[:4] == ["python", "-m", "vllm_kv_strategies", "plan"] for c in commands), commands
    return [c[4:] for c in commands]


def test_readme_plan_examples(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --json plan.json lands here
    exact, estimate, ascend = readme_plans()
    outputs = []
    for argv in (exact, estimate, ascend):
        code = cli.run([str(REPO / argv[0]), *argv[1:]])
        out = capsys.readouterr().out
        assert code == 0, out
        outputs.append(out)
    # "The first gives 7,629 blocks per worker (976,512 tokens, 119.20x for 8,192-token requests)"
    assert "KV cache size: 976,512 tokens, Maximum concurrency for 8,192 tokens per request: 119.20x" in outputs[0]
    assert re.search(r"^\s+0\s+0\s+0\s+0 full_attention\s+40\s+128\s+131,072\s+7,629\s", outputs[0], re.M), outputs[0]
    # "the second estimates the budget from an A100 40GB's memory, term by term" (docs/plan.md shows the terms)
    assert "budget: ESTIMATE 19,726,791,475 bytes per worker (18.372 GiB) =" in outputs[1]
    assert "--device a100-40g: NVIDIA A100 40GB" in outputs[1]
    # the third writes its plan file
    assert json.loads((tmp_path / "plan.json").read_text())["kind"] == "plan"
