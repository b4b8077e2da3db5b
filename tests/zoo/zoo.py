"""The model zoo: a real vLLM model, built tiny on the CPU, and its KV cache
built by stock and by the plugin, for both runners.

For one architecture (:mod:`configs` writes its tiny HF config):

1. ``EngineArgs(...).create_engine_config()`` on the local config directory
   (dummy weights, no tokenizer, eager, CPU), and the model built by vLLM's
   own loader (``get_model``) under that config: its attention-like modules
   register in the static forward context.
2. The KV cache specs the way the runners collect them: V1's
   ``GPUModelRunner.get_kv_cache_spec`` and V2's ``attn_utils.get_kv_cache_spec``
   (they must agree), cross-layer KV sharing from the modules, and the KV
   cache layout resolved as the engine core resolves it.
3. The ``KVCacheConfig`` vLLM's own planner makes (``kv_cache_planner()``), the
   attention groups and kernel block sizes from V2's ``init_attn_backend``
   (which also adds the KV-sharing layers to their target's group, as both
   runners do before the build). Where this CPU's attention kernels refuse
   the model (FP8 KV caches need AVX-512 or AMX), the groups' own block sizes
   and vLLM's ``add_kv_sharing_layers_to_kv_cache_groups``, said in the row.
4. Per runner: stock's build, then the plugin's in ``KV_STRATEGIES=auto``, on
   the model's own modules (vLLM's ``clear_layer_kv_caches`` between them),
   compared with :func:`upstream_harness.snapshot`.

A :class:`Row` says what happened: ``identical`` (no plugin warning, every
view, alias and binding as stock's), ``fallback`` (exactly one plugin warning,
naming a layer, and the result stock's), ``differs`` / ``plugin-failed`` (a
plugin bug), ``stock-cannot-construct`` (vLLM itself fails on the CPU before
any KV cache code of ours runs: the stage, error class and message, not our
failure), or ``no-tiny-config`` (the zoo's own config writer failed for the
class: the zoo's gap, no verdict on vLLM or the plugin).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import upstream_harness as harness  # noqa: E402
from plugin_fixtures import plugin_records  # noqa: E402
from vllm_kv_strategies.deploy.model import init_distributed as init_distributed_for  # noqa: E402
from vllm_kv_strategies.deploy.model import inspect_models_in_process  # noqa: E402,F401

#: Blocks the planner is given memory for (per layer page): enough for every group.
NUM_BLOCKS = 16
MAX_MODEL_LEN = 256

IDENTICAL, FALLBACK, DIFFERS, PLUGIN_FAILED, STOCK_CANNOT, NO_TINY_CONFIG = (
    "identical", "fallback", "differs", "plugin-failed", "stock-cannot-construct", "no-tiny-config",
)
#: Results that are the plugin's failure.
FAILURES = (DIFFERS, PLUGIN_FAILED)


@dataclasses.dataclass
class Row:
    arch: str
    kv_cache_dtype: str = "auto"
    result: str = ""
    #: Spec kinds (class names) of the model's layers, e.g. "FullAttentionSpec x2, MambaSpec x2".
    kinds: str = ""
    detail: str = ""
    #: Per runner ("v1", "v2"): the snapshot differences or the warning.
    runners: dict[str, str] = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        return f"{self.arch:40} {self.kv_cache_dtype:5} {self.result:23} {self.kinds:58} {self.detail}"


@contextlib.contextmanager
def plugin_mode(mode: str):
    old = os.environ.get("KV_STRATEGIES")
    os.environ["KV_STRATEGIES"] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("KV_STRATEGIES", None)
        else:
            os.environ["KV_STRATEGIES"] = old


def engine_config(model_dir: Path, kv_cache_dtype: str = "auto", speculative: dict | None = None):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=str(model_dir),
        load_format="dummy",
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype="bfloat16",
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=4,
        max_num_batched_tokens=MAX_MODEL_LEN,
        kv_cache_dtype=kv_cache_dtype,
        speculative_config=speculative,
        seed=0,
    )
    return args.create_engine_config()


class StockError(Exception):
    """vLLM failed before the KV cache build: ``stage`` and vLLM's own error."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        message = " ".join(line.strip() for line in str(exc).splitlines()[:3] if "errors.pydantic.dev" not in line)
        super().__init__(f"{stage}: {type(exc).__name__}: {message}"[:300])
        self.stage, self.exc = stage, exc


@contextlib.contextmanager
def stage(name: str):
    try:
        yield
    except StockError:
        raise
    except Exception as exc:  # vLLM's own failure at this stage
        raise StockError(name, exc) from exc


@dataclasses.dataclass
class Built:
    """A constructed model and what the runners need for its KV cache."""

    vllm_config: Any
    forward_context: dict[str, Any]
    specs: dict[str, Any]
    shared: dict[str, str]
    #: vLLM's plan, with the KV-sharing layers in their target's group (as the runners build it).
    kv_cache_config: Any
    attn_groups: list
    kernel_block_sizes: list[int]
    #: What the build could not take from vLLM (see :func:`construct`).
    note: str = ""


def construct(model_dir: Path, kv_cache_dtype: str = "auto", speculative: dict | None = None) -> Built:
    """Steps 1-3 of the module doc; vLLM's failures raise :class:`StockError`."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop
    from vllm.v1.worker.gpu import attn_utils
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.utils import add_kv_sharing_layers_to_kv_cache_groups
    from vllm.v1.worker.worker_base import WorkerBase

    with stage("config"), inspect_models_in_process():
        vllm_config = engine_config(model_dir, kv_cache_dtype, speculative)
    init_distributed_for(vllm_config)
    _set_torch_accelerator_to_noop()  # as vLLM's CPU runner does: the loader empties the accelerator's cache
    with set_current_vllm_config(vllm_config), stage("model"):
        get_model(vllm_config=vllm_config)
        if vllm_config.speculative_config is not None:
            draft = vllm_config.speculative_config.draft_model_config
            if draft is not None and draft is not vllm_config.model_config:
                get_model(vllm_config=vllm_config, model_config=draft)
    forward_context = vllm_config.compilation_config.static_forward_context
    with set_current_vllm_config(vllm_config), stage("specs"):
        # V1's own method, on a runner with only what it reads.
        runner = GPUModelRunner.__new__(GPUModelRunner)
        runner.vllm_config, runner.shared_kv_cache_layers = vllm_config, {}
        specs = GPUModelRunner.get_kv_cache_spec(runner)
        v2_specs = attn_utils.get_kv_cache_spec(vllm_config)
        assert v2_specs == specs, f"V1 and V2 collect different specs: {v2_specs} != {specs}"
        assert runner.shared_kv_cache_layers == attn_utils.get_shared_kv_cache_layers(vllm_config)
    if not specs:
        raise StockError("specs", LookupError("the model has no KV cache layer"))
    with set_current_vllm_config(vllm_config), stage("layout"):
        # What the engine core and its workers do (EngineCore._initialize_kv_caches).
        worker = SimpleNamespace(vllm_config=vllm_config)
        layout = resolve_kv_cache_layout(vllm_config, [WorkerBase.get_supported_kv_cache_layouts(worker)], specs.values())
        WorkerBase.set_kv_cache_layout(worker, layout.name)
    with set_current_vllm_config(vllm_config), stage("planner"):
        pages = sum(spec.page_size_bytes for spec in specs.values())
        kv_cache_config = harness.plan_config(vllm_config, specs, NUM_BLOCKS * pages)
    note = ""
    shared = dict(runner.shared_kv_cache_layers)
    # The runners add the KV-sharing layers to their target's group before the build
    # (V2: init_attn_backend; V1: maybe_add_kv_sharing_layers_to_kv_cache_groups).
    runner_config = copy.deepcopy(kv_cache_config)
    try:
        with set_current_vllm_config(vllm_config):
            attn_groups, _, kernel_block_sizes = attn_utils.init_attn_backend(runner_config, vllm_config, torch.device("cpu"))
    except Exception as exc:
        # The attention kernels of this CPU refuse the model (FP8 KV caches want
        # AVX-512 or AMX): the KV cache build itself does not depend on them.
        # Compare it on the groups' own block sizes (no kernel-block split),
        # saying so in the row.
        runner_config = copy.deepcopy(kv_cache_config)
        add_kv_sharing_layers_to_kv_cache_groups(shared, runner_config.kv_cache_groups)
        attn_groups, kernel_block_sizes = [], [g.kv_cache_spec.block_size for g in runner_config.kv_cache_groups]
        note = f"kernel blocks unsplit: init_attn_backend raised {type(exc).__name__}: {str(exc).splitlines()[0]}"[:200]
    return Built(vllm_config, forward_context, specs, shared, runner_config, attn_groups, list(kernel_block_sizes), note)


def spec_kinds(specs: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for spec in specs.values():
        counts[type(spec).__name__] = counts.get(type(spec).__name__, 0) + 1
    return ", ".join(f"{name} x{n}" for name, n in counts.items())


def compare(built: Built, version: str) -> tuple[list[str], list[str]]:
    """(differences, plugin warnings) of the plugin's build against stock's, on ``version``'s runner."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.utils import clear_layer_kv_caches

    layers = list(built.forward_context.values())
    args = (version, built.vllm_config, built.kv_cache_config, list(built.specs), built.kernel_block_sizes)
    kwargs = dict(shared=built.shared, forward_context=built.forward_context, attn_groups=built.attn_groups)
    with set_current_vllm_config(built.vllm_config):
        clear_layer_kv_caches(layers)
        with stage(f"stock {version} KV cache build"):
            stock = harness.snapshot(harness.build(*args, plugin=False, **kwargs))
        clear_layer_kv_caches(layers)
        with plugin_mode("auto"), plugin_records() as records:
            ours = harness.snapshot(harness.build(*args, plugin=True, **kwargs))
        clear_layer_kv_caches(layers)
    return harness.differences(stock, ours), [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]


def judge(row: Row, built: Built) -> Row:
    """Steps 4 and the verdict of the module doc."""
    from vllm_kv_strategies.logger import reset_warn_once

    results = {}
    for version in harness.RUNNERS:
        reset_warn_once()
        try:
            diffs, warnings = compare(built, version)
        except StockError as exc:
            row.result, row.detail = STOCK_CANNOT, str(exc)
            return row
        except Exception as exc:
            row.runners[version] = "".join(traceback.format_exception_only(exc)).strip()[:400]
            results[version] = PLUGIN_FAILED
            continue
        if diffs:
            results[version] = DIFFERS
            row.runners[version] = "; ".join(diffs)[:400]
        elif not warnings:
            results[version] = IDENTICAL
        elif len(warnings) == 1 and any(name in warnings[0] for name in built.specs):
            results[version] = FALLBACK
            row.runners[version] = warnings[0]
        else:
            results[version] = PLUGIN_FAILED
            row.runners[version] = f"{len(warnings)} plugin warnings: {warnings}"[:400]
    for verdict in (PLUGIN_FAILED, DIFFERS, FALLBACK, IDENTICAL):
        if verdict in results.values():
            row.result = verdict
            break
    if row.result != IDENTICAL:
        row.detail = " | ".join([*(f"{v}: {m}" for v, m in row.runners.items()), *([row.detail] if row.detail else [])])[:500]
    return row


def try_arch(arch: str, work_dir: Path, kv_cache_dtype: str = "auto") -> Row:
    """One zoo row for ``arch`` (see :func:`configs.entry`)."""
    import configs

    row = Row(arch, kv_cache_dtype)
    model_dir = work_dir / f"{arch}-{kv_cache_dtype}"
    try:
        with stage("tiny config"):
            main_dir, speculative = configs.entry(arch).write(model_dir)
        built = construct(main_dir, kv_cache_dtype, speculative)
    except StockError as exc:
        row.result, row.detail = (NO_TINY_CONFIG if exc.stage == "tiny config" else STOCK_CANNOT), str(exc)
        return row
    row.kinds = spec_kinds(built.specs) + (f", {len(built.shared)} sharing KV" if built.shared else "")
    row.detail = built.note
    try:
        return judge(row, built)
    finally:
        del built
        gc.collect()


def unconfigurable_rows() -> list[Row]:
    """A ``not-configurable`` row for each registry architecture no installed config class configures."""
    import configs

    return [Row(arch, "-", "not-configurable", detail=why) for arch, why in configs.unconfigurable().items()]


def table(rows: list[Row]) -> str:
    """The zoo table: one line per row, then the counts."""
    lines = [f"{'architecture':40} {'kv':5} {'result':23} {'spec kinds':58} detail", "-" * 150]
    lines += [row.line() for row in rows]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.result] = counts.get(row.result, 0) + 1
    lines.append("")
    lines.append(f"{len(rows)} tried: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return "\n".join(lines)


def rows_as_json(rows: list[Row]) -> str:
    return json.dumps([dataclasses.asdict(r) for r in rows], indent=1)
