#!/usr/bin/env bash
# Usage: run_release_program.sh [--expect REGEX]... [--mpi N MPIEXEC] [--fresh DIR] RELEASE_MAP LIBDIR PROGRAM [ARG]...
#
# Runs PROGRAM, a program built against an old release's ptdp.h and linked to a stub library
# made from that release's version script (RELEASE_MAP), with today's libptdp.so.0 from LIBDIR,
# as a program of that release runs on a machine where libptdp has been upgraded. Fails unless
#   - PROGRAM is bound to libptdp.so.0 and to no symbol version but the release's own (so the
#     test exercises what that release's programs call, not today's default versions);
#   - PROGRAM exits with status 0 and its output matches every REGEX (grep -E).
# --mpi N MPIEXEC runs it as N ranks under MPIEXEC; --fresh DIR removes DIR first (a save
# directory the program must find empty).
set -euo pipefail
expects=()
mpi=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --expect) expects+=("$2"); shift 2 ;;
    --mpi) mpi=("$3" --oversubscribe --allow-run-as-root -np "$2" -x OMP_NUM_THREADS=1 -x LD_LIBRARY_PATH); shift 3 ;;
    --fresh) rm -rf "$2"; shift 2 ;;
    *) break ;;
  esac
done
if [[ $# -lt 3 ]]; then
  echo "usage: $0 [--expect REGEX]... [--mpi N MPIEXEC] [--fresh DIR] RELEASE_MAP LIBDIR PROGRAM [ARG]..." >&2
  exit 2
fi
map=$1 libdir=$(readlink -f "$2") program=$3
shift 3

release_nodes=$(grep -oE '^PTDP_[0-9.]+' "$map" | sort -u)
# The versions PROGRAM needs from libptdp.so.0 (readelf's .gnu.version_r listing).
needed=$(readelf -V --wide "$program" |
         awk '/File: libptdp\.so\.0/ { on = 1; next } /File: / { on = 0 } on && /Name: PTDP_/ {
                for (i = 1; i <= NF; i++) if ($i == "Name:") print $(i + 1) }' | sort -u)
if [[ -z "$needed" ]]; then
  echo "FAIL: $program needs no symbol version of libptdp.so.0 (is it linked to the release's stub?)" >&2
  exit 1
fi
stray=$(comm -23 <(echo "$needed") <(echo "$release_nodes"))
if [[ -n "$stray" ]]; then
  echo "FAIL: $program is bound to $(echo "$stray" | tr '\n' ' ')which $map does not define" >&2
  exit 1
fi
library=$libdir/libptdp.so.0
if [[ ! -f "$library" ]]; then
  echo "FAIL: no $library" >&2
  exit 1
fi
echo "$(basename "$program"): bound to $(echo "$needed" | tr '\n' ' ')(the release's version nodes); running with" \
  "$(readlink -f "$library")"

log=$(mktemp "${TMPDIR:-/tmp}/ptdp-release-run.XXXXXX")
trap 'rm -f "$log"' EXIT
set +e
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${mpi[@]}" "$program" "$@" > "$log" 2>&1
rc=$?
set -e
cat "$log"
if [[ $rc -ne 0 ]]; then
  echo "FAIL: $(basename "$program") exited with status $rc" >&2
  exit 1
fi
for regex in "${expects[@]}"; do
  if ! grep -Eq -- "$regex" "$log"; then
    echo "FAIL: the output of $(basename "$program") has no line matching '$regex'" >&2
    exit 1
  fi
done
echo "PASS: $(basename "$program") of this release ran to completion with today's library"
