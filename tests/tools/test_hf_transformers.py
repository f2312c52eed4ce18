#!/usr/bin/env python3
"""Hugging Face checkpoints against the reference implementation, transformers (ctest labels
"tools;checkpoint;python;mpi").

    test_hf_transformers.py BIN_DIR PROBE CASE

Small random models are made at test time with transformers (PyPI, in the test venv
/opt/ptdp-test-venv that scripts/install-deps.sh creates with --system-site-packages, so that
Debian's python3-torch serves it) and saved with save_pretrained(safe_serialization=True). CASE:

  gpt2       GPT2LMHeadModel (n_layer 2, n_embd 64, n_head 4, vocab 101, n_positions 32), stored
             as fp32, as bf16, sharded (max_shard_size) and as the base GPT2Model (no
             "transformer." prefix): ptdp's logits (PROBE: ptdp_hf_load + ptdp_model_logits) at
             t = 1 and under mpiexec -n 2 at t = 2 equal transformers' to 1e-5 of their scale
  llama      LlamaForCausalLM with grouped-query attention (untied, tied, Llama 3.1 rope_scaling),
             Qwen2ForCausalLM (qkv bias) and MistralForCausalLM: the same at t = 1 and t = 2
  roundtrip  Hugging Face -> ptdp checkpoint (ptdp-convert at (t, p) = (2, 2) under mpiexec
             -n 4) -> Hugging Face (ptdp-convert): the same files, byte for byte (tensors, the
             shards Hugging Face's max_shard_size makes, the index), every config field back,
             and transformers loads the export to the same logits, for fp32, bf16 and sharded
             GPT-2, Llama, Qwen2 and Mistral models
  layouts    a ptdp checkpoint saved by ptdp-train at (2, 2, 1) exported by ptdp-convert on one
             process and at (2, 2) under mpiexec -n 4: the same files byte for byte; transformers
             loads the export and gives ptdp's logits (needs transformers only for that part)
  finetune   a Llama-shaped model trained briefly with torch on the GPL text is imported
             (ptdp-convert) and fine-tuned with ptdp-train --finetune --load at t = 2: it starts
             at iteration 1 from the imported weights (its first loss is the torch model's, far
             below a fresh model's), plain --load refuses a checkpoint without optimizer state,
             the loss falls, and the fine-tuned model exported to Hugging Face has a lower loss
             in transformers too
  generate   ptdp-generate --load on models just imported from Hugging Face (Llama and GPT-2)
             continues a prompt greedily with the tokens transformers' model picks (argmax of
             its logits, token by token: generate(do_sample=False) without stopping criteria);
             with a tokenizer.json in the Hugging Face directory, ptdp-convert keeps it beside the
             checkpoint and ptdp-generate --prompt TEXT prints the text tokenizers decodes from
             that greedy continuation, stopped at the end of document

  llama_v5   transformers 5.25 (the reference venv /opt/ptdp-ref-venv), which writes RoPE settings
             only in rope_parameters: Llama with rope_theta 500000 (issue 39: it was imported with
             10000), Llama 3.1 scaling, Qwen2, Mistral: logits parity at t = 1 and t = 2
  roundtrip_v5  the round trip of transformers 5.25's files, byte for byte
  yarn_v5    YaRN rope_parameters (Qwen2, Llama with mscale/mscale_all_dim and truncate false, and
             transformers 4's rope_scaling spelling): logits parity at t = 1 and t = 2, round trips
  moe_parity, moe_roundtrip, moe_finetune, moe_generate
             Mixtral, Qwen2-MoE (a dense layer, the gated shared expert) and Qwen3-MoE (q/k norms)
             of transformers 5.25, whose save_pretrained writes the experts one by one as on the
             hub: logits parity at (t, e, etp) = (1, 1), (2, 1), (1, 2), (2, 2, 1) and (2, 2, 2)
             (PROBE E ETP); round trips through ptdp-convert with the experts over e = 2 (with and
             without t = 2), byte for byte with transformers' shards; a fine-tune of each class
             with ptdp-train --finetune (one process, e = 2, t = 2 with e = 2) whose export's
             logits in transformers are ptdp's; greedy generation against generate()
  moe_olmoe_parity, moe_olmoe_roundtrip, moe_olmoe_finetune, moe_olmoe_generate
             the same for OlmoeForCausalLM (q_norm and k_norm over the whole query and key
             projections, norm_topk_prob false and true); the fine-tune runs at t = 2

  deepseek_v3_parity, deepseek_v2_parity, deepseek_v3_roundtrip, deepseek_v2_roundtrip,
  deepseek_finetune
             DeepseekV3ForCausalLM (interleaved RoPE rows, groups, a random e_score_correction_bias; and
             rotate-half RoPE with YaRN, tied) and DeepseekV2ForCausalLM (V2-Lite's shape with greedy
             routing; q_lora_rank with group_limited_greedy) of transformers 5.25: logits parity at
             t = 1 and at t = 2 with e = 2 (and V3's logits change when rope_interleave is flipped, so
             the RoPE-row permutation is what makes them equal); the hub's MTP layer (dense, and MoE
             as in V3) imported into ptdp's MTP module: its mtp_1 loss equals DeepSeek's MTP layer in
             torch at t = 1 and 2 (e = 2 for MoE); round trips through ptdp-convert at t = 2, e = 2 in
             fp32 and bf16 sharded, and with the MTP layers, byte for byte; a fine-tune of an imported
             V3 (e = 2) and V2-Lite (one process) with ptdp-train --finetune

A case that needs torch or transformers exits 77 (ctest: skipped) with the reason when they are
missing; "layouts" then checks what it can without them.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

# The cases ending in _v5 and the moe_ cases compare with transformers 5 (the reference venv,
# which also has the MoE classes as the hub stores them); the others with transformers 4.
V5_CASE = sys.argv[3].endswith("_v5") or sys.argv[3].startswith("moe_") or sys.argv[3].startswith("deepseek_")
VENV = "/opt/ptdp-ref-venv" if V5_CASE else "/opt/ptdp-test-venv"
if V5_CASE and not os.path.exists(os.path.join(VENV, "bin", "python")):
    print(f"SKIP: case {sys.argv[3]} needs transformers 5 in {VENV}; scripts/install-deps.sh makes it")
    sys.exit(77)
if os.path.exists(os.path.join(VENV, "bin", "python")) and os.path.realpath(sys.prefix) != os.path.realpath(VENV) \
        and not os.environ.get("PTDP_HF_TEST_IN_VENV"):
    python = os.path.join(VENV, "bin", "python")
    os.execve(python, [python] + sys.argv, dict(os.environ, PTDP_HF_TEST_IN_VENV="1"))

BIN, PROBE, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
CONVERT = os.path.join(BIN, "ptdp-convert")
TRAIN = os.path.join(BIN, "ptdp-train")
GENERATE = os.path.join(BIN, "ptdp-generate")
GPL = "/usr/share/common-licenses/GPL-3"
WORK = tempfile.mkdtemp(prefix="ptdp-hf-test-")
failures = []

try:
    import numpy as np
    import torch
    import transformers
    from safetensors import safe_open
    MISSING = None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
except ImportError as e:  # reported by need_transformers()
    MISSING = str(e)


def need_transformers():
    if MISSING:
        print(f"SKIP: case {CASE} needs torch, transformers and safetensors ({MISSING}); scripts/install-deps.sh "
              f"installs Debian's python3-torch and transformers into {VENV}")
        shutil.rmtree(WORK, ignore_errors=True)
        sys.exit(77)


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(cmd, np=None, timeout=300, expect_ok=True):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if np is not None:
        cmd = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", str(np)] + cmd
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout)
    if expect_ok and p.returncode != 0:
        print(" ".join(cmd))
        print(p.stdout)
        print(p.stderr)
        raise SystemExit(f"{os.path.basename(cmd[0] if np is None else cmd[5])} failed with status {p.returncode}")
    return p


# ---------------------------------------------------------------------------------------------
# Models made with transformers

def randomize(model, seed, scale=0.15):
    """Every tensor random (norm weights around 1), so that a value in the wrong place shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight") or ".ln_" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(scale * noise)
    return model


def make(kind, seed=0, **overrides):
    T = transformers
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, attn_implementation="eager")
    if kind == "gpt2":
        cfg = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=101, n_positions=32, attn_implementation="eager")
        cfg.update(overrides)
        return randomize(T.GPT2LMHeadModel(T.GPT2Config(**cfg)), seed).eval()
    moe = dict(num_experts_per_tok=2)
    if kind == "mixtral":
        common.update(moe, num_local_experts=4)
    elif kind == "olmoe":  # intermediate_size is the experts' width
        common.update(moe, num_experts=4, intermediate_size=48, norm_topk_prob=False)
    elif kind in ("deepseek_v3", "deepseek_v2"):  # multi-latent attention: a key and value per head
        common.update(num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                      kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                      first_k_dense_replace=1)
        if kind == "deepseek_v3":
            common.update(q_lora_rank=24, n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5)
        else:
            common.update(q_lora_rank=None, n_shared_experts=2, topk_method="greedy")
    elif kind in ("qwen2_moe", "qwen3_moe"):
        common.update(moe, num_experts=4, moe_intermediate_size=32, norm_topk_prob=False)
        if kind == "qwen2_moe":
            common.update(shared_expert_intermediate_size=40)
    common.update(overrides)
    cls = {"llama": (T.LlamaConfig, T.LlamaForCausalLM), "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM),
           "mistral": (T.MistralConfig, T.MistralForCausalLM),
           "mixtral": (getattr(T, "MixtralConfig", None), getattr(T, "MixtralForCausalLM", None)),
           "qwen2_moe": (getattr(T, "Qwen2MoeConfig", None), getattr(T, "Qwen2MoeForCausalLM", None)),
           "qwen3_moe": (getattr(T, "Qwen3MoeConfig", None), getattr(T, "Qwen3MoeForCausalLM", None)),
           "olmoe": (getattr(T, "OlmoeConfig", None), getattr(T, "OlmoeForCausalLM", None)),
           "deepseek_v2": (getattr(T, "DeepseekV2Config", None), getattr(T, "DeepseekV2ForCausalLM", None)),
           "deepseek_v3": (getattr(T, "DeepseekV3Config", None), getattr(T, "DeepseekV3ForCausalLM", None))}[kind]
    model = randomize(cls[1](cls[0](**common)), seed)
    # DeepSeek-V3's e_score_correction_bias is a buffer (zeros): random, so that it changes experts.
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
    return model.eval()


def save(model, path, dtype=None, shard=None):
    m = model if dtype is None else model.to(dtype)
    kwargs = dict(safe_serialization=True)
    if shard:
        kwargs["max_shard_size"] = shard
    m.save_pretrained(path, **kwargs)
    if dtype is not None:
        model.to(torch.float32)
    return path


def hf_logits(path_or_model, tokens):
    model = path_or_model
    if isinstance(path_or_model, str):
        model = transformers.AutoModelForCausalLM.from_pretrained(path_or_model, torch_dtype=torch.float32,
                                                                  attn_implementation="eager").eval()
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


def ptdp_logits(path, tokens, t, e=1, etp=0):
    """The probe's logits at tensor-parallel size t, experts over e ranks and etp (0: t), on the
    fewest ranks that hold the layout (d = ranks / t)."""
    tok = os.path.join(WORK, "tokens.i32")
    out = os.path.join(WORK, "logits.f32")
    np.asarray(tokens, dtype=np.int32).tofile(tok)
    b, s = np.asarray(tokens).shape
    ranks = max(t, e * (etp or t))
    run([PROBE, path, tok, str(b), str(s), str(t), out, str(e), str(etp)], np=ranks)
    return np.fromfile(out, dtype=np.float32).reshape(b, s, -1)


def tokens_for(vocab, batch, seq, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, size=(batch, seq)).tolist()


def parity(name, path, reference, tokens, ts=(1, 2), min_scale=0.5, layouts=None):
    """ptdp's logits against transformers' at each t of ts, or at each (t, e, etp) of layouts."""
    for t, e, etp in layouts or [(t, 1, 0) for t in ts]:
        where = f"t = {t}" + (f", e = {e}, etp = {etp or t}" if e > 1 or etp else "")
        got = ptdp_logits(path, tokens, t, e, etp)
        scale = float(np.max(np.abs(reference)))
        diff = float(np.max(np.abs(got - reference)))
        check(got.shape == reference.shape, f"{name} {where}: logits shape {got.shape} vs {reference.shape}")
        check(scale > min_scale, f"{name}: the reference logits are not trivial (max {scale})")
        check(diff <= 1e-5 * scale, f"{name} {where}: max |ptdp - transformers| = {diff:.3g}, scale {scale:.3g}")
        print(f"{name}: {where}: max |ptdp - transformers| = {diff:.2e} of max |logit| {scale:.2f} "
              f"({diff / scale:.1e} relative)")


# ---------------------------------------------------------------------------------------------
# Cases

def case_gpt2():
    need_transformers()
    model = make("gpt2", seed=1)
    tokens = tokens_for(101, 2, 32, 1)
    ref = hf_logits(model, tokens)
    parity("gpt2 fp32", save(model, os.path.join(WORK, "gpt2")), ref, tokens)
    parity("gpt2 sharded", save(model, os.path.join(WORK, "gpt2-sharded"), shard="40KB"), ref, tokens, ts=(2,))
    check(os.path.exists(os.path.join(WORK, "gpt2-sharded", "model.safetensors.index.json")), "gpt2 saved sharded")
    base = os.path.join(WORK, "gpt2-base")
    model.transformer.save_pretrained(base, safe_serialization=True)  # GPT2Model: no "transformer." prefix
    with open(os.path.join(base, "config.json")) as f:
        check(json.load(f)["architectures"] == ["GPT2Model"], "the base model's config")
    parity("gpt2 base model (no prefix)", base, ref, tokens, ts=(1,))
    bf = save(model, os.path.join(WORK, "gpt2-bf16"), dtype=torch.bfloat16)
    parity("gpt2 bf16", bf, hf_logits(bf, tokens), tokens)


def case_llama():
    need_transformers()
    tokens = tokens_for(97, 2, 32, 2)
    variants = [
        ("llama gqa untied", "llama", dict(tie_word_embeddings=False)),
        ("llama gqa tied", "llama", dict(tie_word_embeddings=True)),
        ("llama 3.1 rope scaling", "llama", dict(rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16})),
        ("qwen2 qkv bias", "qwen2", dict(tie_word_embeddings=False)),
        ("mistral", "mistral", dict()),
    ]
    for i, (name, kind, overrides) in enumerate(variants):
        model = make(kind, seed=10 + i, **overrides)
        path = save(model, os.path.join(WORK, name.replace(" ", "-")), shard="30KB" if i == 0 else None)
        parity(name, path, hf_logits(model, tokens), tokens)
    model = make("llama", seed=20)
    bf = save(model, os.path.join(WORK, "llama-bf16"), dtype=torch.bfloat16)
    parity("llama bf16", bf, hf_logits(bf, tokens), tokens, ts=(2,))


def files_of(path):
    return sorted(f for f in os.listdir(path) if f.endswith(".safetensors") or f.endswith(".index.json"))


def same_files(a, b, what):
    fa, fb = files_of(a), files_of(b)
    check(fa == fb, f"{what}: files {fb} vs transformers' {fa}")
    for f in set(fa) & set(fb):
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            da, db = x.read(), y.read()
        if f.endswith(".json"):
            ja, jb = json.loads(da), json.loads(db)
            check(ja["weight_map"] == jb["weight_map"], f"{what}: {f} weight map")
            check(ja["metadata"]["total_size"] == jb["metadata"]["total_size"], f"{what}: {f} total_size")
        else:
            check(da == db, f"{what}: {f} differs from transformers' file ({len(db)} vs {len(da)} bytes)")


def tensors_of(path):
    out = {}
    for f in files_of(path):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(path, f), framework="pt") as s:
                for k in s.keys():
                    out[k] = s.get_tensor(k)
    return out


def bits(t):
    """The tensor's bit patterns (so -0.0 and NaNs compare as stored)."""
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def case_roundtrip():
    need_transformers()
    variants = [
        ("gpt2 fp32", make("gpt2", seed=3), None, None, "fp32"),
        ("gpt2 bf16 sharded", make("gpt2", seed=4), torch.bfloat16, "40KB", "bf16"),
        ("llama gqa fp32 sharded", make("llama", seed=5, tie_word_embeddings=False), None, "30KB", "fp32"),
        ("llama tied bf16", make("llama", seed=6, tie_word_embeddings=True), torch.bfloat16, None, "bf16"),
        ("qwen2 fp32", make("qwen2", seed=7), None, None, "fp32"),
        ("mistral bf16 sharded", make("mistral", seed=8), torch.bfloat16, "25KB", "bf16"),
        ("qwen2 fp16", make("qwen2", seed=9), torch.float16, None, "fp16"),
    ]
    roundtrips(variants)


def roundtrips(variants, layout=("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"), ranks=4,
               back_layout=(), back_ranks=None, hf_dir=None, model_vocab=None):
    """Import at `layout` on `ranks` processes, export at `back_layout` on `back_ranks`; with
    `hf_dir`, the (one) variant's files are already there (its model None)."""
    for name, model, dtype, shard, flag in variants:
        tag = name.replace(" ", "-")
        a = hf_dir or save(model, os.path.join(WORK, tag), dtype=dtype, shard=shard)
        ckpt, b = os.path.join(WORK, tag + "-ptdp"), os.path.join(WORK, tag + "-back")
        out = run([CONVERT, "--from-hf", a, "--to-ptdp", ckpt] + list(layout), np=ranks).stdout
        check("ptdp-train flags for this model:" in out, f"{name}: ptdp-convert prints the ptdp-train flags:\n{out}")
        back = [CONVERT, "--from-ptdp", ckpt, "--to-hf", b, "--dtype", flag] + list(back_layout)
        if shard:
            back += ["--max-shard-size", shard]
        run(back, np=back_ranks)
        ta, tb = tensors_of(a), tensors_of(b)
        check(sorted(ta) == sorted(tb), f"{name}: tensor names {sorted(set(ta) ^ set(tb))}")
        bad = [k for k in ta if k in tb and not (ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape and
                                                  torch.equal(bits(ta[k]), bits(tb[k])))]
        check(not bad, f"{name}: tensors differ after HF -> ptdp -> HF: {bad[:5]}")
        same_files(a, b, name)
        with open(os.path.join(a, "config.json")) as f:
            ca = json.load(f)
        with open(os.path.join(b, "config.json")) as f:
            cb = json.load(f)
        differ = [k for k in ca if ca[k] != cb.get(k)]
        check(not differ, f"{name}: config fields {[(k, ca[k], cb.get(k)) for k in differ]}")
        tokens = tokens_for(model_vocab or model.config.vocab_size, 1, 16, 5)
        la, lb = hf_logits(a, tokens), hf_logits(b, tokens)
        check(np.array_equal(la, lb), f"{name}: transformers gives other logits for the export")
        print(f"roundtrip {name}: {len(ta)} tensors and {len(files_of(a))} files identical, "
              f"{len(ca)} config fields back")


def case_layouts():
    ckpt = os.path.join(WORK, "trained")
    flags = ["--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
             "--vocab-size", "256", "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "3e-3",
             "--train-iters", "4", "--text-file", GPL, "--tokenizer-type", "ByteLevel", "--log-interval", "1",
             "--eval-interval", "0", "--seed", "7", "--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size",
             "64", "--position-embedding-type", "rope", "--group-query-attention", "--num-query-groups", "2",
             "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--comm-timeout", "60"]
    run([TRAIN] + flags + ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                           "--save", ckpt], np=4)
    one, four = os.path.join(WORK, "export-111"), os.path.join(WORK, "export-221")
    run([CONVERT, "--from-ptdp", ckpt, "--to-hf", one])
    run([CONVERT, "--from-ptdp", ckpt, "--to-hf", four, "--tensor-model-parallel-size", "2",
         "--pipeline-model-parallel-size", "2", "--max-shard-size", "0"], np=4)
    names = sorted(os.listdir(one))
    check(names == sorted(os.listdir(four)) == ["config.json", "model.safetensors"], f"export files {names}")
    for n in names:
        with open(os.path.join(one, n), "rb") as x, open(os.path.join(four, n), "rb") as y:
            check(x.read() == y.read(), f"{n}: the export at (2, 2) differs from the export at (1, 1)")
    print("layouts: a (2,2,1) checkpoint exports to the same files at (1,1,1) and at (2,2,1)")
    # ptdp-convert's refusals: bad flags exit 2, failures 1, each naming what is wrong.
    for args, status, needle in [
            ([], 2, "give exactly one of --from-hf and --from-ptdp"),
            (["--from-hf", one], 2, "--to-ptdp"),
            (["--from-ptdp", ckpt, "--to-hf", one, "--dtype", "fp8"], 2, "is not one of fp32, bf16, fp16"),
            (["--from-ptdp", ckpt, "--to-hf", one, "--max-shard-size", "5XB"], 2, "is not a size"),
            (["--from-ptdp", ckpt, "--to-ptdp", one], 2, "--to-hf"),
            (["--from-hf", os.path.join(WORK, "nothing"), "--to-ptdp", os.path.join(WORK, "x")], 1,
             "config.json: cannot open the config: missing"),
            (["--from-ptdp", ckpt, "--to-hf", os.path.join(WORK, "as-gpt2"), "--architecture", "gpt2"], 1,
             "cannot be written as GPT2LMHeadModel"),
            (["--from-hf", one, "--to-ptdp", os.path.join(WORK, "y"), "--tensor-model-parallel-size", "3"], 2,
             "not a multiple of t 3"),
            (["--from-hf", one, "--to-ptdp", os.path.join(WORK, "y"), "--expert-model-parallel-size", "0"], 2,
             "--expert-model-parallel-size: '0' is not an integer >= 1"),
            (["--from-ptdp", ckpt, "--to-hf", os.path.join(WORK, "z"), "--expert-tensor-parallel-size", "2"], 2,
             "has no experts")]:
        p = run([CONVERT] + args, expect_ok=False)
        check(p.returncode == status and needle in p.stderr,
              f"ptdp-convert {args}: expected status {status} naming {needle!r}; got {p.returncode}, {p.stderr!r}")
    if MISSING:
        print(f"layouts: transformers is missing ({MISSING}): its logits on the export are not compared")
        return
    tokens = tokens_for(256, 2, 16, 9)
    parity("exported ptdp-trained llama", one, hf_logits(one, tokens), tokens, min_scale=0.1)


def train_with_torch(model, text, steps, seq, batch, lr, seed):
    torch.manual_seed(seed)
    data = torch.tensor(list(text), dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,))
        x = torch.stack([data[s:s + seq] for s in starts])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model


def text_loss(model_or_path, text, seq=32, windows=64):
    model = model_or_path
    if isinstance(model_or_path, str):
        model = transformers.AutoModelForCausalLM.from_pretrained(model_or_path, torch_dtype=torch.float32).eval()
    data = torch.tensor(list(text), dtype=torch.long)
    step = (len(data) - seq - 1) // windows
    x = torch.stack([data[i * step:i * step + seq] for i in range(windows)])
    with torch.no_grad():
        return float(model(x, labels=x).loss)


def case_finetune():
    need_transformers()
    text = open(GPL, "rb").read()
    model = make("llama", seed=30, vocab_size=256, intermediate_size=128, tie_word_embeddings=False)
    train_with_torch(model, text, steps=40, seq=32, batch=16, lr=3e-3, seed=0)
    hf_dir = save(model, os.path.join(WORK, "pretrained"))
    pretrained_loss = text_loss(model, text)
    ckpt = os.path.join(WORK, "imported")
    out = run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "32"]).stdout
    line = [l for l in out.splitlines() if l.startswith("ptdp-train flags for this model:")]
    check(len(line) == 1, "ptdp-convert prints the model's ptdp-train flags:\n" + out)
    model_flags = line[0].split(":", 1)[1].split()
    common = model_flags + ["--micro-batch-size", "4", "--global-batch-size", "8", "--text-file", GPL,
                            "--tokenizer-type", "ByteLevel", "--log-interval", "1", "--eval-interval", "0",
                            "--lr", "2e-3", "--lr-warmup-iters", "3", "--lr-decay-iters", "40", "--comm-timeout", "60",
                            "--tensor-model-parallel-size", "2"]
    # Without --finetune a checkpoint without optimizer state is refused.
    p = run([TRAIN] + common + ["--train-iters", "2", "--load", ckpt], np=2, expect_ok=False)
    check(p.returncode != 0 and "no optimizer state" in p.stdout + p.stderr,
          "plain --load refuses a checkpoint without optimizer state:\n" + (p.stdout + p.stderr)[-600:])
    log, saved = os.path.join(WORK, "finetune.jsonl"), os.path.join(WORK, "finetuned")
    p = run([TRAIN] + common + ["--train-iters", "40", "--finetune", "--load", ckpt, "--save", saved,
                                "--log-json", log], np=2)
    check("to fine-tune from iteration 0" in p.stdout, "the run says it fine-tunes:\n" + p.stdout[-800:])
    steps = {r["iteration"]: r for r in map(json.loads, open(log)) if "iteration" in r}
    check(sorted(steps) == list(range(1, 41)), f"iterations 1..40 logged, got {sorted(steps)[:3]}...")
    check(steps[1]["consumed_samples"] == 8, "consumed samples start from 0")
    fresh_log = os.path.join(WORK, "fresh.jsonl")
    run([TRAIN] + common + ["--train-iters", "1", "--log-json", fresh_log], np=2)
    fresh = [r for r in map(json.loads, open(fresh_log)) if "iteration" in r][0]["lm_loss"]
    first = steps[1]["lm_loss"]
    head = sum(steps[i]["lm_loss"] for i in range(1, 6)) / 5
    tail = sum(steps[i]["lm_loss"] for i in range(36, 41)) / 5
    check(abs(first - pretrained_loss) < 0.35,
          f"the first fine-tuning loss {first:.3f} is the imported model's (transformers: {pretrained_loss:.3f})")
    check(first < fresh - 1.0, f"the imported weights are used: first loss {first:.3f} vs a fresh model's {fresh:.3f}")
    check(tail < head - 0.1, f"the fine-tuning loss falls: mean of iterations 1-5 {head:.3f} -> 36-40 {tail:.3f}")
    back = os.path.join(WORK, "finetuned-hf")
    run([CONVERT, "--from-ptdp", saved, "--to-hf", back, "--hf-config", os.path.join(hf_dir, "config.json")])
    after = text_loss(back, text)
    check(after < pretrained_loss, f"transformers sees the fine-tuned export's loss fall: {pretrained_loss:.3f} -> "
                                   f"{after:.3f}")
    print(f"finetune: torch-trained model loss {pretrained_loss:.3f} (fresh ptdp model {fresh:.3f}); ptdp-train "
          f"--finetune at t = 2: {first:.3f} -> {steps[40]['lm_loss']:.3f} (means {head:.3f} -> {tail:.3f}); "
          f"the export in transformers: {after:.3f}")


def case_generate():
    need_transformers()
    for kind, vocab, seed in [("llama", 97, 40), ("gpt2", 101, 41)]:
        model = make(kind, seed=seed)
        hf_dir = save(model, os.path.join(WORK, kind + "-gen"))
        ckpt = os.path.join(WORK, kind + "-gen-ptdp")
        run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "32"])
        prompt = [5, 17, 3, 42, 8]
        p = run([GENERATE, "--load", ckpt, "--prompt-ids", " ".join(map(str, prompt)), "--max-new-tokens", "16",
                 "--top-k", "1"])
        ours = [int(x) for x in p.stdout.split()]
        # generate(do_sample=False) without its stopping criteria, written out: Debian's torch 1.13
        # cannot import torch.distributed.fsdp on Python 3.11, which generate() touches.
        theirs = list(prompt)
        with torch.no_grad():
            for _ in range(16):
                theirs.append(int(model(torch.tensor([theirs])).logits[0, -1].argmax()))
        check(ours == theirs, f"{kind}: ptdp-generate {ours} vs transformers' greedy decoding {theirs}")
        print(f"generate {kind}: {theirs[len(prompt):]} (both)")

    # Text in, text out: a Hugging Face directory with its tokenizer.json (a byte-level BPE trained
    # here on the GPL) imported by ptdp-convert, which keeps the tokenizer files in the checkpoint,
    # where ptdp-generate --prompt finds them; the text equals the greedy decoding of transformers
    # decoded by tokenizers, stopped at the end of document.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(GPL, encoding="utf-8") as f:
        tok.train_from_iterator(f.read().split("\n\n"), trainer)
    eod = tok.token_to_id("<|endoftext|>")
    model = make("llama", seed=43, vocab_size=tok.get_vocab_size())
    hf_dir = save(model, os.path.join(WORK, "text-gen"))
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": "<|endoftext|>", "bos_token": None}, f)
    ckpt = os.path.join(WORK, "text-gen-ptdp")
    c = run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "64"])
    check("kept the tokenizer's tokenizer.json, tokenizer_config.json" in c.stdout,
          f"ptdp-convert names the tokenizer files it keeps: {c.stdout!r}")
    for prompt in ["The licenses for most software", "Preamble"]:
        ids = tok.encode(prompt).ids
        p = run([GENERATE, "--load", ckpt, "--prompt", prompt, "--max-new-tokens", "24", "--top-k", "1"])
        seq = list(ids)
        with torch.no_grad():
            for _ in range(24):
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                if nxt == eod:
                    break
                seq.append(nxt)
        want = prompt + tok.decode(seq)[len(tok.decode(ids)):] + "\n"
        check(p.stdout == want, f"ptdp-generate --prompt {prompt!r}: {p.stdout!r} vs transformers + tokenizers {want!r}")
        print(f"generate text: {p.stdout.strip()!r} ({len(seq) - len(ids)} new tokens, both)")
    back = os.path.join(WORK, "text-gen-hf")
    run([CONVERT, "--from-ptdp", ckpt, "--to-hf", back])
    with open(os.path.join(hf_dir, "tokenizer.json"), "rb") as a, open(os.path.join(back, "tokenizer.json"), "rb") as b:
        check(a.read() == b.read(), "the export carries the imported tokenizer.json")


# ---------------------------------------------------------------------------------------------
# transformers 5: RoPE settings in rope_parameters, and the mixtures of experts

def case_llama_v5():
    """The defect of issue 39: a Llama saved by transformers 5 with rope_theta 500000 keeps it in
    rope_parameters only; ptdp's logits equal transformers' only when it reads it there."""
    need_transformers()
    tokens = tokens_for(97, 2, 32, 3)
    variants = [
        ("v5 llama rope_theta 500000", "llama", dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
        ("v5 llama 3.1 rope_parameters", "llama", dict(rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
        ("v5 qwen2", "qwen2", dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
        ("v5 mistral", "mistral", dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ]
    for i, (name, kind, overrides) in enumerate(variants):
        model = make(kind, seed=50 + i, **overrides)
        path = save(model, os.path.join(WORK, name.replace(" ", "-")))
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        check("rope_theta" not in config and "rope_parameters" in config,
              f"{name}: transformers {transformers.__version__} writes rope_parameters only: {sorted(config)}")
        parity(name, path, hf_logits(model, tokens), tokens)


def case_roundtrip_v5():
    need_transformers()
    roundtrips([
        ("v5 llama rope 500000 fp32", make("llama", seed=60, tie_word_embeddings=False, rope_parameters={
            "rope_type": "default", "rope_theta": 500000.0}), None, None, "fp32"),
        ("v5 llama 3.1 bf16 sharded", make("llama", seed=61, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), torch.bfloat16, "30KB", "bf16"),
        ("v5 qwen2 fp32", make("qwen2", seed=62), None, None, "fp32"),
    ])


# YaRN (issue 40): rope_parameters with rope_type "yarn" as transformers 5 writes them, and the
# transformers 4 spelling rope_scaling {"type": "yarn"}; original_max_position_embeddings 1024 puts
# the ramp between interpolation and extrapolation inside the 8 frequencies of the head dim 16.
YARN_VARIANTS = [
    ("yarn qwen2", "qwen2", dict(rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024})),
    ("yarn llama mscale untruncated", "llama", dict(tie_word_embeddings=False, rope_parameters={
        "rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0, "original_max_position_embeddings": 2048,
        "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.9, "mscale_all_dim": 0.7, "truncate": False})),
    ("yarn llama rope_scaling (transformers 4's spelling)", "llama", dict(rope_scaling={
        "type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024})),
]


def case_yarn_v5():
    """YaRN's frequencies and cos/sin amplitude: ptdp's logits equal transformers' at t = 1 and 2,
    and the round trip gives transformers' files and config back."""
    need_transformers()
    tokens = tokens_for(97, 2, 32, 4)
    for i, (name, kind, overrides) in enumerate(YARN_VARIANTS):
        model = make(kind, seed=90 + i, **overrides)
        check(model.model.rotary_emb.attention_scaling != 1.0,
              f"{name}: transformers scales cos and sin ({model.model.rotary_emb.attention_scaling})")
        path = save(model, os.path.join(WORK, name.replace(" ", "-")))
        parity(name, path, hf_logits(model, tokens), tokens)
        out = run([CONVERT, "--from-hf", path, "--to-ptdp", path + "-ptdp"]).stdout
        rope = model.config.rope_parameters
        want = f"--rope-type yarn --rotary-scaling-factor {rope['factor']:g}"
        check(want in out and "--no-yarn-correction-range-round-to-int" in out if rope.get("truncate") is False
              else want in out, f"{name}: ptdp-convert prints YaRN's ptdp-train flags ({want}):\n{out}")
    roundtrips([(name + " fp32", make(kind, seed=95 + i, **overrides), None, None, "fp32")
                for i, (name, kind, overrides) in enumerate(YARN_VARIANTS)])


MOE_KINDS = [("mixtral", dict()), ("qwen2_moe", dict(decoder_sparse_step=1, mlp_only_layers=[1])),
             ("qwen3_moe", dict(norm_topk_prob=True, head_dim=16))]


# (t, e, etp) of the MoE parity checks: serial, tensor parallel (with the sequence parallelism
# MoE needs), experts over two ranks alone, beside t = 2 with whole experts, and split over etp = t.
MOE_LAYOUTS = [(1, 1, 0), (2, 1, 0), (1, 2, 0), (2, 2, 1), (2, 2, 2)]


def need_moe_options():
    """The C API carries MoE options once ptdp_gpt_options has them (issue 39's front end)."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "capi", "include", "ptdp", "ptdp.h")
    with open(header) as f:
        if "num_experts" not in f.read():
            print(f"SKIP: case {CASE}: ptdp_gpt_options has no MoE fields yet, so ptdp_hf_read_options cannot "
                  "describe an MoE model")
            shutil.rmtree(WORK, ignore_errors=True)
            sys.exit(77)


def case_moe_parity():
    """Mixtral, Qwen2-MoE (a dense layer, the gated shared expert, pre-softmax routing) and
    Qwen3-MoE (q/k norms, renormalised top k): transformers 5 saves the experts tensor by tensor as
    on the hub; ptdp's logits equal transformers' at t = 1 and t = 2."""
    need_transformers()
    need_moe_options()
    tokens = tokens_for(97, 2, 16, 4)
    for i, (kind, overrides) in enumerate(MOE_KINDS):
        model = make(kind, seed=70 + i, tie_word_embeddings=False, **overrides)
        path = save(model, os.path.join(WORK, kind))
        names = sorted(tensors_of(path))
        check(any(".experts.0." in n for n in names), f"{kind}: the experts are saved one by one: {names[:8]}")
        parity(kind, path, hf_logits(model, tokens), tokens, layouts=MOE_LAYOUTS)


def case_moe_roundtrip():
    """HF -> ptdp (ptdp-convert with the experts over e = 2 ranks, with and without t = 2) -> HF
    (at e = 1, and at t = 2 e = 2): the tensors bit for bit and the files byte for byte, also
    where transformers 5 shards a layer's experts as one storage per projection (Mixtral's w1,
    w3 and w2 each above the 60KB shard, so in shards of their own)."""
    need_transformers()
    need_moe_options()
    t2 = ["--tensor-model-parallel-size", "2"]
    e2 = ["--expert-model-parallel-size", "2"]
    etp1 = ["--expert-tensor-parallel-size", "1"]
    cases = [  # kind and config, dtype, shard, --dtype, import layout, export layout
        (0, None, "60KB", "fp32", t2 + e2 + etp1, []),
        (1, torch.bfloat16, "60KB", "bf16", e2, t2 + e2 + etp1),
        (2, None, "60KB", "fp32", t2, e2),
        (0, torch.bfloat16, None, "bf16", e2, []),
    ]
    for i, (k, dtype, shard, flag, there, back) in enumerate(cases):
        kind, overrides = MOE_KINDS[k]
        roundtrips([(f"{kind} {flag}{' sharded' if shard else ''}", make(kind, seed=80 + i, **overrides), dtype,
                     shard, flag)], layout=there, ranks=2, back_layout=back, back_ranks=2 if back else None)


# (kind, config, ptdp-train's layout flags, processes): Qwen3-MoE on one process, Mixtral with
# its experts over e = 2, Qwen2-MoE (a dense layer, the gated shared expert) at t = 2 with
# sequence parallelism and e = 2 over whole experts.
MOE_FINETUNES = [
    ("qwen3_moe", dict(), [], None),
    ("mixtral", dict(), ["--expert-model-parallel-size", "2"], 2),
    ("qwen2_moe", dict(decoder_sparse_step=1, mlp_only_layers=[1]),
     ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--expert-model-parallel-size", "2",
      "--expert-tensor-parallel-size", "1"], 2),
]


def finetune_imported(kind, model, text, tokens, layout, ranks, iters, flags_shown, parity_layouts, label):
    """`model` (a transformers model) trained briefly with torch, imported with ptdp-convert (whose
    printed ptdp-train flags hold each of `flags_shown`) and fine-tuned `iters` iterations with
    ptdp-train --finetune at `layout` on `ranks`: the first loss is transformers' (within 0.35),
    more than 1 below a fresh model's, the loss falls (the first 5 against the last 5 by 0.05);
    the fine-tuned checkpoint exported to Hugging Face has the lower loss in transformers too, and
    transformers' logits of the export are ptdp's at `parity_layouts`."""
    train_with_torch(model, text, steps=iters, seq=32, batch=16, lr=3e-3, seed=0)
    hf_dir = save(model, os.path.join(WORK, kind + "-pretrained"))
    before = text_loss(model, text)
    ckpt = os.path.join(WORK, kind + "-imported")
    out = run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "32"]).stdout
    line = [l for l in out.splitlines() if l.startswith("ptdp-train flags for this model:")]
    check(len(line) == 1 and all(f in line[0] for f in flags_shown),
          f"{kind}: ptdp-convert prints the flags {flags_shown}:\n{out}")
    flags = shlex.split(line[0].split(":", 1)[1])
    common = flags + layout + ["--micro-batch-size", "4", "--global-batch-size", "8", "--text-file", GPL,
                               "--tokenizer-type", "ByteLevel", "--log-interval", "1", "--eval-interval", "0",
                               "--lr", "2e-3", "--comm-timeout", "60"]
    log, saved = os.path.join(WORK, kind + "-ft.jsonl"), os.path.join(WORK, kind + "-ft")
    run([TRAIN] + common + ["--train-iters", str(iters), "--finetune", "--load", ckpt, "--save", saved,
                            "--log-json", log], np=ranks)
    steps = {r["iteration"]: r for r in map(json.loads, open(log)) if "iteration" in r}
    check(sorted(steps) == list(range(1, iters + 1)),
          f"{kind}: iterations 1..{iters} logged, got {sorted(steps)[:3]}...")
    fresh_log = os.path.join(WORK, kind + "-fresh.jsonl")
    run([TRAIN] + common + ["--train-iters", "1", "--log-json", fresh_log], np=ranks)
    fresh = [r for r in map(json.loads, open(fresh_log)) if "iteration" in r][0]["lm_loss"]
    first = steps[1]["lm_loss"]
    head = sum(steps[j]["lm_loss"] for j in range(1, 6)) / 5
    tail = sum(steps[j]["lm_loss"] for j in range(iters - 4, iters + 1)) / 5
    check(abs(first - before) < 0.35, f"{kind}: the first fine-tuning loss {first:.3f} is the imported "
                                      f"model's ({before:.3f})")
    check(first < fresh - 1.0, f"{kind}: the imported weights are used: first loss {first:.3f} vs a fresh "
                               f"model's {fresh:.3f}")
    check(tail < head - 0.05, f"{kind}: the loss falls: {head:.3f} -> {tail:.3f}")
    back = os.path.join(WORK, kind + "-ft-hf")
    run([CONVERT, "--from-ptdp", saved, "--to-hf", back])
    after = text_loss(back, text)
    check(after < before, f"{kind}: transformers sees the fine-tuned export's loss fall: {before:.3f} -> "
                          f"{after:.3f}")
    parity(f"{kind} fine-tuned export", back, hf_logits(back, tokens), tokens, layouts=parity_layouts)
    print(f"{label} {kind} ({' '.join(layout) or 'one process'}): transformers-trained {before:.3f} "
          f"(fresh ptdp model {fresh:.3f}); ptdp-train --finetune {first:.3f} -> {steps[iters]['lm_loss']:.3f} "
          f"(means {head:.3f} -> {tail:.3f}); the export in transformers {after:.3f}")


def case_moe_finetune():
    """Each MoE class trained briefly with torch is imported (ptdp-convert) and fine-tuned by
    ptdp-train --finetune at its layout: it starts from the imported weights (the first loss is
    transformers', far below a fresh model's) and the loss falls; the fine-tuned checkpoint
    exported to Hugging Face has the lower loss in transformers too, and transformers' logits of
    the export are ptdp's (the fp32 export holds ptdp's parameters bit for bit, moe_roundtrip)."""
    need_transformers()
    need_moe_options()
    text = open(GPL, "rb").read()
    tokens = tokens_for(256, 2, 16, 6)
    for i, (kind, overrides, layout, ranks) in enumerate(MOE_FINETUNES):
        model = make(kind, seed=90 + i, vocab_size=256, tie_word_embeddings=False, **overrides)
        finetune_imported(kind, model, text, tokens, layout, ranks, iters=30, flags_shown=["--num-experts 4"],
                          parity_layouts=[(1, 1, 0), (1, 2, 0)], label="moe finetune")


def case_moe_generate():
    need_transformers()
    need_moe_options()
    for i, (kind, overrides) in enumerate(MOE_KINDS):
        model = make(kind, seed=95 + i, **overrides)
        hf_dir = save(model, os.path.join(WORK, kind + "-gen"))
        ckpt = os.path.join(WORK, kind + "-gen-ptdp")
        # Mixtral converted with its experts over e = 2 (the checkpoint's expert shards), the
        # others on one process; ptdp-generate loads either on one.
        experts = ["--expert-model-parallel-size", "2"] if kind == "mixtral" else []
        run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "32"] + experts,
            np=2 if experts else None)
        prompt = [5, 17, 3, 42, 8]
        p = run([GENERATE, "--load", ckpt, "--prompt-ids", " ".join(map(str, prompt)), "--max-new-tokens", "12",
                 "--top-k", "1"])
        ours = [int(x) for x in p.stdout.split()]
        theirs = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12, min_new_tokens=12,
                                eos_token_id=None, pad_token_id=0)[0].tolist()
        check(ours == theirs, f"{kind}: ptdp-generate {ours} vs transformers' greedy generate {theirs}")
        print(f"generate {kind}: {theirs[len(prompt):]} (both)")


# OLMoE: q_norm and k_norm over the whole query and key projections (--qk-layernorm-across-heads),
# the top k of the full softmax unrenormalised (norm_topk_prob false: --moe-router-pre-softmax), and
# renormalised (true). Its own cases beside the other MoE classes'.
OLMOE_VARIANTS = [("olmoe", dict()), ("olmoe renormalised", dict(norm_topk_prob=True, num_key_value_heads=4))]


def case_moe_olmoe_parity():
    need_transformers()
    need_moe_options()
    tokens = tokens_for(97, 2, 16, 6)
    for i, (name, overrides) in enumerate(OLMOE_VARIANTS):
        model = make("olmoe", seed=170 + i, tie_word_embeddings=False, **overrides)
        path = save(model, os.path.join(WORK, name.replace(" ", "-")))
        names = sorted(tensors_of(path))
        check(any(".mlp.experts.0.gate_proj.weight" in n for n in names) and
              any(".self_attn.q_norm.weight" in n for n in names),
              f"{name}: the experts are saved one by one, the q/k norms whole: {names[:8]}")
        parity(name, path, hf_logits(model, tokens), tokens)


def case_moe_olmoe_roundtrip():
    need_transformers()
    need_moe_options()
    roundtrips([("olmoe fp32", make("olmoe", seed=180), None, None, "fp32"),
                ("olmoe bf16 sharded", make("olmoe", seed=181, tie_word_embeddings=False, norm_topk_prob=True),
                 torch.bfloat16, "60KB", "bf16")],
               layout=("--tensor-model-parallel-size", "2"), ranks=2)


def case_moe_olmoe_finetune():
    """An OLMoE trained briefly with torch, fine-tuned by ptdp-train --finetune at t = 2 from the
    import: it starts from the imported weights, the loss falls, and falls in transformers too."""
    need_transformers()
    need_moe_options()
    text = open(GPL, "rb").read()
    model = make("olmoe", seed=190, vocab_size=256, tie_word_embeddings=False)
    train_with_torch(model, text, steps=30, seq=32, batch=16, lr=3e-3, seed=0)
    hf_dir = save(model, os.path.join(WORK, "olmoe-pretrained"))
    before = text_loss(model, text)
    ckpt = os.path.join(WORK, "olmoe-imported")
    out = run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "32"]).stdout
    flags = [l for l in out.splitlines() if l.startswith("ptdp-train flags for this model:")][0].split(":", 1)[1].split()
    check("--qk-layernorm-across-heads" in flags, f"the flags name OLMoE's q/k norms: {flags}")
    log, saved = os.path.join(WORK, "olmoe-ft.jsonl"), os.path.join(WORK, "olmoe-ft")
    run([TRAIN] + flags + ["--micro-batch-size", "4", "--global-batch-size", "8", "--text-file", GPL,
                           "--tokenizer-type", "ByteLevel", "--log-interval", "1", "--eval-interval", "0", "--lr",
                           "2e-3", "--train-iters", "30", "--finetune", "--load", ckpt, "--save", saved,
                           "--tensor-model-parallel-size", "2", "--sequence-parallel", "--log-json", log,
                           "--comm-timeout", "60"], np=2)
    steps = {r["iteration"]: r for r in map(json.loads, open(log)) if "iteration" in r}
    first = steps[1]["lm_loss"]
    head = sum(steps[i]["lm_loss"] for i in range(1, 6)) / 5
    tail = sum(steps[i]["lm_loss"] for i in range(26, 31)) / 5
    check(abs(first - before) < 0.35, f"the first fine-tuning loss {first:.3f} is the imported model's ({before:.3f})")
    check(tail < head - 0.05, f"the loss falls: {head:.3f} -> {tail:.3f}")
    back = os.path.join(WORK, "olmoe-ft-hf")
    run([CONVERT, "--from-ptdp", saved, "--to-hf", back])
    after = text_loss(back, text)
    check(after < before, f"transformers sees the fine-tuned OLMoE export's loss fall: {before:.3f} -> {after:.3f}")
    print(f"olmoe finetune (t = 2): torch {before:.3f}; ptdp-train {first:.3f} -> {steps[30]['lm_loss']:.3f}; "
          f"export {after:.3f}")


def case_moe_olmoe_generate():
    need_transformers()
    need_moe_options()
    for i, (name, overrides) in enumerate(OLMOE_VARIANTS):
        model = make("olmoe", seed=195 + i, **overrides)
        tag = name.replace(" ", "-")
        hf_dir = save(model, os.path.join(WORK, tag + "-gen"))
        ckpt = os.path.join(WORK, tag + "-gen-ptdp")
        run([CONVERT, "--from-hf", hf_dir, "--to-ptdp", ckpt, "--seq-length", "32"])
        prompt = [5, 17, 3, 42, 8]
        p = run([GENERATE, "--load", ckpt, "--prompt-ids", " ".join(map(str, prompt)), "--max-new-tokens", "12",
                 "--top-k", "1"])
        ours = [int(x) for x in p.stdout.split()]
        theirs = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12, min_new_tokens=12,
                                eos_token_id=None, pad_token_id=0)[0].tolist()
        check(ours == theirs, f"{name}: ptdp-generate {ours} vs transformers' greedy generate {theirs}")
        print(f"generate {name}: {theirs[len(prompt):]} (both)")


# DeepSeek-V2 and V3 (transformers 5.25): multi-latent attention, the first layer dense, shared
# experts, and the classes' routers. V3: q_lora_rank 24, sigmoid scores with a random non-zero
# e_score_correction_bias, 4 groups of which 2 are kept (top-2 group scores), routed_scaling_factor
# 2.5, RoPE rows interleaved (rope_interleave true, the hub's) or not, YaRN (mscale = mscale_all_dim,
# as the hub's V3) on the second. V2: V2-Lite's shape (no q_lora_rank, greedy) and
# group_limited_greedy with q_lora_rank; V2 always stores its RoPE rows interleaved.
YARN_DS = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
DEEPSEEK_VARIANTS = [
    ("deepseek_v3 interleaved", "deepseek_v3", dict()),
    ("deepseek_v3 yarn rotate-half", "deepseek_v3", dict(rope_interleave=False, rope_parameters=dict(YARN_DS),
                                                         tie_word_embeddings=True)),
    ("deepseek_v2 lite greedy", "deepseek_v2", dict()),
    ("deepseek_v2 group_limited_greedy", "deepseek_v2",
     dict(q_lora_rank=24, topk_method="group_limited_greedy", n_group=4, topk_group=2, routed_scaling_factor=2.0,
          first_k_dense_replace=0)),
]
# (t, e, etp): serial, and t = 2 with the experts over e = 2 ranks.
DEEPSEEK_LAYOUTS = [(1, 1, 0), (2, 2, 1)]


def need_deepseek():
    need_transformers()
    need_moe_options()
    if not hasattr(transformers, "DeepseekV3ForCausalLM"):
        print(f"SKIP: case {CASE}: transformers {transformers.__version__} has no DeepSeek-V2/V3 classes")
        shutil.rmtree(WORK, ignore_errors=True)
        sys.exit(77)


def deepseek_variants(prefix):
    return [(name, kind, o) for name, kind, o in DEEPSEEK_VARIANTS if kind == prefix]


def deepseek_parity(prefix):
    """ptdp's logits of the imported model equal transformers' at t = 1 and at t = 2 with e = 2. The
    interleaved RoPE rows matter: loaded without the permutation (rope_interleave flipped in
    config.json) the logits differ."""
    need_deepseek()
    tokens = tokens_for(97, 2, 16, 11)
    for i, (name, kind, overrides) in enumerate(deepseek_variants(prefix)):
        model = make(kind, seed=200 + i, **overrides)
        path = save(model, os.path.join(WORK, name.replace(" ", "-")))
        names = sorted(tensors_of(path))
        check(any(".mlp.experts.0.gate_proj.weight" in n for n in names) and
              any(".mlp.shared_experts.up_proj.weight" in n for n in names),
              f"{name}: the experts and shared experts are saved one by one: {names[:8]}")
        if kind == "deepseek_v3":
            bias = [n for n in names if n.endswith("gate.e_score_correction_bias")]
            check(len(bias) == 1, f"{name}: e_score_correction_bias saved for the one MoE layer: {bias}")
        ref = hf_logits(model, tokens)
        parity(name, path, ref, tokens, layouts=DEEPSEEK_LAYOUTS)
        if kind == "deepseek_v3":
            flipped = path + "-flipped"
            shutil.copytree(path, flipped)
            with open(os.path.join(flipped, "config.json")) as f:
                cfg = json.load(f)
            cfg["rope_interleave"] = not cfg.get("rope_interleave", True)
            with open(os.path.join(flipped, "config.json"), "w") as f:
                json.dump(cfg, f)
            got = ptdp_logits(flipped, tokens, 1)
            check(float(np.max(np.abs(got - ref))) > 1e-3 * float(np.max(np.abs(ref))),
                  f"{name}: the RoPE row permutation matters (the logits change when rope_interleave is flipped)")


def with_mtp(model, path, source_layer):
    """Writes `model` to `path` with one DeepSeek MTP layer (as the hub stores it, which transformers
    neither builds nor saves): enorm, hnorm, eh_proj, shared_head.norm random; embed_tokens and
    shared_head.head copies of the model's; the decoder layer a copy of layer `source_layer`'s
    tensors, perturbed, under model.layers.{L}."""
    from safetensors.torch import save_file
    save(model, path)
    tensors = tensors_of(path)
    L, h = model.config.num_hidden_layers, model.config.hidden_size
    g = torch.Generator().manual_seed(L * 7 + source_layer)
    mtp = f"model.layers.{L}."
    for name in list(tensors):
        if name.startswith(f"model.layers.{source_layer}."):
            t = tensors[name]
            tensors[mtp + name[len(f"model.layers.{source_layer}."):]] = (t + 0.01 * torch.randn(t.shape, generator=g)
                                                                          ).contiguous()
    for norm in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        tensors[mtp + norm] = 1.0 + 0.1 * torch.randn(h, generator=g)
    tensors[mtp + "eh_proj.weight"] = 0.15 * torch.randn(h, 2 * h, generator=g)
    tensors[mtp + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
    tensors[mtp + "shared_head.head.weight"] = tensors.get("lm_head.weight",
                                                           tensors["model.embed_tokens.weight"]).clone()
    os.remove(os.path.join(path, "model.safetensors"))
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_nextn_predict_layers"] = 1
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return path


def ptdp_mtp_loss(path, tokens, t, e=1):
    """The probe's mtp_1 loss of one training iteration on `tokens` (labels the next token), at
    tensor-parallel size t with the experts over e ranks (each expert whole)."""
    tok, out, mtp = (os.path.join(WORK, n) for n in ("mtp-tokens.i32", "mtp-logits.f32", "mtp.f32"))
    np.asarray(tokens, dtype=np.int32).tofile(tok)
    b, s = np.asarray(tokens).shape
    env = dict(os.environ, OMP_NUM_THREADS="1", PTDP_HF_PROBE_MTP_OUT=mtp)
    cmd = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", str(max(t, e)), PROBE, path, tok, str(b), str(s),
           str(t), out, str(e), "1" if e > 1 else "0"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"test_hf_probe (MTP) failed: {p.stderr[-2000:]}")
    return float(np.fromfile(mtp, dtype=np.float32)[0])


def torch_mtp_loss(model, path, tokens):
    """DeepSeek's MTP layer 1 in torch, from the tensors of `path`: position i takes the main model's
    final hidden state h_i and the embedding of token i + 1, eh_proj([enorm(emb); hnorm(h)]), the
    decoder layer, shared_head.norm, the head; its label is token i + 2 (Megatron's masked mean)."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m3
    cfg, L = model.config, model.config.num_hidden_layers
    stored = tensors_of(path)
    pre = f"model.layers.{L}."
    layer = m3.DeepseekV3DecoderLayer(cfg, L).eval()
    state = {k[len(pre):]: v for k, v in stored.items() if k.startswith(pre) and
             k[len(pre):].split(".")[0] in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")}
    if "mlp.experts.0.gate_proj.weight" in state:  # an MoE layer: transformers fuses its experts in memory
        E = cfg.n_routed_experts
        state["mlp.experts.gate_up_proj"] = torch.stack([torch.cat([state.pop(f"mlp.experts.{e}.gate_proj.weight"),
                                                                    state.pop(f"mlp.experts.{e}.up_proj.weight")])
                                                         for e in range(E)])
        state["mlp.experts.down_proj"] = torch.stack([state.pop(f"mlp.experts.{e}.down_proj.weight") for e in range(E)])
    layer.load_state_dict(state)
    norms = {}
    for n in ("enorm", "hnorm", "shared_head.norm"):
        norms[n] = m3.DeepseekV3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        norms[n].weight.data.copy_(stored[pre + n + ".weight"])
    x = torch.tensor(tokens, dtype=torch.long)
    b, s = x.shape
    with torch.no_grad():
        h = model.model(x).last_hidden_state
        nxt = torch.cat([x[:, 1:], torch.zeros(b, 1, dtype=torch.long)], dim=1)  # Megatron's roll, 0 past the end
        e = model.model.embed_tokens(nxt)
        z = torch.cat([norms["enorm"](e), norms["hnorm"](h)], dim=-1) @ stored[pre + "eh_proj.weight"].T
        pos = torch.arange(s)[None]
        mask = torch.full((s, s), float("-inf")).triu(1)[None, None]
        z = layer(z, attention_mask=mask, position_ids=pos, position_embeddings=model.model.rotary_emb(z, pos))
        logits = model.lm_head(norms["shared_head.norm"](z))
        labels = torch.cat([x[:, 2:], torch.full((b, 2), -100, dtype=torch.long)], dim=1)
        return float(torch.nn.functional.cross_entropy(logits.reshape(b * s, -1), labels.reshape(-1),
                                                       ignore_index=-100))


def case_deepseek_v3_parity():
    deepseek_parity("deepseek_v3")
    # Multi-token prediction: a dense DeepSeek-V3 (first_k_dense_replace past the MTP layer) with
    # the hub's MTP tensors imports them into ptdp's MTP module (the logits, which MTP does not
    # change, still transformers'); with MoE layers the MTP layer is MoE, refused by name.
    tokens = tokens_for(97, 2, 16, 13)
    dense = make("deepseek_v3", seed=230, first_k_dense_replace=3)
    path = with_mtp(dense, os.path.join(WORK, "v3-dense-mtp"), source_layer=1)
    parity("deepseek_v3 dense with an MTP layer", path, hf_logits(dense, tokens), tokens, layouts=[(1, 1, 0), (2, 1, 0)])
    out = run([CONVERT, "--from-hf", path, "--to-ptdp", path + "-ptdp"]).stdout
    check("--mtp-num-layers 1" in out, f"ptdp-convert imports the MTP layer:\n{out}")
    want = torch_mtp_loss(dense, path, tokens)
    for t in (1, 2):
        got = ptdp_mtp_loss(path, tokens, t)
        check(abs(got - want) <= 1e-5 * max(1.0, abs(want)),
              f"deepseek_v3 MTP loss at t = {t}: ptdp {got:.7f} vs DeepSeek's MTP layer in torch {want:.7f}")
        print(f"deepseek_v3 dense with an MTP layer: t = {t}: mtp_1 loss {got:.7f} (torch {want:.7f})")
    # DeepSeek-V3's own shape: MoE layers, so an MoE MTP layer (its router's expert bias included).
    moe = make("deepseek_v3", seed=231)
    path = with_mtp(moe, os.path.join(WORK, "v3-moe-mtp"), source_layer=1)
    check("model.layers.2.mlp.gate.e_score_correction_bias" in tensors_of(path), "the MTP layer is an MoE layer")
    parity("deepseek_v3 with an MoE MTP layer", path, hf_logits(moe, tokens), tokens, layouts=[(1, 1, 0), (2, 2, 1)])
    want = torch_mtp_loss(moe, path, tokens)
    for t, e in ((1, 1), (2, 2)):
        got = ptdp_mtp_loss(path, tokens, t, e)
        check(abs(got - want) <= 1e-5 * max(1.0, abs(want)),
              f"deepseek_v3 MoE MTP loss at t = {t}, e = {e}: ptdp {got:.7f} vs torch {want:.7f}")
        print(f"deepseek_v3 with an MoE MTP layer: t = {t}, e = {e}: mtp_1 loss {got:.7f} (torch {want:.7f})")
    # A dense decoder whose MTP layer DeepSeek makes MoE (first_k_dense_replace = num_hidden_layers):
    # ptdp's MTP layers are of the decoder's last layer's kind, so it is refused by name.
    odd = make("deepseek_v3", seed=233, first_k_dense_replace=2)
    path = with_mtp(odd, os.path.join(WORK, "v3-odd-mtp"), source_layer=1)
    p = run([CONVERT, "--from-hf", path, "--to-ptdp", path + "-ptdp"], expect_ok=False)
    check(p.returncode != 0 and "first_k_dense_replace" in p.stderr and "model.layers.2" in p.stderr,
          f"an MTP layer of another kind than the decoder's last is refused by name: {p.stderr[-400:]}")


def case_deepseek_v2_parity():
    deepseek_parity("deepseek_v2")


def deepseek_roundtrip(prefix):
    """HF -> ptdp (ptdp-convert at t = 2 with the experts over e = 2) -> HF: every tensor bit for bit
    under its name (the RoPE rows permuted back), the files byte for byte (also transformers 5's
    shards), every config field back (rope_interleave, the router's fields), transformers' logits
    of the export the same."""
    need_deepseek()
    layout = ("--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "2",
              "--expert-tensor-parallel-size", "1")
    variants = deepseek_variants(prefix)
    roundtrips([(f"{variants[0][0]} fp32", make(variants[0][1], seed=210, **variants[0][2]), None, None, "fp32"),
                (f"{variants[1][0]} bf16 sharded", make(variants[1][1], seed=211, **variants[1][2]), torch.bfloat16,
                 "40KB", "bf16")], layout=layout, ranks=2)


def case_deepseek_v3_roundtrip():
    deepseek_roundtrip("deepseek_v3")
    # The MTP layer's tensors (and its copies of the embedding and head) come back bit for bit.
    dense = make("deepseek_v3", seed=232, first_k_dense_replace=3)
    with_mtp(dense, os.path.join(WORK, "v3-dense-mtp"), source_layer=1)
    roundtrips([("deepseek_v3 dense with an MTP layer fp32", None, None, None, "fp32")],
               layout=("--tensor-model-parallel-size", "2"), ranks=2, hf_dir=os.path.join(WORK, "v3-dense-mtp"),
               model_vocab=97)
    moe = make("deepseek_v3", seed=234)
    with_mtp(moe, os.path.join(WORK, "v3-moe-mtp"), source_layer=1)
    roundtrips([("deepseek_v3 with an MoE MTP layer fp32", None, None, None, "fp32")],
               layout=("--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "2",
                       "--expert-tensor-parallel-size", "1"), ranks=2, hf_dir=os.path.join(WORK, "v3-moe-mtp"),
               model_vocab=97)


def case_deepseek_v2_roundtrip():
    deepseek_roundtrip("deepseek_v2")


def case_deepseek_finetune():
    """A DeepSeek-V3 (experts over e = 2) and a DeepSeek-V2-Lite (one process), each trained briefly
    with torch, imported with ptdp-convert and fine-tuned with ptdp-train --finetune: the first loss
    is transformers', far below a fresh model's, the loss falls, the fine-tuned export has the lower
    loss in transformers too and transformers' logits of it are ptdp's (the expert bias included,
    which ptdp's aux-loss-free balancing moved)."""
    need_deepseek()
    text = open(GPL, "rb").read()
    tokens = tokens_for(256, 2, 16, 12)
    for i, (kind, layout, ranks) in enumerate([("deepseek_v3", ["--expert-model-parallel-size", "2"], 2),
                                               ("deepseek_v2", [], None)]):
        model = make(kind, seed=220 + i, vocab_size=256)
        finetune_imported(kind, model, text, tokens, layout, ranks, iters=20,
                          flags_shown=["--multi-latent-attention", "--num-experts 8"], parity_layouts=[(1, 1, 0)],
                          label="deepseek finetune")


CASES = {"gpt2": case_gpt2, "llama": case_llama, "roundtrip": case_roundtrip, "layouts": case_layouts,
         "finetune": case_finetune, "generate": case_generate, "llama_v5": case_llama_v5,
         "roundtrip_v5": case_roundtrip_v5, "moe_parity": case_moe_parity, "moe_roundtrip": case_moe_roundtrip,
         "moe_finetune": case_moe_finetune, "moe_generate": case_moe_generate, "yarn_v5": case_yarn_v5}
CASES.update({"moe_olmoe_parity": case_moe_olmoe_parity, "moe_olmoe_roundtrip": case_moe_olmoe_roundtrip,
              "moe_olmoe_finetune": case_moe_olmoe_finetune, "moe_olmoe_generate": case_moe_olmoe_generate})
CASES.update({"deepseek_v3_parity": case_deepseek_v3_parity, "deepseek_v2_parity": case_deepseek_v2_parity,
              "deepseek_v3_roundtrip": case_deepseek_v3_roundtrip, "deepseek_v2_roundtrip": case_deepseek_v2_roundtrip,
              "deepseek_finetune": case_deepseek_finetune})

if __name__ == "__main__":
    if CASE not in CASES:
        raise SystemExit(f"unknown case {CASE}; one of {', '.join(CASES)}")
    try:
        CASES[CASE]()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"{CASE}: all checks passed")
