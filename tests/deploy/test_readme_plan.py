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
    [block] = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "vllm-kv-strategies plan" in b]
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert all(c[:2] == ["vllm-kv-strategies", "plan"] for c in commands), commands
    return [c[2:] for c in commands]


def test_readme_plan_examples(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --json plan.json lands here
    exact, estimate, ascend = readme_plans()
    outputs = []
    for argv in (exact, estimate, ascend):
        code = cli.run([str(REPO / argv[0]), *argv[1:]])
        out = capfd.readouterr().out
        assert code == 0, out
        outputs.append(out)
    # "The first plans for an H100 80GB: 976,512 token slots per worker on vLLM 0.34 (15,258 blocks of the 64
    # tokens its H100 attention backend takes ...), 976,560 on 0.32 (61,035 blocks of 16)": a layer's page is
    # block x K and V x 2 KV heads per rank x 128 x 2 bytes, 40 layers per stage
    row = re.search(r"^\s+0\s+0\s+0\s+0 full_attention\s+40\s+(\d+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$", outputs[0], re.M)
    assert row, outputs[0]
    block = int(row[1])
    blocks = 40_000_000_000 // (40 * block * 2 * 2 * 128 * 2)
    assert (block, row[2], row[3], row[4]) in {(64, "65,536", "15,258", "976,512"), (16, "16,384", "61,035", "976,560")}
    assert (row[3], row[4]) == (f"{blocks:,}", f"{blocks * block:,}")
    assert f"KV cache size: {blocks * block:,} tokens" in outputs[0]
    # "the second estimates the budget from an A100 40GB's memory, term by term" (docs/plan.md shows the terms):
    # 40 GiB x 0.92 - the rank's 17,639,424,000 bytes of weights - the overhead terms, and where vLLM sizes
    # its KV cache after warm-up (0.34's resizable cache) the 1 GiB margin it keeps free: each term printed
    subtracted = [int(v.replace(",", "")) for v in re.findall(r"^  - \S+(?: \S+)? +([\d,]+) bytes", outputs[1], re.M)]
    assert subtracted[0] == 17_639_424_000 and len(subtracted) >= 4  # weights, activations, runtime, cuda graphs
    assert re.search(r"^  - activations +[\d,]+ bytes .* profile_run's peak", outputs[1], re.M)
    assert f"budget: ESTIMATE {int(40 * 2**30 * 0.92) - sum(subtracted):,} bytes per worker" in outputs[1]
    assert "--device a100-40g: NVIDIA A100 40GB" in outputs[1]
    # the third writes its plan file
    assert json.loads((tmp_path / "plan.json").read_text())["kind"] == "plan"
