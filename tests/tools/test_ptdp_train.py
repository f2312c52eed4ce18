#!/usr/bin/env python3
"""ptdp-train and ptdp-generate, end to end under mpiexec (ctest labels "tools;mpi").

    test_ptdp_train.py BIN_DIR CASE

CASE is one of:
  equivalence  the loss (and grad norm, learning rate, validation loss) of every iteration at
               (t,p,d) = (2,2,2) equals the serial (1,1,1) run of the same seed, to 1e-5
  resume       a run stopped at a checkpoint and resumed gives the uninterrupted run's loss
               trajectory bit for bit (distributed optimizer, d = 2, dropout on)
  reshard      a checkpoint saved at (2,2,1) loads at (1,1,2), (4,1,1) and (1,2,1) with v = 2;
               the next iteration's loss equals the uninterrupted run's to 1e-5
  corrupt      a flipped byte, a truncated or missing shard, a missing manifest, a bad
               metadata.json, a tracker naming a missing iteration, and a model that does not
               match are each refused on every rank with a message naming the file; a stale
               temporary directory of an interrupted save leaves the previous checkpoint loadable
  generate     ptdp-generate loads a (2,2,1) checkpoint on one process; greedy output is
               deterministic; bad flags give exit status 2
  errors       bad flags, a missing data file, a too-short text and a bad layout each give a
               clear message and a non-zero exit status
  bf16         --bf16 (bf16 weights and activations, fp32 masters and gradients) tracks the fp32
               run; (2,2,2) with the distributed optimizer matches the serial bf16 run to bf16
               round-off; a bf16 checkpoint (fp32 masters) resumes bit for bit
  fp16         --fp16 with dynamic loss scaling: overflowing iterations are skipped and the scale
               backs off (hysteresis 2) until steps succeed; a constant --loss-scale trains like fp32
  attention    --attention-backend fused (the CPU's flash-style kernel) gives the unfused run's
               loss, serial and at (2,2,2), with attention dropout on
  llama        a Llama-style model (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases,
               untied): (2,2,2) with the distributed optimizer equals serial; a (2,2,1)
               checkpoint continues the trajectory at four other layouts; models that differ are
               refused; bf16 tracks fp32; selective recomputation changes nothing; generation
               with the key/value cache draws the tokens of recomputing the window
  qwen2        a Qwen2-style model (qkv bias, q/k norms, tied): (2,2,2) equals serial, plain and
               interleaved with full recomputation
  masks        --eod-mask-loss --reset-position-ids --reset-attention-mask (--eod-token-id 10: every
               line of the text is a document): (2,2,2) with the distributed optimizer equals
               serial, validation included; the masks change the loss; the fused attention kernel
               gives the unfused run's loss; the flags without --eod-token-id are refused
  blend        ptdp-preprocess-data writes two data sets from JSON lines; --data-path 0.3 A 0.7 B
               (Megatron's blend) trains at (2,2,2) with the serial run's losses to 1e-5,
               validation included; per-split paths (--train-data-path W A W B
               --valid-data-path B) run and validate
  sp           --sequence-parallel at (2,2,2) with the distributed optimizer, (4,2,1) interleaved with
               selective recomputation and (4,1,2) with full recomputation gives the serial run's
               losses to 1e-5, validation included; a sequence t does not divide exits with status 2
  uneven       Megatron's uneven pipeline stages on a 6-layer model: --decoder-first-pipeline-num-layers
               and --decoder-last-pipeline-num-layers at (1,2,2) 1F1B, (1,2,2) interleaved with
               --num-virtual-stages-per-pipeline-rank 2, (2,4,1), (1,3,1) and (1,4,1) ZB-H1 (p need
               not divide the layers) give the serial run's losses to 1e-5; a checkpoint saved with uneven stages
               loads at even stages and at p = 1, one saved at even stages loads with uneven ones,
               each continuing the uninterrupted run; a split the layers do not allow exits with
               status 2 in Megatron's words
  mtp          multi-token prediction (--mtp-num-layers 2, RoPE, untied): "mtp_1 loss" and "mtp_2 loss"
               in the log line and the JSON lines (not in validation), (2,2,2) with the distributed
               optimizer gives the serial run's losses, MTP losses and grad norms to 1e-5, and a
               checkpoint saved at (2,2,1) resumes at (1,2,2) and (1,1,1) as the serial run continues;
               with MoE (first layer dense, the module's layer MoE), (2,2,2) e = 2 gives the serial
               run's losses, MTP loss, balancing loss and expert loads (the module's as layer 4)
  muon         --optimizer muon: (2,2,2) with the distributed optimizer gives the serial run's losses
               and grad norms to 1e-5; a checkpoint saved at (2,2,2) resumes there bit for bit and at
               (1,1,1) and (4,1,2) on the (2,2,2) trajectory (1e-5), each continued bit for bit after
               an interruption of its own; with --bf16 (fp32 masters and momentum) (2,2,2) with the
               overlapped collectives tracks the serial bf16 run (1e-2); an AdamW checkpoint is
               refused by a Muon run; --muon-tp-mode blockwise is serial at t = 1 and another update at
               t = 2; --qk-clip logs each layer's largest attention logit and clipped
               heads, the serial run's at (2,2,2)

Only the JSON lines of --log-json are compared (the loss as printed with 9 significant digits,
enough to round-trip a float).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
CASE = sys.argv[2]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
TRAIN = os.path.join(BIN, "ptdp-train")
GENERATE = os.path.join(BIN, "ptdp-generate")
WORK = tempfile.mkdtemp(prefix="ptdp-train-test-")
failures = []

# A tiny GPT on a small text (bytes), dropout on, 4 layers so that p = 2 with v = 2 works.
CORPUS = os.path.join(WORK, "corpus.txt")
with open(CORPUS, "w") as f:
    for i in range(400):
        f.write(f"Paragraph {i}: the quick brown fox jumps over the lazy dog {i % 7} times.\n")
        f.write("Pack my box with five dozen liquor jugs.\n\n")

MODEL = ["--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
         "--vocab-size", "256", "--make-vocab-size-divisible-by", "128", "--micro-batch-size", "2",
         "--global-batch-size", "8", "--lr", "3e-3", "--lr-warmup-iters", "2", "--lr-decay-style", "cosine",
         "--seed", "1234", "--text-file", CORPUS, "--tokenizer-type", "ByteLevel", "--log-interval", "1",
         "--split", "90,10,0", "--eval-interval", "3", "--eval-iters", "2", "--comm-timeout", "60"]


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(np, flags, expect_ok=True, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if env_extra:
        env.update(env_extra)
    cmd = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", str(np), TRAIN] + flags
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    if expect_ok and p.returncode != 0:
        print(" ".join(cmd))
        print(p.stdout)
        print(p.stderr)
        raise SystemExit(f"ptdp-train failed with status {p.returncode}")
    return p


def layout(t, p, v=1):
    flags = ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p)]
    if v > 1:
        flags += ["--num-layers-per-virtual-pipeline-stage", str(4 // (p * v))]
    return flags


def train(name, np, t, p, iters, extra=(), v=1):
    log = os.path.join(WORK, name + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    out = run(np, MODEL + layout(t, p, v) + ["--train-iters", str(iters), "--log-json", log] + list(extra))
    records = [json.loads(line) for line in open(log)]
    steps = {r["iteration"]: r for r in records if "iteration" in r}
    valid = {r["validation_iteration"]: r for r in records if "validation_iteration" in r}
    return steps, valid, out.stdout


def close(a, b, tol):
    return abs(a - b) <= tol * max(1.0, abs(b))


def case_equivalence():
    serial, serial_valid, stdout = train("serial", 1, 1, 1, 6)
    check(" iteration        6/       6 | consumed samples:           48 |" in stdout,
          "Megatron log line format:\n" + stdout)
    check(" validation loss at iteration 3 | lm loss value: " in stdout, "validation line:\n" + stdout)
    check(len(serial) == 6 and len(serial_valid) == 2, "6 iterations and 2 validations logged")
    first, last = serial[1]["lm_loss"], serial[6]["lm_loss"]
    check(last < first - 0.3, f"the loss falls: {first} -> {last}")
    trace = os.path.join(WORK, "trace.json")
    par, par_valid, _ = train("parallel", 8, 2, 2, 6, ["--use-distributed-optimizer", "--profile-trace", trace])
    events = json.load(open(trace))["traceEvents"]
    pids = {e.get("pid") for e in events if e.get("ph") == "X"}
    check(len(pids) == 8, f"--profile-trace: spans of all 8 ranks in one trace, got pids {sorted(pids)}")
    worst = 0.0
    for it in range(1, 7):
        a, b = par[it], serial[it]
        for key in ("lm_loss", "grad_norm"):
            check(close(a[key], b[key], 1e-5), f"iteration {it} {key}: (2,2,2) {a[key]} vs serial {b[key]}")
            worst = max(worst, abs(a[key] - b[key]) / max(1.0, abs(b[key])))
        check(a["learning_rate"] == b["learning_rate"], f"iteration {it} learning rate")
        check(a["consumed_samples"] == b["consumed_samples"] == 8 * it, f"iteration {it} consumed samples")
    for it in serial_valid:
        check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5), f"validation at {it}")
    print(f"equivalence: 6 iterations, worst relative difference {worst:.2e}; loss {first:.4f} -> {last:.4f}")


def case_resume():
    extra = ["--use-distributed-optimizer"]
    full, _, _ = train("full", 4, 2, 1, 8, extra)
    ckpt = os.path.join(WORK, "ckpt-resume")
    part, _, _ = train("first-half", 4, 2, 1, 8, extra + ["--save", ckpt, "--exit-interval", "4"])
    check(open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).read().strip() == "4", "tracker says 4")
    rest, _, stdout = train("second-half", 4, 2, 1, 8, extra + ["--load", ckpt])
    check("loaded checkpoint" in stdout, "the run says it loaded the checkpoint")
    check(sorted(rest) == [5, 6, 7, 8], f"the resumed run logs iterations 5..8, got {sorted(rest)}")
    for it in range(1, 5):
        check(part[it]["lm_loss"] == full[it]["lm_loss"], f"first half iteration {it}")
    for it in range(5, 9):
        for key in ("lm_loss", "grad_norm", "learning_rate", "consumed_samples"):
            check(rest[it][key] == full[it][key],
                  f"resumed iteration {it} {key}: {rest[it][key]!r} vs uninterrupted {full[it][key]!r}")
    print("resume: iterations 5..8 bit-identical to the uninterrupted run")


def case_reshard():
    full, _, _ = train("reshard-full", 4, 2, 2, 5)
    ckpt = os.path.join(WORK, "ckpt-reshard")
    train("reshard-save", 4, 2, 2, 5, ["--save", ckpt, "--exit-interval", "4"])
    for (np, t, p, v, extra) in [(2, 1, 1, 1, ["--use-distributed-optimizer"]), (4, 4, 1, 1, []),
                                 (2, 1, 2, 2, []), (8, 2, 2, 1, ["--use-distributed-optimizer"])]:
        d = np // (t * p)
        steps, _, _ = train(f"reshard-{t}{p}{d}{v}", np, t, p, 5, extra + ["--load", ckpt], v=v)
        a, b = steps[5]["lm_loss"], full[5]["lm_loss"]
        check(sorted(steps) == [5], f"({t},{p},{d}) v={v} resumes at iteration 5")
        check(close(a, b, 1e-5), f"({t},{p},{d}) v={v}: iteration 5 loss {a} vs uninterrupted (2,2,1) {b}")
        check(close(steps[5]["grad_norm"], full[5]["grad_norm"], 1e-5), f"({t},{p},{d}) v={v}: grad norm")
        print(f"reshard: (2,2,1) -> ({t},{p},{d}) v={v}: iteration 5 loss {a:.9g} vs {b:.9g}")


def refuse(ckpt, flags, needle, what, np=2):
    p = run(np, MODEL + ["--train-iters", "6", "--load", ckpt] + flags, expect_ok=False)
    lines = [l for l in p.stderr.splitlines() if "ptdp-train: rank" in l]
    ok = p.returncode != 0 and len(lines) == np and all(needle in l for l in lines)
    check(ok, f"{what}: expected every rank to refuse naming {needle!r}; status {p.returncode}, stderr:\n{p.stderr}")


def case_corrupt():
    good = os.path.join(WORK, "ckpt-good")
    train("corrupt-save", 2, 2, 1, 3, ["--save", good])
    shard = "model_tp01_pp00.safetensors"

    def fresh(name):
        path = os.path.join(WORK, name)
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(good, path)
        return path, os.path.join(path, "iter_0000003")

    path, d = fresh("ckpt-flip")
    with open(os.path.join(d, shard), "r+b") as f:
        f.seek(os.path.getsize(os.path.join(d, shard)) - 5)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))
    refuse(path, layout(2, 1), shard, "flipped byte")
    refuse(path, layout(1, 1), shard, "flipped byte, other layout", np=2)

    path, d = fresh("ckpt-trunc")
    with open(os.path.join(d, shard), "r+b") as f:
        f.truncate(100)
    refuse(path, layout(2, 1), shard, "truncated shard")

    path, d = fresh("ckpt-missing")
    os.remove(os.path.join(d, shard))
    refuse(path, layout(2, 1), shard, "missing shard")

    path, d = fresh("ckpt-nomanifest")
    os.remove(os.path.join(d, "manifest.sha256"))
    refuse(path, layout(2, 1), "manifest.sha256", "missing manifest")

    path, d = fresh("ckpt-metadata")
    with open(os.path.join(d, "metadata.json"), "a") as f:
        f.write("garbage")
    refuse(path, layout(2, 1), "metadata.json", "corrupted metadata")

    path, d = fresh("ckpt-tracker")
    with open(os.path.join(path, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("7\n")
    refuse(path, layout(2, 1), "iter_0000007", "tracker naming a missing iteration")

    # Metadata edited and the manifest re-signed: the hash matches, the meaning does not.
    def resign(d, edit):
        md_path = os.path.join(d, "metadata.json")
        md = json.load(open(md_path))
        edit(md)
        with open(md_path, "w") as f:
            json.dump(md, f, indent=1)
        digest = hashlib.sha256(open(md_path, "rb").read()).hexdigest()
        lines = open(os.path.join(d, "manifest.sha256")).read().splitlines()
        with open(os.path.join(d, "manifest.sha256"), "w") as f:
            for line in lines:
                f.write((digest + "  metadata.json" if line.endswith("  metadata.json") else line) + "\n")

    path, d = fresh("ckpt-meaning-iteration")
    resign(d, lambda md: md.update(iteration=2))
    refuse(path, layout(2, 1), "differs from its directory's iteration 3", "metadata iteration 2 in iter_0000003")
    path, d = fresh("ckpt-meaning-optimizer")
    resign(d, lambda md: md["optimizer"].update(kind="lion"))
    refuse(path, layout(2, 1), 'kind "lion" is not a known optimizer', "unknown optimizer kind")
    path, d = fresh("ckpt-meaning-samples")
    resign(d, lambda md: md.update(consumed_train_samples=-1))
    refuse(path, layout(1, 1), '"consumed_train_samples" = -1 is below 0', "negative consumed samples")

    # Resuming with flags that change the trajectory: refused on every rank naming each flag,
    # unless --override-resume-check.
    path, d = fresh("ckpt-trajectory")
    refuse(path, layout(2, 1) + ["--seed", "7", "--split", "80,20,0"], "--seed was 1234, now 7",
           "a resume with another seed")
    refuse(path, layout(2, 1) + ["--seed", "7", "--split", "80,20,0"], '--split was "90,10,0", now "80,20,0"',
           "a resume with another split")
    steps, _, stdout = train("trajectory-override", 2, 2, 1, 4, ["--load", path, "--seed", "7",
                                                                  "--override-resume-check"])
    check(sorted(steps) == [4] and "--override-resume-check" in stdout,
          "--override-resume-check resumes with a warning: " + stdout[-400:])

    path, d = fresh("ckpt-config")
    p = run(2, MODEL + layout(2, 1) + ["--train-iters", "6", "--load", path, "--hidden-size", "64"],
            expect_ok=False)
    lines = [l for l in p.stderr.splitlines() if "ptdp-train: rank" in l]
    check(p.returncode != 0 and len(lines) == 2 and all("hidden_size" in l and "metadata.json" in l for l in lines),
          "config mismatch refused on every rank naming hidden_size and metadata.json:\n" + p.stderr)

    # An interrupted save of iteration 4: a stale temporary directory; iteration 3 stays the latest,
    # and saving iteration 4 again replaces the stale directory.
    path, d = fresh("ckpt-interrupted")
    os.makedirs(os.path.join(path, "iter_0000004.tmp"))
    with open(os.path.join(path, "iter_0000004.tmp", shard), "wb") as f:
        f.write(b"partial")
    steps, _, _ = train("corrupt-resume", 2, 2, 1, 4, ["--load", path, "--save", path])
    check(sorted(steps) == [4], "after an interrupted save the previous checkpoint loads")
    check(open(os.path.join(path, "latest_checkpointed_iteration.txt")).read().strip() == "4",
          "the next save becomes the latest")
    check(not os.path.exists(os.path.join(path, "iter_0000004.tmp")), "the stale temporary directory is gone")
    check(os.path.exists(os.path.join(path, "iter_0000004", "manifest.sha256")), "iteration 4 saved")

    # The save directory's lock: while one run saves into a directory, a second run with the same
    # --save is refused on every rank naming the holder; once the holder is killed its lock is
    # stale and the next run takes it over with a warning.
    locked = os.path.join(WORK, "ckpt-locked")
    shutil.rmtree(locked, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    holder = subprocess.Popen([MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", "1", TRAIN] + MODEL +
                              ["--train-iters", "1000000", "--save", locked, "--eval-interval", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    lock_file = os.path.join(locked, "ptdp.lock")
    for _ in range(600):
        if os.path.exists(lock_file) and open(lock_file).read().strip():
            break
        time.sleep(0.1)
    holder_text = open(lock_file).read().strip() if os.path.exists(lock_file) else ""
    check(holder_text.startswith("host "), f"the running holder is named in ptdp.lock: {holder_text!r}")
    p = run(2, MODEL + layout(2, 1) + ["--train-iters", "4", "--save", locked], expect_ok=False)
    lines = [l for l in p.stderr.splitlines() if "ptdp-train: rank" in l]
    check(p.returncode != 0 and len(lines) == 2 and all("in use by another run" in l and holder_text in l for l in lines),
          "a second run on a locked --save is refused on every rank naming the holder:\n" + p.stderr)
    holder.terminate()  # mpiexec passes SIGTERM on to its ptdp-train
    holder.wait(timeout=60)
    time.sleep(1)  # mpiexec's children go with it
    _, _, stdout = train("lock-takeover", 2, 2, 1, 4, ["--save", locked, "--eval-interval", "0"])
    check("took over the stale lock" in stdout or open(lock_file).read().strip() == "",
          "a lock whose holder died is taken over: " + stdout[-400:])
    check(open(lock_file).read().strip() == "", "a run that ends releases and empties its lock")
    print("corrupt: 13 cases refused on every rank; interrupted save recovered; the save lock refuses a second run")


def case_generate():
    ckpt = os.path.join(WORK, "ckpt-generate")
    train("generate-save", 4, 2, 2, 6, ["--save", ckpt])
    cmd = [GENERATE, "--load", ckpt, "--prompt", "Paragraph 1", "--max-new-tokens", "24", "--top-k", "1"]
    a = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    b = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    check(a.returncode == 0, "ptdp-generate runs:\n" + a.stderr)
    check(a.stdout == b.stdout, "greedy generation is deterministic")
    check(a.stdout.startswith("Paragraph 1") and len(a.stdout.rstrip("\n")) == len("Paragraph 1") + 24,
          f"prompt + 24 bytes: {a.stdout!r}")
    s = subprocess.run(cmd[:-2] + ["--top-k", "5", "--temperature", "0.8", "--seed", "7"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    check(s.returncode == 0, "sampling with top-k and temperature runs:\n" + s.stderr)
    for bad, needle in [(["--load", ckpt], "--prompt"), (["--prompt", "x"], "--load"),
                        (["--load", ckpt, "--prompt", "x", "--top-k", "-1"], "--top-k"),
                        (["--load", ckpt, "--prompt", "x", "--temperature", "0"], "--temperature"),
                        (["--load", ckpt, "--prompt", "x", "--bogus", "1"], "--bogus")]:
        p = subprocess.run([GENERATE] + bad, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        check(p.returncode == 2 and needle in p.stderr, f"bad flags {bad}: status {p.returncode}, {p.stderr!r}")
    p = subprocess.run([GENERATE, "--load", os.path.join(WORK, "nothing"), "--prompt", "x"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 1 and "latest_checkpointed_iteration.txt" in p.stderr, "missing checkpoint: " + p.stderr)
    print("generate:", repr(a.stdout.strip()))


def case_errors():
    cases = [
        (["--hidden-size", "abc"], "--hidden-size", 2),
        (["--bogus-flag"], "--bogus-flag", 2),
        (["--data-path", os.path.join(WORK, "missing")], "missing", 1),
        (["--tensor-model-parallel-size", "3"], "tensor", 1),
    ]
    base = [a for a in MODEL if a not in ("--text-file", CORPUS)]
    for flags, needle, status in cases:
        p = run(2, base + ["--train-iters", "3"] + flags, expect_ok=False)
        check(p.returncode != 0 and needle in p.stderr,
              f"{flags}: expected failure naming {needle!r}; status {p.returncode}, stderr:\n{p.stderr}")
    short = os.path.join(WORK, "short.txt")
    with open(short, "w") as f:
        f.write("tiny\n")
    p = run(1, base + ["--train-iters", "3", "--text-file", short], expect_ok=False)
    check(p.returncode != 0 and "tokens" in p.stderr, "too short a text: " + p.stderr)
    p = subprocess.run([TRAIN, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 0 and "--num-layers" in p.stdout and "--pipeline-schedule" in p.stdout, "--help")
    print("errors: every case refused with a message")


def compare(a, b, iters, tol, what, keys=("lm_loss", "grad_norm")):
    """Worst relative difference of `keys` over iterations 1..iters; a check per value."""
    worst = 0.0
    for it in range(1, iters + 1):
        for key in keys:
            x, y = a[it][key], b[it][key]
            check(close(x, y, tol), f"{what}: iteration {it} {key} {x} vs {y} (tolerance {tol})")
            worst = max(worst, abs(x - y) / max(1.0, abs(y)))
    return worst


def case_bf16():
    fp32, _, _ = train("fp32", 1, 1, 1, 6)
    bf16, bf16_valid, _ = train("bf16-serial", 1, 1, 1, 6, ["--bf16"])
    # bf16 keeps 8 bits of mantissa; the loss is an fp32 mean over the tokens: within 0.5%.
    w1 = compare(bf16, fp32, 6, 5e-3, "bf16 vs fp32", keys=("lm_loss",))
    check(bf16[6]["lm_loss"] < bf16[1]["lm_loss"] - 0.3, f"bf16 loss falls: {bf16[1]['lm_loss']} -> {bf16[6]['lm_loss']}")
    check(all(not bf16[it]["skipped"] for it in bf16), "bf16 without loss scaling skips nothing")
    # Tensor-parallel partial sums are rounded to bf16 before the all-reduce, so (2,2,2) differs
    # from serial by bf16 round-off, not by fp32 round-off.
    par, par_valid, _ = train("bf16-parallel", 8, 2, 2, 6, ["--bf16", "--use-distributed-optimizer"])
    w2 = compare(par, bf16, 6, 1e-2, "bf16 (2,2,2) vs bf16 serial")
    for it in bf16_valid:
        check(close(par_valid[it]["lm_loss"], bf16_valid[it]["lm_loss"], 1e-2), f"bf16 validation at {it}")
    # The distributed optimizer shards the fp32 masters too; Megatron's overlap flags change when
    # the data-parallel collectives run, not a bit of the results (validation included).
    ovl, ovl_valid, _ = train("bf16-parallel-overlap", 8, 2, 2, 6, ["--bf16", "--use-distributed-optimizer",
                                                                  "--overlap-grad-reduce", "--overlap-param-gather"])
    for it in range(1, 7):
        for key in ("lm_loss", "grad_norm"):
            check(ovl[it][key] == par[it][key], f"bf16 (2,2,2) overlap on vs off: iteration {it} {key} "
                  f"{ovl[it][key]!r} vs {par[it][key]!r}")
    for it in par_valid:
        check(ovl_valid[it]["lm_loss"] == par_valid[it]["lm_loss"], f"bf16 overlap on vs off: validation at {it}")
    # Checkpoints hold the fp32 masters: a resumed bf16 run is the uninterrupted one, bit for bit.
    ckpt = os.path.join(WORK, "ckpt-bf16")
    train("bf16-first", 2, 2, 1, 6, ["--bf16", "--save", ckpt, "--exit-interval", "3"])
    full, _, _ = train("bf16-full", 2, 2, 1, 6, ["--bf16"])
    rest, _, _ = train("bf16-rest", 2, 2, 1, 6, ["--bf16", "--load", ckpt])
    for it in range(4, 7):
        check(rest[it]["lm_loss"] == full[it]["lm_loss"], f"bf16 resume iteration {it}: {rest[it]['lm_loss']!r} vs "
              f"{full[it]['lm_loss']!r}")
    print(f"bf16: vs fp32 worst {w1:.2e}; (2,2,2) vs serial worst {w2:.2e}; overlap on/off and resume bit-identical; "
          f"loss {bf16[1]['lm_loss']:.4f} -> {bf16[6]['lm_loss']:.4f} (fp32 {fp32[6]['lm_loss']:.4f})")


def case_fp16():
    iters = 16
    fp32, _, _ = train("fp16-ref", 1, 1, 1, iters)
    # 2^24 overflows the f16 logit gradients (2^24 / 32 tokens > 65504): skip, back off.
    dyn, _, stdout = train("fp16-dynamic", 2, 2, 1, iters, ["--fp16", "--initial-loss-scale", str(2 ** 24)])
    skipped = [it for it in range(1, iters + 1) if dyn[it]["skipped"]]
    scales = [dyn[it]["loss_scale"] for it in range(1, iters + 1)]
    check(dyn[1]["skipped"] and len(skipped) >= 2, f"the first iterations overflow and are skipped: {skipped}")
    check(scales[-1] < 2 ** 24, f"the loss scale backed off: {scales}")
    check(all(b <= a for a, b in zip(scales, scales[1:])), f"the scale never grows within the window: {scales}")
    # hysteresis 2: the first overflow keeps the scale, the second halves it
    check(scales[:3] == [2 ** 24, 2 ** 24, 2 ** 23], f"hysteresis 2: {scales[:3]}")
    check(not dyn[iters]["skipped"] and not dyn[iters - 1]["skipped"], f"steps succeed at the end: {skipped}")
    check(dyn[iters]["skipped_iterations"] == len(skipped), "skipped_iterations counts the skipped steps")
    check("number of skipped iterations:" in stdout, "the log line reports skipped iterations")
    const, _, _ = train("fp16-constant", 1, 1, 1, iters, ["--fp16", "--loss-scale", "1024"])
    check(all(not const[it]["skipped"] for it in const), "a constant scale of 1024 skips nothing")
    w = compare(const, fp32, iters, 5e-3, "fp16 (scale 1024) vs fp32", keys=("lm_loss",))
    print(f"fp16: dynamic scale {scales[0]:.0f} -> {scales[-1]:.0f}, skipped iterations {skipped}; "
          f"constant scale vs fp32 worst {w:.2e}")


def case_attention():
    unfused, _, _ = train("attn-unfused", 1, 1, 1, 4, ["--attention-backend", "unfused"])
    fused, _, _ = train("attn-fused", 1, 1, 1, 4, ["--attention-backend", "fused"])
    w1 = compare(fused, unfused, 4, 1e-5, "fused vs unfused attention")
    par, _, _ = train("attn-fused-parallel", 8, 2, 2, 4, ["--attention-backend", "fused", "--use-distributed-optimizer"])
    w2 = compare(par, unfused, 4, 1e-5, "fused (2,2,2) vs unfused serial")
    sel, _, _ = train("attn-selective", 2, 2, 1, 4, ["--attention-backend", "unfused", "--recompute-granularity",
                                                      "selective"])
    w3 = compare(sel, unfused, 4, 1e-5, "selective recomputation (2,1,1) vs serial")
    print(f"attention: fused vs unfused worst {w1:.2e}; fused (2,2,2) vs unfused serial {w2:.2e}; "
          f"selective (2,1,1) {w3:.2e}")


# Llama-style flags (Megatron's names): RMSNorm, SwiGLU, RoPE, grouped-query attention (4 query
# heads in 2 groups, so t = 2 holds one group each), no biases, an untied output layer. Qwen2
# keeps the qkv bias and the tied head, and normalises each query and key head.
LLAMA = ["--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "64", "--position-embedding-type", "rope",
         "--rotary-base", "10000", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
         "--untie-embeddings-and-output-weights"]
QWEN2 = ["--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "64", "--position-embedding-type", "rope",
         "--rotary-base", "1000000", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
         "--add-qkv-bias", "--qk-layernorm", "--norm-epsilon", "1e-6"]


def case_llama():
    serial, serial_valid, _ = train("llama-serial", 1, 1, 1, 6, LLAMA)
    check(serial[6]["lm_loss"] < serial[1]["lm_loss"] - 0.3,
          f"the Llama loss falls: {serial[1]['lm_loss']} -> {serial[6]['lm_loss']}")
    par, par_valid, _ = train("llama-parallel", 8, 2, 2, 6, LLAMA + ["--use-distributed-optimizer"])
    w1 = compare(par, serial, 6, 1e-5, "llama (2,2,2) distributed optimizer vs serial")
    for it in serial_valid:
        check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5), f"llama validation at {it}")
    # A checkpoint saved at (2,2,1) continues the same trajectory at other layouts.
    full, _, _ = train("llama-full", 4, 2, 2, 5, LLAMA)
    ckpt = os.path.join(WORK, "ckpt-llama")
    train("llama-save", 4, 2, 2, 5, LLAMA + ["--save", ckpt, "--exit-interval", "4"])
    worst = 0.0
    for (np, t, p, v, extra) in [(2, 1, 1, 1, ["--use-distributed-optimizer"]), (2, 2, 1, 1, []),
                                 (2, 1, 2, 2, []), (8, 2, 2, 1, ["--use-distributed-optimizer"])]:
        d = np // (t * p)
        steps, _, _ = train(f"llama-reshard-{t}{p}{d}{v}", np, t, p, 5, LLAMA + extra + ["--load", ckpt], v=v)
        check(sorted(steps) == [5], f"llama ({t},{p},{d}) v={v} resumes at iteration 5")
        a, b = steps[5]["lm_loss"], full[5]["lm_loss"]
        check(close(a, b, 1e-5), f"llama ({t},{p},{d}) v={v}: iteration 5 loss {a} vs uninterrupted (2,2,1) {b}")
        check(close(steps[5]["grad_norm"], full[5]["grad_norm"], 1e-5), f"llama ({t},{p},{d}) v={v}: grad norm")
        worst = max(worst, abs(a - b) / abs(b))
    # A model that differs in an architecture flag is refused, naming it.
    p = run(2, MODEL + layout(1, 1) + LLAMA[:-1] + ["--train-iters", "5", "--load", ckpt], expect_ok=False)
    check(p.returncode != 0 and "untie_embeddings_and_output_weights" in p.stdout + p.stderr,
          "a tied model refuses the untied Llama checkpoint: " + (p.stdout + p.stderr)[-400:])
    p = run(2, MODEL + layout(1, 1) + [f for f in LLAMA if f != "--swiglu"] + ["--train-iters", "5", "--load", ckpt],
            expect_ok=False)
    check(p.returncode != 0 and "swiglu" in p.stdout + p.stderr, "a GeLU model refuses the SwiGLU checkpoint")
    # bf16 tracks fp32 and trains.
    bf16, _, _ = train("llama-bf16", 1, 1, 1, 6, LLAMA + ["--bf16"])
    w2 = compare(bf16, serial, 6, 5e-3, "llama bf16 vs fp32", keys=("lm_loss",))
    bpar, _, _ = train("llama-bf16-parallel", 8, 2, 2, 6, LLAMA + ["--bf16", "--use-distributed-optimizer"])
    w3 = compare(bpar, bf16, 6, 1e-2, "llama bf16 (2,2,2) vs bf16 serial")
    # Selective and full recomputation change nothing.
    sel, _, _ = train("llama-selective", 2, 2, 1, 4, LLAMA + ["--recompute-granularity", "selective"])
    w4 = compare(sel, serial, 4, 1e-5, "llama selective recomputation (2,1,1) vs serial")
    # Generation with the key/value cache draws the tokens of recomputing the window.
    cmd = [GENERATE, "--load", ckpt, "--prompt", "Paragraph 1", "--max-new-tokens", "24", "--top-k", "3", "--seed", "5"]
    a = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    b = subprocess.run(cmd + ["--no-kv-cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    check(a.returncode == 0 and b.returncode == 0, "ptdp-generate runs on the Llama checkpoint:\n" + a.stderr + b.stderr)
    check(a.stdout == b.stdout and len(a.stdout.rstrip("\n")) == len("Paragraph 1") + 24,
          f"the same tokens with and without the cache: {a.stdout!r} vs {b.stdout!r}")
    print(f"llama: (2,2,2) vs serial worst {w1:.2e}; reshard worst {worst:.2e}; bf16 vs fp32 {w2:.2e}; "
          f"bf16 (2,2,2) vs serial {w3:.2e}; selective {w4:.2e}; loss {serial[1]['lm_loss']:.4f} -> "
          f"{serial[6]['lm_loss']:.4f}; generated {a.stdout.strip()!r}")


def case_qwen2():
    serial, _, _ = train("qwen2-serial", 1, 1, 1, 6, QWEN2)
    check(serial[6]["lm_loss"] < serial[1]["lm_loss"] - 0.3,
          f"the Qwen2 loss falls: {serial[1]['lm_loss']} -> {serial[6]['lm_loss']}")
    par, _, _ = train("qwen2-parallel", 8, 2, 2, 6, QWEN2 + ["--use-distributed-optimizer"])
    w1 = compare(par, serial, 6, 1e-5, "qwen2 (2,2,2) distributed optimizer vs serial")
    inter, _, _ = train("qwen2-interleaved", 8, 2, 2, 6, QWEN2 + ["--recompute-granularity", "full"], v=2)
    w2 = compare(inter, serial, 6, 1e-5, "qwen2 (2,2,2) v=2 full recomputation vs serial")
    print(f"qwen2: (2,2,2) vs serial worst {w1:.2e}; interleaved + recompute {w2:.2e}")


def case_masks():
    masks = ["--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask", "--eod-token-id", "10"]
    plain, _, _ = train("masks-off", 1, 1, 1, 6)
    serial, serial_valid, _ = train("masks-serial", 1, 1, 1, 6, masks)
    check(serial[6]["lm_loss"] < serial[1]["lm_loss"] - 0.3,
          f"the masked loss falls: {serial[1]['lm_loss']} -> {serial[6]['lm_loss']}")
    check(all(serial[it]["lm_loss"] != plain[it]["lm_loss"] for it in range(1, 7)), "the masks change the loss")
    par, par_valid, _ = train("masks-parallel", 8, 2, 2, 6, masks + ["--use-distributed-optimizer"])
    w1 = compare(par, serial, 6, 1e-5, "masks (2,2,2) distributed optimizer vs serial")
    for it in serial_valid:
        check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5), f"masks validation at {it}")
    fused, _, _ = train("masks-fused", 8, 2, 2, 4, masks + ["--attention-backend", "fused"], v=2)
    w2 = compare(fused, serial, 4, 1e-5, "masks, fused attention (2,2,2) v=2 vs unfused serial")
    base = MODEL + layout(1, 1) + ["--train-iters", "3"]
    for flag in ("--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask"):
        p = run(1, base + [flag], expect_ok=False)
        check(p.returncode == 2 and flag in p.stderr and "--eod-token-id" in p.stderr,
              f"{flag} without --eod-token-id: status {p.returncode}, stderr:\n{p.stderr}")
    p = run(1, base + masks[:-1] + ["300"], expect_ok=False)
    check(p.returncode == 2 and "--eod-token-id 300" in p.stderr, "--eod-token-id beyond the vocabulary: " + p.stderr)
    print(f"masks: (2,2,2) vs serial worst {w1:.2e}; fused (2,2,2) v=2 vs unfused serial {w2:.2e}; loss "
          f"{serial[1]['lm_loss']:.4f} -> {serial[6]['lm_loss']:.4f} (without masks {plain[6]['lm_loss']:.4f})")


def case_blend():
    # Two corpora as JSON lines (the paragraphs of the text, alternately), preprocessed.
    paragraphs = [p for p in open(CORPUS).read().split("\n\n") if p.strip()]
    prefixes = []
    for name, part in (("blend-a", paragraphs[0::2]), ("blend-b", paragraphs[1::2])):
        path = os.path.join(WORK, name + ".jsonl")
        with open(path, "w") as f:
            for text in part:
                f.write(json.dumps({"text": text + "\n\n"}) + "\n")
        out = subprocess.run([os.path.join(BIN, "ptdp-preprocess-data"), "--input", path, "--output-prefix",
                              os.path.join(WORK, name), "--tokenizer-type", "ByteLevel", "--workers", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        check(out.returncode == 0, f"ptdp-preprocess-data {name}: {out.stderr}")
        check(f"{len(part)} documents" in out.stdout, f"ptdp-preprocess-data counts {len(part)}: {out.stdout}")
        prefixes.append(os.path.join(WORK, name + "_text_document"))
    base = []
    skip = False
    for flag in MODEL:  # the model and schedule of the other cases, on the blend instead of the text
        if skip:
            skip = False
            continue
        if flag == "--text-file":
            skip = True
            continue
        base.append(flag)
    blend = ["--data-path", "0.3", prefixes[0], "0.7", prefixes[1]]

    def run_blend(name, np, t, p, extra):
        log = os.path.join(WORK, name + ".jsonl")
        run(np, base + layout(t, p) + ["--train-iters", "6", "--log-json", log] + extra)
        records = [json.loads(line) for line in open(log)]
        return ({r["iteration"]: r for r in records if "iteration" in r},
                {r["validation_iteration"]: r for r in records if "validation_iteration" in r})

    serial, serial_valid = run_blend("blend-serial", 1, 1, 1, blend)
    check(serial[6]["lm_loss"] < serial[1]["lm_loss"] - 0.3,
          f"the loss falls on the blend: {serial[1]['lm_loss']} -> {serial[6]['lm_loss']}")
    check(len(serial_valid) == 2, "two validations on the blend's validation split")
    par, par_valid = run_blend("blend-parallel", 8, 2, 2, blend + ["--use-distributed-optimizer"])
    worst = compare(par, serial, 6, 1e-5, "blend (2,2,2) vs serial")
    for it in serial_valid:
        check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5), f"blend validation at {it}")
    text, _ = run_blend("blend-text-a", 1, 1, 1, ["--data-path", prefixes[0]])
    check(text[1]["lm_loss"] != serial[1]["lm_loss"], "the blend's batches differ from data set A's alone")
    split = ["--train-data-path", "0.3", prefixes[0], "0.7", prefixes[1], "--valid-data-path", prefixes[1]]
    ps, ps_valid = run_blend("blend-per-split", 4, 2, 1, split)
    check(len(ps) == 6 and len(ps_valid) == 2, "per-split paths: 6 iterations and 2 validations")
    bad = run(1, base + ["--train-iters", "1"] + blend + ["--train-data-path", prefixes[0]], expect_ok=False)
    check(bad.returncode == 2 and "exclusive" in bad.stderr, "--data-path with --train-data-path: " + bad.stderr)
    print(f"blend: (2,2,2) vs serial worst {worst:.2e}; loss {serial[1]['lm_loss']:.4f} -> {serial[6]['lm_loss']:.4f}")


def case_uneven():
    model = [f if f != "4" or MODEL[i - 1] != "--num-layers" else "6" for i, f in enumerate(MODEL)]

    def run_uneven(name, np, t, p, extra):
        log = os.path.join(WORK, name + ".jsonl")
        if os.path.exists(log):
            os.remove(log)
        flags = model + ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p),
                         "--train-iters", "6", "--log-json", log] + extra
        run(np, flags)
        records = [json.loads(line) for line in open(log)]
        return ({r["iteration"]: r for r in records if "iteration" in r},
                {r["validation_iteration"]: r for r in records if "validation_iteration" in r})

    serial, serial_valid = run_uneven("uneven-serial", 1, 1, 1, [])
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    worst = 0.0
    for k, (name, np, t, p, extra) in enumerate([
            ("(1,2,2) 1F1B, stages 4+2", 4, 1, 2, [first, "4", "--use-distributed-optimizer"]),
            ("(1,2,2) interleaved v=2, stages 2+4 (chunks 1,2,1,2)", 4, 1, 2,
             ["--num-virtual-stages-per-pipeline-rank", "2", first, "2", last, "4"]),
            ("(2,4,1) 1F1B, stages 1+2+2+1", 8, 2, 4, [first, "1", last, "1"]),
            ("(1,3,1) 1F1B, stages 2+2+2 by --decoder-last-pipeline-num-layers 2", 3, 1, 3, [last, "2"]),
            ("(1,4,1) ZB-H1, stages 1+1+1+3", 4, 1, 4, [last, "3", "--pipeline-schedule", "zb-h1"]),
            ("(1,2,2) --pipeline-model-parallel-layout Et|tt|tt|tL (v = 2 from it)", 4, 1, 2,
             ["--pipeline-model-parallel-layout", "Et|tt|tt|tL"]),
            ("(1,3,1) --pipeline-model-parallel-layout E|t*6|L (embedding and loss alone)", 3, 1, 3,
             ["--pipeline-model-parallel-layout", "E|t*6|L"])]):
        par, par_valid = run_uneven(f"uneven-{k}", np, t, p, extra)
        worst = max(worst, compare(par, serial, 6, 1e-5, f"{name} vs serial"))
        for it in serial_valid:
            check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5), f"{name}: validation at {it}")
    # Checkpoints name layers globally: uneven -> even and p = 1, even -> uneven.
    ckpt_uneven = os.path.join(WORK, "ckpt-uneven")
    run_uneven("uneven-save", 4, 1, 2, ["--num-virtual-stages-per-pipeline-rank", "2", first, "2", last, "4",
                                        "--save", ckpt_uneven, "--exit-interval", "4"])
    meta = json.load(open(os.path.join(ckpt_uneven, "iter_0000004", "metadata.json")))
    check(meta["layout"].get("decoder_first_pipeline_num_layers") == 2 and
          meta["layout"].get("decoder_last_pipeline_num_layers") == 4, f"metadata layout: {meta['layout']}")
    ckpt_layout = os.path.join(WORK, "ckpt-layout")
    run_uneven("layout-save", 3, 1, 3, ["--pipeline-model-parallel-layout", "E|t*6|L", "--save", ckpt_layout,
                                        "--exit-interval", "4"])
    meta = json.load(open(os.path.join(ckpt_layout, "iter_0000004", "metadata.json")))
    check(meta["layout"].get("pipeline_model_parallel_layout") == "E|t*6|L", f"metadata layout: {meta['layout']}")
    ckpt_even = os.path.join(WORK, "ckpt-even")
    run_uneven("even-save", 2, 1, 2, ["--save", ckpt_even, "--exit-interval", "4"])
    for k, (what, ckpt, np, t, p, extra) in enumerate([
            ("uneven (1,2,2) v=2 -> even (1,2,1)", ckpt_uneven, 2, 1, 2, []),
            ("uneven (1,2,2) v=2 -> (2,1,1)", ckpt_uneven, 2, 2, 1, []),
            ("even (1,2,1) -> uneven (1,2,1) stages 5+1", ckpt_even, 2, 1, 2, [first, "5"]),
            ("even (1,2,1) -> uneven (1,3,1) stages 1+1+4", ckpt_even, 3, 1, 3, [last, "4"]),
            ("layout E|t*6|L (1,3,1) -> (1,2,1) layout Ettttt|tL", ckpt_layout, 2, 1, 2,
             ["--pipeline-model-parallel-layout", "Ettttt|tL"])]):
        steps, _ = run_uneven(f"uneven-load-{k}", np, t, p, extra + ["--load", ckpt])
        check(sorted(steps) == [5, 6], f"{what}: resumes at iteration 5, got {sorted(steps)}")
        for it in (5, 6):
            for key in ("lm_loss", "grad_norm"):
                check(close(steps[it][key], serial[it][key], 1e-5),
                      f"{what}: iteration {it} {key} {steps[it][key]} vs uninterrupted serial {serial[it][key]}")
                worst = max(worst, abs(steps[it][key] - serial[it][key]) / max(1.0, abs(serial[it][key])))
        print(f"uneven: {what}: iteration 6 loss {steps[6]['lm_loss']:.9g} vs {serial[6]['lm_loss']:.9g}")
    bad = run(4, model + ["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                          first, "3", "--train-iters", "1"], expect_ok=False)
    check(bad.returncode == 2 and "number of layers at first stage: 3 must be divisible by virtual pipeline parallel "
          "degree 2" in bad.stderr, f"a bad split: status {bad.returncode}, stderr {bad.stderr}")
    print(f"uneven: 7 layouts and 5 checkpoint loads vs serial, worst relative difference {worst:.2e}")


def case_sp():
    def run_sp(name, np, t, p, extra):
        log = os.path.join(WORK, name + ".jsonl")
        if os.path.exists(log):
            os.remove(log)
        run(np, MODEL + ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p),
                         "--train-iters", "6", "--log-json", log] + extra)
        records = [json.loads(line) for line in open(log)]
        return ({r["iteration"]: r for r in records if "iteration" in r},
                {r["validation_iteration"]: r for r in records if "validation_iteration" in r})

    serial, serial_valid = run_sp("sp-serial", 1, 1, 1, [])
    worst = 0.0
    for k, (name, np, t, p, extra) in enumerate([
            ("(2,2,2) with the distributed optimizer", 8, 2, 2, ["--use-distributed-optimizer"]),
            ("(4,2,1) interleaved v=2, selective recomputation", 8, 4, 2,
             ["--num-virtual-stages-per-pipeline-rank", "2", "--recompute-granularity", "selective"]),
            ("(4,1,2) full recomputation", 8, 4, 1, ["--recompute-granularity", "full"])]):
        par, par_valid = run_sp(f"sp-{k}", np, t, p, extra + ["--sequence-parallel"])
        worst = max(worst, compare(par, serial, 6, 1e-5, f"--sequence-parallel {name} vs serial"))
        for it in serial_valid:
            check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5),
                  f"--sequence-parallel {name}: validation at {it}")
    bad = run(4, MODEL + ["--tensor-model-parallel-size", "4", "--seq-length", "18", "--sequence-parallel",
                          "--train-iters", "1"], expect_ok=False)
    check(bad.returncode == 2 and "--seq-length 18 is not divisible by --tensor-model-parallel-size 4" in bad.stderr,
          f"s = 18 over t = 4: status {bad.returncode}, stderr {bad.stderr}")
    print(f"sp: 3 layouts with --sequence-parallel vs serial, worst relative difference {worst:.2e}")


def case_vshape():
    # ZB-V and DualPipeV (V placement: rank r holds chunks r and 2p-1-r), interleaved zero bubble:
    # training and validation equal the serial run; a ZB-V checkpoint resumes under 1F1B and
    # interleaved 1F1B, and a 1F1B one under DualPipeV.
    serial, serial_valid, _ = train("vshape-serial", 1, 1, 1, 6)
    worst = 0.0
    for k, (name, np, t, p, extra) in enumerate([
            ("(1,2,1) ZB-V", 2, 1, 2, ["--pipeline-schedule", "zb-v"]),
            ("(2,2,1) DualPipeV, distributed optimizer", 4, 2, 2,
             ["--pipeline-schedule", "dualpipev", "--use-distributed-optimizer"]),
            ("(1,2,2) ZB-V, d = 2", 4, 1, 2, ["--pipeline-schedule", "zb-v"]),
            ("(1,2,1) interleaved zero bubble v=2", 2, 1, 2,
             ["--pipeline-schedule", "interleaved-zb", "--num-virtual-stages-per-pipeline-rank", "2"])]):
        par, par_valid, _ = train(f"vshape-{k}", np, t, p, 6, extra)
        worst = max(worst, compare(par, serial, 6, 1e-5, f"{name} vs serial"))
        for it in serial_valid:
            check(close(par_valid[it]["lm_loss"], serial_valid[it]["lm_loss"], 1e-5), f"{name}: validation at {it}")
    ckpt = os.path.join(WORK, "ckpt-zbv")
    train("vshape-save", 2, 1, 2, 6, ["--pipeline-schedule", "zb-v", "--save", ckpt, "--exit-interval", "4"])
    meta = json.load(open(os.path.join(ckpt, "iter_0000004", "metadata.json")))
    check(meta["layout"].get("pipeline_chunk_placement") == "V" and
          meta["layout"]["virtual_pipeline_model_parallel_size"] == 2, f"metadata layout: {meta['layout']}")
    ckpt_1f1b = os.path.join(WORK, "ckpt-vshape-1f1b")
    train("vshape-save-1f1b", 2, 1, 2, 6, ["--save", ckpt_1f1b, "--exit-interval", "4"])
    for k, (what, ck, np, t, p, extra) in enumerate([
            ("ZB-V (1,2,1) -> 1F1B (1,2,1)", ckpt, 2, 1, 2, []),
            ("ZB-V (1,2,1) -> interleaved (1,2,1) v=2", ckpt, 2, 1, 2,
             ["--num-virtual-stages-per-pipeline-rank", "2"]),
            ("ZB-V (1,2,1) -> (1,1,1)", ckpt, 1, 1, 1, []),
            ("1F1B (1,2,1) -> DualPipeV (1,2,1)", ckpt_1f1b, 2, 1, 2, ["--pipeline-schedule", "dualpipev"])]):
        steps, _, _ = train(f"vshape-load-{k}", np, t, p, 6, extra + ["--load", ck])
        check(sorted(steps) == [5, 6], f"{what}: resumes at iteration 5, got {sorted(steps)}")
        for it in (5, 6):
            for key in ("lm_loss", "grad_norm"):
                check(close(steps[it][key], serial[it][key], 1e-5),
                      f"{what}: iteration {it} {key} {steps[it][key]} vs uninterrupted serial {serial[it][key]}")
                worst = max(worst, abs(steps[it][key] - serial[it][key]) / max(1.0, abs(serial[it][key])))
    bad = run(2, MODEL + ["--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-v",
                          "--num-virtual-stages-per-pipeline-rank", "4", "--train-iters", "1"], expect_ok=False)
    check(bad.returncode == 2 and "--pipeline-schedule zb-v places 2 model chunks per rank, got v = 4" in bad.stderr,
          f"zb-v with v = 4: status {bad.returncode}, stderr {bad.stderr}")
    print(f"vshape: 4 layouts and 4 checkpoint loads vs serial, worst relative difference {worst:.2e}")


def case_mtp():
    # Multi-token prediction (docs/deepseek.md): D = 2 on a RoPE model with an untied head, the
    # serial run against (t, p, d) = (2, 2, 2) with the distributed optimizer (the modules and the
    # last stage's copy of the word embedding on the last stage), each depth's loss logged apart;
    # a checkpoint of the (2, 2, 1) run resumed at (1, 2, 2) and serially.
    extra = ["--position-embedding-type", "rope", "--untie-embeddings-and-output-weights",
             "--mtp-num-layers", "2", "--mtp-loss-scaling-factor", "0.3"]
    serial, serial_valid, stdout = train("mtp-serial", 1, 1, 1, 5, extra)
    check(" | mtp_1 loss: " in stdout and " | mtp_2 loss: " in stdout and "mtp_3" not in stdout,
          "the log line has mtp_1 and mtp_2 losses:\n" + stdout)
    check(all("mtp_1_loss" in r and "mtp_2_loss" in r for r in serial.values()), "mtp_k_loss in every JSON line")
    check(all("mtp_1_loss" not in r for r in serial_valid.values()), "validation ignores the MTP modules")
    par, _, _ = train("mtp-parallel", 8, 2, 2, 5, extra + ["--use-distributed-optimizer"])
    worst = 0.0
    for it in range(1, 6):
        for key in ("lm_loss", "grad_norm", "mtp_1_loss", "mtp_2_loss"):
            a, b = par[it][key], serial[it][key]
            check(close(a, b, 1e-5), f"mtp iteration {it} {key}: (2,2,2) {a} vs serial {b}")
            worst = max(worst, abs(a - b) / max(1.0, abs(b)))
    ckpt = os.path.join(WORK, "ckpt-mtp")
    train("mtp-save", 4, 2, 2, 5, extra + ["--save", ckpt, "--exit-interval", "4"])
    for (np, t, p) in [(4, 1, 2), (1, 1, 1)]:
        steps, _, _ = train(f"mtp-load-{t}{p}", np, t, p, 5, extra + ["--load", ckpt])
        for key in ("lm_loss", "grad_norm", "mtp_1_loss", "mtp_2_loss"):
            check(sorted(steps) == [5] and close(steps[5][key], serial[5][key], 1e-5),
                  f"mtp checkpoint resumed at ({t},{p}): iteration 5 {key} {steps.get(5, {}).get(key)} "
                  f"vs serial {serial[5][key]}")
    # MTP with MoE: the first layer dense, the last MoE, so the module's layer is MoE (Megatron's
    # MTP block spec); its expert load is logged as layer num_layers and the serial run's figures
    # come back at (2,2,2) with e = 2, sequence parallelism and the distributed optimizer.
    moe = ["--position-embedding-type", "rope", "--mtp-num-layers", "1", "--num-experts", "4",
           "--moe-router-topk", "2", "--moe-ffn-hidden-size", "16", "--moe-layer-freq", "[0,1,1,1]",
           "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
           "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "0.01", "--disable-bias-linear"]
    serial_moe, _, _ = train("mtp-moe-serial", 1, 1, 1, 3, moe)
    check(all([l["layer"] for l in r.get("moe_expert_load", [])] == [1, 2, 3, 4] for r in serial_moe.values()),
          f"MTP with MoE: the expert loads of layers 1-3 and the module's (4): {serial_moe.get(1)}")
    par_moe, _, _ = train("mtp-moe-parallel", 8, 2, 2, 3,
                          moe + ["--expert-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer"])
    for it in range(1, 4):
        for key in ("lm_loss", "grad_norm", "mtp_1_loss", "load_balancing_loss"):
            a, b = par_moe[it][key], serial_moe[it][key]
            check(close(a, b, 1e-5), f"mtp with MoE iteration {it} {key}: (2,2,2) e 2 {a} vs serial {b}")
            worst = max(worst, abs(a - b) / max(1.0, abs(b)))
        check(par_moe[it]["moe_expert_load"] == serial_moe[it]["moe_expert_load"],
              f"mtp with MoE iteration {it}: expert loads {par_moe[it]['moe_expert_load']} vs serial "
              f"{serial_moe[it]['moe_expert_load']}")
    print(f"mtp: (2,2,2) vs serial, 5 iterations, worst relative difference {worst:.2e}; resumed at (1,2) and (1,1); "
          "with MoE at e = 2")


def case_muon():
    # Muon (docs/guides/muon.md): the serial run against (t, p, d) = (2, 2, 2) with the
    # distributed optimizer (each matrix orthogonalised once in its tensor x data group); a
    # checkpoint of the (2, 2, 2) run saved at iteration 4 resumes at (2, 2, 2) bit for bit, and at
    # (1, 1, 1) and (4, 1, 2) on the uninterrupted trajectory, each of which an interruption at 6
    # (a checkpoint of that layout) continues bit for bit.
    muon = ["--optimizer", "muon", "--muon-nesterov", "--lr", "1e-2"]
    dist = ["--use-distributed-optimizer"]
    serial, _, stdout = train("muon-serial", 1, 1, 1, 8, muon)
    check(serial[8]["lm_loss"] < serial[1]["lm_loss"] - 0.3,
          f"muon: the loss falls: {serial[1]['lm_loss']} -> {serial[8]['lm_loss']}")
    full, _, _ = train("muon-222", 8, 2, 2, 8, muon + dist)
    worst = 0.0
    for it in range(1, 9):
        for key in ("lm_loss", "grad_norm"):
            a, b = full[it][key], serial[it][key]
            check(close(a, b, 1e-5), f"muon iteration {it} {key}: (2,2,2) {a} vs serial {b}")
            worst = max(worst, abs(a - b) / max(1.0, abs(b)))
    ckpt = os.path.join(WORK, "ckpt-muon")
    train("muon-save", 8, 2, 2, 8, muon + dist + ["--save", ckpt, "--exit-interval", "4"])
    same, _, _ = train("muon-resume-222", 8, 2, 2, 8, muon + dist + ["--load", ckpt])
    for it in range(5, 9):
        check(same[it]["lm_loss"] == full[it]["lm_loss"] and same[it]["grad_norm"] == full[it]["grad_norm"],
              f"muon resumed at (2,2,2) iteration {it}: {same[it]['lm_loss']!r} vs uninterrupted {full[it]['lm_loss']!r}")
    for (np, t, p, extra) in [(1, 1, 1, []), (8, 4, 1, dist)]:
        d = np // (t * p)
        name = f"muon-{t}{p}{d}"
        cont, _, _ = train(name, np, t, p, 8, muon + extra + ["--load", ckpt])
        check(sorted(cont) == [5, 6, 7, 8], f"{name}: resumes at iteration 5")
        for it in range(5, 9):
            for key in ("lm_loss", "grad_norm"):
                check(close(cont[it][key], full[it][key], 1e-5),
                      f"{name}: iteration {it} {key} {cont[it][key]} vs the (2,2,2) run's {full[it][key]}")
                worst = max(worst, abs(cont[it][key] - full[it][key]) / max(1.0, abs(full[it][key])))
        own = os.path.join(WORK, "ckpt-" + name)
        train(name + "-save", np, t, p, 8, muon + extra + ["--load", ckpt, "--save", own, "--exit-interval", "6"])
        rest, _, _ = train(name + "-rest", np, t, p, 8, muon + extra + ["--load", own])
        check(sorted(rest) == [7, 8], f"{name}: its own checkpoint resumes at iteration 7")
        for it in (7, 8):
            for key in ("lm_loss", "grad_norm", "learning_rate"):
                check(rest.get(it, {}).get(key) == cont[it][key],
                      f"{name}: resumed at 6, iteration {it} {key} {rest.get(it, {}).get(key)!r} vs uninterrupted "
                      f"{cont[it][key]!r}")
    # bf16 weights with fp32 masters and momentum: (2,2,2) with the distributed optimizer and the
    # overlapped collectives tracks the serial bf16 run to bf16 round-off, and the serial fp32 one.
    b16, _, _ = train("muon-bf16", 1, 1, 1, 6, muon + ["--bf16"])
    b16p, _, _ = train("muon-bf16-222", 8, 2, 2, 6, muon + dist + ["--bf16", "--overlap-grad-reduce",
                                                                  "--overlap-param-gather"])
    wb = compare(b16p, b16, 6, 1e-2, "muon bf16 (2,2,2) vs bf16 serial", keys=("lm_loss",))
    # Against fp32 only loosely: every Muon step moves every weight by a step of fixed size, which
    # bf16's 8 bits round at every iteration (AdamW's bf16 run stays within 5e-3, case bf16).
    wf = compare(b16, serial, 6, 5e-2, "muon bf16 vs fp32", keys=("lm_loss",))
    # --muon-tp-mode blockwise (Megatron's default): each tensor rank's piece alone. At t = 1 the
    # pieces are the matrices (the serial run bit for bit); at t = 2 a different update, which
    # leaves iteration 1 (before any update) alone and then departs from the serial run.
    blk = muon + ["--muon-tp-mode", "blockwise"]
    b1, _, _ = train("muon-blockwise-1", 1, 1, 1, 8, blk)
    check(all(b1[it]["lm_loss"] == serial[it]["lm_loss"] for it in range(1, 9)),
          "muon blockwise at t = 1 is the serial run bit for bit")
    b2, _, _ = train("muon-blockwise-2", 2, 2, 1, 8, blk)
    check(close(b2[1]["lm_loss"], serial[1]["lm_loss"], 1e-5) and
          abs(b2[8]["lm_loss"] - serial[8]["lm_loss"]) > 1e-4 * abs(serial[8]["lm_loss"]),
          f"muon blockwise at t = 2: iteration 1 {b2[1]['lm_loss']} as serial, iteration 8 {b2[8]['lm_loss']} departs "
          f"from serial's {serial[8]['lm_loss']}")
    # QK-clip (MuonClip): with a threshold under the heads' largest logits, heads clip every
    # iteration; the JSON lines carry each layer's largest logit and clipped heads, and (2,2,2)
    # reports the serial run's.
    clip = muon + ["--qk-clip", "--qk-clip-threshold", "0.04", "--disable-bias-linear"]
    qs, _, _ = train("muon-qkclip", 1, 1, 1, 4, clip)
    qp, _, _ = train("muon-qkclip-222", 8, 2, 2, 4, clip + dist)
    for it in range(1, 5):
        logits, clipped = qs[it].get("max_attention_logit"), qs[it].get("qk_clipped_heads")
        check(isinstance(logits, list) and len(logits) == 4 and isinstance(clipped, list) and sum(clipped) > 0,
              f"qk-clip iteration {it}: per-layer max_attention_logit and clipped heads logged: {logits} {clipped}")
        if isinstance(logits, list) and isinstance(qp[it].get("max_attention_logit"), list):
            check(all(close(a, b, 1e-4) for a, b in zip(qp[it]["max_attention_logit"], logits)) and
                  qp[it].get("qk_clipped_heads") == clipped,
                  f"qk-clip iteration {it}: (2,2,2) {qp[it].get('max_attention_logit')} vs serial {logits}")
    # An AdamW checkpoint does not load into Muon (the moments are another optimizer's state).
    adam = os.path.join(WORK, "ckpt-adam")
    train("adam-save", 1, 1, 1, 3, ["--save", adam])
    p = run(1, MODEL + ["--train-iters", "4", "--load", adam] + muon, expect_ok=False)
    check(p.returncode != 0 and "muon" in p.stderr and "adam" in p.stderr,
          f"an AdamW checkpoint is refused by a Muon run, naming both: status {p.returncode}\n{p.stderr[-600:]}")
    print(f"muon: (2,2,2) and the resumed (1,1,1) and (4,1,2) runs vs serial / (2,2,2): worst relative difference "
          f"{worst:.2e}; loss {serial[1]['lm_loss']:.4f} -> {serial[8]['lm_loss']:.4f}; resumes bit-identical; bf16 "
          f"(2,2,2) vs bf16 serial {wb:.2e}, bf16 vs fp32 {wf:.2e}")


try:
    {"equivalence": case_equivalence, "resume": case_resume, "reshard": case_reshard, "corrupt": case_corrupt,
     "generate": case_generate, "errors": case_errors, "bf16": case_bf16, "fp16": case_fp16,
     "attention": case_attention, "llama": case_llama, "qwen2": case_qwen2, "masks": case_masks,
     "blend": case_blend, "uneven": case_uneven, "sp": case_sp, "vshape": case_vshape,
     "mtp": case_mtp, "muon": case_muon}[CASE]()
finally:
    if not failures:
        shutil.rmtree(WORK, ignore_errors=True)
    else:
        print("work files kept in", WORK)
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
