#!/usr/bin/env bash
# Installs every system package ptdp's build, tests, benchmarks and samples need, from Debian's
# archive only. Idempotent: packages already present are left alone and apt is not touched.
# Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git binutils  # toolchain; readelf/nm for the ABI test
  gfortran                                        # Fortran module and samples
  openmpi-bin libopenmpi-dev                      # MPI between ranks
  libopenblas-openmp-dev                          # BLAS for the CPU engine (OpenMP build)
  catch2                                          # unit tests (v2)
  nlohmann-json3-dev libcli11-dev                 # config files, command lines
  libssl-dev                                      # SHA-256 of checkpoint files (libcrypto)
  swig python3 python3-dev python3-numpy          # Python bindings (SWIG also parses the header
  python3-setuptools python3-wheel                #   for the Julia/Rust/Fortran generator)
  python3-pytest python3-mpi4py                   # Python tests, mpi4py communicators
  python3-venv                                    # pip install of the source tree into a fresh venv (test)
  ccache                                          # every compile (build/.ccache), shared with the pip-install tests
  doxygen                                         # API reference; its run is a test
  abi-compliance-checker                          # the ABI against packaging/abi/ (ctest -L abi)
  zlib1g-dev                                      # gzip JSON-lines input of ptdp-preprocess-data
  libpcre2-dev libutf8proc-dev                    # tokenizers: split regexes, Unicode normalisation
  libsentencepiece-dev python3-sentencepiece      # SentencePieceTokenizer, and its reference (tests)
  python3-torch                                   # reference logits of Hugging Face models (tests/tools/test_hf_*)
  clang libclang-rt-14-dev libomp-dev             # fuzz targets (libFuzzer, sanitizer runtimes) and CI's ASan/UBSan build
  python3-clang-14                                # libclang from Python: function lengths (scripts/function-lengths.py)
)

# Rust bindings: any cargo >= 1.64 will do (rustup's in ~/.cargo/bin, or Debian's).
if ! command -v cargo >/dev/null && [[ ! -x "$HOME/.cargo/bin/cargo" ]]; then
  packages+=(cargo)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo=sudo
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  if [[ -n $sudo ]]; then
    command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  fi
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The test venv: PyPI packages the tests compare against that Debian does not ship. It sees the
# system's site packages, so Debian's python3-torch (1.13) serves transformers; transformers is
# kept below 4.47, the last releases that support torch < 2. Tests run its Python when it exists
# and skip (exit 77, with the reason) without it.
venv=/opt/ptdp-test-venv
if [[ ! -x $venv/bin/python ]]; then
  $sudo /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c 'import transformers, tokenizers' 2>/dev/null; then
  echo "install-deps: installing transformers and tokenizers into $venv"
  $sudo "$venv/bin/pip" install -q "transformers>=4.40,<4.47" tokenizers
fi

# The reference venv: the current transformers (5.x, which writes RoPE settings as
# rope_parameters and stores MoE experts fused in memory) with the torch it needs, pinned, from
# PyPI, without the system's site packages. The Hugging Face tests compare against both venvs
# (tests/tools/test_hf_transformers.py, test_hf_config_fields.py) and skip (exit 77, with the
# reason) where one is missing. Skipped when the pinned versions are installed.
ref_venv=/opt/ptdp-ref-venv
ref_pins=(torch==2.15.0 transformers==5.25.0 peft==0.21.2 safetensors==0.8.0 numpy==2.4.6)
ref_python=$(command -v python3)
pins_present() {
  "$ref_venv/bin/python" - "${ref_pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import PackageNotFoundError, version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
}
if [[ -x $ref_venv/bin/python ]] && pins_present; then
  echo "install-deps: $ref_venv has ${ref_pins[*]}"
else
  if [[ ! -x $ref_venv/bin/python ]]; then
    $sudo "$ref_python" -m venv "$ref_venv"
  fi
  echo "install-deps: installing ${ref_pins[*]} into $ref_venv"
  $sudo "$ref_venv/bin/pip" install -q "${ref_pins[@]}"
fi
