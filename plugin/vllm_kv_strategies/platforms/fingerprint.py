"""A fingerprint of the runner code the plugin patches, so that a release is
covered by the tests of the release whose code it has, and by nothing else.

The fingerprint of a class's methods is a hash of their syntax trees: two
sources with the same statements give the same fingerprint whatever their
comments, docstrings, blank lines or line numbers; any change of code (a
renamed variable, a new argument, a reordered branch) gives another. It is
computed the same way from an installed module (at patch time) and from a
release's file read out of its wheel or sdist (``tools/ascend_releases.py``,
which writes :mod:`vllm_kv_strategies.platforms.ascend.releases`).

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from typing import Any

#: Node fields that are not code: per-Python-version additions that are
#: always empty in the runners' source (``type_params`` of 3.12) or comments.
_SKIPPED_FIELDS = frozenset({"type_comment", "type_params"})
#: Written for a method the class does not define.
ABSENT = "<absent>"


def _normal(node: Any) -> Any:
    """A nested tuple of a node's type and fields (no positions), stable
    across Python 3.10 - 3.13 for the same source."""
    if isinstance(node, ast.AST):
        return (type(node).__name__,) + tuple(
            (name, _normal(getattr(node, name, None))) for name in node._fields if name not in _SKIPPED_FIELDS
        )
    if isinstance(node, list):
        return tuple(_normal(item) for item in node)
    return repr(node)


def _without_docstring(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = fn.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


def _digest(defined: dict[str, Any], names: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for name in names:
        fn = defined.get(name)
        if fn is None:
            shape: Any = ABSENT
        else:
            shape = (
                type(fn).__name__,
                _normal(fn.args),
                _normal(fn.decorator_list),
                _normal(fn.returns),
                _normal(_without_docstring(fn)),
            )
        digest.update(f"{name}={shape!r}\n".encode())
    return digest.hexdigest()[:16]


def _functions(body: list[ast.stmt]) -> dict[str, Any]:
    return {item.name: item for item in body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}


def method_fingerprint(source: str, class_name: str | None, methods: Iterable[str]) -> str:
    """The fingerprint (16 hex digits) of ``class_name``'s ``methods`` in a
    module's ``source`` (``class_name`` None: the module's own functions):
    their names, signatures, decorators and bodies without docstrings, in the
    order given. A method the class does not define counts as
    :data:`ABSENT`; a class the module does not define makes every method
    absent.

    Raises:
        SyntaxError: ``source`` is not Python this interpreter parses.
    """
    tree = ast.parse(source)
    defined: dict[str, Any] = _functions(tree.body) if class_name is None else {}
    for node in tree.body:
        if class_name is not None and isinstance(node, ast.ClassDef) and node.name == class_name:
            defined = _functions(node.body)
    return _digest(defined, methods)


def module_fingerprint(module: Any, class_name: str | None, methods: Iterable[str]) -> str:
    """:func:`method_fingerprint` of an imported module's source file.

    Raises:
        OSError: the module's source cannot be read (a module without a
            ``.py`` file).
    """
    import inspect

    return method_fingerprint(inspect.getsource(module), class_name, methods)
