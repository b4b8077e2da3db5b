"""vllm-ascend 0.30's own Model Runner V2 on CPU: stock's KV cache allocation
(``vllm_ascend.worker.v2.attn_utils.allocate_kv_cache_main``, which calls the module's
``_allocate_kv_cache`` and ``_reshape_kv_cache_v2``) run on configs from vllm-ascend's patched
planner (runner_factory), and the same call with the plugin's V2 adapter patched in.

V2 has no runner method to call here: ``allocate_kv_cache_main(kv_cache_config, device,
layout, kernel_block_sizes)`` reads everything else from the current ``VllmConfig``
(``get_current_vllm_config``: the layers, their backends, ``kv_transfer_config``). The config
is the 0.30 runner's real ``VllmConfig`` of :func:`runner_factory.make_runner`, its layers
given the backend of their attention group (V2 asks each layer's ``get_attn_backend()``), and
the kernel block sizes are vLLM's ``prepare_kernel_block_sizes`` over the same groups, as V2's
``init_attn_backend`` computes them.

    python tests/ascend/factory_030_v2.py      # stock V2's layouts of stock_cases_030, and the zoo's bytes
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from typing import Any

if __name__ == "__main__":  # as a script: the NPU stubs conftest.py installs for the tests
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("KV_STRATEGIES", "off")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import npu_stubs

    npu_stubs.install("0.30.0")

import runner_factory as rf  # noqa: E402
import torch  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

from vllm_kv_strategies import patching  # noqa: E402

N = 8  # blocks
BF16 = torch.bfloat16


def attn_utils() -> Any:
    import vllm_ascend.worker.v2.attn_utils as module  # noqa: PLC0415

    return module


def v2_runner(mk: rf.ModelKV, shared: dict[str, str] | None = None, **runner_kwargs: Any) -> Any:
    """The 0.30 runner of ``mk`` whose ``vllm_config`` V2 reads: every layer answers
    ``get_attn_backend()`` with its attention group's backend and shares no KV cache
    (``kv_sharing_target_layer_name`` None, as a real layer's default). ``shared``: layer ->
    target, extra attention layers that reuse their target's cache (cross-layer KV sharing:
    in the forward context, not in the config, as V2's ``get_kv_cache_spec`` skips them)."""
    from torch import nn  # noqa: PLC0415
    from vllm.model_executor.layers.attention import Attention  # noqa: PLC0415

    runner = mk.make_runner(**runner_kwargs)
    sparse_and_dcp(runner, mk.specs)
    forward_context = runner.vllm_config.compilation_config.static_forward_context
    for name, target in (shared or {}).items():
        layer = Attention.__new__(Attention)
        nn.Module.__init__(layer)
        layer.layer_name, layer.kv_sharing_target_layer_name = name, target
        forward_context[name] = layer
    for layer in forward_context.values():
        if "kv_sharing_target_layer_name" not in vars(layer):
            layer.kv_sharing_target_layer_name = None
    for groups in runner.attn_groups:
        for group in groups:
            for name in group.layer_names:
                forward_context[name].attn_backend = group.backend
                forward_context[name].get_attn_backend = lambda backend=group.backend: backend
    return runner


#: DeepSeek V3.2's ``index_topk`` (its HF config.json): what makes vllm-ascend's ``enable_sfa`` true.
INDEX_TOPK = 2048


def sparse_and_dcp(runner: Any, specs: dict[str, Any]) -> None:
    """What V2 reads from the ``VllmConfig`` where V1 reads the runner, set as a real config has it:
    a sparse (SFA) model's HF config carries ``index_topk`` (``enable_sfa``; the runner's
    ``use_sparse``), the DCP size is ``parallel_config.decode_context_parallel_size`` (the runner's
    ``dcp_size``), and a packed SFA main cache's ``--kv-cache-dtype`` is
    ``cache_config.cache_dtype`` (the spec's ``cache_dtype_str``, as the runner's ``c8_cache_dtype``)."""
    config = runner.vllm_config
    if getattr(runner, "use_sparse", False):
        config.model_config.hf_text_config.index_topk = INDEX_TOPK
    object.__setattr__(config.parallel_config, "decode_context_parallel_size", getattr(runner, "dcp_size", 1))
    packed = [s for s in specs.values() if getattr(s, "uses_packed_sfa_main_cache", False)]
    if packed:
        object.__setattr__(config.cache_config, "cache_dtype", packed[0].cache_dtype_str)


def allocate_main(runner: Any, kv_cache_config: Any) -> dict[str, Any]:
    """``allocate_kv_cache_main`` as vLLM's ``init_kv_cache`` calls it, in the runner's config."""
    from vllm.config import set_current_vllm_config  # noqa: PLC0415

    config = copy.deepcopy(kv_cache_config)
    kernel = rf.kernel_block_sizes(runner, config)
    with set_current_vllm_config(runner.vllm_config):
        return attn_utils().allocate_kv_cache_main(config, runner.device, None, kernel)


def stock_v2(mk: rf.ModelKV, shared: dict[str, str] | None = None, **runner_kwargs: Any) -> dict[str, Any]:
    """Stock V2's caches of ``mk`` (its allocation module must be unpatched)."""
    assert not patching.is_patched(attn_utils()), "stock V2 asked for while the plugin is patched in"
    return allocate_main(v2_runner(mk, shared, **runner_kwargs), mk.kv_cache_config)


@contextlib.contextmanager
def plugin_patched():
    """The plugin's V2 allocation adapter patched into ``attn_utils`` for the duration."""
    from vllm_kv_strategies.platforms.ascend.runner_v2 import AscendV2AllocationAdapter  # noqa: PLC0415

    adapter, module = AscendV2AllocationAdapter(), attn_utils()
    assert adapter.patch(module)
    try:
        yield adapter
    finally:
        assert adapter.unpatch(module)


def plugin_v2(mk: rf.ModelKV, shared: dict[str, str] | None = None, **runner_kwargs: Any) -> dict[str, Any]:
    """The plugin's caches of ``mk``, through stock's ``allocate_kv_cache_main`` with the two
    functions it looks up replaced."""
    runner = v2_runner(mk, shared, **runner_kwargs)
    with plugin_patched():
        return allocate_main(runner, mk.kv_cache_config)


def padded_hybrid() -> rf.ModelKV:
    """2 Mamba + 2 attention layers whose attention page is padded to the Mamba page, as V2's
    ``get_kv_cache_spec`` pads it (``page_size_padded`` = the common page): attention (1 head,
    32) bf16 page 16384 padded to the Mamba page 17920 (conv (3, 256) + ssm (2, 64, 64) bf16)."""
    import stock_cases_030 as cases  # noqa: PLC0415

    mamba = cases._mamba_spec()
    attn = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=32, dtype=BF16, page_size_padded=mamba.page_size_bytes)
    specs = {
        "model.layers.1.self_attn.attn": attn,
        "model.layers.3.self_attn.attn": attn,
        "model.layers.0.linear_attn": mamba,
        "model.layers.2.linear_attn": mamba,
    }
    return rf.ModelKV("hybrid, padded attention", 1, rf.build_kv_cache_config(specs, N, max_model_len=128), specs)


def main() -> int:
    import stock_cases_030 as cases  # noqa: PLC0415

    for name, build, kw in [*cases.CASES, ("hybrid, padded attention", padded_hybrid, {})]:
        print(f"== {name} {kw or ''}")
        try:
            kv = stock_v2(build(), **kw)
        except Exception as exc:  # noqa: BLE001 (printed: what stock V2 does with it)
            print(f"   stock V2 raised {type(exc).__name__}: {exc}")
            continue
        cases.print_kv(kv)
    print_zoo_bytes()
    return 0


def print_zoo_bytes() -> None:
    """Per published model of the Ascend zoo (zoo_models, TP 1, ``KV_STRATEGIES=on``): KV cache
    groups, the bytes of the config's one backing (``KVCacheTensor.size``), the bytes stock V2 and
    the plugin allocate, and whether their layouts are identical."""
    import kv_compare as kc  # noqa: PLC0415
    import zoo_models as zm  # noqa: PLC0415

    os.environ["KV_STRATEGIES"] = "on"
    print(f"{'model':24} {'groups':>6} {'config backing':>15} {'stock V2':>13} {'plugin V2':>13} identical")
    for model in zm.MODELS.values():
        mk = model.build(1)
        try:
            ours = plugin_v2(mk)
        except Exception as exc:  # noqa: BLE001 (printed: the plugin's refusal)
            print(f"{model.name:24} refused: {exc}")
            continue
        stock = stock_v2(mk)
        size = max(t.size for t in mk.kv_cache_config.kv_cache_tensors)
        total = [sum(kc.storages(kv).values()) for kv in (stock, ours)]
        same = kc.layout_signature(ours) == kc.layout_signature(stock)
        print(f"{model.name:24} {len(mk.kv_cache_config.kv_cache_groups):>6} {size:>15,} {total[0]:>13,} {total[1]:>13,} {same}")


if __name__ == "__main__":
    sys.exit(main())
