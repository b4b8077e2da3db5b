"""A worker's place in its deployment (``report.parallel.parallel_ranks``), on
vLLM's own ``ParallelConfig``, and how ``report DIR`` shows data and pipeline
parallel ranks.

Data parallel engines of a dense model run independently: vLLM's engine core
calls ``ParallelConfig.reconfigure_for_independent_dp_rank`` (size 1, rank 0)
and keeps the engine's index in ``data_parallel_index`` (vLLM 0.30+;
``vllm/v1/engine/core.py`` ``run_engine_core``). The tests do the same to a
real ``ParallelConfig``. torch.distributed's rank and world size are set with
pytest-mock where a test needs a rank other than 0 of 1 (one process has no
other rank to be).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch.distributed as dist
from test_upstream_adapter import dense, make_config, make_runner
from upstream_harness import through_adapter
from vllm.config import ParallelConfig

from vllm_kv_strategies import patching
from vllm_kv_strategies import report as report_mod
from vllm_kv_strategies.report.parallel import ParallelRanks, parallel_ranks
from vllm_kv_strategies.core.plan import plan_kv_cache
from vllm_kv_strategies.report import schema

HAS_INDEX = hasattr(ParallelConfig(), "data_parallel_index")


def world(mocker, rank: int, size: int) -> None:
    """torch.distributed as a worker of rank ``rank`` in a world of ``size`` sees it, before vLLM's
    tensor / pipeline groups are set up (an in-process ``plan`` earlier in the session leaves its
    one-rank groups in place: they are not this worker's)."""
    import vllm.distributed.parallel_state as parallel_state

    for name in ("get_tp_group", "get_pp_group"):
        mocker.patch.object(parallel_state, name, side_effect=AssertionError(f"{name}: not initialised"))
    mocker.patch.object(dist, "is_initialized", return_value=True)
    mocker.patch.object(dist, "get_rank", return_value=rank)
    mocker.patch.object(dist, "get_world_size", return_value=size)


def independent_engine(index: int, **sizes: int) -> ParallelConfig:
    """The config a dense model's data parallel engine ``index`` of 2 hands its workers."""
    config = ParallelConfig(data_parallel_size=2, **sizes)
    config.data_parallel_index = index
    config.reconfigure_for_independent_dp_rank()
    return config


def test_without_torch_distributed_a_worker_is_rank_0_of_1():
    assert parallel_ranks(None) == ParallelRanks(0, 1, 0, 1, 0, 1, 0, 1)


@pytest.mark.skipif(not HAS_INDEX, reason="this vLLM has no ParallelConfig.data_parallel_index (before 0.30): "
                    "its dense data parallel engines are not reconfigured as independent")
@pytest.mark.parametrize("index, tp_rank, expected", [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)])
def test_an_independent_data_parallel_engine_offsets_its_ranks_as_vllm_does(mocker, index, tp_rank, expected):
    # vLLM's global rank: data_parallel_rank * world_size + rank (init_distributed_environment).
    world(mocker, tp_rank, 2)
    place = parallel_ranks(independent_engine(index, tensor_parallel_size=2))
    assert (place.rank, place.world_size, place.data_parallel_rank) == (expected, 2, index)
    assert place.data_parallel_size is None  # the engine is not told how many engines there are
    assert (place.tensor_parallel_rank, place.tensor_parallel_size) == (tp_rank, 2)


def test_one_world_across_data_parallel_keeps_torch_distributeds_rank(mocker):
    # MoE: the engines share one torch.distributed world of data_parallel_size x world_size ranks.
    world(mocker, 3, 4)
    config = ParallelConfig(data_parallel_size=2, data_parallel_rank=1, tensor_parallel_size=2)
    place = parallel_ranks(config)
    assert (place.rank, place.world_size, place.data_parallel_rank, place.data_parallel_size) == (3, 4, 1, 2)


def test_pipeline_ranks_come_from_vllms_pipeline_group(mocker):
    world(mocker, 1, 2)
    groups = mocker.patch.dict(sys.modules)
    import vllm.distributed.parallel_state as ps

    groups["vllm.distributed.parallel_state"] = ps
    mocker.patch.object(ps, "get_pp_group", return_value=mocker.Mock(rank_in_group=1, world_size=2))
    mocker.patch.object(ps, "get_tp_group", return_value=mocker.Mock(rank_in_group=0, world_size=1))
    place = parallel_ranks(ParallelConfig(pipeline_parallel_size=2))
    assert (place.rank, place.pipeline_parallel_rank, place.pipeline_parallel_size, place.tensor_parallel_size) == (1, 1, 2, 1)


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_kv_strategies", "report", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def plugin_caches(n: int, names: list[str] | None = None):
    specs = dense(n=n)
    if names is not None:
        specs = dict(zip(names, specs.values()))
    vllm_config, config = make_config(specs, "LBHNC", 1 << 22)
    plan = plan_kv_cache(config)
    kv = through_adapter(make_runner(vllm_config, list(specs)), config)
    return plan, kv


@pytest.mark.skipif(not HAS_INDEX, reason="this vLLM has no ParallelConfig.data_parallel_index (before 0.30)")
def test_report_dir_tells_data_parallel_engines_apart(tmp_path):
    plan, kv = plugin_caches(4)
    for index in (0, 1):
        data = report_mod.build_report(plan, kv, mode="on", model="m", parallel_config=independent_engine(index))
        schema.validate(data)
        assert (data["totals"]["rank"], data["world_size"]) == (index, 1)
        assert data["parallel"] == {"data_parallel_rank": index, "data_parallel_size": None, "pipeline_parallel_rank": 0,
                                    "pipeline_parallel_size": 1, "tensor_parallel_rank": 0, "tensor_parallel_size": 1}
        report_mod.write_report({**data, "run_id": "r"}, str(tmp_path))
    assert sorted(p.name for p in tmp_path.glob("kv_cache_report.latest.*")) == [
        "kv_cache_report.latest.rank0.json", "kv_cache_report.latest.rank1.json"]
    shown = run_cli(tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"KV cache reports in {tmp_path}: 2 reports, 2 ranks (each rank's newest report), world size 2"
    assert [ln.split()[:4] for ln in lines[2:4]] == [["0", "0/0/0", "plugin", "on"], ["1", "1/0/0", "plugin", "on"]]
    assert lines[5] == "layouts: the same on every rank"
    one = run_cli(tmp_path / "kv_cache_report.latest.rank1.json").stdout.splitlines()[0]
    assert ", rank 1, data parallel engine 1, written " in one  # not "rank 1 of 1": the engine's world is its own


def test_report_dir_compares_layouts_within_each_pipeline_stage(tmp_path):
    # Stage 0 holds layers 0-1, stage 1 layers 2-3: their layouts differ by design, not as a fault.
    names = [f"model.layers.{i}.self_attn.attn" for i in range(4)]
    for stage, layers in ((0, names[:2]), (1, names[2:])):
        plan, kv = plugin_caches(2, layers)
        place = ParallelRanks(stage, 2, 0, 1, stage, 2, 0, 1)
        report_mod.write_report({**report_mod.build_report(plan, kv, mode="on", model="m", place=place), "run_id": "r"},
                                str(tmp_path))
    lines = run_cli(tmp_path).stdout.splitlines()
    assert [ln.split()[:2] for ln in lines[2:4]] == [["0", "0/0/0"], ["1", "0/1/0"]]
    assert lines[5] == "layouts: the same on every rank of each pipeline stage (2 stages, each with its own layers)"
    one = run_cli(tmp_path / "kv_cache_report.latest.rank1.json").stdout.splitlines()[0]
    assert ", rank 1 of 2, pipeline stage 1 of 2, written " in one
    # Two ranks of one stage with different layouts are still flagged as differing.
    rank1 = json.loads((tmp_path / "kv_cache_report.latest.rank1.json").read_text())
    rank1["parallel"]["pipeline_parallel_rank"] = 0
    (tmp_path / "kv_cache_report.latest.rank1.json").unlink()
    for f in tmp_path.glob("kv_cache_report.2*.rank1.json"):
        f.write_text(json.dumps(rank1))
    assert run_cli(tmp_path).stdout.splitlines()[5].startswith("ranks whose layouts differ: layout ")
