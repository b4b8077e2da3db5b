"""vllm-ascend 0.11 / 0.13's hybrid attention + Mamba page sizing
(:data:`~vllm_kv_strategies.platforms.ascend.targets.HYBRID_SIZING`).

Where it runs: ``VllmConfig.__post_init__`` -> ``try_verify_and_update_config``
calls ``HybridAttentionMambaModelConfig.verify_and_update_config`` for hybrid
models, in the front-end process that builds the config (``EngineArgs.create_engine_config``,
after vLLM loaded its general plugins and the platform imported
``vllm_ascend.patch.platform.patch_mamba_config``, which installs vllm-ascend's
sizing there). The engine core plans its ``KVCacheConfig`` from the finished
``cache_config.block_size`` / ``mamba_page_size_padded``, and the workers lay
it out from that ``KVCacheConfig``, so sizing and layout agree by construction.

What it changes: vllm-ascend's sizing runs first, unchanged. Then, for a
hybrid of an allow-listed model type (``platforms.ascend.facts.SIZED_HYBRID_MODEL_TYPES``)
whose block size the user did not set, the attention block becomes
``ssm state bytes / K bytes per token`` and the Mamba page is padded to
``2 x ssm state bytes`` (:func:`~vllm_kv_strategies.platforms.ascend.layout.hybrid_kv.kv_block_sizing`):
a K page is the ssm state and an attention page is a padded Mamba page, so the
worker puts the ssm state of block j in K block j and the conv state at the
start of V block j (:func:`~vllm_kv_strategies.platforms.ascend.layout.hybrid_kv.states_in_kv_page`),
and allocates exactly what the planner budgeted. Qwen3-Next-80B: TP1 / TP2
640 -> 1024 tokens, TP4 384 -> 512, TP8 256 (unchanged: stock already gives
K page == ssm there).

A worker that builds its KV cache stock anyway (``auto`` falling back, or a
worker without the plugin) gets the same config: stock vllm-ascend builds it
(its hybrid block sizes are any multiple of 128 tokens, as its own 384 and
640), allocating 2x (0.13) or 4x (0.11) the budget as it does at its own
sizing: no worse than without the plugin.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies import envs
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.platforms.ascend.layout.hybrid_kv import kv_block_sizing
from vllm_kv_strategies.logger import PREFIX, logger, warn_once
from vllm_kv_strategies.core.strategies import FullAttentionStrategy, MambaStrategy, ModelDims, PagePart
from vllm_kv_strategies.platforms.adapter import RunnerAdapter


def kv_cache_dtype(vllm_config: Any) -> Any:
    """The attention KV cache's torch dtype, as vllm-ascend's sizing reads it:
    the model's dtype for ``cache_dtype="auto"``, else vLLM's
    ``STR_DTYPE_TO_TORCH_DTYPE`` entry (``vllm.utils.torch_utils`` in 0.13,
    ``vllm.utils`` in 0.11)."""
    cache_dtype = vllm_config.cache_config.cache_dtype
    if cache_dtype == "auto":
        return vllm_config.model_config.dtype
    try:
        from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    except ImportError:  # vLLM 0.11
        from vllm.utils import STR_DTYPE_TO_TORCH_DTYPE
    return STR_DTYPE_TO_TORCH_DTYPE[cache_dtype]


def k_bytes_per_token(vllm_config: Any) -> int:
    """K bytes of one token of one attention layer on this rank: the ``k``
    part of a one-token ``FullAttentionSpec`` (num_kv_heads x head_size x
    dtype size), with the heads and head size vllm-ascend's sizing uses
    (``model_config.get_num_kv_heads(parallel_config)``, ``get_head_size()``)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    model_config = vllm_config.model_config
    spec = FullAttentionSpec(
        block_size=1,
        num_kv_heads=model_config.get_num_kv_heads(vllm_config.parallel_config),
        head_size=model_config.get_head_size(),
        dtype=kv_cache_dtype(vllm_config),
    )
    return FullAttentionStrategy().page_parts(spec, ModelDims())[0].nbytes


def mamba_states(vllm_config: Any) -> tuple[PagePart, ...]:
    """The model's Mamba states per block (the ``mamba`` strategy's parts),
    from its model class's ``get_mamba_state_shape_from_config`` /
    ``get_mamba_state_dtype_from_config``, resolved as vllm-ascend's sizing
    resolves it (``ModelRegistry.resolve_model_cls``)."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.kv_cache_interface import MambaSpec

    model_config = vllm_config.model_config
    model_cls, _ = ModelRegistry.resolve_model_cls(model_config.architecture, model_config=model_config)
    spec = MambaSpec(
        shapes=tuple(model_cls.get_mamba_state_shape_from_config(vllm_config)),
        dtypes=tuple(model_cls.get_mamba_state_dtype_from_config(vllm_config)),
        block_size=model_config.max_model_len,
    )
    return MambaStrategy().page_parts(spec, ModelDims())


def why_stock(vllm_config: Any, user_block_size: int | None) -> str | None:
    """Why this config keeps vllm-ascend's sizing, or None: a block size the
    user set, a model type outside the allow-list, the 310P build, or a
    KV cache the sizing is not defined for (:func:`~vllm_kv_strategies.platforms.ascend.facts.sizing_refusal`)."""
    if user_block_size is not None:
        return f"the block size was set by the user ({user_block_size} tokens)"
    model_type = getattr(getattr(vllm_config.model_config, "hf_text_config", None), "model_type", None)
    if model_type not in facts.SIZED_HYBRID_MODEL_TYPES:
        return f"model type {model_type!r} is not one whose kernels were checked ({', '.join(sorted(facts.SIZED_HYBRID_MODEL_TYPES))})"
    if facts.built_for_310p():
        return "the 310P build (NZ format) is not handled"
    reason = facts.sizing_refusal(vllm_config)
    if reason is not None:
        return f"the sizing is defined for plain K/V pages, not {reason}"
    return None


class HybridSizingAdapter(RunnerAdapter):
    """Wraps vllm-ascend 0.11 / 0.13's ``verify_and_update_config`` (a
    classmethod of vLLM's ``HybridAttentionMambaModelConfig``)."""

    target = facts.HYBRID_SIZING

    def replacements(self) -> dict[str, Any]:
        return {self.target.attributes[0]: self.verify_and_update_config}

    def verify_and_update_config(self, stock: Any, cls: type, vllm_config: Any) -> None:
        """vllm-ascend's sizing, then the K page == ssm state sizing where it
        applies (see the module docstring). Sets ``cache_config.block_size``
        (tokens) and ``cache_config.mamba_page_size_padded`` (bytes) and logs
        one INFO line with the old and new values; leaves vllm-ascend's values
        with one INFO line when the config keeps them, with one warning when
        the model's states give a block size the release's kernels cannot take.

        Args:
            stock: vllm-ascend's classmethod, bound to ``cls``.
            cls: the class the call went through (``HybridAttentionMambaModelConfig``).
            vllm_config: the ``VllmConfig`` being built (``__post_init__``).

        Raises:
            Exception: what vllm-ascend's sizing raises, unchanged; with
                ``KV_STRATEGIES=on`` also an unexpected error of the plugin's
                own sizing (``auto`` logs it as a warning and keeps
                vllm-ascend's values). A block size the kernels cannot take
                is never an error.
        """
        cache_config = vllm_config.cache_config
        user_block_size = cache_config.block_size
        stock(vllm_config)
        if self.observing():
            return
        old = (cache_config.block_size, cache_config.mamba_page_size_padded)
        try:
            reason = why_stock(vllm_config, user_block_size)
            if reason is not None:
                logger.info("%s hybrid page sizing left as vllm-ascend sets it (attention block %s tokens): %s", PREFIX, old[0], reason)
                return
            k_token, states = k_bytes_per_token(vllm_config), mamba_states(vllm_config)
            block_size, padded = kv_block_sizing(k_token, states, facts.HYBRID_KERNEL_BLOCK_SIZE)
        except KVCacheLayoutError as exc:
            warn_once(
                f"{PREFIX} hybrid page sizing left as vllm-ascend sets it (attention block {old[0]} tokens; "
                f"the workers refuse K/V buffers beyond the config, so auto builds these tensors stock): no block size the "
                f"{facts.HYBRID_KERNEL_BLOCK_SIZE}-token kernels take puts a K page on the ssm state: {exc}"
            )
            return
        except Exception as exc:
            if envs.KV_STRATEGIES == "on":
                raise
            warn_once(f"{PREFIX} hybrid page sizing left as vllm-ascend sets it: {exc!r}")
            return
        if (block_size, padded) == old:
            logger.info(
                "%s hybrid page sizing: vllm-ascend's already puts a K page on the ssm state (attention block %d tokens, "
                "Mamba page padded to %d bytes); attention and Mamba layers share each KV cache tensor block by block",
                PREFIX,
                block_size,
                padded,
            )
            return
        cache_config.block_size, cache_config.mamba_page_size_padded = block_size, padded
        logger.info(
            "%s hybrid page sizing: attention block %s -> %d tokens, Mamba page padded %s -> %d bytes "
            "(K page = ssm state = %d bytes), so attention and Mamba layers share each KV cache tensor block by block",
            PREFIX,
            old[0],
            block_size,
            old[1],
            padded,
            padded // 2,
        )
