#!/usr/bin/env python3
"""ptdp's Muon against PyTorch's torch.optim.Muon (ctest labels "tools;python;mpi").

    test_muon_torch.py PROBE

A Llama-shaped Hugging Face model (grouped-query attention, SwiGLU, untied head; transformers
5.25 of the reference venv /opt/ptdp-ref-venv, which has torch 2.15 with torch.optim.Muon) is
saved with random weights and trained for 10 steps on the same batches twice:

  - by ptdp (PROBE, tests/tools/muon_probe.c: ptdp_hf_load, an optimizer with
    PTDP_OPTIMIZER_MUON, ptdp_train_iteration, ptdp_hf_save), at t = 1 and t = 2 (mpiexec -n 2,
    the tensor group's matrices orthogonalised whole on one rank each);
  - by torch: torch.optim.Muon on every 2-D parameter but the embedding and lm_head (q_proj,
    k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: ptdp's q, k and v parts of linear_qkv
    and gate and up halves of linear_fc1, orthogonalised apart), torch.optim.AdamW on the rest
    with Megatron's rule (no weight decay on the norms), the loss the mean token cross-entropy.

For each of PyTorch's adjust_lr_fn choices, mapped onto ptdp's scale mode:
  "original"        = --muon-scale-mode shape_scaling, --muon-extra-scale-factor 1
                      (lr * sqrt(max(1, A / B)) for an [A, B] weight)
  "match_rms_adamw" = --muon-scale-mode spectral, --muon-extra-scale-factor 0.2
                      (lr * 0.2 * sqrt(max(A, B)))
with PyTorch's defaults (momentum 0.95, Nesterov, the coefficients (3.4445, -4.775, 2.0315) =
ptdp's "simple", 5 steps). PyTorch runs its Newton-Schulz iteration in bf16; the fp32 comparison
replaces torch.optim._muon._zeropower_via_newtonschulz by the same algorithm in fp32: every loss
within 1e-4 relative, every parameter tensor within 2e-4 relative (Frobenius), and the 10 steps
moved every matrix by more than 1e-2 of its norm. Then PyTorch's
own bf16 iteration against ptdp's --muon-fp32-matmul-prec medium (bf16 operands and results):
after one step parameters within 1e-2 relative, after 10 losses within 2e-3 and parameters
within 3e-2 (bf16 tolerance; PyTorch rounds the momentum to bf16 before normalising it, Megatron's
"medium", which ptdp follows, normalises in fp32, so the two differ by bf16 round-off).

Exits 77 (ctest: skipped) with the reason when torch, transformers or torch.optim.Muon is missing.
"""
import os
import shutil
import subprocess
import sys
import tempfile

VENV = "/opt/ptdp-ref-venv"
if os.path.exists(os.path.join(VENV, "bin", "python")) and os.path.realpath(sys.prefix) != os.path.realpath(VENV) \
        and not os.environ.get("PTDP_MUON_TEST_IN_VENV"):
    python = os.path.join(VENV, "bin", "python")
    os.execve(python, [python] + sys.argv, dict(os.environ, PTDP_MUON_TEST_IN_VENV="1"))

PROBE = sys.argv[1]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
WORK = tempfile.mkdtemp(prefix="ptdp-muon-test-")
ITERS, BATCH, SEQ, VOCAB = 10, 4, 16, 97
LR, WD = 2e-2, 0.1
failures = []

try:
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file
    if not hasattr(torch.optim, "Muon"):
        raise ImportError(f"torch {torch.__version__} has no torch.optim.Muon")
    import torch.optim._muon as torch_muon
except ImportError as e:
    print(f"SKIP: needs torch with torch.optim.Muon, transformers and safetensors ({e}); "
          f"scripts/install-deps.sh installs them into {VENV}")
    shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(77)


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def make_model(path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.1 * noise)
    model.save_pretrained(path, safe_serialization=True)


def batches():
    """New random tokens every step, each labelled by a fixed function of itself and its
    predecessor: a rule the model learns, so that the loss falls."""
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, VOCAB, size=(ITERS, BATCH, SEQ)).astype(np.int32)
    prev = np.concatenate([np.zeros_like(tokens[..., :1]), tokens[..., :-1]], axis=-1)
    labels = ((3 * tokens + prev + 1) % VOCAB).astype(np.int32)
    return tokens, labels


def ns_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz with its bf16 cast removed."""
    a, b, c = ns_coefficients
    x = grad.float()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def is_muon(name, p):
    return p.ndim == 2 and "embed_tokens" not in name and "lm_head" not in name


def torch_run(hf_dir, tokens, labels, adjust, bf16, iters=ITERS):
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32,
                                                              attn_implementation="eager")
    model.train()
    muon, decay, no_decay = [], [], []
    for name, p in model.named_parameters():
        if is_muon(name, p):
            muon.append(p)
        elif name.endswith("norm.weight"):
            no_decay.append(p)
        else:
            decay.append(p)
    opt_m = torch.optim.Muon(muon, lr=LR, weight_decay=WD, momentum=0.95, nesterov=True,
                             ns_coefficients=(3.4445, -4.775, 2.0315), ns_steps=5, adjust_lr_fn=adjust)
    opt_a = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=LR, betas=(0.9, 0.999), eps=1e-8)
    saved = torch_muon._zeropower_via_newtonschulz
    if not bf16:
        torch_muon._zeropower_via_newtonschulz = ns_fp32
    losses = []
    try:
        for it in range(iters):
            logits = model(torch.tensor(tokens[it], dtype=torch.long)).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(),
                                                     torch.tensor(labels[it], dtype=torch.long).reshape(-1))
            opt_m.zero_grad()
            opt_a.zero_grad()
            loss.backward()
            opt_m.step()
            opt_a.step()
            losses.append(float(loss.detach()))
    finally:
        torch_muon._zeropower_via_newtonschulz = saved
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def ptdp_run(hf_dir, tok_path, lab_path, scale, extra, precision, t, tag, iters=ITERS):
    loss_path = os.path.join(WORK, f"losses-{tag}.f32")
    out_dir = os.path.join(WORK, f"trained-{tag}")
    settings = (f"lr={LR},wd={WD},momentum=0.95,nesterov=1,steps=5,coefficients=1,precision={precision},"
                f"scale={scale},extra={extra},clip=0")
    cmd = [PROBE, hf_dir, tok_path, lab_path, str(BATCH), str(SEQ), str(iters), str(t), settings, loss_path, out_dir]
    cmd = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", str(t)] + cmd
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"muon_probe failed with status {p.returncode}")
    params = {}
    for f in sorted(os.listdir(out_dir)):
        if f.endswith(".safetensors"):
            params.update(load_file(os.path.join(out_dir, f)))
    return np.fromfile(loss_path, dtype=np.float32).tolist(), params


def compare(what, ptdp, ref, loss_tol, param_tol):
    (pl, pp), (rl, rp) = ptdp, ref
    worst_loss = max(abs(a - b) / abs(b) for a, b in zip(pl, rl))
    check(len(pl) == len(rl), f"{what}: {len(pl)} and {len(rl)} losses")
    check(worst_loss <= loss_tol, f"{what}: losses differ by {worst_loss:.2e} relative (ptdp {pl}, torch {rl})")
    check(sorted(pp) == sorted(rp), f"{what}: tensors {sorted(set(pp) ^ set(rp))} in one model only")
    worst, name, worst_m, name_m = 0.0, "", 0.0, ""
    for n in rp:
        if n not in pp:
            continue
        x, y = pp[n].float(), rp[n].float()
        rel = float((x - y).norm() / y.norm())
        if rel > worst:
            worst, name = rel, n
        if is_muon(n, y) and rel > worst_m:
            worst_m, name_m = rel, n
    check(worst <= param_tol, f"{what}: parameter {name} differs by {worst:.2e} relative")
    print(f"{what}: losses {rl[0]:.4f} -> {rl[-1]:.4f}, worst loss difference {worst_loss:.2e} relative; "
          f"worst parameter {name} {worst:.2e}, worst Muon matrix {name_m} {worst_m:.2e} relative (Frobenius)")
    return worst_loss, worst, worst_m


def main():
    hf_dir = os.path.join(WORK, "llama")
    make_model(hf_dir)
    tokens, labels = batches()
    tok_path, lab_path = os.path.join(WORK, "tokens.i32"), os.path.join(WORK, "labels.i32")
    tokens.tofile(tok_path)
    labels.tofile(lab_path)
    start = {n: p.detach().clone() for n, p in
             transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).named_parameters()}
    # adjust_lr_fn -> (ptdp scale mode, extra factor): 0 spectral, 2 shape_scaling.
    for adjust, scale, extra in (("original", 2, 1.0), ("match_rms_adamw", 0, 0.2)):
        ref = torch_run(hf_dir, tokens, labels, adjust, bf16=False)
        moved = min(float((ref[1][n] - start[n]).norm() / start[n].norm()) for n in start if is_muon(n, start[n]))
        check(moved > 1e-2, f"torch {adjust}: 10 steps moved every matrix (the least by {moved:.2e} relative)")
        for t in (1, 2):
            got = ptdp_run(hf_dir, tok_path, lab_path, scale, extra, 0, t, f"{adjust}-t{t}")
            compare(f"adjust_lr_fn {adjust}, fp32 Newton-Schulz, t = {t}", got, ref, 1e-4, 2e-4)
    # PyTorch's own bf16 iteration against ptdp's bf16 option (Megatron's "medium": PyTorch rounds
    # the momentum to bf16 before normalising it, Megatron normalises in fp32 and then rounds; the
    # products and their results are bf16 in both): after one step and after 10, to bf16
    # tolerance (bf16 keeps 8 bits: 3.9e-3 relative per rounding).
    one16 = torch_run(hf_dir, tokens, labels, "match_rms_adamw", bf16=True, iters=1)
    compare("one step, bf16 Newton-Schulz (ptdp medium vs PyTorch's own)",
            ptdp_run(hf_dir, tok_path, lab_path, 0, 0.2, 2, 1, "bf16-1", iters=1), one16, 1e-6, 1e-2)
    ref16 = torch_run(hf_dir, tokens, labels, "match_rms_adamw", bf16=True)
    compare("10 steps, bf16 Newton-Schulz (ptdp medium vs PyTorch's own)",
            ptdp_run(hf_dir, tok_path, lab_path, 0, 0.2, 2, 1, "bf16"), ref16, 2e-3, 3e-2)

try:
    main()
finally:
    shutil.rmtree(WORK, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
