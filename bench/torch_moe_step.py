#!/opt/ptdp-ref-venv/bin/python
"""transformers' training step of the MoE model bench_gpt --moe times, for a ptdp/PyTorch ratio.

Builds Hugging Face's OlmoeForCausalLM (transformers 5) at OLMoE-1B-7B's layer shape, the run
`bench_gpt --moe` times: h 2048, 16 heads, 64 experts, top-8 (softmax over all experts, not
renormalised: norm_topk_prob false), expert ffn 1024 with SwiGLU, q/k RMSNorm, RoPE base 10000,
untied embeddings, no dropout, router aux-loss coefficient 0.01 (the loss is added as in
training), 1 layer, s 256, b 1 and a vocabulary of 4096 (padded to a multiple of 128 as ptdp pads
it) unless the flags say otherwise. --arch mixtral builds MixtralForCausalLM of the same shape
instead (renormalised top-k, no q/k norms). Trained by AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8,
weight decay 0.01, ptdp's defaults) with gradient clipping at 1.0, gradients zeroed in place
(ptdp zeroes its buffer); fp32 throughout. Each step draws new random token ids (labels are the
ids shifted by one). Prints the median, best and worst step in ms and tokens/s; --json writes them.

--experts-implementation picks transformers' expert kernels: eager (a Python loop over the
experts that received tokens, transformers' default), grouped_mm (torch._grouped_mm over all
experts) or batched_mm. bench/compare_torch_moe.sh runs it and bench_gpt --moe back to back.

Run with the reference interpreter: /opt/ptdp-ref-venv/bin/python bench/torch_moe_step.py.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import transformers


def build_model(a, padded_vocab):
    """OlmoeForCausalLM (or MixtralForCausalLM) of the shape the flags give, fp32, training mode."""
    common = dict(vocab_size=padded_vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.heads, max_position_embeddings=max(a.seq, 4096),
                  rms_norm_eps=1e-5, tie_word_embeddings=False, num_experts_per_tok=a.topk,
                  router_aux_loss_coef=0.01, output_router_logits=True, attention_dropout=0.0,
                  pad_token_id=None, bos_token_id=None, eos_token_id=None,  # no special ids in a tiny vocabulary
                  experts_implementation=a.experts_implementation, attn_implementation="sdpa")
    if a.arch == "olmoe":
        cfg = transformers.OlmoeConfig(intermediate_size=a.moe_ffn, num_experts=a.experts, norm_topk_prob=False,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
        model = transformers.OlmoeForCausalLM(cfg)
    else:
        cfg = transformers.MixtralConfig(intermediate_size=a.moe_ffn, num_local_experts=a.experts,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
        model = transformers.MixtralForCausalLM(cfg)
    return model.float().train()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=("olmoe", "mixtral"), default="olmoe")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--num-experts", dest="experts", type=int, default=64)
    ap.add_argument("--moe-router-topk", dest="topk", type=int, default=8)
    ap.add_argument("--moe-ffn-hidden-size", dest="moe_ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=4096, help="padded to a multiple of 128, as ptdp pads it")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: OMP_NUM_THREADS or the cores)")
    ap.add_argument("--experts-implementation", choices=("eager", "grouped_mm", "batched_mm"), default="eager",
                    help="transformers' expert kernels (eager: its default)")
    ap.add_argument("--fused-adamw", action="store_true",
                    help="torch.optim.AdamW(fused=True) instead of torch's default (foreach) implementation")
    ap.add_argument("--json", help="also write the results as JSON to this path")
    a = ap.parse_args()

    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    padded = (a.vocab + 127) // 128 * 128
    t0 = time.perf_counter()
    model = build_model(a, padded)
    setup_s = time.perf_counter() - t0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                            fused=True if a.fused_adamw else None)
    params = sum(p.numel() for p in model.parameters())
    tokens = a.micro_batch * a.seq
    print(f"PyTorch {torch.__version__}, transformers {transformers.__version__} training step: "
          f"{type(model).__name__}, {a.layers} layers, h {a.hidden}, {a.heads} heads, {a.experts} experts, "
          f"top-{a.topk}, expert ffn {a.moe_ffn}, V {a.vocab} (padded {padded}), s {a.seq}, b {a.micro_batch}, "
          f"{params:,} parameters, experts implementation {a.experts_implementation}, "
          f"{'fused' if a.fused_adamw else 'default'} AdamW, "
          f"{torch.get_num_threads()} threads; setup {setup_s:.1f} s")
    sys.stdout.flush()

    gen = torch.Generator().manual_seed(5)
    times, losses, parts = [], [], []  # parts: (forward, backward, clipping + AdamW) seconds per step
    for i in range(a.warmup + a.iters):
        ids = torch.randint(0, a.vocab, (a.micro_batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)  # ptdp zeroes its gradient buffer too
        # transformers shifts the labels itself: the forward runs on all s tokens as ptdp's does, the
        # loss has s - 1 targets per row (ptdp's s, from a stream of s + 1).
        out = model(input_ids=ids, labels=ids)
        t1 = time.perf_counter()
        out.loss.backward()  # the language-model loss plus router_aux_loss_coef x the aux loss
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        t = t3 - t0
        losses.append(out.loss.item())
        if i >= a.warmup:
            times.append(t)
            parts.append((t1 - t0, t2 - t1, t3 - t2))
    med = statistics.median(times)
    print(f"step: {med * 1e3:.1f} ms median (best {min(times) * 1e3:.1f}, worst {max(times) * 1e3:.1f}) over "
          f"{a.iters} steps after {a.warmup} warm-up; {tokens / med:.0f} tokens/s; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (ln V = {math.log(a.vocab):.4f})")
    split = [statistics.median(p[j] for p in parts) * 1e3 for j in range(3)]
    print(f"medians: forward {split[0]:.1f} ms, backward {split[1]:.1f} ms, clipping + AdamW {split[2]:.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "torch_moe_step", "torch": torch.__version__,
                       "transformers": transformers.__version__, "model": type(model).__name__,
                       "experts_implementation": a.experts_implementation, "fused_adamw": a.fused_adamw,
                       "threads": torch.get_num_threads(),
                       "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "num_experts": a.experts,
                       "topk": a.topk, "moe_ffn_hidden_size": a.moe_ffn, "vocab": a.vocab, "padded_vocab": padded,
                       "seq": a.seq, "micro_batch": a.micro_batch, "parameters": params, "setup_s": setup_s,
                       "warmup": a.warmup, "iters": a.iters, "ms_all": [t * 1e3 for t in times],
                       "ms_median": med * 1e3, "ms_best": min(times) * 1e3, "ms_worst": max(times) * 1e3,
                       "forward_ms": split[0], "backward_ms": split[1], "optimizer_ms": split[2],
                       "tokens_per_s": tokens / med, "losses": losses}, f)
    return 0 if all(math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
