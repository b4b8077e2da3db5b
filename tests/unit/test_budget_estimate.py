"""``plan``'s estimated budget (``deploy/budget.py``) with vLLM 0.34's resizable KV cache: the
utilisation a user does not give is 0.34's default for the sizing mode, and the margin vLLM keeps
free is a labelled term; without it the estimate is as before. Pure arithmetic on stated terms."""

from __future__ import annotations

from vllm_kv_strategies.deploy import budget

GIB = 2**30
MEMORY = (80 * GIB, "--device-memory-gib 80")
WEIGHTS = (30 * GIB, "weights")


def test_resizable_default_utilisation_and_margin_are_terms_of_the_estimate():
    b = budget.estimate(MEMORY, None, WEIGHTS, budget.given_overhead(2.0), resizable=True)
    assert b.bytes == 80 * GIB - 30 * GIB - 2 * GIB - GIB
    assert not b.exact
    assert [(n, v) for n, v, _ in b.terms] == [
        ("device memory", 80 * GIB), ("utilisation", 1000), ("weights", 30 * GIB), ("overhead", 2 * GIB), ("margin", GIB)]
    lines = b.lines()
    assert lines[0] == f"budget: ESTIMATE {b.bytes:,} bytes per worker (47.000 GiB) ="
    assert "vLLM 0.34's default with the resizable KV cache (1.00 with it, 0.92 without)" in lines[2]
    assert lines[5].startswith("  - margin        1,073,741,824 bytes (1.00 GiB)")
    assert "vLLM keeps max(1 GiB, 0.75 x the transient peak it measures at warm-up) = 1.00 GiB free" in lines[5]


def test_without_the_resizable_cache_the_default_is_0_92_and_no_margin():
    b = budget.estimate(MEMORY, None, WEIGHTS, budget.given_overhead(2.0), resizable=False)
    assert b.bytes == int(80 * GIB * 0.92) - 32 * GIB
    assert [n for n, _, _ in b.terms] == ["device memory", "utilisation", "weights", "overhead"]


def test_a_given_utilisation_is_used_and_named():
    """At utilisation 0.9 the 8 GiB it leaves out of 80 cover the 1 GiB margin: vLLM 0.34 takes
    ``min(requested - used, headroom - margin)``, and the first is the smaller."""
    b = budget.estimate(MEMORY, 0.9, WEIGHTS, budget.given_overhead(2.0), resizable=True)
    assert b.bytes == int(80 * GIB * 0.9) - 32 * GIB
    assert b.terms[1] == ("utilisation", 900, "--gpu-memory-utilization 0.9")
    assert b.terms[-1][:2] == ("margin", 0) and "less the 8.00 GiB the utilisation leaves out" in b.terms[-1][2]


def test_the_margin_is_three_quarters_of_a_computed_activation_peak():
    """With computed terms the margin is max(1 GiB, 0.75 x the activations): 4 GiB of activations at
    utilisation 1.0 keep 3 GiB free beyond them; at 0.98 the 1.6 GiB left out cover part of it."""
    computed = [("activations", 4 * GIB, "a"), ("runtime", GIB, "r")]
    b = budget.estimate(MEMORY, None, WEIGHTS, computed, resizable=True)
    assert b.terms[-1][:2] == ("margin", 3 * GIB) and b.bytes == 80 * GIB - 30 * GIB - 5 * GIB - 3 * GIB
    b = budget.estimate(MEMORY, 0.98, WEIGHTS, computed, resizable=True)
    assert b.terms[-1][:2] == ("margin", 3 * GIB - (80 * GIB - int(80 * GIB * 0.98)))


def test_on_rocm_the_margin_floor_is_3_gib():
    """vLLM 0.34's ``KV_CACHE_MARGIN_FLOOR_BYTES`` is 3 GiB where the platform is ROCm (an MI300X planned)."""
    b = budget.estimate(MEMORY, None, WEIGHTS, budget.given_overhead(2.0), resizable=True, rocm=True)
    assert b.bytes == 80 * GIB - 30 * GIB - 2 * GIB - 3 * GIB
    assert b.terms[-1][:2] == ("margin", 3 * GIB)
    assert "resizable KV cache (vLLM 0.34, ROCm): vLLM keeps max(3 GiB," in b.terms[-1][2]
