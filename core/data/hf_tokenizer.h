// HuggingFaceTokenizer: a Hugging Face tokenizer.json with a BPE model (GPT-2, GPT-NeoX, Llama 2,
// Llama 3, Qwen2 and their kin), encoded as the `tokenizers` library encodes it
// (Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids): added tokens first
// (special and non-normalized ones matched in the raw text, the others in the normalized text;
// longest match at the leftmost position; single_word, lstrip and rstrip as there), then the
// normalizer (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence), the
// pre-tokenizer (ByteLevel with add_prefix_space and use_regex, Split with a String or Regex
// pattern and any behavior, Sequence), and the BPE model (merges as "a b" strings or [a, b]
// pairs, unk_token, fuse_unk, byte_fallback, ignore_merges). Decoding follows the decoder
// (ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence, or none: the tokens joined by
// spaces), except that bytes which are not UTF-8 are returned as they are where Hugging Face
// would put U+FFFD.
//
// Anything else is refused when the file is read, naming the part: other models (WordPiece,
// Unigram, WordLevel), BPE dropout, subword prefixes and suffixes, other normalizers (BERT,
// Precompiled, NMT, StripAccents) and pre-tokenizers (Metaspace, Whitespace, Digits, ...), a
// pre-tokenizer after ByteLevel. truncation and padding are ignored (training data is never cut).
//
// End of document and beginning of sequence: the eos_token and bos_token of tokenizer_config.json
// beside the file (what transformers' AutoTokenizer, and so Megatron, reads) when it exists; else
// the first of "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>" (and "<|begin_of_text|>",
// "<s>", "<bos>") that is an added token.
#pragma once

#include <memory>
#include <string>

#include "core/data/tokenizer.h"

namespace ptdp {

/// Reads a tokenizer.json. Throws Io naming the file when it cannot be read or is not a
/// tokenizer.json, InvalidArgument naming the part the file uses that ptdp does not support.
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path);

}  // namespace ptdp
