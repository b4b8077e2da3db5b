"""``vllm_kv_strategies.envs``: every variable, its default, its valid values.

The table below is written by hand; a variable added to
``envs.environment_variables`` without a row here fails
``test_every_variable_is_covered``.
"""

from __future__ import annotations

import pytest

from vllm_kv_strategies import envs

#: name -> (default when unset, every valid value)
EXPECTED = {
    "KV_STRATEGIES": ("auto", ("auto", "on", "off", "observe")),
    "KV_STRATEGIES_REPORT": ("", ("", "/tmp/kv-reports")),
    "KV_STRATEGIES_RUN_ID": ("", ("", "deployment-7")),
    "KV_STRATEGIES_DRIVER_MODE": ("", ("", "auto", "on", "off", "observe")),
    "KV_STRATEGIES_TEST_FAULT": ("", ("", "share_group_cache")),
}


def test_every_variable_is_covered():
    assert list(envs.environment_variables) == list(EXPECTED)


def test_dir_lists_exactly_the_variables():
    assert sorted(dir(envs)) == sorted(EXPECTED)
    assert list(envs.__dir__()) == list(EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_unset_gives_the_default(name, monkeypatch):
    monkeypatch.delenv(name, raising=False)
    assert getattr(envs, name) == EXPECTED[name][0]


@pytest.mark.parametrize(
    ("name", "value"), [(n, v) for n, (_, values) in EXPECTED.items() for v in values]
)
def test_each_valid_value_is_read(name, value, monkeypatch):
    monkeypatch.setenv(name, value)
    assert getattr(envs, name) == value


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("KV_STRATEGIES", "ON", "on"),
        ("KV_STRATEGIES", "Off", "off"),
        ("KV_STRATEGIES", "OBSERVE", "observe"),
        ("KV_STRATEGIES", " AUTO \n", "auto"),
        ("KV_STRATEGIES_TEST_FAULT", "Share_Group_Cache", "share_group_cache"),
    ],
)
def test_values_are_case_insensitive_and_stripped(name, raw, value, monkeypatch):
    monkeypatch.setenv(name, raw)
    assert getattr(envs, name) == value


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("KV_STRATEGIES", "maybe"),
        ("KV_STRATEGIES", "1"),
        ("KV_STRATEGIES_TEST_FAULT", "share"),
    ],
)
def test_invalid_value_raises_naming_the_valid_ones(name, bad, monkeypatch):
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError) as info:
        getattr(envs, name)
    message = str(info.value)
    assert f"{name}={bad!r}" in message
    for valid in EXPECTED[name][1]:
        assert (repr(valid) if valid else "unset (or empty)") in message


@pytest.mark.parametrize("name", ["KV_STRATEGIES", "KV_STRATEGIES_TEST_FAULT"])
def test_set_but_empty_means_the_default(name, monkeypatch):
    monkeypatch.setenv(name, "")
    assert getattr(envs, name) == EXPECTED[name][0]


def test_read_on_every_access_not_cached(monkeypatch):
    monkeypatch.setenv("KV_STRATEGIES", "off")
    assert envs.KV_STRATEGIES == "off"
    monkeypatch.setenv("KV_STRATEGIES", "on")
    assert envs.KV_STRATEGIES == "on"
    monkeypatch.delenv("KV_STRATEGIES")
    assert envs.KV_STRATEGIES == "auto"


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="KV_STRATEGIES_NOPE"):
        envs.KV_STRATEGIES_NOPE  # noqa: B018


def test_no_variable_uses_the_vllm_prefix():
    # vLLM warns about (and can be told to reject) unknown VLLM_* variables.
    assert not [n for n in envs.environment_variables if n.startswith("VLLM_")]
