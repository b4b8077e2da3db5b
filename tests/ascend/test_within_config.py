"""Never beyond the config (issue 22 item 1, vllm-ascend #13853).

A hybrid (Mamba + attention) whose user ``--block-size`` is larger than the aligned one keeps it
on vllm-ascend 0.18 / 0.23 (``patch_mamba_config`` only raises a smaller block size): the
attention K page is then twice the ssm state inside the shared tensor and stock silently
corrupts. The plugin refuses it by name before allocating, in ``auto`` too
(``StockWouldCorruptError``); where stock does not share the tensor (0.11 / 0.13: K/V buffers of
their own, beyond the config) it refuses with ``BeyondConfigError``, which ``auto`` answers with
stock's build. It never allocates more than the config's ``KVCacheTensor`` s hold
(:func:`~vllm_kv_strategies.platforms.ascend.layout.budget.check_within_config`; the zoo asserts it per case).
"""

from __future__ import annotations

import copy
import logging

import pytest
import runner_factory as rf
import torch
from kv_compare import block_conflicts, layout_signature, plugin_init, stock_init, storages
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

from vllm_kv_strategies.platforms.ascend import allocate as ascend_alloc
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import BeyondConfigError, StockWouldCorruptError
from vllm_kv_strategies.platforms.ascend.layout.budget import aligned_block_size, check_within_config
from vllm_kv_strategies.platforms.ascend.layout.buffers import TensorLayout
from vllm_kv_strategies.core.plan import plan_kv_cache
from vllm_kv_strategies.core.strategies import ModelDims

R = rf.RELEASE
BF16 = torch.bfloat16
SHARED_HYBRID = (0, 18) <= R < (0, 30)
needs_shared_hybrid = pytest.mark.skipif(
    not SHARED_HYBRID,
    reason="the #13853 toy is 0.18 / 0.23's sizing (attention specs with page_size_padded = 2 K pages + conv, one "
    "shared buffer); 0.11 / 0.13 give attention K/V of their own, 0.30 plans hybrids as one strided backing",
)
#: The toy's one tensor: 4 blocks of 2 x 32,768 (K + V at block 256) + 1,536 (conv) bytes.
TOY_TENSOR, TOY_BLOCKS = 268_288, 4


def toy() -> rf.ModelKV:
    """The issue's toy as 0.18 / 0.23 size it with ``--block-size 256``: 3 GDN layers (conv
    (3, 256) + ssm (2, 64, 64) bf16: ssm 16,384 bytes) and 1 attention layer (1 KV head of 64,
    bf16: K 128 bytes per token, aligned block 128); at 256 the attention page is 65,536, both
    specs padded to 65,536 + 1,536 = 67,072 (``patch_mamba_config``: attn page + conv page)."""
    attn = FullAttentionSpec(block_size=256, num_kv_heads=1, head_size=64, dtype=BF16, page_size_padded=67_072)
    mamba = rf._spec(
        MambaSpec, block_size=512, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, BF16), page_size_padded=67_072,
        mamba_type=rf.gdn_mamba_type(), mamba_cache_mode="none",
    )
    specs = {"model.layers.3.self_attn.attn": attn, **{f"model.layers.{i}.linear_attn": mamba for i in range(3)}}
    config = rf.build_kv_cache_config(specs, TOY_BLOCKS, max_model_len=512)
    return rf.ModelKV("#13853 toy", 1, config, specs, runner_kwargs={"model_type": "qwen3_next"})


def _offset(view: torch.Tensor) -> int:
    return view.data_ptr() - view.untyped_storage().data_ptr()


@needs_shared_hybrid
def test_the_13853_toy_corrupts_under_stock():
    """The measured facts: one tensor of 268,288 bytes; stock's K block 1 is bytes
    [38,912, 71,680), which are the ssm state's blocks 2 and 3 of every GDN layer."""
    mk = toy()
    config = mk.kv_cache_config
    assert [t.size for t in config.kv_cache_tensors] == [TOY_TENSOR] and config.num_blocks == TOY_BLOCKS
    kv = stock_init(mk.make_runner(), config)
    k = kv["model.layers.3.self_attn.attn"][0]
    assert k.dtype == BF16 and k.shape[0] == 2 * TOY_BLOCKS  # 128-token kernel blocks: K block 1 = rows 2, 3
    k1 = _offset(k[2]), _offset(k[3]) + k[3].numel() * 2
    assert k1 == (38_912, 71_680)
    ssm = kv["model.layers.0.linear_attn"][1]
    assert (_offset(ssm[2]), _offset(ssm[3]) + ssm[3].numel() * 2) == (38_912, 71_680)
    assert sum(storages(kv).values()) == TOY_TENSOR
    assert block_conflicts(kv, config)


@needs_shared_hybrid
@pytest.mark.parametrize("mode", ["auto", "on"])
def test_the_13853_toy_is_refused_by_name_before_allocating(mode, monkeypatch, kv_log):
    """In auto and on: StockWouldCorruptError naming the tensor, the layers, the bytes separate
    K/V would take (530,432 for 268,288) and what to do (the aligned block size, 128); nothing
    allocated, no fallback (stock would corrupt)."""
    monkeypatch.setenv("KV_STRATEGIES", mode)
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *a: pytest.fail("allocated before refusing"))
    mk = toy()
    with pytest.raises(StockWouldCorruptError) as raised:
        plugin_init(mk.make_runner(), mk.kv_cache_config)
    message = str(raised.value)
    for text in ("KV cache tensor 0 (268288 bytes, 4 blocks)", "model.layers.3.self_attn.attn",
                 "block of 256 tokens (K page 32768 bytes)", "largest state of 16384 bytes", "take 530432 bytes where "
                 "the config planned 268288", "vllm-ascend #13853", "leave --block-size unset or set it to 128"):
        assert text in message, message
    assert kv_log.at(logging.WARNING) == []


@needs_shared_hybrid
def test_a_user_block_size_twice_the_aligned_one_through_the_release_sizing(monkeypatch):
    """Qwen3-Next TP8 with --block-size 512 through the release's own sizing (aligned: 256):
    vllm-ascend keeps 512; stock corrupts; the plugin refuses by name, advising 256."""
    mk = rf.qwen3_next(tp=8, num_blocks=2, block_size=512)
    assert mk.notes["attn_block_size"] == 512
    config = mk.kv_cache_config
    assert block_conflicts(stock_init(mk.make_runner(), config), config)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    with pytest.raises(StockWouldCorruptError, match="set it to 256 "):
        plugin_init(mk.make_runner(), config)


@pytest.mark.skipif(SHARED_HYBRID or R >= (0, 30), reason="0.11 / 0.13 only: stock gives the attention layers K/V of their own")
def test_beyond_the_config_falls_back_to_stock_in_auto_and_raises_in_on(monkeypatch, kv_log):
    """0.13 sizing with a user block size (384 on Qwen3-Next TP4): attention K/V of their own
    would be 2x the config. ``on`` raises BeyondConfigError before allocating; ``auto`` builds
    stock's layout (stock allocates them; without the plugin the user gets the same) with one
    warning naming the tensor."""
    mk = rf.qwen3_next(tp=4, num_blocks=2, block_size=384, plugin_sizing=True)
    config = mk.kv_cache_config
    budget = sum(t.size for t in config.kv_cache_tensors)
    with pytest.raises(BeyondConfigError, match=f"would take {2 * 786_432} bytes where the config planned 786432"):
        plugin_init(mk.make_runner(), config)
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    ours = plugin_init(mk.make_runner(), config)
    stock = stock_init(mk.make_runner(), config)
    assert layout_signature(ours) == layout_signature(stock) and sum(storages(ours).values()) > budget
    [warning] = kv_log.at(logging.WARNING)
    assert "falling back to stock" in warning and "KV cache tensor 0 (786432 bytes, 2 blocks)" in warning


def test_the_release_fact():
    assert facts.stock_shares_hybrid_tensors("0.13.0") is False
    assert facts.stock_shares_hybrid_tensors("0.18.0") is True
    assert facts.stock_shares_hybrid_tensors("0.23.0.post1") is True


def test_check_within_config_counts_every_buffer():
    """The invariant on real plans: a layout at exactly the config's bytes passes (and returns
    them); one byte over is refused, naming both sums and the layers of the largest layout."""
    mk = rf.qwen3_8b(tp=8, num_blocks=2)
    config = mk.kv_cache_config
    plan = plan_kv_cache(config, ModelDims())
    budget = sum(t.size for t in config.kv_cache_tensors)
    layouts = [TensorLayout(tid, tuple(plan.layers_of(tid)), (t.size,), True) for tid, t in enumerate(config.kv_cache_tensors)]
    assert check_within_config(layouts, config) == budget
    over = [*layouts[:-1], TensorLayout(layouts[-1].tensor_id, layouts[-1].layers, (layouts[-1].buffer_bytes[0], 1), False)]
    with pytest.raises(BeyondConfigError, match=rf"would allocate {budget + 1} bytes in {len(layouts) + 1} raw buffers, "
                                                rf"more than the {budget} bytes of the config's {len(layouts)} KV cache tensors"):
        check_within_config(over, config)


@needs_shared_hybrid
def test_aligned_block_size_of_the_toy_and_of_an_aligned_config():
    plan = plan_kv_cache(toy().kv_cache_config, ModelDims())
    assert aligned_block_size(tuple(plan.layers_of(0))) == 128
    aligned = rf.qwen3_next(tp=8, num_blocks=2).kv_cache_config
    plan = plan_kv_cache(copy.deepcopy(aligned), ModelDims())
    assert aligned_block_size(tuple(plan.layers_of(0))) == 256
