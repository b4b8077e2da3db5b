"""A deployment's engine config and its KV cache specs per rank, from a model
directory holding only ``config.json``: the model is built by vLLM's own
loader entry (``initialize_model``) on torch's meta device (no weights, no
memory), once per pipeline stage, and its specs collected as the runner
collects them (``GPUModelRunner.get_kv_cache_spec``).

Tensor, pipeline and context parallel sizes are vLLM's process groups for one
process with their size and rank set to the rank planned: layers read only
``world_size`` / ``rank_in_group`` / ``is_first_rank`` / ``is_last_rank``
while being built, and nothing is communicated on the meta device.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
from typing import Any

_DISTRIBUTED: list[bool] = []


@contextlib.contextmanager
def inspect_models_in_process():
    """vLLM's model registry inspects an architecture it has not cached in a
    subprocess (``registry._run_in_subprocess``: "to avoid initializing
    CUDA"), ~30 s per architecture on 2 CPU cores. Nothing here initialises a
    device: run the same inspection in this process."""
    from vllm.model_executor.models import registry

    from vllm_kv_strategies.deploy import standins

    def in_process(fn):
        try:
            return fn()
        except Exception as exc:  # the registry logs it and says "failed to be inspected": keep what was missing
            standins.record_missing(exc)
            raise

    stock = registry._run_in_subprocess
    registry._run_in_subprocess = in_process
    try:
        with standins.building():  # the model's module looks up the planned platform's kernels on import
            yield
    finally:
        registry._run_in_subprocess = stock


def init_distributed(vllm_config) -> None:
    """vLLM's process groups for one CPU process (gloo): the world once per
    process, the model-parallel groups (all of size 1) again for each config.
    Data parallel engines plan alike, each alone: the groups are made as for
    one engine (vLLM would otherwise wait for the other engines' ranks)."""
    parallel = vllm_config.parallel_config
    data_parallel, parallel.data_parallel_size = parallel.data_parallel_size, 1  # one engine: no DP rendezvous
    try:
        _init_groups(vllm_config)
    finally:
        parallel.data_parallel_size = data_parallel


def _init_groups(vllm_config) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import (
        destroy_model_parallel,
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )

    with set_current_vllm_config(vllm_config), _stdout_with_fileno():
        if not _DISTRIBUTED:
            with tempfile.NamedTemporaryFile(prefix="kv_plan_dist_", delete=False) as f:
                init_method = f"file://{f.name}"
            atexit.register(_remove, f.name)  # gloo's file store: used while the groups live, removed at exit
            init_distributed_environment(world_size=1, rank=0, distributed_init_method=init_method, local_rank=0, backend="gloo")
            _DISTRIBUTED.append(True)
        destroy_model_parallel()
        ensure_model_parallel_initialized(1, 1)


@contextlib.contextmanager
def _stdout_with_fileno():
    """vLLM 0.30 / 0.31's ``GroupCoordinator`` silences stdout through its file descriptor
    (``suppress_stdout``): where ``sys.stdout`` has none (a notebook, pytest's capsys), the process's
    own stdout stands in while the groups are made (was: "could not build ... UnsupportedOperation: fileno")."""
    try:
        sys.stdout.fileno()
        has_fileno = True
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation
        has_fileno = False
    saved = sys.stdout
    if not has_fileno:
        sys.stdout = sys.__stdout__
    try:
        yield
    finally:
        sys.stdout = saved


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _index_map(func, args, kwargs) -> bool:
    """Whether a device-less constructor makes vLLM's expert map (``determine_expert_map``:
    ``torch.full((global_num_experts,), -1, dtype=torch.int32)`` and the ``torch.arange`` filling
    it), which its init then reads (``torch.where``, ``.item()``): kept on the host, it is a few
    KiB; on the meta device the model cannot be built with ``--enable-expert-parallel``."""
    import torch

    if kwargs.get("dtype") not in (torch.int32, torch.int64) or func not in (torch.full, torch.arange):
        return False
    shape = args[0] if func is torch.full else ()
    return func is torch.arange or (isinstance(shape, (tuple, list)) and len(shape) == 1)


@contextlib.contextmanager
def on_meta(default: bool = True):
    """torch's meta device for every tensor a model or runner builds without a
    device or on an accelerator (``torch.empty(..., device=current_platform.device_type)``,
    e.g. vLLM's ``RMSNormGated``): torch's own ``DeviceContext`` sets only a
    missing ``device``; this mode also replaces an accelerator's, so that
    planning never touches one (or needs one). Host tensors asked for by name
    (``device="cpu"``: a runner's pinned staging buffers) stay on the host."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    constructors = _device_constructors()

    class _Meta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in constructors:
                kwargs.pop("pin_memory", None)  # pinning asks the accelerator for host memory
                device = kwargs.get("device")
                if device is None and _index_map(func, args, kwargs):
                    kwargs["device"] = "cpu"
                elif ((device is None and default) or isinstance(device, int)  # an index: an accelerator's
                      or (device is not None and torch.device(device).type not in ("cpu", "meta"))):
                    kwargs["device"] = "meta"
            elif func is torch.Tensor.pin_memory:
                return args[0]
            return func(*args, **kwargs)

    with _Meta():
        yield


@contextlib.contextmanager
def as_rank(sizes: dict[str, int], ranks: dict[str, int]):
    """vLLM's groups named in ``sizes`` (``"_TP"``, ``"_PP"``, ``"_DCP"``,
    ``"_PCP"``) seen as that size with this process at ``ranks[name]``."""
    from vllm.distributed import parallel_state

    saved = []
    try:
        for name, size in sizes.items():
            group = getattr(parallel_state, name, None)
            if group is None or size == 1:
                continue
            saved.append((group, group.rank, group.ranks, group.world_size, group.rank_in_group))
            group.ranks, group.world_size = list(range(size)), size
            group.rank = group.rank_in_group = ranks.get(name, 0)
        yield
    finally:
        for group, rank, group_ranks, size, in_group in saved:
            group.rank, group.ranks, group.world_size, group.rank_in_group = rank, group_ranks, size, in_group


def parallel_sizes(vllm_config) -> dict[str, int]:
    p = vllm_config.parallel_config
    return {
        "_TP": p.tensor_parallel_size,
        "_PP": p.pipeline_parallel_size,
        "_DCP": getattr(p, "decode_context_parallel_size", 1) or 1,
        "_PCP": getattr(p, "prefill_context_parallel_size", 1) or 1,
        # FusedMoE's expert parallel size is tensor x data parallel (FusedMoEParallelConfig.make reads get_dp_group)
        "_DP": p.data_parallel_size,
    }


def pipeline_problem(vllm_config, one_line=str) -> str | None:
    """What is wrong when a pipeline stage gets none of the model's layers
    (vLLM's ``get_pp_indices``, as each stage's model builds them: vLLM's
    planner then divides by that worker's page bytes, zero) or vLLM rejects
    ``VLLM_PP_LAYER_PARTITION`` (its words, through ``one_line``); None when
    every stage has layers."""
    from vllm.distributed.utils import get_pp_indices

    model = vllm_config.model_config  # vLLM 0.11 has no get_total_num_hidden_layers: the text config's count
    layers = model.get_total_num_hidden_layers() if hasattr(model, "get_total_num_hidden_layers") else model.hf_text_config.num_hidden_layers
    size = vllm_config.parallel_config.pipeline_parallel_size
    given = f" (VLLM_PP_LAYER_PARTITION={os.environ['VLLM_PP_LAYER_PARTITION']})" if "VLLM_PP_LAYER_PARTITION" in os.environ else ""
    try:
        empty = [rank for rank in range(size) if len(range(*get_pp_indices(layers, rank, size))) == 0]
    except ValueError as exc:  # VLLM_PP_LAYER_PARTITION that does not fit, in vLLM's words
        return f"vLLM rejects the pipeline partition{given}: {one_line(exc)}"
    if size == 1 or not empty:
        return None
    shown = ", ".join(map(str, empty[:6])) + (", ..." if len(empty) > 6 else "")
    return (f"--pipeline-parallel-size {size}{given}: {len(empty)} of the {size} stages ({shown}) "
            f"{'gets' if len(empty) == 1 else 'get'} none of the model's {layers} layers (vLLM's get_pp_indices); "
            "a stage without layers has no KV cache for vLLM to plan")


def collect_specs(vllm_config) -> tuple[dict[str, Any], dict[str, str]]:
    """``(specs, shared)`` of the model in ``vllm_config``'s static forward
    context, by V1's own ``GPUModelRunner.get_kv_cache_spec`` on a runner
    holding only what it reads; where V1 is gone (vLLM 0.34), by V2's
    ``get_kv_cache_spec`` / ``get_shared_kv_cache_layers`` (``gpu/attn_utils.py``),
    which V2's runner calls (it also marks a draft model at DCP 1 under a DCP target
    unsharded, which this does not)."""
    from vllm.config import set_current_vllm_config

    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ModuleNotFoundError:  # vLLM 0.34+: Model Runner V2 only
        from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec, get_shared_kv_cache_layers

        with set_current_vllm_config(vllm_config):
            return get_kv_cache_spec(vllm_config), dict(get_shared_kv_cache_layers(vllm_config))
    runner = GPUModelRunner.__new__(GPUModelRunner)
    runner.vllm_config, runner.shared_kv_cache_layers = vllm_config, {}
    with set_current_vllm_config(vllm_config):
        specs = GPUModelRunner.get_kv_cache_spec(runner)
    return specs, dict(runner.shared_kv_cache_layers)


def update_block_size(vllm_config) -> None:
    """What each worker does once its model is loaded (``WorkerProc.__init__``,
    ``UniProcExecutor``, 0.30+): the platform's ``update_block_size_for_backend``
    picks the block size the model's attention backends take and, for a
    hybrid, aligns the attention and Mamba pages (the block size can grow to
    hundreds of tokens). Releases without it size blocks in ``create_engine_config``."""
    from vllm.config import set_current_vllm_config
    from vllm.platforms import current_platform

    update = getattr(current_platform, "update_block_size_for_backend", None)
    if update is not None:
        with set_current_vllm_config(vllm_config):
            update(vllm_config)


def _set_default_torch_dtype():
    try:
        from vllm.utils.torch_utils import set_default_torch_dtype
    except ImportError:  # vLLM 0.11
        from vllm.model_executor.model_loader.utils import set_default_torch_dtype
    return set_default_torch_dtype


def build_stage(vllm_config, pp_rank: int, collect=collect_specs) -> tuple[dict[str, Any], dict[str, str], int, int, dict[str, Any]]:
    """The specs of pipeline stage ``pp_rank`` (TP rank 0: every TP rank of a
    stage has the same specs, which vLLM's planner asserts), the KV-sharing
    layers, and the rank's parameter count (elements) and bytes (numel x
    element size, in the dtypes vLLM creates them), the model built by
    ``initialize_model`` on the meta device, and its static forward context
    (layer name -> module). ``collect(vllm_config) -> (specs, shared)`` runs
    while the stage's layers are in the forward context (default:
    :func:`collect_specs`, V1's or V2's)."""
    from vllm_kv_strategies.deploy import standins

    with standins.building():  # vLLM's loader looks up its kernels on import
        from vllm.model_executor.model_loader.utils import initialize_model
    set_default_torch_dtype = _set_default_torch_dtype()

    forward_context = vllm_config.compilation_config.static_forward_context
    forward_context.clear()
    model_config = vllm_config.model_config
    with as_rank(parallel_sizes(vllm_config), {"_PP": pp_rank}), standins.building(), on_meta(default=False):
        with set_default_torch_dtype(model_config.dtype), on_meta():
            model = initialize_model(vllm_config=vllm_config, model_config=model_config)
            speculative = vllm_config.speculative_config
            draft = getattr(speculative, "draft_model_config", None)
            if draft is not None and draft is not model_config:
                model = [model, initialize_model(vllm_config=vllm_config, model_config=draft)]
        update_block_size(vllm_config)
        specs, shared = collect(vllm_config)
    models = model if isinstance(model, list) else [model]
    layers = dict(forward_context)
    forward_context.clear()
    return specs, shared, sum(p.numel() for m in models for p in m.parameters()), served_bytes(models, vllm_config), layers


def served_bytes(models, vllm_config) -> int:
    """The bytes of the models' parameters as served: numel x element size, except that with an
    online ``--quantization`` of :data:`~.budget.ONE_BYTE_ONLINE` the weights of the layers vLLM
    gave that method's quantisation (their ``quant_method`` is ``Fp8LinearMethod``,
    ``Fp8MoEMethod``, ...) count one byte each: vLLM builds them in the model's dtype and
    quantizes them after loading (``process_weights_after_loading``)."""
    from vllm_kv_strategies.deploy.budget import ONE_BYTE_ONLINE, online_quantization

    total = sum(p.numel() * p.element_size() for m in models for p in m.parameters())
    method = online_quantization(vllm_config)
    if method not in ONE_BYTE_ONLINE:
        return total
    quantized = [p for m in models for module in m.modules()
                 if type(getattr(module, "quant_method", None)).__name__.lower().startswith(method)
                 for name, p in module.named_parameters(recurse=False) if name.endswith("weight") and p.dim() >= 2]
    return total - sum(p.numel() * (p.element_size() - 1) for p in quantized)
