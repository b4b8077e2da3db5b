"""The spec-class census: every ``KVCacheSpec`` subclass the installed vLLM (and
vllm-ascend) define is either served by a strategy whose page equals the spec's
own, on a sample instance, or refused with a reason
(``vllm_kv_strategies.core.strategies.REFUSED_SPEC_CLASSES``). A release that adds a
spec class fails this census until someone classifies the class.

Used by tests/unit/test_spec_census.py (upstream cells) and
tests/ascend/test_spec_census.py (Ascend cells).
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import torch

#: Modules whose source defines a class deriving from a ``...Spec`` class.
_CLASS_LINE = re.compile(r"^class \w+\([A-Za-z_.]*Spec\)", re.M)
BF16 = torch.bfloat16

#: Values for the required (no default) fields of sample instances, by field name.
FIELD_SAMPLES: dict[str, Any] = {
    "block_size": 16,
    "num_kv_heads": 1,
    "head_size": 576,
    "dtype": BF16,
    "sliding_window": 64,
    "attention_chunk_size": 64,
    "rswa_window": 64,
    "shapes": ((3, 256), (2, 64, 64)),
    "dtypes": (BF16, torch.float32),
}
#: Model dimensions of the samples (576 = MLA nope 512 + rope 64).
DIMS = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_head_dim": 128}


def import_spec_modules(*packages: str) -> list[str]:
    """Import every module of ``packages`` whose source defines a ``...Spec``
    subclass; return the ones that failed to import (with the error)."""
    failed = []
    for package in packages:
        try:
            root = Path(importlib.import_module(package).__file__).parent
        except ImportError:
            continue
        for path in root.rglob("*.py"):
            if not _CLASS_LINE.search(path.read_text(errors="replace")):
                continue
            name = ".".join((package, *path.relative_to(root).with_suffix("").parts))
            try:
                importlib.import_module(name.removesuffix(".__init__"))
            except Exception as exc:
                failed.append(f"{name}: {exc!r}")
    return failed


def spec_classes() -> list[type]:
    """Every subclass of vLLM's ``KVCacheSpec`` defined by vLLM or vllm-ascend."""
    from vllm.v1.kv_cache_interface import KVCacheSpec

    found, todo = [], [KVCacheSpec]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return [c for c in found if c.__module__.split(".")[0] in ("vllm", "vllm_ascend")]


def sample(cls: type) -> Any:
    """An instance of ``cls`` with every required field from :data:`FIELD_SAMPLES`.

    Raises:
        KeyError: a required field has no sample value (add one to classify the class).
    """
    kwargs = {
        f.name: FIELD_SAMPLES[f.name]
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return cls(**kwargs)


def classify(cls: type) -> tuple[str, str]:
    """``("served", strategy name)``, ``("refused", reason)`` or ``("wrapper", "")``;
    raises AssertionError for a class that is neither, or whose page disagrees."""
    from vllm_kv_strategies.core.specs import unpadded_page_bytes
    from vllm_kv_strategies.core.registry import default_registry
    from vllm_kv_strategies.core.strategies import NOT_LAYER_SPECS, REFUSED_SPEC_CLASSES, ModelDims

    name = cls.__name__
    if name in NOT_LAYER_SPECS:
        return "wrapper", ""
    if name in REFUSED_SPEC_CLASSES:
        try:
            spec = sample(cls)
        except (KeyError, TypeError, ValueError, NotImplementedError):
            spec = None
        assert spec is None or default_registry().find(spec) is None, f"{name} is refused and served"
        return "refused", REFUSED_SPEC_CLASSES[name]
    try:
        spec = sample(cls)
    except KeyError as exc:
        raise AssertionError(f"{cls.__module__}.{name}: no sample value for field {exc}; classify it") from exc
    strategy = default_registry().find(spec)
    assert strategy is not None, (
        f"{cls.__module__}.{name} is a KV cache spec class no strategy serves and REFUSED_SPEC_CLASSES "
        "does not list: classify it (a strategy, or a refusal with its reason)"
    )
    page = strategy.page_size_bytes(spec, ModelDims(**DIMS))
    assert page == unpadded_page_bytes(spec) == spec.page_size_bytes, (name, strategy.name, page, spec.page_size_bytes)
    return "served", strategy.name
