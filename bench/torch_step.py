#!/usr/bin/python3
"""PyTorch's training step of the model bench_gpt times, for a ptdp/PyTorch ratio.

GPT-2 small by default (12 layers, h 768, 12 heads, V 50257 padded to 50304 as ptdp pads it,
s 64, b 4, learned positions, tied embeddings, hidden and attention dropout 0.1), written plainly
with torch.nn (Linear, LayerNorm, tanh-approximated GeLU, causal softmax attention), trained by
AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01) with gradient clipping at 1.0:
the step ptdp's bench_gpt times in its section 3. Each step draws new random token ids (labels
are the ids shifted by one). Prints the median, best and worst step in ms; --json writes them.

Run it with Debian's interpreter, which has python3-torch: /usr/bin/python3 bench/torch_step.py.
bench/compare_torch.sh runs it and bench_gpt back to back.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-LayerNorm transformer layer: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, h, heads, ffn, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc1 = nn.Linear(h, ffn)
        self.fc2 = nn.Linear(ffn, h)
        self.dropout = dropout

    def attention(self, x):
        b, s, h = x.shape
        dh = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=2)  # [b, s, h] each
        q = q.view(b, s, self.heads, dh).transpose(1, 2)  # [b, a, s, dh]
        k = k.view(b, s, self.heads, dh).transpose(1, 2)
        v = v.view(b, s, self.heads, dh).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))  # [b, a, s, s]
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = F.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        probs = F.dropout(probs, self.dropout, self.training)
        ctx = (probs @ v).transpose(1, 2).reshape(b, s, h)  # [b, s, h]
        return self.proj(ctx)

    def forward(self, x):
        x = x + F.dropout(self.attention(self.ln1(x)), self.dropout, self.training)
        m = self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x + F.dropout(m, self.dropout, self.training)


class Gpt(nn.Module):
    def __init__(self, layers, h, heads, vocab, seq, dropout):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)  # [V, h], also the LM head (tied)
        self.wpe = nn.Embedding(seq, h)  # [s, h]
        self.dropout = dropout
        self.blocks = nn.ModuleList(Block(h, heads, 4 * h, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2.0 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, ids, labels):
        b, s = ids.shape
        pos = torch.arange(s, device=ids.device)
        x = F.dropout(self.wte(ids) + self.wpe(pos), self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # [b, s, V]
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257, help="padded to a multiple of 128, as ptdp pads it")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout (bench_gpt's 0.1)")
    ap.add_argument("--iters", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: OMP_NUM_THREADS or the cores)")
    ap.add_argument("--json", help="also write the results as JSON to this path")
    a = ap.parse_args()

    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    padded = (a.vocab + 127) // 128 * 128
    model = Gpt(a.layers, a.hidden, a.heads, padded, a.seq, a.dropout)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    params = sum(p.numel() for p in model.parameters())
    print(f"PyTorch {torch.__version__} training step: {a.layers} layers, h {a.hidden}, {a.heads} heads, "
          f"V {a.vocab} (padded {padded}), s {a.seq}, b {a.micro_batch}, dropout {a.dropout}, "
          f"{params:,} parameters, {torch.get_num_threads()} threads")

    gen = torch.Generator().manual_seed(5)
    times, losses = [], []
    for i in range(a.warmup + a.iters):
        stream = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), generator=gen)
        ids, labels = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)  # ptdp zeroes its gradient buffer too
        loss = model(ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(t)
    med = statistics.median(times)
    print(f"step: {med * 1e3:.1f} ms median (best {min(times) * 1e3:.1f}, worst {max(times) * 1e3:.1f}) over "
          f"{a.iters} steps after {a.warmup} warm-up; {a.micro_batch * a.seq / med:.0f} tokens/s; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (ln V = {math.log(a.vocab):.4f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "torch_step", "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "vocab": a.vocab,
                       "padded_vocab": padded, "seq": a.seq, "micro_batch": a.micro_batch, "dropout": a.dropout,
                       "parameters": params, "warmup": a.warmup, "iters": a.iters,
                       "ms_all": [t * 1e3 for t in times], "ms_median": med * 1e3,
                       "ms_best": min(times) * 1e3, "ms_worst": max(times) * 1e3, "losses": losses}, f)
    return 0 if all(math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
