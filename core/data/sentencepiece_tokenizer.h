// SentencePieceTokenizer: a SentencePiece .model file through libsentencepiece, with
// Megatron's _SentencePieceTokenizer around it (megatron/training/tokenizer/tokenizer.py): the
// vocabulary gains "<CLS>", "<SEP>", "<EOD>", "<MASK>" (and "<PAD>", "<BOS>", "<EOS>" when the
// model has no pad, bos or eos piece) after the model's pieces; encoding cuts the text at the
// earliest of these special tokens (and the model's own pad, bos and eos pieces), encodes the
// pieces in between with SentencePiece (SentencePieceProcessor.encode), and gives each special
// token its id; eod is "<EOD>". Decoding is Megatron's detokenize: SentencePiece's decode of the
// runs between special tokens, each special token written with a space before and after.
#pragma once

#include <memory>
#include <string>

#include "core/data/tokenizer.h"

namespace ptdp {

/// Loads a .model file. Throws Io naming the file when SentencePiece cannot load it.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& path);

}  // namespace ptdp
