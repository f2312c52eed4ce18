// Byte-pair encoding shared by GPT2BPETokenizer (vocab.json + merges.txt) and
// HuggingFaceTokenizer (tokenizer.json with a BPE model): GPT-2's byte-to-character map, the
// pre-tokenisation regexes (PCRE2, matched as Oniguruma matches them for Hugging Face
// tokenizers), and the merge loop of Hugging Face's BPE model (lowest merge rank first, the
// leftmost pair on a tie), which for every merges file a trainer writes gives the ids of
// GPT-2's own encoder too.
//
// Byte-level models are kept in raw bytes: the vocabulary's mapped characters are turned back
// into the bytes they stand for when the model is read, so encoding never builds the mapped
// text. Text that is not valid UTF-8 is encoded byte for byte (the regexes never match an
// invalid sequence, so its bytes end up in the pieces between matches); decoding gives the
// bytes back, so decode(encode(x)) == x for any bytes x with a byte-level model.
#pragma once

#include <array>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/data/tokenizer.h"

namespace ptdp {

/// A string hash that also takes string_views, so lookups need no std::string.
struct TokenHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>()(s); }
};
/// token -> id, looked up by string_view.
using TokenMap = std::unordered_map<std::string, int32_t, TokenHash, std::equal_to<>>;

/// GPT-2's bytes_to_unicode(): the printable character (as UTF-8) that stands for each byte.
const std::array<std::string, 256>& byte_level_chars();
/// The bytes a byte-level string stands for (each character mapped back), or std::nullopt when
/// a character is not one of byte_level_chars().
std::optional<std::string> byte_level_unmap(std::string_view mapped);
/// The byte-level spelling of `bytes` (each byte as its character).
std::string byte_level_map(std::string_view bytes);

/// The pre-tokenisation regex of GPT-2 (and of Hugging Face's ByteLevel pre-tokenizer).
extern const char* const kGpt2SplitPattern;

/// A compiled pre-tokenisation regex: PCRE2 with UTF, Unicode properties (\p{L}, \p{N}), and
/// JIT. `\s` and `\S` are read as Oniguruma reads them (the Unicode White_Space property; PCRE2's
/// own \s also takes U+180E). Thread-safe: matching keeps its state per call.
class SplitRegex {
 public:
  /// Throws InvalidArgument naming `what` (e.g. "tokenizer.json: pre_tokenizer.pattern") and the
  /// position when PCRE2 cannot compile `pattern`.
  SplitRegex(const std::string& pattern, const std::string& what);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  /// Every match in `text` as [start, end) byte offsets, in the order and with the empty-match
  /// rule of Oniguruma's find_iter (an empty match right after the previous match is skipped;
  /// after an empty match the search resumes one character later).
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

/// How the pieces between and around a regex's matches become pre-tokens (Hugging Face's
/// SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

/// Splits `text` by the matches of `regex` (or, inverted, by what lies between them) and appends
/// the non-empty pieces, as Hugging Face's NormalizedString::split does.
void split_by_regex(std::string_view text, const SplitRegex& regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string_view>& out);

/// A BPE model: vocabulary, merges with their ranks, and the unknown-token and byte-fallback
/// rules of Hugging Face's BPE. Immutable once built; encode_word may run on several threads.
class BpeModel {
 public:
  struct Options {
    std::optional<std::string> unk_token;  ///< the unknown token's text, when the model has one
    bool fuse_unk = false;                 ///< consecutive unknown characters become one unk
    bool byte_fallback = false;            ///< unknown characters as their <0xXX> byte tokens
    bool ignore_merges = false;            ///< a word that is a vocabulary entry is that token
  };

  /// `vocab` maps each token (in the model's spelling) to its id; `merges` are pairs in rank
  /// order. `byte_level`: words come as raw bytes and the vocabulary is in byte-level
  /// characters (see the file comment). `source` names the file in messages. Throws Io naming
  /// the source for a merge whose parts or result are not in the vocabulary, InvalidArgument
  /// for duplicate ids or an unk_token outside the vocabulary.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, const Options& options, bool byte_level,
           const std::string& source);

  /// Appends the ids of one pre-token (raw bytes for a byte-level model, else text in the
  /// model's spelling).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  /// The vocabulary entry of `id` in the model's spelling, or nullptr.
  const std::string* token_of(int32_t id) const;
  /// The id of a vocabulary entry (model spelling), or -1.
  int32_t id_of(std::string_view token) const;
  /// 1 + the largest id (ids are normally 0 .. size - 1).
  int64_t id_bound() const { return static_cast<int64_t>(tokens_.size()); }
  /// Number of vocabulary entries.
  int64_t size() const { return static_cast<int64_t>(vocab_.size()); }
  bool byte_level() const { return byte_level_; }

 private:
  void merge_word(std::vector<int32_t>& symbols) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;

  bool byte_level_;
  Options options_;
  int32_t unk_id_ = -1;
  TokenMap vocab_;                                  // model spelling -> id
  std::vector<std::string> tokens_;                 // id -> model spelling ("" for a hole)
  std::vector<uint8_t> present_;                    // id -> 1 when tokens_[id] is an entry
  TokenMap raw_vocab_;                              // byte-level: raw bytes -> id (ignore_merges)
  std::array<int32_t, 256> byte_ids_{};             // byte-level: the id of each byte's character, or -1
  std::array<int32_t, 256> fallback_ids_{};         // byte_fallback: the id of <0xXX>, or -1
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged id)
  uint64_t serial_;                                 // keys this model's per-thread word cache
};

/// GPT2BPETokenizer: vocab.json + merges.txt read as Megatron's GPT2Tokenizer reads them
/// (no special tokens: "<|endoftext|>" in the text is encoded as ordinary text; eod is its
/// vocabulary id).
std::unique_ptr<Tokenizer> make_gpt2_bpe_tokenizer(const std::string& vocab_file, const std::string& merge_file);

/// Reads a whole file; throws Io naming it.
std::string read_tokenizer_file(const std::string& path);

}  // namespace ptdp
