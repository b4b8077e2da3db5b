"""plan's one-line messages: bad input (:class:`BadInput`, exit 2) and what
vLLM says when it will not make a configuration or build a model, in its
words (an assertion without words located)."""

from __future__ import annotations

from pathlib import Path


class BadInput(Exception):
    """A problem with the command's input: one line, exit 2."""


def _rejection(exc: BaseException) -> str:
    """One line for an engine config vLLM (or its platform) would not make:
    its words, where an assertion without words failed (pydantic wraps one
    raised in ``VllmConfig.__post_init__``), a module the arguments need that
    is not installed here, or vLLM's swap space check of this machine's memory."""
    inner = _wrapped(exc)
    if isinstance(inner, ImportError):
        return (f"the configuration needs {inner.name or 'a module'}, which is not installed here ({type(inner).__name__}: "
                f"{_one_line(inner)}); plan in the environment that serves, or install it")
    if isinstance(inner, AssertionError) and not str(inner).strip() and inner.__traceback__ is not None:
        return f"vLLM rejects the configuration: {_described(inner)}"
    message = f"vLLM rejects the configuration: {type(exc).__name__}: {_one_line(exc)}"
    if "swap space" in str(exc):  # CacheConfig.verify_with_parallel_config (vLLM before 0.18)
        message += (" (vLLM checks --swap-space GiB x the tensor parallel size against THIS machine's memory; "
                    "vLLM V1 does not use the swap space: pass --swap-space 0 to plan here)")
    return message


def _described(exc: BaseException) -> str:
    """``Type: message``; an assertion without words located: function, file, line and the assertion."""
    if isinstance(exc, AssertionError) and not str(exc).strip() and exc.__traceback__ is not None:
        import traceback

        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = "/".join(Path(frame.filename).parts[-2:])
        return f"assertion failed in {frame.name} ({where}:{frame.lineno}): {frame.line}"
    return f"{type(exc).__name__}: {_one_line(exc)}{_mismatch(exc)}"


def _mismatch(exc: BaseException) -> str:
    """For a ``TypeError`` of arguments raised below vllm-ascend's code into vLLM's (vllm-ascend
    0.30.0rc2's MoE patch calling the vLLM 0.30.0 wheel's ``RoutedExperts``): why, in words."""
    if not isinstance(exc, TypeError) or "argument" not in str(exc) or exc.__traceback__ is None:
        return ""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    ascend = [f for f in frames if "vllm_ascend" in Path(f.filename).parts]
    if not ascend or "vllm_ascend" in Path(frames[-1].filename).parts:
        return ""
    where = "/".join(Path(ascend[-1].filename).parts[-2:])
    return (f"; vllm-ascend's {ascend[-1].name} ({where}:{ascend[-1].lineno}) calls vLLM with arguments this vLLM "
            "does not take: the installed vllm-ascend and vLLM releases do not fit each other here (with the vLLM "
            "release vllm-ascend is built against, it builds)")


def _wrapped(exc: BaseException) -> BaseException:
    """The error a pydantic ``ValidationError`` wraps (its first error's
    ``ctx["error"]``), else ``exc``."""
    errors = getattr(exc, "errors", None)
    try:
        inner = errors()[0].get("ctx", {}).get("error") if callable(errors) else None
    except Exception:  # not pydantic's
        inner = None
    return inner if isinstance(inner, BaseException) else exc


#: The most characters of another library's message that one error line carries (vLLM's lists of
#: valid values and its attention backends' reasons run to 1,000-1,500).
ONE_LINE_CHARS = 2000


def _one_line(exc: BaseException | str) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and "errors.pydantic.dev" not in line]
    line = " ".join(lines)
    if len(line) <= ONE_LINE_CHARS:
        return line
    cut = line.rfind(" ", 0, ONE_LINE_CHARS - 6)
    return line[: cut if cut > 0 else ONE_LINE_CHARS - 6] + " [...]"  # cut at a word, and said
