"""vLLM 0.34's resizable KV cache, reserve -> extend -> rebind, on CPU tensors.

vLLM's own ``ExtensibleKVCache`` (``vllm/v1/worker/extensible_kv_cache.py``) reserves the
config's blocks; its device memory (``ExtensibleTensor``, CUDA virtual memory) is replaced by
:class:`CpuSegments`, which commits each segment's prefix as a CPU tensor of exactly the
committed bytes. V2's ``init_kv_cache`` runs with that reservation's ``allocate`` through the
plugin's adapter (the reserved views), then vLLM's ``extend_kv_cache`` commits fewer blocks
and binds new views, through the plugin's wrapper (the committed views). The plugin's report
must describe what vLLM finally bound, and say which."""

from __future__ import annotations

import copy
import json
from itertools import accumulate
from types import SimpleNamespace

import pytest
import torch

ext = pytest.importorskip("vllm.v1.worker.extensible_kv_cache",
                          reason="the resizable KV cache (extend_kv_cache) is new in vLLM 0.34")

import vllm.v1.worker.gpu.model_runner as v2_model_runner  # noqa: E402
from test_upstream_adapter import dense, make_config, make_runner  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

from vllm_kv_strategies import patching  # noqa: E402
from vllm_kv_strategies.platforms.upstream.extend import UpstreamExtendAdapter  # noqa: E402
from vllm_kv_strategies.platforms.upstream.v2 import UpstreamV2Adapter  # noqa: E402
from vllm_kv_strategies.errors import KVCacheLayoutError  # noqa: E402

RESERVED, COMMITTED = 64, 24  # blocks
PAGE = 2 * 16 * 2 * 64 * 2  # FullAttentionSpec(block_size=16, 2 KV heads, head 64, bf16): K and V


class CpuSegments:
    """Stands in for vLLM's ``ExtensibleTensor``: a reservation of ``size`` bytes in segments,
    each committed as a prefix (a CPU tensor of exactly the committed bytes)."""

    granularity = 1

    def __init__(self, size, device=None, segment_capacities=(), export_handle_types=0):
        self.size, self.capacities = size, list(segment_capacities)
        self.starts = [0, *accumulate(self.capacities)][:-1]
        self.segments = [torch.zeros(0, dtype=torch.int8) for _ in self.capacities]
        self.reservation = torch.zeros(size, dtype=torch.int8)

    def full_view(self):
        return self.reservation

    def segment_view(self, index):
        return self.segments[index]

    def resize_segments_(self, sizes, zero_new=True):
        for i, n in enumerate(sizes):
            if n > self.segments[i].numel():
                self.segments[i] = torch.zeros(n, dtype=torch.int8)

    def release_physical(self):
        self.segments = [torch.zeros(0, dtype=torch.int8) for _ in self.capacities]

    def segments_backed_by_one_chunk(self, sizes):
        return [True] * len(sizes)

    @property
    def physical_bytes(self):
        return sum(s.numel() for s in self.segments)


@pytest.fixture
def resizable(monkeypatch, tmp_path):
    monkeypatch.setattr(ext, "ExtensibleTensor", CpuSegments)
    monkeypatch.setattr(ext, "ensure_kv_transfer_initialized", lambda *a, **k: None)
    monkeypatch.setattr(ext, "has_kv_transfer_group", lambda: False)
    monkeypatch.setattr(ext, "get_kv_connector", lambda vllm_config, kv_caches: "no connector")
    monkeypatch.setenv("KV_STRATEGIES", "on")
    monkeypatch.setenv("KV_STRATEGIES_REPORT", str(tmp_path))
    specs = dense(n=3)
    vllm_config, config = make_config(specs, "LBHNC", RESERVED * 3 * PAGE)
    assert config.num_blocks == RESERVED
    runner = make_runner(vllm_config, list(specs))
    layout = KVCacheLayout[vllm_config.cache_config.get_resolved_kv_cache_layout().name] \
        if not isinstance(vllm_config.cache_config.get_resolved_kv_cache_layout(), KVCacheLayout) \
        else vllm_config.cache_config.get_resolved_kv_cache_layout()
    runner.extensible_kv_cache = ext.ExtensibleKVCache(config, torch.device("cpu"), layout)
    runner.kv_cache_config = copy.deepcopy(config)
    runner.kernel_block_sizes, runner.attn_groups, runner.speculator = [16], [], None
    stock_init = patching.original(v2_model_runner, "init_kv_cache")
    kv = UpstreamV2Adapter().init_kv_cache(
        stock_init, runner.compilation_config.static_forward_context, runner.kv_cache_config, runner.device, [16],
        vllm_config, allocate=runner.extensible_kv_cache.allocate)
    runner.kv_caches_by_layer = kv
    return SimpleNamespace(runner=runner, config=config, specs=specs, reports=tmp_path)


def reports(directory):
    """The reserved and the committed report, as written (by their ``resizable.phase``)."""
    found = {}
    for path in directory.glob("kv_cache_report.*rank0.json"):
        data = json.loads(path.read_text())
        found.setdefault(data["resizable"]["phase"], data)
    return found["reserved"], found["committed"]


def test_reserve_then_extend_reports_the_views_vllm_finally_binds(kv_log, resizable):
    runner, config = resizable.runner, resizable.config
    reserved_view = runner.kv_caches_by_layer["model.layers.0.self_attn.attn"]
    assert reserved_view.shape[0] == RESERVED  # (blocks, K/V, ...) over the reservation
    stock_extend = ext.extend_kv_cache
    UpstreamExtendAdapter().extend_kv_cache(stock_extend, runner, config, COMMITTED)
    assert runner.kv_cache_config.num_blocks == COMMITTED
    bound = runner.compilation_config.static_forward_context["model.layers.0.self_attn.attn"].kv_cache
    assert bound.shape[0] == COMMITTED and bound.untyped_storage().nbytes() == COMMITTED * PAGE
    reserved, committed = reports(resizable.reports)
    assert reserved["resizable"] == {"phase": "reserved", "reserved_bytes": RESERVED * 3 * PAGE,
                                     "reserved_num_blocks": RESERVED, "committed_num_blocks": None}
    assert reserved["kv_cache"]["num_blocks"] == RESERVED and reserved["built_by"] == "vllm_checked"
    assert committed["resizable"] == {"phase": "committed", "reserved_bytes": RESERVED * 3 * PAGE,
                                      "reserved_num_blocks": RESERVED, "committed_num_blocks": COMMITTED}
    assert committed["kv_cache"]["num_blocks"] == COMMITTED and committed["built_by"] == "vllm_checked"
    assert committed["totals"]["bytes_allocated"] == 3 * COMMITTED * PAGE  # one committed storage per layer
    assert [b["bytes"] for b in committed["buffers"]] == [COMMITTED * PAGE] * 3
    view = committed["layers"]["model.layers.0.self_attn.attn"]["views"][0]
    assert view["shape"][0] == COMMITTED
    infos = [m for m in kv_log.at(20) if "resizable KV cache" in m]
    assert infos == [
        f"kv_strategies: rank 0: resizable KV cache, reserved views: {RESERVED * 3 * PAGE} bytes reserved for {RESERVED} "
        "blocks; None blocks committed",
        f"kv_strategies: rank 0: resizable KV cache, committed views: {RESERVED * 3 * PAGE} bytes reserved for {RESERVED} "
        f"blocks; {COMMITTED} blocks committed",
    ]


def test_committed_views_that_overrun_their_storage_are_refused_when_on(resizable, monkeypatch):
    """The check is of the committed tensors: a commit that describes fewer bytes than the views
    vLLM bound (a changed extend_kv_cache) raises in on, naming the layer and the sizes."""
    runner, config = resizable.runner, resizable.config
    cache = runner.extensible_kv_cache
    real = cache.committed_kv_cache_tensors

    def one_byte_short(kv_cache_config, layout, num_blocks):  # each layer's committed tensor, a byte short of its views
        return [dict_replace(t, size=num_blocks * PAGE - 1) for t in real(kv_cache_config, layout, num_blocks)]

    monkeypatch.setattr(cache, "committed_kv_cache_tensors", one_byte_short)
    with pytest.raises(KVCacheLayoutError, match=rf"needs {COMMITTED * PAGE} bytes for {COMMITTED} blocks but has "
                                                 rf"{COMMITTED * PAGE - 1}"):
        UpstreamExtendAdapter().extend_kv_cache(ext.extend_kv_cache, runner, config, COMMITTED)


def dict_replace(tensor, **changes):
    import dataclasses

    return dataclasses.replace(tensor, **changes)
