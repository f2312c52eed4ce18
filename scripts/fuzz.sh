#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (DEVELOPERS.md, "Fuzzing and sanitizers") one after the
# other, each for a time or a number of executions, and prints one line per target: the
# executions, executions per second, and ok or the crashing input. Exit status 1 when any
# target found something.
#
#   bash scripts/fuzz.sh [--build DIR] [--time SECONDS | --runs N] [--logs DIR] [TARGET ...]
#
#   --build DIR   the clang build configured with -DPTDP_FUZZ=ON (default build-asan); the
#                 targets are built first when any is missing or stale
#   --time S      seconds per target (default 30; libFuzzer's -max_total_time)
#   --runs N      executions per target instead (libFuzzer's -runs)
#   --logs DIR    where each target's libFuzzer log goes (default DIR/fuzz/logs)
#   TARGET        fuzz_train_args, fuzz_safetensors, ... (default: every target)
#
# Each target starts from its seed corpus fuzz/corpus/<target>/ (read only) plus a working
# corpus in DIR/fuzz/corpus/<target>/ that keeps what earlier runs found; a crashing input is
# written to DIR/fuzz/artifacts/ and named in the output. Reproduce one with
# `DIR/fuzz/<target> FILE`. Extra libFuzzer flags can be given in PTDP_FUZZ_FLAGS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-asan
time_s=30
runs=""
logs=""
targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --time) time_s=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
build=$(cd "$build" 2>/dev/null && pwd) || { echo "fuzz.sh: no build directory; configure one with -DPTDP_FUZZ=ON" >&2; exit 2; }
if ! grep -q '^PTDP_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz.sh: $build is not configured with -DPTDP_FUZZ=ON (clang)" >&2
  exit 2
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(cd "$root/fuzz/corpus" && ls -d fuzz_* | sort)
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
logs=${logs:-$build/fuzz/logs}
mkdir -p "$logs" "$build/fuzz/artifacts"

# Leaks are findings too in these short-lived parsers; UBSan aborts on its first report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
limit=(-max_total_time="$time_s")
[[ -n $runs ]] && limit=(-runs="$runs")

failed=0
for t in "${targets[@]}"; do
  corpus=$build/fuzz/corpus/$t
  mkdir -p "$corpus"
  log=$logs/$t.log
  set +e
  # shellcheck disable=SC2086
  "$build/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz/artifacts/$t-" ${PTDP_FUZZ_FLAGS:-} "$corpus" "$root/fuzz/corpus/$t" >"$log" 2>&1
  status=$?
  set -e
  execs=$(grep -m1 -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  rate=$(grep -m1 -oE 'stat::average_exec_per_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  if [[ $status -eq 0 ]]; then
    printf 'fuzz: %-30s ok      %10s executions, %6s/s\n' "$t" "$execs" "$rate"
  else
    failed=1
    artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -n1 | sed 's/Test unit written to //')
    printf 'fuzz: %-30s FAILED  %10s executions (exit %d): %s; log %s\n' "$t" "$execs" "$status" \
      "${artifact:-no input saved}" "$log"
    grep -m3 -E 'ERROR: |runtime error|terminate called|==ERROR' "$log" | sed 's/^/fuzz:   /' || true
  fi
done
exit $failed
