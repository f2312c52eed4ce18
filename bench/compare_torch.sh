#!/bin/sh
# ptdp's training step against PyTorch's on the same model, back to back: bench_gpt (section 3,
# the whole train_iteration step) and bench/torch_step.py, alternating ROUNDS times so that both
# see the same machine; prints each run's median step and the ratio ptdp / PyTorch per round and
# over all rounds (the median of each side's medians). GPT-2 small at b 4, s 64, dropout 0.1 unless
# flags after the options say otherwise (they go to both programs: --layers --hidden --heads
# --vocab --seq --micro-batch --iters --warmup).
#
#   bench/compare_torch.sh                   # 3 rounds, 10 timed steps each, all cores
#   ROUNDS=5 THREADS=2 bench/compare_torch.sh --iters 20
#
# Environment: BUILD (build), ROUNDS (3), THREADS (nproc), PYTHON (/usr/bin/python3: Debian's
# interpreter, which has python3-torch), OUT (a temporary folder; the logs and JSON files stay there).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$(mktemp -d /tmp/ptdp-compare-torch.XXXXXX)}
BENCH_GPT="$BUILD/bench/bench_gpt"
[ -x "$BENCH_GPT" ] || { echo "compare_torch.sh: $BENCH_GPT not built (cmake --build $BUILD --target bench_gpt)" >&2; exit 2; }
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "compare_torch.sh: $PYTHON cannot import torch" >&2; exit 2; }

# Both programs get the same shape flags; --iters defaults to 10 for both.
case " $* " in *" --iters"*) iters= ;; *) iters="--iters 10" ;; esac
echo "ptdp bench_gpt vs PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)'), $THREADS threads, $ROUNDS rounds; logs in $OUT"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$THREADS "$BENCH_GPT" --threads "$THREADS" --profile-steps 0 $iters "$@" \
    --json "$OUT/ptdp_$r.json" > "$OUT/ptdp_$r.log" 2>&1 || { cat "$OUT/ptdp_$r.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$THREADS "$PYTHON" "$here/torch_step.py" --threads "$THREADS" $iters "$@" \
    --json "$OUT/torch_$r.json" > "$OUT/torch_$r.log" 2>&1 || { cat "$OUT/torch_$r.log" >&2; exit 1; }
  "$PYTHON" - "$OUT" "$r" <<'PY'
import json, sys
out, r = sys.argv[1], sys.argv[2]
p = json.load(open(f"{out}/ptdp_{r}.json"))["train_step"]["ms_median"]
t = json.load(open(f"{out}/torch_{r}.json"))["ms_median"]
print(f"round {r}: ptdp step {p:8.1f} ms   PyTorch step {t:8.1f} ms   ptdp/PyTorch {p / t:.2f}")
PY
  r=$((r + 1))
done
"$PYTHON" - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
p = [json.load(open(f"{out}/ptdp_{r}.json"))["train_step"]["ms_median"] for r in range(1, rounds + 1)]
t = [json.load(open(f"{out}/torch_{r}.json"))["ms_median"] for r in range(1, rounds + 1)]
mp, mt = statistics.median(p), statistics.median(t)
ratios = [a / b for a, b in zip(p, t)]
mr = statistics.median(ratios)
print(f"median over rounds: ptdp {mp:.1f} ms, PyTorch {mt:.1f} ms per step (ratio of the medians {mp / mt:.2f})")
print(f"ptdp/PyTorch = {mr:.2f}, the median of the rounds' ratios (each round's pair ran back to back), "
      f"range {min(ratios):.2f} .. {max(ratios):.2f}: {'ptdp faster' if mr < 1 else 'PyTorch faster'}")
if max(ratios) > 1.25 * min(ratios):
    print("WARNING: the rounds' ratios differ by more than 25%: the machine was busy; rerun when idle")
PY
