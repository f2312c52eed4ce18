#!/usr/bin/env python3
"""ptdp-train and ptdp-generate with a tokenizer (ctest labels "data;tools").

A small GPT is trained with --tokenizer-type GPT2BPETokenizer (the committed fixture files) on an
indexed data set in which every other token is the end-of-document id, and the ones between run
over the whole vocabulary, so that it learns that the end of document follows every other token.
Then:
  - ptdp-train took the vocabulary size from the tokenizer (metadata.json records it);
  - ptdp-generate --prompt, with the tokenizer the checkpoint records, prints the prompt and stops
    at the end-of-document token at once (greedy), as it does with the tokenizer given by flags;
  - --prompt-ids still prints ids, the end-of-document ids included;
  - a checkpoint trained on mock data without a tokenizer refuses --prompt, naming why.

  test_tokenizer_generate.py BIN_DIR FIXTURES_DIR
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def write_indexed(prefix, documents):
    """Megatron's MMIDIDX data set (version 1, int32 tokens), one sequence per document."""
    with open(prefix + ".bin", "wb") as f:
        for d in documents:
            f.write(struct.pack(f"<{len(d)}i", *d))
    pointers, at = [], 0
    for d in documents:
        pointers.append(at)
        at += 4 * len(d)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 4))
        f.write(struct.pack("<Q", len(documents)) + struct.pack("<Q", len(documents) + 1))
        f.write(struct.pack(f"<{len(documents)}i", *[len(d) for d in documents]))
        f.write(struct.pack(f"<{len(documents)}q", *pointers))
        f.write(struct.pack(f"<{len(documents) + 1}q", *range(len(documents) + 1)))


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="backslashreplace",
                          timeout=600, **kw)


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    bin_dir, fixtures = sys.argv[1], sys.argv[2]
    train, generate = os.path.join(bin_dir, "ptdp-train"), os.path.join(bin_dir, "ptdp-generate")
    vocab = os.path.join(fixtures, "tokenizer_gpt2_vocab.json")
    merges = os.path.join(fixtures, "tokenizer_gpt2_merges.txt")
    with open(vocab, encoding="utf-8") as f:
        v = json.load(f)
    eod, size = v["<|endoftext|>"], len(v)
    tok_flags = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab, "--merge-file", merges]
    model = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
             "--micro-batch-size", "4", "--lr", "0.01", "--min-lr", "0.01", "--eval-iters", "0", "--log-interval", "40",
             "--hidden-dropout", "0", "--attention-dropout", "0"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as work:
        prefix = os.path.join(work, "eod")
        others = [i for i in range(size) if i != eod]
        tokens = [t for i in range(400) for t in (others[i % len(others)], eod)]
        write_indexed(prefix, [tokens[i:i + 40] for i in range(0, len(tokens), 40)])
        ckpt = os.path.join(work, "ckpt")
        t = run([train] + model + tok_flags + ["--train-iters", "60", "--data-path", prefix, "--split", "100,0,0",
                                               "--save", ckpt], env=env)
        check(t.returncode == 0, "ptdp-train with GPT2BPETokenizer runs:\n" + t.stdout[-2000:] + t.stderr[-2000:])
        with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
            it = int(f.read())
        with open(os.path.join(ckpt, f"iter_{it:07d}", "metadata.json")) as f:
            flags = json.load(f)["train_config"]
        check(flags["vocab-size"] == size and flags["tokenizer-type"] == "GPT2BPETokenizer",
              f"the vocabulary is the tokenizer's {size}: {flags['vocab-size']}")

        g = run([generate, "--load", ckpt, "--prompt", "The program", "--max-new-tokens", "8", "--top-k", "1"], env=env)
        check(g.returncode == 0, "ptdp-generate --prompt runs:\n" + g.stderr)
        check(g.stdout == "The program\n", f"stops at the end-of-document token: {g.stdout!r}")
        g2 = run([generate, "--load", ckpt, "--prompt", "The program", "--max-new-tokens", "8", "--top-k", "1"]
                 + tok_flags, env=env)
        check(g2.returncode == 0 and g2.stdout == g.stdout, f"the same with the flags: {g2.stdout!r} {g2.stderr}")
        ids = run([generate, "--load", ckpt, "--prompt-ids", "5 6", "--max-new-tokens", "3", "--top-k", "1"], env=env)
        words = ids.stdout.split()
        check(ids.returncode == 0 and len(words) == 5 and words[:3] == ["5", "6", str(eod)],
              f"--prompt-ids: {ids.stdout!r}")
        bad = run([generate, "--load", ckpt, "--prompt", "x", "--tokenizer-type", "Nope"], env=env)
        check(bad.returncode == 2 and "--tokenizer-type" in bad.stderr, f"a bad type: {bad.stderr!r}")

        mock = os.path.join(work, "mock")
        t = run([train] + model + ["--train-iters", "1", "--mock-data", "--vocab-size", "300", "--save", mock], env=env)
        check(t.returncode == 0, "ptdp-train on mock data runs:\n" + t.stderr[-2000:])
        m = run([generate, "--load", mock, "--prompt", "x", "--max-new-tokens", "2"], env=env)
        check(m.returncode == 1 and "records no --tokenizer-type" in m.stderr, f"no tokenizer: {m.stderr!r}")
    print(f"generate: vocabulary {size} from the tokenizer; '{g.stdout.strip()}' stopped at eod {eod}")


if __name__ == "__main__":
    main()
