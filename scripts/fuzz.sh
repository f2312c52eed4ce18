#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (DEVELOPERS.md, "Fuzzing and sanitizers") one after the
# other, each for a time or a number of executions, and prints one line per target: the
# executions, executions per second, and ok or the crashing input. Exit status 1 when any
# target found something.
#
#   bash scripts/fuzz.sh [--build DIR] [--time SECONDS | --runs N] [--jobs J] [--logs DIR]
#                        [TARGET ...]
#
#   --build DIR   the clang build configured with -DPTDP_FUZZ=ON (default build-asan); the
#                 targets are built first when any is missing or stale
#   --time S      seconds per target (default 30; libFuzzer's -max_total_time)
#   --runs N      executions per target instead (libFuzzer's -runs), over all its processes
#   --jobs J      J processes of each target at once (default 1), fuzzing one shared working
#                 corpus (libFuzzer reloads it every second, as its own -jobs does); with --runs
#                 each process makes ceil(N / J) executions, with --time each runs S seconds.
#                 The line printed sums their executions and rates.
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
jobs=1
targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --time) time_s=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs needs a whole number >= 1, got '$jobs'" >&2; exit 2; }
[[ -z $runs || $runs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --runs needs a whole number >= 1, got '$runs'" >&2; exit 2; }
[[ $time_s =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --time needs a whole number of seconds >= 1, got '$time_s'" >&2; exit 2; }
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
[[ -n $runs ]] && limit=(-runs="$(((runs + jobs - 1) / jobs))")

failed=0
for t in "${targets[@]}"; do
  corpus=$build/fuzz/corpus/$t
  mkdir -p "$corpus"
  # One process per job, all on the same working corpus; each writes its own log.
  pids=()
  tlogs=()
  for ((j = 1; j <= jobs; j++)); do
    log=$logs/$t.log
    [[ $jobs -gt 1 ]] && log=$logs/$t.$j.log
    tlogs+=("$log")
    # shellcheck disable=SC2086
    "$build/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/fuzz/artifacts/$t-" ${PTDP_FUZZ_FLAGS:-} "$corpus" "$root/fuzz/corpus/$t" >"$log" 2>&1 &
    pids+=($!)
  done
  # The first process to fail stops the others with SIGTERM, which libFuzzer handles like SIGINT
  # (it prints its statistics); a script's background jobs start with SIGINT ignored.
  status=0
  running=("${pids[@]}")
  while [[ ${#running[@]} -gt 0 ]]; do
    s=0
    ended=""
    wait -n -p ended "${running[@]}" || s=$?
    left=()
    for pid in "${running[@]}"; do [[ $pid == "$ended" ]] || left+=("$pid"); done
    running=("${left[@]}")
    if [[ $s -ne 0 && $status -eq 0 ]]; then
      status=$s
      [[ ${#running[@]} -gt 0 ]] && kill -TERM "${running[@]}" 2>/dev/null || true
    fi
  done
  execs=0
  rate=0
  for log in "${tlogs[@]}"; do
    e=$(grep -m1 -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    r=$(grep -m1 -oE 'stat::average_exec_per_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    if [[ -z $e || -z $r || $execs == "?" ]]; then
      execs="?"
      rate="?"
    else
      execs=$((execs + e))
      rate=$((rate + r))
    fi
  done
  if [[ $status -eq 0 ]]; then
    printf 'fuzz: %-30s ok      %10s executions, %6s/s\n' "$t" "$execs" "$rate"
  else
    failed=1
    printf 'fuzz: %-30s FAILED  %10s executions (exit %d)\n' "$t" "$execs" "$status"
    for log in "${tlogs[@]}"; do
      artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -n1 | sed 's/Test unit written to //' || true)
      findings=$(grep -m3 -E 'ERROR: |runtime error|terminate called|==ERROR' "$log" || true)
      [[ -z $artifact && -z $findings && $jobs -gt 1 ]] && continue  # a process stopped by the others
      printf 'fuzz:   %s; log %s\n' "${artifact:-no input saved}" "$log"
      if [[ -n $findings ]]; then sed 's/^/fuzz:   /' <<<"$findings"; fi
    done
  fi
done
exit $failed
