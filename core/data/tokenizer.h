// Tokenizers with Megatron-LM's --tokenizer-type names: text to token ids and back, exactly as
// the reference implementations do it (Hugging Face tokenizers, GPT-2's encoder, SentencePiece).
//
//   ByteLevel             one token per byte (0..255), ptdp's own (--text-file)
//   NullTokenizer         text is space-separated ids; eod = vocab_size (Megatron's _NullTokenizer)
//   GPT2BPETokenizer      vocab.json + merges.txt: byte-level BPE, GPT-2's pre-tokenisation regex
//   HuggingFaceTokenizer  tokenizer.json with a BPE model (GPT-2, Llama 3, Qwen2, GPT-NeoX files)
//   SentencePieceTokenizer tokenizer.model through libsentencepiece (Llama 2, Mistral)
//
// A Tokenizer is immutable after construction: encode and decode may be called from several
// threads at once (ptdp-preprocess-data's workers share one).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptdp {

enum class TokenizerType : int {
  ByteLevel = 0,
  Null = 1,
  Gpt2Bpe = 2,
  HuggingFace = 3,
  SentencePiece = 4,
};

/// Megatron's name of a type ("ByteLevel", "NullTokenizer", "GPT2BPETokenizer",
/// "HuggingFaceTokenizer", "SentencePieceTokenizer").
const char* tokenizer_type_name(TokenizerType type);
/// The type of a Megatron name, or std::nullopt.
std::optional<TokenizerType> tokenizer_type_from_name(std::string_view name);

/// What a tokenizer is made from (Megatron's flags).
struct TokenizerConfig {
  TokenizerType type = TokenizerType::ByteLevel;
  std::string vocab_file;       ///< --vocab-file (GPT2BPETokenizer: vocab.json)
  std::string merge_file;       ///< --merge-file (GPT2BPETokenizer: merges.txt)
  std::string tokenizer_model;  ///< --tokenizer-model (tokenizer.json, tokenizer.model)
  int64_t vocab_size = 0;       ///< --vocab-size (NullTokenizer: ids below it; eod = vocab_size)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual TokenizerType type() const = 0;
  /// Token ids of `text` (bytes, UTF-8 or not), as the reference implementation encodes it
  /// without adding special tokens around it (no BOS/EOS; added tokens inside the text are
  /// matched as the reference does). Throws Error(InvalidArgument) for text the format cannot
  /// encode (NullTokenizer: a word that is not an id), naming the byte offset.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// The text of `ids` (special tokens included as their text); throws InvalidArgument naming
  /// the position of an id outside the vocabulary.
  virtual std::string decode(const int32_t* ids, std::size_t count) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }
  /// Ids 0 .. vocab_size() - 1 are valid (added tokens included).
  virtual int64_t vocab_size() const = 0;
  /// The end-of-document id appended by --append-eod and used by --eod-mask-loss (Megatron's
  /// tokenizer.eod), or -1 when the tokenizer has none.
  virtual int32_t eod() const = 0;
  /// The beginning-of-sequence id, or -1.
  virtual int32_t bos() const = 0;
  /// The id of a token's text (its vocabulary entry, in the model's own spelling: byte-level
  /// BPE's mapped characters, SentencePiece's pieces), or -1.
  virtual int32_t token_to_id(std::string_view token) const = 0;
  /// The vocabulary entry of `id`; throws InvalidArgument for an id outside the vocabulary.
  virtual std::string id_to_token(int32_t id) const = 0;
};

/// Builds a tokenizer. Throws Error(InvalidArgument) naming the flag for a missing or
/// meaningless setting, Error(Io) naming the file for one that cannot be read or parsed.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& config);

}  // namespace ptdp
