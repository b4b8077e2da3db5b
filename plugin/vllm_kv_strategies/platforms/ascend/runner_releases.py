"""What each vllm-ascend release's KV cache code does, as the plugin depends on
it: one row (:class:`RunnerRelease`) per release a test cell proves, in
:data:`RUNNER_RELEASES`. :mod:`.targets` (which patch targets a release gets)
and :mod:`.facts` (how its layout differs) read their answers from the row of
the installed release; no other module of ``platforms.ascend`` chooses a
behaviour by version number (:mod:`.releases` compares versions only to say
which releases ``auto`` patches). A new vllm-ascend release whose code differs
is a new row here (and, in :mod:`.releases`, its fingerprints).

A row holds from its ``first`` release up to the next row's
(:func:`~vllm_kv_strategies.versions.release_row`): a release older than the
first row reads the first row; one that is not installed or whose version does
not parse reads the newest. Releases between two rows (0.12, 0.14 - 0.17, 0.19 - 0.22,
0.24 - 0.29) were never checked; ``auto`` leaves their runner stock anyway
(:func:`~vllm_kv_strategies.platforms.ascend.releases.code_mismatch`), so a
row's reach beyond its own release matters only under ``KV_STRATEGIES=on``.

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from vllm_kv_strategies.versions import Versions, minor_row, release_row

__all__ = ["RUNNER_RELEASES", "RunnerRelease", "own_release", "runner_release"]


@dataclass(frozen=True)
class RunnerRelease:
    """How one vllm-ascend release builds its KV cache, where that decides
    what the plugin patches or lays out. Each field names the stock code it
    was read from."""

    #: The release the row was read from (and holds from).
    first: str
    #: ``NPUModelRunner._allocate_kv_cache_tensors`` / ``_reshape_kv_cache_tensors``
    #: halves of ``initialize_kv_cache_tensors`` (0.13+); False: 0.11's three
    #: complete initialisations (plain, ``_deepseek_mla``, ``_deepseek_sfa``).
    split_init: bool
    #: Mamba state views block-major like upstream vLLM (state i of block j at
    #: ``j * page + sum(bytes of states < i)``, 0.11); False: state after
    #: state, each ``(num_blocks, *shape)`` contiguous (0.13+).
    mamba_states_interleaved: bool
    #: Stock lets every layer of one ``KVCacheTensor`` alias the first layer's
    #: part buffers (0.13+); 0.11's ``initialize_kv_cache_tensors`` gives every
    #: layer buffers of its own.
    stock_shares_buffers: bool
    #: Stock views attention and Mamba layers of one tensor in one raw buffer
    #: (``hybrid_with_attn_and_mamba`` in ``_allocate_kv_cache_tensors``, PR
    #: #6887, 0.18+); before, attention layers get K/V buffers of their own.
    stock_shares_hybrid: bool
    #: DeepSeek V3.2 (sparse MLA) layers carry the legacy ``FullAttentionSpec``
    #: of twice the MLA page (0.11, 0.13); 0.18+ an MLA spec with ``sparse_head_dim``.
    legacy_sparse_form: bool
    #: Part groups (:attr:`~vllm_kv_strategies.core.strategies.PagePart.group`)
    #: allocated as one raw buffer: the LI C8 indexer key and its scale
    #: (``"indexer"``, ``_allocate_sparse_c8_indexer_tensors``, 0.23+).
    coallocated_groups: frozenset[str]
    #: ``additional_config["kv_cache_dtype"] == "int8"`` gives full attention
    #: K/V in the BSH layout (0.11's ``initialize_kv_cache_tensors``; later
    #: releases read no such key).
    bsh_int8_key: bool
    #: ``enable_fa_quant(vllm_config)`` checks the KV transfer role itself
    #: (0.23+); False: the runner gates the FA-quant split on
    #: ``runner.is_kv_consumer`` (0.18).
    fa_quant_role_in_probe: bool
    #: vllm-ascend's own Model Runner V2 and the worker's multi-group KV cache
    #: budget step (``_scale_kv_cache_memory_for_multi_group``, 0.30+).
    runner_v2: bool
    #: The front-end's hybrid attention + Mamba page sizing the plugin replaces
    #: (``patch_mamba_config.verify_and_update_config``, 0.11 / 0.13), for the
    #: row's own minor release only (:func:`own_release`): the kernel facts were read there.
    hybrid_sizing: bool
    #: ``plan`` imports ``vllm_ascend.ops`` before vLLM loads the platform where
    #: ``torch_npu`` is stood in (0.23: a circular import otherwise), for the
    #: row's own minor release only (:func:`own_release`)
    #: (:func:`~vllm_kv_strategies.platforms.ascend.npu_standin.install`).
    ops_before_platform: bool = False


_NONE: frozenset[str] = frozenset()
_INDEXER = frozenset({"indexer"})

#: One row per Ascend cell's release, oldest first.
RUNNER_RELEASES: tuple[RunnerRelease, ...] = (
    RunnerRelease("0.11.0", split_init=False, mamba_states_interleaved=True, stock_shares_buffers=False,
                  stock_shares_hybrid=False, legacy_sparse_form=True, coallocated_groups=_NONE, bsh_int8_key=True,
                  fa_quant_role_in_probe=False, runner_v2=False, hybrid_sizing=True),
    RunnerRelease("0.13.0", split_init=True, mamba_states_interleaved=False, stock_shares_buffers=True,
                  stock_shares_hybrid=False, legacy_sparse_form=True, coallocated_groups=_NONE, bsh_int8_key=False,
                  fa_quant_role_in_probe=False, runner_v2=False, hybrid_sizing=True),
    RunnerRelease("0.18.0", split_init=True, mamba_states_interleaved=False, stock_shares_buffers=True,
                  stock_shares_hybrid=True, legacy_sparse_form=False, coallocated_groups=_NONE, bsh_int8_key=False,
                  fa_quant_role_in_probe=False, runner_v2=False, hybrid_sizing=False),
    RunnerRelease("0.23.0", split_init=True, mamba_states_interleaved=False, stock_shares_buffers=True,
                  stock_shares_hybrid=True, legacy_sparse_form=False, coallocated_groups=_INDEXER, bsh_int8_key=False,
                  fa_quant_role_in_probe=True, runner_v2=False, hybrid_sizing=False, ops_before_platform=True),
    RunnerRelease("0.30.0", split_init=True, mamba_states_interleaved=False, stock_shares_buffers=True,
                  stock_shares_hybrid=True, legacy_sparse_form=False, coallocated_groups=_INDEXER, bsh_int8_key=False,
                  fa_quant_role_in_probe=True, runner_v2=True, hybrid_sizing=False),
)


@cache  # asked per fact, several times per KV cache init; a version's row never changes
def runner_release(vllm_ascend: str | None = None) -> RunnerRelease:
    """The row of :data:`RUNNER_RELEASES` that holds for ``vllm_ascend``
    (default: the installed release), by
    :func:`~vllm_kv_strategies.versions.release_row`: ``"0.30.0rc2"`` and
    ``"0.23.0.post1"`` read the 0.30 and 0.23 rows. Never raises."""
    return release_row(vllm_ascend if vllm_ascend is not None else Versions.detect().vllm_ascend, RUNNER_RELEASES)


def own_release(vllm_ascend: str | None = None) -> RunnerRelease | None:
    """The row read from ``vllm_ascend``'s own major.minor release (default:
    installed), or None (:func:`~vllm_kv_strategies.versions.minor_row`): for
    the columns that hold in that release only (``hybrid_sizing``,
    ``ops_before_platform``)."""
    return minor_row(vllm_ascend if vllm_ascend is not None else Versions.detect().vllm_ascend, RUNNER_RELEASES)
