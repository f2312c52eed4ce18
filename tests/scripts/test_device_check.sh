#!/usr/bin/env bash
# scripts/device-check.sh without a GPU machine: what it reports must be true.
#   test_device_check.sh dry-run SOURCE_DIR BUILD_DIR
#       the real gpu test programs of this build on a machine without a GPU: seconds, verdict
#       "no GPU", every test skipped, no benchmark run, exit 2, exactly report.txt and
#       logs.tar.gz written.
#   test_device_check.sh report SOURCE_DIR
#       a bundle of stand-in programs on a machine whose nvidia-smi lists a GPU: a passing, a
#       failing, a hanging and a missing test, benchmarks that pass and fail, then a bundle that
#       needs a newer glibc and one that does not unpack. Each must appear in the report as what
#       it is, with the tail of its output, and the verdict and the rerun command must count them.
set -euo pipefail
mode=$1
src=$(cd "$2" && pwd)
work=$(mktemp -d /tmp/ptdp-device-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}
has() { grep -qF -- "$1" "$2"; }
files_are() {  # DIR NAMES...: exactly these files
  [[ $(cd "$1" && ls | sort | tr '\n' ' ') == "$(printf '%s\n' "${@:2}" | sort | tr '\n' ' ')" ]]
}

if [[ $mode == dry-run ]]; then
  if command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "this machine has a GPU: the dry run is for machines without one (skipped)"
    exit 77
  fi
  build=$(cd "$3" && pwd)
  out="$work/out"
  start=$SECONDS
  set +e
  PATH="/usr/bin:/bin" bash "$src/scripts/device-check.sh" --build-dir "$build" "$out" > "$work/stdout" 2>&1
  rc=$?
  set -e
  took=$((SECONDS - start))
  cat "$out/report.txt"
  check "exit status 2 (no GPU), got $rc" test "$rc" -eq 2
  check "finishes in seconds (took ${took}s)" test "$took" -lt 60
  # Every gpu test program the check lists (test_cuda_*, flash attention, NCCL, ...) is skipped.
  n=$(bash "$src/scripts/device-check.sh" --list-programs | grep -c /test_)
  check "at least the 7 gpu test programs listed, got $n" test "$n" -ge 7
  check "verdict first: no GPU, $n skipped" has "VERDICT: no GPU · tests 0 passed, 0 failed, $n skipped" <(head -n 1 "$out/report.txt")
  for t in $(bash "$src/scripts/device-check.sh" --list-programs | grep /test_ | xargs -n1 basename); do
    check "$t reported skipped" has "SKIPPED $t: no GPU" "$out/report.txt"
  done
  check "benchmarks not run" has "NOT RUN bench_gpu: no GPU" "$out/report.txt"
  check "libraries listed with where they resolved" has "libcudart.so.13 " "$out/report.txt"
  check "only report.txt and logs.tar.gz" files_are "$out" logs.tar.gz report.txt
  check "logs archive holds every test's log" test "$(tar -tzf "$out/logs.tar.gz" | grep -c '/test_.*\.log$')" -eq "$n"
  exit $((failures > 0))
fi

[[ $mode == report ]] || { echo "usage: $0 dry-run|report SOURCE_DIR [BUILD_DIR]" >&2; exit 2; }

# A checkout with the check script, stand-in programs and a stand-in nvidia-smi.
repo="$work/repo"
mkdir -p "$repo/scripts" "$work/fakebin"
cp "$src/scripts/device-check.sh" "$repo/scripts/"
cat > "$work/fakebin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$1" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "name, driver_version, memory.total [MiB], clocks.max.sm [MHz]"; echo "NVIDIA H200, 580.159.04, 143771 MiB, 1980 MHz" ;;
esac
EOF
chmod +x "$work/fakebin/nvidia-smi"
cc=$(command -v cc || command -v gcc || true)
wheel="$work/site/nvidia/nccl/lib"
if [[ -n $cc ]]; then
  mkdir -p "$wheel"
  echo 'int fake_nccl_version(void) { return 22809; }' > "$work/nccl.c"
  "$cc" -shared -fPIC -Wl,-soname,libfakenccl.so.2 -o "$wheel/libfakenccl.so.2" "$work/nccl.c"
  ln -s libfakenccl.so.2 "$wheel/libfakenccl.so"
  printf '#include <stdio.h>\nint fake_nccl_version(void);\nint main(void) { printf("All tests passed (12 assertions in 3 test cases)\\n"); return fake_nccl_version() == 22809 ? 0 : 1; }\n' > "$work/philox.c"
fi
make_bundle() {  # GLIBC_REQUIRED
  local b="$work/stage/device-bundle"
  rm -rf "$work/stage"
  mkdir -p "$b/bin" "$b/lib"
  echo "$1" > "$b/GLIBC_REQUIRED"
  echo fake123 > "$b/COMMIT"
  # A real program that needs a library only a "Python wheel" holds, as NCCL is on the H200.
  if [[ -n $cc ]]; then
    "$cc" -o "$b/bin/test_cuda_philox" "$work/philox.c" -L"$wheel" -lfakenccl
  else
    printf '#!/bin/sh\necho "All tests passed (12 assertions in 3 test cases)"\n' > "$b/bin/test_cuda_philox"
  fi
  printf '#!/bin/sh\necho "x.cpp:10: failed: max_err <= tol for gemm bf16 (0.5 vs 0.01)"\necho "test cases: 4 | 3 passed | 1 failed"\nexit 1\n' > "$b/bin/test_cuda_backend"
  printf '#!/bin/sh\necho "All tests passed (30 assertions in 8 test cases)"\n' > "$b/bin/test_cuda_moe"
  printf '#!/bin/sh\necho "starting the flash kernels"\nexec sleep 100\n' > "$b/bin/test_flash_attention"
  printf '#!/bin/sh\necho "All tests passed (40 assertions in 5 test cases)"\n' > "$b/bin/test_gpt_cuda"
  # test_nccl is missing on purpose.
  printf '#!/bin/sh\necho "All tests passed (9 assertions in 2 test cases)"\n' > "$b/bin/test_capi_nccl"
  cat > "$b/bin/bench_gpu" <<'EOF'
#!/bin/sh
echo "bench_gpu on NVIDIA H200 (stand-in)"
case " $* " in *" --filter moe "*)
  echo "MoE experts at OLMoE-1B-7B's shape, bf16 (stand-in)"
  echo "olmoe-1b-7b.l2/b4/train 0.91B     2.0    100.00     99.00     81,920    300.0  30.3%   10.8 -> 10.5"
  exit 0 ;;
esac
echo "Fused causal attention, bf16"
echo "1.3B/b8/attn.flash.fwd     1024     16    128     8     1.000     400.0 (40.4%)"
echo "case                 params setup s     ms/it   best ms   tokens/s  TFLOP/s    MFU"
echo "1.3B/b8/train          1.3B     2.0    140.00    139.00     58,514    470.1  47.5%   10.9 ->  7.1"
echo "llama-3.2-1b/b4/train 1.24B     3.0    170.00    168.00     48,188    407.5  41.2%   11.8 -> 11.6"
EOF
  printf '#!/bin/sh\necho "   loss: 10.9"\necho "cuda: out of memory" >&2\nexit 3\n' > "$b/bin/bench_gpt"
  chmod +x "$b/bin/"*
  tar -C "$work/stage" -cJf "$repo/device-bundle.tar.xz" device-bundle
}
run_check() {  # OUT ARGS...: sets rc
  set +e
  PATH="$work/fakebin:$PATH" DEVICE_CHECK_TEST_LIMIT=3 DEVICE_CHECK_LIB_ROOTS="$work/site" bash "$repo/scripts/device-check.sh" "${@:2}" "$1" > "$1.stdout" 2>&1
  rc=$?
  set -e
}

echo "== a GPU, a bundle with every kind of failure"
make_bundle 2.17
out="$work/out1"
run_check "$out"
r="$out/report.txt"
cat "$r"
check "exit status 1, got $rc" test "$rc" -eq 1
check "verdict counts tests and benchmarks, headline MFU" has \
  "VERDICT: GPU seen (NVIDIA H200) · tests 4 passed, 3 failed, 0 skipped · benchmarks 2 ran, 3 failed · headline MFU 47.5% (GPT 1.3B bf16 training, bench_gpu), 41.2% (Llama-3.2-1B bf16 training at s=2048, bench_gpu), 30.3% (OLMoE-1B-7B 2 layers bf16 training, bench_gpu)" <(head -n 1 "$r")
check "glibc accepted" has "is new enough for the bundle (needs 2.17)" "$r"
if [[ -n $cc ]]; then
  check "a library that only a wheel holds is found and reported" grep -qE "libfakenccl\.so\.2 +$wheel/libfakenccl\.so\.2 +\(1 of 8 programs\)" "$r"
  check "the library path has no empty entry" bash -c "! grep -qE 'LD_LIBRARY_PATH=[^)]*(::|:\)|=:)' '$r'"
fi
check "passing test" has "PASS test_cuda_philox: All tests passed (12 assertions in 3 test cases)" "$r"
check "failing test with its failure line" has "FAIL test_cuda_backend: exit 1" "$r"
check "failure line quoted" has "failed: max_err <= tol for gemm bf16" "$r"
check "hanging test killed by its limit" has "FAIL test_flash_attention: killed by its time limit of 3s (exit 124)" "$r"
check "hanging test's output tail" has "| starting the flash kernels" "$r"
check "missing program" has "FAIL test_nccl: missing from the bundle" "$r"
check "bench_gpu's training row in the report" has "1.3B/b8/train" "$r"
check "bench_gpu's Llama training row in the report" has "llama-3.2-1b/b4/train" "$r"
check "bench_gpu_moe's training row in the report" has "olmoe-1b-7b.l2/b4/train" "$r"
check "failing benchmark with the tail of its output" has "FAIL gpt_1.3B_bf16: exit 3; the end of its log:" "$r"
check "benchmark's stderr tail" has "| cuda: out of memory" "$r"
check "rerun command names what failed" has \
  "bash scripts/device-check.sh --only test_cuda_backend,test_flash_attention,test_nccl,gpt_1.3B_bf16,gpt_124M_f32,mla_v3_bf16" "$r"
check "only report.txt and logs.tar.gz" files_are "$out" logs.tar.gz report.txt

echo "== the rerun: only what failed"
out="$work/out2"
run_check "$out" --only test_cuda_backend,gpt_124M_f32
r="$out/report.txt"
check "only the steps asked for" bash -c "! grep -q test_cuda_philox '$r' && grep -q 'FAIL test_cuda_backend' '$r' && grep -q 'FAIL gpt_124M_f32' '$r' && ! grep -q 'bench_gpu on' '$r'"
check "verdict of the rerun" has "tests 0 passed, 1 failed, 0 skipped · benchmarks 0 ran, 1 failed" <(head -n 1 "$r")
set +e
PATH="$work/fakebin:$PATH" bash "$repo/scripts/device-check.sh" --only no_such_step "$work/out3" > "$work/out3.stdout" 2>&1
rc=$?
set -e
check "an unknown step is refused by name (exit $rc)" bash -c "[[ $rc -ne 0 ]] && grep -q \"unknown step 'no_such_step'\" '$work/out3.stdout'"

echo "== a bundle that needs a newer glibc"
make_bundle 99.0
out="$work/out4"
run_check "$out" --only test_cuda_philox
r="$out/report.txt"
check "glibc refused with both versions" grep -q "FAIL glibc: this machine has glibc .*, the bundle needs 99.0" "$r"
check "exit status 1" test "$rc" -eq 1

echo "== a bundle that does not unpack"
echo "not an archive" > "$repo/device-bundle.tar.xz"
out="$work/out5"
run_check "$out"
r="$out/report.txt"
check "unpack failure reported" has "FAIL bundle: device-bundle.tar.xz did not unpack" "$r"
check "with tar's words" grep -q "| .*xz" "$r"
check "exit status 1" test "$rc" -eq 1
check "the verdict says why it stopped" has "STOPPED: the bundle did not unpack" <(head -n 1 "$r")

echo "$failures failed"
exit $((failures > 0))
