// The tokenizer factory, Megatron's type names, and the two tokenizers without files: ByteLevel
// (one token per byte) and NullTokenizer (Megatron's _NullTokenizer: the text is the ids).
#include "core/data/tokenizer.h"

#include <array>
#include <algorithm>
#include <charconv>
#include <limits>

#include "base/error.h"
#include "core/data/bpe_tokenizer.h"
#include "core/data/gpt_dataset.h"
#include "core/data/hf_tokenizer.h"
#include "core/data/sentencepiece_tokenizer.h"

namespace ptdp {

namespace {

constexpr std::array<std::pair<TokenizerType, const char*>, 5> kNames{{
    {TokenizerType::ByteLevel, "ByteLevel"},
    {TokenizerType::Null, "NullTokenizer"},
    {TokenizerType::Gpt2Bpe, "GPT2BPETokenizer"},
    {TokenizerType::HuggingFace, "HuggingFaceTokenizer"},
    {TokenizerType::SentencePiece, "SentencePieceTokenizer"},
}};

class ByteLevelTokenizer final : public Tokenizer {
 public:
  TokenizerType type() const override { return TokenizerType::ByteLevel; }
  std::vector<int32_t> encode(std::string_view text) const override { return byte_encode(text); }
  std::string decode(const int32_t* ids, std::size_t count) const override { return byte_decode(ids, count); }
  int64_t vocab_size() const override { return 256; }
  int32_t eod() const override { return -1; }
  int32_t bos() const override { return -1; }
  int32_t token_to_id(std::string_view token) const override {
    return token.size() == 1 ? static_cast<unsigned char>(token[0]) : -1;
  }
  std::string id_to_token(int32_t id) const override {
    PTDP_CHECK_ARG(id >= 0 && id <= 255, str_cat("id ", id, " is not a byte (0..255)"));
    return std::string(1, static_cast<char>(static_cast<unsigned char>(id)));
  }
};

// Python's int() of one word of text.split(' '): surrounding whitespace (ASCII's, and the
// information separators 0x1C..0x1F that str.isspace() also takes) is ignored, then an optional
// sign and ASCII digits, single underscores allowed between digits. Python also takes non-ASCII
// decimal digits; ptdp refuses them (no tool writes ids that way).
bool parse_python_int(std::string_view word, int64_t* value) {
  const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F); };
  while (!word.empty() && space(word.front())) word.remove_prefix(1);
  while (!word.empty() && space(word.back())) word.remove_suffix(1);
  bool negative = false;
  if (!word.empty() && (word.front() == '+' || word.front() == '-')) {
    negative = word.front() == '-';
    word.remove_prefix(1);
  }
  if (word.empty() || word.front() == '_' || word.back() == '_') return false;
  std::string digits;
  for (std::size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    if (c == '_') {
      if (word[i - 1] == '_') return false;
      continue;
    }
    if (c < '0' || c > '9') return false;
    digits += c;
  }
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    v = std::numeric_limits<int64_t>::max();  // out of range: refused by the caller's bound check
  }
  *value = negative ? -v : v;
  return true;
}

// Megatron's _NullTokenizer: ids 0 .. V - 1 are the text's, V is the end-of-document id, and the
// vocabulary holds V + 1 ids.
class NullTokenizer final : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size) : size_(vocab_size) {
    PTDP_CHECK_ARG(vocab_size > 0 && vocab_size < std::numeric_limits<int32_t>::max(),
                   str_cat("--vocab-size ", vocab_size, " is not in [1, 2^31 - 1) (NullTokenizer needs it)"));
  }
  TokenizerType type() const override { return TokenizerType::Null; }
  // text.split(' ') and int() of each word. Megatron fails on "" (int('')); ptdp gives no ids, so
  // that an empty document round-trips through decode (' '.join([]) == "").
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (text.empty()) return ids;
    std::size_t start = 0;
    while (true) {
      const std::size_t end = std::min(text.find(' ', start), text.size());
      const std::string_view word = text.substr(start, end - start);
      int64_t v = 0;
      PTDP_CHECK_ARG(parse_python_int(word, &v),
                     str_cat("NullTokenizer: the word '", word, "' at byte ", start, " is not an integer id"));
      PTDP_CHECK_ARG(v >= 0 && v <= size_, str_cat("NullTokenizer: the id ", word, " at byte ", start,
                                                   " is outside the vocabulary [0, ", size_ + 1, ")"));
      ids.push_back(static_cast<int32_t>(v));
      if (end == text.size()) break;
      start = end + 1;
    }
    return ids;
  }
  std::string decode(const int32_t* ids, std::size_t count) const override {
    PTDP_CHECK_ARG(ids != nullptr || count == 0, "ids is NULL");
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
      PTDP_CHECK_ARG(ids[i] >= 0 && ids[i] <= size_, str_cat("id ", ids[i], " at position ", i,
                                                             " is outside the vocabulary [0, ", size_ + 1, ")"));
      if (i > 0) out += ' ';
      out += std::to_string(ids[i]);
    }
    return out;
  }
  int64_t vocab_size() const override { return size_ + 1; }
  int32_t eod() const override { return static_cast<int32_t>(size_); }
  int32_t bos() const override { return -1; }
  int32_t token_to_id(std::string_view token) const override {
    int64_t v = 0;
    if (token.empty() || token.front() < '0' || token.front() > '9') return -1;
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc() || end != token.data() + token.size() || v > size_) return -1;
    return static_cast<int32_t>(v);
  }
  std::string id_to_token(int32_t id) const override {
    PTDP_CHECK_ARG(id >= 0 && id <= size_, str_cat("id ", id, " is outside the vocabulary [0, ", size_ + 1, ")"));
    return std::to_string(id);
  }

 private:
  int64_t size_;  // V: the ids of the text are below it, eod is V itself
};

void require_flag(const std::string& value, const char* flag, const char* what, TokenizerType type) {
  PTDP_CHECK_ARG(!value.empty(), str_cat("--tokenizer-type ", tokenizer_type_name(type), " needs ", flag, " (",
                                         what, ")"));
}

void refuse_flag(const std::string& value, const char* flag, TokenizerType type) {
  PTDP_CHECK_ARG(value.empty(), str_cat(flag, " ", value, " means nothing to --tokenizer-type ",
                                        tokenizer_type_name(type)));
}

}  // namespace

const char* tokenizer_type_name(TokenizerType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "unknown";
}

std::optional<TokenizerType> tokenizer_type_from_name(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (name == n) return t;
  }
  return std::nullopt;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& config) {
  const TokenizerType type = config.type;
  switch (type) {
    case TokenizerType::ByteLevel:
      refuse_flag(config.vocab_file, "--vocab-file", type);
      refuse_flag(config.merge_file, "--merge-file", type);
      refuse_flag(config.tokenizer_model, "--tokenizer-model", type);
      return std::make_unique<ByteLevelTokenizer>();
    case TokenizerType::Null:
      refuse_flag(config.vocab_file, "--vocab-file", type);
      refuse_flag(config.merge_file, "--merge-file", type);
      refuse_flag(config.tokenizer_model, "--tokenizer-model", type);
      return std::make_unique<NullTokenizer>(config.vocab_size);
    case TokenizerType::Gpt2Bpe:
      require_flag(config.vocab_file, "--vocab-file", "vocab.json", type);
      require_flag(config.merge_file, "--merge-file", "merges.txt", type);
      refuse_flag(config.tokenizer_model, "--tokenizer-model", type);
      return make_gpt2_bpe_tokenizer(config.vocab_file, config.merge_file);
    case TokenizerType::HuggingFace:
      require_flag(config.tokenizer_model, "--tokenizer-model", "tokenizer.json", type);
      refuse_flag(config.vocab_file, "--vocab-file", type);
      refuse_flag(config.merge_file, "--merge-file", type);
      return make_hf_tokenizer(config.tokenizer_model);
    case TokenizerType::SentencePiece:
      require_flag(config.tokenizer_model, "--tokenizer-model", "a SentencePiece .model file", type);
      refuse_flag(config.vocab_file, "--vocab-file", type);
      refuse_flag(config.merge_file, "--merge-file", type);
      return make_sentencepiece_tokenizer(config.tokenizer_model);
  }
  throw_error(ErrorCode::InvalidArgument, str_cat("tokenizer type ", static_cast<int>(type), " is not one of ",
                                                  "ByteLevel, NullTokenizer, GPT2BPETokenizer, "
                                                  "HuggingFaceTokenizer, SentencePieceTokenizer"));
}

}  // namespace ptdp
