#!/usr/bin/env python3
"""Faults injected into ptdp-train runs under mpiexec (PTDP_FAULT), and what they leave behind
(ctest labels "tools;mpi;faults").

    test_ptdp_faults.py BIN_DIR CASE

CASE is one of:
  kill        rank 3 of a (2,2,2) run kills itself at iteration 5: the job fails within the
              timeout, the launcher names rank 3 and signal 9, the fault line names the rank; the
              last complete checkpoint (iteration 4) loads and verifies; rank 1 killed as it
              enters the save of iteration 4 leaves iteration 2 the latest, loading
  hang        rank 5 of a (2,2,2) run hangs at iteration 3: with --comm-timeout 5 the job fails
              within the timeout with the waiting ranks' timeout messages (naming their groups),
              rank 5 itself silent after its fault line; the checkpoint of iteration 2 stays
              the latest; ptdp-flight-analyze names rank 5 from the flight records the waiting
              ranks wrote (PTDP_FLIGHT_RECORDER_DIR)
  slow        rank 6 of a (2,2,2) run sleeps 150 ms per iteration (and rank 1 at every save): the run
              completes with the unslowed run's losses and checkpoint tensors, bit for bit; each
              slow spec prints its fault line (how much longer the run took is printed only)
  ioerror     rank 0's save at iteration 4 of a (2,2,2) run fails as a full disk would: the run
              stops with the writer's error named, the checkpoint of iteration 2 stays the latest
              and loads; an io-error on a rank that writes nothing is refused by name
  nan         --check-for-nan-in-loss-and-grad at (2,2,2): a NaN written into rank 2's gradient of
              decoder.layers.0.mlp.linear_fc1.weight at iteration 3 stops every rank with exit
              status 4 and a message naming rank 2, its coordinates (tensor 0, data 1, stage 0),
              the iteration and the parameter; a NaN loss on rank 6 names rank 6 and stage 1;
              without the flag the same fault only skips the step
  skips       --max-skipped-iterations: an fp16 (1,2,2) run whose gradients are NaN at every
              iteration stops after 4 consecutive skips with exit status 3 and the message; with
              0 (no budget) it runs to the end with status 0
  supervise   ptdp-train --max-restarts 3 --launcher 'mpiexec -n 4' on (2,2,1): killed on attempts
              0, 1 and 2 (different ranks, iterations and places), it resumes each time from the
              latest checkpoint and ends with every tensor of its final checkpoint bitwise equal
              to a run never killed; killed more often than --max-restarts 1 allows, it exits
              with status 5 and says it gave up
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
CASE = sys.argv[2]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
TRAIN = os.path.join(BIN, "ptdp-train")
ANALYZE = os.path.join(BIN, "ptdp-flight-analyze")
WORK = tempfile.mkdtemp(prefix="ptdp-faults-test-")
failures = []

CORPUS = os.path.join(WORK, "corpus.txt")
with open(CORPUS, "w") as f:
    for i in range(300):
        f.write(f"Paragraph {i}: the quick brown fox jumps over the lazy dog {i % 7} times.\n")

# A tiny GPT with dropout on, 4 layers (p = 2 holds two each); ranks are cheap on 2 cores.
MODEL = ["--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
         "--vocab-size", "256", "--make-vocab-size-divisible-by", "128", "--micro-batch-size", "2",
         "--global-batch-size", "8", "--lr", "3e-3", "--seed", "1234", "--text-file", CORPUS,
         "--tokenizer-type", "ByteLevel", "--log-interval", "1", "--eval-interval", "0", "--peak-tflops", "1"]
P222 = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]
FC1 = "decoder.layers.0.mlp.linear_fc1.weight"


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def launcher(np):
    return [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", str(np)]


def run(np, flags, fault=None, timeout=120, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", PTDP_PROGRESS="0")
    env.pop("PTDP_FAULT", None)
    if fault:
        env["PTDP_FAULT"] = fault
    if env_extra:
        env.update(env_extra)
    cmd = (launcher(np) if np else []) + [TRAIN] + flags
    start = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout)
    p.seconds = time.monotonic() - start
    return p


def expect_ok(p, what):
    if p.returncode != 0:
        print(p.stdout[-3000:])
        print(p.stderr[-3000:])
        raise SystemExit(f"{what}: ptdp-train failed with status {p.returncode}")


def steps(log):
    return {r["iteration"]: r for r in (json.loads(line) for line in open(log)) if "iteration" in r}


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), data[lo:hi])
    return out


def checkpoint_tensors(ckpt, iteration):
    d = os.path.join(ckpt, f"iter_{iteration:07d}")
    tensors = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".safetensors"):
            for k, v in read_safetensors(os.path.join(d, name)).items():
                tensors[f"{name}:{k}"] = v
    return tensors


def latest(ckpt):
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
        return int(f.read().strip())


def loads(np, flags, ckpt, iteration, what):
    """The checkpoint loads (the reader verifies every file against the manifest) at its layout."""
    p = run(np, MODEL + flags + ["--load", ckpt, "--train-iters", str(iteration)])
    check(p.returncode == 0 and f"loaded checkpoint from {ckpt} at iteration {iteration}" in p.stdout,
          f"{what}: the checkpoint of iteration {iteration} loads: status {p.returncode}, {p.stderr[-1500:]}")


def case_kill():
    ck = os.path.join(WORK, "kill")
    p = run(8, MODEL + P222 + ["--train-iters", "8", "--save", ck, "--save-interval", "2", "--comm-timeout", "20"],
            fault="kill:rank=3:iter=5", timeout=90)
    check(p.returncode != 0, f"kill: the job fails, got status {p.returncode}")
    check(p.seconds < 60, f"kill: the job ends within the timeout, took {p.seconds:.1f} s")
    check("PTDP_FAULT kill:rank=3:iter=5: rank 3 kills itself at iteration 5" in p.stderr,
          f"kill: the fault line names rank 3: {p.stderr[-1500:]}")
    check(re.search(r"rank 3 .*signal 9", p.stderr) is not None,
          f"kill: the launcher names rank 3 and signal 9: {p.stderr[-1500:]}")
    check(latest(ck) == 4, f"kill: the latest checkpoint is of iteration 4, got {latest(ck)}")
    check(not os.path.exists(os.path.join(ck, "iter_0000006")), "kill: no checkpoint of iteration 6")
    loads(8, P222, ck, 4, "kill")
    # Killed as it enters the save of iteration 4 while the others save: iteration 2 stays the latest.
    ck2 = os.path.join(WORK, "kill-save")
    q = run(8, MODEL + P222 + ["--train-iters", "8", "--save", ck2, "--save-interval", "2", "--comm-timeout", "20"],
            fault="kill:rank=1:iter=4:at=save", timeout=90)
    check(q.returncode != 0 and "rank 1 kills itself at iteration 4 (save)" in q.stderr,
          f"kill at save: the job fails naming rank 1: {q.returncode} {q.stderr[-1500:]}")
    check(latest(ck2) == 2, f"kill at save: the latest checkpoint is of iteration 2, got {latest(ck2)}")
    loads(8, P222, ck2, 2, "kill at save")
    print(f"kill: failed in {p.seconds:.1f} s with status {p.returncode}; checkpoint 4 loads; "
          f"killed in a save: checkpoint 2 loads")


def case_hang():
    ck = os.path.join(WORK, "hang")
    flight = os.path.join(WORK, "hang-flight")
    os.makedirs(flight)
    p = run(8, MODEL + P222 + ["--train-iters", "6", "--save", ck, "--save-interval", "2", "--comm-timeout", "5"],
            fault="hang:rank=5:iter=3", timeout=90, env_extra={"PTDP_FLIGHT_RECORDER_DIR": flight})
    check(p.returncode != 0, f"hang: the job fails, got status {p.returncode}")
    check(p.seconds < 45, f"hang: the job ends within the timeout, took {p.seconds:.1f} s")
    check("PTDP_FAULT hang:rank=5:iter=3: rank 5 hangs at iteration 3" in p.stderr, "hang: the fault line")
    timeouts = [l for l in p.stderr.splitlines() if "timed out" in l]
    check(len(timeouts) >= 1, f"hang: some rank reports a timeout: {p.stderr[-2000:]}")
    # The ranks that wait on rank 5 directly name a group holding it (the others may time out
    # waiting on those, a cascade).
    with_5 = []
    for line in timeouts:
        m = re.search(r"group \[([0-9, ]+)\]", line)
        if m and 5 in [int(x) for x in m.group(1).split(",")]:
            with_5.append(line)
        check("rank 5:" not in line, f"hang: the hung rank reports nothing: {line}")
    # Which rank reports first is a race (a rank waiting on a rank that waits on rank 5 may time
    # out first, and the launcher then ends the job), so only the count is printed; naming the
    # rank that never arrived is the flight recorder's: the ranks that timed out wrote their
    # records, and ptdp-flight-analyze follows their waits to rank 5, which wrote none (it hangs
    # in compute, outside any communication).
    check(latest(ck) == 2, f"hang: the latest checkpoint is of iteration 2, got {latest(ck)}")
    records = sorted(f for f in os.listdir(flight) if f.startswith("flight-rank"))
    check(len(records) >= 1 and "flight-rank00005.json" not in records,
          f"hang: the ranks that timed out wrote flight records, rank 5 none: {records}")
    a = subprocess.run([ANALYZE, flight], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(a.returncode == 1 and "culprit: rank 5" in a.stdout,
          f"hang: ptdp-flight-analyze names rank 5 (status {a.returncode}):\n{a.stdout}{a.stderr}")
    print(f"hang: failed in {p.seconds:.1f} s; {len(with_5)} of {len(timeouts)} timeouts named a group of rank 5; "
          f"{len(records)} flight records; ptdp-flight-analyze: {a.stdout.splitlines()[1] if a.stdout.count(chr(10)) > 1 else a.stdout.strip()}")


def case_slow():
    runs = {}
    for name, fault in (("plain", None), ("slowed", "slow:rank=6:ms=150;slow:rank=1:ms=300:at=save")):
        ck = os.path.join(WORK, name)
        log = os.path.join(WORK, name + ".jsonl")
        p = run(8, MODEL + P222 + ["--train-iters", "6", "--save", ck, "--save-interval", "3", "--log-json", log],
                fault=fault, timeout=120)
        expect_ok(p, name)
        runs[name] = (steps(log), checkpoint_tensors(ck, 6), p.seconds, p.stderr)
    a, b = runs["plain"], runs["slowed"]
    # The delays happened (each slow spec prints its line the first time it sleeps); how much
    # longer the run took is printed, not asserted: on a loaded machine the noise is larger.
    for line in ("PTDP_FAULT slow:rank=6:ms=150: rank 6 sleeps 150 ms at iteration 1",
                 "PTDP_FAULT slow:rank=1:ms=300:at=save: rank 1 sleeps 300 ms at iteration 3 (save)"):
        check(line in b[3], f"slow: the fault line '{line}' in: {b[3][-2000:]}")
    check("PTDP_FAULT" not in a[3], "slow: no fault line in the plain run")
    check(sorted(a[0]) == sorted(b[0]) == list(range(1, 7)), "slow: both log iterations 1..6")
    for it in a[0]:
        for key in ("lm_loss", "grad_norm"):
            check(a[0][it][key] == b[0][it][key], f"slow: iteration {it} {key} {b[0][it][key]} vs {a[0][it][key]}")
    check(len(a[1]) > 0 and a[1].keys() == b[1].keys(), "slow: the same tensors")
    differ = [k for k in a[1] if a[1][k] != b[1][k]]
    check(not differ, f"slow: tensors differ: {differ[:5]}")
    print(f"slow: {len(a[1])} checkpoint tensors bitwise equal, 6 losses equal; {a[2]:.1f} s vs {b[2]:.1f} s")


def case_ioerror():
    ck = os.path.join(WORK, "io")
    p = run(8, MODEL + P222 + ["--train-iters", "6", "--save", ck, "--save-interval", "2"],
            fault="io-error:rank=0:iter=4", timeout=90)
    check(p.returncode == 1, f"ioerror: the run fails with status 1, got {p.returncode}")
    check("rank 0's file writes fail during the save at iteration 4" in p.stderr, "ioerror: the fault line")
    check("File too large" in p.stderr and "write failed" in p.stderr,
          f"ioerror: the writer's error is named: {p.stderr[-1500:]}")
    check(latest(ck) == 2, f"ioerror: the checkpoint of iteration 2 stays the latest, got {latest(ck)}")
    loads(8, P222, ck, 2, "ioerror")
    # Rank 2 (data-parallel rank 1) writes no file: the spec is refused by name.
    p = run(8, MODEL + P222 + ["--train-iters", "2", "--save", ck + "2"], fault="io-error:rank=2")
    check(p.returncode == 1 and "PTDP_FAULT spec 'io-error:rank=2': rank 2 writes no checkpoint file" in p.stderr,
          f"ioerror: a rank that writes nothing is refused: {p.returncode} {p.stderr[-800:]}")
    p = run(8, MODEL + P222 + ["--train-iters", "2"], fault="kill:rank=1:when=3")
    check(p.returncode == 1 and "PTDP_FAULT spec 'kill:rank=1:when=3': unknown key 'when'" in p.stderr,
          f"ioerror: a bad spec is refused by name: {p.returncode} {p.stderr[-800:]}")
    print("ioerror: the save failed with the writer's error; checkpoint 2 loads")


def case_nan():
    fault = f"nan:rank=2:iter=3:param={FC1}"
    p = run(8, MODEL + P222 + ["--train-iters", "6", "--check-for-nan-in-loss-and-grad"], fault=fault, timeout=90)
    check(p.returncode == 4, f"nan: exit status 4, got {p.returncode}: {p.stderr[-1500:]}")
    want = (f"--check-for-nan-in-loss-and-grad: iteration 3: NaN in the gradient of {FC1} on rank 2 "
            "(tensor rank 0, data rank 1, pipeline stage 0 of 2), before the data-parallel reduction")
    named = [l for l in p.stderr.splitlines() if want in l]
    check(len(named) == 8, f"nan: all 8 ranks report the finding of rank 2, got {len(named)}: {p.stderr[-2000:]}")
    check("iteration        3/" not in p.stdout and "iteration        2/" in p.stdout,
          "nan: the run stops before iteration 3's step")
    # A NaN loss on rank 6 (last stage).
    p = run(8, MODEL + P222 + ["--train-iters", "4", "--check-for-nan-in-loss-and-grad"], fault="nan:rank=6:iter=2")
    check(p.returncode == 4 and "iteration 2: NaN in the loss" in p.stderr and
          "on rank 6 (tensor rank 0, data rank 1, pipeline stage 1 of 2)" in p.stderr,
          f"nan: a NaN loss names rank 6 and stage 1: {p.returncode} {p.stderr[-1500:]}")
    # Without the flag the NaN gradient skips the step and the run goes on.
    log = os.path.join(WORK, "nan-off.jsonl")
    p = run(8, MODEL + P222 + ["--train-iters", "4", "--log-json", log], fault=fault)
    expect_ok(p, "nan without the check")
    s = steps(log)
    check(s[3]["skipped"] == 1 and s[4]["skipped"] == 0 and s[4]["skipped_iterations"] == 1,
          f"nan: without the flag iteration 3 is skipped: {s}")
    # A parameter the rank does not hold is refused by name.
    p = run(8, MODEL + P222 + ["--train-iters", "2"], fault=f"nan:rank=6:param={FC1}")
    check(p.returncode == 1 and f"rank 6 (pipeline stage 1) holds no parameter named {FC1}" in p.stderr,
          f"nan: an absent parameter is refused: {p.stderr[-800:]}")
    print("nan: rank 2's NaN gradient and rank 6's NaN loss named on every rank")


def case_skips():
    flags = MODEL + ["--pipeline-model-parallel-size", "2", "--fp16", "--train-iters", "10"]
    fault = f"nan:rank=0:param={FC1}"
    p = run(4, flags + ["--max-skipped-iterations", "4"], fault=fault)
    check(p.returncode == 3, f"skips: exit status 3, got {p.returncode}: {p.stderr[-1500:]}")
    check("stopping at iteration 4: 4 consecutive iterations were skipped for non-finite gradients "
          "(--max-skipped-iterations 4" in p.stderr, f"skips: the message: {p.stderr[-1500:]}")
    check("number of skipped iterations:   4" in p.stdout and "iteration        5/" not in p.stdout,
          "skips: 4 iterations logged, all skipped")
    p = run(4, flags + ["--max-skipped-iterations", "0"], fault=fault)
    check(p.returncode == 0 and "number of skipped iterations:  10" in p.stdout,
          f"skips: with no budget the run skips to the end: {p.returncode} {p.stderr[-800:]}")
    print("skips: stopped after 4 consecutive skips with status 3; no budget runs on")


def case_supervise():
    flags = MODEL + ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--train-iters", "8",
                     "--save-interval", "1"]
    ref = os.path.join(WORK, "never-killed")
    expect_ok(run(4, flags + ["--save", ref]), "the run never killed")
    sup = os.path.join(WORK, "killed")
    env = {"PTDP_RESTART_BACKOFF_S": "0"}
    kills = "kill:attempt=0:rank=1:iter=3,kill:attempt=1:rank=2:iter=5:at=after-backward,kill:attempt=2:rank=3:iter=7"
    p = run(0, flags + ["--save", sup, "--max-restarts", "3", "--launcher", " ".join(launcher(4))], fault=kills,
            timeout=240, env_extra=env)
    check(p.returncode == 0, f"supervise: the supervised run succeeds, status {p.returncode}: {p.stderr[-2500:]}")
    for k in (1, 2, 3):
        check(f"ptdp-train supervisor: attempt {k} failed:" in p.stderr, f"supervise: attempt {k} failed and is logged")
    check("ptdp-train supervisor: the job succeeded on attempt 4 (3 restarts)" in p.stderr,
          f"supervise: attempt 4 succeeded: {p.stderr[-1500:]}")
    check("restarting in 0.0 s from the checkpoint of iteration 2" in p.stderr and
          "from the checkpoint of iteration 4" in p.stderr and "from the checkpoint of iteration 6" in p.stderr,
          f"supervise: each restart resumes from the latest checkpoint: {p.stderr[-2500:]}")
    for rank, it in ((1, 3), (2, 5), (3, 7)):
        check(f"rank {rank} kills itself at iteration {it}" in p.stderr, f"supervise: rank {rank} killed at {it}")
    a, b = checkpoint_tensors(ref, 8), checkpoint_tensors(sup, 8)
    check(len(a) > 0 and a.keys() == b.keys(), "supervise: the final checkpoints hold the same tensors")
    differ = [k for k in a if a[k] != b.get(k)]
    check(not differ, f"supervise: tensors differ from the run never killed: {differ[:5]}")
    # Killed more often than allowed.
    gone = os.path.join(WORK, "given-up")
    p = run(0, flags + ["--save", gone, "--max-restarts", "1", "--launcher", " ".join(launcher(4))],
            fault="kill:attempt=0:rank=1:iter=2,kill:attempt=1:rank=0:iter=4", timeout=240, env_extra=env)
    check(p.returncode == 5, f"supervise: giving up exits with status 5, got {p.returncode}")
    check("ptdp-train supervisor: the job failed 2 times (--max-restarts 1): giving up" in p.stderr and
          f"the latest checkpoint in {gone} is of iteration 3" in p.stderr,
          f"supervise: the message says it gave up: {p.stderr[-1500:]}")
    print(f"supervise: 3 kills, {len(a)} tensors of the final checkpoint bitwise equal to the run never killed")


try:
    {"kill": case_kill, "hang": case_hang, "slow": case_slow, "ioerror": case_ioerror, "nan": case_nan,
     "skips": case_skips, "supervise": case_supervise}[CASE]()
finally:
    if not failures:
        shutil.rmtree(WORK, ignore_errors=True)
    else:
        print("work files kept in", WORK)
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
