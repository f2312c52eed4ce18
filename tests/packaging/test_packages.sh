#!/usr/bin/env bash
# Builds the Debian packages with CPack, installs them with dpkg into a throw-away root, and
# builds and runs programs against the installed files only:
#   - the C sample with `pkg-config --cflags --libs ptdp`, under mpirun -np 2;
#   - a CMake project with find_package(ptdp), under mpirun -np 2;
#   - the Fortran sample against the installed module, under mpirun -np 2 (when packaged);
#   - `python3 -c "import ptdp"` against the installed Python package (when packaged);
#   - ptdp-train --help from the tools package;
#   - every package's /usr/share/doc/<package>/copyright (DEP-5, License: Apache-2.0).
#   test_packages.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d /tmp/ptdp-packages.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1)

echo "== cpack"
(cd "$build" && cpack -G DEB -B "$work/debs" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
ls "$work/debs"/*.deb
for pkg in libptdp0 libptdp-dev ptdp-tools; do
  ls "$work/debs/${pkg}_"*.deb > /dev/null || { echo "no $pkg package"; exit 1; }
done
echo "== package metadata"
for deb in "$work/debs"/*.deb; do
  dpkg-deb -f "$deb" Package Version Depends | sed 's/^/  /'
done
dpkg-deb -f "$work/debs"/libptdp0_*.deb Depends | grep -q "libopenblas" || { echo "libptdp0 does not depend on OpenBLAS"; exit 1; }
dpkg-deb -f "$work/debs"/libptdp-dev_*.deb Depends | grep -q "libptdp0 (= " || { echo "libptdp-dev does not pin libptdp0"; exit 1; }

echo "== dpkg --root (throw-away root)"
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
dpkg --root="$root" --log=/dev/null --force-depends --force-script-chrootless --force-not-root \
     --no-triggers -i "$work/debs"/*.deb > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
dpkg --root="$root" -l | grep -E '^ii +(libptdp|ptdp|python3-ptdp)' | sed 's/^/  /'
usr="$root/usr"
test -L "$usr/lib/libptdp.so.0" && test -f "$(readlink -f "$usr/lib/libptdp.so.0")"
test -f "$usr/include/ptdp/ptdp.h" && test -f "$usr/lib/pkgconfig/ptdp.pc"
test -f "$usr/lib/cmake/ptdp/ptdpConfig.cmake" && test -f "$usr/lib/cmake/ptdp/ptdpConfigVersion.cmake"
test -x "$usr/bin/ptdp-train"
test -x "$usr/bin/ptdp-plot"
test -x "$usr/bin/ptdp-flight-analyze"

echo "== copyright"
# Each package owns its /usr/share/doc/<package>/copyright, machine-readable (DEP-5), with the
# project's licence by its SPDX identifier.
packages=(libptdp0 libptdp-dev ptdp-tools)
if [[ "${EXPECT_PYTHON:-0}" == 1 ]]; then packages+=(python3-ptdp); fi
for pkg in "${packages[@]}"; do
  copyright="$usr/share/doc/$pkg/copyright"
  dpkg --root="$root" -L "$pkg" | grep -qx "/usr/share/doc/$pkg/copyright" ||
    { echo "$pkg does not hold /usr/share/doc/$pkg/copyright"; exit 1; }
  head -1 "$copyright" | grep -qx "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" ||
    { echo "$copyright is not in the machine-readable format (first line: $(head -1 "$copyright"))"; exit 1; }
  grep -qx "License: Apache-2.0" "$copyright" || { echo "$copyright has no 'License: Apache-2.0'"; exit 1; }
  echo "  $pkg: /usr/share/doc/$pkg/copyright, License: Apache-2.0"
done
export LD_LIBRARY_PATH="$usr/lib"

echo "== pkg-config"
flags=$(PKG_CONFIG_PATH="$usr/lib/pkgconfig" PKG_CONFIG_LIBDIR="$usr/lib/pkgconfig:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig" \
        pkg-config --cflags --libs ptdp)
echo "  $flags"
cc "$src/samples/c/train_gpt.c" $flags -o "$work/train_gpt_pc"
out=$("${mpirun[@]}" "$work/train_gpt_pc"); grep -q "iteration 8: loss" <<< "$out"; echo "  ${out##*$'\n'}"

echo "== find_package(ptdp)"
cmake -S "$src/tests/packaging/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$usr" \
      -DSAMPLE="$src/samples/c/train_gpt.c" > "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; exit 1; }
cmake --build "$work/consumer" > "$work/consumer-build.log" 2>&1 || { cat "$work/consumer-build.log"; exit 1; }
grep -q "$usr/lib/cmake/ptdp" "$work/consumer/CMakeCache.txt"
out=$("${mpirun[@]}" "$work/consumer/consumer"); grep -q "iteration 8: loss" <<< "$out"; echo "  ${out##*$'\n'}"

# Optional parts: required when this build has them (EXPECT_FORTRAN / EXPECT_PYTHON = 1).
if [[ "${EXPECT_FORTRAN:-0}" == 1 ]]; then
  echo "== Fortran"
  test -f "$usr/include/ptdp/fortran/ptdp.mod" && test -f "$usr/lib/libptdp_fortran.a"
  mpif90 -I"$usr/include/ptdp/fortran" "$src/samples/fortran/train_gpt.f90" -L"$usr/lib" -lptdp_fortran -lptdp \
         -o "$work/fortran_sample"
  out=$("${mpirun[@]}" "$work/fortran_sample"); echo "$out" | tail -2
else
  echo "== Fortran: not built here (skipped)"
fi

if [[ "${EXPECT_PYTHON:-0}" == 1 ]]; then
  echo "== Python"
  pydir="$usr/lib/python3/dist-packages"
  test -d "$pydir/ptdp"
  PYTHONPATH="$pydir" "${PYTHON:-python3}" -c "import ptdp; print('  import ptdp', ptdp.__version__ if hasattr(ptdp, '__version__') else '', 'from', ptdp.__file__)"
else
  echo "== Python: not built here (skipped)"
fi

echo "== tools"
help=$("$usr/bin/ptdp-train" --help)
grep -q -- "--tensor-model-parallel-size" <<< "$help"
echo "  ${help%%$'\n'*}"
echo "packages: all checks passed"
