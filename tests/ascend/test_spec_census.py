"""Every KVCacheSpec subclass of the installed vLLM and vllm-ascend (its own spec
classes and the ones its patches define) is served with an exact page or refused
with a reason (see tests/census.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import runner_factory  # noqa: F401  (imports the NPU runner: vllm-ascend's patches define spec classes)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import census  # noqa: E402

FAILED_IMPORTS = census.import_spec_modules("vllm.v1", "vllm_ascend")
CLASSES = census.spec_classes()


def test_the_census_sees_vllm_ascends_spec_classes():
    names = {c.__name__ for c in CLASSES}
    assert {"FullAttentionSpec", "MLAAttentionSpec", "MambaSpec"} <= names
    if runner_factory.AscendMLAAttentionSpec is not None:
        assert "AscendMLAAttentionSpec" in names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__.split('.')[0]}.{c.__name__}")
def test_every_spec_class_is_served_with_an_exact_page_or_refused(cls):
    verdict, detail = census.classify(cls)
    assert verdict in ("served", "refused", "wrapper") and (verdict != "refused" or detail)
