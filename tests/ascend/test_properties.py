"""Property-based tests of the Ascend adapter on random, valid vLLM 0.23 ``KVCacheConfig`` s.

Hypothesis builds ``KVCacheConfig`` objects by hand, the way vLLM 0.23 + vllm-ascend 0.23
would hand them to ``NPUModelRunner`` (``KVCacheTensor(size, shared_by)``,
``KVCacheGroupSpec``, the real spec classes):

* ``fa``: ``FullAttentionSpec`` / ``SlidingWindowSpec`` groups (K and V head sizes may
  differ through ``head_size_v``) of one K/V shape, sharing tensors across groups;
* ``mla``: ``AscendMLAAttentionSpec`` (nope + rope, dims from the layer module);
* ``sparse``: ``AscendMLAAttentionSpec`` with ``sparse_head_dim`` (nope, rope, indexer),
  the indexer width may be 0 (a layer that shares another's indexer);
* ``mamba``: ``MambaSpec`` with 1 or 2 states of mixed dtypes (bf16 / fp16 / fp32),
  optionally with ``page_size_padded``;
* ``hybrid``: attention + Mamba layers in one tensor, in vllm-ascend's form
  (``patch_mamba_config``): K page == ssm page, padded page = 2 * K page + conv page,
  ``page_size_padded`` on both specs;
* ``uniform``: one ``UniformTypeKVCacheSpecs`` group of full-attention layers with different
  specs, a tensor per layer (vLLM builds it only as the whole model);

with random block sizes, head counts and sizes, dtypes, ``num_blocks``, layers per group,
groups per family, tensor order, layer naming (plugin-only runs also use names without
``attn`` / ``linear_attn``), runner-only layers, cross-layer KV sharing and
``kv_transfer_config`` on or off. Each config runs through the adapter's
``initialize_kv_cache_tensors`` on a real ``NPUModelRunner`` (``runner_factory.make_runner``)
and must satisfy:

1. every layer of every group (minus runner-only ones, plus KV-sharing ones) gets caches, one
   per part of its spec with the part's dtype and per-block shape (kernel-split into 128-token
   blocks where the runner splits), dim 0 covering >= num_blocks blocks; nothing raises;
2. the layers of one tensor's ``shared_by`` alias one set of storages; distinct storages'
   byte ranges ``[data_ptr, data_ptr + nbytes)`` are disjoint; every view lies in its storage;
3. bytes allocated == sum of tensor sizes without kv_transfer; with it <= sum + 2 MiB per raw
   buffer and every raw buffer (``_allocate_kv_cache_tensors``) starts on a 2 MiB boundary;
4. byte patterns: filling every view of tensor t with f(t), tensor after tensor, reads back
   f(t) everywhere (no cross-talk between tensors); inside a tensor, writing block j of one
   layer's part changes block j of the same part of every aliasing layer and nothing else
   (in hybrid tensors K block j is also ssm block j: vllm-ascend's region layout);
5. the result does not depend on the order of ``kv_cache_tensors``;
6. where stock vllm-ascend builds the same config (attention-only and pure-Mamba configs
   always are tried, the others too), shapes, dtypes and strides equal stock's and the plugin
   allocates no more bytes. Where stock raises or builds empty (0, 128, ...) views (its known
   limits, STOCK_0.23.md section 7) the example is counted, not compared.

Also: ``crosses_blocks`` (the hybrid layout decision) against a brute force, and one
xfail(strict) regression test per plugin bug found (A1). Configs hitting a known bug are counted
as such by the random runs (``known_bug``) instead of failing them.

Reproducible: ``derandomize=True`` and no example database. The number of examples run per
test and what they covered is written to the terminal at the end of the module.

Run, in an Ascend cell's environment (built by ``tools/nox.sh -s ascend-0.23.0``):
``.nox/ascend-0-23-0/bin/python -m pytest tests/ascend/test_properties.py -q -p no:cacheprovider``
"""

from __future__ import annotations

import copy
import importlib.metadata
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from vllm_kv_strategies.versions import release

if release(importlib.metadata.version("vllm-ascend")) != "0.23.0":
    pytest.skip(
        "the properties are written for vllm-ascend 0.23.0 (AscendMLAAttentionSpec with sparse_head_dim, "
        "state-after-state Mamba views, K page == ssm page hybrids)",
        allow_module_level=True,
    )

import runner_factory as rf  # noqa: E402
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from vllm_ascend.core.kv_cache_interface import AscendMLAAttentionSpec

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.platforms.ascend.layout.buffers import crosses_blocks

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
DTYPES = (BF16, FP16, FP32)
TRANSFER_ALIGNMENT = 2 * 1024 * 1024  # vllm-ascend's KV transfer alignment (model_runner_v1.py:4099)
KERNEL_BLOCK = 128  # Ascend attention backends' kernel block (get_supported_kernel_block_sizes()[0])
PART_BUDGET = 8192  # max bytes of one part of one block: keeps every example small and fast
GDN = MambaAttentionBackendEnum.GDN_ATTN
MAX_EXAMPLES = 150

STATS: dict[str, Counter] = {}


# ---------------------------------------------------------------------------------------------
# the drawn configuration


@dataclass
class Family:
    """Groups whose layers share tensors: tensor i holds the i-th layer of each group."""

    kind: str  # fa | mla | sparse | mamba | hybrid
    groups: list[tuple[Any, int]]  # (spec, number of layers)


@dataclass
class Case:
    num_blocks: int
    families: list[Family]
    mla_dims: tuple[int, int]
    index_head_dim: int
    kv_transfer: bool
    standard_names: bool = True
    tensor_order_seed: int = 0
    planner_order: bool = False  # keep vLLM's tensor order (family by family) instead of shuffling
    runner_only: int = 0  # families (attention ones) that get one runner-only layer
    kv_sharing: int = 0  # number of cross-layer KV-sharing layers
    # filled by build():
    config: KVCacheConfig | None = None
    runner_only_layers: list[str] = field(default_factory=list)
    shared_layers: dict[str, str] = field(default_factory=dict)
    family_of_tensor: list[str] = field(default_factory=list)

    @property
    def kinds(self) -> set[str]:
        return {f.kind for f in self.families}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _divisors(n: int, limit: int = 64) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 128, 256)
#: stock vllm-ascend splits blocks into 128-token kernel blocks with several KV cache groups and
#: cannot view smaller ones (STOCK_0.23.md, trap 5): the stock comparison run draws more of these
STOCK_BLOCKS = (1, 16, 128, 256, 256)
#: with several KV cache groups the plugin refuses attention blocks that are not whole 128-token
#: kernel blocks (N5); three random configs in four draw their blocks from these
KERNEL_FIT_BLOCKS = (128, 256)
dtypes = st.sampled_from(DTYPES)
HEAD_DIMS = (1, 2, 3, 4, 8, 16, 32, 64, 128)


@st.composite
def fa_family(draw, blocks=BLOCKS) -> Family:
    bs, dtype, heads = draw(st.sampled_from(blocks)), draw(dtypes), draw(st.integers(1, 4))
    ok = [d for d in HEAD_DIMS if bs * heads * d * _itemsize(dtype) <= PART_BUDGET] or [1]
    hs = draw(st.sampled_from(ok))
    hsv = hs if draw(st.booleans()) else draw(st.sampled_from(ok))
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        kw = dict(block_size=bs, num_kv_heads=heads, head_size=hs, head_size_v=hsv, dtype=dtype)
        if draw(st.booleans()):
            spec = FullAttentionSpec(**kw)
        else:
            spec = SlidingWindowSpec(sliding_window=draw(st.sampled_from((8, 64, 1024))), **kw)
        groups.append((spec, draw(st.integers(1, 3))))
    return Family("fa", groups)


@st.composite
def mla_family(draw, mla_dims: tuple[int, int], index_head_dim: int, sparse: bool, blocks=BLOCKS) -> Family:
    dtype = draw(dtypes)
    idx = (index_head_dim if draw(st.booleans()) else 0) if sparse else 0
    width = sum(mla_dims) + idx
    ok = [b for b in blocks if b * width * _itemsize(dtype) <= 4 * PART_BUDGET] or [min(blocks)]
    bs = draw(st.sampled_from(ok))
    if sparse:
        spec = AscendMLAAttentionSpec(
            block_size=bs, num_kv_heads=1, head_size=width, dtype=dtype, cache_dtype_str="auto",
            sparse_head_dim=(*mla_dims, idx),
        )
    else:
        spec = AscendMLAAttentionSpec(block_size=bs, num_kv_heads=1, head_size=width, dtype=dtype, cache_dtype_str="auto")
    groups = [(spec, draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 3)))]
    return Family("sparse" if sparse else "mla", groups)


@st.composite
def mamba_family(draw, blocks=BLOCKS) -> Family:
    bs = draw(st.sampled_from(blocks))
    # conv-like first state: bytes a multiple of 4, so the next state is aligned for any dtype
    shapes = [(draw(st.integers(1, 4)), draw(st.sampled_from((2, 4, 6, 8, 16, 32, 64))))]
    state_dtypes = [draw(dtypes)]
    if draw(st.integers(1, 3)) > 1:  # two states two times in three
        shapes.append(tuple(draw(st.sampled_from((1, 2, 3, 4, 8, 16))) for _ in range(3)))
        state_dtypes.append(draw(dtypes))
    spec = MambaSpec(block_size=bs, shapes=tuple(shapes), dtypes=tuple(state_dtypes), mamba_type=GDN)
    if draw(st.booleans()):
        spec = MambaSpec(
            block_size=bs, shapes=spec.shapes, dtypes=spec.dtypes, mamba_type=GDN,
            page_size_padded=spec.page_size_bytes + 4 * draw(st.integers(1, 64)),
        )
    groups = [(spec, draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 3)))]
    return Family("mamba", groups)


@st.composite
def hybrid_family(draw, blocks=BLOCKS) -> Family:
    """vllm-ascend's hybrid page (patch_mamba_config): the attention K page A equals the ssm
    page, the conv page is C, both specs are padded to P = 2A + C."""
    bs, da, heads = draw(st.sampled_from(blocks)), draw(dtypes), draw(st.integers(1, 4))
    ok = [d for d in HEAD_DIMS if bs * heads * d * _itemsize(da) <= PART_BUDGET] or [1]
    hs = draw(st.sampled_from(ok))
    k_page = bs * heads * hs * _itemsize(da)
    ds = draw(st.sampled_from([d for d in DTYPES if k_page % _itemsize(d) == 0]))
    elems = k_page // _itemsize(ds)
    s1 = draw(st.sampled_from(_divisors(elems)))
    s2 = draw(st.sampled_from(_divisors(elems // s1)))
    ssm = (s1, s2, elems // s1 // s2)
    conv = (draw(st.integers(1, 4)), draw(st.sampled_from((2, 4, 8, 16, 64))))
    dc = draw(dtypes)
    conv_page = math.prod(conv) * _itemsize(dc)
    padded = 2 * k_page + conv_page
    groups = []
    for _ in range(draw(st.integers(1, 2))):
        kw = dict(block_size=bs, num_kv_heads=heads, head_size=hs, dtype=da, page_size_padded=padded)
        spec = FullAttentionSpec(**kw) if draw(st.booleans()) else SlidingWindowSpec(sliding_window=64, **kw)
        groups.append((spec, draw(st.integers(1, 3))))
    mamba = MambaSpec(
        block_size=draw(st.sampled_from(BLOCKS)), shapes=(conv, ssm), dtypes=(dc, ds), page_size_padded=padded, mamba_type=GDN
    )
    assert mamba.page_size_bytes == padded and sum(math.prod(s) * _itemsize(d) for s, d in zip(mamba.shapes, mamba.dtypes)) == conv_page + k_page
    groups += [(mamba, draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 3)))]
    return Family("hybrid", groups)


@st.composite
def uniform_family(draw, blocks=BLOCKS) -> Family:
    """vLLM's ``UniformTypeKVCacheSpecs``: one group of full-attention layers whose specs differ
    (heads, head sizes, dtype), each layer in a tensor of its own."""
    bs = draw(st.sampled_from(blocks))
    specs = []
    for _ in range(draw(st.integers(1, 4))):
        dtype, heads = draw(dtypes), draw(st.integers(1, 4))
        ok = [d for d in HEAD_DIMS if bs * heads * d * _itemsize(dtype) <= PART_BUDGET] or [1]
        specs.append(FullAttentionSpec(
            block_size=bs, num_kv_heads=heads, head_size=draw(st.sampled_from(ok)),
            head_size_v=draw(st.sampled_from(ok)), dtype=dtype,
        ))
    return Family("uniform", [(specs, len(specs))])


@st.composite
def cases(draw, kinds=("fa", "fa", "mla", "sparse", "mamba", "mamba", "hybrid", "uniform"), max_families=3, blocks=None,
          planner_order=False) -> Case:
    if blocks is None:
        blocks = KERNEL_FIT_BLOCKS if draw(st.integers(0, 3)) else BLOCKS
    mla_dims = (draw(st.sampled_from((4, 8, 16, 32, 64, 512))), draw(st.sampled_from((2, 4, 8, 16, 64))))
    index_head_dim = draw(st.sampled_from((1, 4, 8, 16, 32, 128)))
    families = []
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=max_families)):
        if kind == "uniform":  # vLLM builds such a group only when it is the whole model
            families = [draw(uniform_family(blocks))]
            break
        if kind == "fa":
            families.append(draw(fa_family(blocks)))
        elif kind in ("mla", "sparse"):
            families.append(draw(mla_family(mla_dims, index_head_dim, kind == "sparse", blocks)))
        elif kind == "mamba":
            families.append(draw(mamba_family(blocks)))
        else:
            families.append(draw(hybrid_family(blocks)))
    return Case(
        num_blocks=draw(st.integers(1, 5)),
        families=families,
        mla_dims=mla_dims,
        index_head_dim=index_head_dim,
        kv_transfer=draw(st.integers(0, 2)) == 0,  # 2 MiB buffers are slow to zero: a third
        standard_names=draw(st.integers(0, 4)) > 0,
        tensor_order_seed=draw(st.integers(0, 1000)),
        planner_order=planner_order,
        runner_only=draw(st.integers(0, 2)) if draw(st.booleans()) else 0,
        kv_sharing=draw(st.integers(0, 2)) if draw(st.booleans()) else 0,
    )


def _layer_name(index: int, attention: bool, standard: bool) -> str:
    if attention:
        return f"model.layers.{index}." + ("self_attn.attn" if standard else "attention.core")
    return f"model.layers.{index}." + ("linear_attn" if standard else "mixer")


def build(case: Case) -> Case:
    """Groups, layer names and tensors of ``case`` (vLLM's planner shape: tensor i of a family
    holds the i-th layer of each of its groups; size = page x num_blocks)."""
    import random

    rng = random.Random(case.tensor_order_seed)
    n_layers = sum(n for fam in case.families for _, n in fam.groups)
    indices = list(range(n_layers + len(case.families) + case.kv_sharing))
    rng.shuffle(indices)
    next_index = iter(indices).__next__
    groups, tensors, attn_layers = [], [], []
    runner_only, fam_of_tensor = [], []
    for fid, fam in enumerate(case.families):
        if fam.kind == "uniform":  # one group, a different spec per layer, a tensor per layer
            layer_spec_list = fam.groups[0][0]
            names = [_layer_name(next_index(), True, case.standard_names) for _ in layer_spec_list]
            attn_layers += names
            wrapper = UniformTypeKVCacheSpecs(
                block_size=layer_spec_list[0].block_size, kv_cache_specs=dict(zip(names, layer_spec_list))
            )
            groups.append(KVCacheGroupSpec(names, wrapper))
            for name, spec in zip(names, layer_spec_list):
                tensors.append(KVCacheTensor(size=spec.page_size_bytes * case.num_blocks, shared_by=[name]))
                fam_of_tensor.append(fam.kind)
            continue
        names_per_group = []
        for spec, n in fam.groups:
            attention = not isinstance(spec, MambaSpec)
            names = [_layer_name(next_index(), attention, case.standard_names) for _ in range(n)]
            if attention:
                attn_layers += names
            names_per_group.append(names)
            groups.append(KVCacheGroupSpec(names, spec))
        page = fam.groups[0][0].page_size_bytes
        for i in range(max(len(names) for names in names_per_group)):
            shared_by = [names[i] for names in names_per_group if i < len(names)]
            tensors.append(KVCacheTensor(size=page * case.num_blocks, shared_by=shared_by))
            fam_of_tensor.append(fam.kind)
        if fid < case.runner_only and fam.kind in ("fa", "mla", "sparse"):
            # a layer the runner handles alone: in a group, in no tensor
            name = _layer_name(next_index(), True, case.standard_names)
            groups[-1].layer_names.append(name)
            runner_only.append(name)
    order = list(range(len(tensors)))
    if not case.planner_order:
        rng.shuffle(order)
    case.config = KVCacheConfig(
        num_blocks=case.num_blocks, kv_cache_tensors=[tensors[i] for i in order], kv_cache_groups=groups
    )
    case.family_of_tensor = [fam_of_tensor[i] for i in order]
    case.runner_only_layers = runner_only
    case.shared_layers = {}
    for _ in range(case.kv_sharing if attn_layers else 0):
        target = attn_layers[rng.randrange(len(attn_layers))]
        case.shared_layers[_layer_name(next_index(), True, case.standard_names)] = target
    return case


# ---------------------------------------------------------------------------------------------
# what each layer must get (computed from the spec alone, independently of the plugin)


@dataclass(frozen=True)
class Part:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]  # per block
    kernel_split: bool  # split into 128-token kernel blocks when the runner splits

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _itemsize(self.dtype)


def expected_parts(spec: Any, mla_dims: tuple[int, int]) -> list[Part]:
    if isinstance(spec, MambaSpec):
        names = ("conv", "ssm") if len(spec.shapes) == 2 else tuple(f"state{i}" for i in range(len(spec.shapes)))
        return [Part(n, d, tuple(s), False) for n, s, d in zip(names, spec.shapes, spec.dtypes)]
    bs, heads = spec.block_size, spec.num_kv_heads
    if isinstance(spec, AscendMLAAttentionSpec):
        nope, rope, idx = spec.sparse_head_dim if spec.sparse_head_dim else (*mla_dims, 0)
        parts = [Part("nope", spec.dtype, (bs, heads, nope), True), Part("rope", spec.dtype, (bs, heads, rope), True)]
        if idx:
            parts.append(Part("indexer_k", spec.dtype, (bs, 1, idx), False))
        return parts
    return [
        Part("k", spec.dtype, (bs, heads, spec.head_size), True),
        Part("v", spec.dtype, (bs, heads, spec.head_size_v), True),
    ]


def layer_specs(config: KVCacheConfig) -> dict[str, Any]:
    out = {}
    for g in config.kv_cache_groups:
        for name in g.layer_names:
            spec = g.kv_cache_spec
            out[name] = spec.kv_cache_specs[name] if isinstance(spec, UniformTypeKVCacheSpecs) else spec
    return out


# ---------------------------------------------------------------------------------------------
# running the adapter and stock


def stock_init(runner, config):
    return patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")(runner, config)


def ours_init(runner, config):
    stock = patching.original(rf.NPUModelRunner, "initialize_kv_cache_tensors")
    return AscendAdapter().initialize_kv_cache_tensors(stock, runner, config)


def ours_raw(runner, config):
    stock = patching.original(rf.NPUModelRunner, "_allocate_kv_cache_tensors")
    return AscendAdapter().allocate_kv_cache_tensors(stock, runner, config)


def runner_for(case: Case, kv_transfer: bool | None = None):
    return rf.make_runner(
        case.config,
        kv_transfer=case.kv_transfer if kv_transfer is None else kv_transfer,
        mla_dims=case.mla_dims,
        index_head_dim=case.index_head_dim,
        runner_only_attn_layers=case.runner_only_layers,
        shared_kv_cache_layers=case.shared_layers,
    )


def storage_range(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def view_range(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    assert t.is_contiguous(), "views are expected contiguous"
    return t.view(torch.uint8).reshape(-1)


def check_layers(case: Case, kv: dict, stats: Counter) -> dict[str, list[Part]]:
    """Property 1: every layer, every part, dtype and per-block shape, >= num_blocks blocks."""
    config, n = case.config, case.num_blocks
    specs = layer_specs(config)
    expected = set(specs) - set(case.runner_only_layers) | set(case.shared_layers)
    assert set(kv) == expected, f"layers {sorted(set(kv) ^ expected)} differ"
    split = len(config.kv_cache_groups) > 1  # use_hybrid_blocks
    parts_of = {}
    for name, target in case.shared_layers.items():
        assert kv[name] is kv[target], f"KV-sharing layer {name} does not get {target}'s caches"
    for name in expected - set(case.shared_layers):
        spec = specs[name]
        parts = expected_parts(spec, case.mla_dims)
        parts_of[name] = parts
        views = list(kv[name])
        assert isinstance(kv[name], list if isinstance(spec, MambaSpec) else tuple), (name, type(kv[name]))
        assert [p.name for p in parts] and len(views) == len(parts), (name, [tuple(v.shape) for v in views], parts)
        for view, p in zip(views, parts):
            assert view.dtype == p.dtype, (name, p.name, view.dtype, p.dtype)
            shape = p.shape
            if split and p.kernel_split and shape[0] > KERNEL_BLOCK:
                ratio = shape[0] // KERNEL_BLOCK
                assert tuple(view.shape[1:]) == (KERNEL_BLOCK, *shape[1:]), (name, p.name, tuple(view.shape), shape)
                blocks = view.shape[0] / ratio
                stats["kernel-split views"] += 1
            else:
                assert tuple(view.shape[1:]) == shape, (name, p.name, tuple(view.shape), shape)
                blocks = view.shape[0]
            assert blocks >= n, (name, p.name, tuple(view.shape), n)
            assert view.is_contiguous(), (name, p.name)
    return parts_of


def check_storage(case: Case, kv: dict, parts_of: dict, stats: Counter) -> None:
    """Properties 2 and 3 (bytes)."""
    config = case.config
    owner: dict[int, int] = {}
    ranges: dict[int, tuple[int, int]] = {}
    for tid, tensor in enumerate(config.kv_cache_tensors):
        sets = {name: frozenset(v.untyped_storage().data_ptr() for v in kv[name]) for name in tensor.shared_by}
        assert len(set(sets.values())) == 1, f"tensor {tid}: layers do not alias one storage set: {sets}"
        for ptr in next(iter(sets.values())):
            assert owner.setdefault(ptr, tid) == tid, f"tensors {owner[ptr]} and {tid} share a storage"
        for name in tensor.shared_by:
            for v in kv[name]:
                s_lo, s_hi = storage_range(v)
                v_lo, v_hi = view_range(v)
                assert s_lo <= v_lo <= v_hi <= s_hi, f"{name}: view [{v_lo}, {v_hi}) outside storage [{s_lo}, {s_hi})"
                ranges[s_lo] = (s_lo, s_hi)
    spans = sorted(ranges.values())
    for (lo1, hi1), (lo2, hi2) in zip(spans, spans[1:]):
        assert hi1 <= lo2, f"storages [{lo1}, {hi1}) and [{lo2}, {hi2}) overlap"
    allocated = sum(hi - lo for lo, hi in spans)
    required = sum(t.size for t in config.kv_cache_tensors)
    if case.kv_transfer:
        assert required <= allocated <= required + TRANSFER_ALIGNMENT * len(spans), (allocated, required, len(spans))
    else:
        assert allocated == required, (allocated, required)
    stats["storages"] += len(spans)


def check_raw_buffers(case: Case, stats: Counter) -> None:
    """Property 3 (alignment): every raw buffer starts on 2 MiB with kv_transfer."""
    runner = runner_for(case)
    raws = ours_raw(runner, copy.deepcopy(case.config))
    specs = layer_specs(case.config)
    assert set(raws) == set(specs) - set(case.runner_only_layers)
    for value in raws.values():
        for buf in value if isinstance(value, tuple) else (value,):
            assert buf.dtype == torch.int8
            if case.kv_transfer:
                assert buf.data_ptr() % TRANSFER_ALIGNMENT == 0, buf.data_ptr() % TRANSFER_ALIGNMENT
    stats["raw buffers checked"] += 1


def _slot(case_hybrid: bool, spec: Any, part: str) -> str:
    """Which bytes a part's block occupies inside its tensor: in a hybrid tensor (vllm-ascend
    region layout) attention K and the ssm state share region 2; else each part is its own."""
    if case_hybrid:
        return {"conv": "R1", "ssm": "R2", "k": "R2", "v": "R3"}[part]
    return part


def check_patterns(case: Case, kv: dict, parts_of: dict, stats: Counter) -> None:
    """Property 4: byte patterns through the views."""
    config, n = case.config, case.num_blocks
    specs = layer_specs(config)
    per_tensor = []
    for tid, tensor in enumerate(config.kv_cache_tensors):
        hybrid = len({isinstance(specs[name], MambaSpec) for name in tensor.shared_by}) == 2
        views = []  # (layer, part, slot, bytes view, block bytes)
        for name in tensor.shared_by:
            for v, p in zip(kv[name], parts_of[name]):
                views.append((name, p.name, _slot(hybrid, specs[name], p.name), as_bytes(v), p.nbytes))
        per_tensor.append(views)

    # (a) inside each tensor: block j of one layer's part reaches block j of that slot only.
    # Every storage starts zeroed; after a write the storage holding it must have exactly the
    # block's bytes non-zero (so nothing else was written), each view of the same slot must read
    # the pattern in block j, and the other views of that storage must read zeros only.
    pattern = 0x5A
    for tid, views in enumerate(per_tensor):
        spans: dict[int, list[int]] = {}  # storage -> [first, end) byte offsets used by the views
        for *_, b, _ in views:
            b.zero_()
            storage = b.untyped_storage()
            lo, hi = view_range(b)
            span = spans.setdefault(storage.data_ptr(), [lo, hi])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
        storages = {}  # only the bytes the views cover (not the 2 MiB alignment slack)
        for *_, b, _ in views:
            storage = b.untyped_storage()
            lo, hi = spans[storage.data_ptr()]
            full = torch.empty(0, dtype=torch.uint8).set_(storage)
            storages[storage.data_ptr()] = full[lo - storage.data_ptr():hi - storage.data_ptr()]
        assert all(int(full.count_nonzero()) == 0 for full in storages.values())
        budget = max(1, 24 // len(views))
        for wi, (name, part, slot, b, pb) in enumerate(views):
            home = b.untyped_storage().data_ptr()
            for j in range(n) if n <= budget else [(wi + k) % n for k in range(budget)]:
                b[j * pb:(j + 1) * pb] = pattern
                for ptr, full in storages.items():
                    nonzero = int(full.count_nonzero())
                    assert nonzero == (pb if ptr == home else 0), (
                        f"tensor {tid}: writing block {j} ({pb} bytes) of {name}.{part} changed {nonzero} bytes "
                        f"of {'its' if ptr == home else 'another'} storage"
                    )
                for oname, opart, oslot, other, opb in views:
                    if oslot == slot:
                        assert opb == pb and bool((other[j * pb:(j + 1) * pb] == pattern).all()), (
                            f"tensor {tid}: writing block {j} of {name}.{part} is not seen as block {j} of {oname}.{opart}"
                        )
                    elif other.untyped_storage().data_ptr() == home:
                        nonzero = int(other.count_nonzero())
                        assert nonzero == 0, (
                            f"tensor {tid}: writing block {j} of {name}.{part} changed {nonzero} bytes of {oname}.{opart}"
                        )
                b[j * pb:(j + 1) * pb] = 0
                stats["block writes"] += 1

    # (b) across tensors: fill tensor after tensor, read everything back
    for tid, views in enumerate(per_tensor):
        for _, _, _, b, _ in views:
            b.fill_(1 + tid % 250)
    for tid, views in enumerate(per_tensor):
        for name, part, _, b, _ in views:
            bad = int((b != 1 + tid % 250).sum())
            assert bad == 0, f"tensor {tid}: {bad} bytes of {name}.{part} were overwritten through another tensor"


def describe(t: torch.Tensor):
    return tuple(t.shape), t.dtype, t.stride()


def layout_signature(kv: dict, kv_transfer: bool) -> dict:
    """Per layer: shape, dtype, byte offset from the start of its raw buffer (the 2 MiB aligned
    slice with kv_transfer) and which layers share the storage (canonical storage number)."""
    storage_ids: dict[int, int] = {}
    out = {}
    for name in sorted(kv):
        sig = []
        for t in kv[name]:
            ptr = t.untyped_storage().data_ptr()
            base = ptr + (-ptr % TRANSFER_ALIGNMENT if kv_transfer else 0)
            sig.append((tuple(t.shape), t.dtype, t.data_ptr() - base, storage_ids.setdefault(ptr, len(storage_ids))))
        out[name] = sig
    return out


def allocated_bytes(kv: dict) -> int:
    seen = {}
    for value in kv.values():
        for t in value:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def compare_with_stock(case: Case, kv: dict, stats: Counter) -> None:
    """Property 6."""
    if not case.standard_names:
        stats["stock: not tried (names without attn/linear_attn)"] += 1
        return
    kind = "attention-only" if not case.kinds & {"mamba", "hybrid"} else (
        "pure-Mamba" if case.kinds == {"mamba"} else "mixed/hybrid"
    )
    runner = runner_for(case)
    try:
        stock = stock_init(runner, copy.deepcopy(case.config))
    except Exception as exc:  # noqa: BLE001 - stock's own limits (see STOCK_0.23.md section 7)
        stats[f"stock refused {kind} ({type(exc).__name__})"] += 1
        event(f"stock refused ({type(exc).__name__})")
        return
    assert stock.keys() == kv.keys()
    n = case.num_blocks
    if any(t.shape[0] < n for value in stock.values() for t in value):
        # stock 0.23 with several KV cache groups views blocks smaller than its 128-token kernel
        # block as (0, 128, ...) without raising (STOCK_0.23.md section 7, trap 5)
        stats[f"stock built empty views {kind} (block_size < 128)"] += 1
        event("stock built empty views")
        return
    for name in stock:
        assert [describe(t) for t in kv[name]] == [describe(t) for t in stock[name]], name
    assert allocated_bytes(kv) <= allocated_bytes(stock)
    stats[f"stock compared: {kind}"] += 1
    event(f"stock compared: {kind}")


def known_bug(case: Case) -> str | None:
    """Configs that hit a plugin bug already reported (pinned by the xfail(strict) regression
    tests at the end): the property runs record them instead of failing."""
    specs = layer_specs(case.config).values()
    sparse = any(isinstance(s, AscendMLAAttentionSpec) and s.sparse_head_dim for s in specs)
    if sparse and any(
        type(s) is FullAttentionSpec and s.num_kv_heads == 1 and s.head_size == sum(case.mla_dims) for s in specs
    ):
        return "A1 (FullAttentionSpec restated as legacy sparse MLA on 0.23)"
    return None


def kernel_misfit(runner, case: Case) -> bool:
    """Whether an attention layer's block size is not a multiple of the kernel block size its
    runner splits it into (several KV cache groups: 128 tokens)."""
    specs = layer_specs(case.config)
    sizes = AscendAdapter._kernel_block_sizes(runner)
    return any(
        isinstance(specs.get(name), AttentionSpec) and size and specs[name].block_size % size
        for name, size in sizes.items()
    )


def run_case(case: Case, stats: Counter, *, stock: bool = True) -> None:
    build(case)
    bug = known_bug(case)
    if bug is not None:
        stats[f"known bug {bug}"] += 1
        event(f"known bug {bug}")
        return
    runner = runner_for(case)
    if kernel_misfit(runner, case):
        # N5 (never-worse-than-stock.md): no view of such a block fits the backend's kernel blocks;
        # stock builds empty or unsplit views (STOCK_0.23.md, trap 5), the plugin refuses first.
        with pytest.raises(KVCacheLayoutError, match="kernel blocks"):
            ours_init(runner, copy.deepcopy(case.config))
        stats["refused: attention block size off the kernel block"] += 1
        event("refused: block size off the kernel block")
        return
    kv = ours_init(runner, copy.deepcopy(case.config))
    parts_of = check_layers(case, kv, stats)
    check_storage(case, kv, parts_of, stats)
    check_raw_buffers(case, stats)
    # property 5: the same layout whatever the order of kv_cache_tensors
    reversed_config = copy.deepcopy(case.config)
    reversed_config.kv_cache_tensors.reverse()
    # (without kv_transfer: the offsets are taken from the aligned start with it, so they agree)
    reordered = ours_init(runner_for(case, kv_transfer=False), reversed_config)
    assert layout_signature(reordered, False) == layout_signature(kv, case.kv_transfer)
    check_patterns(case, kv, parts_of, stats)
    if stock:
        compare_with_stock(case, kv, stats)
    stats["examples"] += 1
    for kind in sorted(case.kinds):
        stats[f"family {kind}"] += 1
    stats[f"groups={len(case.config.kv_cache_groups)}"] += 1
    stats["kv_transfer" if case.kv_transfer else "no transfer"] += 1
    if any(len(t.shared_by) > 1 for t in case.config.kv_cache_tensors):
        stats["tensors shared by several groups"] += 1
    if case.runner_only_layers:
        stats["runner-only layers"] += 1
    if case.shared_layers:
        stats["KV-sharing layers"] += 1
    specs = layer_specs(case.config).values()
    if any(isinstance(s, MambaSpec) and len(set(s.dtypes)) > 1 for s in specs):
        stats["mixed Mamba dtypes"] += 1
    if any(isinstance(s, (FullAttentionSpec, SlidingWindowSpec)) and s.head_size != s.head_size_v for s in specs):
        stats["head_size != head_size_v"] += 1
    if any(isinstance(s, AscendMLAAttentionSpec) and s.sparse_head_dim and s.sparse_head_dim[2] == 0 for s in specs):
        stats["sparse without indexer"] += 1


SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def stats_of(request):
    yield STATS
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    for name, stats in STATS.items():
        line = f"\n[{name}] {stats['examples']} examples: " + ", ".join(
            f"{k} {v}" for k, v in sorted(stats.items()) if k != "examples"
        )
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)
        else:  # pragma: no cover
            print(line)


# ---------------------------------------------------------------------------------------------
# explicit examples: configurations that failed while this file was written, and fixed shapes


def _fixed(**kw) -> Case:
    base = dict(num_blocks=2, mla_dims=(512, 64), index_head_dim=128, kv_transfer=False)
    base.update(kw)
    return Case(**base)


_FA = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)
_SWA = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16, sliding_window=64)
_GDN = MambaSpec(block_size=128, shapes=((3, 256), (2, 64, 64)), dtypes=(BF16, BF16), page_size_padded=34304, mamba_type=GDN)
_ATTN_PADDED = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16, page_size_padded=34304)

FIXED = [
    # T-HYB of the public cases: 2 attention + 6 GDN layers in 2 hybrid tensors
    _fixed(families=[Family("hybrid", [(_ATTN_PADDED, 2), (_GDN, 2), (_GDN, 2), (_GDN, 2)])], num_blocks=4),
    # full + sliding window groups sharing K/V, with transfer (failed first: the test compared
    # offsets from the storage start, which the 2 MiB alignment moves)
    _fixed(families=[Family("fa", [(_FA, 2), (_SWA, 2)])], kv_transfer=True),
    # failed first: stock views 1-token blocks of a multi-group runner as (0, 128, ...) without
    # raising; the plugin's (1, 1, 1, 1) is right (now classified as "stock built empty views")
    _fixed(
        families=[Family("hybrid", [
            (SlidingWindowSpec(block_size=1, num_kv_heads=1, head_size=1, dtype=BF16, sliding_window=64,
                               page_size_padded=8), 1),
            (MambaSpec(block_size=1, shapes=((1, 2), (1, 1, 1)), dtypes=(BF16, BF16), page_size_padded=8,
                       mamba_type=GDN), 1),
        ])],
        num_blocks=1, mla_dims=(4, 2), index_head_dim=1,
    ),
]


def with_examples(fixed):
    def deco(fn):
        for case in fixed:
            fn = example(case=case)(fn)
        return fn

    return deco


@with_examples(FIXED)
@SETTINGS
@given(case=cases())
def test_adapter_invariants_on_random_configs(case, stats_of):
    run_case(case, stats_of.setdefault("random configs", Counter()))


@settings(SETTINGS, max_examples=120)
@given(case=cases(kinds=("fa", "fa", "mla", "sparse", "mamba", "hybrid", "uniform"), max_families=1, blocks=STOCK_BLOCKS, planner_order=True))
def test_adapter_equals_stock_on_single_family_configs(case, stats_of):
    """Configs of one family in vLLM's tensor order, with block sizes stock can split: stock
    vllm-ascend builds most of them (attention-only, pure-Mamba and vllm-ascend-form hybrids), so
    this run is where the plugin meets stock most often."""
    case.standard_names = True
    run_case(case, stats_of.setdefault("single-family configs vs stock", Counter()))


def test_property_runs_covered_every_kind(stats_of):
    """The random runs above really reached each family kind, transfer on and off, sharing
    across groups, and compared with stock."""
    stats = stats_of.get("random configs")
    if stats is None:
        pytest.skip("run together with test_adapter_invariants_on_random_configs")
    for key in ("family fa", "family uniform", "family mla", "family sparse", "family mamba", "family hybrid", "kv_transfer",
                "no transfer", "tensors shared by several groups", "mixed Mamba dtypes",
                "head_size != head_size_v", "sparse without indexer", "kernel-split views"):
        assert stats[key] > 0, (key, stats)
    compared = sum(v for k, v in stats.items() if k.startswith("stock compared"))
    single = stats_of.get("single-family configs vs stock", Counter())
    compared += sum(v for k, v in single.items() if k.startswith("stock compared"))
    assert compared >= 20, stats


# ---------------------------------------------------------------------------------------------
# the geometry predicate the hybrid layout decision rests on


regions = st.tuples(st.integers(0, 96), st.integers(1, 48), st.integers(1, 48))


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(a=regions, b=regions, num_blocks=st.integers(1, 6))
def test_crosses_blocks_matches_brute_force(a, b, num_blocks, stats_of):
    """``crosses_blocks(a, b, n)``: block j of region a shares a byte with block k != j of b.
    A region is (offset, stride, bytes per block). Equal strides: exactly the brute force
    answer; different strides: never misses a crossing (it may over-approximate)."""
    stats = stats_of.setdefault("crosses_blocks", Counter())
    (oa, sa, ba), (ob, sb, bb) = a, b
    truth = any(
        max(oa + j * sa, ob + k * sb) < min(oa + j * sa + ba, ob + k * sb + bb)
        for j in range(num_blocks)
        for k in range(num_blocks)
        if j != k
    )
    got = crosses_blocks(a, b, num_blocks)
    if sa == sb:
        assert got == truth, (a, b, num_blocks, got, truth)
    else:
        assert got or not truth, (a, b, num_blocks)
    assert crosses_blocks(b, a, num_blocks) == got or sa != sb, "not symmetric"
    stats["examples"] += 1
    stats["crossing" if truth else "not crossing"] += 1


# ---------------------------------------------------------------------------------------------
# regression tests: plugin bugs the properties found (xfail until fixed; strict, so a fix shows)


# A1 (fixed): on vllm-ascend 0.23 a plain FullAttentionSpec layer with 1 KV head and head_size ==
# kv_lora_rank + qk_rope_head_dim, in a runner with use_sparse, was restated as the 0.11/0.13 legacy
# sparse MLA form; core.strategies.sparse_mla.normalize_legacy_specs now applies only to releases with that form.
def test_regression_a1_dense_layer_next_to_sparse_mla_keeps_its_k_and_v():
    attn = "model.layers.{}.self_attn.attn".format
    sparse = AscendMLAAttentionSpec(
        block_size=128, num_kv_heads=1, head_size=512 + 64 + 128, dtype=BF16, sparse_head_dim=(512, 64, 128)
    )
    dense = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=576, dtype=BF16)
    config = KVCacheConfig(
        2,
        [KVCacheTensor(2 * sparse.page_size_bytes, [attn(0)]), KVCacheTensor(2 * dense.page_size_bytes, [attn(1)])],
        [KVCacheGroupSpec([attn(0)], sparse), KVCacheGroupSpec([attn(1)], dense)],
    )
    runner = rf.make_runner(config, mla_dims=(512, 64), index_head_dim=128)
    kv = ours_init(runner, copy.deepcopy(config))
    assert [(tuple(t.shape), t.dtype) for t in kv[attn(1)]] == [((2, 128, 1, 576), BF16)] * 2
