"""The KV cache budget per worker: exact from ``--kv-cache-memory-bytes``,
otherwise an estimate, every term shown:

    device memory x --gpu-memory-utilization - weights per rank - overhead

* device memory: ``--device-memory-gib`` or a card of :data:`DEVICES` (the
  total the runtime reports, which is what vLLM multiplies by the
  utilisation: ``torch.cuda.mem_get_info`` / ``torch.npu.mem_get_info``);
* weights per rank: the checkpoint index's ``metadata.total_size``
  (``model.safetensors.index.json``) over tensor x pipeline ranks when the
  directory has one, else the bytes of the parameters of the model built on
  the meta device for this rank (numel x element size of each, as vLLM would
  create them, quantised dtypes included);
* overhead: what vLLM measures by profiling a forward pass, computed term by
  term for the model and the engine arguments (:mod:`.overhead`: the activation
  peak at ``--max-num-batched-tokens`` or the sampler's, the runtime's own
  memory, CUDA graphs where vLLM subtracts them), or one constant given with
  ``--overhead-gib``;
* margin (vLLM 0.34's resizable KV cache, sized after warm-up): the floor of
  what vLLM keeps free (:data:`RESIZABLE_MARGIN_FLOOR`); the utilisation a user
  does not give is then 0.34's default for that mode.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

GIB = 2**30
#: The constant plan subtracted for the whole overhead before it computed the terms (the
#: benchmark's "before" column, benchmarks/startup_logs.py).
DEFAULT_OVERHEAD_GIB = 2.0
#: How far the estimate was from public startup logs' "Available KV cache memory", as (logs, median,
#: worst |estimate - logged| / logged), benchmarks/startup_logs.py: with the weights plan computes
#: (``--plan-weights``; the startup-logs nox session checks it) and with the weights each log gives
#: (tests/deploy/test_startup_logs.py checks it).
PLAN_WEIGHTS = (50, 0.004, 0.071)
LOGGED_WEIGHTS = (50, 0.003, 0.073)

@dataclasses.dataclass(frozen=True)
class Card:
    """A card ``--device`` names: the total memory its runtime reports (GiB), what it is,
    the vLLM platform that serves it, its compute capability (CUDA: (major, minor))
    or architecture (ROCm: the GCN name; Ascend: the SoC), and the published source of
    its memory figure (``plan --device list`` prints it)."""

    gib: float
    what: str
    platform: str
    capability: tuple[int, int] | str
    source: str = ""

    @property
    def bytes(self) -> int:
        return int(self.gib * GIB)


#: Cards, by lower-case name; each with the published source of its memory.
DEVICES: dict[str, Card] = {
    "910b-64g": Card(60.96, "Ascend 910B 64 GB (Atlas 800I/800T A2)", "npu", "Ascend910B",
         'torch_npu: "60.96 GiB total capacity" (vllm-project/vllm-ascend#6611, #5020, #2378)'),
    "910b-32g": Card(29.49, "Ascend 910B 32 GB (910B4, Atlas 800I A2)", "npu", "Ascend910B",
         'torch_npu: "29.49 GiB total capacity" on a 910B4 (public vLLM-Ascend startup logs)'),
    "a3": Card(61.27, "Ascend 910C / Atlas A3, one die of 64 GB", "npu", "Ascend910_93",
         'torch_npu: "61.27 GiB total capacity" on an Atlas A3 die (sgl-project/sglang#29838)'),
    "h100-80g": Card(79.11, "NVIDIA H100 80GB", "cuda", (9, 0),
         'torch: "GPU 0 has a total capacity of 79.11 GiB" (vllm-project/vllm#27508)'),
    "h100-nvl": Card(93.00, "NVIDIA H100 NVL 94GB", "cuda", (9, 0),
         'torch: "GPU 0 has a total capacity of 93.00 GiB" (ali-vilab/VACE#56)'),
    "h200": Card(143771 / 1024, "NVIDIA H200 141GB (nvidia-smi total)", "cuda", (9, 0),
         "nvidia-smi 143771 MiB (public nvidia-smi tables of H200 SXM hosts)"),
    "h20": Card(97871 / 1024, "NVIDIA H20 96GB (nvidia-smi total)", "cuda", (9, 0),
         "nvidia-smi 97871 MiB (public nvidia-smi tables of H20 hosts, 500 W)"),
    "b200": Card(183359 / 1024, "NVIDIA B200 (nvidia-smi total)", "cuda", (10, 0),
         "nvidia-smi 183359 MiB (public nvidia-smi tables of B200 hosts, 1000 W)"),
    "a100-80g": Card(80.0, "NVIDIA A100 80GB (nvidia-smi total)", "cuda", (8, 0),
         "nvidia-smi 81920 MiB (modal-labs/modal-client#2797); torch reports a little less"),
    "a100-40g": Card(40.0, "NVIDIA A100 40GB (nvidia-smi total)", "cuda", (8, 0),
         "nvidia-smi 40960 MiB (modal-labs/modal-client#2797)"),
    "l40s": Card(46068 / 1024, "NVIDIA L40S (nvidia-smi total)", "cuda", (8, 9),
         "nvidia-smi 46068 MiB (modal-labs/modal-client#2797)"),
    "l20": Card(46068 / 1024, "NVIDIA L20 48GB (nvidia-smi total)", "cuda", (8, 9),
         "nvidia-smi 46068 MiB (public nvidia-smi tables of L20 hosts)"),
    "a10": Card(23028 / 1024, "NVIDIA A10 24GB (nvidia-smi total)", "cuda", (8, 6),
         "nvidia-smi 23028 MiB (public nvidia-smi tables of A10 / A10G hosts)"),
    "rtx4090": Card(23.68, "NVIDIA GeForce RTX 4090", "cuda", (8, 9),
         'torch: "23.68 GiB total capacity" (zai-org/CogVideo#36)'),
    "mi300x": Card(191.98, "AMD Instinct MI300X 192GB", "rocm", "gfx942",
         'torch (HIP): "GPU 0 has a total capacity of 191.98 GiB" (public MI300X OOM reports)'),
}


@dataclasses.dataclass
class Budget:
    """KV cache bytes per worker and how they were found.

    Attributes:
        bytes: the budget per worker (negative when the terms leave nothing:
            vLLM's planner then refuses in its own words).
        exact: True for ``--kv-cache-memory-bytes``.
        terms: (name, bytes, where the number comes from), in the order applied.
    """

    bytes: int
    exact: bool
    terms: list[tuple[str, int, str]]

    def lines(self) -> list[str]:
        if self.exact:
            return [f"budget: {self.bytes:,} bytes per worker ({self.bytes / GIB:.3f} GiB, {self.terms[0][2]}: exact)"]
        out = [f"budget: ESTIMATE {self.bytes:,} bytes per worker ({self.bytes / GIB:.3f} GiB) ="]
        for i, (name, value, source) in enumerate(self.terms):
            sign = "  " if i == 0 else ("x " if name == "utilisation" else "- ")
            shown = f"{value / 1000:.3f}" if name == "utilisation" else f"{value:,} bytes ({value / GIB:.2f} GiB)"
            out.append(f"  {sign}{name:13} {shown:32} {source}")
        if any(name == "activations" for name, _, _ in self.terms):
            (logs, median, worst), (n, m, w) = PLAN_WEIGHTS, LOGGED_WEIGHTS
            out.append(f"  (computed terms: against {logs} public startup logs this estimate was off by {median:.1%} "
                       f"in the median, {worst:.1%} at worst; {m:.1%} and {w:.1%} over {n} with the weights they "
                       "logged: docs/plan.md)")
        out.append("  (pass --kv-cache-memory-bytes for the exact plan of a known budget)")
        return out

    def as_json(self) -> dict:
        return {"bytes_per_worker": self.bytes, "exact": self.exact,
                "terms": [{"name": n, "value": v, "source": s} for n, v, s in self.terms]}


def exact(kv_cache_memory_bytes: int, source: str = "--kv-cache-memory-bytes") -> Budget:
    return Budget(kv_cache_memory_bytes, True, [("kv_cache_memory_bytes", kv_cache_memory_bytes, source)])


def device_memory(device: str | None, gib: float | None) -> tuple[int, str]:
    """(bytes, source) of ``--device-memory-gib`` or ``--device NAME``.

    Raises:
        KeyError: an unknown card name (the message lists the known ones).
    """
    if gib is not None:
        return int(gib * GIB), f"--device-memory-gib {gib:g}"
    if device not in DEVICES:
        raise KeyError(f"unknown --device {device!r}; known: {', '.join(sorted(DEVICES))}")
    card = DEVICES[device]
    return card.bytes, f"--device {device}: {card.what}, {card.gib:.2f} GiB"


def checkpoint_bytes(model_dir: str) -> int | None:
    """``metadata.total_size`` of ``model.safetensors.index.json``, or None."""
    index = Path(model_dir) / "model.safetensors.index.json"
    try:
        return int(json.loads(index.read_text())["metadata"]["total_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: vLLM 0.34's resizable KV cache (sized after warm-up): the least it keeps free beyond the
#: KV cache, ``KV_CACHE_MARGIN_FLOOR_BYTES`` of ``vllm/v1/worker/extensible_kv_cache.py``: 1 GiB on
#: CUDA, 3 GiB on ROCm; the margin is the larger of it and 0.75 x the transient peak measured at warm-up.
RESIZABLE_MARGIN_FLOOR, ROCM_RESIZABLE_MARGIN_FLOOR = GIB, 3 * GIB
#: ``KV_CACHE_MARGIN_FRACTION``: the margin's share of the transient peak.
RESIZABLE_MARGIN_FRACTION = 0.75
#: vLLM 0.34's ``gpu_memory_utilization`` when none is given (``CacheConfig.resolved_gpu_memory_utilization``).
RESIZABLE_UTILISATION, FIXED_UTILISATION = 1.0, 0.92


def given_overhead(overhead_gib: float) -> list[tuple[str, int, str]]:
    """The overhead as one term, ``--overhead-gib`` as given."""
    return [("overhead", int(overhead_gib * GIB), f"--overhead-gib {overhead_gib:g}: activations, graphs, runtime as given")]


def estimate(memory: tuple[int, str], utilisation: float | None, weights: tuple[int, str],
             overhead: list[tuple[str, int, str]], resizable: bool = False, utilisation_given: bool = True,
             rocm: bool = False) -> Budget:
    """memory x utilisation - weights - each overhead term ((name, bytes, source):
    :func:`.overhead.terms`, or :func:`given_overhead`) (see the module doc); for vLLM 0.34's
    resizable KV cache (``resizable``) also - margin (its floor: 3 GiB where the planned platform
    is ``rocm``, else 1 GiB), and a utilisation of None is 0.34's default;
    ``utilisation_given``: whether ``--gpu-memory-utilization`` was passed (else the source says
    it is vLLM's default)."""
    total, source = memory
    if utilisation is None:  # vLLM 0.34: None resolves by the sizing mode
        utilisation = RESIZABLE_UTILISATION if resizable else FIXED_UTILISATION
        given = (f"vLLM 0.34's default with{'' if resizable else 'out'} the resizable KV cache "
                 f"({RESIZABLE_UTILISATION:.2f} with it, {FIXED_UTILISATION:.2f} without)")
    elif utilisation_given:
        given = f"--gpu-memory-utilization {utilisation:g}"
    else:
        given = f"vLLM's default --gpu-memory-utilization ({utilisation:g}; not given)"
    terms = [
        ("device memory", total, source),
        ("utilisation", round(utilisation * 1000), given),
        ("weights", *weights),
        *overhead,
    ]
    if resizable:
        terms.append(resizable_margin(total, utilisation, overhead, rocm))
    budget = int(total * utilisation) - sum(value for name, value, _ in terms[2:])
    return Budget(budget, False, terms)


def resizable_margin(total: int, utilisation: float, overhead: list[tuple[str, int, str]], rocm: bool) -> tuple[str, int, str]:
    """vLLM 0.34's resizable KV cache (``extensible_kv_cache.py``, the sizing after warm-up) takes
    ``min(requested - used, headroom - margin) - transient peak`` with ``margin = max(floor,
    0.75 x transient peak)``: beyond the activations already subtracted, the margin costs what it
    exceeds of the memory the utilisation leaves out, ``total x (1 - utilisation)``. The transient
    peak is the ``activations`` term where the overhead is computed, else the floor stands alone."""
    floor, platform = (ROCM_RESIZABLE_MARGIN_FLOOR, "ROCm") if rocm else (RESIZABLE_MARGIN_FLOOR, "CUDA")
    peak = sum(value for name, value, _ in overhead if name == "activations")
    margin = max(floor, int(RESIZABLE_MARGIN_FRACTION * peak))
    left_out = total - int(total * utilisation)
    return ("margin", max(margin - left_out, 0),
            f"resizable KV cache (vLLM 0.34, {platform}): vLLM keeps max({floor // GIB} GiB, 0.75 x the transient peak"
            f"{f' {peak / GIB:.2f} GiB' if peak else ' it measures at warm-up'}) = {margin / GIB:.2f} GiB free"
            + (f", less the {left_out / GIB:.2f} GiB the utilisation leaves out" if left_out else ""))


def online_quantization(vllm_config) -> str | None:
    """The ``--quantization`` method vLLM applies to unquantised weights after
    loading them (online: the checkpoint's config has no ``quantization_config``),
    else None."""
    model = vllm_config.model_config
    if model.quantization is None or getattr(model.hf_config, "quantization_config", None):
        return None
    return str(model.quantization)


#: Online ``--quantization`` methods that store the linear and expert weights at one byte each after
#: loading (``Fp8LinearMethod`` / ``Fp8MoEMethod`` with a checkpoint not serialised in fp8): the
#: meta-built model counts them so (:func:`.model.served_bytes`).
ONE_BYTE_ONLINE = ("fp8",)


def weights_per_rank(model_dir: str, ranks: int, meta_bytes: int, offload_gib: float = 0.0,
                     online: str | None = None) -> tuple[int, str]:
    """(bytes, source): the checkpoint index's total over the ranks, else the
    meta-built rank's parameters; less ``--cpu-offload-gb`` (``offload_gib``:
    vLLM's UVA offload holds up to that many GiB of each GPU's weights in CPU
    memory, ``maybe_offload_to_cpu``), never below zero. ``online``: the
    method of :func:`online_quantization`, which the source names: for
    :data:`ONE_BYTE_ONLINE`, the meta-built rank's bytes as served (the
    checkpoint index holds them as loaded); for another, the weights as
    loaded, before vLLM quantizes them, so the estimate of the KV cache is low."""
    total = checkpoint_bytes(model_dir)
    if total is not None and online not in ONE_BYTE_ONLINE:
        weights, source = total // ranks, f"model.safetensors.index.json total_size {total:,} / {ranks} ranks"
    else:
        weights, source = meta_bytes, "parameters of the meta-built model on this rank (numel x dtype size)"
    if online in ONE_BYTE_ONLINE:
        source += f", as served: --quantization {online} stores the linear and expert weights at one byte after loading"
    elif online:
        source += (f", as loaded: --quantization {online} quantizes them after loading, so the served "
                   "weights are smaller and this budget is low")
    if offload_gib:
        offload = int(offload_gib * GIB)
        return max(weights - offload, 0), f"{source} less --cpu-offload-gb {offload_gib:g} ({offload:,} bytes in CPU memory)"
    return weights, source
