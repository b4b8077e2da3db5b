"""vllm-ascend 0.30 (cell ascend-0.30.0 only): KDA (Kimi delta attention) layers, whose
``MambaSpec`` (vLLM's gated delta net layers, ``mamba_type`` GDN_ATTN) holds two states from
``MambaStateShapeCalculator.kda_state_shape``: a conv state and a 4-D recurrent state, bound as a
2-list ``[conv, recurrent]``, which ``initialize_kda_state_copy`` reads.

* KDA beside full attention: one backing, each layer a region at ``offset + l * layer_stride``,
  KDA states page by page, attention K|V interleaved per kernel block; the ``mamba`` kind builds
  it byte for byte as stock (``core/strided.py`` regions, ``platforms/ascend/strided.py``).
* KDA alone: state after state per layer, as stock (which fails for layers not named
  ``linear_attn``).
* KDA beside MLA (Kimi-Linear, ``KimiLinearForCausalLM``): stock 0.30 puts the MLA layer's nope
  of all blocks, then their rope, over the bytes its KDA neighbours hold page by page, so blocks
  of different indices alias: the plugin refuses it by name in every mode
  (``StockWouldCorruptError``), before allocating.

Sizes from vLLM's own ``Platform._align_hybrid_block_size`` with Kimi-Linear's state
calculators (``KimiLinearForCausalLM.get_mamba_state_shape_from_config``), groups and tensors
from vllm-ascend's patched planner (runner_factory.mamba_hybrid)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
import kv_compare as kc
import runner_factory as rf

from vllm_kv_strategies.errors import StockWouldCorruptError

pytestmark = pytest.mark.skipif(rf.RELEASE != (0, 30), reason="vllm-ascend 0.30's hybrid layout (KDA states page by page)")

N = 4
FULL = (3, 7)  # Kimi-Linear's 3 KDA : 1 full attention, 8 layers


def kimi_linear(mla: bool, tp: int = 1) -> rf.ModelKV:
    """8 layers, KDA at 0-2 and 4-6 (``model.layers.{i}.self_attn``: 8 heads of 128, conv
    kernel 4, as Kimi-Linear's ``linear_attn_config`` gives them), attention at 3 and 7
    (``...self_attn.attn``): MLA of 512 + 64 (``mla``, Kimi-Linear) or 4 KV heads of 128."""
    from vllm.models.kimi_k3 import KimiLinearForCausalLM

    hf = SimpleNamespace(model_type="kimi_linear", num_key_value_heads=4, head_dim=128, num_hidden_layers=8,
                         linear_attn_config={"num_heads": 8, "head_dim": 128, "short_conv_kernel_size": 4})
    return rf.mamba_hybrid(
        "Kimi-Linear-like" if mla else "KDA + full attention", tp, N, hf=hf, architecture="KimiLinearForCausalLM",
        model_cls=KimiLinearForCausalLM, attn_layers=[f"model.layers.{i}.self_attn.attn" for i in FULL],
        mamba_layers=[f"model.layers.{i}.self_attn" for i in range(8) if i not in FULL], mamba_type=rf.gdn_mamba_type(),
        mla_dims=(512, 64) if mla else None,
    )


def test_kda_states_are_kimi_linears():
    mk = kimi_linear(mla=False)
    assert mk.notes["mamba_shapes"] == ((3, 3 * 8 * 128), (8, 128, 128))
    assert mk.notes["mamba_dtypes"] == (torch.bfloat16, torch.float32)


@pytest.mark.parametrize("transfer", [False, True], ids=["plain", "kv_transfer"])
def test_kda_beside_full_attention_equals_stock(transfer):
    """One backing of the config's size; KDA layer j and attention layer j of its group share a
    region; each KDA layer a 2-list ``[conv (N, 3, 3072) bf16, recurrent (N, 8, 128, 128) fp32]``,
    page-strided, the recurrent state after the conv state in each page."""
    mk = kimi_linear(mla=False)
    config = mk.kv_cache_config
    stock = kc.stock_init(mk.make_runner(kv_transfer=transfer), config)
    ours = kc.plugin_init(mk.make_runner(kv_transfer=transfer), config)
    assert kc.layout_signature(ours) == kc.layout_signature(stock)
    page = mk.notes["mamba_page_size_padded"]
    backing = {t.size for t in config.kv_cache_tensors}
    assert len(backing) == 1 and {kc.storages(ours)[p] for p in kc.storages(ours)} == {
        backing.pop() + (rf.ALIGNMENT if transfer else 0)}
    for i in (0, 4):
        conv, recurrent = kda = ours[f"model.layers.{i}.self_attn"]
        assert isinstance(kda, list)
        assert [(tuple(t.shape), t.dtype) for t in kda] == [((N, 3, 3072), torch.bfloat16), ((N, 8, 128, 128), torch.float32)]
        assert [t.stride(0) * t.element_size() for t in kda] == [page, page]
        assert recurrent.data_ptr() - conv.data_ptr() == 3 * 3072 * 2
    k, v = ours["model.layers.3.self_attn.attn"]
    assert k.data_ptr() == ours["model.layers.0.self_attn"][0].data_ptr()  # one region per group's layer j
    assert kc.block_conflicts(ours, config) == []


@pytest.mark.parametrize("suffix", ["linear_attn", "self_attn"])
def test_kda_alone_is_a_2_list_state_after_state(suffix):
    """KDA layers without attention (no released model): one buffer per layer, the conv state
    of all blocks, then the recurrent state of all blocks (dense per block, as the fused KDA
    state copy wants it). Stock 0.30 builds it only for layers named ``linear_attn``; for Kimi's
    ``self_attn`` names it fails (``Some layers are not correctly initialized``), the plugin
    builds the same layout."""
    specs = {f"model.layers.{i}.{suffix}": rf.kda_spec(block_size=512) for i in range(2)}
    config = rf.build_kv_cache_config(specs, N)
    ours = kc.plugin_init(rf.make_runner(config), config)
    if suffix == "linear_attn":
        assert kc.layout_signature(ours) == kc.layout_signature(kc.stock_init(rf.make_runner(config), config))
    else:
        with pytest.raises(AssertionError, match="Some layers are not correctly initialized"):
            kc.stock_init(rf.make_runner(config), config)
    for name in specs:
        conv, recurrent = kda = ours[name]
        assert isinstance(kda, list) and conv.is_contiguous() and recurrent.is_contiguous()
        assert [(tuple(t.shape), t.dtype) for t in kda] == [((N, 3, 3072), torch.bfloat16), ((N, 8, 128, 128), torch.float32)]
        assert recurrent.data_ptr() - conv.data_ptr() == N * 3 * 3072 * 2
        assert conv.untyped_storage().nbytes() == N * specs[name].page_size_bytes
    assert len(kc.storages(ours)) == 2


def kimi_case():
    mk = kimi_linear(mla=True)
    return mk.make_runner, mk.kv_cache_config


def test_stock_builds_kda_beside_mla_with_blocks_of_different_indices_aliased():
    """Stock 0.30 builds Kimi-Linear's cache: MLA layer 3's slice holds the nope of its 4 x 4
    kernel blocks, then their rope, over the bytes KDA layers 0-2 hold page by page."""
    make, config = kimi_case()
    kv = kc.stock_init(make(), config)
    nope, rope = kv["model.layers.3.self_attn.attn"]
    conv, recurrent = kv["model.layers.0.self_attn"]
    assert [(tuple(t.shape), t.dtype) for t in (nope, rope, conv, recurrent)] == [
        ((4 * N, 128, 1, 512), torch.bfloat16), ((4 * N, 128, 1, 64), torch.bfloat16),
        ((N, 3, 3072), torch.bfloat16), ((N, 8, 128, 128), torch.float32)]
    assert nope.data_ptr() == conv.data_ptr() and rope.data_ptr() - nope.data_ptr() == 4 * N * 128 * 512 * 2
    conflicts = kc.block_conflicts(kv, config)
    assert conflicts and "model.layers.3.self_attn.attn part 0 block 1" in conflicts[0]


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_kda_beside_mla_is_refused_by_name_in_every_mode(mode, monkeypatch, kv_log):
    make, config = kimi_case()
    monkeypatch.setenv("KV_STRATEGIES", mode)
    runner = make()
    error = kc.refused_before_allocating(runner, config, StockWouldCorruptError, monkeypatch)
    page = config.kv_cache_tensors[0].block_stride
    assert str(error) == (
        "the plugin refuses a hybrid KV cache whose attention layer 'model.layers.3.self_attn.attn' "
        "(AscendMLAAttentionSpec) stock 0.30 lays out as the nope of all its blocks, then their rope, over bytes "
        f"[0, {N * page}) of the backing that 'model.layers.0.self_attn' (MambaSpec) holds page by page: with {N} "
        "blocks, block j of one aliases block k != j of the other, so stock would corrupt the KV cache"
    )
    assert runner.kv_caches == [] and kv_log.at(logging.WARNING) == []
