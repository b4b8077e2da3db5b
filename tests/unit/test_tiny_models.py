"""``tools/tiny_models.py``'s kinds (docs/run-on-cpu.md, "Run it yourself"): the Gemma 3 style one is 5
sliding-window layers and 1 full, with untied embeddings, as vLLM reads its config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import tiny_models  # noqa: E402

pytest.importorskip("transformers.models.gemma3", reason="the cell's transformers has no Gemma 3")


def test_gemma3_is_sliding_and_full_with_untied_embeddings():
    cfg = tiny_models._config("gemma3", vocab_size=300, eos_id=0, pad_id=1)
    assert cfg.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    assert (cfg.sliding_window, cfg.tie_word_embeddings, cfg.architectures) == (64, False, ["Gemma3ForCausalLM"])
    assert (cfg.num_key_value_heads, cfg.head_dim) == (2, 32)
    assert "gemma3" in tiny_models.KINDS


def test_the_quantised_kv_example_is_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tiny_models, "build", lambda kind, out: Path(out))
    tmp_path.joinpath("config.json").write_text("{}")
    assert tiny_models.main(["llama", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"serve it with a quantised (fp8) KV cache: python -m vllm.entrypoints.openai.api_server --model {tmp_path} "
        "--kv-cache-dtype fp8 --enforce-eager")


def test_deepseek_v32_is_mla_with_the_sparse_indexer():
    """tools/npu_check.sh's sparse MLA model: DeepSeek-V3.2's indexer over deepseek_v2's MLA shapes."""
    if not hasattr(__import__("transformers"), "DeepseekV32Config"):
        pytest.skip("the cell's transformers has no DeepseekV32Config (transformers 5 has it)")
    cfg = tiny_models._config("deepseek_v32", vocab_size=300, eos_id=0, pad_id=1)
    assert cfg.architectures == ["DeepseekV32ForCausalLM"]
    assert (cfg.num_hidden_layers, cfg.first_k_dense_replace, cfg.kv_lora_rank, cfg.q_lora_rank) == (2, 2, 512, 64)
    assert (cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim) == (64, 128, 128)
    assert (cfg.index_topk, cfg.index_n_heads, cfg.index_head_dim) == (64, 4, 128)
    assert "deepseek_v32" in tiny_models.KINDS
