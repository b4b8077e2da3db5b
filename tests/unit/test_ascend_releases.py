"""Exact release identity on Ascend: every vllm-ascend release on the index is
classified (own cell, same code as a cell, stock), ``auto`` patches only the
first two, and the fingerprint that decides "same code" ignores what is not
code. Pure Python: runs in every upstream cell without vllm-ascend; the
installed module's fingerprint is checked against this table in each Ascend
cell (tests/ascend/test_patch_ascend.py)."""

from __future__ import annotations

import logging

import pytest
from packaging.version import Version

import vllm_kv_strategies
from vllm_kv_strategies.platforms import matrix
from vllm_kv_strategies.platforms.ascend import releases as rel
from vllm_kv_strategies.platforms.fingerprint import ABSENT, method_fingerprint
from vllm_kv_strategies.platforms.matrix import Installed, exact_release


@pytest.mark.parametrize(
    ("version", "status", "cell"),
    [
        ("0.11.0rc0", rel.STOCK, None),  # differs in every KV method
        ("0.11.0rc1", rel.STOCK, None),  # differs in _convert_torch_format, which the plugin calls on 0.11
        ("0.11.0rc3", rel.SAME_CODE, "ascend-0.11.0"),
        ("0.11.0", rel.OWN_CELL, "ascend-0.11.0"),
        ("0.13.0rc1", rel.STOCK, None),
        ("0.13.0rc2", rel.SAME_CODE, "ascend-0.13.0"),
        ("0.13.0rc3", rel.STOCK, None),
        ("0.18.0rc1", rel.STOCK, None),  # get_kv_cache_spec differs
        ("0.23.0rc1", rel.SAME_CODE, "ascend-0.23.0"),
        ("0.23.0", rel.SAME_CODE, "ascend-0.23.0"),
        ("0.23.0.post1", rel.OWN_CELL, "ascend-0.23.0"),
        ("0.26.0rc1", rel.STOCK, None),
        ("0.28.0rc1", rel.STOCK, None),
        ("0.30.0rc1", rel.SAME_CODE, "ascend-0.30.0"),
        ("0.30.0rc2", rel.OWN_CELL, "ascend-0.30.0"),
        ("0.30.0", rel.STOCK, None),  # the final, due: never compared
        ("0.9.1", rel.STOCK, None),
    ],
)
def test_classification(version, status, cell):
    row = rel.classify(version)
    assert (row.version, row.status, row.cell, row.patched) == (version, status, cell, status != rel.STOCK)
    assert row.vllm == Version(version).base_version  # each release pairs with the vLLM release of its number


def test_reasons_name_what_decided():
    assert rel.classify("0.13.0rc1").why == (
        "its NPUModelRunner KV cache methods differ from 0.13.0's (cell ascend-0.13.0), so no test ran them"
    )
    assert rel.classify("0.30.0").why == "not on the package index when this plugin was released: its code was never compared"
    assert rel.classify("0.7.3").why.startswith("older than 0.11.0rc0")
    assert rel.classify("0.28.0rc1").why.startswith("no cell yet: stock passes kv_cache_allocation_context")
    assert rel.classify("0.23.0rc1").why == "its NPUModelRunner KV cache methods are 0.23.0.post1's, which cell ascend-0.23.0 runs"


def test_the_table_covers_the_index_exactly():
    assert list(rel.INDEX_VERSIONS) == sorted(rel.INDEX_VERSIONS, key=Version)
    assert len(set(rel.INDEX_VERSIONS)) == len(rel.INDEX_VERSIONS) == 49
    fingerprinted = [v for v in rel.INDEX_VERSIONS if Version(v) >= Version(rel.FIRST_FINGERPRINTED)]
    assert list(rel.FINGERPRINTS) == fingerprinted  # every release from the first fingerprinted one, and no other
    assert all(pin in rel.FINGERPRINTS for pin in rel.CELL_PINS.values())
    assert matrix.ASCEND_RELEASES == tuple((r, r) for r in rel.CELL_PINS)
    patched = [row.version for row in rel.index_table() if row.patched]
    assert patched == ["0.11.0rc3", "0.11.0", "0.13.0rc2", "0.13.0", "0.18.0", "0.23.0rc1", "0.23.0", "0.23.0.post1",
                       "0.30.0rc1", "0.30.0rc2"]


@pytest.mark.parametrize(
    ("vllm", "vllm_ascend", "supported"),
    [
        ("0.11.0", "0.11.0", True),
        ("0.11.0+cpu", "0.11.0rc3", True),  # same code as the cell, beside the vLLM release it pairs with
        ("0.11.0", "0.11.0rc0", False),
        ("0.13.0", "0.13.0rc1", False),
        ("0.23.0", "0.23.0rc1", True),
        ("0.18.0", "0.23.0.post1", False),  # proven beside vLLM 0.23 only
        ("0.30.0rc1", "0.30.0rc2", False),  # a vLLM release candidate is not the release the cell ran
        ("0.30.0", "0.30.0", False),
    ],
)
def test_auto_patches_exactly_the_proven_pairs(vllm, vllm_ascend, supported):
    installed = Installed(vllm=vllm, vllm_ascend=vllm_ascend, torch="2.13.0+cpu", torch_npu=None)
    assert installed.supported is supported


@pytest.mark.parametrize(("version", "exact"), [("0.32.0+cpu", "0.32.0"), ("0.32.0", "0.32.0"), ("0.32.0rc1", None),
                                                 ("0.32.0.post1", None), ("0.32.0.dev3", None), ("nonsense", None)])
def test_upstream_needs_the_exact_final_release(version, exact):
    assert exact_release(version) == exact
    assert Installed(vllm=version, vllm_ascend=None, torch=None, torch_npu=None).supported is (
        exact in matrix.UPSTREAM_VLLM_RELEASES)


def test_auto_on_an_unproven_rc_stays_stock_with_one_warning(monkeypatch, kv_log):
    monkeypatch.setattr(Installed, "detect", classmethod(lambda cls: Installed("0.13.0", "0.13.0rc1", "2.13.0+cpu", None)))
    vllm_kv_strategies.register()
    assert vllm_kv_strategies._registered_platform == "stock"
    [warning] = kv_log.at(logging.WARNING)
    assert warning == (
        "kv_strategies: vLLM 0.13.0 + vllm-ascend 0.13.0rc1 is not proven by the plugin's tests (vllm-ascend 0.13.0rc1: "
        "its NPUModelRunner KV cache methods differ from 0.13.0's (cell ascend-0.13.0), so no test ran them; the nearest "
        "cell is ascend-0.13.0 (vllm-ascend 0.13.0)); vLLM's stock KV cache is used. Set KV_STRATEGIES=on to patch anyway."
    )


SOURCE = '''
class NPUModelRunner:
    def initialize_kv_cache(self, kv_cache_config):
        """Docstring."""
        # a comment
        return self._build(kv_cache_config)

    def get_kv_cache_spec(self):
        return {}
'''


def fp(source: str, methods=("initialize_kv_cache", "get_kv_cache_spec")) -> str:
    return method_fingerprint(source, "NPUModelRunner", methods)


def test_fingerprint_ignores_docstrings_comments_and_layout():
    same = SOURCE.replace('"""Docstring."""', '"""Another docstring,\n        on two lines."""').replace("# a comment", "")
    same = "import os\n\n\n" + same.replace("return {}", "return {\n        }")
    assert fp(same) == fp(SOURCE)
    assert len(fp(SOURCE)) == 16


@pytest.mark.parametrize(
    "change",
    [
        ("self._build(kv_cache_config)", "self._build(kv_cache_config, 1)"),
        ("(self, kv_cache_config)", "(self, kv_cache_config, kernel_block_sizes=None)"),
        ("return {}", "return {1: 2}"),
        ("class NPUModelRunner:", "class OtherRunner:"),  # the class is gone: every method absent
    ],
)
def test_fingerprint_sees_every_code_change(change):
    assert fp(SOURCE.replace(*change)) != fp(SOURCE)


def test_fingerprint_counts_absent_methods_and_order():
    assert fp(SOURCE, ("initialize_kv_cache", "missing")) != fp(SOURCE, ("initialize_kv_cache",))
    assert fp(SOURCE, ("get_kv_cache_spec", "initialize_kv_cache")) != fp(SOURCE)
    assert ABSENT == "<absent>"


def test_matrix_json_names_what_each_cell_patches(capsys):
    """``matrix --json``: each cell lists the attributes auto patches there; vllm-ascend 0.30's
    include the worker's multi-group budget step and Ascend V2's allocation functions."""
    import json

    from vllm_kv_strategies.__main__ import main

    assert main(["matrix", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (cell,) = [c for c in data["ascend"] if c["vllm_ascend_pin"] == "0.30.0rc2"]
    assert "vllm_ascend.worker.worker.NPUWorker._scale_kv_cache_memory_for_multi_group" in cell["patches"]
    assert "vllm_ascend.worker.v2.attn_utils._allocate_kv_cache" in cell["patches"]
    (old,) = [c for c in data["ascend"] if c["vllm_ascend_pin"] == "0.23.0.post1"]
    assert not any("NPUWorker" in p or ".v2." in p for p in old["patches"])
    # V1 through 0.33; 0.34 has no V1, and the matrix names none there; V2 everywhere
    upstream = {c["vllm"]: " ".join(c["patches"]) for c in data["upstream"]}
    assert {v for v, p in upstream.items() if "GPUModelRunner.initialize_kv_cache_tensors" in p} == {
        v for v in upstream if v < "0.34.0"}
    assert "gpu_model_runner" not in upstream["0.34.0"]
    assert all("vllm.v1.worker.gpu.model_runner.init_kv_cache" in p for p in upstream.values())
