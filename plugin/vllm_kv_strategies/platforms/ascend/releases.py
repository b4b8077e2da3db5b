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
:func:`~vllm_kv_strategies.platforms.fingerprint.method_fingerprint` from each
release's ``vllm_ascend/worker/model_runner_v1.py`` as published
(``python tools/ascend_releases.py`` prints :data:`FINGERPRINTS`); at patch
time the adapter computes the installed module's fingerprint again and leaves
the runner stock in ``auto`` when it differs (a locally changed install).
Ascend's own Model Runner V2 (0.30+) is gated the same way, on its module
functions (:data:`V2_FINGERPRINTED_FUNCTIONS`, :data:`V2_FINGERPRINTS`): only
the releases listed there get V2 built by the plugin in ``auto``.

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from vllm_kv_strategies.versions import release

#: ``NPUModelRunner`` methods whose code a proof covers: the ones the plugin
#: replaces or wraps on some release, the spec collection it builds from, and
#: the runner methods it calls (the attention group iterator, 0.11's format
#: cast, 0.30's C8 MXFP check and V-scale fill).
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
    "_is_c8_mxfp_kv_cache",
    "_fill_c8_mxfp_v_scale_caches",
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
    "0.11.0rc0": "681316fbfbf79e70",
    "0.11.0rc1": "2afd096a606ec6c1",
    "0.11.0rc2": "2afd096a606ec6c1",
    "0.11.0rc3": "3b4b56b50e767ff4",
    "0.11.0": "3b4b56b50e767ff4",
    "0.12.0rc1": "b9b323225a1a7071",
    "0.13.0rc1": "1349f5cfe926f90c",
    "0.13.0rc2": "2f884dede55453c8",
    "0.13.0rc3": "86b68eee0d10e39f",
    "0.13.0": "2f884dede55453c8",
    "0.14.0rc1": "bfc3bcade6474f53",
    "0.15.0rc1": "e2aaf0713a2b5000",
    "0.16.0rc1": "63cfd479a73b4a4a",
    "0.17.0rc1": "a62a19d39a50ec31",
    "0.18.0rc1": "b654fe1c6d2ff9be",
    "0.18.0": "04d65730fac04175",
    "0.19.1rc1": "cfd9c0be831fe8d7",
    "0.20.2rc1": "2ce319370a444d2b",
    "0.21.0rc1": "ef67e477d452c44e",
    "0.22.1rc1": "910b25e1b184051f",
    "0.23.0rc1": "3963c119882689fe",
    "0.23.0": "3963c119882689fe",
    "0.23.0.post1": "3963c119882689fe",
    "0.24.0rc1": "608b020746cf8588",
    "0.25.1rc1": "ddf1f32e3c263317",
    "0.26.0rc1": "d7d1c64c0e44a457",
    "0.27.1rc1": "434a92d94615450a",
    "0.28.0rc1": "72887329e1509075",
    "0.29.0rc1": "993bfd2cd58a06c3",
    "0.30.0rc1": "ace6c4481994f78f",
    "0.30.0rc2": "ace6c4481994f78f",
}

#: Ascend Model Runner V2 (``vllm_ascend.worker.v2.attn_utils``): the module
#: functions the plugin replaces (``_allocate_kv_cache``, ``_reshape_kv_cache_v2``),
#: their caller and the view helpers whose layouts it reproduces.
V2_FINGERPRINTED_FUNCTIONS: tuple[str, ...] = (
    "_allocate_kv_cache",
    "_reshape_kv_cache_v2",
    "allocate_kv_cache_main",
    "_get_layer_kv_cache_specs",
    "_get_attention_kv_cache_dims",
    "_reshape_combined_attention_kv_cache",
    "_reshape_mamba_kv_cache",
    "_adjust_dsv4_kv_layout",
    "_allocate_int8_cache_tensor",
    "_align_memory",
)

#: The fingerprint of :data:`V2_FINGERPRINTED_FUNCTIONS` in the releases whose
#: V2 the plugin builds: the release a cell runs, 0.30.0rc2 (cell ascend-0.30.0),
#: computed from its installed ``attn_utils.py`` with ``method_fingerprint(source,
#: None, V2_FINGERPRINTED_FUNCTIONS)`` (``python tools/ascend_releases.py`` prints
#: every 0.30+ release's). Any other release (0.30.0rc1 included) leaves V2
#: stock in ``auto``.
V2_FINGERPRINTS: dict[str, str] = {
    "0.30.0rc2": "9b1ccc589dd6a228",
}

#: Releases with no cell of their own, and the measured reason.
_NO_CELL_BECAUSE: dict[str, str] = {
    "0.26.0rc1": (
        "no cell yet: its KV cache code is 0.23's shared_by form with 0.30's new spec classes "
        "(AscendSFAIndexerCacheSpec, store_on_host), which no cell runs in that form"
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
    """:func:`vllm_kv_strategies.versions.release`."""
    return release(version)


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


def _mismatch(module: Any, version: str, expected: str | None, what: str, class_name: str | None,
              names: tuple[str, ...]) -> str | None:
    from vllm_kv_strategies.platforms.fingerprint import module_fingerprint

    if expected is None:
        return f"the {what} of vllm-ascend {version} were never fingerprinted"
    try:
        found = module_fingerprint(module, class_name, names)
    except (OSError, TypeError, SyntaxError) as exc:
        return f"the source of {getattr(module, '__name__', module)} cannot be read ({exc})"
    if found != expected:
        return (
            f"the installed {what} (fingerprint {found}) are not those published as vllm-ascend {version} ({expected}): "
            "a changed install, which no test ran"
        )
    return None


def code_mismatch(module: Any, version: str) -> str | None:
    """None when the imported runner ``module`` (``vllm_ascend.worker.model_runner_v1``)
    has the code published as vllm-ascend ``version``; else why not, in one
    sentence (a locally changed install, or a release never fingerprinted)."""
    if version not in FINGERPRINTS:
        return f"vllm-ascend {version} was never fingerprinted"
    return _mismatch(module, version, FINGERPRINTS[version], "NPUModelRunner KV cache methods",
                     "NPUModelRunner", FINGERPRINTED_METHODS)


def v2_code_mismatch(module: Any, version: str) -> str | None:
    """:func:`code_mismatch` for Ascend Model Runner V2's allocation module
    (``vllm_ascend.worker.v2.attn_utils``) against :data:`V2_FINGERPRINTS`."""
    return _mismatch(module, version, V2_FINGERPRINTS.get(version),
                     "Ascend Model Runner V2 KV cache functions", None, V2_FINGERPRINTED_FUNCTIONS)


#: ``NPUWorker._scale_kv_cache_memory_for_multi_group`` (``vllm_ascend/worker/worker.py``),
#: which the plugin wraps from 0.30 (:data:`~vllm_kv_strategies.platforms.ascend.targets.MULTI_GROUP_BUDGET`),
#: per release it was read in.
BUDGET_FINGERPRINTS: dict[str, str] = {
    "0.30.0rc1": "1e08571fb28cd52e",
    "0.30.0rc2": "1e08571fb28cd52e",
}
BUDGET_METHODS: tuple[str, ...] = ("_scale_kv_cache_memory_for_multi_group",)


def budget_code_mismatch(module: Any, version: str) -> str | None:
    """:func:`code_mismatch` for the worker module (``vllm_ascend.worker.worker``)'s
    multi-group KV cache budget step against :data:`BUDGET_FINGERPRINTS`."""
    return _mismatch(module, version, BUDGET_FINGERPRINTS.get(version), "NPUWorker KV cache budget method",
                     "NPUWorker", BUDGET_METHODS)
