"""plan's budget estimate against public startup logs (tests/deploy/startup_logs, read by
``published.py``; the table: ``benchmarks/startup_logs.py``).

Each log gives the card, the utilisation, the engine arguments, the weights vLLM loaded and the
"Available KV cache memory" it then gave the planner. The estimate is the card's memory x the
utilisation - those weights - the overhead terms of :mod:`vllm_kv_strategies.deploy.overhead`
computed for the log's model (its published config.json) and engine. The bounds are issue 45's:
each log within 10 % (0.5 GiB where its budget is under 5 GiB), the median within 3 %.
"""

from __future__ import annotations

import re
import statistics

import pytest

import published
from vllm_kv_strategies.deploy import budget, overhead

GIB = 2**30
LOGS = published.load()
USED = [log for log in LOGS if not log.set_aside]


def number_in_quotes(text: str, quotes: str) -> bool:
    """Whether the number of a logged value ("14.99 GiB", 476016, "58.11x for 8,192 tokens") is in the quotes."""
    digits = re.match(r"\s*-?[0-9.,]+", str(text)).group(0).strip()
    return digits in quotes or f"{int(digits):,}" in quotes if digits.isdigit() else digits in quotes


def test_the_logs_cover_what_the_issue_asks():
    """At least 20 usable logs; dense, MoE, MLA, hybrid, sliding, multimodal and quantised models;
    three kinds of card; TP > 1; Ascend."""
    assert len(USED) >= 20
    kinds = {kind for log in USED for kind in log.data["kinds"]}
    assert {"dense", "moe", "mla", "hybrid", "sliding", "multimodal"} <= kinds
    assert kinds & {"fp8", "quantised"}
    assert len({published.device(log.data) or log.data["card"] for log in USED}) >= 3
    assert any(log.engine().tp > 1 for log in USED)
    assert any(log.data["platform"] == "npu" for log in USED)


@pytest.mark.parametrize("log", LOGS, ids=[log.name for log in LOGS])
def test_each_logged_number_is_quoted(log):
    """Every number read into ``[logged]`` stands in the lines quoted from the source (a byte count
    that vllm-ascend <= 0.13 prints, written as exact GiB, through its printed line)."""
    quotes = "\n".join(log.data["quotes"]["lines"])
    assert log.data["source"].startswith("https://")
    for key, value in log.data["logged"].items():
        if key.endswith("_printed") or key in ("profile", "free_memory"):
            assert value in quotes or all(part in quotes for part in value.split("; ")), (key, value)
        elif key == "available_kv" and "available_kv_printed" in log.data["logged"]:
            printed = log.data["logged"]["available_kv_printed"]
            assert re.search(r"\b%d\b" % published.gib_bytes(value), printed), (value, printed)
        else:
            assert number_in_quotes(value, quotes), (key, value)
    if "hccl_buffsize" in log.data.get("engine", {}):  # an environment variable the script exports
        assert f"export HCCL_BUFFSIZE={log.data['engine']['hccl_buffsize']}" in quotes


#: Logs the estimate misses by more than the bound, and why: counted in the median and the worst,
#: listed in docs/plan.md; the test fails once one of them comes within the bound.
OUTSIDE: dict[str, str] = {}  # none since the mc2 communicator's HCCL_BUFFSIZE is counted (Mooncake #2827 was +10.0 %)


@pytest.mark.parametrize("log", USED, ids=[log.name for log in USED])
def test_each_estimate_is_within_the_bound(log):
    _, estimate = log.estimates()
    logged = log.logged
    if log.name in OUTSIDE:
        assert not published.within(estimate - logged, logged), f"{log.name} is within the bound now: drop it from OUTSIDE"
        return
    assert published.within(estimate - logged, logged), (
        f"{log.name}: estimate {estimate / GIB:.2f} GiB, logged {logged / GIB:.2f} GiB "
        f"({(estimate - logged) / logged:+.1%}); terms "
        f"{[(n, round(v / GIB, 2)) for n, v, _ in overhead.terms(overhead.Shape.from_config(log.config), log.engine())]}")


def test_the_median_is_within_3_percent_and_plan_states_the_benchmark():
    """The median error is at most 3 %, and what plan prints under an estimate (budget's
    ``LOGGED_WEIGHTS``: logs, median, worst) is this benchmark's result with the logged weights."""
    summary = published.summary(LOGS)
    assert summary["median"] <= 0.03
    assert budget.LOGGED_WEIGHTS == (summary["logs"], round(summary["median"], 3), round(summary["worst"], 3))


def test_the_computed_terms_beat_the_constant():
    """The computed overhead is closer to the logs than the 2 GiB constant it replaced, in the median
    and at worst."""
    before = [abs(log.estimates()[0] - log.logged) / log.logged for log in USED]
    after = [abs(log.estimates()[1] - log.logged) / log.logged for log in USED]
    assert statistics.median(after) < statistics.median(before)
    assert max(after) < max(before)


BREAKDOWN = [log for log in USED if "profile" in log.data["logged"]]


@pytest.mark.parametrize("log", BREAKDOWN, ids=[log.name for log in BREAKDOWN])
def test_terms_against_the_logged_breakdown(log):
    """Where vLLM logged its profile ("torch peak memory increase: X GiB; non-torch forward increase
    memory: Y GiB") the activation term is within 0.4 GiB of X (gpt-oss-20b at TP 2 is the worst,
    0.35) and the runtime term within 0.25 GiB of Y (granite-3.1-8b, 0.21); where it logged
    "Estimated CUDA graph memory: Z GiB", the graph term (as vLLM >= 0.21 would subtract it) is
    within 0.7 GiB of Z (Mistral-Small-3.1-24B w8a8 at TP 2, 0.65)."""
    profile = log.data["logged"]["profile"]
    peak = float(re.search(r"torch peak memory increase: ([0-9.]+)GiB", profile).group(1)) * GIB
    non_torch = float(re.search(r"non-torch forward increase memory: ([0-9.]+)GiB", profile).group(1)) * GIB
    shape, engine = overhead.Shape.from_config(log.config), log.engine()
    terms = {name: value for name, value, _ in overhead.terms(shape, engine)}
    assert abs(terms["activations"] - peak) <= 0.4 * GIB, (terms["activations"] / GIB, peak / GIB)
    assert abs(terms["runtime"] - non_torch) <= 0.25 * GIB, (terms["runtime"] / GIB, non_torch / GIB)
    if "cuda_graph_estimated" in log.data["logged"]:
        estimated = published.gib_bytes(log.data["logged"]["cuda_graph_estimated"])
        from dataclasses import replace

        assert abs(overhead.graphs(shape, replace(engine, vllm="0.21")) - estimated) <= 0.7 * GIB


def test_an_estimate_prints_how_far_off_it_was():
    b = budget.estimate((80 * GIB, "m"), 0.9, (10 * GIB, "w"), [("activations", GIB, "a"), ("runtime", GIB, "r")])
    assert b.bytes == int(80 * GIB * 0.9) - 12 * GIB
    logs, median, worst = budget.PLAN_WEIGHTS
    n, m, w = budget.LOGGED_WEIGHTS
    assert (f"  (computed terms: against {logs} public startup logs this estimate was off by {median:.1%} in the "
            f"median, {worst:.1%} at worst; {m:.1%} and {w:.1%} over {n} with the weights they logged: "
            "docs/plan.md)") in b.lines()
    exact = budget.exact(10 * GIB)
    assert not any("public startup logs" in line for line in exact.lines())
