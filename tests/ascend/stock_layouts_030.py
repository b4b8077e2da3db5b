"""Print what stock vllm-ascend 0.30 ``NPUModelRunner.initialize_kv_cache_tensors`` builds on CPU
for a few small configs (planned by vllm-ascend's patched planner), through runner_factory:
the KVCacheConfig's tensors and, per layer, the form (tuple / list / tensor) and every view's
dtype, shape, stride, storage offset and storage (numbered, with its bytes).

    python tests/ascend/stock_layouts_030.py     # in the ascend-0.30.0 environment

Not a test module (no ``test_`` prefix): pytest does not collect it.
"""

from __future__ import annotations

import copy
import os
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("KV_STRATEGIES", "off")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import npu_stubs  # noqa: E402

npu_stubs.install("0.30.0")

import runner_factory as rf  # noqa: E402
import stock_cases_030 as cases  # noqa: E402


def main() -> int:
    for name, build, runner_kwargs in cases.CASES:
        mk = build()
        cfg = mk.kv_cache_config
        print(f"== {name}  (num_blocks {cfg.num_blocks}, runner {runner_kwargs or 'default'})")
        for t in cfg.kv_cache_tensors:
            print(f"   tensor size {t.size} offset {t.offset} layer_stride {t.layer_stride} block_stride {t.block_stride} layers {t.layers}")
        for g, group in enumerate(cfg.kv_cache_groups):
            spec = group.kv_cache_spec
            print(f"   group {g}: {type(spec).__name__} block {spec.block_size} page {spec.page_size_bytes} layers {group.layer_names}")
        try:
            runner, kv = cases.build_stock(mk, **runner_kwargs)
        except Exception as exc:  # noqa: BLE001 (printed: what stock does with it)
            print(f"   stock raised {type(exc).__name__}: {exc}")
            continue
        print(f"   kernel_block_sizes {runner.kernel_block_sizes}, hybrid_with_attn_and_mamba {runner.hybrid_with_attn_and_mamba}")
        cases.print_kv(kv)
        print(f"   format casts {npu_stubs.format_cast_mock().call_count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
