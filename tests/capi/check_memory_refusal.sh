#!/bin/sh
# ptdp-train refuses a run that would not fit before it allocates: a huge --num-layers and a
# huge --micro-batch-size each end within seconds with exit status 1 and the estimate, and the
# process's maximum resident set (GNU time's %M) stays small.
# Usage: check_memory_refusal.sh PTDP_TRAIN
set -u
train=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0
run() {
  what=$1
  shift
  OMP_NUM_THREADS=1 /usr/bin/time -f 'maxrss_kib=%M' timeout 60 "$train" --seq-length 16 --mock-data --train-iters 1 \
    "$@" >"$out" 2>&1
  rc=$?
  rss=$(sed -n 's/^maxrss_kib=//p' "$out")
  if [ "$rc" -ne 1 ]; then echo "FAIL $what: exit status $rc, want 1"; cat "$out"; fail=1; fi
  if ! grep -q 'the run would not fit: it needs .* GiB per rank' "$out"; then
    echo "FAIL $what: no estimate in the output"; cat "$out"; fail=1
  fi
  if ! grep -q 'GiB available per rank' "$out"; then echo "FAIL $what: no limit in the output"; fail=1; fi
  if [ -z "$rss" ] || [ "$rss" -gt 524288 ]; then echo "FAIL $what: max RSS ${rss:-?} KiB > 512 MiB"; fail=1; fi
  echo "$what: exit $rc, max RSS ${rss:-?} KiB"
}
run "huge --num-layers" --num-layers 200000 --hidden-size 4096 --num-attention-heads 32
run "huge --micro-batch-size" --micro-batch-size 4000000 --global-batch-size 4000000 --seq-length 1024 \
  --max-position-embeddings 1024
exit $fail
