"""``plan --device 910b-64g`` on every Ascend cell: the README's third example (Qwen3-Next-80B-A3B at
TP 4) and an MLA MoE (DeepSeek-V3 at TP 16 x PP 2) plan both sides, stock and the plugin, and each side
says the KV cache size in tokens and the maximum concurrency as the release's start-up log says them.

Collected in every cell (``conftest.ALL_RELEASES``); green in ascend-0.11.0, 0.13.0, 0.18.0, 0.23.0 and 0.30.0.
The budgets are estimates (``--device``), so the expected numbers are computed from the budget the
plan reports and the published configs (``tests/deploy/configs``), not read back from its table.
"""

from __future__ import annotations

import re

import pytest
from test_plan_ascend import RELEASE, plan

#: vLLM 0.30 logs "KV cache size: N tokens, Maximum concurrency ..." (get_kv_cache_capacity); the releases
#: before it (vllm-ascend 0.11 - 0.23's vLLM) log "GPU KV cache size: N tokens" and the concurrency apart.
SIZE = "KV cache size: {:,} tokens" if RELEASE >= (0, 30) else "GPU KV cache size: {:,} tokens"


def capacity_said(stdout: str, sides: dict[str, tuple[int, float]], max_model_len: int) -> None:
    """The headline (the plugin's) and each side's line carry vLLM's two numbers in the release's words;
    ``sides``: {"stock" / "plugin": (tokens, concurrency)}."""
    def words(tokens: int, concurrency: float) -> str:
        size = SIZE.format(tokens)
        if RELEASE >= (0, 30):
            return f"{size} ({concurrency:.2f}x)"
        return f"{size}, Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"

    tokens, concurrency = sides["plugin"]
    headline = (f"{SIZE.format(tokens)}, Maximum concurrency for {max_model_len:,} tokens per request: "
                f"{concurrency:.2f}x")
    assert f"\nvLLM would log: {headline}\n" in stdout, stdout
    said = re.findall(r"^  num_blocks .*; vLLM would log:? (.*)$", stdout, re.M)
    assert said == [words(*sides["stock"]), words(*sides["plugin"])], stdout


def test_dense_tokens_and_concurrency_in_the_releases_words(tmp_path):
    """Llama-3-70B at TP 4 with 4,000,000,000 bytes: 381 blocks of 128 tokens (test_plan_ascend's
    dense test), one full-attention group: every release's formula gives 381 x 128 = 48,768 tokens and
    48,768 / 4,096 = 11.91 requests of 4,096 tokens; the JSON has them per side and for the deployment."""
    result, data = plan(tmp_path, "llama-3-70b", "--tensor-parallel-size", "4", "--max-model-len", "4096",
                        "--kv-cache-memory-bytes", "4000000000", *(["--swap-space", "0"] if RELEASE < (0, 18) else []))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (data["tokens"], data["max_concurrency"]) == (381 * 128, 11.91 if RELEASE < (0, 30) else 11.90625)
    for side in ("stock", "plugin"):
        assert data["ascend"][side]["tokens"] == 48_768
    capacity_said(result.stdout, {"stock": (48_768, 11.90625), "plugin": (48_768, 11.90625)}, 4096)


@pytest.mark.skipif(RELEASE < (0, 13), reason="vLLM 0.11's Qwen3-Next module imports its triton flash-linear-attention "
                    "kernels at import, which this CPU environment's triton lacks (vllm-ascend hosts have triton-ascend)")
def test_readme_qwen3_next_example_plans_both_sides(tmp_path):
    """The README's third plan example. Qwen3-Next's 48 layers make 4 groups of 12 (full attention and
    three of GDN state); a request of 32,768 tokens takes cdiv(32,768, attention block) attention blocks
    and a state block per GDN group (two on 0.30, whose planner keeps a second for the running state),
    so vLLM's concurrency is num_blocks / that and its tokens that x 32,768 (measured on 0.23 with the
    2 GiB overhead plan subtracted before it computed the terms: 2,614 blocks of 512 -> 67 a request ->
    1,278,441 tokens). 0.13 logs num_blocks // 4 groups x the attention block instead (with the computed
    terms: stock 3,477 blocks of 384 -> 333,696 tokens, 39.07x; the plugin 2,607 of 512 -> 333,312, 38.91x)."""
    result, data = plan(tmp_path, "qwen3-next-80b-a3b", "--tensor-parallel-size", "4", "--max-model-len", "32768",
                        "--device", "910b-64g", "--gpu-memory-utilization", "0.9")
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("stock", "plugin"):
        side = data["ascend"][name]
        assert side["build_error"] is None and len(side["bytes_allocated_per_worker"]) == 4, side
        assert side["tokens"] is not None and side["max_concurrency"] is not None, side
        attention = side["block_sizes"][0]
        if RELEASE in ((0, 23), (0, 30)):
            per_request = -(-32768 // attention) + 3 * (2 if RELEASE >= (0, 30) else 1)
            assert side["tokens"] == int(side["num_blocks"] / per_request * 32768)
        elif RELEASE == (0, 13):  # 0.13 logs num_blocks // groups x the smallest block: 3,477 // 4 x 384 = 333,696
            assert side["tokens"] == side["num_blocks"] // 4 * attention
    plugin = data["ascend"]["plugin"]
    assert (data["tokens"], data["max_concurrency"]) == (plugin["tokens"], plugin["max_concurrency"])
    capacity_said(result.stdout, {n: (data["ascend"][n]["tokens"], data["ascend"][n]["max_concurrency"])
                                  for n in ("stock", "plugin")}, 32768)
    assert "vllm_log" in plugin and (plugin["vllm_log"] == []) == (RELEASE >= (0, 30))


def test_deepseek_v3_mla_moe_plans_both_sides(tmp_path):
    """DeepSeek-V3 (61 MLA layers, 256 routed experts, bf16) at TP 16 x PP 2 on 64 GB 910Bs: a page is
    128 x (512 + 64) x 2 = 147,456 bytes; stage 0 holds 31 layers, so num_blocks = budget // (31 x page),
    tokens = num_blocks x 128 and concurrency tokens / 8,192 (one MLA group: every release's formula);
    stage 0 allocates 31 pages a block and stage 1 30, on both sides. On 0.30 vllm-ascend's MoE factory
    passes n_shared_experts to routed experts it replaces with its own NPU layer; plan builds vLLM's
    without it and says so in its stand-ins line (was: exit 2, "RoutedExperts.__init__() got an
    unexpected keyword argument 'n_shared_experts'")."""
    page = 128 * (512 + 64) * 2
    result, data = plan(tmp_path, "deepseek-v3", "--tensor-parallel-size", "16", "--pipeline-parallel-size", "2",
                        "--max-model-len", "8192", "--device", "910b-64g", "--gpu-memory-utilization", "0.9",
                        *(["--swap-space", "0"] if RELEASE < (0, 18) else []))
    assert result.returncode == 0, result.stderr[-2000:]
    budget = data["budget"]["bytes_per_worker"]
    blocks = budget // (31 * page)
    stage_1 = (budget // (30 * page) if RELEASE < (0, 13) else blocks) * 30 * page  # 0.11 keeps stage 1's own count
    for name in ("stock", "plugin"):
        side = data["ascend"][name]
        assert (side["num_blocks"], side["tokens"]) == (blocks, blocks * 128)
        assert side["bytes_allocated_per_worker"] == [blocks * 31 * page] * 16 + [stage_1] * 16
    capacity_said(result.stdout, dict.fromkeys(("stock", "plugin"), (blocks * 128, blocks * 128 / 8192)), 8192)
    stood_in = re.search(r"^note: stand-ins for planning only.*$", result.stdout, re.M)
    routed = ("vLLM's RoutedExperts without n_shared_experts (vllm-ascend's MoE factory passes them to its "
              "AscendRoutedExperts, an NPU custom op; the experts hold no KV cache)")
    assert (stood_in is not None and routed in stood_in[0]) == (RELEASE >= (0, 30)), result.stdout[:3000]
