#!/usr/bin/env python3
"""Tokenizer parity: ptdp's tokenizers (through libptdp's C API) against the reference libraries.

Tokenizers are trained here, at test time, with the reference libraries on texts every Debian
system carries (/usr/share/common-licenses) and this repository's documentation, then every
paragraph of those texts and a list of hard cases (emoji, CJK, combining marks, whitespace runs,
tabs, digit runs, contractions, added tokens inside words, the empty string, ...) is encoded by
both; the ids must be equal, and so must the decoded text. Nothing is downloaded.

  python3 test_tokenizer_parity.py LIBPTDP [--only CASE] [--json PATH]

CASE is one of: gpt2bpe, hf-gpt2, hf-llama3, hf-qwen2, hf-misc, hf-llama2, sentencepiece-bpe,
sentencepiece-unigram. The references:

  gpt2bpe       Megatron's GPT2BPETokenizer on vocab.json + merges.txt: Hugging Face's BPE loaded
                from those files with a ByteLevel pre-tokenizer (add_prefix_space=False) and no
                added tokens, and transformers' GPT2Tokenizer._tokenize (OpenAI's encoder.py
                algorithm) where transformers imports
  hf-*          tokenizers.Tokenizer.from_file(tokenizer.json).encode(text, add_special_tokens=False)
  sentencepiece Megatron's _SentencePieceTokenizer.tokenize: the text cut at its special tokens,
                SentencePieceProcessor(model_file=...).encode() in between; bytes that are not
                UTF-8 go to SentencePiece as bytes

Prints per case: documents, characters, mismatches (which must be 0). Exit status 0 when every
case matches, 1 on a mismatch, 77 (skipped) when a reference library is missing, with the reason.
The tests use /opt/ptdp-test-venv (scripts/install-deps.sh) when it exists.
"""
import argparse
import ctypes
import glob
import json
import os
import sys
import tempfile

VENV_PYTHON = "/opt/ptdp-test-venv/bin/python"
if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath("/opt/ptdp-test-venv") \
        and not os.environ.get("PTDP_PARITY_NO_REEXEC"):
    os.environ["PTDP_PARITY_NO_REEXEC"] = "1"
    os.execv(VENV_PYTHON, [VENV_PYTHON] + sys.argv)

SKIP = 77
CASES = ["gpt2bpe", "hf-gpt2", "hf-llama3", "hf-qwen2", "hf-misc", "hf-llama2", "sentencepiece-bpe",
         "sentencepiece-unigram"]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

HARD_CASES = [
    "",
    "Hello world",
    "  \n\n  ",
    "\t\ttabs\tand\tspaces  \t",
    " leading space",
    "trailing space ",
    "   ",
    "\n",
    "it's, I'm, we're, they've, I'll, he'd, IT'S, It'S, don't, O'Neill's",
    "1234567890 12 345 6789 0.5 3,141,592 2024-11-29 007 ١٢٣ ５６",
    "I \u2764\ufe0f \U0001F980 and \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family \U0001F3F3\ufe0f\u200d\U0001F308!",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, \u00f1 vs n\u0303, \ufb01 ligature, \u216b, \u2460, \uff46\uff55\uff4c\uff4c",
    "a\u00a0b\u2003c\u3000d\u0085e\u180ef\u200bg\u2028h\u2029i\u202fj\u205fk\u1680l",
    "\u0130stanbul \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 stra\u00dfe \u1e9e \u01c5 \u212a",
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade na\u00efve caf\u00e9 r\u00e9sum\u00e9 co\u00f6perate",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "def f(x):\n    return x**2  # comment\n\n\tif x != 0: pass\n",
    "\r\n line endings\r\n\r\n",
    "!!!???...---___***  ((([[[{{{}}}]]])))",
    "a" * 300,
    " " * 100,
    "\n" * 50,
    "x " * 80,
    "foo<|endoftext|>bar",
    "a <|endoftext|> b<|endoftext|><|endoftext|>",
    "<|begin_of_text|>Hi there<|end_of_text|>",
    "x<|im_start|>user\ny<|im_end|>\n",
    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>",
    "<s> and </s> and <unk> text",
    "<EOD> special <CLS><SEP><MASK> and <PAD>",
    "the [MASK] sat,  [MASK]  and [MASK]",
    "<sep>   next <sep>",
    "word words sword word. (word) wordy",
    "Mixed MIXED mixed mIxEd",
    "<Raw><raw> <RAW>",
    "\u00a0\u00a0leading nbsp",
    "Zero\u200bwidth\u200cjoiners\u200d\ufeff",
    "\x00\x01\x1b[31mcontrol\x7f",
]

# Byte strings that are not UTF-8, for the tokenizers whose reference can take them.
INVALID_UTF8 = [
    b"\xff",
    b"abc\xffdef",
    b"\xc3\x28 \xe2\x82 \xf0\x9f\x98",
    b"caf\xe9 na\xefve",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong",
]


def random_cases(count=400, seed=1234):
    """Strings of pieces drawn from a pool of what tokenizers find hard, a pure function of the seed."""
    import random

    rng = random.Random(seed)
    pool = (list("abcXYZ019 _-.,;:!?'\"()[]{}<>|/\\@#$%^&*+=~`") + [" ", "  ", "\t", "\n", "\r\n", "\n\n", "'s", "'LL",
            "\u00e9", "e\u0301", "\u0301", "\u00c5", "\u0130", "\u00df", "\u65e5\u672c", "\u4e2d", "\ud55c",
            "\U0001F980", "\u200d", "\U0001F468", "\u2764\ufe0f", "\u00a0", "\u0085", "\u3000", "\u2003", "\u180e",
            "\u200b", "\ufb01", "\u2460", "\uff46", "\u0645\u0631", "123", "4567", "<|endoftext|>", "<|im_end|>",
            "<|eot_id|>", "[MASK]", "<sep>", "word", "Mixed", "<Raw>", "<s>", "</s>", "<EOD>", "<unk>",
            "the", " the", "program", "hello_world"])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def texts_of_files():
    """Every paragraph (text between blank lines) of the license texts and this repository's docs."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.normpath(os.path.join(here, "..", ".."))
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    files += sorted(glob.glob(os.path.join(repo, "docs", "guides", "*.md"))) + [os.path.join(repo, "README.md")]
    docs = []
    for path in files:
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        docs.extend(p for p in text.split("\n\n") if p)
    return docs


def training_text(docs):
    return "\n\n".join(docs + HARD_CASES * 3)


class Ptdp:
    """libptdp's tokenizer functions through ctypes."""

    class Options(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("vocab_file", ctypes.c_char_p),
                    ("merge_file", ctypes.c_char_p), ("tokenizer_model", ctypes.c_char_p),
                    ("vocab_size", ctypes.c_int64)]

    TYPES = {"ByteLevel": 0, "NullTokenizer": 1, "GPT2BPETokenizer": 2, "HuggingFaceTokenizer": 3,
             "SentencePieceTokenizer": 4}

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.ptdp_last_error.restype = ctypes.c_char_p

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.ptdp_last_error().decode()}")

    def create(self, type_name, vocab_file=None, merge_file=None, tokenizer_model=None):
        o = Ptdp.Options()
        self.check(self.lib.ptdp_tokenizer_options_init(ctypes.byref(o)), "ptdp_tokenizer_options_init")
        o.type = Ptdp.TYPES[type_name]
        o.vocab_file = vocab_file.encode() if vocab_file else None
        o.merge_file = merge_file.encode() if merge_file else None
        o.tokenizer_model = tokenizer_model.encode() if tokenizer_model else None
        handle = ctypes.c_void_p()
        self.check(self.lib.ptdp_tokenizer_create(ctypes.byref(o), ctypes.byref(handle)), "ptdp_tokenizer_create")
        return handle

    def encode(self, tok, data):
        count = ctypes.c_size_t()
        st = self.lib.ptdp_tokenizer_encode(tok, data, ctypes.c_size_t(len(data)), None, ctypes.c_size_t(0),
                                            ctypes.byref(count))
        if count.value == 0:
            self.check(st, "ptdp_tokenizer_encode")
            return []
        ids = (ctypes.c_int32 * count.value)()
        self.check(self.lib.ptdp_tokenizer_encode(tok, data, ctypes.c_size_t(len(data)), ids, count,
                                                  ctypes.byref(count)), "ptdp_tokenizer_encode")
        return list(ids)

    def decode(self, tok, ids):
        arr = (ctypes.c_int32 * len(ids))(*ids)
        length = ctypes.c_size_t()
        self.lib.ptdp_tokenizer_decode(tok, arr, ctypes.c_size_t(len(ids)), None, ctypes.c_size_t(0),
                                       ctypes.byref(length))
        buf = ctypes.create_string_buffer(length.value + 1)
        self.check(self.lib.ptdp_tokenizer_decode(tok, arr, ctypes.c_size_t(len(ids)), buf,
                                                  ctypes.c_size_t(length.value + 1), ctypes.byref(length)),
                   "ptdp_tokenizer_decode")
        return buf.raw[:length.value]

    def int_of(self, fn, tok, ctype=ctypes.c_int32):
        v = ctype()
        self.check(getattr(self.lib, fn)(tok, ctypes.byref(v)), fn)
        return v.value

    def destroy(self, tok):
        self.check(self.lib.ptdp_tokenizer_destroy(tok), "ptdp_tokenizer_destroy")


# ---- building the tokenizers with the reference libraries ----------------------------------


def train_hf(kind, text, out_dir):
    """A tokenizer.json of one kind, trained with Hugging Face tokenizers; returns its path."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
    elif kind == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eot_id|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)]
    elif kind == "qwen2":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    elif kind == "misc":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase(),
                                               normalizers.Replace("  ", " "), normalizers.Strip(left=False,
                                                                                                 right=True)])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
        specials = ["<|endoftext|>"]
    elif kind == "llama2":
        return train_hf_llama2(text, out_dir)
    else:
        raise ValueError(kind)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    if kind == "qwen2":
        tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    if kind == "llama3":
        tok.add_tokens([AddedToken("hello_world", special=False, normalized=True)])
    if kind == "misc":
        tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True),
                                AddedToken("<sep>", rstrip=True, normalized=False, special=True)])
        tok.add_tokens([AddedToken("word", single_word=True, normalized=True),
                        AddedToken("Mixed", normalized=True),
                        AddedToken("<Raw>", normalized=False)])
    path = os.path.join(out_dir, f"{kind}.json")
    tok.save(path)
    return path


def train_hf_llama2(text, out_dir):
    """Llama 2's tokenizer.json shape: no pre-tokenizer, "▁" for spaces (Prepend + Replace), BPE with
    byte_fallback and fuse_unk over <0x00>..<0xFF>, and the Replace/ByteFallback/Fuse/Strip decoder."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=100, show_progress=False)
    tok.train_from_iterator(text.split("\n"), trainer=trainer)
    # The byte tokens go into the model's vocabulary after the three specials, as in Llama 2's file.
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {t: i for i, (t, _) in enumerate(old[:3])}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in old[3:]:
        vocab.setdefault(t, len(vocab))
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    path = os.path.join(out_dir, "llama2.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    Tokenizer.from_file(path)  # the reference must read it
    return path


def hf_reference(path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    return (lambda s: tok.encode(s, add_special_tokens=False).ids,
            lambda ids: tok.decode(ids, skip_special_tokens=False))


def gpt2_files(out_dir, text):
    """vocab.json + merges.txt of a byte-level BPE trained with Hugging Face tokenizers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    vocab, merges = tok.model.save(out_dir, "gpt2")
    return vocab, merges


def gpt2_references(vocab, merges):
    """Megatron's GPT2BPETokenizer: Hugging Face's BPE from the files, and GPT-2's own algorithm
    (transformers' slow GPT2Tokenizer._tokenize) where transformers imports."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    refs = [("tokenizers", lambda s: tok.encode(s, add_special_tokens=False).ids)]
    try:
        from transformers import GPT2Tokenizer

        slow = GPT2Tokenizer(vocab, merges)
        refs.append(("transformers GPT2Tokenizer", lambda s: slow.convert_tokens_to_ids(slow._tokenize(s))))
    except Exception as e:  # noqa: BLE001 - any import problem only drops the second reference
        print(f"  (transformers' GPT2Tokenizer not used: {type(e).__name__}: {e})")
    return refs, (lambda ids: tok.decode(ids, skip_special_tokens=False))


def train_sentencepiece(kind, text, out_dir):
    import sentencepiece as spm

    corpus = os.path.join(out_dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(text)
    prefix = os.path.join(out_dir, f"sp_{kind}")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=2000, model_type=kind,
                                   character_coverage=0.9995, byte_fallback=(kind == "bpe"),
                                   normalization_rule_name="identity" if kind == "bpe" else "nmt_nfkc",
                                   minloglevel=2, num_threads=1)
    return prefix + ".model"


def sentencepiece_reference(path):
    """Megatron's _SentencePieceTokenizer: special tokens after the pieces, text cut at them."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=path)
    vocab = {sp.id_to_piece(i): i for i in range(len(sp))}
    specials = {}

    def piece_or(id_, stand_in):
        return sp.id_to_piece(id_) if 0 <= id_ < len(sp) else stand_in

    for t in ["<CLS>", "<SEP>", "<EOD>", "<MASK>", piece_or(sp.pad_id(), "<PAD>"), piece_or(sp.bos_id(), "<BOS>"),
              piece_or(sp.eos_id(), "<EOS>")]:
        if t not in vocab:
            vocab[t] = len(vocab)
        specials[t] = vocab[t]
    inverse = {v: k for k, v in specials.items()}

    def encode(s):
        if isinstance(s, bytes):
            return sp.encode(s)
        ids, idx = [], 0
        while True:
            found = {t: s.find(t, idx) for t in specials if s.find(t, idx) >= 0}
            if not found:
                break
            t = min(found, key=found.get)  # the earliest; the first in order on a tie
            ids += sp.encode(s[idx:found[t]])
            ids.append(specials[t])
            idx = found[t] + len(t)
        return ids + sp.encode(s[idx:])

    def decode(ids):
        text, last = "", 0
        for i, id_ in enumerate(ids):
            if id_ in inverse:
                text += sp.decode_ids(ids[last:i]) + " " + inverse[id_] + " "
                last = i + 1
        return text + sp.decode_ids(ids[last:])

    return encode, decode, len(vocab), specials["<EOD>"]


# ---- comparing -----------------------------------------------------------------------------


def compare(name, ptdp, tok, refs, decode_ref, docs, invalid, round_trip):
    """Encodes every document with ptdp and each reference; returns the row of the report."""
    documents = characters = mismatches = 0
    shown = 0
    for doc in docs:
        data = doc.encode("utf-8", "surrogatepass") if isinstance(doc, str) else doc
        got = ptdp.encode(tok, data)
        documents += 1
        characters += len(doc)
        bad = []
        for ref_name, ref in refs:
            want = ref(doc)
            if got != want:
                bad.append((ref_name, want))
        text = ptdp.decode(tok, got)
        if isinstance(doc, str) and decode_ref is not None:
            want_text = decode_ref(got).encode("utf-8")
            if text != want_text:
                bad.append(("decode", want_text))
        if round_trip and text != data:
            bad.append(("decode(encode(x)) == x", data))
        if bad:
            mismatches += 1
            if shown < 5:
                shown += 1
                print(f"  MISMATCH {name} on {doc[:80]!r}:\n    ptdp: {got[:40]} {text[:60]!r}")
                for ref_name, want in bad:
                    print(f"    {ref_name}: {want[:40] if isinstance(want, list) else want[:60]!r}")
    for data in invalid:
        got = ptdp.encode(tok, data)
        documents += 1
        characters += len(data)
        bad = [(n, r(data)) for n, r in refs if got != r(data)]
        text = ptdp.decode(tok, got)
        if round_trip and text != data:
            bad.append(("decode(encode(x)) == x", data))
        if bad:
            mismatches += 1
            print(f"  MISMATCH {name} on bytes {data!r}: ptdp {got} -> {text!r}; {bad}")
    return {"tokenizer": name, "documents": documents, "characters": characters, "mismatches": mismatches}


def run_case(case, ptdp, docs, text, work):
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        if not case.startswith("sentencepiece"):
            return None, "Hugging Face tokenizers is not installed (scripts/install-deps.sh makes /opt/ptdp-test-venv)"
    if case.startswith("sentencepiece"):
        try:
            import sentencepiece  # noqa: F401
        except ImportError:
            return None, "the sentencepiece module is not installed (Debian python3-sentencepiece)"
    cases = docs + HARD_CASES + random_cases()
    if case == "gpt2bpe":
        vocab, merges = gpt2_files(work, text)
        refs, decode_ref = gpt2_references(vocab, merges)
        tok = ptdp.create("GPT2BPETokenizer", vocab_file=vocab, merge_file=merges)
        # Invalid UTF-8 has no reference here (both references take str): decode must give it back.
        row = compare("GPT2BPETokenizer", ptdp, tok, refs, decode_ref, cases, [], True)
        extra = compare("GPT2BPETokenizer (bytes that are not UTF-8)", ptdp, tok, [], None, [], INVALID_UTF8, True)
        row["documents"] += extra["documents"]
        row["characters"] += extra["characters"]
        row["mismatches"] += extra["mismatches"]
        with open(vocab, encoding="utf-8") as f:
            v = json.load(f)
        check_ids(ptdp, tok, len(v), v["<|endoftext|>"], -1, row)
    elif case.startswith("hf-"):
        kind = case[3:]
        path = train_hf(kind, text, work)
        encode, decode_ref = hf_reference(path)
        tok = ptdp.create("HuggingFaceTokenizer", tokenizer_model=path)
        # Byte-level without a normalizer round-trips; NFC and the misc normalizers change the text.
        row = compare(f"HuggingFaceTokenizer ({kind})", ptdp, tok, [("tokenizers", encode)], decode_ref, cases, [],
                      kind in ("gpt2", "llama3"))
        extra = compare(f"HuggingFaceTokenizer ({kind}, bytes that are not UTF-8)", ptdp, tok, [], None, [],
                        INVALID_UTF8 if kind in ("gpt2", "llama3") else [], True)
        row["documents"] += extra["documents"]
        row["characters"] += extra["characters"]
        row["mismatches"] += extra["mismatches"]
        from tokenizers import Tokenizer

        ref = Tokenizer.from_file(path)
        eos = {"gpt2": "<|endoftext|>", "llama3": "<|end_of_text|>", "qwen2": "<|endoftext|>",
               "misc": "<|endoftext|>", "llama2": "</s>"}[kind]
        bos = {"llama3": "<|begin_of_text|>", "llama2": "<s>"}.get(kind)
        check_ids(ptdp, tok, ref.get_vocab_size(with_added_tokens=True), ref.token_to_id(eos),
                  ref.token_to_id(bos) if bos else -1, row)
    else:
        kind = case.split("-")[1]
        path = train_sentencepiece(kind, text, work)
        encode, decode_ref, size, eod = sentencepiece_reference(path)
        tok = ptdp.create("SentencePieceTokenizer", tokenizer_model=path)
        row = compare(f"SentencePieceTokenizer ({kind})", ptdp, tok, [("sentencepiece", encode)], decode_ref,
                      cases, [], False)
        extra = compare(f"SentencePieceTokenizer ({kind}, bytes that are not UTF-8)", ptdp, tok,
                        [("sentencepiece", encode)], None, [], INVALID_UTF8, False)
        row["documents"] += extra["documents"]
        row["characters"] += extra["characters"]
        row["mismatches"] += extra["mismatches"]
        check_ids(ptdp, tok, size, eod, 1, row)
    ptdp.destroy(tok)
    return row, None


def check_ids(ptdp, tok, vocab_size, eod, bos, row):
    got = (ptdp.int_of("ptdp_tokenizer_vocab_size", tok, ctypes.c_int64), ptdp.int_of("ptdp_tokenizer_eod", tok),
           ptdp.int_of("ptdp_tokenizer_bos", tok))
    if got != (vocab_size, eod, bos):
        print(f"  MISMATCH {row['tokenizer']}: (vocab size, eod, bos) = {got}, reference {(vocab_size, eod, bos)}")
        row["mismatches"] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libptdp")
    ap.add_argument("--only", choices=CASES, action="append")
    ap.add_argument("--json", help="write the report rows as JSON")
    args = ap.parse_args()
    ptdp = Ptdp(args.libptdp)
    docs = texts_of_files()
    text = training_text(docs)
    rows, skipped = [], []
    for case in args.only or CASES:
        with tempfile.TemporaryDirectory() as work:
            row, why = run_case(case, ptdp, docs, text, work)
        if row is None:
            skipped.append(f"{case}: {why}")
            continue
        rows.append(row)
    print(f"{'tokenizer':<48} {'documents':>9} {'characters':>10} {'mismatches':>10}")
    for r in rows:
        print(f"{r['tokenizer']:<48} {r['documents']:>9} {r['characters']:>10} {r['mismatches']:>10}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    for s in skipped:
        print(f"skipped {s}")
    if any(r["mismatches"] for r in rows):
        return 1
    if not rows:
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
