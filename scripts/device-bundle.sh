#!/usr/bin/env bash
# Builds the CUDA engine here (sm_90 + PTX, MPI off) and packs what scripts/device-check.sh runs
# on a GPU machine that has the CUDA toolkit but no Open MPI, no OpenBLAS and no package
# registry: the programs `device-check.sh --list-programs` names, libptdp.so.0 and the shared
# libraries they need that are neither the C library, the CUDA toolkit's, the driver's nor
# NCCL (device-check.sh finds NCCL and the toolkit there: NCCL is 200 MB, too big to carry).
# Debian's C++ runtime (libstdc++, libgcc_s, libgomp) goes into lib/cxxrt/, which the check
# uses only where the machine's own is missing or too old. The bundle records the commit and
# the newest glibc symbol version any carried file needs (GLIBC_REQUIRED), which the check
# compares with the machine's.
#   bash scripts/device-bundle.sh [BUILD_DIR]   -> device-bundle.tar.xz (about 13 MB)
#   bash scripts/device-bundle.sh --configure-only BUILD_DIR   configure that build, no more
#       (ctest's device_bundle_configures: a CMake file that assumes MPI fails here, not there)
# MPI is off because the GPU machine has no Open MPI runtime (its plugins and orted): a
# libmpi carried alone aborts in MPI_Init. Every program there runs as a world of one.
set -euo pipefail
cd "$(dirname "$0")/.."
configure_only=0
if [[ ${1:-} == --configure-only ]]; then
  configure_only=1
  shift
  [[ -n ${1:-} ]] || { echo "device-bundle: --configure-only needs a build directory" >&2; exit 1; }
fi
build=${1:-build-device}
mkdir -p "$build"
configure() {
  cmake -S . -B "$build" -DPTDP_WITH_CUDA=ON -DPTDP_WITH_NCCL=ON -DPTDP_WITH_MPI=OFF \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON
}
if (( configure_only )); then
  configure
  exit
fi
rm -f device-bundle.tar.xz  # never leave an older bundle behind a failed build
log="$build/device-bundle.log"
programs=$(bash scripts/device-check.sh --list-programs)
if ! { configure > "$log" 2>&1 &&
       cmake --build "$build" -j"$(nproc)" --target $(xargs -n1 basename <<< "$programs") >> "$log" 2>&1; }; then
  echo "device-bundle: the build failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi

stage=device-bundle
rm -rf "$stage" device-bundle.tar.xz
mkdir -p "$stage/bin" "$stage/lib/cxxrt"
for prog in $programs; do
  [[ -x "$build/$prog" ]] || { echo "device-bundle: $build/$prog was not built" >&2; exit 1; }
  cp "$build/$prog" "$stage/bin/"
done
cp -L "$build/capi/libptdp.so.0" "$stage/lib/"
# Every library the programs load, except the C library (always there), the CUDA toolkit's and
# NCCL (the device has them, matching its driver) and libptdp (above).
for f in "$stage"/bin/* "$stage/lib/libptdp.so.0"; do
  ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcudart.so*|libcublas*|libnccl.so*|libptdp.so*) ;;
    libmpi*|libopen-pal*|libopen-rte*|libpmix*) echo "device-bundle: $lib is linked although MPI is off" >&2; exit 1 ;;
    libstdc++.so*|libgcc_s.so*|libgomp.so*) cp -L "$lib" "$stage/lib/cxxrt/" ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
git rev-parse --short HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"
find "$stage/bin" "$stage/lib" -type f -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1 > "$stage/GLIBC_REQUIRED"
tar -C . -cJf device-bundle.tar.xz "$stage"
rm -rf "$stage"
echo "device-bundle.tar.xz: $(du -h device-bundle.tar.xz | cut -f1) ($(tar -tJf device-bundle.tar.xz | grep -c '/bin/.') programs, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)), needs glibc >= $(tar -xJOf device-bundle.tar.xz device-bundle/GLIBC_REQUIRED)"
