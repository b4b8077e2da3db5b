"""The table of what each vllm-ascend release's KV cache code does
(``platforms.ascend.runner_releases``): a row per Ascend cell, which row a
version reads, and the patch targets and layout facts read from it. Pure
Python: runs in every upstream cell without vllm-ascend; each Ascend cell checks
the installed release's row against its stock code (tests/ascend/test_compat_ascend.py,
test_patch_ascend.py)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from vllm_kv_strategies.platforms.ascend import facts, targets
from vllm_kv_strategies.platforms.ascend import releases as rel
from vllm_kv_strategies.platforms.ascend.runner_releases import RUNNER_RELEASES, runner_release


def test_one_row_per_cell_oldest_first():
    firsts = [row.first for row in RUNNER_RELEASES]
    assert firsts == sorted(firsts, key=Version) == list(rel.CELL_PINS)


@pytest.mark.parametrize(
    ("version", "row"),
    [
        ("0.10.2rc1", "0.11.0"),  # older than every row: the first
        ("0.11.0rc3", "0.11.0"),
        ("0.12.0rc1", "0.11.0"),
        ("0.13.0", "0.13.0"),
        ("0.17.0rc1", "0.13.0"),
        ("0.18.0+cpu", "0.18.0"),
        ("0.23.0.post1", "0.23.0"),
        ("0.29.0rc1", "0.23.0"),
        ("0.30.0rc2", "0.30.0"),
        ("0.31.0", "0.30.0"),  # newer than every row: the newest
        ("not-a-version", "0.30.0"),  # unparsable: the newest, as an unknown release (versions.release_row)
    ],
)
def test_a_version_reads_the_row_at_or_below_it(version, row):
    assert runner_release(version).first == row


def test_every_index_release_reads_its_nearest_cell():
    for version in rel.INDEX_VERSIONS:
        below = [r.first for r in RUNNER_RELEASES if Version(r.first) <= Version(Version(version).base_version)]
        assert runner_release(version).first == (below[-1] if below else RUNNER_RELEASES[0].first), version


@pytest.mark.parametrize("row", RUNNER_RELEASES, ids=lambda r: r.first)
def test_targets_and_facts_read_the_row(row):
    v = row.first
    assert (targets.target(v) is targets.SPLIT_INIT) is row.split_init
    assert (targets.hybrid_sizing_target(v) is targets.HYBRID_SIZING) is row.hybrid_sizing
    assert (targets.MULTI_GROUP_BUDGET in targets.targets(v)) is row.runner_v2
    assert (targets.ASCEND_V2 in targets.targets(v)) is row.runner_v2
    assert facts.mamba_states_interleaved(v) is row.mamba_states_interleaved
    assert facts.stock_shares_buffers(v) is row.stock_shares_buffers
    assert facts.stock_shares_hybrid_tensors(v) is row.stock_shares_hybrid
    assert facts.legacy_sparse_form(v) is row.legacy_sparse_form
    assert facts.coallocated_groups(v) == row.coallocated_groups


def test_hybrid_sizing_only_on_its_rows_own_minor():
    """0.11 / 0.13's page sizing is replaced there only: 0.12 and 0.14 read those rows but were
    never checked, so they keep stock's sizing."""
    assert targets.hybrid_sizing_target("0.13.0rc3") is targets.HYBRID_SIZING
    assert targets.hybrid_sizing_target("0.11.0rc0") is targets.HYBRID_SIZING
    assert targets.hybrid_sizing_target("0.12.0rc1") is None
    assert targets.hybrid_sizing_target("0.14.0rc1") is None
    assert targets.hybrid_sizing_target("0.10.2rc1") is None

