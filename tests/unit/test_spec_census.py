"""Every KVCacheSpec subclass of the installed vLLM is served with an exact page
or refused with a reason (see tests/census.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import census  # noqa: E402

census.import_spec_modules("vllm.v1")
CLASSES = census.spec_classes()


def test_the_census_sees_vllms_spec_classes():
    names = {c.__name__ for c in CLASSES}
    assert {"FullAttentionSpec", "MLAAttentionSpec", "MambaSpec", "SlidingWindowSpec", "HiddenStateCacheSpec"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_spec_class_is_served_with_an_exact_page_or_refused(cls):
    verdict, detail = census.classify(cls)
    assert verdict in ("served", "refused", "wrapper") and (verdict != "refused" or detail)


def test_the_census_fails_for_an_unclassified_class():
    """The proof: a new subclass (as a new release would add) is caught."""
    import dataclasses

    from vllm.v1.kv_cache_interface import FullAttentionSpec

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class NewInARelease(FullAttentionSpec):
        compress_ratio: int = 4

    NewInARelease.__module__ = "vllm.v1.kv_cache_interface"
    with pytest.raises(AssertionError, match="NewInARelease is a KV cache spec class no strategy serves"):
        census.classify(NewInARelease)
