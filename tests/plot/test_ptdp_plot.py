#!/usr/bin/env python3
"""ptdp-plot end to end (ctest label "plot").

    test_ptdp_plot.py BIN_DIR

Checks: two logs in ptdp-train's --log-json format become one SVG that an XML parser accepts,
with a path per series and run, the given labels and title, and validation markers; --help;
bad flags exit with status 2 naming the flag; a missing log or a bad line exits with status 1
naming the file (and the line), leaving an earlier picture in place.
"""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

BIN = sys.argv[1]
PLOT = os.path.join(BIN, "ptdp-plot")
WORK = tempfile.mkdtemp(prefix="ptdp-plot-test-")
SVG_NS = "{http://www.w3.org/2000/svg}"
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(args):
    p = subprocess.run([PLOT] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def write_log(path, start_loss, iters=30, eval_interval=10):
    with open(path, "w") as f:
        for i in range(1, iters + 1):
            f.write('{"iteration": %d, "consumed_samples": %d, "lm_loss": %.9g, "learning_rate": %.9g, '
                    '"grad_norm": %.9g, "loss_scale": 1, "skipped": 0, "skipped_iterations": 0, '
                    '"elapsed_ms": 12.5, "tokens_per_second": %.1f, "tflops_per_device": 0.01, '
                    '"global_batch_size": 16, "mem_high_water_mib": 41.3, "mfu": 0.2}\n'
                    % (i, 16 * i, start_loss - 0.05 * i, 1e-4 * min(1.0, i / 10), 2.0 / i, 4000 + i))
            if i % eval_interval == 0:
                f.write('{"validation_iteration": %d, "lm_loss": %.9g, "lm_loss_ppl": 1.0}\n'
                        % (i, start_loss - 0.05 * i + 0.1))


log_a = os.path.join(WORK, "a.jsonl")
log_b = os.path.join(WORK, "b.jsonl")
write_log(log_a, 6.0)
write_log(log_b, 5.5)
svg = os.path.join(WORK, "runs.svg")

rc, out, err = run([log_a, log_b, "-o", svg, "--label", "baseline", "--label", "wider", "--title", "two runs"])
check(rc == 0, f"two logs: exit status {rc}, stderr {err}")
check(svg in out, f"two logs: says what it wrote: {out}")
try:
    root = ET.parse(svg).getroot()
    check(root.tag == SVG_NS + "svg", f"root element {root.tag}")
    paths = [e for e in root.iter(SVG_NS + "path") if e.get("class") == "series"]
    check(len(paths) == 12, f"{len(paths)} series paths, expected 2 runs x 6")
    keys = sorted((p.get("data-run"), p.get("data-series")) for p in paths)
    check(len(set(keys)) == 12, "one path per (run, series)")
    for p in paths:
        if p.get("data-run") == "0" and p.get("data-series") == "lm_loss":
            check(p.get("d").startswith("M") and p.get("d").count(" L") == 29, f"30 points: {p.get('d')[:80]}")
    labels = [t.text for t in root.iter(SVG_NS + "text") if t.get("class") == "run-label"]
    check(labels == ["baseline", "wider"], f"legend {labels}")
    title = root.find(SVG_NS + "title")
    check(title is not None and title.text == "two runs", "title")
    check(len(list(root.iter(SVG_NS + "circle"))) == 6, "3 validation markers per run")
    x_ticks = [float(t.get("data-value")) for g in root.iter(SVG_NS + "g")
               if g.get("class") == "ticks" and g.get("data-panel") == "lm_loss" and g.get("data-axis") == "x"
               for t in g]
    check(x_ticks and x_ticks[0] <= 1 and x_ticks[-1] >= 30, f"x ticks span 1..30: {x_ticks}")
except ET.ParseError as e:
    check(False, f"the SVG does not parse as XML: {e}")

# Labels default to the file names.
rc, out, err = run([log_a, log_b, "--output=" + svg])
check(rc == 0 and ">a.jsonl</text>" in open(svg).read() and ">b.jsonl</text>" in open(svg).read(),
      f"default labels: rc {rc} {err}")

rc, out, err = run(["--help"])
check(rc == 0 and "--label" in out and "-o, --output" in out, "--help")

# Bad flags: status 2, the flag named.
for args, words in [
    ([log_a], "no output given"),
    (["-o", svg], "no training log given"),
    ([log_a, "-o"], "-o needs a path"),
    ([log_a, "-o", svg, "--colour", "red"], "unknown flag '--colour'"),
    ([log_a, "-o", svg, "--label", "x", "--label", "y"], "2 --label flags for 1 logs"),
    ([log_a, "-o", svg, "-o", svg], "given twice"),
    ([log_a, "-o", log_a], "would overwrite"),
]:
    rc, out, err = run(args)
    check(rc == 2 and words in err, f"{args}: rc {rc}, stderr {err}")

# Unreadable input: status 1, the file and the line named; the picture from before stays.
before = open(svg).read()
missing = os.path.join(WORK, "missing.jsonl")
rc, out, err = run([log_a, missing, "-o", svg])
check(rc == 1 and missing in err and "no such file" in err, f"missing log: rc {rc}, {err}")
bad = os.path.join(WORK, "bad.jsonl")
with open(bad, "w") as f:
    f.write('{"iteration": 1, "lm_loss": 2.0}\n{"iteration": 2, "lm_loss": 1.9\n')
rc, out, err = run([bad, "-o", svg])
check(rc == 1 and bad in err and "line 2" in err, f"bad line: rc {rc}, {err}")
rc, out, err = run([WORK, "-o", svg])
check(rc == 1 and "is a directory" in err, f"directory: rc {rc}, {err}")
check(open(svg).read() == before, "the earlier picture is left in place")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("ptdp-plot: all checks passed")
