#!/usr/bin/env bash
# The bits of a set of training runs, for refactors that must change none of them: every
# pipeline schedule, tensor, sequence, context and data parallelism, the distributed optimizer,
# recomputation, bf16 with its loss scale, untied and Llama-shaped models, an interrupted run
# resumed from its checkpoint, and greedy generation from a checkpoint. Each run writes its
# JSON lines (the loss, learning rate, grad norm, loss scale and validation loss of every
# iteration, printed to the last bit; timings dropped) and the SHA-256 of every file its final
# checkpoint holds, and the log lines the logging rank printed, with the clock's figures, the
# memory high-water mark and the temporary folder masked. Run it before and after a change and compare the folders:
#
#   bash scripts/bit-snapshot.sh BUILD_DIR OUT_DIR [RUN_NAME ...]
#   diff -r OUT_BEFORE OUT_AFTER        # no output: the change kept every bit
#
# One thread per rank (OMP_NUM_THREADS=1), so the sums are taken in one order every time.
set -euo pipefail
build=$(cd "${1:?usage: bit-snapshot.sh BUILD_DIR OUT_DIR [RUN_NAME ...]}" && pwd)
out=${2:?usage: bit-snapshot.sh BUILD_DIR OUT_DIR [RUN_NAME ...]}
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train="$build/bin/ptdp-train"
corpus=/usr/share/common-licenses/GPL-3

common=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
        --micro-batch-size 2 --global-batch-size 8 --train-iters 6
        --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1
        --clip-grad 1.0 --hidden-dropout 0.1 --attention-dropout 0.1 --seed 1234
        --text-file "$corpus" --tokenizer-type ByteLevel --split 90,10,0
        --log-interval 1 --eval-interval 3 --eval-iters 2)
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights)

# NAME RANKS FLAGS...
runs=(
  "serial 1"
  "t2p2_1f1b 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
  "t2d2_sp_distopt 4 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
  "p2_gpipe_d2 4 --pipeline-model-parallel-size 2 --pipeline-schedule gpipe"
  "p2v2_interleaved 2 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2"
  "p2_zbh1 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"
  "p2_zbv 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-v"
  "p2_dualpipev 2 --pipeline-model-parallel-size 2 --pipeline-schedule dualpipev"
  "p2v2_interleaved_zb 2 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --pipeline-schedule interleaved-zb"
  "c2_llama 2 --context-parallel-size 2 ${llama[*]}"
  "t2p2_llama_recompute 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --recompute-granularity full ${llama[*]}"
  "t2_bf16 2 --tensor-model-parallel-size 2 --bf16"
  "d2_fp16 2 --fp16"
)

want() {  # is run $1 asked for (all when no names were given)?
  [[ ${#selected[@]} -eq 0 ]] && return 0
  local n
  for n in "${selected[@]}"; do [[ $n == "$1" ]] && return 0; done
  return 1
}
selected=("$@")

mpi() {  # RANKS ARGS...
  local n=$1
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$n" -x OMP_NUM_THREADS=1 -x PTDP_MEMORY_CHECK=0 "$@"
}

# The JSON lines without what depends on the clock, numbers written as the JSON has them.
strip_times() {
  python3 - "$1" <<'PY'
import json, sys
drop = {"elapsed_ms", "elapsed_s", "tokens_per_second", "tflops_per_device", "mfu", "mem_high_water_mib",
        "timestamp", "time", "throughput", "comm_wait_ms", "iteration_ms", "samples_per_second"}
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({k: v for k, v in sorted(r.items()) if k not in drop and "time" not in k and "ms" != k[-2:]}))
PY
}

# The printed lines with what depends on the clock, the machine or the folder masked.
mask_log() {
  sed -E -e 's/^ \[[0-9-]+ [0-9:]+\]/ [TIME]/' \
    -e 's/(elapsed time per iteration \(ms\)|throughput per GPU \(TFLOP\/s\/GPU\)|tokens per second|MFU|mem high-water \(MiB\)): [0-9.e+%-]+/\1: X/g' \
    -e "s#$work#WORK#g" "$1"
}

digest_checkpoint() {  # DIR: the SHA-256 of every file of the latest iteration, names relative
  local dir=$1 latest
  latest=$(cat "$dir/latest_checkpointed_iteration.txt")
  (cd "$dir/$(printf 'iter_%07d' "$latest")" && find . -type f ! -name metadata.json ! -name manifest.sha256 \
    -print0 | sort -z | xargs -0 sha256sum)
}

for spec in "${runs[@]}"; do
  read -r name ranks flags <<<"$spec"
  want "$name" || continue
  echo "bit-snapshot: $name ($ranks ranks)"
  # shellcheck disable=SC2086
  mpi "$ranks" "$train" "${common[@]}" $flags --save "$work/$name" --save-interval 6 \
    --log-json "$work/$name.jsonl" >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  strip_times "$work/$name.jsonl" >"$out/$name.jsonl"
  mask_log "$work/$name.log" >"$out/$name.log"
  digest_checkpoint "$work/$name" >"$out/$name.sha256"
done

# An interrupted run resumed from its checkpoint: 3 iterations, saved, then 3 more from --load.
if want resume; then
  echo "bit-snapshot: resume (4 ranks, 3 + 3 iterations)"
  flags=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
  mpi 4 "$train" "${common[@]}" "${flags[@]}" --exit-interval 3 --save "$work/resume" --save-interval 3 \
    --log-json "$work/resume-a.jsonl" >"$work/resume-a.log" 2>&1 || { cat "$work/resume-a.log"; exit 1; }
  mpi 4 "$train" "${common[@]}" "${flags[@]}" --load "$work/resume" --save "$work/resume" --save-interval 6 \
    --log-json "$work/resume-b.jsonl" >"$work/resume-b.log" 2>&1 || { cat "$work/resume-b.log"; exit 1; }
  cat "$work/resume-a.jsonl" "$work/resume-b.jsonl" >"$work/resume.jsonl"
  strip_times "$work/resume.jsonl" >"$out/resume.jsonl"
  cat "$work/resume-a.log" "$work/resume-b.log" >"$work/resume.log"
  mask_log "$work/resume.log" >"$out/resume.log"
  digest_checkpoint "$work/resume" >"$out/resume.sha256"
fi

# Generation from the serial run's checkpoint, sampled with a fixed seed (so that every logit
# matters, not only the largest): the tokens it continues the prompt with.
if want generate && [[ -d $work/serial ]]; then
  echo "bit-snapshot: generate"
  OMP_NUM_THREADS=1 "$build/bin/ptdp-generate" --load "$work/serial" --prompt "The GNU General Public License is" \
    --max-new-tokens 60 --top-k 8 --temperature 0.8 --seed 7 >"$work/generate.txt" 2>&1
  mask_log "$work/generate.txt" >"$out/generate.txt"
fi
echo "bit-snapshot: $(ls "$out" | wc -l) files in $out"
