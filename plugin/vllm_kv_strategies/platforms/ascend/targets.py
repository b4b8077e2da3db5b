"""What the plugin patches on each vllm-ascend release: one
:class:`~vllm_kv_strategies.platforms.targets.PatchTarget` per patched runner or
config class (module, methods, why, the upstream code it mirrors, when to
remove it), and which of them a release gets.

The release's layout facts are in :mod:`vllm_kv_strategies.platforms.ascend.facts`
(which re-exports these names).
"""

from __future__ import annotations

from vllm_kv_strategies.platforms.ascend.runner_releases import own_release, runner_release
from vllm_kv_strategies.platforms.targets import PatchTarget

_WHY = (
    "vllm-ascend's KV cache initialisation chooses layouts by layer-name substrings and model "
    "flags, and allocates one buffer per layer where layers share a KVCacheTensor; the strategies "
    "build each layer from its own spec, share buffers as the KVCacheConfig says, and check "
    "everything before allocating. initialize_kv_cache is wrapped only to warn when the KV cache was "
    "built without the plugin (a runner subclass overriding the build: NPUModelRunner310 on 310P)"
)
_REMOVE_WHEN = "vllm-ascend builds its KV cache from per-spec strategies itself"

#: vllm-ascend 0.13+: the initialisation and its two halves (raw buffers, typed views).
SPLIT_INIT = PatchTarget(
    name="ascend",
    runner="NPUModelRunner",
    module="vllm_ascend.worker.model_runner_v1",
    attributes=(
        "NPUModelRunner.initialize_kv_cache_tensors",
        "NPUModelRunner._allocate_kv_cache_tensors",
        "NPUModelRunner._reshape_kv_cache_tensors",
        "NPUModelRunner.initialize_kv_cache",
    ),
    adapter="vllm_kv_strategies.platforms.ascend.runner:AscendAdapter",
    why=_WHY,
    mirrors=(
        "vllm_ascend/worker/model_runner_v1.py NPUModelRunner.initialize_kv_cache_tensors, "
        "_allocate_kv_cache_tensors, _reshape_kv_cache_tensors (0.13-0.30); buffers shared per "
        "KVCacheTensor as vllm-ascend PR #6887 does for hybrid models"
    ),
    remove_when=_REMOVE_WHEN,
)
#: vllm-ascend 0.11: no halves; ``initialize_kv_cache`` calls one of three
#: complete initialisations (sparse MLA if ``use_sparse``, MLA if the model is
#: DeepSeek MLA, else the general one).
THREE_INITS = PatchTarget(
    name="ascend-0.11",
    runner="NPUModelRunner",
    module=SPLIT_INIT.module,
    attributes=(
        "NPUModelRunner.initialize_kv_cache_tensors",
        "NPUModelRunner.initialize_kv_cache_tensors_deepseek_mla",
        "NPUModelRunner.initialize_kv_cache_tensors_deepseek_sfa",
        "NPUModelRunner.initialize_kv_cache",
    ),
    adapter=SPLIT_INIT.adapter,
    why=_WHY,
    mirrors=(
        "vllm_ascend/worker/model_runner_v1.py NPUModelRunner.initialize_kv_cache_tensors, "
        "initialize_kv_cache_tensors_deepseek_mla, initialize_kv_cache_tensors_deepseek_sfa (0.11)"
    ),
    remove_when=_REMOVE_WHEN,
)

_V2_REMOVE_WHEN = "vllm-ascend builds its Model Runner V2 KV cache from per-spec strategies itself"
#: vllm-ascend 0.30: Ascend's own Model Runner V2 (opt-in), its KV cache
#: allocation: the two module functions ``allocate_kv_cache_main`` looks up at
#: call time (:mod:`vllm_kv_strategies.platforms.ascend.v2_layout`).
ASCEND_V2_ALLOCATION = PatchTarget(
    name="ascend-v2",
    runner="NPUModelRunner (Ascend V2)",
    module="vllm_ascend.worker.v2.attn_utils",
    attributes=("_allocate_kv_cache", "_reshape_kv_cache_v2"),
    adapter="vllm_kv_strategies.platforms.ascend.runner_v2:AscendV2AllocationAdapter",
    why=(
        "vllm-ascend 0.30's Model Runner V2 chooses each layer's buffers and views by spec class, backend and "
        "model flags; the replacement builds them from the strategies' parts, checked before anything is "
        "allocated, in V2's own forms (K|V interleaved per kernel block with the physical page as pitch, "
        "separate K/V, the hybrid backing), refuses by name what it does not build, and reports what was built"
    ),
    mirrors=(
        "vllm_ascend/worker/v2/attn_utils.py _allocate_kv_cache, _reshape_kv_cache_v2, "
        "_reshape_combined_attention_kv_cache, _reshape_mamba_kv_cache (0.30.0rc2)"
    ),
    remove_when=_V2_REMOVE_WHEN,
)
#: vllm-ascend 0.30: Ascend's Model Runner V2 itself, wrapped only to warn when
#: its KV cache was built without :data:`ASCEND_V2_ALLOCATION` (hisparse).
ASCEND_V2 = PatchTarget(
    name="ascend-v2-runner",
    runner="NPUModelRunner (Ascend V2)",
    module="vllm_ascend.worker.v2.model_runner",
    attributes=("NPUModelRunner.initialize_kv_cache",),
    adapter="vllm_kv_strategies.platforms.ascend.runner_v2:AscendV2Adapter",
    why=(
        "one warning per worker when the V2 runner built its KV cache without vllm_ascend.worker.v2.attn_utils."
        "_allocate_kv_cache (hisparse), so that no log line claims the plugin built it"
    ),
    mirrors="vllm_ascend/worker/v2/model_runner.py NPUModelRunner.initialize_kv_cache (0.30), called unchanged",
    remove_when=_V2_REMOVE_WHEN,
)

#: vllm-ascend 0.30: the worker's KV cache budget for multi-group models, left
#: unscaled where the plugin builds vLLM's overlay of the groups.
MULTI_GROUP_BUDGET = PatchTarget(
    name="ascend-multi-group-budget",
    runner="NPUWorker (multi-group KV cache budget)",
    module="vllm_ascend.worker.worker",
    attributes=("NPUWorker._scale_kv_cache_memory_for_multi_group",),
    adapter="vllm_kv_strategies.platforms.ascend.worker_budget:MultiGroupBudgetAdapter",
    why=(
        "stock vllm-ascend 0.30 gives every layer of a multi-group model (gpt-oss, Gemma 3) a private buffer and "
        "scales the KV cache budget down by the largest group's page bytes over all layers' (0.5, about 1/6) so "
        "that they fit; the plugin builds vLLM's overlay of the groups in one backing instead, so the budget "
        "stays whole where (and only where) the plugin will build that overlay"
    ),
    mirrors=(
        "vllm_ascend/worker/worker.py NPUWorker._scale_kv_cache_memory_for_multi_group (0.30), called first; "
        "vLLM PR #51718's overlay of KV cache groups (vllm/v1/kv_cache_interface.py KVCacheTensor)"
    ),
    remove_when="vllm-ascend builds vLLM's overlay for multi-group models itself",
)

#: vllm-ascend 0.11 / 0.13: the hybrid attention + Mamba page sizing, in the
#: front-end process that builds the ``VllmConfig`` (``__post_init__`` ->
#: ``try_verify_and_update_config``; the engine core and the workers receive
#: the finished config).
HYBRID_SIZING = PatchTarget(
    name="ascend-hybrid-sizing",
    runner="HybridAttentionMambaModelConfig (hybrid page sizing)",
    module="vllm_ascend.patch.platform.patch_mamba_config",
    # the class attribute this vllm-ascend module assigns its sizing to (its last line)
    attributes=("vllm.model_executor.models.config.HybridAttentionMambaModelConfig.verify_and_update_config",),
    adapter="vllm_kv_strategies.platforms.ascend.sizing:HybridSizingAdapter",
    why=(
        "vllm-ascend 0.11 / 0.13 size the attention page to the padded Mamba page, so attention "
        "and Mamba layers of one KVCacheTensor cannot share its bytes block by block and the "
        "attention layer needs K/V buffers of its own (2x the planner's budget; stock 0.11 4x). "
        "When the user set no block size, the replacement sizes a K page to the ssm state and "
        "pads the Mamba page to 2 K pages, and the worker layout puts the states into the K/V "
        "blocks of the same index (one buffer per tensor, exactly the budget)"
    ),
    mirrors=(
        "vllm_ascend/patch/platform/patch_mamba_config.py verify_and_update_config (0.11, 0.13), "
        "which it calls first; the block size rule of the same function in vllm-ascend 0.18 "
        "(PR #6887, commit d39d80830c: K page == ssm page, a multiple of the 128-token kernel block)"
    ),
    remove_when="vllm-ascend 0.11 and 0.13 leave the support matrix (0.18 sizes hybrid pages this way itself)",
)


def target(vllm_ascend: str | None = None) -> PatchTarget:
    """The ``NPUModelRunner`` declaration of a vllm-ascend release (default:
    the installed one): :data:`SPLIT_INIT` where the runner splits its
    initialisation in two halves (0.13+, :attr:`.RunnerRelease.split_init`),
    else :data:`THREE_INITS`."""
    return SPLIT_INIT if runner_release(vllm_ascend).split_init else THREE_INITS


def hybrid_sizing_target(vllm_ascend: str | None = None) -> PatchTarget | None:
    """:data:`HYBRID_SIZING` on vllm-ascend 0.11 and 0.13 (default: the
    installed release), else None (0.18+ size hybrid pages block-consistently
    themselves; other releases were never checked): the
    :attr:`.RunnerRelease.hybrid_sizing` row's own minor release."""
    row = own_release(vllm_ascend)
    return HYBRID_SIZING if row is not None and row.hybrid_sizing else None


def targets(vllm_ascend: str | None = None) -> tuple[PatchTarget, ...]:
    """Everything the plugin patches on a vllm-ascend release: the runner
    (:func:`target`), on 0.11 / 0.13 the hybrid page sizing, from 0.30
    Ascend's Model Runner V2 (its allocation and its runner) and the
    worker's multi-group KV cache budget."""
    sizing = hybrid_sizing_target(vllm_ascend)
    v2 = (ASCEND_V2_ALLOCATION, ASCEND_V2, MULTI_GROUP_BUDGET) if runner_release(vllm_ascend).runner_v2 else ()
    return (target(vllm_ascend),) + ((sizing,) if sizing is not None else ()) + v2


#: Every target the plugin may patch on some vllm-ascend release (what ``uninstall`` restores).
ALL_TARGETS: tuple[PatchTarget, ...] = (SPLIT_INIT, THREE_INITS, HYBRID_SIZING, ASCEND_V2_ALLOCATION, ASCEND_V2,
                                        MULTI_GROUP_BUDGET)
