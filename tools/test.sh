#!/usr/bin/env bash
# Run the test matrix: every cell of noxfile.py (one per supported release), each in its own
# environment built from requirements/<cell>.txt, then print a table: cell, tests
# passed/failed/skipped, minutes. This is what CI runs (.ci/run).
#
# Usage: tools/test.sh [CELL ...] [-- PYTEST_ARGS ...]
#   CELL  a cell of the support matrix (upstream-0.32.0, ascend-0.23.0, ...) or docs (the strict
#         docs build and the claims test); tools/nox.sh -l lists them (the ones marked *).
#         Default: all, the docs session last.
# Exits non-zero if any cell failed, could not be installed, or ran no test (pytest's exit
# code 5 fails the cell).
# Disk: each environment takes 2.1-3.7 GiB. Before a cell, when less than KV_TEST_CELL_DISK_GIB
# (default 4) GiB are free, other cells' environments in .nox are removed (tools/make_room.py).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NOX="$ROOT/tools/nox.sh"
REPORTS=$ROOT/.nox/_reports
CELLS=(); PYTEST_ARGS=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -h || $1 == --help ]]; then sed -n '2,13p' "$0" | cut -c3-; exit 0; fi
  if [[ $1 == -- ]]; then shift; PYTEST_ARGS=("$@"); break; fi
  CELLS+=("$1"); shift
done
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
NEED_GIB=${KV_TEST_CELL_DISK_GIB:-4}
if [[ ! $NEED_GIB =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
  echo "tools/test.sh: KV_TEST_CELL_DISK_GIB='$NEED_GIB' is not a number of GiB (default 4)" >&2; exit 2
fi
# The noxfile's default sessions: every cell of the support matrix.
mapfile -t KNOWN < <("$NOX" --list --json | python3 -c 'import json, sys; print("\n".join(s["session"] for s in json.load(sys.stdin)))')
[[ ${#KNOWN[@]} -gt 0 ]] || { echo "tools/test.sh: nox lists no cell" >&2; exit 1; }
[[ ${#CELLS[@]} -gt 0 ]] || CELLS=("${KNOWN[@]}")
for cell in "${CELLS[@]}"; do
  if [[ " ${KNOWN[*]} " != *" $cell "* ]]; then
    echo "tools/test.sh: unknown cell '$cell'; the cells are: ${KNOWN[*]}" >&2; exit 2
  fi
done

free_gib() { python3 "$ROOT/tools/make_room.py" --free "$ROOT"; }
FREE_AT_START=$(free_gib)
echo "=== disk: $FREE_AT_START GiB free on the filesystem of $ROOT"
declare -A RESULT MINUTES
FAILED=0
for cell in "${CELLS[@]}"; do
  start=$SECONDS
  echo "=== $cell"
  rm -f "$REPORTS/$cell.installed" "$REPORTS/$cell.xml"
  python3 "$ROOT/tools/make_room.py" "$ROOT/.nox/${cell//./-}" --need-gib "$NEED_GIB"
  "$NOX" -s "$cell" -- ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}
  rc=$?
  MINUTES[$cell]=$(python3 -c "print(f'{($SECONDS - $start) / 60:.1f}')")
  [[ $rc -eq 0 ]] || FAILED=1
  if [[ ! -f $REPORTS/$cell.installed ]]; then
    echo "=== $cell: its environment could not be installed (nox exit code $rc; $(free_gib) GiB free on disk; see above)" >&2
    RESULT[$cell]="INSTALL FAILED (rc $rc)"; FAILED=1; continue
  fi
  RESULT[$cell]=$(python3 - "$REPORTS/$cell.xml" "$rc" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
    s = root if root.tag == "testsuite" else root.find("testsuite")
    t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
    if t - k == 0:
        print(f"FAILED: no test ran ({t} collected, {k} skipped; rc {sys.argv[2]})")
    else:
        print(f"{t - f - e - k} passed, {f + e} failed, {k} skipped (rc {sys.argv[2]})")
except Exception:
    print(f"no test report (rc {sys.argv[2]})")
PY
)
  [[ ${RESULT[$cell]} != FAILED* ]] || FAILED=1
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
echo "disk: $FREE_AT_START GiB free at the start, $(free_gib) GiB at the end"
exit $FAILED
