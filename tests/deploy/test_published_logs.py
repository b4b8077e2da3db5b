"""``plan`` against published startup logs of real CUDA deployments.

Each log shows, for a public model (its published ``config.json`` is in
tests/deploy/configs/), the budget vLLM's worker gave the planner
("Available KV cache memory: X GiB", printed with ``%.2f``) and what the
engine planned ("GPU KV cache size: N tokens", "Maximum concurrency for L
tokens per request: Cx"). The budget is known only to the rounding of its two
decimals, so plan runs at both ends of the open interval (X - 0.005, X + 0.005)
GiB: the logged token count lies between plan's two answers. A third run, at
the logged number of blocks times plan's bytes per block (a budget inside the
interval), gives the logged tokens and concurrency line exactly.

The logs' platform was CUDA, whose attention backends (FlashAttention,
FlashInfer) take vLLM's default block of 16 tokens; this CPU build's platform
would pick 128, so plan is given ``--block-size 16`` as the log's platform chose.
The planner's arithmetic for one full-attention group (num_blocks = budget //
(page bytes x layers), tokens = num_blocks x block size) is the same in the
logs' vLLM 0.10.2 and the installed release.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from vllm_kv_strategies.deploy import cli

CONFIGS = Path(__file__).resolve().parent / "configs"
GIB = 2**30


def budget_interval(logged_gib: str) -> tuple[int, int]:
    """The smallest and largest whole byte counts vLLM prints as ``logged_gib``
    with ``%.2f`` (the ends of the open interval, exclusive: no byte count is
    exactly on a rounding boundary, since x.xx5 GiB is not a whole number of bytes)."""
    low, high = ((Decimal(logged_gib) + d) * GIB for d in (Decimal("-0.005"), Decimal("0.005")))
    assert low != int(low) and high != int(high)
    return int(low) + 1, int(high)


def plan(tmp_path: Path, capsys, name: str, budget: int, *args: str) -> tuple[dict, str]:
    """(the --json plan, stdout) of ``plan`` on the published config ``name`` alone in a directory."""
    model = tmp_path / name
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / name / "config.json").read_text())
    out = tmp_path / f"plan-{budget}.json"
    code = cli.run([str(model), "--kv-cache-memory-bytes", str(budget), *args, "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(out.read_text()), captured.out


def check_log(tmp_path, capsys, name: str, args: list[str], logged_gib: str, tokens: int, max_model_len: int,
              concurrency: str, layers: int, page: int, bracket: tuple[int, int]) -> None:
    """The bracket and the exact witness for one log (see the module docstring)."""
    low, high = budget_interval(logged_gib)
    (at_low, _), (at_high, _) = (plan(tmp_path, capsys, name, b, *args) for b in (low, high))
    for data in (at_low, at_high):
        (rank,) = data["ranks"]
        (group,) = rank["groups"]
        pages = {s["page_size_bytes"] for s in group["specs"]}
        assert (group["kind"], group["block_size"], len(group["layers"]), pages) == ("full_attention", 16, layers, {page})
    per_block = layers * page
    assert (at_low["num_blocks"], at_high["num_blocks"]) == (low // per_block, high // per_block)
    assert (at_low["tokens"], at_high["tokens"]) == bracket
    assert bracket[0] <= tokens <= bracket[1]
    witness = tokens // 16 * per_block
    assert low <= witness <= high
    data, out = plan(tmp_path, capsys, name, witness, *args)
    assert (data["num_blocks"], data["tokens"]) == (tokens // 16, tokens)
    assert f"KV cache size: {tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: {concurrency}x" in out


def test_qwen3_14b_lmcache_1739(tmp_path, capsys):
    """https://github.com/LMCache/LMCache/issues/1739 (vLLM 0.10.2, LMCache 0.3.6, one A100 40GB,
    Qwen/Qwen3-14B, TP 1, max model len 32,768): "Available KV cache memory: 6.51 GiB",
    "GPU KV cache size: 42,656 tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x".
    Page per layer: 16 tokens x (K, V) x 8 KV heads x 128 x 2 bytes = 65,536; 40 layers:
    6.51 GiB +- 0.005 gives 2,664 .. 2,668 blocks (42,624 .. 42,688 tokens); the log's 2,666 is between."""
    check_log(tmp_path, capsys, "qwen3-14b", ["--max-model-len", "32768", "--block-size", "16"], "6.51", 42_656, 32_768,
              "1.30", layers=40, page=65_536, bracket=(42_624, 42_688))


def test_qwen3_0_6b_vllm_pr_24577(tmp_path, capsys):
    """https://github.com/vllm-project/vllm/pull/24577 (comment by mgoin, 2025-09-10, vLLM main
    between v0.10.1 and v0.10.2, one A100, FlashInfer, bf16 KV cache, Qwen/Qwen3-0.6B, max model
    len 4,096): "Available KV cache memory: 69.66 GiB", "GPU KV cache size: 652,144 tokens",
    "Maximum concurrency for 4,096 tokens per request: 159.21x". 28 layers of 65,536-byte pages:
    69.66 GiB +- 0.005 gives 40,758 .. 40,763 blocks (652,128 .. 652,208 tokens); the log's 40,759 is between."""
    check_log(tmp_path, capsys, "qwen3-0.6b", ["--max-model-len", "4096", "--block-size", "16"], "69.66", 652_144, 4_096,
              "159.21", layers=28, page=65_536, bracket=(652_128, 652_208))
