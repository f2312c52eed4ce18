#!/usr/bin/env python3
"""ptdp's blends against an independent Python transcription of Megatron-LM's algorithm.

    test_blend_megatron.py TOOL

TOOL is test_blend_indices_tool (built from ptdp's core). For each weighted list and sample
count, Megatron's BlendedMegatronDatasetBuilder and BlendedDataset are transcribed here with
numpy (normalize: w / numpy.sum(w); _get_size_per_split_per_dataset with its 0.5% surplus;
the blend's size; helpers.cpp build_blending_indices and build_exhaustive_blending_indices),
and every number must equal ptdp's: the normalised weights bit for bit, each data set's target
and buffer counts, the size, and both index arrays element by element. No Megatron import.
Exit 77 (skipped) when numpy is missing.
"""
import json
import math
import random
import subprocess
import sys

try:
    import numpy
except ImportError:
    print("SKIP: numpy is not installed (Debian python3-numpy)")
    sys.exit(77)

TOOL = sys.argv[1]
SURPLUS = 0.005  # Megatron's mid_level_dataset_surplus default
failures = []


def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def size_per_dataset(normalized, size, surplus=0.0):
    return [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for w in normalized]


def build_blending_indices(weights, size):
    current = [0] * len(weights)
    dataset_index, dataset_sample_index = [], []
    for j in range(size):
        at = max(float(j), 1.0)
        best, best_error = 0, weights[0] * at - current[0]
        for i in range(1, len(weights)):
            error = weights[i] * at - current[i]
            if error > best_error:
                best, best_error = i, error
        dataset_index.append(best)
        dataset_sample_index.append(current[best])
        current[best] += 1
    return dataset_index, dataset_sample_index


def build_exhaustive_blending_indices(sizes):
    total = sum(sizes)
    weights = [s / float(total) for s in sizes]
    unspent = sorted(i for i, s in enumerate(sizes) if s > 0)
    counts = [0] * len(sizes)
    dataset_index, dataset_sample_index = [], []
    j = 0
    while unspent:
        at = max(float(j), 1.0)
        best, best_error = -1, -sys.float_info.max
        for i in unspent:
            error = weights[i] * at - counts[i]
            if error > best_error:
                best, best_error = i, error
        dataset_index.append(best)
        dataset_sample_index.append(counts[best])
        counts[best] += 1
        if sizes[best] - counts[best] == 0:
            unspent.remove(best)
        j += 1
    return dataset_index, dataset_sample_index


def tool(*args):
    out = subprocess.run([TOOL] + [str(a) for a in args], stdout=subprocess.PIPE, check=True, text=True).stdout
    return json.loads(out)


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def check_weighted(raw, size):
    what = f"weights {raw[:6]}{'...' if len(raw) > 6 else ''} ({len(raw)}), size {size}"
    got = tool("weights", *[repr(w) for w in raw], "size", size)
    w = normalize(raw)  # the builder
    target = size_per_dataset(w, size)
    buffer = size_per_dataset(w, size, SURPLUS)
    total = sum(target)
    index, sample = build_blending_indices(normalize(w), total)  # BlendedDataset normalises again
    check([float.fromhex(x) for x in got["normalized"]] == w, what + ": normalised weights")
    check(got["target"] == target, what + f": targets {got['target'][:8]} vs {target[:8]}")
    check(got["buffer"] == buffer, what + f": buffers {got['buffer'][:8]} vs {buffer[:8]}")
    check(got["size"] == total, what + f": size {got['size']} vs {total}")
    check(got["dataset_index"] == index, what + ": dataset_index")
    check(got["dataset_sample_index"] == sample, what + ": dataset_sample_index")
    # What Megatron's BlendedDataset checks: no data set drawn beyond what it built.
    for i in range(len(raw)):
        check(index.count(i) <= buffer[i], what + f": data set {i} oversampled")
    return total


def check_exhaustive(sizes):
    got = tool("exhaustive", *sizes)
    index, sample = build_exhaustive_blending_indices(sizes)
    check(got["dataset_index"] == index, f"exhaustive {sizes}: dataset_index")
    check(got["dataset_sample_index"] == sample, f"exhaustive {sizes}: dataset_sample_index")


rng = random.Random(20240601)
cases = [
    ([0.3, 0.7], 101),
    ([30, 70], 100),
    ([1, 2, 3], 1000),
    ([0.1] * 10, 997),                                # ten weights: numpy's pairwise sum
    ([rng.uniform(0.01, 5) for _ in range(20)], 5003),
    ([rng.uniform(1e-3, 1e3) for _ in range(150)], 20011),  # more than 128: numpy's halving
    ([1e-3, 1.0, 1e3], 4096),
    ([5.0], 17),
    ([0.25, 0.25, 0.5], 8 * 12),                      # a training run: 12 iterations of 8
]
sizes = [check_weighted(raw, n) for raw, n in cases]
for s in ([3, 5], [10, 20, 30], [7, 0, 4], [1], [rng.randint(1, 40) for _ in range(9)]):
    check_exhaustive(s)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print(f"blends equal Megatron's transcription: {len(cases)} weighted lists (blend sizes {sizes}), 5 exhaustive")
