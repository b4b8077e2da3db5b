"""``HCCL_BUFFSIZE`` in plan's estimate, on every Ascend cell (``conftest.ALL_RELEASES``).

vllm-ascend creates the ``mc2`` communicator of its MoE dispatch while it loads a MoE model whose
experts are split over ranks, sized by ``HCCL_BUFFSIZE`` (2 x it, CANN), where its other process
groups get 200 MB each; plan's estimate counts the difference as a term of its own
(``overhead.mc2_buffers``). DeepSeek-V3 at TP 16 x PP 2 with expert parallel is the MoE here
(test_plan_both_sides plans it without).
"""

from __future__ import annotations

import pytest
from test_plan_ascend import RELEASE, plan, plan_error

ARGS = ("--tensor-parallel-size", "16", "--pipeline-parallel-size", "2", "--enable-expert-parallel",
        "--max-model-len", "8192", "--device", "910b-64g", *(["--swap-space", "0"] if RELEASE < (0, 18) else []))


def test_hccl_buffsize_is_a_term_of_the_estimate(tmp_path, monkeypatch):
    """HCCL_BUFFSIZE=1024: the term is 2 x (1,024 - 200) MiB = 1,728,053,248 bytes, printed with its
    source, and the budget is the device's memory x the utilisation less every term, this one included."""
    monkeypatch.setenv("HCCL_BUFFSIZE", "1024")
    result, data = plan(tmp_path, "deepseek-v3", *ARGS)
    assert result.returncode == 0, result.stderr[-2000:]
    terms = {t["name"]: t["value"] for t in data["budget"]["terms"]}
    assert terms["hccl buffers"] == 2 * (1024 - 200) * 2**20 == 1_728_053_248
    assert data["budget"]["bytes_per_worker"] == int(terms["device memory"] * terms["utilisation"] / 1000) - sum(
        value for name, value in terms.items() if name not in ("device memory", "utilisation"))
    assert ("  - hccl buffers  1,728,053,248 bytes (1.61 GiB)   HCCL_BUFFSIZE=1024: the send and receive buffers of "
            "vllm-ascend's mc2 communicator (MoE dispatch), 2 x 1024 MB where the runtime holds 2 x 200\n") in result.stdout


@pytest.mark.skipif(RELEASE < (0, 30), reason="plan reads HCCL_BUFFSIZE in its own code, the same on every release: the "
                    "newest cell proves the message (each plan here imports vLLM, 20 s)")
def test_a_bad_hccl_buffsize_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HCCL_BUFFSIZE", "1GB")
    result = plan_error(tmp_path, "deepseek-v3", *ARGS)
    assert result.stderr.endswith("plan: error: HCCL_BUFFSIZE='1GB': CANN takes a whole number of MB, at least 1\n")


@pytest.mark.skipif(RELEASE < (0, 30), reason="vllm-ascend 0.30 takes all-to-all for LoRA with expert parallel; the "
                    "releases before it have no such case (the term is there with LoRA, as without)")
def test_lora_leaves_out_the_mc2_buffers(tmp_path, monkeypatch):
    """Qwen3-30B-A3B on an A3 at TP 2 with expert parallel: MC2 at any size on an A3 (the term), but not
    with ``--enable-lora``, where 0.30 dispatches all-to-all (a new user's review: the term was there)."""
    monkeypatch.setenv("HCCL_BUFFSIZE", "1024")
    args = ("--tensor-parallel-size", "2", "--device", "a3", "--enable-expert-parallel", "--max-model-len", "8192")
    for lora, term in ((False, True), (True, False)):
        result, data = plan(tmp_path, "qwen3-30b-a3b", *args, *(["--enable-lora"] if lora else []))
        assert result.returncode == 0, result.stderr[-2000:]
        assert ("hccl buffers" in {t["name"] for t in data["budget"]["terms"]}) is term, lora
