"""Mamba states laid out as vLLM lays them with ``MambaSpec.state_alignment`` (vLLM 0.34):
each state starts on the alignment (``MambaBase.bind_kv_cache``), the page is
``MambaSpec.state_content_size_bytes``. Real spec objects; exact parts and bytes; stock against
the plugin in ``on`` on the release's runners."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("vllm.v1.worker.gpu.model_runner", reason="needs vLLM's Model Runner V2 (vLLM >= 0.30)")

from test_upstream_adapter import RUNNERS, assert_same, run_both  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec  # noqa: E402

from vllm_kv_strategies.core.plan import plan_kv_cache  # noqa: E402
from vllm_kv_strategies.core.strategies import MambaStrategy, ModelDims  # noqa: E402

HAS_ALIGNMENT = "state_alignment" in {f.name for f in dataclasses.fields(MambaSpec)}
needs_alignment = pytest.mark.skipif(not HAS_ALIGNMENT, reason="MambaSpec.state_alignment is new in vLLM 0.34")
#: A 60-byte conv state (bf16 (30,)) and a 256-byte ssm state (fp32 (64,)): 60 is not a multiple of 16.
SHAPES, DTYPES = ((30,), (64,)), (torch.bfloat16, torch.float32)


def mamba(alignment: int | None):
    extra = {} if alignment is None else {"state_alignment": alignment}
    return MambaSpec(block_size=16, shapes=SHAPES, dtypes=DTYPES, **extra)


def parts_of(spec):
    return [(p.name, p.dtype, p.shape, p.nbytes) for p in MambaStrategy().page_parts(spec, ModelDims())]


def test_alignment_1_places_states_back_to_back():
    spec = mamba(1 if HAS_ALIGNMENT else None)
    assert parts_of(spec) == [("conv", torch.bfloat16, (30,), 60), ("ssm", torch.float32, (64,), 256)]
    assert MambaStrategy().page_size_bytes(spec, ModelDims()) == spec.page_size_bytes == 316


@needs_alignment
def test_alignment_16_starts_each_state_on_16_bytes():
    spec = mamba(16)
    assert spec.page_size_bytes == 320  # vLLM's own: round_up(60, 16) + round_up(256, 16)
    assert parts_of(spec) == [
        ("conv", torch.bfloat16, (30,), 60), ("conv_align", torch.uint8, (4,), 4), ("ssm", torch.float32, (64,), 256)]
    offsets, offset = {}, 0
    for name, _, _, nbytes in parts_of(spec):
        offsets[name], offset = offset, offset + nbytes
    assert offsets["ssm"] == 64 and offset == 320


@needs_alignment
def test_an_aligned_last_state_gets_no_gap_part():
    spec = MambaSpec(block_size=16, shapes=((32,), (30,)), dtypes=(torch.float32, torch.bfloat16), state_alignment=16)
    assert [p[0] for p in parts_of(spec)] == ["conv", "ssm", "ssm_align"]
    assert spec.page_size_bytes == 128 + 64 == sum(p[3] for p in parts_of(spec))


@pytest.mark.parametrize("alignment", [1, 16])
@pytest.mark.parametrize("version", RUNNERS)
def test_aligned_mamba_with_attention_plans_and_matches_stock_when_on(monkeypatch, version, alignment):
    if alignment != 1 and not HAS_ALIGNMENT:
        pytest.skip("MambaSpec.state_alignment is new in vLLM 0.34")
    monkeypatch.setenv("KV_STRATEGIES", "on")  # a layout error would raise, not fall back
    specs = {"model.layers.0.linear_attn": mamba(alignment if HAS_ALIGNMENT else None),
             "model.layers.1.self_attn.attn": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8,
                                                                 dtype=torch.bfloat16)}
    config, stock, ours = run_both(specs, version=version)
    assert_same(stock, ours)
    plan = plan_kv_cache(config)
    layer = plan.layers["model.layers.0.linear_attn"]
    assert layer.page_bytes == (320 if alignment == 16 else 316)
