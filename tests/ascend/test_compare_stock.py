"""Stock vllm-ascend KV cache initialisation against the plugin, layer by layer, on the installed
release (0.11.0, 0.13.0, 0.18.0 or 0.23.0) with that release's own spec and config classes.

Each case builds a real ``KVCacheConfig`` (vLLM's planner, the release's spec classes and sizing
rules, real model dimensions) and two real ``NPUModelRunner`` instances; the stock initialisation
the release's ``initialize_kv_cache`` would call runs on one (0.11 has three: general, DeepSeek
MLA, DeepSeek sparse), the Ascend adapter's on the other. Per layer: the same number of caches,
shapes, dtypes, strides, and num_blocks (dim 0); the layers of one ``KVCacheTensor`` alias one
storage set (attention and Mamba layers of a hybrid tensor: one buffer where the pages line up
block by block -- 0.18+ sizing, or K page == ssm state with the Mamba page = 2 K pages, which
the plugin's sizing gives on 0.11 / 0.13 (``-sized`` cases) and T-HYB's already is; else the
attention layers share K/V and the Mamba layers share one buffer); no two tensors overlap; with
``kv_transfer_config`` each raw buffer starts on a 2 MiB boundary and costs exactly 2 MiB of
slack. Where the Mamba states lie inside the K/V blocks (0.11 / 0.13, see test_hybrid_sizing)
their dim-0 stride is one K page instead of stock's.

Bytes: the plugin allocates exactly the config's bytes (``sum(size)``) and stock the same, except
the cases in :data:`PLUGIN_BYTES` / :data:`STOCK_BYTES`, where the exact numbers are asserted:

* 0.11 hybrid tensors: stock gives each GDN layer its own buffer of the tensor's size and the
  attention layer K/V of another (4x the tensor); 0.13 stock gives the attention layer K/V of
  its own (2x). The plugin allocates the tensor once where the states fit the K/V blocks
  (T-HYB, the ``-sized`` Qwen3-Next cases); at Qwen3-Next's stock 0.11 / 0.13 sizing (block 640
  at TP1, 384 at TP4: a K page is not the ssm state) sharing all of it would alias attention
  block j with Mamba block k != j, and K/V of their own would exceed the config, so ``on``
  raises ``BeyondConfigError`` before allocating and ``auto`` gives stock's build
  (:data:`BEYOND_CONFIG`).
* DeepSeek V3.2 on 0.11 / 0.13 (a FullAttentionSpec page of 2 x 576 per token): the layer uses
  nope 512 + rope 64 + indexer 128 = 704 of the 1152 reserved; 0.13 stock allocates the unused
  448 anyway (the indexer buffer is half the tensor), 0.11 stock and the plugin do not.
* 0.11 MLA / sparse with transfer: stock pads each buffer by 2 Mi *elements* (4 MiB in bf16).

0.30 (vLLM's strided ``KVCacheTensor``: ``layers``, no ``shared_by``): stock gives every layer
private buffers, so where the plugin builds (:data:`STORAGES_030`) the check is that every layer
owns its storages (no two layers share one), each of exactly the bytes stock allocates (+ 2 MiB
with transfer, every raw buffer 2 MiB aligned), and the layout signature is stock's. Where it
refuses by name (:data:`REFUSED_030`), ``on`` raises ``UnsupportedSpecError`` naming the feature
before anything is allocated or bound, and ``auto`` gives stock's build (exact bytes) with one
warning. What stock's own build corrupts (:data:`CORRUPT_030`: a hybrid with padded attention
pages, whose blocks of different indices alias) raises ``StockWouldCorruptError`` in every mode.
Hybrids whose pages line up (:data:`SHARED_030`) are built as stock: one backing of stock's bytes;
DeepSeek V3.2's MLA and SFA indexer layers (:data:`SPARSE_030`) as stock's private buffers.
"""

from __future__ import annotations

import copy
import logging

import pytest
import runner_factory as rf
from kv_compare import bound_cache, describe, layers_sharing_storage, layout_signature, storage_bytes_by_layer, storages
from kv_compare import plugin_init as ours_init
from kv_compare import stock_init
import kv_compare as kc

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import TRANSFER_ALIGNMENT, AscendAdapter
from vllm_kv_strategies.report import build_report

MODELS = {
    "qwen3-8b-tp1": lambda: rf.qwen3_8b(tp=1),
    "qwen3-8b-tp4": lambda: rf.qwen3_8b(tp=4),
    "deepseek-v3-tp1": lambda: rf.deepseek_v3(tp=1),
    "deepseek-v3-tp4": lambda: rf.deepseek_v3(tp=4),
    "deepseek-v3.2-tp1": lambda: rf.deepseek_v32(tp=1),
    "deepseek-v3.2-tp4": lambda: rf.deepseek_v32(tp=4),
    "qwen3-next-tp1": lambda: rf.qwen3_next(tp=1),
    "qwen3-next-tp4": lambda: rf.qwen3_next(tp=4),
    "t-hyb": lambda: rf.t_hyb_toy(),
}
R = rf.RELEASE
if R in ((0, 11), (0, 13)):  # with the plugin's hybrid sizing (elsewhere the same as above)
    MODELS["qwen3-next-tp4-sized"] = lambda: rf.qwen3_next(tp=4, plugin_sizing=True)

# N = 4 blocks everywhere. Qwen3-Next 0.11 / 0.13: 12 tensors of 4 x 1,310,720 (TP1, block 640)
# or 4 x 393,216 (TP4, block 384) bytes; sized by the plugin (TP4, block 512) 4 x 524,288.
# T-HYB 0.11 / 0.13: 2 tensors of 4 x 32,768.
#: (release, model) -> plugin bytes without kv_transfer_config, where not sum(size).
PLUGIN_BYTES = {
    **{
        (r, m): b
        for r in ((0, 11), (0, 13))
        for m, b in (
            ("deepseek-v3.2-tp1", 43_974_656),  # 61 x 4 x 128 x (512 + 64 + 128) x 2
            ("deepseek-v3.2-tp4", 43_974_656),
        )
    },
}
#: (release, model): refused by name (K/V of their own would exceed the config; stock allocates
#: them: 0.13 2x, 0.11 4x the config), stock's build in auto.
BEYOND_CONFIG = {(r, m) for r in ((0, 11), (0, 13)) for m in ("qwen3-next-tp1", "qwen3-next-tp4")}
#: (release, model, kv_transfer) -> stock bytes, where not the plugin's.
STOCK_BYTES = {
    ((0, 11), "qwen3-next-tp1", False): 251_658_240,  # 12 x (3 x 5,242,880 + 2 x 2,621,440)
    ((0, 11), "qwen3-next-tp1", True): 377_487_360,  # + 60 buffers x 2 MiB
    ((0, 11), "qwen3-next-tp4", False): 75_497_472,
    ((0, 11), "qwen3-next-tp4", True): 201_326_592,
    ((0, 11), "t-hyb", False): 1_048_576,
    ((0, 11), "t-hyb", True): 22_020_096,
    ((0, 13), "t-hyb", False): 524_288,  # 2 x (Mamba 131,072 + K 65,536 + V 65,536)
    ((0, 13), "t-hyb", True): 13_107_200,  # + 6 buffers x 2 MiB
    ((0, 11), "qwen3-next-tp4-sized", False): 100_663_296,  # 4x the 25,165,824 budget
    ((0, 11), "qwen3-next-tp4-sized", True): 226_492_416,
    ((0, 13), "qwen3-next-tp4-sized", False): 50_331_648,  # 2x
    ((0, 13), "qwen3-next-tp4-sized", True): 125_829_120,
    ((0, 11), "deepseek-v3-tp1", True): 547_684_352,  # 122 buffers x (bytes + 4 MiB)
    ((0, 11), "deepseek-v3-tp4", True): 547_684_352,
    ((0, 11), "deepseek-v3.2-tp1", True): 811_532_288,  # 183 buffers x (bytes + 4 MiB)
    ((0, 11), "deepseek-v3.2-tp4", True): 811_532_288,
    ((0, 13), "deepseek-v3.2-tp1", False): 71_958_528,  # nope + rope + a half-tensor indexer buffer
    ((0, 13), "deepseek-v3.2-tp1", True): 455_737_344,
    ((0, 13), "deepseek-v3.2-tp4", False): 71_958_528,
    ((0, 13), "deepseek-v3.2-tp4", True): 455_737_344,
}


# 0.30 (vLLM's strided KVCacheTensor): stock gives every layer private buffers of num_blocks x
# its page, except hybrids (every layer in one shared backing). N = 4 blocks.
#: model -> (bytes of each storage of one layer (all layers alike), layers), where the plugin builds:
#: Qwen3-8B 36 layers, K|V interleaved per kernel block in one buffer of 4 x 2 x 128 x heads x 128 x 2;
#: DeepSeek-V3 61 layers, nope 4 x 128 x 512 x 2 and rope 4 x 128 x 64 x 2.
STORAGES_030 = {
    "qwen3-8b-tp1": ([2_097_152], 36),  # 8 KV heads
    "qwen3-8b-tp4": ([524_288], 36),  # 2 KV heads
    "deepseek-v3-tp1": ([524_288, 65_536], 61),
    "deepseek-v3-tp4": ([524_288, 65_536], 61),
}
#: model -> (what the plugin names when it refuses, stock bytes without transfer, stock storages).
REFUSED_030: dict = {}
#: model -> stock's bytes (no transfer), where stock's own build aliases blocks of different indices
#: and the plugin refuses in every mode (StockWouldCorruptError): T-HYB, 2 slots x 4 blocks x 34,304
#: for its 8 layers, its attention page padded to the Mamba page (stock's trim path lays
#: [pad | K all | V all] in each region, over states that lie page by page).
CORRUPT_030 = {"t-hyb": 274_432}
#: model -> stock's one backing in bytes (no transfer), where the plugin builds the hybrid's shared
#: backing as stock does: 12 slots x 4 blocks x page (1,310,720 at TP1, 393,216 at TP4) for all
#: 48 layers, attention and Mamba layer j of a slot in one region.
SHARED_030 = {"qwen3-next-tp1": 62_914_560, "qwen3-next-tp4": 18_874_368}
#: model -> (stock's bytes without transfer, raw buffers): DeepSeek V3.2, every layer private as stock:
#: 61 MLA layers (nope 524,288 + rope 65,536) and 61 indexer layers (key 4 x 128 x 128 x 2 = 131,072).
SPARSE_030 = {"deepseek-v3.2-tp1": (43_974_656, 183), "deepseek-v3.2-tp4": (43_974_656, 183)}


def _sparse_030(name, model, kv_transfer, bytes_table):
    """0.30, DeepSeek V3.2 (MLA layers and SFA indexer layers): stock's views and storages."""
    config = model.kv_cache_config
    stock_runner, ours_runner = model.make_runner(kv_transfer=kv_transfer), model.make_runner(kv_transfer=kv_transfer)
    stock = stock_init(stock_runner, copy.deepcopy(config))
    ours = ours_init(ours_runner, copy.deepcopy(config))
    plain, buffers = SPARSE_030[name]
    for kv in (stock, ours):
        assert len(storages(kv)) == buffers and layers_sharing_storage(kv) == []
        assert sum(storages(kv).values()) == plain + (TRANSFER_ALIGNMENT * buffers if kv_transfer else 0)
    assert layout_signature(ours) == layout_signature(stock)
    bytes_table.append((name, kv_transfer, plain, plain, plain))


def _shared_030(name, model, kv_transfer, bytes_table):
    """0.30, a hybrid: one backing of exactly stock's bytes, the layout signature stock's."""
    config = model.kv_cache_config
    stock_runner, ours_runner = model.make_runner(kv_transfer=kv_transfer), model.make_runner(kv_transfer=kv_transfer)
    stock = stock_init(stock_runner, copy.deepcopy(config))
    ours = ours_init(ours_runner, copy.deepcopy(config))
    plain = SHARED_030[name]
    assert list(storages(stock).values()) == list(storages(ours).values()) == [plain + (TRANSFER_ALIGNMENT if kv_transfer else 0)]
    assert layout_signature(ours) == layout_signature(stock)
    assert len(ours_runner.kv_caches) == len(stock_runner.kv_caches)
    bytes_table.append((name, kv_transfer, plain, plain, plain))


def _beyond_config(model, stock, kv_transfer, monkeypatch, kv_log, bytes_table, name):
    """0.11 / 0.13 at stock hybrid sizing: ``on`` raises BeyondConfigError before allocating;
    ``auto`` gives stock's build, with one warning naming the tensor."""
    from vllm_kv_strategies.errors import BeyondConfigError

    config = model.kv_cache_config
    size = config.kv_cache_tensors[0].size
    with pytest.raises(BeyondConfigError, match=f"KV cache tensor 0 \\({size} bytes.* would take {2 * size} bytes"):
        ours_init(model.make_runner(kv_transfer=kv_transfer), copy.deepcopy(config))
    monkeypatch.setenv("KV_STRATEGIES", "auto")
    ours = ours_init(model.make_runner(kv_transfer=kv_transfer), copy.deepcopy(config))
    assert layout_signature(ours) == layout_signature(stock)
    [warning] = kv_log.at(logging.WARNING)
    assert "falling back to stock" in warning and "would take" in warning
    required = sum(t.size for t in config.kv_cache_tensors)
    bytes_table.append((name, kv_transfer, sum(storages(stock).values()), sum(storages(ours).values()), required))


def _corrupt_030(name, model, kv_transfer, monkeypatch, kv_log, bytes_table):
    """0.30, a config stock's own build corrupts: StockWouldCorruptError in on and auto, naming the
    layers and the bytes, nothing allocated or bound, no warning."""
    from vllm_kv_strategies.errors import StockWouldCorruptError

    config = model.kv_cache_config
    stock = stock_init(model.make_runner(kv_transfer=kv_transfer), copy.deepcopy(config))
    assert kc.block_conflicts(stock, config), "stock's build of this config no longer aliases blocks"
    stock_bytes = sum(storages(stock).values())
    assert stock_bytes == CORRUPT_030[name] + (TRANSFER_ALIGNMENT if kv_transfer else 0)
    for mode in ("on", "auto"):
        monkeypatch.setenv("KV_STRATEGIES", mode)
        runner = model.make_runner(kv_transfer=kv_transfer)
        error = kc.refused_before_allocating(runner, config, StockWouldCorruptError, monkeypatch)
        assert "block j of one aliases block k != j of the other" in str(error) and "over bytes [" in str(error)
        assert runner.kv_caches == [] and kv_log.at(logging.WARNING) == []
    bytes_table.append((name, kv_transfer, stock_bytes, 0, CORRUPT_030[name]))


def _refused_030(name, model, kv_transfer, monkeypatch, kv_log, bytes_table):
    """0.30, a config the plugin does not build: in ``on`` UnsupportedSpecError naming the
    feature before anything is allocated or bound; in ``auto`` stock's build, one warning."""
    from vllm_kv_strategies.platforms.ascend import allocate as ascend_alloc
    from vllm_kv_strategies.errors import UnsupportedSpecError

    features, plain, buffers = REFUSED_030[name]
    config = model.kv_cache_config
    stock_runner = model.make_runner(kv_transfer=kv_transfer)
    stock = stock_init(stock_runner, copy.deepcopy(config))
    stock_bytes = sum(storages(stock).values())
    assert len(storages(stock)) == buffers
    assert stock_bytes == plain + (TRANSFER_ALIGNMENT * buffers if kv_transfer else 0)

    allocated = []
    real_allocate = ascend_alloc.allocate_bytes
    monkeypatch.setattr(ascend_alloc, "allocate_bytes", lambda *a, **k: allocated.append(a) or real_allocate(*a, **k))
    on_runner = model.make_runner(kv_transfer=kv_transfer)
    with pytest.raises(UnsupportedSpecError) as raised:
        ours_init(on_runner, copy.deepcopy(config))
    for feature in features:
        assert feature in str(raised.value), (feature, str(raised.value))
    assert allocated == [] and on_runner.kv_caches == []
    assert all(m.kv_cache == [] for m in on_runner.compilation_config.static_forward_context.values())

    monkeypatch.setenv("KV_STRATEGIES", "auto")
    before = len(kv_log.records)
    auto_runner = model.make_runner(kv_transfer=kv_transfer)
    ours = ours_init(auto_runner, copy.deepcopy(config))
    warnings = [r.getMessage() for r in kv_log.records[before:] if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "falling back to stock KV cache for all layers" in warnings[0], warnings
    assert all(feature in warnings[0] for feature in features), warnings[0]
    assert allocated == []
    assert layout_signature(ours) == layout_signature(stock)
    assert len(auto_runner.kv_caches) == len(stock_runner.kv_caches)
    bytes_table.append((name, kv_transfer, stock_bytes, sum(storages(ours).values()), plain))


def _built_030(name, model, kv_transfer, bytes_table):
    """0.30, a config the plugin builds: stock's views, every layer owning its storages (no two
    layers share one), each storage of exactly stock's bytes."""
    per_layer, num_layers = STORAGES_030[name]
    config = model.kv_cache_config
    stock_runner, ours_runner = model.make_runner(kv_transfer=kv_transfer), model.make_runner(kv_transfer=kv_transfer)
    stock = stock_init(stock_runner, copy.deepcopy(config))
    if (R, name) in BEYOND_CONFIG:
        return _beyond_config(model, stock, kv_transfer, monkeypatch, kv_log, bytes_table, name)
    ours = ours_init(ours_runner, copy.deepcopy(config))

    assert ours.keys() == stock.keys() and len(ours) == num_layers
    for layer in stock:
        assert [describe(t) for t in ours[layer]] == [describe(t) for t in stock[layer]], layer
        assert all(t.shape[0] >= config.num_blocks for t in ours[layer])
    assert layers_sharing_storage(stock) == [] and layers_sharing_storage(ours) == []
    slack = TRANSFER_ALIGNMENT if kv_transfer else 0
    expected = {layer: [n + slack for n in per_layer] for layer in stock}
    assert storage_bytes_by_layer(stock) == expected
    assert storage_bytes_by_layer(ours) == expected
    assert layout_signature(ours) == layout_signature(stock)

    plain = num_layers * sum(per_layer)
    buffers = num_layers * len(per_layer)
    ours_bytes, stock_bytes = sum(storages(ours).values()), sum(storages(stock).values())
    assert ours_bytes == stock_bytes == plain + slack * buffers
    if kv_transfer:
        stock_allocate = patching.original(rf.NPUModelRunner, "_allocate_kv_cache_tensors")
        raw = AscendAdapter().allocate_kv_cache_tensors(stock_allocate, ours_runner, copy.deepcopy(config))
        starts = [buf.data_ptr() for value in raw.values() for buf in (value if isinstance(value, tuple) else (value,))]
        assert len(starts) == buffers and all(start % TRANSFER_ALIGNMENT == 0 for start in starts)

    stock_modules = stock_runner.compilation_config.static_forward_context
    for layer, module in ours_runner.compilation_config.static_forward_context.items():
        if layer in ours:
            assert bound_cache(module.kv_cache, stock_modules[layer].kv_cache, stock[layer]) is ours[layer], layer
    assert len(ours_runner.kv_caches) == len(stock_runner.kv_caches) == num_layers

    plan = AscendAdapter().plan_runner(ours_runner, config).plan
    t_ours = build_report(plan, ours, strided=False)["totals"]
    t_stock = build_report(plan, stock, strided=False)["totals"]
    assert t_ours["bytes_required"] == plain
    assert t_ours["bytes_allocated"] == ours_bytes and t_stock["bytes_allocated"] == stock_bytes
    assert (t_ours["num_blocks"], t_ours["token_slots"]) == (t_stock["num_blocks"], t_stock["token_slots"])
    assert t_ours["duplicated_bytes"] == 0
    assert t_ours["alignment_padding"] == slack * t_ours["raw_buffers"]
    bytes_table.append((name, kv_transfer, stock_bytes, ours_bytes, plain))


@pytest.mark.parametrize("kv_transfer", [False, True], ids=["plain", "kv_transfer"])
@pytest.mark.parametrize("name", list(MODELS))
def test_plugin_equals_stock(name, kv_transfer, bytes_table, monkeypatch, kv_log):
    model = MODELS[name]()
    if R >= (0, 30):
        assert name in {**STORAGES_030, **REFUSED_030, **CORRUPT_030, **SHARED_030, **SPARSE_030}, f"{name}: no 0.30 expectation"
        if name in SPARSE_030:
            return _sparse_030(name, model, kv_transfer, bytes_table)
        if name in SHARED_030:
            return _shared_030(name, model, kv_transfer, bytes_table)
        if name in CORRUPT_030:
            return _corrupt_030(name, model, kv_transfer, monkeypatch, kv_log, bytes_table)
        if name in REFUSED_030:
            return _refused_030(name, model, kv_transfer, monkeypatch, kv_log, bytes_table)
        return _built_030(name, model, kv_transfer, bytes_table)
    config = model.kv_cache_config
    stock_runner, ours_runner = model.make_runner(kv_transfer=kv_transfer), model.make_runner(kv_transfer=kv_transfer)
    stock = stock_init(stock_runner, copy.deepcopy(config))
    if (R, name) in BEYOND_CONFIG:
        return _beyond_config(model, stock, kv_transfer, monkeypatch, kv_log, bytes_table, name)
    ours = ours_init(ours_runner, copy.deepcopy(config))

    assert ours.keys() == stock.keys()
    layouts = AscendAdapter().plan_runner(ours_runner, config).layouts
    kv_page = {lp.name: lo.kv_page for lo in layouts for lp in lo.layers}
    for layer in stock:
        want = [describe(t) for t in stock[layer]]
        if kv_page.get(layer) is not None and isinstance(ours[layer], list):  # states inside K/V blocks
            want = [(shape, dtype, (kv_page[layer] // dtype.itemsize, *stride[1:])) for shape, dtype, stride in want]
        assert [describe(t) for t in ours[layer]] == want, layer
        assert all(t.shape[0] >= config.num_blocks for t in ours[layer])

    # The layers of one KVCacheTensor alias one storage set per kind (attention: tuples, Mamba:
    # lists), one for both where the release shares hybrid tensors; tensors never overlap.
    owner: dict[int, int] = {}
    for tid, tensor in enumerate(config.kv_cache_tensors):
        by_kind: dict[type, set[frozenset[int]]] = {}
        for layer in tensor.shared_by:
            by_kind.setdefault(type(ours[layer]), set()).add(frozenset(t.untyped_storage().data_ptr() for t in ours[layer]))
        assert all(len(sets) == 1 for sets in by_kind.values()), f"tensor {tid}: {tensor.shared_by} do not share storage"
        ptrs = {p for sets in by_kind.values() for s in sets for p in s}
        if len(by_kind) == 2 and (R >= (0, 18) or kv_page[tensor.shared_by[0]] is not None):
            assert len(ptrs) == 1, f"hybrid tensor {tid} is not one buffer"
        for ptr in ptrs:
            assert owner.setdefault(ptr, tid) == tid, f"tensors {owner[ptr]} and {tid} share storage"

    required = sum(t.size for t in config.kv_cache_tensors)
    plain = PLUGIN_BYTES.get((R, name), required)
    ours_bytes, stock_bytes = sum(storages(ours).values()), sum(storages(stock).values())
    buffers = len(storages(ours))
    assert ours_bytes == plain + (TRANSFER_ALIGNMENT * buffers if kv_transfer else 0)
    assert stock_bytes == STOCK_BYTES.get((R, name, kv_transfer), ours_bytes)
    if kv_transfer:
        if R > (0, 11):
            stock_allocate = patching.original(rf.NPUModelRunner, "_allocate_kv_cache_tensors")
            raw = AscendAdapter().allocate_kv_cache_tensors(stock_allocate, ours_runner, copy.deepcopy(config))
            starts = [buf.data_ptr() for value in raw.values() for buf in (value if isinstance(value, tuple) else (value,))]
        else:  # no _allocate: a raw buffer starts where the first view into its storage does
            first: dict[int, int] = {}
            for t in (t for value in ours.values() for t in value):
                ptr = t.untyped_storage().data_ptr()
                first[ptr] = min(first.get(ptr, t.data_ptr()), t.data_ptr())
            starts = list(first.values())
        assert all(start % TRANSFER_ALIGNMENT == 0 for start in starts)

    # Bound to the model as stock binds it: vLLM 0.11 - 0.18 set ``module.kv_cache = [cache]``
    # (attention reads ``kv_cache[virtual_engine]``), 0.23 the cache itself.
    stock_modules = stock_runner.compilation_config.static_forward_context
    for layer, module in ours_runner.compilation_config.static_forward_context.items():
        if layer in ours:
            assert bound_cache(module.kv_cache, stock_modules[layer].kv_cache, stock[layer]) is ours[layer], layer
    assert len(ours_runner.kv_caches) == len(stock_runner.kv_caches)

    # The report measures both sides the same way, from the tensors.
    plan = AscendAdapter().plan_runner(ours_runner, config).plan
    t_ours = build_report(plan, ours, strided=False)["totals"]
    t_stock = build_report(plan, stock, strided=False)["totals"]
    assert t_ours["bytes_required"] == required
    assert t_ours["bytes_allocated"] == ours_bytes and t_stock["bytes_allocated"] == stock_bytes
    assert (t_ours["num_blocks"], t_ours["token_slots"]) == (t_stock["num_blocks"], t_stock["token_slots"])
    if (R, name) not in PLUGIN_BYTES:
        assert t_ours["duplicated_bytes"] == 0
        assert t_ours["alignment_padding"] == (TRANSFER_ALIGNMENT * t_ours["raw_buffers"] if kv_transfer else 0)
    bytes_table.append((name, kv_transfer, stock_bytes, ours_bytes, required))  # printed at the end of the run
