"""Smoke test: the real vllm-ascend 0.23.0 NPUModelRunner runs its stock KV cache initialisation
on CPU for four real models, through runner_factory. Expected values are spelled out (see
STOCK_0.23.md for where they come from)."""

from __future__ import annotations

import pytest
import torch

import npu_stubs
import runner_factory as rf

MiB2 = rf.ALIGNMENT
N = 4  # num_blocks used by every builder here


def storages(kv_caches: dict) -> dict[int, int]:
    """data_ptr of each distinct underlying storage -> its size in bytes."""
    out = {}
    for value in kv_caches.values():
        for t in value:
            st = t.untyped_storage()
            out[st.data_ptr()] = st.nbytes()
    return out


def shapes(value) -> list[tuple[tuple[int, ...], torch.dtype]]:
    return [(tuple(t.shape), t.dtype) for t in value]


# name, builder, tp -> (allocations, bytes without transfer, per-layer (shape, dtype) list of
# the first attention layer)
CASES = {
    ("qwen3_8b", 1): (72, 75_497_472, [((4, 128, 8, 128), torch.bfloat16)] * 2),
    ("qwen3_8b", 4): (72, 18_874_368, [((4, 128, 2, 128), torch.bfloat16)] * 2),
    ("deepseek_v3", 1): (
        122,
        35_979_264,
        [((4, 128, 1, 512), torch.bfloat16), ((4, 128, 1, 64), torch.bfloat16)],
    ),
    ("deepseek_v3", 4): (
        122,
        35_979_264,
        [((4, 128, 1, 512), torch.bfloat16), ((4, 128, 1, 64), torch.bfloat16)],
    ),
    ("deepseek_v32", 1): (
        183,
        43_974_656,
        [
            ((4, 128, 1, 512), torch.bfloat16),
            ((4, 128, 1, 64), torch.bfloat16),
            ((4, 128, 1, 128), torch.bfloat16),
        ],
    ),
    ("qwen3_next", 1): (12, 103_022_592, [((32, 128, 2, 256), torch.bfloat16)] * 2),
    ("qwen3_next", 4): (12, 25_755_648, [((16, 128, 1, 256), torch.bfloat16)] * 2),
}


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(name, tp):
        if (name, tp) not in cache:
            cache[(name, tp)] = getattr(rf, name)(tp=tp, num_blocks=N)
        return cache[(name, tp)]

    return get


@pytest.mark.parametrize("name,tp", sorted(CASES))
def test_stock_initialize_kv_cache_tensors(models, name, tp):
    mk = models(name, tp)
    n_alloc, n_bytes, first_shapes = CASES[(name, tp)]
    cfg = mk.kv_cache_config
    assert cfg.num_blocks == N
    assert sum(t.size for t in cfg.kv_cache_tensors) == n_bytes

    runner = mk.make_runner()
    casts_before = npu_stubs.format_cast_mock().call_count
    kv = runner.initialize_kv_cache_tensors(cfg)
    assert npu_stubs.format_cast_mock().call_count == casts_before  # no npu_format_cast in 0.23

    layer_names = {n for g in cfg.kv_cache_groups for n in g.layer_names}
    assert set(kv) == layer_names
    assert isinstance(kv, dict)
    st = storages(kv)
    assert len(st) == n_alloc
    assert sum(st.values()) == n_bytes  # no slack without kv_transfer_config

    attn = next(n for n in kv if "self_attn" in n)
    assert isinstance(kv[attn], tuple)
    assert shapes(kv[attn]) == first_shapes
    for t in kv[attn]:
        assert t.is_contiguous()

    # bind_kv_cache (vllm-ascend's patched one): one runner entry per layer index, and the
    # forward-context layer holds the very same object
    assert len(runner.kv_caches) == len(layer_names)
    fwd = runner.compilation_config.static_forward_context
    assert all(fwd[n].kv_cache is kv[n] for n in kv)
    assert runner.hybrid_with_attn_and_mamba is (name == "qwen3_next")


@pytest.mark.parametrize("name,tp", [("qwen3_8b", 4), ("deepseek_v3", 1), ("deepseek_v32", 1)])
def test_stock_transfer_separate_aligned_buffers(models, name, tp):
    mk = models(name, tp)
    n_alloc, n_bytes, _ = CASES[(name, tp)]
    runner = mk.make_runner(kv_transfer=True)
    kv = runner.initialize_kv_cache_tensors(mk.kv_cache_config)
    st = storages(kv)
    assert len(st) == n_alloc
    # every K / V / indexer buffer is its own allocation of size + 2 MiB, view aligned to 2 MiB
    assert sum(st.values()) == n_bytes + n_alloc * MiB2
    for value in kv.values():
        for t in value:
            assert t.data_ptr() % MiB2 == 0


def test_stock_qwen3_next_hybrid_layout(models):
    mk = models("qwen3_next", 1)
    cfg = mk.kv_cache_config
    # what vLLM + vllm-ascend plan for Qwen3-Next at TP1
    assert mk.notes["attn_block_size"] == 1024
    assert mk.notes["mamba_page_size_padded"] == 2_146_304  # 2 * 1 MiB + 49_152
    assert mk.notes["mamba_shapes"] == ((3, 8192), (32, 128, 128))
    assert [len(g.layer_names) for g in cfg.kv_cache_groups] == [12, 12, 12, 12]
    assert cfg.kv_cache_tensors[0].shared_by == [
        "model.layers.3.self_attn.attn",
        "model.layers.0.linear_attn",
        "model.layers.1.linear_attn",
        "model.layers.2.linear_attn",
    ]
    assert all(t.size == 4 * 2_146_304 for t in cfg.kv_cache_tensors)

    runner = mk.make_runner()
    kv = runner.initialize_kv_cache_tensors(cfg)
    k, v = kv["model.layers.3.self_attn.attn"]
    conv, ssm = kv["model.layers.0.linear_attn"]
    assert isinstance(kv["model.layers.0.linear_attn"], list)
    assert shapes([conv, ssm]) == [((4, 3, 8192), torch.bfloat16), ((4, 32, 128, 128), torch.bfloat16)]
    base = conv.data_ptr()
    conv_region = 4 * 3 * 8192 * 2  # N * conv page = 196_608
    assert ssm.data_ptr() - base == conv_region
    assert k.data_ptr() - base == conv_region  # K aliases the ssm region
    assert v.data_ptr() - base == conv_region + 4 * (1 << 20)
    for other in ("model.layers.1.linear_attn", "model.layers.2.linear_attn"):
        assert kv[other][1].data_ptr() == ssm.data_ptr()


def test_stock_qwen3_next_transfer_aligns_only_the_base(models):
    mk = models("qwen3_next", 4)
    runner = mk.make_runner(kv_transfer=True)
    kv = runner.initialize_kv_cache_tensors(mk.kv_cache_config)
    st = storages(kv)
    assert len(st) == 12
    assert sum(st.values()) == 25_755_648 + 12 * MiB2
    conv, _ = kv["model.layers.0.linear_attn"]
    k, _ = kv["model.layers.3.self_attn.attn"]
    assert conv.data_ptr() % MiB2 == 0
    assert k.data_ptr() % MiB2 == 4 * 3 * 2048 * 2  # N * conv page at TP4 = 49_152


def test_stock_sparse_li_c8():
    mk = rf.deepseek_v32(li_c8=True, num_blocks=N)
    runner = mk.make_runner()
    kv = runner.initialize_kv_cache_tensors(mk.kv_cache_config)
    value = kv["model.layers.0.self_attn.attn"]
    assert shapes(value) == [
        ((4, 128, 1, 512), torch.bfloat16),
        ((4, 128, 1, 64), torch.bfloat16),
        ((4, 128, 1, 128), torch.int8),
        ((4, 128, 1, 1), torch.float16),
    ]
    # indexer key and its scale are two views of one int8 allocation
    assert value[2].untyped_storage().data_ptr() == value[3].untyped_storage().data_ptr()
    assert value[3].data_ptr() - value[2].data_ptr() == 4 * 128 * 128
    assert sum(storages(kv).values()) == 61 * 4 * 164_096


def test_traced_attribute_reads_match_factory(models):
    mk = models("qwen3_next", 4)
    runner = mk.make_runner(trace=True)
    runner.initialize_kv_cache_tensors(mk.kv_cache_config)
    assert runner._reads == set(rf.RUNNER_ATTRS) | {"hybrid_with_attn_and_mamba"}

