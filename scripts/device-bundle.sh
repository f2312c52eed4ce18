#!/usr/bin/env bash
# Builds the CUDA engine here (sm_90 + PTX) and packs what scripts/device-check.sh runs on a GPU
# machine that has the CUDA toolkit but no Open MPI, no OpenBLAS and no package registry: the
# gpu test programs, bench_gpu, libptdp.so.0 and the shared libraries they need that are not
# part of the CUDA toolkit or the C runtime, into device-bundle.tar.xz (well under 64 MiB).
#   bash scripts/device-bundle.sh [BUILD_DIR]
# Then on the device: bash scripts/device-check.sh (it unpacks the bundle when present).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
cmake -S . -B "$build" -DPTDP_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j"$(nproc)" --target test_cuda_philox test_cuda_backend test_flash_attention test_gpt_cuda bench_gpu bench_gpt \
  $(grep -q "test_nccl" "$build/tests/cuda/Makefile" 2>/dev/null && echo test_nccl) > /dev/null

stage=device-bundle
rm -rf "$stage" device-bundle.tar.xz
mkdir -p "$stage/bin" "$stage/lib"
for prog in tests/cuda/test_cuda_philox tests/cuda/test_cuda_backend tests/cuda/test_flash_attention \
            tests/cuda/test_gpt_cuda tests/cuda/test_nccl \
            bench/bench_gpu bench/bench_gpt; do
  [[ -x "$build/$prog" ]] && cp "$build/$prog" "$stage/bin/"
done
cp -L "$build/capi/libptdp.so.0" "$stage/lib/"
# Every library the programs load, except the C runtime (always there) and the CUDA toolkit's
# own (the device has them, matching its driver).
for f in "$stage"/bin/* "$stage/lib/libptdp.so.0"; do
  ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcudart.so*|libcublas*|libnccl.so*) ;;
    libptdp.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
git rev-parse --short HEAD > "$stage/COMMIT" 2>/dev/null || true
tar -C . -cJf device-bundle.tar.xz "$stage"
rm -rf "$stage"
echo "device-bundle.tar.xz: $(du -h device-bundle.tar.xz | cut -f1) ($(tar -tJf device-bundle.tar.xz | wc -l) files)"
