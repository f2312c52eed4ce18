#!/usr/bin/env bash
# The one prepared GPU check, for a machine with an NVIDIA GPU (the lent H200 has the CUDA
# toolkit and a Python with NCCL's wheel, but no Open MPI, no OpenBLAS and no registry).
#
#   bash scripts/device-bundle.sh                        # here: build (CUDA on, MPI off), pack
#   bash scripts/device-check.sh [--only STEPS] [OUTDIR] # there (OUTDIR: $OUT, else ./device-report)
#   bash scripts/device-check.sh --list-programs         # what the bundle must carry
#   bash scripts/device-check.sh --build-dir build OUTDIR  # the programs of a build tree instead
# With the device tool: run(command="bash scripts/device-check.sh $OUT",
# carry=["device-bundle.tar.xz"], timeout_s=540); the bundle is git-ignored, so it must be carried.
#
# Steps, in order (tests first, benchmarks after):
#   test_cuda_philox test_cuda_backend test_cuda_moe test_flash_attention test_gpt_cuda test_nccl
#   test_capi_nccl
#       every `gpu` test program: each CUDA op against the CPU reference in f32, bf16 and f16,
#       the MoE ops (grouped GEMM, routing, dispatch, router), the flash-attention kernels, the GPT step and AdamW training on the GPU against the CPU
#       engine, device Philox, NCCL on a world of one without MPI (core and C API)
#   bench_gpu          cuBLASLt GEMMs, fused attention (with Llama-3.2-1B's grouped-query
#                      shape), bf16 training of GPT 124M/350M/1.3B (s=1024) and Llama-3.2-1B
#                      (its preset, s=2048) through the C API (tokens/s, TFLOP/s from
#                      ptdp_gpt_flops, MFU against 989 TFLOP/s)
#   bench_gpu_moe      bench_gpu --filter moe: the MoE ops at OLMoE-1B-7B's shape (grouped GEMMs
#                      against plain ones, router, routing, dispatch, combine, their share) and
#                      bf16 training of OLMoE-1B-7B's first 2 layers at s=2048, b=4 (bench_gpt
#                      --moe's run on the GPU; tokens/s, TFLOP/s and MFU with Megatron's MoE FLOPs)
#   gpt_1.3B_bf16 gpt_124M_f32   bench_gpt --device cuda (forward and backward apart)
#   mla_v3_bf16        bench_gpt --mla --device cuda: DeepSeek-V3's layer scaled to h 2048 (MLA,
#                      sigmoid group-limited router, shared expert), 2 layers, s=4096, bf16
# --only a,b runs just those steps: the report of a run that failed ends with the command that
# repeats what failed, so a second run fits in the 15 minutes of device time.
#
# Exactly two files are written to OUTDIR (a GPU machine returns at most 8): report.txt, whose
# first line is the verdict (GPU seen or not, tests passed/failed/skipped, the headline MFU),
# rewritten after every step, so a run cut off from outside still leaves one (the headline MFU is
# bench_gpu's GPT 1.3B training, then its Llama-3.2-1B training at s=2048); and logs.tar.gz
# with every program's full output, the JSON figures and the libraries each program resolved.
# Nothing is hidden: a bundle that fails to unpack, a missing program, a C library older than
# the bundle needs, a library that resolves nowhere, a program killed by its time limit
# (`timeout -k`), each appears in the report with the tail of the output.
#
# Time: the steps share a budget (each one's share is about twice what it needs on an H200,
# held back from the steps before it) of 485 s for a full run, inside the 540 s the run call
# gives. Without a GPU the tests skip and the benchmarks are not run: seconds, verdict "no GPU".
# Exit status: 0 all passed, 1 something failed or was skipped, 2 no GPU.
set -uo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.." || exit 1

TESTS=(test_cuda_philox test_cuda_backend test_cuda_moe test_flash_attention test_gpt_cuda test_nccl test_capi_nccl)
BENCH_STEPS=(bench_gpu bench_gpu_moe gpt_1.3B_bf16 gpt_124M_f32 mla_v3_bf16)
# Seconds each step may use at most; a step's share is held back from the steps before it.
declare -A SHARE=([bench_gpu]=140 [bench_gpu_moe]=40 [gpt_1.3B_bf16]=70 [gpt_124M_f32]=40 [mla_v3_bf16]=30)
TEST_LIMIT=${DEVICE_CHECK_TEST_LIMIT:-300}  # one test program at most (the tests share what the benchmarks leave)
TESTS_SHARE=165  # all test programs together

if [[ ${1:-} == --list-programs ]]; then
  for t in "${TESTS[@]}"; do echo "tests/cuda/$t"; done
  echo bench/bench_gpu
  echo bench/bench_gpt
  exit 0
fi

only="" build_dir=""
while [[ ${1:-} == --* ]]; do
  case $1 in
    --only) only=${2:?--only needs a comma-separated list of steps}; shift 2 ;;
    --build-dir) build_dir=${2:?--build-dir needs a build directory}; shift 2 ;;
    *) echo "device-check: unknown option $1 (options: --only STEPS, --build-dir DIR, --list-programs)" >&2; exit 1 ;;
  esac
done
steps=("${TESTS[@]}" "${BENCH_STEPS[@]}")
selected=()
for s in "${steps[@]}"; do
  [[ -z $only || ",$only," == *",$s,"* ]] && selected+=("$s")
done
if [[ -n $only ]]; then
  for s in ${only//,/ }; do
    [[ " ${steps[*]} " == *" $s "* ]] || { echo "device-check: unknown step '$s' (steps: ${steps[*]})" >&2; exit 1; }
  done
fi
is_selected() { [[ " ${selected[*]} " == *" $1 "* ]]; }

out=${1:-${OUT:-device-report}}
mkdir -p "$out" || exit 1
rm -f "$out/report.txt" "$out/logs.tar.gz"
work=$(mktemp -d)
logs="$work/logs"
mkdir -p "$logs"
body="$work/body"
: > "$body"

passed=0 failed=0 skipped=0 bench_ok=0 bench_failed=0 status=0 gpu_seen=0 gpu_name="" mfu="" phase="starting" stopped="" rerun=()
say() { printf '%s\n' "$*" | tee -a "$body"; }
# The tail of a log, indented, into the report.
tail_of() {  # FILE [LINES]
  if [[ -s $1 ]]; then tail -n "${2:-15}" "$1" | sed 's/^/    | /' | tee -a "$body"; else say "    | (no output)"; fi
}
verdict() {
  local v
  if (( gpu_seen )); then v="GPU seen ($gpu_name)"; else v="no GPU"; fi
  v+=" · tests ${passed} passed, ${failed} failed, ${skipped} skipped"
  (( bench_ok + bench_failed )) && v+=" · benchmarks ${bench_ok} ran, ${bench_failed} failed"
  if [[ -n $mfu ]]; then v+=" · headline MFU $mfu"; elif (( gpu_seen )); then v+=" · no MFU measured"; fi
  if [[ -n $stopped ]]; then v+=" · STOPPED: $stopped"
  elif [[ $phase != done ]]; then v+=" · INCOMPLETE: cut off during $phase"; fi
  echo "VERDICT: $v"
}
flush() { { verdict; echo; cat "$body"; } > "$out/report.txt"; }
finish() {
  flush
  tar -C "$work" -czf "$out/logs.tar.gz" logs 2>/dev/null
  rm -rf "$work"
}
trap finish EXIT
trap 'exit 143' TERM INT
fail() {  # STEP MESSAGE: a failure counted against the step
  say "FAIL $1: $2"
  if [[ " ${TESTS[*]} " == *" $1 "* ]]; then failed=$((failed + 1)); else bench_failed=$((bench_failed + 1)); fi
  status=1; rerun+=("$1")
}

say "== ptdp device check $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')${only:+, only $only}"

# -- the machine ------------------------------------------------------------------------------
phase="the machine survey"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L > "$logs/nvidia-smi.txt" 2>&1 && grep -q '^GPU ' "$logs/nvidia-smi.txt"; then
  gpu_seen=1
  gpu_name=$(sed -n 's/^GPU 0: \([^(]*\) (.*/\1/p' "$logs/nvidia-smi.txt" | sed 's/ *$//')
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$body"
else
  say "nvidia-smi sees no GPU: $(command -v nvidia-smi >/dev/null 2>&1 && head -n 1 "$logs/nvidia-smi.txt" || echo 'nvidia-smi is not installed')"
fi
say "nvcc: $( (/usr/local/cuda/bin/nvcc --version 2>/dev/null || echo 'none') | tail -n 1); cores: $(nproc)"
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
say "glibc: ${glibc:-unknown}"
flush

# -- the programs: the carried bundle, else a build here ---------------------------------------
phase="unpacking the bundle"
bin="$work/bin"
lib_path=""
if [[ -n $build_dir ]]; then
  say "programs: from the build directory $build_dir"
  mkdir -p "$bin"
  for p in $(bash "$0" --list-programs); do [[ -x $build_dir/$p ]] && cp "$build_dir/$p" "$bin/"; done
  [[ -d $build_dir/capi ]] && lib_path="$build_dir/capi"
elif [[ -f device-bundle.tar.xz ]]; then
  if ! tar -C "$work" -xJf device-bundle.tar.xz > "$logs/unpack.log" 2>&1; then
    say "FAIL bundle: device-bundle.tar.xz did not unpack"
    tail_of "$logs/unpack.log"
    stopped="the bundle did not unpack"
    exit 1
  fi
  bundle="$work/device-bundle"
  bin="$bundle/bin"
  lib_path="$bundle/lib"
  need=$(cat "$bundle/GLIBC_REQUIRED" 2>/dev/null || echo '?')
  say "bundle: built at commit $(cat "$bundle/COMMIT" 2>/dev/null || echo '?') for sm_90 + PTX, $(ls "$bin" | wc -l) programs, needs glibc >= $need"
  if [[ $need != '?' && -n $glibc && $(printf '%s\n%s\n' "$need" "$glibc" | sort -V | head -n 1) != "$need" ]]; then
    say "FAIL glibc: this machine has glibc $glibc, the bundle needs $need (build it on a system no newer than this one); the programs' loader says:"
    status=1
    "$bin/${TESTS[0]}" --help > "$logs/glibc.log" 2>&1
    tail_of "$logs/glibc.log" 5
  else
    say "glibc: ${glibc:-unknown} is new enough for the bundle (needs $need)"
  fi
else
  phase="building here"
  say "== no device-bundle.tar.xz: building here (CUDA on, MPI off; needs OpenBLAS on this machine)"
  build="$work/build"
  targets=$(bash "$0" --list-programs | xargs -n1 basename)
  if ! { cmake -S . -B "$build" -DPTDP_WITH_CUDA=ON -DPTDP_WITH_MPI=OFF -DCMAKE_BUILD_TYPE=Release \
           -DBUILD_TESTING=ON > "$logs/configure.log" 2>&1 &&
         cmake --build "$build" -j"$(nproc)" --target $targets > "$logs/build.log" 2>&1; }; then
    say "FAIL build: the build here failed (carry device-bundle.tar.xz instead); the end of its log:"
    tail_of "$logs/build.log" 20
    tail_of "$logs/configure.log" 10
    stopped="the build here failed"
    exit 1
  fi
  mkdir -p "$bin"
  for p in $(bash "$0" --list-programs); do cp "$build/$p" "$bin/" 2>/dev/null; done
fi
flush

# -- libraries: every one a program needs must resolve; say where each did ---------------------
phase="resolving libraries"
list_deps() {
  if command -v ldd >/dev/null 2>&1; then ldd "$1" 2>&1; else /lib64/ld-linux-x86-64.so.2 --list "$1" 2>&1; fi
}
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
  [[ -d $d ]] && cuda_dirs+="${cuda_dirs:+:}$d"
done
# Joins with ':' and drops empty entries (an empty entry would mean the current directory).
join_path() { local IFS=:; set -- $*; local out="" d; for d; do [[ -n $d ]] && out+="${out:+:}$d"; done; echo "$out"; }
export LD_LIBRARY_PATH=$(join_path "$lib_path:$cuda_dirs:${LD_LIBRARY_PATH:-}")
# Where a library no path holds may be: DEVICE_CHECK_LIB_ROOTS, then Python's wheels
# (nvidia-nccl-cu13, nvidia-cublas, ...), then the usual prefixes.
search_roots=$(tr ':' '\n' <<< "${DEVICE_CHECK_LIB_ROOTS:-}")
search_roots+=$'\n'$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
search_roots+=$'\n/opt\n/usr/local\n/usr/lib\n/usr/lib64'
find_lib() {  # NAME -> first path found
  local root
  while read -r root; do
    [[ -d $root ]] || continue
    find "$root" -name "$1" \( -type f -o -type l \) -print -quit 2>/dev/null | grep . && return 0
  done <<< "$search_roots"
  return 1
}
# libcuda.so.1 is the driver's, opened at run time (no program names it): find it the same way.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  p=$(find_lib libcuda.so.1 | head -n 1)
  [[ -n $p ]] && export LD_LIBRARY_PATH=$(join_path "$LD_LIBRARY_PATH:$(dirname "$p")")
fi
programs=("$bin"/*)
for round in 1 2 3; do
  missing=$(for f in "${programs[@]}" ${lib_path:+"$lib_path"/*.so*}; do list_deps "$f"; done |
            awk '/=> not found/{print $1}' | sort -u)
  [[ -z $missing ]] && break
  for m in $missing; do
    p=$(find_lib "$m" | head -n 1)
    if [[ -n $p ]]; then
      export LD_LIBRARY_PATH=$(join_path "$LD_LIBRARY_PATH:$(dirname "$p")")
    fi
  done
done
# The bundle's C++ runtime (Debian's) only where this machine's is missing or too old.
if [[ -n $lib_path && -d $lib_path/cxxrt ]]; then
  if for f in "${programs[@]}"; do list_deps "$f"; done | grep -Eq "(libstdc\+\+|libgcc_s|libgomp)[^ ]* => not found|version .(GLIBCXX|CXXABI|GCC|GOMP)_"; then
    export LD_LIBRARY_PATH="$lib_path/cxxrt:$LD_LIBRARY_PATH"
    say "C++ runtime: this machine's is missing or too old; the bundle's (Debian 12) is used"
  fi
fi
for f in "${programs[@]}"; do echo "== $(basename "$f")"; list_deps "$f"; done > "$logs/libraries.txt"
say "== libraries (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
# One table: each library, the file it resolved to for every program that loads it, and how many
# of the programs load it (all resolve through the one path above, so a name resolves alike).
awk -v n=${#programs[@]} '
  /^== / { prog = $2; next }
  /=>/   { name = $1; where = $3; if ($3 == "not" ) where = "NOT FOUND"; else if (where ~ /^\(/) next
           if (!(name in at)) order[++k] = name
           at[name] = where; users[name]++ }
  END    { for (i = 1; i <= k; i++) printf "  %-28s %s  (%d of %d programs)\n", order[i], at[order[i]], users[order[i]], n }
' "$logs/libraries.txt" | tee -a "$body"
cudalib=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
[[ -z $cudalib ]] && cudalib=$(IFS=:; for d in $LD_LIBRARY_PATH; do [[ -e $d/libcuda.so.1 ]] && { echo "$d/libcuda.so.1"; break; }; done)
say "  libcuda.so.1 (the driver's, opened at run time) ${cudalib:-NOT FOUND}"
if grep -q "not found" "$logs/libraries.txt"; then
  say "FAIL libraries: some do not resolve (above; the loader's words follow)"
  grep "not found" "$logs/libraries.txt" | sort -u | head -n 10 | sed 's/^/    | /' | tee -a "$body"
  status=1
fi
flush

# -- the steps ---------------------------------------------------------------------------------
start=$SECONDS
budget_total=0
tests_selected=0
for s in "${selected[@]}"; do
  if [[ -n ${SHARE[$s]:-} ]]; then budget_total=$((budget_total + SHARE[$s])); else tests_selected=1; fi
done
(( tests_selected )) && budget_total=$((budget_total + TESTS_SHARE))
deadline=$((start + budget_total))
# Seconds a step may run: WANT, cut so that the shares of the selected steps after it stay.
budget() {  # WANT STEP
  local reserve=0 after=0 s
  for s in "${BENCH_STEPS[@]}"; do
    [[ $s == "$2" ]] && { after=1; continue; }
    if { (( after )) || [[ " ${TESTS[*]} " == *" $2 "* ]]; } && is_selected "$s"; then reserve=$((reserve + SHARE[$s])); fi
  done
  local left=$((deadline - reserve - SECONDS))
  (( left < $1 )) || left=$1
  echo $(( left < 1 ? 1 : left ))
}
# Runs one program under `timeout -k`; sets rc; the log is $logs/NAME.log.
run_step() {  # NAME LIMIT PROGRAM ARGS...
  local name=$1 limit=$2 prog=$3
  shift 3
  if [[ ! -x $bin/$prog ]]; then rc=127; echo "$bin/$prog is missing" > "$logs/$name.log"; return; fi
  timeout -k 10 "$limit" "$bin/$prog" "$@" > "$logs/$name.log" 2>&1
  rc=$?
}
timed_out() { [[ $1 -eq 124 || $1 -eq 137 ]]; }

say ""
say "== gpu tests"
for t in "${TESTS[@]}"; do
  is_selected "$t" || continue
  phase=$t
  flush
  limit=$(budget "$TEST_LIMIT" "$t")
  if (( limit < (TEST_LIMIT < 10 ? TEST_LIMIT : 10) )); then fail "$t" "not run: the tests' share of the time budget is spent"; continue; fi
  run_step "$t" "$limit" "$t" --reporter compact
  case $rc in
    0) say "PASS $t: $(tail -n 1 "$logs/$t.log")"; passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)); rerun+=("$t")
        if (( gpu_seen )); then say "SKIPPED $t: the program saw no usable GPU although nvidia-smi lists one"; status=1
        else say "SKIPPED $t: no GPU"; fi
        tail_of "$logs/$t.log" 3 ;;
    127) fail "$t" "missing from the bundle (scripts/device-bundle.sh builds it)" ;;
    *) if timed_out $rc; then fail "$t" "killed by its time limit of ${limit}s (exit $rc)"; else fail "$t" "exit $rc"; fi
       # Catch2's failure lines (the first 20), then the last 8 lines, each line once.
       awk -v total="$(wc -l < "$logs/$t.log")" '(/failed|FAILED|error/ && ++m <= 20) || NR > total - 8' "$logs/$t.log" |
         sed 's/^/    | /' | tee -a "$body" ;;
  esac
done

bench_result() {  # STEP LIMIT: rc of the last run_step
  if (( rc == 127 )); then fail "$1" "$(cat "$logs/$1.log")"
  elif timed_out $rc; then fail "$1" "killed by its time limit of ${2}s (exit $rc); the end of its log:"; tail_of "$logs/$1.log"
  elif (( rc != 0 )); then fail "$1" "exit $rc; the end of its log:"; tail_of "$logs/$1.log"
  else bench_ok=$((bench_ok + 1)); fi
}
if (( !gpu_seen )); then
  for s in "${BENCH_STEPS[@]}"; do is_selected "$s" && say "NOT RUN $s: no GPU"; done
else
  # The first field ending in % of a bench_gpu training row is its MFU.
  row_mfu() {  # REGEX [STEP]
    awk -v re="$1" '$1 ~ re { for (i = 2; i <= NF; i++) if ($i ~ /%$/) { print $i; exit } }' "$logs/${2:-bench_gpu}.log"
  }
  if is_selected bench_gpu; then
    phase=bench_gpu
    flush
    say ""
    say "== bench_gpu (cuBLASLt GEMMs fp32/tf32/bf16 and causal attention of the 124M, 350M and 1.3B shapes and Llama-3.2-1B's GQA; training through the C API, bf16: GPTs at s=1024, b=8, Llama-3.2-1B at s=2048, b=4)"
    limit=$(budget "${SHARE[bench_gpu]}" bench_gpu)
    # GEMMs at 3 runs of >= 0.03 s each (the longest section), attention, then training: bf16,
    # 2 warm-up + 10 timed iterations per model; the GPTs at s=1024, b=8, Llama-3.2-1B at
    # s=2048, b=4 (the same 8192 tokens per iteration as the 1.3B GPT, a few seconds more).
    # The MoE cases run in their own step (bench_gpu_moe, below).
    run_step bench_gpu "$limit" bench_gpu --exclude moe --runs 3 --min-time 0.03 --json "$logs/bench_gpu.json"
    { grep -E "^bench_gpu( on |: )|layer +all GEMMs above" "$logs/bench_gpu.log"; echo
      sed -n '/^Fused causal attention/,$p' "$logs/bench_gpu.log"; } | tee -a "$body"
    row=$(row_mfu '^1[.]3B/.*train') && [[ -n $row ]] && mfu="$row (GPT 1.3B bf16 training, bench_gpu)"
    row=$(row_mfu '^llama-3[.]2-1b/.*train') && [[ -n $row ]] && mfu+="${mfu:+, }$row (Llama-3.2-1B bf16 training at s=2048, bench_gpu)"
    bench_result bench_gpu "$limit"
  fi
  if is_selected bench_gpu_moe; then
    phase=bench_gpu_moe
    flush
    say ""
    say "== bench_gpu_moe (MoE ops at OLMoE-1B-7B's shape, bf16; training of its first 2 layers at s=2048, b=4" \
      "through the C API)"
    limit=$(budget "${SHARE[bench_gpu_moe]}" bench_gpu_moe)
    # 2 warm-up + 5 timed iterations: the case builds 0.9B parameters, most of the step's time.
    run_step bench_gpu_moe "$limit" bench_gpu --filter moe --runs 3 --min-time 0.03 --train-iters 5 \
      --json "$logs/bench_gpu_moe.json"
    sed -n '/^MoE experts/,$p' "$logs/bench_gpu_moe.log" | tee -a "$body"
    row=$(row_mfu '^olmoe-1b-7b[.]l2/.*train' bench_gpu_moe) && [[ -n $row ]] &&
      mfu+="${mfu:+, }$row (OLMoE-1B-7B 2 layers bf16 training, bench_gpu)"
    bench_result bench_gpu_moe "$limit"
  fi
  gpt() {  # STEP layers hidden heads precision micro-batch
    is_selected "$1" || return
    phase=$1
    flush
    local limit
    limit=$(budget "${SHARE[$1]}" "$1")
    run_step "$1" "$limit" bench_gpt --device cuda --layers "$2" --hidden "$3" --heads "$4" --vocab 50257 \
      --seq 1024 --micro-batch "$6" --precision "$5" --iters 5 --warmup 2 --json "$logs/$1.json"
    say ""
    say "== $1: bench_gpt --device cuda (l=$2, h=$3, a=$4, s=1024, b=$6, $5; MFU against 989 TFLOP/s bf16, 67 fp32)"
    grep -E "forward\+backward|tokens/s|GFLOP/s|TFLOP/s|MFU|loss:" "$logs/$1.log" | head -n 8 | tee -a "$body"
    bench_result "$1" "$limit"
  }
  gpt gpt_1.3B_bf16 24 2048 16 bf16 8
  gpt gpt_124M_f32 12 768 12 f32 4
  if is_selected mla_v3_bf16; then
    phase=mla_v3_bf16
    flush
    limit=$(budget "${SHARE[mla_v3_bf16]}" mla_v3_bf16)
    run_step mla_v3_bf16 "$limit" bench_gpt --device cuda --mla --layers 2 --seq 4096 --micro-batch 1 \
      --precision bf16 --iters 5 --warmup 2 --json "$logs/mla_v3_bf16.json"
    say ""
    say "== mla_v3_bf16: bench_gpt --mla --device cuda (DeepSeek-V3's layer at h 2048, l=2, s=4096, b=1, bf16)"
    grep -E "forward\+backward|tokens/s|GFLOP/s|TFLOP/s|MFU|loss:" "$logs/mla_v3_bf16.log" | head -n 8 | tee -a "$body"
    bench_result mla_v3_bf16 "$limit"
  fi
fi

say ""
if (( ${#rerun[@]} && gpu_seen )); then
  say "== RERUN what failed or was skipped: bash scripts/device-check.sh --only $(IFS=,; echo "${rerun[*]}") \$OUT"
fi
phase=done
(( !gpu_seen )) && (( status == 0 )) && status=2
say "== done in ${SECONDS}s (the steps took $((SECONDS - start))s of their ${budget_total}s budget), status $status"
exit $status
