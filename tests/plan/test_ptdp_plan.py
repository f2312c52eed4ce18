#!/usr/bin/env python3
"""ptdp-plan end to end (ctest label "plan").

    test_ptdp_plan.py BIN_DIR

Checks: the paper's 145.6B row on 192 DGX A100 nodes with the paper's schedules (1F1B and
interleaved 1F1B; with ZB-H1 a t = 4 layout ties with t = 8 within 0.1 %) gives t = 8 with a
table, reasons, JSON and an SVG of the schedule; a cluster file and the presets are read; model presets (Llama 3 8B
on a DGX H100 node) with flags that override them in any order; impossible requests exit with
status 1 and say what is missing (memory short by how much, heads that rule out t); bad flags
exit with status 2 naming the flag and the value (an unknown preset, a t that splits a query
group).
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
PLAN = os.path.join(BIN, "ptdp-plan")
WORK = tempfile.mkdtemp(prefix="ptdp-plan-test-")
failures = []

MODEL_145B = ["--num-layers", "80", "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
              "--vocab-size", "51200", "--global-batch-size", "2304", "--fp16",
              # The paper's Megatron-LM stored the s x s probabilities (auto in fp16 with head
              # dim 128 is CUDA's flash attention, which keeps none).
              "--attention-backend", "unfused"]
PAPER_SCHEDULES = ["--pipeline-schedule", "1f1b"]  # 1F1B and interleaved 1F1B, as in the paper


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(args):
    p = subprocess.run([PLAN] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


# The paper's 145.6B row.
svg = os.path.join(WORK, "schedule.svg")
rc, out, err = run(["--cluster", "dgx-a100", "--num-gpus", "1536"] + MODEL_145B + PAPER_SCHEDULES +
                   ["--schedule-svg", svg])
check(rc == 0, f"145.6B: exit status {rc}, stderr {err}")
check("t = 8 keeps the tensor all-reduces inside a node" in out, "145.6B: the reason for t = 8 is given")
check("Ruled out:" in out and "crosses nodes" in out, "145.6B: larger t are ruled out as crossing nodes")
check(os.path.exists(svg) and open(svg).read().count("<rect") > 100, "145.6B: the schedule SVG is drawn")
rc, out, err = run(["--cluster", "dgx-a100", "--num-gpus", "1536", "--json"] + MODEL_145B + PAPER_SCHEDULES)
check(rc == 0, f"145.6B --json: exit status {rc}")
try:
    j = json.loads(out)
    best = j["layouts"][0]
    check(j["feasible"] and best["t"] == 8, f"145.6B --json: best t {best['t']}")
    check(abs(best["tflops_per_gpu"] - 148) / 148 < 0.25, f"145.6B: {best['tflops_per_gpu']} TFLOP/s vs 148")
    check(best["memory_bytes"]["total"] < 80 * 2**30, "145.6B: fits in 80 GiB")
    check(abs(j["model"]["parameters_formula"] / 1e9 - 145.6) < 0.05, "145.6B: parameters")
    # The same layout with the fused attention: the per-layer probabilities (5 a s^2 b / t bytes
    # with dropout) become 4 a s b / t bytes of row statistics, so it takes less memory.
    pin = ["--tensor-model-parallel-size", str(best["t"]), "--pipeline-model-parallel-size", str(best["p"]),
           "--micro-batch-size", str(best["b"])]
    rc2, out2, _ = run(["--cluster", "dgx-a100", "--num-gpus", "1536", "--json"] + MODEL_145B[:-2] +
                       ["--attention-backend", "fused"] + PAPER_SCHEDULES + pin)
    fused = json.loads(out2)["layouts"][0] if rc2 == 0 else None
    check(fused is not None and fused["memory_bytes"]["activations"] < best["memory_bytes"]["activations"],
          f"145.6B: the fused attention keeps fewer activation bytes ({fused and fused['memory_bytes']})")
except (ValueError, KeyError) as e:
    check(False, f"145.6B --json: not the expected JSON ({e}): {out[:200]}")

# A cluster file, a pinned layout, H100 preset.
cluster = os.path.join(WORK, "cluster.json")
with open(cluster, "w") as f:
    json.dump({"preset": "dgx-h100", "name": "my-h100", "nodes": 2, "memory_gib": 80}, f)
rc, out, err = run(["--cluster-file", cluster, "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads",
                    "16", "--seq-length", "2048", "--vocab-size", "50257", "--global-batch-size", "256", "--bf16",
                    "--tensor-model-parallel-size", "2", "--top", "3"])
check(rc == 0 and "cluster my-h100: 16 GPUs" in out, f"cluster file: rc {rc}, {out[:300]} {err}")
rows = [l for l in out.splitlines() if l.strip()[:1].isdigit() and len(l.split()) > 10]
check(len(rows) == 3 and all(r.split()[1] == "2" for r in rows), f"pinned t = 2, top 3: {rows}")
rc, out, err = run(["--list-clusters"])
check(rc == 0 and all(n in out for n in ("dgx-a100", "dgx-h100", "dgx-h200")), "--list-clusters")
rc, out, err = run(["--help"])
check(rc == 0 and "--global-batch-size" in out and "--cluster-file" in out, "--help")

# Model presets: Llama 3 8B on one DGX H100 node; flags override the preset whatever their order.
LLAMA = ["--cluster", "dgx-h100", "--num-gpus", "8", "--global-batch-size", "512", "--bf16",
         "--use-distributed-optimizer"]
rc, out, err = run(LLAMA + ["--model-preset", "llama-3-8b"])
check(rc == 0 and "Decoder of 8.03B parameters" in out and "g = 8 query groups" in out,
      f"llama-3-8b: rc {rc}, {out[:300]} {err}")
rc, out, err = run(["--num-layers", "16", "--seq-length", "4096"] + LLAMA + ["--model-preset", "Llama-3-8B", "--json"])
try:
    j = json.loads(out)
    m, best = j["model"], j["layouts"][0]
    check(rc == 0 and m["num_layers"] == 16 and m["seq_length"] == 4096 and m["hidden_size"] == 4096,
          f"flags before --model-preset override it: {m}")
    check(m["num_query_groups"] == 8 and m["swiglu"] and m["normalization"] == "RMSNorm"
          and m["position_embedding_type"] == "rope" and not m["add_bias_linear"], f"llama-3-8b's options: {m}")
    check(8 % best["t"] == 0 and 0 < best["mfu"] < 0.6, f"llama-3-8b layout: {best}")
except (ValueError, KeyError, IndexError) as e:
    check(False, f"llama-3-8b --json: not the expected JSON ({e}): {out[:200]} {err}")
rc, out, err = run(LLAMA + ["--model-preset", "llama-3-8b", "--json"])
try:
    check(json.loads(out)["model"]["parameters"] == 8030261248, "llama-3-8b: 8,030,261,248 parameters")
except (ValueError, KeyError) as e:
    check(False, f"llama-3-8b --json: {e}")
rc, out, err = run(["--help"])
check(all(f in out for f in ("--model-preset", "llama-3-8b", "--swiglu", "--num-query-groups", "--normalization")),
      "--help lists the presets and the Llama flags")

# The DeepSeek-V3 family: DeepSeek-V3 on 2048 H800s (docs/deepseek.md, "Planning DeepSeek-V3"),
# its own layout (p = 16 over 61 layers, e = 64 over 8 nodes) and the planner's choice.
DSV3 = ["--model-preset", "deepseek-v3", "--cluster", "hgx-h800", "--nodes", "256", "--global-batch-size", "15360",
        "--bf16", "--use-distributed-optimizer"]
rc, out, err = run(DSV3 + ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "16",
                           "--expert-model-parallel-size", "64", "--expert-tensor-parallel-size", "1",
                           "--micro-batch-size", "1", "--json"])
try:
    j = json.loads(out)
    m, best = j["model"], j["layouts"][0]
    check(rc == 0 and m["parameters"] == 682636487424 and m["mtp_num_layers"] == 1
          and m["multi_latent_attention"]["q_lora_rank"] == 1536 and m["num_moe_layers"] == 58,
          f"deepseek-v3: the preset's model: {m}")
    check(best["t"] == 1 and best["p"] == 16 and best["d"] == 128 and best["expert_model_parallel"] == 64
          and sum(best["stage_layers"]) == 61 and 0 < best["mfu"] < 0.6, f"deepseek-v3: DeepSeek's layout: {best}")
except (ValueError, KeyError, IndexError) as e:
    check(False, f"deepseek-v3 --json: not the expected JSON ({e}): {out[:300]} {err}")
rc, out, err = run(DSV3 + ["--top", "1"])
check(rc == 0 and "multi-latent attention (q_lora_rank 1536" in out and "1 MTP module on the last stage" in out
      and "YaRN x40" in out, f"deepseek-v3: the model line: rc {rc}, {out[:400]} {err}")
rc, out, err = run(["--help"])
check(all(f in out for f in ("deepseek-v3", "kimi-k2", "--multi-latent-attention", "--q-lora-rank", "--mtp-num-layers",
                             "--rope-type", "hgx-h800")), "--help lists the DeepSeek presets and flags")

# MoE presets through the tool (the C API's plan options carry the MoE fields and the e / etp
# pins; they once dropped them and planned Mixtral as a dense 7.24B model).
MIXTRAL = ["--cluster", "dgx-h100", "--num-gpus", "64", "--global-batch-size", "512", "--bf16",
           "--use-distributed-optimizer", "--model-preset", "mixtral-8x7b"]
rc, out, err = run(MIXTRAL)
check(rc == 0 and "Decoder of 46.70B parameters" in out and "MoE: 32 of 32 layers with 8 experts" in out
      and "12879925248 active per token" in out and "--expert-model-parallel-size" in out,
      f"mixtral-8x7b: rc {rc}, {out[:400]} {err}")
rc, out, err = run(MIXTRAL + ["--expert-model-parallel-size", "4", "--expert-tensor-parallel-size", "1", "--json"])
try:
    best = json.loads(out)["layouts"][0]
    check(rc == 0 and "e = 4, etp = 1" in best["why"], f"mixtral-8x7b pinned e = 4, etp = 1: {best['why']}")
    check(best["expert_model_parallel"] == 4 and best["expert_tensor_parallel"] == 1
          and best["seconds"]["expert_comm"] > 0, f"mixtral-8x7b --json: e, etp and the exchanges' time: {best}")
    check(best["parameters_exact"] == 46702792704, f"mixtral-8x7b: {best['parameters_exact']} parameters")
except (ValueError, KeyError, IndexError) as e:
    check(False, f"mixtral-8x7b --json: not the expected JSON ({e}): {out[:200]} {err}")
rc, out, err = run(MIXTRAL + ["--expert-model-parallel-size", "3"])
check(rc != 0 and "expert" in err, f"mixtral-8x7b with e = 3: rc {rc}, {err}")

# The optimizer (the C API's plan options carry it): Muon's one momentum buffer on the hidden
# weights shrinks the optimizer state below Adam's, and its Newton-Schulz time is reported.
LLAMA = ["--cluster", "dgx-h100", "--num-gpus", "8", "--model-preset", "llama-3-8b", "--global-batch-size", "512",
         "--bf16", "--use-distributed-optimizer", "--tensor-model-parallel-size", "2",
         "--pipeline-model-parallel-size", "1", "--micro-batch-size", "1", "--recompute-granularity", "full", "--json"]
rc_a, out_a, err_a = run(LLAMA)
rc_m, out_m, err_m = run(LLAMA + ["--optimizer", "muon"])
try:
    adam, muon = json.loads(out_a), json.loads(out_m)
    a, m = adam["layouts"][0], muon["layouts"][0]
    check(rc_a == 0 and rc_m == 0 and adam["model"]["optimizer"] == "adam" and muon["model"]["optimizer"] == "muon",
          f"--optimizer muon: rc {rc_a} {rc_m}, {err_a} {err_m}")
    check(m["memory_bytes"]["optimizer"] < a["memory_bytes"]["optimizer"]
          and m["seconds"]["newton_schulz"] > 0 and a["seconds"]["newton_schulz"] == 0
          and m["seconds"]["optimizer"] >= m["seconds"]["newton_schulz"],
          f"--optimizer muon: less state, Newton-Schulz time: {m['memory_bytes']} {m['seconds']}")
except (ValueError, KeyError, IndexError) as e:
    check(False, f"--optimizer muon --json: not the expected JSON ({e}): {out_m[:200]} {err_m}")
rc, out, err = run(LLAMA[:-1] + ["--optimizer", "muon"])
check(rc == 0 and "Newton-Schulz" in out and ", muon" in out, f"--optimizer muon's report: {out[-600:]} {err}")
rc, out, err = run(LLAMA + ["--optimizer", "lion"])
check(rc == 2 and "--optimizer" in err and "lion" in err, f"--optimizer lion: rc {rc}, {err}")

# Impossible requests: status 1 and what is missing.
rc, out, err = run(["--cluster", "dgx-a100", "--num-layers", "128", "--hidden-size", "25600", "--num-attention-heads",
                    "160", "--seq-length", "2048", "--vocab-size", "51200", "--global-batch-size", "3072", "--fp16"])
check(rc == 1 and "no layout fits in memory" in err and "short by" in err, f"1T on one node: rc {rc}, {err}")
rc, out, err = run(["--cluster", "dgx-a100", "--num-layers", "2", "--hidden-size", str(13 * 4096),
                    "--num-attention-heads", "13", "--seq-length", "2048", "--vocab-size", "51200",
                    "--global-batch-size", "8", "--bf16"])
check(rc == 1 and "num-attention-heads 13" in err and "short by" in err, f"13 heads: rc {rc}, {err}")
rc, out, err = run(["--cluster", "dgx-a100", "--num-gpus", "3"] + MODEL_145B)
check(rc == 1 and "no layout" in err, f"3 GPUs for 145.6B: rc {rc}, {err}")

# Bad flags: status 2, naming the flag and the value.
for args, words in [
    (["--global-batch-size", "8", "--num-layerz", "4"], ["--num-layerz", "did you mean --num-layers"]),
    (["--global-batch-size", "8", "--hidden-size", "abc"], ["--hidden-size", "'abc'"]),
    (["--num-layers", "4"], ["--global-batch-size is required"]),
    (["--global-batch-size", "8", "--fp16", "--bf16"], ["exclusive"]),
    (["--global-batch-size", "8", "--cluster", "dgx-z"], ["--cluster", "'dgx-z'", "dgx-a100"]),
    (["--global-batch-size", "8", "--gemm-efficiency", "-1"], ["--gemm-efficiency", "'-1'"]),
    (["--global-batch-size", "8", "--pipeline-schedule", "zb-x"], ["--pipeline-schedule", "'zb-x'", "dualpipev"]),
    (["--global-batch-size", "8", "--hidden-size", "100", "--num-attention-heads", "3"], ["--num-attention-heads 3"]),
    (["--global-batch-size", "8", "--micro-batch-size", "3"], ["--micro-batch-size 3"]),
    (["--global-batch-size", "8", "--model-preset", "llama-9"], ["--model-preset", "'llama-9'", "qwen2.5-7b"]),
    (["--global-batch-size", "8", "--model-preset", "qwen2.5-1.5b", "--tensor-model-parallel-size", "4"],
     ["--tensor-model-parallel-size 4", "--num-query-groups 2"]),
    (["--global-batch-size", "8", "--num-query-groups", "2"], ["--group-query-attention"]),
    (["--global-batch-size", "8", "--normalization", "rms"], ["--normalization", "'rms'", "RMSNorm"]),
]:
    rc, out, err = run(args)
    check(rc == 2 and all(w in err for w in words), f"bad flags {args}: rc {rc}, stderr {err}")
rc, out, err = run(["--global-batch-size", "8", "--cluster-file", os.path.join(WORK, "missing.json")])
check(rc == 1 and "missing.json" in err, f"missing cluster file: rc {rc}, {err}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all ptdp-plan checks passed")
