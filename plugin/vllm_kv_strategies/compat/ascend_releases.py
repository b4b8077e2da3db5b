"""Every vllm-ascend release on the package index, and which of them ``auto``
patches.

A release is patched in ``auto`` only when a cell of the test matrix proved
its runner code: it is the release a cell pins (``own cell``), or a release of
the same number whose ``NPUModelRunner`` KV cache methods have that release's
fingerprint (``same code as cell X``: a release candidate identical to its
final). Every other release (older ones, release candidates whose code
differs, releases published after this table) is left stock in ``auto`` with
one warning naming the release and the cell nearest to it.

The fingerprints are of :data:`FINGERPRINTED_METHODS` (the methods the plugin
replaces, wraps or reads), computed by
:func:`~vllm_kv_strategies.compat.fingerprint.method_fingerprint` from each
release's ``vllm_ascend/worker/model_runner_v1.py`` as published
(``python tools/ascend_releases.py`` prints :data:`FINGERPRINTS`); at patch
time the adapter computes the installed module's fingerprint again and leaves
the runner stock in ``auto`` when it differs (a locally changed install).

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

#: ``NPUModelRunner`` methods whose code a proof covers: the ones the plugin
#: replaces or wraps on some release, the spec collection it builds from, and
#: the runner methods it calls (the attention group iterator, 0.11's format cast).
FINGERPRINTED_METHODS: tuple[str, ...] = (
    "initialize_kv_cache",
    "initialize_kv_cache_tensors",
    "_allocate_kv_cache_tensors",
    "_reshape_kv_cache_tensors",
    "initialize_kv_cache_tensors_deepseek_mla",
    "initialize_kv_cache_tensors_deepseek_sfa",
    "get_kv_cache_spec",
    "_kv_cache_spec_attn_group_iterator",
    "_convert_torch_format",
)

#: The release each Ascend cell pins (cell release -> exact vllm-ascend
#: version): what its tests prove. The vLLM release of a pair is the cell's
#: release (vllm-ascend's versioning policy pairs each release with the vLLM
#: release of its number).
CELL_PINS: dict[str, str] = {
    "0.11.0": "0.11.0",
    "0.13.0": "0.13.0",
    "0.18.0": "0.18.0",
    "0.23.0": "0.23.0.post1",
    "0.30.0": "0.30.0rc2",
}

#: Every vllm-ascend version on the package index on 2026-12-02
#: (``pip index versions vllm-ascend --pre``), oldest first.
INDEX_VERSIONS: tuple[str, ...] = (
    "0.7.1rc1", "0.7.3rc1", "0.7.3rc2", "0.7.3", "0.7.3.post1", "0.8.4rc1", "0.8.4rc2", "0.8.5rc1",
    "0.9.0rc1", "0.9.0rc2", "0.9.1rc1", "0.9.1rc2", "0.9.1rc3", "0.9.1", "0.9.2rc1", "0.10.0rc1",
    "0.10.1rc1", "0.10.2rc1", "0.11.0rc0", "0.11.0rc1", "0.11.0rc2", "0.11.0rc3", "0.11.0", "0.12.0rc1",
    "0.13.0rc1", "0.13.0rc2", "0.13.0rc3", "0.13.0", "0.14.0rc1", "0.15.0rc1", "0.16.0rc1", "0.17.0rc1",
    "0.18.0rc1", "0.18.0", "0.19.1rc1", "0.20.2rc1", "0.21.0rc1", "0.22.1rc1", "0.23.0rc1", "0.23.0",
    "0.23.0.post1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1", "0.27.1rc1", "0.28.0rc1", "0.29.0rc1",
    "0.30.0rc1", "0.30.0rc2",
)

#: The first release whose runner the plugin was ever built for; older ones
#: were not fingerprinted.
FIRST_FINGERPRINTED = "0.11.0rc0"

#: ``python tools/ascend_releases.py`` on 2026-12-02: the fingerprint of
#: :data:`FINGERPRINTED_METHODS` in each release's published
#: ``model_runner_v1.py``.
FINGERPRINTS: dict[str, str] = {
    "0.11.0rc0": "b9a7bb235fa0b2e6",
    "0.11.0rc1": "513a1f1826545425",
    "0.11.0rc2": "513a1f1826545425",
    "0.11.0rc3": "385daea674c4677a",
    "0.11.0": "385daea674c4677a",
    "0.12.0rc1": "968453f2c4e022f9",
    "0.13.0rc1": "05e797df46e21bdf",
    "0.13.0rc2": "8edb3bd3475e9230",
    "0.13.0rc3": "0518b7e5d9dec892",
    "0.13.0": "8edb3bd3475e9230",
    "0.14.0rc1": "4a8b92e5667ef10a",
    "0.15.0rc1": "5a430f6235b03fd7",
    "0.16.0rc1": "27a8371b155a02c0",
    "0.17.0rc1": "c06651701d7f0e4c",
    "0.18.0rc1": "5814205e387376b6",
    "0.18.0": "353585dcbcde5885",
    "0.19.1rc1": "26fc77c61c835380",
    "0.20.2rc1": "36f8fafc4b1069da",
    "0.21.0rc1": "a0656e9c299bb388",
    "0.22.1rc1": "7ac3ce8a41a50b28",
    "0.23.0rc1": "dac196d7298605a6",
    "0.23.0": "dac196d7298605a6",
    "0.23.0.post1": "dac196d7298605a6",
    "0.24.0rc1": "e39e6382f39e7dd4",
    "0.25.1rc1": "d913cdb2decba58e",
    "0.26.0rc1": "a488660c9882297f",
    "0.27.1rc1": "a575ceb57dc925cf",
    "0.28.0rc1": "b95191795a48df8d",
    "0.29.0rc1": "188ec083a93af172",
    "0.30.0rc1": "a4e0693c574c0c8c",
    "0.30.0rc2": "a4e0693c574c0c8c",
}

#: Releases with no cell of their own, and the measured reason.
_NO_CELL_BECAUSE: dict[str, str] = {
    "0.26.0rc1": (
        "no cell yet: its KV cache code is 0.23's shared_by form with 0.30's new spec classes "
        "(AscendSFAIndexerCacheSpec, store_on_host), so it needs the SFA indexer kind first"
    ),
    "0.28.0rc1": (
        "no cell yet: stock passes kv_cache_allocation_context to initialize_kv_cache_tensors and "
        "adds KVPP and kpool tails to 0.23's shared_by layout; 0.30.0rc2's cell covers the new "
        "signature, not 0.28's layouts"
    ),
}

OWN_CELL = "own cell"
SAME_CODE = "same code as cell"
STOCK = "stock"


@dataclass(frozen=True)
class AscendRelease:
    """One vllm-ascend release and what ``auto`` does with it.

    Attributes:
        version: the exact version string on the index.
        vllm: the vLLM release it pairs with (its own number).
        status: :data:`OWN_CELL`, :data:`SAME_CODE` or :data:`STOCK`.
        cell: the cell whose tests cover it (``ascend-0.23.0``), None when stock.
        fingerprint: of its published ``NPUModelRunner`` KV methods, None
            where not computed (older than :data:`FIRST_FINGERPRINTED`, or not
            in :data:`FINGERPRINTS`).
        why: one sentence: why it is covered or left stock.
    """

    version: str
    vllm: str
    status: str
    cell: str | None
    fingerprint: str | None
    why: str

    @property
    def patched(self) -> bool:
        """Whether ``auto`` patches this release."""
        return self.status != STOCK

    def as_dict(self) -> dict:
        return {**asdict(self), "patched": self.patched}


def _base(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def _cell_name(release: str) -> str:
    return f"ascend-{release}"


@cache
def classify(version: str) -> AscendRelease:
    """The row of ``version`` (an exact version string, such as
    ``"0.23.0rc1"``), also for a version not on :data:`INDEX_VERSIONS`."""
    from packaging.version import InvalidVersion, Version

    base = _base(version)
    fingerprint = FINGERPRINTS.get(version)
    pin = CELL_PINS.get(base)
    if pin == version:
        return AscendRelease(version, base, OWN_CELL, _cell_name(base), fingerprint,
                             f"pinned by cell {_cell_name(base)}: its tests run this release")
    if pin is not None and fingerprint is not None and fingerprint == FINGERPRINTS.get(pin):
        return AscendRelease(version, base, SAME_CODE, _cell_name(base), fingerprint,
                             f"its NPUModelRunner KV cache methods are {pin}'s, which cell {_cell_name(base)} runs")
    try:
        older = Version(version) < Version(FIRST_FINGERPRINTED)
    except InvalidVersion:
        older = False
    if older:
        why = f"older than {FIRST_FINGERPRINTED}, the first release the plugin was built for"
    elif version not in FINGERPRINTS:
        why = "not on the package index when this plugin was released: its code was never compared"
    elif pin is not None:
        why = f"its NPUModelRunner KV cache methods differ from {pin}'s (cell {_cell_name(base)}), so no test ran them"
    else:
        why = _NO_CELL_BECAUSE.get(version, "no cell of its release; its NPUModelRunner KV cache code matches no cell's")
    return AscendRelease(version, base, STOCK, None, fingerprint, why)


def index_table() -> list[AscendRelease]:
    """:func:`classify` of every release on the index, oldest first."""
    return [classify(version) for version in INDEX_VERSIONS]


def nearest_cell(version: str) -> str:
    """The cell whose release is nearest to ``version`` (the newest at or
    below it, else the oldest), for warnings."""
    from packaging.version import InvalidVersion, Version

    releases = sorted(CELL_PINS, key=Version)
    try:
        below = [r for r in releases if Version(r) <= Version(_base(version))]
    except InvalidVersion:
        below = []
    release = below[-1] if below else releases[0]
    return f"{_cell_name(release)} (vllm-ascend {CELL_PINS[release]})"


def code_mismatch(module: Any, version: str) -> str | None:
    """None when the imported runner ``module`` (``vllm_ascend.worker.model_runner_v1``)
    has the code published as vllm-ascend ``version``; else why not, in one
    sentence (a locally changed install, or a release never fingerprinted)."""
    from .fingerprint import module_fingerprint

    expected = FINGERPRINTS.get(version)
    if expected is None:
        return f"vllm-ascend {version} was never fingerprinted"
    try:
        found = module_fingerprint(module, "NPUModelRunner", FINGERPRINTED_METHODS)
    except (OSError, TypeError, SyntaxError) as exc:
        return f"the source of {getattr(module, '__name__', module)} cannot be read ({exc})"
    if found != expected:
        return (
            f"the installed NPUModelRunner KV cache methods (fingerprint {found}) are not those published as "
            f"vllm-ascend {version} ({expected}): a changed install, which no test ran"
        )
    return None
