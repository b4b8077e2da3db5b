"""What an ``NPUWorker`` process sets up before plan builds a side's model and
KV cache in it: vllm-ascend's worker patches and the custom op a KV cache
depends on (:func:`worker_patches`), its per-process ACL graph parameters
cleared for each side's KV cache initialisation (:func:`fresh_graph_params`),
and, for planning only, vLLM's routed experts taking the keywords vllm-ascend's
MoE factory passes to its own (:func:`planning_routed_experts`).
"""

from __future__ import annotations

import contextlib


def worker_patches() -> None:
    """vllm-ascend's worker patches (``vllm_ascend.utils.adapt_patch()``:
    ``vllm_ascend.patch.worker``), applied as ``NPUWorker.__init__`` applies
    them before it loads the model, and of the custom ops its
    ``register_ascend_customop`` registers there, the one a KV cache depends
    on: ``AscendMultiHeadLatentAttention`` for vLLM's MLA layer
    (``MultiHeadLatentAttentionWrapper``; ``MultiHeadLatentAttention`` in 0.11),
    which passes vllm-ascend's MLA backend the modules it takes (``rotary_emb``, ...).
    Its other custom ops (linear layers, norms, rotary embeddings,
    ``AscendFusedMoE``) hold no KV cache and are built with the NPU's process
    groups: not registered. The engine configs are made before, as in the
    front-end process."""
    import importlib

    from vllm.model_executor import custom_op
    from vllm_ascend.utils import adapt_patch

    adapt_patch()
    for module in ("vllm_ascend.ops.mla", "vllm_ascend.models.layers.mla"):  # 0.13+, 0.11
        try:
            mla = importlib.import_module(module).AscendMultiHeadLatentAttention
        except (ImportError, AttributeError):
            continue
        registered = getattr(custom_op, "op_registry_oot", None)  # the module's from 0.18, CustomOp's before
        registered = custom_op.CustomOp.op_registry_oot if registered is None else registered
        name = mla.__bases__[0].__name__  # the vLLM layer it replaces, by the name vLLM looks it up
        if name not in registered:
            custom_op.CustomOp.register_oot(_decorated_op_cls=mla, name=name)
        return


@contextlib.contextmanager
def fresh_graph_params():
    """vllm-ascend's per-process ACL graph parameters (``compilation.acl_graph``:
    ``_graph_params`` and the draft ones, which ``set_graph_params`` sets once
    per worker process, at its KV cache initialisation) cleared for one more
    initialisation in this process, and restored after."""
    import importlib

    try:
        module = importlib.import_module("vllm_ascend.compilation.acl_graph")
    except ImportError:
        yield
        return
    names = [n for n in vars(module) if n.startswith("_") and "graph" in n and n.endswith("params")]
    saved = {n: getattr(module, n) for n in names}
    for name in names:
        setattr(module, name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@contextlib.contextmanager
def planning_routed_experts():
    """While the block runs, vLLM's ``RoutedExperts`` (a pluggable layer, 0.30+) is built through a
    stand-in that drops the keywords its ``__init__`` does not take, where no out-of-tree class
    replaces it: vllm-ascend's MoE factory (``patch_fused_moe``) passes ``n_shared_experts`` for its
    ``AscendRoutedExperts``, a custom op plan does not register (:func:`worker_patches`), and vLLM
    0.30.0's ``RoutedExperts`` refuses it. The experts' parameters are vLLM's own, on the meta
    device; they hold no KV cache. Named in plan's stand-ins line when it drops one; unregistered after."""
    import inspect

    try:
        from vllm.model_executor import custom_op
        from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    except ImportError:  # before vLLM 0.30: no pluggable routed experts
        yield
        return
    registry = getattr(custom_op, "op_registry_oot", None)
    parameters = inspect.signature(RoutedExperts.__init__).parameters
    if registry is None or "RoutedExperts" in registry or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        yield
        return
    from vllm_kv_strategies.deploy import standins

    class PlanningRoutedExperts(RoutedExperts):
        def __init__(self, *args, **kwargs):
            dropped = sorted(set(kwargs) - set(parameters))
            if dropped:
                standins.note(f"vLLM's RoutedExperts without {', '.join(dropped)} (vllm-ascend's MoE factory passes "
                              "them to its AscendRoutedExperts, an NPU custom op; the experts hold no KV cache)")
            super().__init__(*args, **{k: v for k, v in kwargs.items() if k in parameters})

    registry["RoutedExperts"] = PlanningRoutedExperts
    try:
        yield
    finally:
        if registry.get("RoutedExperts") is PlanningRoutedExperts:
            del registry["RoutedExperts"]
