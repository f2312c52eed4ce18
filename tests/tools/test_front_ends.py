#!/usr/bin/env python3
"""One training loop for every language: the same ptdp-train flags, run under mpiexec through
the C tool (ptdp-train), Python (ptdp.train), Rust (the ptdp crate's train_main) and Fortran
(the ptdp module's ptdp_train_main), must print the same log lines (timings aside), write the
same JSON lines (timings aside) and byte-identical checkpoints.

  test_front_ends.py --mpiexec M --c BIN [--python PY --pythonpath DIR] [--fortran BIN]
                     [--cargo CARGO --rust-manifest TOML --rust-target DIR --lib-dir DIR]

A front end whose tool is not given (no Fortran compiler, no cargo) is named as skipped; with
fewer than two front ends the test exits 77 (skipped). Any difference fails, naming the front
end, the file and the first differing line.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

FLAGS = ["--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "6", "--lr", "3e-3",
         "--lr-warmup-iters", "2", "--lr-decay-style", "cosine", "--seed", "4321",
         "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
         "--text-file", "corpus.txt", "--tokenizer-type", "ByteLevel", "--split", "90,10,0",
         "--log-interval", "1", "--eval-interval", "3", "--eval-iters", "2", "--save", "ckpt",
         "--save-interval", "3", "--log-json", "log.jsonl", "--comm-timeout", "60"]
NP = 4
TIMINGS = ("elapsed_ms", "tokens_per_second", "tflops_per_device", "mfu", "mem_high_water_mib")


def normalise(line):
    """A log line without what depends on the clock: the timestamp and the timed figures."""
    line = re.sub(r"^ \[[^]]*\] ", " [time] ", line)
    for field in ("elapsed time per iteration \\(ms\\)", "throughput per GPU \\(TFLOP/s/GPU\\)",
                  "tokens per second", "MFU", "mem high-water \\(MiB\\)"):
        line = re.sub("(" + field + r"): [0-9.eE+-]+%?", r"\1: T", line)
    return line


def records(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            for k in TIMINGS:
                r.pop(k, None)
            out.append(r)
    return out


def checkpoint_hashes(root):
    hashes = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                hashes[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return hashes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--c", required=True)
    ap.add_argument("--python")
    ap.add_argument("--pythonpath")
    ap.add_argument("--fortran")
    ap.add_argument("--cargo")
    ap.add_argument("--rust-manifest")
    ap.add_argument("--rust-target")
    ap.add_argument("--lib-dir")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="ptdp-front-ends-")
    corpus = "".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog {i % 7} times.\n"
                     "Pack my box with five dozen liquor jugs.\n\n" for i in range(300))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    fronts = {"C": [a.c]}
    skipped = []
    if a.python and a.pythonpath:
        env["PYTHONPATH"] = a.pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        fronts["Python"] = [a.python, "-c", "import sys, ptdp; sys.exit(ptdp.train(sys.argv[1:]))"]
    else:
        skipped.append("Python (no interpreter with the bindings)")
    if a.fortran and os.path.exists(a.fortran):
        fronts["Fortran"] = [a.fortran]
    else:
        skipped.append("Fortran (no Fortran compiler or MPI Fortran module)")
    if a.cargo and a.rust_manifest:
        build_env = dict(env, CARGO_TARGET_DIR=a.rust_target, PKG_CONFIG="false", PTDP_LIB_DIR=a.lib_dir)
        b = subprocess.run([a.cargo, "build", "--offline", "--manifest-path", a.rust_manifest, "--bin", "ptdp_train"],
                           env=build_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        if b.returncode != 0:
            print(b.stdout)
            sys.exit("FAIL: the Rust front end does not build")
        fronts["Rust"] = [os.path.join(a.rust_target, "debug", "ptdp_train")]
        env["LD_LIBRARY_PATH"] = a.lib_dir + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    else:
        skipped.append("Rust (no cargo)")
    for s in skipped:
        print("skipped front end:", s)
    if len(fronts) < 2:
        print("fewer than two front ends: nothing to compare")
        sys.exit(77)

    results = {}
    for name, cmd in fronts.items():
        run_dir = os.path.join(work, name)
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "corpus.txt"), "w", encoding="utf-8") as f:
            f.write(corpus)
        full = [a.mpiexec, "--oversubscribe", "--allow-run-as-root", "-n", str(NP), "-x", "OMP_NUM_THREADS",
                "-x", "PYTHONPATH", "-x", "LD_LIBRARY_PATH"] + cmd + FLAGS
        p = subprocess.run(full, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=600)
        if p.returncode != 0:
            print(p.stdout)
            print(p.stderr)
            sys.exit(f"FAIL: the {name} front end exited with status {p.returncode}")
        lines = [normalise(l) for l in p.stdout.splitlines()]
        results[name] = (lines, records(os.path.join(run_dir, "log.jsonl")),
                         checkpoint_hashes(os.path.join(run_dir, "ckpt")))
        print(f"{name}: {len(lines)} log lines, {len(results[name][1])} JSON lines, "
              f"{len(results[name][2])} checkpoint files")

    failures = []
    ref_lines, ref_records, ref_hashes = results["C"]
    if not any("lm loss:" in l for l in ref_lines) or len(ref_hashes) < 8:
        failures.append("the C run printed no log line or saved no checkpoints:\n" + "\n".join(ref_lines))
    for name, (lines, recs, hashes) in results.items():
        if name == "C":
            continue
        if lines != ref_lines:
            i = next((k for k, (x, y) in enumerate(zip(lines, ref_lines)) if x != y), min(len(lines), len(ref_lines)))
            failures.append(f"{name}: log line {i + 1} differs from the C tool's:\n  C:    "
                            f"{ref_lines[i] if i < len(ref_lines) else '(none)'}\n  {name}: "
                            f"{lines[i] if i < len(lines) else '(none)'}")
        if recs != ref_records:
            i = next((k for k, (x, y) in enumerate(zip(recs, ref_records)) if x != y), min(len(recs), len(ref_records)))
            failures.append(f"{name}: JSON line {i + 1} differs from the C tool's")
        if hashes != ref_hashes:
            differ = sorted(k for k in set(hashes) | set(ref_hashes) if hashes.get(k) != ref_hashes.get(k))
            failures.append(f"{name}: checkpoint files differ from the C tool's: {', '.join(differ)}")
        else:
            print(f"{name}: the same {len(lines)} log lines, {len(recs)} JSON lines and {len(hashes)} "
                  "byte-identical checkpoint files as the C tool")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
