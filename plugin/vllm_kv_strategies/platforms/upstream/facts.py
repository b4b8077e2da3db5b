"""Upstream vLLM's model runners (0.30 - 0.34): what the plugin patches there.

vLLM 0.30 - 0.33 have two model runners; 0.34 deleted V1 (:data:`UPSTREAM_RELEASES`,
:func:`targets`). V1 (``vllm/v1/worker/gpu_model_runner.py``,
``GPUModelRunner``; the CPU runner subclasses it) builds the KV cache in
``initialize_kv_cache_tensors``. Model Runner V2 (``vllm/v1/worker/gpu/``),
vLLM's default wherever Triton works (``VllmConfig.use_v2_model_runner`` up to
0.33, the only GPU runner from 0.34; 0.34's x86 ``CPUModelRunner`` subclasses it), does
not subclass V1: its ``GPUModelRunner.initialize_kv_cache`` calls the function
``init_kv_cache`` of ``gpu/attn_utils.py``, imported by name into
``gpu/model_runner.py``. On both, the result must equal stock exactly, and
vLLM's own functions build it: the plugin plans and checks every layer before
anything is allocated, calls them, and reports what was built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from vllm_kv_strategies.versions import release_row
from vllm_kv_strategies.platforms.targets import PatchTarget


@dataclass(frozen=True)
class UpstreamRelease:
    """What one vLLM release's runners do, where that decides what the plugin
    patches: a row of :data:`UPSTREAM_RELEASES`, read through
    :func:`upstream_release` (no other module chooses a behaviour by vLLM's
    version number)."""

    #: The release the row was read from (and holds from).
    first: str
    #: Model Runner V1 (``vllm/v1/worker/gpu_model_runner.py``) exists; 0.34 deleted it (and
    #: ``cpu_model_runner.py``, ``VllmConfig.use_v2_model_runner``, ``VLLM_USE_V2_MODEL_RUNNER``).
    v1: bool
    #: The KV cache can be sized after warm-up (``extend_kv_cache``, ``vllm/v1/worker/gpu_worker.py``),
    #: and runners the plugin does not patch exist (:data:`NOT_COVERED`).
    resizable: bool
    #: ``auto`` patches V2 only where its code has the fingerprint the cell proved
    #: (:data:`V2_FINGERPRINTS`); False: the release itself is the proof (0.30 - 0.33).
    v2_fingerprinted: bool


#: One row per release whose runners differ from the row before, oldest first.
UPSTREAM_RELEASES: tuple[UpstreamRelease, ...] = (
    UpstreamRelease("0.30.0", v1=True, resizable=False, v2_fingerprinted=False),
    UpstreamRelease("0.34.0", v1=False, resizable=True, v2_fingerprinted=True),
)


@cache
def upstream_release(vllm_version: str | None) -> UpstreamRelease:
    """The row of :data:`UPSTREAM_RELEASES` that holds for ``vllm_version``
    (:func:`~vllm_kv_strategies.versions.release_row`: an unknown version reads
    the newest row)."""
    return release_row(vllm_version, UPSTREAM_RELEASES)

V1 = PatchTarget(
    name="upstream-v1",
    runner="GPUModelRunner (V1)",
    module="vllm.v1.worker.gpu_model_runner",
    attributes=("GPUModelRunner.initialize_kv_cache_tensors", "GPUModelRunner.initialize_kv_cache"),
    adapter="vllm_kv_strategies.platforms.upstream.v1:UpstreamV1Adapter",
    why=(
        "initialize_kv_cache_tensors: plan and check every layer's KV cache spec before vLLM "
        "allocates, fall back to stock in auto, report what was built. initialize_kv_cache: say "
        "which runner this worker is and warn when the KV cache was built without the plugin "
        "(a subclass that overrides the build)."
    ),
    mirrors=(
        "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.initialize_kv_cache_tensors "
        "(vLLM 0.30-0.33), which it calls unchanged"
    ),
    remove_when="vLLM exposes a KV cache allocation hook for plugins, or drops the V1 runner",
)

V2 = PatchTarget(
    name="upstream-v2",
    runner="GPUModelRunner (V2)",
    module="vllm.v1.worker.gpu.model_runner",
    attributes=("init_kv_cache", "GPUModelRunner.initialize_kv_cache"),
    adapter="vllm_kv_strategies.platforms.upstream.v2:UpstreamV2Adapter",
    why=(
        "init_kv_cache (as bound in gpu/model_runner.py): plan and check every layer before "
        "vLLM allocates, fall back to stock in auto, report what was built. "
        "GPUModelRunner.initialize_kv_cache: say which runner this worker is and warn when the "
        "KV cache was built without the plugin."
    ),
    mirrors="vllm/v1/worker/gpu/attn_utils.py init_kv_cache (vLLM 0.30-0.34), which it calls unchanged",
    remove_when="vLLM exposes a KV cache allocation hook for plugins",
)

V2_EXTEND = PatchTarget(
    name="upstream-v2-extend",
    runner="GPUModelRunner (V2)",
    module="vllm.v1.worker.gpu_worker",
    attributes=("extend_kv_cache",),
    adapter="vllm_kv_strategies.platforms.upstream.extend:UpstreamExtendAdapter",
    why=(
        "extend_kv_cache (as bound in gpu_worker.py): a resizable KV cache reserves address space in "
        "init_kv_cache and, after warm-up, commits the final num_blocks and binds new views outside it; "
        "the plugin checks the views vLLM finally binds against the committed tensors and reports them "
        "(reserved bytes, committed num_blocks)."
    ),
    mirrors="vllm/v1/worker/extensible_kv_cache.py extend_kv_cache (vLLM 0.34), which it calls unchanged",
    remove_when="vLLM exposes a KV cache allocation hook for plugins",
)

#: Every upstream runner of any release (:func:`targets` gives an installed release's).
TARGETS: tuple[PatchTarget, ...] = (V1, V2, V2_EXTEND)


#: Runners vLLM 0.34 has that the plugin does not patch, named in the worker's log when their
#: module loads: (module, runner, why).
NOT_COVERED: tuple[tuple[str, str, str], ...] = (
    ("vllm.v1.worker.cpu.standalone_model_runner", "StandaloneCPUModelRunner",
     "vLLM's runner for CPUs without Triton that are not x86 builds it with its own cpu/attn_utils.init_kv_cache, "
     "which the plugin does not patch"),
)


def not_covered(vllm_version: str | None) -> tuple[tuple[str, str, str], ...]:
    """:data:`NOT_COVERED` where the release has those runners (vLLM 0.34+)."""
    return NOT_COVERED if upstream_release(vllm_version).resizable else ()


def has_v1(vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version`` has Model Runner V1 (0.30 - 0.33; an unknown
    version counts as the newest, without V1)."""
    return upstream_release(vllm_version).v1


def targets(vllm_version: str | None) -> tuple[PatchTarget, ...]:
    """The runners vLLM ``vllm_version`` has, and so what the plugin patches there: whichever
    vLLM picks in a worker gets the plugin; a release without V1 names, waits for and requires
    no V1 target."""
    row = upstream_release(vllm_version)
    return tuple(t for t in TARGETS if (t.name != V1.name or row.v1) and (t.name != V2_EXTEND.name or row.resizable))


def custom_kv_cache_dtype(cache_config: Any) -> str | None:
    """The ``--kv-cache-dtype`` name when a platform registered it and left
    its kernels and layout to its own backend, else None.

    vLLM 0.33 and 0.34 let a platform register a cache dtype
    (``register_kv_cache_dtype`` / ``get_kv_cache_dtype_handler``,
    vllm/config/cache.py); a handler whose ``quant_mode()`` is
    ``KVQuantMode.CUSTOM`` gives the page whatever layout its backend's
    ``customize_spec`` publishes. ``CUSTOM`` is an alias of ``OCTAVE_K3V4``
    (both 12), so only the registered name says which dtype it is. 0.33's
    ``KVQuantMode.is_custom_mode`` (gone in 0.34) compared with ``CUSTOM`` as
    this does. Releases without the registry or ``CUSTOM`` (0.32 and before)
    have no such dtype.
    """
    try:
        from vllm.config.cache import get_kv_cache_dtype_handler
        from vllm.v1.kv_cache_interface import KVQuantMode
    except ImportError:
        return None
    custom = getattr(KVQuantMode, "CUSTOM", None)
    name = getattr(cache_config, "cache_dtype", None)
    handler = get_kv_cache_dtype_handler(name) if isinstance(name, str) and custom is not None else None
    if handler is None or handler.quant_mode() != custom:
        return None
    return name


#: What the V2 fingerprint covers from vLLM 0.34 on: (module, class or None, functions). The
#: allocation and binding V2's ``initialize_kv_cache`` calls, and the post-warm-up re-binding
#: of the resizable KV cache (``extend_kv_cache``), which the plugin checks after it.
V2_FINGERPRINTED: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("vllm.v1.worker.gpu.attn_utils", None, ("init_kv_cache", "bind_kv_caches")),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", ("initialize_kv_cache",)),
    ("vllm.v1.worker.extensible_kv_cache", None, ("extend_kv_cache",)),
)
#: :data:`V2_FINGERPRINTED`'s fingerprint (joined by ``+``) per release, from the cell's
#: installed wheel (``v2_fingerprint()`` in the cell upstream-0.34.0; a test there checks it).
V2_FINGERPRINTS: dict[str, str] = {
    "0.34.0": "46a1d3588c5399fa+dc109093fab37cc3+6dcfdba252a801a2",
}


def v2_fingerprint() -> str:
    """The installed release's fingerprint of :data:`V2_FINGERPRINTED` (imports vLLM)."""
    import importlib

    from vllm_kv_strategies.platforms.fingerprint import module_fingerprint

    return "+".join(module_fingerprint(importlib.import_module(name), cls, names) for name, cls, names in V2_FINGERPRINTED)


def v2_code_mismatch(vllm_version: str | None) -> str | None:
    """None when ``auto`` may patch the installed V2: a release whose row is not
    :attr:`~UpstreamRelease.v2_fingerprinted` (0.30 - 0.33), or one whose code has the
    fingerprint its cell proved; else why not, in one sentence."""
    if not upstream_release(vllm_version).v2_fingerprinted:
        return None
    from vllm_kv_strategies.versions import exact_release

    expected = V2_FINGERPRINTS.get(exact_release(vllm_version) or "")
    if expected is None:
        return f"the Model Runner V2 KV cache code of vLLM {vllm_version} was never fingerprinted"
    try:
        found = v2_fingerprint()
    except (ImportError, OSError, TypeError, SyntaxError) as exc:
        return f"the Model Runner V2 KV cache code cannot be read ({exc!r})"
    if found != expected:
        return (f"the installed Model Runner V2 KV cache code (fingerprint {found}) is not vLLM {vllm_version}'s "
                f"as its cell ran it ({expected}): a changed install, which no test ran")
    return None
