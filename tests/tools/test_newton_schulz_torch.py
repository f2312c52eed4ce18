"""ptdp's Newton-Schulz (Backend::newton_schulz on the CPU) against PyTorch's torch.optim.Muon
(_zeropower_via_newtonschulz, torch 2.x in the reference venv).

Usage: test_newton_schulz_torch.py NS_PROBE VENV

PyTorch runs the iteration on bf16 tensors: the gradient is cast to bf16, normalised by its
Frobenius norm (in bf16), and every product (X X^T, b A + c A A, a X + B X by addmm) accumulates
in fp32 and rounds its result to bf16. ptdp's precision 2 rounds at the same points but divides
the fp32 input by its fp32 norm before the first rounding (NewtonSchulzDesc's contract), so the
two differ by bf16 roundings only. Checked on tall, wide and square matrices with the default
quintic (3.4445, -4.775, 2.0315):
  - one step from the same bf16 start (x normalised as ptdp does, then PyTorch's bf16 products
    as _zeropower_via_newtonschulz writes them): precision 2 gives PyTorch's bits for at least
    98% of the elements (the rest one bf16 unit apart, where the fp32 sums, added in another
    order, straddle a rounding boundary), while the fp32 iteration (precision 0) matches
    almost none: the roundings are at PyTorch's places;
  - 5 steps of PyTorch's own function: precision 2 within 8% of max |x| everywhere and 1.5% on
    average (independent bf16 roundings, amplified by the iteration's slope near zero, are what
    remains; PyTorch's bf16 result differs from the exact iteration by as much).
Exits 77 (skipped) with the reason when the venv or torch.optim.Muon is missing.
"""
import json
import os
import subprocess
import sys
import tempfile

PROBE, VENV = sys.argv[1], sys.argv[2]
python = os.path.join(VENV, "bin", "python")
if not os.path.exists(python):
    print(f"SKIP: {VENV} is missing; scripts/install-deps.sh makes it")
    sys.exit(77)
if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    os.execv(python, [python] + sys.argv)

import torch  # noqa: E402

try:
    from torch.optim._muon import _zeropower_via_newtonschulz  # noqa: E402
except ImportError as e:
    print(f"SKIP: torch {torch.__version__} has no torch.optim.Muon ({e})")
    sys.exit(77)

COEFFS = (3.4445, -4.775, 2.0315)
STEPS = 5
EPS = 1e-7
SHAPES = [(64, 160), (160, 64), (96, 96), (48, 256)]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def torch_steps_from(x, steps):
    """PyTorch's bf16 iteration (the loop of _zeropower_via_newtonschulz) from ptdp's start: x
    divided by max(its fp32 Frobenius norm, eps), then rounded to bf16."""
    a, b, c = COEFFS
    norm = max(float(torch.tensor(x.double().pow(2).sum().sqrt().item(), dtype=torch.float32)), EPS)
    X = (x / torch.tensor(norm, dtype=torch.float32)).to(torch.bfloat16)
    if x.size(0) > x.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        X = torch.addmm(X, B, X, beta=a)
    if x.size(0) > x.size(1):
        X = X.T
    return X.float()


g = torch.Generator().manual_seed(41)
inputs = [torch.randn(r, c, generator=g, dtype=torch.float32) for r, c in SHAPES]
RUNS = [(1, 0), (1, 2), (STEPS, 2)]  # (steps, precision)
cases = []
for x in inputs:
    for steps, precision in RUNS:
        cases.append(dict(rows=x.shape[0], cols=x.shape[1], steps=steps, coefficients=[list(COEFFS)], eps=EPS,
                          precision=precision, x=x.flatten().tolist()))
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(cases, f)
    path = f.name
out = subprocess.run([PROBE, path], capture_output=True, text=True, timeout=300)
os.unlink(path)
if out.returncode != 0:
    print(f"FAIL: ns_probe exited {out.returncode}: {out.stderr}")
    sys.exit(1)
results = [json.loads(line) for line in out.stdout.splitlines()]
check(len(results) == len(cases), f"{len(results)} results for {len(cases)} cases")

for i, x in enumerate(inputs):
    shape = tuple(x.shape)
    got = {}
    for j, run in enumerate(RUNS):
        r = results[len(RUNS) * i + j]
        if "error" in r:
            check(False, f"{shape} {run}: {r['error']}")
            continue
        got[run] = torch.tensor(r["x"], dtype=torch.float32).reshape(shape)
    if len(got) < len(RUNS):
        continue
    one = torch_steps_from(x, 1)
    same_bf16 = (got[(1, 2)] == one).float().mean().item()
    same_f32 = (got[(1, 0)] == one).float().mean().item()
    ulp = (got[(1, 2)] - one).abs() / one.abs().clamp(min=1e-30)
    print(f"{shape}, one step: bf16 mode equal to PyTorch's bf16 in {100 * same_bf16:.2f}% of the elements "
          f"(worst relative difference {ulp.max().item():.2e}), fp32 mode in {100 * same_f32:.2f}%")
    check(same_bf16 >= 0.98, f"{shape}: one step in bf16 mode gives PyTorch's bits for {100 * same_bf16:.2f}%")
    check(ulp.max().item() <= 2.0 ** -7, f"{shape}: one step in bf16 mode one bf16 unit from PyTorch at most")
    check(same_f32 < 0.2, f"{shape}: the fp32 mode matches PyTorch's bf16 bits in {100 * same_f32:.2f}%")
    ref = _zeropower_via_newtonschulz(x, COEFFS, STEPS, EPS).float()
    scale = ref.abs().max().item()
    d = (got[(STEPS, 2)] - ref).abs()
    print(f"{shape}, {STEPS} steps of torch.optim.Muon's function: max |x| {scale:.4f}, max |diff| "
          f"{d.max().item():.5f}, mean {d.mean().item():.2e}")
    check(d.max().item() < 0.08 * scale, f"{shape}: {STEPS} steps within 8% of PyTorch's max |x|")
    check(d.mean().item() < 0.015 * scale, f"{shape}: {STEPS} steps within 1.5% of PyTorch's on average")
    check(torch.equal(got[(STEPS, 2)], got[(STEPS, 2)].to(torch.bfloat16).float()),
          f"{shape}: bf16 mode returns bf16 values")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("newton_schulz matches torch.optim.Muon's bf16 iteration")
