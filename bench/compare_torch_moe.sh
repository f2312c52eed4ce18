#!/bin/sh
# ptdp's MoE training step against transformers + PyTorch's on the same model and threads, back to
# back: bench_gpt --moe (section 3, the whole train_iteration step) and bench/torch_moe_step.py
# (Hugging Face's OlmoeForCausalLM of the same shape), alternating ROUNDS times so that both see
# the same machine; prints each run's median step and ptdp / PyTorch per round, then the median of
# the rounds' ratios against the issue's goal (ptdp <= 0.5x PyTorch's step time). OLMoE-1B-7B's
# layer shape (h 2048, 16 heads, 64 experts, top-8, expert ffn 1024) with 1 layer, s 256, b 1,
# V 4096 unless flags after the options say otherwise (they go to both programs: --layers
# --hidden --heads --num-experts --moe-router-topk --moe-ffn-hidden-size --vocab --seq
# --micro-batch --iters --warmup).
#
#   bench/compare_torch_moe.sh                        # 2 rounds, 5 timed steps each, all cores
#   ROUNDS=3 THREADS=2 bench/compare_torch_moe.sh --layers 2 --seq 128
#   EXPERTS_IMPL=grouped_mm bench/compare_torch_moe.sh  # transformers' torch._grouped_mm experts
#   EXPERTS_IMPL=grouped_mm TORCH_ARGS=--fused-adamw bench/compare_torch_moe.sh  # PyTorch at its fastest
#
# Environment: BUILD (build), ROUNDS (2), THREADS (nproc), PYTHON (/opt/ptdp-ref-venv/bin/python:
# torch 2.15, transformers 5.25), EXPERTS_IMPL (eager: transformers' default expert loop),
# TORCH_ARGS (more flags for torch_moe_step.py alone, e.g. --fused-adamw),
# OUT (a temporary folder; the logs and JSON files stay there).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-$(nproc)}
PYTHON=${PYTHON:-/opt/ptdp-ref-venv/bin/python}
EXPERTS_IMPL=${EXPERTS_IMPL:-eager}
TORCH_ARGS=${TORCH_ARGS:-}
OUT=${OUT:-$(mktemp -d /tmp/ptdp-compare-torch-moe.XXXXXX)}
mkdir -p "$OUT"
BENCH_GPT="$BUILD/bench/bench_gpt"
[ -x "$BENCH_GPT" ] ||
  { echo "compare_torch_moe.sh: $BENCH_GPT not built (cmake --build $BUILD --target bench_gpt)" >&2; exit 2; }
"$PYTHON" -c 'import torch, transformers' 2>/dev/null ||
  { echo "compare_torch_moe.sh: $PYTHON cannot import torch and transformers" >&2; exit 2; }

echo "ptdp bench_gpt --moe vs transformers $("$PYTHON" -c 'import transformers; print(transformers.__version__)') +" \
  "PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') (experts: $EXPERTS_IMPL), $THREADS threads," \
  "$ROUNDS rounds; logs in $OUT"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  # Section 3's step is the figure compared; the breakdown and the MoE layer's section are skipped.
  OMP_NUM_THREADS=$THREADS "$BENCH_GPT" --moe --threads "$THREADS" --profile-steps 0 --no-moe-layer "$@" \
    --json "$OUT/ptdp_$r.json" > "$OUT/ptdp_$r.log" 2>&1 || { cat "$OUT/ptdp_$r.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$THREADS "$PYTHON" "$here/torch_moe_step.py" --threads "$THREADS" \
    --experts-implementation "$EXPERTS_IMPL" $TORCH_ARGS "$@" --json "$OUT/torch_$r.json" > "$OUT/torch_$r.log" 2>&1 ||
    { cat "$OUT/torch_$r.log" >&2; exit 1; }
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
ptdp = [json.load(open(f"{out}/ptdp_{r}.json")) for r in range(1, rounds + 1)]
torch = [json.load(open(f"{out}/torch_{r}.json")) for r in range(1, rounds + 1)]
p = [j["train_step"]["ms_median"] for j in ptdp]
t = [j["ms_median"] for j in torch]
tokens = ptdp[0]["tokens_per_iteration"]
mp, mt = statistics.median(p), statistics.median(t)
ratios = [a / b for a, b in zip(p, t)]
mr = statistics.median(ratios)
print(f"median over rounds: ptdp {mp:.1f} ms ({tokens / mp * 1e3:.0f} tokens/s), PyTorch {mt:.1f} ms "
      f"({tokens / mt * 1e3:.0f} tokens/s) per step")
print(f"ptdp/PyTorch = {mr:.2f}, the median of the rounds' ratios, range {min(ratios):.2f} .. {max(ratios):.2f}; "
      f"goal <= 0.50: {'met' if mr <= 0.5 else 'not met'}")
if max(ratios) > 1.25 * min(ratios):
    print("WARNING: the rounds' ratios differ by more than 25%: the machine was busy; rerun when idle")
PY
