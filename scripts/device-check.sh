#!/usr/bin/env bash
# The one prepared GPU check, for a machine with an NVIDIA GPU and the CUDA toolkit (the lent
# H200 has no Open MPI, no OpenBLAS and no package registry). It runs every `gpu` test program
# (each CUDA op against the CPU reference in f32, bf16 and f16, the flash-attention kernels,
# the GPT step and AdamW training on the GPU against the CPU engine, device Philox, NCCL), then
# the GPU benchmarks: bench_gpu (cuBLASLt GEMMs, fused attention, and whole bf16 training
# iterations of GPT 124M, 350M and 1.3B through the C API with tokens/s and MFU against 989
# TFLOP/s), bench_gpt on 1.3B in bf16 (forward and backward apart) and on 124M in fp32, and
# writes OUTDIR/report.txt.
#
#   bash scripts/device-bundle.sh          # here: build for sm_90 and pack device-bundle.tar.xz
#   bash scripts/device-check.sh [OUTDIR]  # there (default OUTDIR: $OUT, else ./device-report)
#
# With device-bundle.tar.xz present (carried) the bundle's programs run with its libraries;
# without it the script builds on the machine (CUDA on, MPI off), which needs OpenBLAS there.
# Tests and benchmarks share a budget of 465 s after the bundle is unpacked (a build here comes
# on top); each step runs under `timeout`, and the benchmarks' shares are held back from the
# tests, so the whole check stays under 8 minutes on one H200. Exits non-zero when a test
# fails, is skipped or runs out of time, or a benchmark fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-${OUT:-device-report}}
mkdir -p "$out"
report="$out/report.txt"
: > "$report"
say() { echo "$*" | tee -a "$report"; }
status=0

say "== ptdp device check $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || cat device-bundle/COMMIT 2>/dev/null || echo '?')"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true; } | tee -a "$report"
{ /usr/local/cuda/bin/nvcc --version 2>&1 | tail -n 1; echo "cores: $(nproc)"; } | tee -a "$report"

cuda_libs=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib
if [[ -f device-bundle.tar.xz ]]; then
  say "== bundle (built elsewhere for sm_90: scripts/device-bundle.sh)"
  work=$(mktemp -d)
  tar -C "$work" -xJf device-bundle.tar.xz
  bin="$work/device-bundle/bin"
  export LD_LIBRARY_PATH="$work/device-bundle/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "bundle commit $(cat "$work/device-bundle/COMMIT" 2>/dev/null || echo '?')"
else
  say "== build here (CUDA on, MPI off)"
  build=build-device
  if ! { cmake -S . -B "$build" -DPTDP_WITH_CUDA=ON -DPTDP_WITH_MPI=OFF -DCMAKE_BUILD_TYPE=Release \
           -DBUILD_TESTING=ON >"$out/configure.log" 2>&1 &&
         cmake --build "$build" -j"$(nproc)" --target test_cuda_philox test_cuda_backend test_flash_attention test_gpt_cuda bench_gpu \
           bench_gpt >"$out/build.log" 2>&1; }; then
    say "BUILD FAILED (see configure.log / build.log; without OpenBLAS here, carry device-bundle.tar.xz)"
    tail -n 30 "$out/configure.log" "$out/build.log" 2>/dev/null | tee -a "$report"
    exit 1
  fi
  bin="$out/bin"
  mkdir -p "$bin"
  cp "$build"/tests/cuda/test_* "$build"/bench/bench_gpu "$build"/bench/bench_gpt "$bin/" 2>/dev/null
fi

# Seconds a step may run: WANT, cut so that RESERVE seconds of the budget stay for the steps
# after it, and at least 1 (`timeout 0` would mean no limit at all).
deadline=$((SECONDS + 465))
budget() {  # WANT RESERVE
  local left=$((deadline - $2 - SECONDS))
  (( left < $1 )) || left=$1
  echo $(( left < 1 ? 1 : left ))
}
# The benchmarks' shares (each about twice what it needs on an H200): bench_gpu 180 s,
# bench_gpt 1.3B bf16 75 s, bench_gpt 124M f32 45 s; the tests share the other 165 s.
bench_reserve=$((180 + 75 + 45))

say "== gpu tests"
for t in test_cuda_philox test_cuda_backend test_flash_attention test_gpt_cuda test_nccl; do
  [[ -x "$bin/$t" ]] || continue
  limit=$(budget 300 "$bench_reserve")
  if (( limit < 10 )); then say "FAIL $t: not run, the tests' share of the time budget is spent"; status=1; continue; fi
  timeout "$limit" "$bin/$t" --reporter compact > "$out/$t.log" 2>&1
  rc=$?
  case $rc in
    0) say "PASS $t: $(tail -n 1 "$out/$t.log")" ;;
    77) say "SKIPPED $t (no usable GPU seen)"; status=1 ;;
    124) say "FAIL $t: timed out after ${limit}s"; tail -n 5 "$out/$t.log" | tee -a "$report"; status=1 ;;
    *) say "FAIL $t (exit $rc)"; grep -E "FAILED|failed|error" "$out/$t.log" | head -n 20 | tee -a "$report"; status=1 ;;
  esac
done

# GEMMs at 3 runs of >= 0.03 s each (the longest section), attention, then training: bf16,
# s=1024, b=8, 2 warm-up + 10 timed iterations per model.
say "== bench_gpu (cuBLASLt GEMMs fp32/tf32/bf16 and causal attention of the 124M, 350M and 1.3B shapes; GPT training through the C API, bf16, b=8)"
limit=$(budget 180 $((75 + 45)))
timeout "$limit" "$bin/bench_gpu" --runs 3 --min-time 0.03 --json "$out/bench_gpu.json" > "$out/bench_gpu.log" 2>&1
rc=$?
{
  grep -E "^bench_gpu( on |: )|layer +all GEMMs above" "$out/bench_gpu.log"
  echo
  sed -n '/^Fused causal attention/,$p' "$out/bench_gpu.log"
} | tee -a "$report"
if [[ $rc -ne 0 ]]; then
  if [[ $rc -eq 124 ]]; then say "bench_gpu timed out after ${limit}s; the end of its log:"; else say "bench_gpu exited $rc; the end of its log:"; fi
  tail -n 15 "$out/bench_gpu.log" | tee -a "$report"
  status=1
fi

say "== GPT training on the GPU with bench_gpt --device cuda (forward and backward apart; MFU against 989 TFLOP/s bf16, 67 fp32)"
gpt() {  # name layers hidden heads precision micro-batch time-limit
  local limit=$7
  timeout "$limit" "$bin/bench_gpt" --device cuda --layers "$2" --hidden "$3" --heads "$4" --vocab 50257 --seq 1024 \
    --micro-batch "$6" --precision "$5" --iters 5 --warmup 2 --json "$out/bench_gpt_$1_$5.json" \
    > "$out/bench_gpt_$1_$5.log" 2>&1
  local rc=$?
  say "-- GPT $1 (l=$2, h=$3, a=$4, s=1024, b=$6, $5): exit $rc$([[ $rc -eq 124 ]] && echo " (timed out after ${limit}s)")"
  grep -E "forward\+backward|tokens/s|GFLOP/s|TFLOP/s|MFU|loss:" "$out/bench_gpt_$1_$5.log" | head -n 8 | tee -a "$report"
  [[ $rc -eq 0 ]] || status=1
}
gpt 1.3B 24 2048 16 bf16 8 "$(budget 75 45)"
gpt 124M 12 768 12 f32 4 "$(budget 45 0)"

say "== done in ${SECONDS}s, status $status"
exit $status
