"""What vLLM's memory profiling takes from the KV cache besides the weights, term by term.

A worker's KV cache budget is ``total x gpu_memory_utilization - non-KV memory``, where vLLM
measures the non-KV memory once the weights are loaded (``Worker.determine_available_memory``,
``vllm/v1/worker/gpu_worker.py``; vllm-ascend's ``NPUWorker.determine_available_memory``):

* the weights (``Model loading took ...``: :mod:`.budget` gives them);
* the transient peak of ``profile_run``: the dummy forward of ``max_num_batched_tokens`` tokens
  (``GPUModelRunner._dummy_run``), then the sampler on ``max_num_seqs`` rows
  (``_dummy_sampler_run``); one after the other, so the larger of the two counts;
* what the runtime allocated since the worker's first memory snapshot and keeps (cuBLAS and
  attention workspaces, the code of compiled kernels, collective buffers): ``non_torch_increase``;
* on CUDA / ROCm from vLLM 0.21 on, the memory of the CUDA graphs it will capture
  (``GPUModelRunner.profile_cudagraph_memory``, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``,
  default on since 0.21): nothing with ``--enforce-eager``; vllm-ascend 0.23 and 0.30 subtract no
  graph term (0.21 and 0.22 subtract vLLM's estimate of their ACL graphs, which is not computed
  here: a term of 0 bytes says so);
* on vllm-ascend, the ``mc2`` communicator's buffers where ``HCCL_BUFFSIZE`` sizes them (:mod:`.hccl`).

Each term is computed here from the model's shape (:class:`~.shape.Shape`, the text model of a
Hugging Face ``config.json``, in elements) and the engine (:class:`Engine`), in bytes per worker, with
the function it stands for. Where vLLM measures what no formula gives (the runtime's own memory,
a captured graph's fixed cost), the constant says which public logs it was read from
(tests/deploy/startup_logs, ``benchmarks/startup_logs.py``).
"""

from __future__ import annotations

import dataclasses
import os

from packaging.version import Version

from vllm_kv_strategies.deploy.hccl import HCCL_DEFAULT_BUFFSIZE, ascend_family, buffsize_from_env, mc2_buffers
from vllm_kv_strategies.deploy.shape import Shape

GIB, MIB = 2**30, 2**20

#: Bytes per logit the sampler's dummy run holds at its peak (``_dummy_sampler_run``: the logits in
#: the model's dtype, their fp32 copy, then top-k / top-p), by the path the platform takes.
#: ``flashinfer`` (CUDA): measured, 15.4 = the torch peak of vLLM 0.19's profile run on an H100 over
#: max_num_seqs x vocab (1.89 GiB for 1,024 x 128,256, Llama-3.1-8B; 2.21 GiB for 1,024 x 151,936,
#: Qwen3-8B: llm-d-planner's logs, tests/deploy/startup_logs/cuda-llmd-*). ``npu`` (vllm-ascend's
#: sampler, its fused top-k / top-p op): the logits in bf16 and their fp32 copy, 6, the most the
#: quickstart log allows (0.22 GiB of peak activation for Qwen3-0.6B's 256 x 151,936 logits, which
#: its forward of 8,192 tokens fills alone). ``sort`` (``apply_top_k_top_p_pytorch``: ROCm and the
#: rest): derived: bf16 and fp32 logits, fp32 sorted values, int64 indices, the fp32 softmax.
SAMPLER_BYTES = {"flashinfer": 15.4, "npu": 2 + 4, "sort": 2 + 4 + 4 + 8 + 4}
#: ``VLLM_FUSED_MOE_CHUNK_SIZE``: the fused-MoE kernels work on at most this many tokens at once.
MOE_CHUNK = 16 * 1024
#: Tokens per chunk of the chunked delta-rule / SSD scans (``chunk_size`` 64 of FLA's kernels;
#: Mamba-2 uses the config's ``mamba_chunk_size``): one fp32 state per head and chunk is live.
SCAN_CHUNK = 64
#: What the runtime allocates after the worker's first memory snapshot and keeps
#: (``non_torch_increase``: cuBLAS / attention workspaces, kernels' code; at tensor parallel > 1
#: the collective's buffers, allocated on its first all-reduce in the profile run), bytes, by
#: (platform, tensor parallel > 1). CUDA: "non-torch forward increase memory" of vLLM 0.19 on H100s:
#: 0.25-0.27 GiB in the six TP 1 logs, 2.07-2.17 GiB in the five TP 2 / TP 4 logs (llm-d-planner's);
#: ROCm and any other platform take CUDA's. NPU: 0.03 GiB at TP 1 (vllm-ascend's quickstart log on an A3); at TP > 1
#: HCCL's buffers are taken as NCCL's (GLM-5.1 at DP 2 x TP 8 logs 2.07 GiB, vllm-ascend #10700), at
#: HCCL's default size (:data:`.hccl.HCCL_DEFAULT_BUFFSIZE`; beyond it: :func:`.hccl.mc2_buffers`).
RUNTIME = {("cuda", False): round(0.25 * GIB), ("cuda", True): round(2.1 * GIB),
           ("npu", False): round(0.03 * GIB), ("npu", True): round(2.1 * GIB)}
#: vllm-ascend before 0.18 (``NPUWorker.determine_available_memory`` of worker_v1.py, 0.9 - 0.13)
#: subtracts every byte on the device outside torch, the NPU context included, not what grew since
#: a snapshot: 1 GiB at TP 1, from its logs (Llama-3.1-8B on an A3, Qwen3-1.7B on a 910B1, Qwen3-0.6B
#: at PP 2: 0.7 - 1.0 GiB beyond the other terms; a 310P's 1.7 - 3.0 GiB).
NPU_WHOLE_DEVICE = GIB
#: Each captured CUDA graph's own memory beyond the pool its largest size's activations fill, bytes
#: per graph (each piece of a piecewise capture is one): 0.42 MiB, the median over the
#: "Estimated CUDA graph memory" lines of llm-d-planner's vLLM 0.19 H100 logs of models without MLA
#: (0.30 - 0.59 MiB); with MLA, 0.85 MiB (DeepSeek-V2-Lite 0.92, Kimi-VL-A3B 0.78 MiB).
PER_GRAPH, PER_GRAPH_MLA = round(0.42 * MIB), round(0.85 * MIB)


@dataclasses.dataclass(frozen=True)
class Engine:
    """The engine arguments the terms depend on: the platform (``cuda``, ``rocm``, ``npu``), vLLM's
    release, tensor / pipeline parallel sizes, ``max_num_batched_tokens``, ``max_num_seqs``, and
    the CUDA graphs captured: how many (0 with ``--enforce-eager``) and the largest's tokens;
    ``samples``: the worker runs the sampler (the last pipeline stage; plan's estimate assumes
    every worker does, the smallest budget being the one vLLM plans with); ``expert_parallel``:
    experts are whole on each rank and see the tokens of the ``dp`` data-parallel ranks;
    ``hccl_buffsize``: ``HCCL_BUFFSIZE`` on the NPU, MB; ``soc``: the Ascend card's family (``A2``:
    910B, ``A3``, ``A5``, ``310P``), as vllm-ascend's ``get_ascend_device_type`` names it; ``lora``:
    LoRA adapters are enabled."""

    platform: str
    vllm: str
    tp: int = 1
    pp: int = 1
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    graphs: int = 0
    largest_graph: int = 0
    samples: bool = True
    expert_parallel: bool = False
    dp: int = 1
    hccl_buffsize: int = HCCL_DEFAULT_BUFFSIZE
    soc: str = "A2"
    lora: bool = False

    @property
    def runtime(self) -> tuple[int, str]:
        """(bytes, source) of the runtime's own memory (:data:`RUNTIME`, :data:`NPU_WHOLE_DEVICE`)."""
        parallel = self.tp > 1
        if self.platform == "npu" and not parallel and Version(self.vllm) < Version("0.18"):
            return NPU_WHOLE_DEVICE, "the NPU's memory outside torch, context included (vllm-ascend < 0.18 counts it all)"
        return RUNTIME.get((self.platform, parallel), RUNTIME[("cuda", parallel)]), (
            f"{self.platform} workspaces and kernels' code" + (", the collective's buffers (TP > 1)" if parallel else "")
            + ", as startup logs measure it")

    @property
    def subtracts_graphs(self) -> bool:
        """vLLM >= 0.21 on CUDA / ROCm subtracts its CUDA graph estimate from the KV cache."""
        return self.platform in ("cuda", "rocm") and self.graphs > 0 and Version(self.vllm) >= Version("0.21")


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, ceiling: int = 512) -> list[int]:
    """vLLM's default CUDA graph capture sizes (``VllmConfig._set_cudagraph_sizes``): 1, 2, 4, then
    multiples of 8 below 256 and of 16 from 256, up to ``min(2 x max_num_seqs, ceiling)`` and
    ``max_num_batched_tokens``."""
    top = min(2 * max_num_seqs, ceiling, max_num_batched_tokens)
    return [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, ceiling + 1, 16)] if s <= top]


def graph_count(sizes: list[int], layers: int, max_num_seqs: int, full_decode: bool = True) -> int:
    """Graphs captured: each size once per piece of the piecewise graph (the attention layers
    split it: ``layers + 1`` pieces), and with ``FULL_AND_PIECEWISE`` (vLLM's default mode) one
    full graph per decode size up to ``max_num_seqs``."""
    return len(sizes) * (layers + 1) + (sum(1 for s in sizes if s <= max_num_seqs) if full_decode else 0)


def moe_workspace(shape: Shape, engine: "Engine", tokens: int) -> int:
    """Bytes of the fused-MoE workspaces (``FusedMoEModularKernel``'s): the top-k expanded tokens'
    gate / up output (or the hidden size, the larger) and activation, ``moe_intermediate / tp``
    wide (whole with expert parallel, where each rank takes the tokens of the data-parallel
    ranks), for up to :data:`MOE_CHUNK` tokens. vLLM keeps them between calls, so the sampler's
    dummy run finds them allocated."""
    if not shape.experts:
        return 0
    inner = shape.moe_intermediate // (1 if engine.expert_parallel else engine.tp)
    rows = min(tokens * (engine.dp if engine.expert_parallel else 1), MOE_CHUNK)
    return rows * shape.topk * (max(2 * inner, shape.hidden) + inner) * shape.dtype_bytes


def forward_peak(shape: Shape, engine: "Engine", tokens: int) -> int:
    """Bytes the dummy forward of ``tokens`` tokens holds at its peak on one tensor-parallel rank
    (``GPUModelRunner._dummy_run``): the residual stream (the embedding output, hidden states,
    residual, normed input, the layer's output: 5 x tokens x hidden, x ``streams``), plus the widest layer's
    intermediates: attention's qkv and output projections; a dense MLP's gate / up output and
    its activation (3 x intermediate / tp); a MoE's fp32 router logits, :func:`moe_workspace` and
    the shared expert; MLA's query, up-projected key / value and concatenated key
    (``MLACommonImpl._forward_prefill``); a linear-attention or Mamba layer's input projection and
    the fp32 states of its chunked scan. Elements x the model's dtype size."""
    t, h, d, tp = tokens, shape.hidden, shape.dtype_bytes, engine.tp
    heads = max(shape.heads // tp, 1)
    kv_heads = max(shape.kv_heads // tp, 1)
    widest = [(t * (heads + 2 * kv_heads) * shape.head_dim + t * heads * shape.head_dim) * d]
    if shape.intermediate and (not shape.experts or shape.mla):
        widest.append(t * 3 * shape.intermediate // tp * d)
    if shape.experts:
        router = t * shape.experts * 4
        widest.append(moe_workspace(shape, engine, t) + router + t * 3 * shape.shared_intermediate // tp * d)
    if shape.mla:
        _, nope, rope, v = shape.mla
        widest.append(t * heads * (2 * (nope + rope) + nope + 2 * v) * d)
    if shape.linear:
        chunks = -(-t // SCAN_CHUNK)
        widest.append(t * shape.linear // tp * d + chunks * max(shape.scan_heads // tp, 1) * shape.state * 4)
    return 5 * t * h * d * shape.streams + max(widest)


def sampler_peak(shape: Shape, engine: Engine) -> tuple[int, str]:
    """(bytes, path) of the sampler's dummy run (``GPUModelRunner._dummy_sampler_run``):
    ``min(max_num_seqs, max_num_batched_tokens)`` rows of logits, :data:`SAMPLER_BYTES` per logit
    for the top-k / top-p path the platform takes."""
    rows = min(engine.max_num_seqs, engine.max_num_batched_tokens)
    path = {"cuda": "flashinfer", "npu": "npu"}.get(engine.platform, "sort")
    return round(rows * shape.vocab * SAMPLER_BYTES[path]), path


def graphs(shape: Shape, engine: Engine) -> int:
    """Bytes of vLLM's CUDA graph estimate (``profile_cudagraph_memory``): the graphs share one
    pool, which the largest capture size's forward fills (:func:`forward_peak` at that size), plus
    :data:`PER_GRAPH` (:data:`PER_GRAPH_MLA`) for each graph captured; 0 where the release or platform subtracts none."""
    if not engine.subtracts_graphs:
        return 0
    return forward_peak(shape, engine, engine.largest_graph) + engine.graphs * (PER_GRAPH_MLA if shape.mla else PER_GRAPH)


def terms(shape: Shape, engine: Engine) -> list[tuple[str, int, str]]:
    """The overhead terms, (name, bytes per worker, what vLLM measures it as), in the order of
    ``determine_available_memory``: the activation peak (the forward's, or the sampler's with the
    MoE workspaces it finds allocated, the larger), the runtime (:data:`RUNTIME`), and on CUDA /
    ROCm the CUDA graphs (:func:`graphs`), and on the NPU the ``mc2`` communicator's buffers where
    ``HCCL_BUFFSIZE`` sizes them otherwise than the runtime figure (:func:`mc2_buffers`)."""
    t = engine.max_num_batched_tokens
    forward = forward_peak(shape, engine, t)
    sampler, path = sampler_peak(shape, engine) if engine.samples else (0, "not on this pipeline stage")
    kept = moe_workspace(shape, engine, t)
    rows = min(engine.max_num_seqs, t)
    out = [("activations", max(forward, sampler + kept),
            f"profile_run's peak: the forward of {t:,} tokens ({forward / GIB:.2f} GiB) or the sampler on {rows:,} "
            f"rows x {shape.vocab:,} logits ({path}, {sampler / GIB:.2f} GiB)"
            + (f" with the MoE workspaces ({kept / GIB:.2f} GiB)" if kept else "") + ", the larger")]
    out.append(("runtime", *engine.runtime))
    if mc2 := mc2_buffers(shape, engine):
        out.append(("hccl buffers", mc2, f"HCCL_BUFFSIZE={engine.hccl_buffsize}: the send and receive buffers of "
                    f"vllm-ascend's mc2 communicator (MoE dispatch), 2 x {engine.hccl_buffsize} MB where the runtime "
                    f"holds 2 x {HCCL_DEFAULT_BUFFSIZE}" + (f": {-mc2 / GIB:.2f} GiB back" if mc2 < 0 else "")))
    if engine.subtracts_graphs:
        out.append(("cuda graphs", graphs(shape, engine), f"{engine.graphs:,} graphs, the largest of "
                    f"{engine.largest_graph} tokens (vLLM >= 0.21 subtracts its estimate)"))
    elif engine.platform in ("cuda", "rocm") and engine.graphs == 0:
        out.append(("cuda graphs", 0, "--enforce-eager: none captured"))
    elif engine.platform == "npu" and engine.graphs and Version("0.21") <= Version(engine.vllm) < Version("0.23"):
        out.append(("acl graphs", 0, "NOT COMPUTED: vllm-ascend 0.21 - 0.22 subtract their ACL graph estimate "
                    "(profile_cudagraph_memory; 0.59 GiB for GLM-5.1 at TP 8, vllm-ascend #10700): the budget is over "
                    "by it; none with --enforce-eager or VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"))
    return out


def of_engine_config(vllm_config, platform: str, release: str, hccl_buffsize: int = HCCL_DEFAULT_BUFFSIZE,
                     soc: str = "A2") -> tuple[Shape, Engine]:
    """(:class:`Shape`, :class:`Engine`) of a vLLM engine config (``VllmConfig``) planned for
    ``platform`` on vLLM ``release`` (on an Ascend card of family ``soc`` with ``HCCL_BUFFSIZE``
    ``hccl_buffsize`` MB): the model's Hugging Face config, the scheduler's
    ``max_num_batched_tokens`` / ``max_num_seqs``, the parallel sizes and the CUDA graphs the
    compilation config will capture (none with ``--enforce-eager`` or ``cudagraph_mode`` NONE).

    Raises:
        ValueError: the model's config lacks a dimension the terms need (:meth:`Shape.from_config`).
    """
    model, scheduler = vllm_config.model_config, vllm_config.scheduler_config
    parallel, compilation = vllm_config.parallel_config, vllm_config.compilation_config
    shape = Shape.from_config(model.hf_config.to_dict())
    mode = getattr(compilation, "cudagraph_mode", None)
    sizes = list(getattr(compilation, "cudagraph_capture_sizes", None) or [])
    eager = model.enforce_eager or not sizes or getattr(mode, "name", "") == "NONE"
    full = "FULL" in getattr(mode, "name", "FULL_AND_PIECEWISE")
    layers = -(-shape.layers // parallel.pipeline_parallel_size)
    return shape, Engine(
        platform, release, parallel.tensor_parallel_size, parallel.pipeline_parallel_size,
        scheduler.max_num_batched_tokens, scheduler.max_num_seqs,
        0 if eager else graph_count(sizes, layers, scheduler.max_num_seqs, full), 0 if eager else max(sizes),
        expert_parallel=bool(getattr(parallel, "enable_expert_parallel", False)), dp=parallel.data_parallel_size,
        hccl_buffsize=hccl_buffsize, soc=soc, lora=getattr(vllm_config, "lora_config", None) is not None)


def for_plan(vllm_config, overhead_gib: float | None, model_dir: str, device: str | None = None) -> list[tuple[str, int, str]]:
    """plan's overhead terms: ``--overhead-gib`` as one given term, else :func:`terms` for the
    planned platform (vllm-ascend's NPU, ROCm, CUDA; another, such as vLLM's CPU platform with
    ``--device-memory-gib``, takes CUDA's runtime figure and PyTorch's sampler) and the installed vLLM.

    Raises:
        BadInput: the model's config lacks what the terms need (the message says to pass
            ``--overhead-gib`` or ``--kv-cache-memory-bytes``).
    """
    from vllm.platforms import current_platform

    from vllm_kv_strategies.deploy.budget import given_overhead
    from vllm_kv_strategies.deploy.errors import BadInput
    from vllm_kv_strategies.versions import Versions

    if overhead_gib is not None:
        return given_overhead(overhead_gib)
    platform = "rocm" if current_platform.is_rocm() else current_platform.device_type  # cuda, npu, cpu, ...
    try:
        buffsize = buffsize_from_env(os.environ) if platform == "npu" else HCCL_DEFAULT_BUFFSIZE
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    soc = ascend_family(device) if platform == "npu" else "A2"
    try:
        return terms(*of_engine_config(vllm_config, platform, Versions.detect().vllm or "0", buffsize, soc))
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"cannot compute the overhead for {model_dir}: {exc}; give it with --overhead-gib GIB "
                       "or the budget with --kv-cache-memory-bytes") from None
