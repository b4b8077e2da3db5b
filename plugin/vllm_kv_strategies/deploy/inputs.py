"""plan's checks of its input before anything is planned: the model directory's
``config.json`` and the output paths and numbers (each failure :class:`~.errors.BadInput`:
one line, exit 2)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from vllm_kv_strategies.deploy.errors import BadInput


def check_model_dir(path: str) -> dict:
    """The directory's ``config.json``; :class:`BadInput` when there is none,
    it is not a JSON object, its ``architectures`` is not a list of names, or
    it asks for remote code (``auto_map``: plan runs no code from a model directory)."""
    directory = Path(path)
    if directory.is_file():
        raise BadInput(f"{path}: a file; plan takes the model directory holding config.json ({directory.parent})")
    if not directory.is_dir():
        raise BadInput(f"{path}: no such directory (plan takes a local model directory holding config.json)")
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise BadInput(f"{path}: has no config.json")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{config_file}: not readable as JSON ({exc})") from None
    if not isinstance(config, dict):
        raise BadInput(f"{config_file}: holds a JSON {type(config).__name__}, not the object of a model's configuration")
    archs = config.get("architectures")
    if archs is None or archs == []:
        raise BadInput(f"{config_file}: has no \"architectures\" (the model's class, e.g. [\"LlamaForCausalLM\"]); "
                       "vLLM would otherwise take transformers' default for its model_type, not this model")
    if not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise BadInput(f"{config_file}: \"architectures\" is {json.dumps(archs)[:80]}, not a list of class names "
                       "(e.g. [\"LlamaForCausalLM\"])")
    if config.get("auto_map") and not _known_model_type(config.get("model_type")):
        raise BadInput(f"{config_file}: the model needs remote code (auto_map {sorted(config['auto_map'])}, model_type "
                       f"{config.get('model_type')!r} unknown to the installed transformers); plan runs no code from a "
                       "model directory")
    return config


def _known_model_type(model_type: str | None) -> bool:
    """Whether the installed transformers configures ``model_type`` itself
    (then a config's ``auto_map``, e.g. DeepSeek-V2's, is not needed and the
    model is planned without it)."""
    try:
        from transformers import CONFIG_MAPPING

        return model_type in CONFIG_MAPPING
    except Exception:  # transformers unusable here: treat as unknown
        return False


def check_outputs(args) -> None:
    """:class:`BadInput` for a ``--json`` path that cannot be written, a budget
    or device memory that is not a positive number, or an overhead below zero,
    before anything is planned."""
    for flag, path in (("--json", args.json_out), ("--plot", args.plot)):
        out = Path(path or ".")
        if path and (out.is_dir() or not out.parent.is_dir() or not os.access(out.parent, os.W_OK)):
            raise BadInput(f"{flag} {path}: cannot write a file there")
    for name, zero_allowed in (("kv_cache_memory_bytes", False), ("device_memory_gib", False), ("overhead_gib", True)):
        value = getattr(args, name, None)
        if value is None:
            continue
        finite = math.isfinite(value)  # argparse's float() takes "nan" and "inf"
        if not finite or value < 0 or (value == 0 and not zero_allowed):
            least = "zero or more" if zero_allowed else "positive"
            raise BadInput(f"--{name.replace('_', '-')} {value}: must be {least}{'' if finite else ' and finite'}")
