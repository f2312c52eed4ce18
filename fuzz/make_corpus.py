#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from real files of the
repository: the tokenizer fixtures of tests/data/fixtures, the command lines of the README's
main job and of the guides, the small checkpoint in fuzz/data (saved by ptdp-train: 1 layer,
h = 8, vocabulary 16, one SGD step), and indexed data sets and safetensors files written here
in the formats' own layout. Run from anywhere; rewrites the corpus folders."""
import hashlib
import json
import os
import shutil
import struct

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
fixtures = os.path.join(root, "tests", "data", "fixtures")
corpus = os.path.join(here, "corpus")
SPLIT = b"\xff\xfePTDP-FUZZ-SPLIT\xfe\xff"


def read(path):
    with open(path, "rb") as f:
        return f.read()


def seed(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def command_line(text):
    return "\n".join(text.split()) + "\n"


shutil.rmtree(corpus, ignore_errors=True)

# Flag parsers: the README's main job, the guides' examples, and a few of each kind of flag.
seed("fuzz_train_args", "main_job", command_line(
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers 4 --hidden-size 128 "
    "--num-attention-heads 4 --seq-length 128 --micro-batch-size 4 --global-batch-size 16 --train-iters 1000 "
    "--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 50 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 "
    "--hidden-dropout 0.1 --attention-dropout 0.1 --seed 1234 --text-file /usr/share/common-licenses/GPL-3 "
    "--tokenizer-type ByteLevel --split 95,5,0 --log-interval 50 --eval-interval 250 --eval-iters 4 "
    "--save out/checkpoint --save-interval 500 --log-json out/log.jsonl"))
seed("fuzz_train_args", "llama", command_line(
    "--model-preset llama-3.2-1b --num-layers 2 --bf16 --use-distributed-optimizer --sequence-parallel "
    "--num-layers-per-virtual-pipeline-stage 1 --pipeline-model-parallel-size 2 --overlap-grad-reduce "
    "--data-path 0.3 a 0.7 b --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json "
    "--eod-mask-loss --reset-position-ids --eod-token-id 3 --recompute-granularity selective"))
seed("fuzz_train_args", "gqa", command_line(
    "--normalization=RMSNorm --swiglu --position-embedding-type rope --use-rope-scaling "
    "--group-query-attention --num-query-groups 2 --kv-channels 16 --disable-bias-linear --qk-layernorm "
    "--qk-layernorm-across-heads "
    "--fp16 --loss-scale-window 100 --optimizer sgd --pipeline-schedule zero-bubble --mock-data "
    "--train-data-path x --valid-data-path y --test-data-path z --decoder-first-pipeline-num-layers 1"))
seed("fuzz_train_args", "moe", command_line(
    "--model-preset olmoe-1b-7b --num-layers 4 --num-experts 8 --moe-router-topk 2 --moe-layer-freq ([1]*1+[0]*1)*2 "
    "--moe-ffn-hidden-size 64 --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate "
    "--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3 "
    "--moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5 "
    "--moe-router-dtype fp32 --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-2 "
    "--moe-z-loss-coeff 1e-3 --moe-expert-capacity-factor 1.25 --moe-token-drop-policy position "
    "--moe-pad-expert-input-to-capacity --moe-token-dispatcher-type allgather --expert-model-parallel-size 4 "
    "--expert-tensor-parallel-size 1 --recompute-granularity selective --recompute-modules core_attn moe"))
seed("fuzz_train_args", "muon", command_line(
    "--optimizer muon --muon-momentum 0.95 --muon-nesterov --muon-use-nesterov --muon-num-ns-steps 5 "
    "--muon-coefficient-type simple --muon-fp32-matmul-prec medium --muon-scale-mode spectral "
    "--muon-extra-scale-factor 0.2 --muon-no-split-qkv --muon-tp-mode blockwise --muon-scalar-optimizer adam "
    "--qk-clip --qk-clip-threshold 50 --qk-clip-alpha 0.5 --swiglu --use-distributed-optimizer"))
seed("fuzz_train_args", "help", "--help\n")
seed("fuzz_plan_args", "guide", command_line(
    "--cluster dgx-h100 --num-gpus 8 --model-preset llama-3-8b --global-batch-size 512 --bf16 "
    "--use-distributed-optimizer"))
seed("fuzz_plan_args", "pinned", command_line(
    "--cluster cpu --num-gpus 4 --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 "
    "--global-batch-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 4 "
    "--recompute-granularity full --json --schedule-svg plan.svg"))
seed("fuzz_plan_args", "moe", command_line(
    "--cluster dgx-h100 --nodes 8 --model-preset mixtral-8x7b --global-batch-size 512 --bf16 "
    "--use-distributed-optimizer --num-experts 8 --moe-router-topk 2 --moe-layer-freq [1,0]*16 "
    "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1"))
seed("fuzz_plan_args", "muon", command_line(
    "--cluster dgx-h100 --num-gpus 8 --model-preset llama-3-8b --global-batch-size 512 --bf16 "
    "--use-distributed-optimizer --optimizer muon --muon-num-ns-steps 6 --muon-no-split-qkv"))
seed("fuzz_plan_args", "list", "--list-clusters\n")
seed("fuzz_preprocess_args", "guide", command_line(
    "--input corpus.jsonl more.jsonl.gz --json-keys text --output-prefix data/corpus "
    "--tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt --append-eod --workers 8"))
seed("fuzz_preprocess_args", "merge", command_line("--datasets a b c --output-prefix merged"))
seed("fuzz_preprocess_args", "merge_dir", command_line("--input dir --output-prefix merged"))

# Cluster files: what ptdp-plan --json prints for a preset, and a partial one over a preset.
seed("fuzz_cluster", "dgx_h100.json", json.dumps({
    "elementwise_bandwidth_gbs": 0.0, "gemm_efficiency": 0.5, "gemm_table_16bit": "h100-16bit",
    "gemm_table_fp32": "h100-tf32", "gpus_per_node": 8, "inter_node_bandwidth_gbs": 45.0,
    "inter_node_latency_us": 20.0, "intra_node_bandwidth_gbs": 360.0, "intra_node_latency_us": 10.0,
    "memory_bandwidth_gbs": 2680.0, "memory_gib": 79.6474609375, "memory_reserve_gib": 3.0, "name": "dgx-h100",
    "nodes": 1, "peak_tflops_16bit": 989.0, "peak_tflops_fp32": 495.0}, indent=1))
seed("fuzz_cluster", "partial.json", json.dumps({"preset": "dgx-a100", "nodes": 4, "name": "mine",
                                                 "gemm_table_16bit": ""}))


# Indexed data sets: the MMIDIDX layout (core/data/indexed_dataset.h) in several dtypes.
def indexed(docs, code, fmt):
    lengths, pointers, doc_index, data, at = [], [], [0], b"", 0
    for doc in docs:
        for seq in doc:
            b = b"".join(struct.pack("<" + fmt, t) for t in seq)
            lengths.append(len(seq))
            pointers.append(at)
            at += len(b)
            data += b
        doc_index.append(len(lengths))
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(doc_index))
    idx += struct.pack("<%di" % len(lengths), *lengths) + struct.pack("<%dq" % len(pointers), *pointers)
    idx += struct.pack("<%dq" % len(doc_index), *doc_index)
    return idx + SPLIT + data


seed("fuzz_indexed_dataset", "uint16", indexed([[[1, 2, 3], [4, 5]], [[6]], [[7, 8, 9, 10]]], 8, "H"))
seed("fuzz_indexed_dataset", "int32", indexed([[[100000, 2]], [[3, 4, 5]]], 4, "i"))
seed("fuzz_indexed_dataset", "uint8", indexed([[list(b"hello")], [list(b"world")], []], 1, "B"))
seed("fuzz_indexed_dataset", "int64", indexed([[[1, 2**31 - 1]]], 5, "q"))

# safetensors: the checkpoint shard, and small files in the writer's layout.
shard = read(os.path.join(here, "data", "model_tp00_pp00.safetensors"))
seed("fuzz_safetensors", "shard.safetensors", shard)


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


seed("fuzz_safetensors", "mixed.safetensors", safetensors([
    ("w", "F32", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6)),
    ("b", "BF16", [3], struct.pack("<3H", 0x3f80, 0x4000, 0xc040)),
    ("h", "F16", [1, 2], struct.pack("<2H", 0x3c00, 0x4000)),
    ("d", "F64", [], struct.pack("<d", 0.5)),
    ("i", "I64", [2], struct.pack("<2q", 1, -1)),
    ("m", "BOOL", [0, 4], b"")], {"format": "pt"}))

# Checkpoints: the saved metadata.json; manifests in sha256sum's text and binary modes.
ckpt_md = read(os.path.join(here, "data", "metadata.json"))
seed("fuzz_checkpoint_metadata", "metadata.json", ckpt_md)
shard_hash = hashlib.sha256(shard).hexdigest()
seed("fuzz_checkpoint_manifest", "text_mode", b"1\n" + SPLIT + b"@METADATA@  metadata.json\n")
seed("fuzz_checkpoint_manifest", "binary_mode",
     b"  1 \n" + SPLIT + b"@METADATA@ *metadata.json\n" + shard_hash.upper().encode() + b"  empty\n")

# Tokenizers: the fixtures of tests/data/fixtures with a text to encode.
text = "Hello, world! <|endoftext|> It's 2024: ünïcödé, 漢字, \t\n  spaces and emoji \U0001F600.".encode()
seed("fuzz_bpe_tokenizer", "gpt2", read(os.path.join(fixtures, "tokenizer_gpt2_vocab.json")) + SPLIT +
     read(os.path.join(fixtures, "tokenizer_gpt2_merges.txt")) + SPLIT + text)
for name in ("llama3", "qwen2"):
    seed("fuzz_hf_tokenizer", name, read(os.path.join(fixtures, "tokenizer_%s.json" % name)) + SPLIT + text)
seed("fuzz_hf_tokenizer", "llama3_config", read(os.path.join(fixtures, "tokenizer_llama3.json")) + SPLIT + text +
     SPLIT + json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}}).encode())
seed("fuzz_sentencepiece_tokenizer", "sp_bpe", read(os.path.join(fixtures, "tokenizer_sp_bpe.model")) + SPLIT +
     text + b" <EOD> <s> </s>")
