"""plan's checks of its input before anything is planned: the model directory's
``config.json`` and the output paths and numbers (each failure :class:`~.errors.BadInput`:
one line, exit 2)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from vllm_kv_strategies.deploy.budget import DEVICES, GIB
from vllm_kv_strategies.deploy.errors import BadInput

#: A negative number as one argument: ``-0.5``, ``-1``, ``-1e3``, ``-.5``, ``-inf``, ``-nan``.
NEGATIVE = re.compile(r"-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|-inf(inity)?|-nan", re.IGNORECASE)
#: The most device memory ``--device-memory-gib`` may name: no accelerator has a TiB.
MAX_DEVICE_GIB = 1024.0


def join_negative_values(argv: list[str]) -> list[str]:
    """``--option -0.5`` as ``--option=-0.5``: vLLM's parser takes a negative number after a
    space for an option of its own (an IndexError at the end of the line; elsewhere the next
    argument blamed as the value), so the value goes with its option."""
    out: list[str] = []
    for token in argv:
        previous = out[-1] if out else ""
        if NEGATIVE.fullmatch(token) and previous.startswith("-") and "=" not in previous and not NEGATIVE.fullmatch(previous):
            out[-1] = f"{previous}={token}"
        else:
            out.append(token)
    return out


def largest_card() -> tuple[str, int]:
    """(name, bytes) of the card of :data:`~.budget.DEVICES` with the most memory."""
    name = max(DEVICES, key=lambda n: DEVICES[n].bytes)
    return name, DEVICES[name].bytes


def raw_value(argv: list[str], flag: str) -> str | None:
    """The text given for ``flag`` (``--a-b`` or ``--a_b``, ``flag V`` or ``flag=V``), the last one; else None."""
    found = None
    spellings = (flag, flag[:2] + flag[2:].replace("-", "_"))
    for i, token in enumerate(argv):
        name, _, value = token.partition("=")
        if name in spellings:
            found = value if "=" in token else (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def plain_number(text: str | None) -> int | float | None:
    """``text`` as a number where it is one plainly (``1e30``, ``-5``, ``nan``), else None (``8G``: vLLM's to read)."""
    for kind in (int, float):
        try:
            return kind(text) if text is not None else None
        except ValueError:
            continue
    return None


def check_budget(flag: str, value: float, device_memory_gib: float | None = None) -> None:
    """:class:`BadInput` for a KV cache budget per worker that no card holds: more than the largest
    card :data:`~.budget.DEVICES` knows, or than ``--device-memory-gib`` where that is larger."""
    name, largest = largest_card()
    limit = max(largest, int((device_memory_gib or 0) * GIB))
    if value > limit:
        raise BadInput(f"{flag} {value:.6g}: more bytes than any card holds per worker (the largest plan knows: "
                       f"{name}, {DEVICES[name].what}, {largest:,} bytes); a larger card: give its memory too "
                       "(--device-memory-gib GIB)")


def check_model_dir(path: str) -> dict:
    """The directory's ``config.json``; :class:`BadInput` when there is none,
    it is not a JSON object, its ``architectures`` is not a list of names,
    it asks for remote code (``auto_map``: plan runs no code from a model directory), or its
    ``num_hidden_layers`` is not 1 to :data:`MAX_LAYERS`."""
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
    for where, section in (("", config), ("text_config.", config.get("text_config"))):
        layers = section.get("num_hidden_layers") if isinstance(section, dict) else None
        if isinstance(layers, int) and not 0 < layers <= MAX_LAYERS:
            raise BadInput(f"{config_file}: {where}num_hidden_layers is {layers:,}; a model has 1 to {MAX_LAYERS:,} layers "
                           "(plan builds each one on the meta device)")
    return config


#: The most layers plan builds (the largest published models have about 130: Llama-3.1-405B 126).
MAX_LAYERS = 10_000


def _known_model_type(model_type: str | None) -> bool:
    """Whether the installed transformers configures ``model_type`` itself
    (then a config's ``auto_map``, e.g. DeepSeek-V2's, is not needed and the
    model is planned without it)."""
    try:
        from transformers import CONFIG_MAPPING

        return model_type in CONFIG_MAPPING
    except Exception:  # transformers unusable here: treat as unknown
        return False


def check_writable(flag: str, path: str | None) -> None:
    """:class:`BadInput` where a file cannot be written at ``path`` (None: none asked for)."""
    out = Path(path or ".")
    if path and (out.is_dir() or not out.parent.is_dir() or not os.access(out.parent, os.W_OK)):
        raise BadInput(f"{flag} {path}: cannot write a file there")


def check_outputs(args) -> None:
    """:class:`BadInput` for a ``--json`` path that cannot be written, a budget
    or device memory that is not a positive number, or an overhead below zero,
    before anything is planned."""
    for flag, path in (("--json", None if args.json_out == "-" else args.json_out), ("--plot", args.plot)):
        check_writable(flag, path)
    for name, zero_allowed in (("kv_cache_memory_bytes", False), ("device_memory_gib", False), ("overhead_gib", True)):
        value = getattr(args, name, None)
        if value is None:
            continue
        finite = math.isfinite(value)  # argparse's float() takes "nan" and "inf"
        if not finite or value < 0 or (value == 0 and not zero_allowed):
            least = "zero or more" if zero_allowed else "positive"
            raise BadInput(f"--{name.replace('_', '-')} {value}: must be {least}{'' if finite else ' and finite'}")
    if (args.device_memory_gib or 0) > MAX_DEVICE_GIB:
        name, largest = largest_card()
        raise BadInput(f"--device-memory-gib {args.device_memory_gib:g}: more than any accelerator has (at most "
                       f"{MAX_DEVICE_GIB:g} GiB; the largest card plan knows: {name}, {largest / GIB:.2f} GiB)")
    if (args.overhead_gib or 0) > MAX_DEVICE_GIB:
        raise BadInput(f"--overhead-gib {args.overhead_gib:g}: more than any accelerator has (at most {MAX_DEVICE_GIB:g} GiB)")
    for flag, value in (("--kv-cache-memory-bytes", getattr(args, "kv_cache_memory_bytes", None)),
                        *(("--stage-budgets", v) for v in getattr(args, "stage_budgets", None) or [])):
        if value is not None:
            check_budget(flag, value, args.device_memory_gib)


def check_before_vllm(known, argv: list[str]) -> dict:
    """plan's checks that need no vLLM, on its own options (``known``) and the plain numbers given to
    vLLM's ``--kv-cache-memory-bytes``: outputs, numbers, the model directory; its ``config.json``."""
    known.kv_cache_memory_bytes = plain_number(raw_value(argv, "--kv-cache-memory-bytes"))
    utilisation = plain_number(raw_value(argv, "--gpu-memory-utilization"))
    if utilisation is not None and not 0 < utilisation <= 1:  # vLLM's CacheConfig: gt=0, le=1
        raise BadInput(f"--gpu-memory-utilization {utilisation}: the fraction of the device's memory vLLM may use, "
                       "more than 0 and at most 1")
    check_outputs(known)
    return check_model_dir(known.model_dir)
