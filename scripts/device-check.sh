#!/usr/bin/env bash
# The one prepared GPU check: build the CUDA engine (required, sm_90 + PTX), run the `gpu`
# tests, run the benchmarks, and write a report. Usage: scripts/device-check.sh [OUTDIR]
# (default: $OUT when set, else ./device-report). Exits non-zero when the build or a test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device-report}}
mkdir -p "$out"
report="$out/report.txt"
build=build-device
: > "$report"
say() { echo "$*" | tee -a "$report"; }

say "== ptdp device check $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true; } | tee -a "$report"
{ /usr/local/cuda/bin/nvcc --version 2>&1 | tail -n 1; nproc; } | tee -a "$report"

status=0
say "== configure + build"
if ! { cmake -S . -B "$build" -DPTDP_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
       cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1; }; then
  say "BUILD FAILED (see configure.log / build.log)"
  tail -n 40 "$out/build.log" "$out/configure.log" 2>/dev/null | tee -a "$report"
  exit 1
fi

say "== gpu tests"
ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.log" | tail -n 15 | tee -a "$report"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
if grep -q "Skipped" "$out/ctest-gpu.log"; then
  say "WARNING: gpu tests were skipped: no usable GPU seen by the test programs"
  status=1
fi

say "== all other tests"
ctest --test-dir "$build" -LE gpu -j"$(nproc)" 2>&1 | tail -n 5 | tee -a "$report"

say "== benchmarks"
"$build/bench/bench_kernels" --quick --json "$out/bench_kernels.json" 2>&1 | tee -a "$report"
say "-- bench_comm on the GPU (NCCL, 1 rank per GPU)"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
mpirun --allow-run-as-root --oversubscribe -np "$(( ngpu > 0 ? ngpu : 1 ))" \
  "$build/bench/bench_comm" --device cuda --json "$out/bench_comm_cuda.json" 2>&1 | tee -a "$report"

say "== done, status $status"
exit $status
