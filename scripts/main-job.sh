#!/usr/bin/env bash
# The README's main job: trains a small GPT on a text every Debian machine has (the GNU GPL v3
# from base-files, /usr/share/common-licenses/GPL-3, 35 KB, one token per byte) with 4 MPI
# ranks in the layout t = 2, p = 2 on the CPU engine, saves a checkpoint, shows the loss
# falling well below the text's unigram entropy, then generates text from the checkpoint on
# one process.
#
#   bash scripts/main-job.sh [BUILD_DIR] [ITERATIONS] [MAX_RATIO]
# fails when the last training loss is not below MAX_RATIO (default 0.7) times the entropy.
set -euo pipefail
build=${1:-build}
iters=${2:-1000}
max_ratio=${3:-0.7}
corpus=/usr/share/common-licenses/GPL-3
out="$build/main-job"
rm -rf "$out"
mkdir -p "$out"

entropy=$(python3 - "$corpus" <<'PY'
import collections, math, sys
data = open(sys.argv[1], "rb").read()
counts = collections.Counter(data)
print(f"{-sum(c / len(data) * math.log(c / len(data)) for c in counts.values()):.4f}")
PY
)
echo "main job: $corpus, $(wc -c < "$corpus") bytes; unigram entropy $entropy nats per byte"

mpirun --allow-run-as-root --oversubscribe -np 4 -x OMP_NUM_THREADS=1 "$build/bin/ptdp-train" \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --micro-batch-size 4 --global-batch-size 16 --train-iters "$iters" \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 50 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 \
  --hidden-dropout 0.1 --attention-dropout 0.1 --seed 1234 \
  --text-file "$corpus" --tokenizer-type ByteLevel --split 95,5,0 \
  --log-interval 50 --eval-interval 250 --eval-iters 4 \
  --save "$out/checkpoint" --save-interval 500 --log-json "$out/log.jsonl"

python3 - "$out/log.jsonl" "$entropy" "$max_ratio" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in records if "iteration" in r]
valid = [r for r in records if "validation_iteration" in r]
entropy = float(sys.argv[2])
max_ratio = float(sys.argv[3])
first = sum(r["lm_loss"] for r in steps[:10]) / 10
last = sum(r["lm_loss"] for r in steps[-10:]) / 10
val = f"validation loss {valid[-1]['lm_loss']:.3f}; " if valid else ""
print(f"main job: training loss {first:.3f} (first 10 iterations) -> {last:.3f} (last 10); "
      f"{val}unigram entropy {entropy:.3f} nats per byte")
if not last < max_ratio * entropy:
    sys.exit(f"main job: the loss {last:.3f} did not fall well below the unigram entropy {entropy:.3f}")
print(f"main job: the model predicts bytes with {last / entropy:.0%} of the unigram model's loss")
PY

echo "main job: generating from $out/checkpoint on one process"
"$build/bin/ptdp-generate" --load "$out/checkpoint" --prompt "The GNU General Public License is" \
  --max-new-tokens 300 --top-k 8 --temperature 0.8
