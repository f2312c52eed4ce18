#!/usr/bin/env bash
# Runs every test of the project once, each in the build that suits it (CONTRIBUTING.md "Test",
# DEVELOPERS.md "Fuzzing and sanitizers"):
#   1. in the release build given (default build, already built; the README configures it with
#      PTDP_RELEASE_ONLY_TESTS=ON, which leaves out the test programs of step 2): the tests a
#      sanitizer build cannot run, by label (`python`, `abi`, `packaging`, `learning`: they load
#      libptdp into interpreters without the sanitizer runtime, compare release packages and ABI
#      dumps, or train 150 iterations that the sanitizers make 10 times slower), and the tests it
#      does not build (the bindings and their samples, the documentation, the GPU tests);
#   2. every other test, the C and C++ suite, under AddressSanitizer and
#      UndefinedBehaviorSanitizer in a clang build (default build-asan beside BUILD: -O1, the
#      fuzz targets too), configured and built here.
# Prints both ctest runs and ends with one summary line over both in ctest's words, so
# "100% tests passed, 0 tests failed out of N" counts every test of the release build.
#
#   bash scripts/run-tests.sh [BUILD]
#   PTDP_TEST_SANITIZE=0   every test in BUILD instead (no clang build)
#   PTDP_ASAN_BUILD=DIR    the sanitizer build directory
#   PTDP_TEST_JOBS=N       ctest's and the build's parallelism (default: nproc)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
jobs=${PTDP_TEST_JOBS:-$(nproc)}
[[ -f $build/CTestTestfile.cmake ]] || { echo "run-tests: $build is not a configured build" >&2; exit 2; }

if [[ ${PTDP_TEST_SANITIZE:-1} == 0 ]]; then
  if grep -q '^PTDP_RELEASE_ONLY_TESTS:BOOL=ON' "$build/CMakeCache.txt"; then
    echo "run-tests: $build was configured with PTDP_RELEASE_ONLY_TESTS=ON, so it lacks the tests the sanitizer" \
         "build runs; reconfigure it with -DPTDP_RELEASE_ONLY_TESTS=OFF to run every test there" >&2
    exit 2
  fi
  exec ctest --test-dir "$build" --output-on-failure -j"$jobs"
fi

asan=${PTDP_ASAN_BUILD:-$(dirname "$build")/build-asan}
# The labels whose tests only the release build runs, and why: see the header.
release_labels='^(python|abi|packaging|learning)$'
summary_re='^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+'
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# --- The sanitizer build ------------------------------------------------------------------
# Configured and built first: which tests it has decides what the release build runs.
t0=$SECONDS
echo "run-tests: sanitizer build (clang, ASan + UBSan, -O1) in $asan"
cmake -S "$root" -B "$asan" -DPTDP_WITH_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DPTDP_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
  >"$logs/asan-configure.log" 2>&1 || { cat "$logs/asan-configure.log"; echo "run-tests: configuring $asan failed"; exit 1; }
if ! cmake --build "$asan" -j"$jobs" >"$asan/build.log" 2>&1; then
  grep -E 'error|Error' "$asan/build.log" | head -n 40
  tail -n 20 "$asan/build.log"
  echo "run-tests: the sanitizer build failed ($asan/build.log)"
  exit 1
fi
echo "run-tests: sanitizer build took $((SECONDS - t0)) s"

# --- Which test runs where ----------------------------------------------------------------
# The release build runs its tests that the sanitizer run does not have (by name), as a list
# of ctest test numbers (ctest -I FILE).
ctest --test-dir "$build" --show-only=json-v1 >"$logs/release.json"
ctest --test-dir "$asan" --show-only=json-v1 >"$logs/asan.json"
python3 - "$logs/release.json" "$logs/asan.json" "$release_labels" "$logs/release.list" <<'EOF'
import json, re, sys
release, asan, labels_re, out = sys.argv[1:]
def tests(path):
    found = []
    for t in json.load(open(path))["tests"]:
        labels = next((p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"), [])
        found.append((t["name"], labels))
    return found
label = re.compile(labels_re)
sanitized = {name for name, labels in tests(asan) if not any(label.match(l) for l in labels)}
numbers = [str(i + 1) for i, (name, _) in enumerate(tests(release)) if name not in sanitized]
open(out, "w").write("0,0,0," + ",".join(numbers) + "\n" if numbers else "")
print(f"run-tests: {len(numbers)} tests in the release build, {len(sanitized)} under the sanitizers")
EOF

status=0
# --- 1. The release build -----------------------------------------------------------------
t0=$SECONDS
release_status=0
if [[ -s $logs/release.list ]]; then
  set +e
  ctest --test-dir "$build" --output-on-failure -j"$jobs" -I "$logs/release.list" 2>&1 | tee "$logs/release.log"
  release_status=${PIPESTATUS[0]}
  set -e
else
  echo "0% tests passed, 0 tests failed out of 0" >"$logs/release.log"
fi
echo "run-tests: the release build's tests took $((SECONDS - t0)) s"

# --- 2. The sanitizer build ---------------------------------------------------------------
# Leak detection is off: Open MPI and OpenMP keep allocations alive to the end of the process,
# which LeakSanitizer would report in every multi-rank test (the fuzz targets keep it on). A
# UBSan report aborts the test (-fno-sanitize-recover=all and halt_on_error).
t0=$SECONDS
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  OMPI_MCA_rmaps_base_oversubscribe=1 \
  ctest --test-dir "$asan" --output-on-failure -j"$jobs" -LE "$release_labels" 2>&1 | tee "$logs/asan.log"
asan_status=${PIPESTATUS[0]}
set -e
echo "run-tests: the sanitizer build's tests took $((SECONDS - t0)) s"

# --- One summary over both ----------------------------------------------------------------
total=0
failed=0
for run in release asan; do
  line=$(grep -E "$summary_re" "$logs/$run.log" | tail -n 1 || true)
  if [[ -z $line ]]; then
    echo "run-tests: ctest reported no summary for the $run tests"
    status=1
    continue
  fi
  echo "run-tests: $run: $line"
  n=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  f=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  total=$((total + n))
  failed=$((failed + f))
done
[[ $release_status -ne 0 || $asan_status -ne 0 ]] && status=1
if [[ $total -gt 0 ]]; then
  echo "$(((total - failed) * 100 / total))% tests passed, $failed tests failed out of $total"
fi
exit "$status"
