#!/usr/bin/env bash
# The one prepared GPU check, for a machine with an NVIDIA GPU and the CUDA toolkit (the lent
# H200 has no Open MPI, no OpenBLAS and no package registry). It runs every `gpu` test program
# (each CUDA op against the CPU reference in f32, bf16 and f16, the flash-attention kernels,
# the GPT step and AdamW training on the GPU against the CPU engine, device Philox, NCCL), then
# the GPU benchmarks (cuBLASLt GEMMs, attention, GPT training in bf16 with MFU against 989
# TFLOP/s), and writes OUTDIR/report.txt.
#
#   bash scripts/device-bundle.sh          # here: build for sm_90 and pack device-bundle.tar.xz
#   bash scripts/device-check.sh [OUTDIR]  # there (default OUTDIR: $OUT, else ./device-report)
#
# With device-bundle.tar.xz present (carried) the bundle's programs run with its libraries;
# without it the script builds on the machine (CUDA on, MPI off), which needs OpenBLAS there.
# Finishes in a few minutes on one H200; exits non-zero when a test fails or is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
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

say "== gpu tests"
for t in test_cuda_philox test_cuda_backend test_flash_attention test_gpt_cuda test_nccl; do
  [[ -x "$bin/$t" ]] || continue
  timeout 300 "$bin/$t" --reporter compact > "$out/$t.log" 2>&1
  rc=$?
  case $rc in
    0) say "PASS $t: $(tail -n 1 "$out/$t.log")" ;;
    77) say "SKIPPED $t (no usable GPU seen)"; status=1 ;;
    *) say "FAIL $t (exit $rc)"; grep -E "FAILED|failed|error" "$out/$t.log" | head -n 20 | tee -a "$report"; status=1 ;;
  esac
done

say "== bench_gpu (cuBLASLt GEMMs of the 124M, 350M and 1.3B shapes, fp32/tf32/bf16; causal attention)"
timeout 420 "$bin/bench_gpu" --json "$out/bench_gpu.json" > "$out/bench_gpu.log" 2>&1
rc=$?
tail -n 60 "$out/bench_gpu.log" | tee -a "$report"
[[ $rc -eq 0 ]] || { say "bench_gpu exited $rc"; status=1; }
say "== GPT training on the GPU, bf16 (bench_gpt --device cuda; MFU against 989 TFLOP/s bf16 dense)"
gpt() {  # name layers hidden heads precision micro-batch
  timeout 180 "$bin/bench_gpt" --device cuda --layers "$2" --hidden "$3" --heads "$4" --vocab 50257 --seq 1024 \
    --micro-batch "$6" --precision "$5" --iters 5 --warmup 2 --json "$out/bench_gpt_$1_$5.json" \
    > "$out/bench_gpt_$1_$5.log" 2>&1
  local rc=$?
  say "-- GPT $1 (l=$2, h=$3, a=$4, s=1024, b=$6, $5): exit $rc"
  grep -E "forward\+backward|tokens/s|GFLOP/s|TFLOP/s|MFU|loss:" "$out/bench_gpt_$1_$5.log" | head -n 8 | tee -a "$report"
  [[ $rc -eq 0 ]] || status=1
}
gpt 124M 12 768 12 bf16 8
gpt 350M 24 1024 16 bf16 8
gpt 1.3B 24 2048 16 bf16 8
gpt 124M 12 768 12 f32 4

say "== done, status $status"
exit $status
