// HuggingFaceTokenizer: tokenizer.json read and applied as Hugging Face's `tokenizers` does it
// (tokenizer/added_vocabulary.rs, normalizers/, pre_tokenizers/, models/bpe/, decoders/ of its
// Rust sources); see hf_tokenizer.h for what is supported.
#include "core/data/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/data/bpe_tokenizer.h"
#include "core/data/tokenizer_utf8.h"

namespace ptdp {

namespace {

using nlohmann::json;

// ---- characters -----------------------------------------------------------------------------

// Rust's char::is_whitespace and regex's \s: the White_Space property.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners. Alphabetic
// is taken as the letters and letter numbers (the few symbols with Other_Alphabetic, such as
// circled letters, are not word characters here).
bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point of the last character of `s`, or std::nullopt when s is empty or ends in a byte
// that is not part of a valid character.
std::optional<char32_t> last_char(std::string_view s) {
  for (std::size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const std::size_t pos = s.size() - back;
    char32_t cp = 0;
    if (utf8_decode(s, pos, &cp) == back) return cp;
  }
  return std::nullopt;
}

std::optional<char32_t> first_char(std::string_view s) {
  char32_t cp = 0;
  if (s.empty() || utf8_decode(s, 0, &cp) == 0) return std::nullopt;
  return cp;
}

// Where the run of whitespace at the end of `s` starts (s.size() when there is none).
std::size_t trailing_space_start(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    const std::size_t before = end;
    std::optional<char32_t> c = last_char(s.substr(0, end));
    if (!c || !is_white_space(*c)) break;
    end -= utf8_encode(*c).size();
    if (end >= before) break;
  }
  return end;
}

// Where the run of whitespace at the start of `s` ends.
std::size_t leading_space_end(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const std::size_t n = utf8_decode(s, i, &cp);
    if (n == 0 || !is_white_space(cp)) break;
    i += n;
  }
  return i;
}

// Applies `f` to each maximal run of valid UTF-8 in `s`; bytes that are not UTF-8 are kept as
// they are between the runs (the Unicode normalizers cannot read them).
template <typename F>
std::string map_valid_runs(std::string_view s, F&& f) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    while (j < s.size()) {
      const std::size_t n = utf8_decode(s, j, nullptr);
      if (n == 0) break;
      j += n;
    }
    if (j > i) out += f(s.substr(i, j - i));
    while (j < s.size() && utf8_decode(s, j, nullptr) == 0) out += s[j++];
    i = j;
  }
  return out;
}

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// ---- JSON helpers ---------------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    throw_io_error(path_, str_cat(where, ": ", what));
  }
  [[noreturn]] void unsupported(const std::string& where, const std::string& what) const {
    throw_error(ErrorCode::InvalidArgument, str_cat(path_, ": ", where, ": ", what));
  }
  bool flag(const json& j, const char* key, bool fallback, const std::string& where) const {
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    if (!j.at(key).is_boolean()) bad(where + "." + key, "is not true or false");
    return j.at(key).get<bool>();
  }
  std::string text(const json& j, const char* key, const std::string& where) const {
    if (!j.contains(key) || !j.at(key).is_string()) bad(where + "." + key, "is missing or not a string");
    return j.at(key).get<std::string>();
  }
  std::string type_of(const json& j, const std::string& where) const {
    if (!j.is_object()) bad(where, "is not an object");
    return text(j, "type", where);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A Split or Replace pattern: {"String": s} (taken literally) or {"Regex": r}.
std::unique_ptr<SplitRegex> read_pattern(const Reader& r, const json& j, const std::string& where) {
  if (!j.contains("pattern") || !j.at("pattern").is_object()) r.bad(where + ".pattern", "is missing or not an object");
  const json& p = j.at("pattern");
  if (p.contains("Regex") && p.at("Regex").is_string()) {
    return std::make_unique<SplitRegex>(p.at("Regex").get<std::string>(), r.path() + ": " + where + ".pattern");
  }
  if (p.contains("String") && p.at("String").is_string()) {
    // A literal: every character quoted for PCRE2 (\Q...\E cannot hold "\E" itself).
    std::string quoted;
    for (const char c : p.at("String").get<std::string>()) {
      if (std::string_view("\\^$.|?*+()[]{}#-").find(c) != std::string_view::npos) quoted += '\\';
      quoted += c;
    }
    return std::make_unique<SplitRegex>(quoted, r.path() + ": " + where + ".pattern");
  }
  r.bad(where + ".pattern", "is neither {\"String\": ...} nor {\"Regex\": ...}");
}

// ---- normalizers ----------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void apply(std::string& s) const override {
    if (is_ascii(s)) return;  // ASCII is the same in every normalization form
    s = map_valid_runs(s, [&](std::string_view run) {
      utf8proc_uint8_t* out = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                              static_cast<utf8proc_ssize_t>(run.size()), &out,
                                              static_cast<utf8proc_option_t>(options_));
      if (n < 0) throw_error(ErrorCode::Internal, str_cat("utf8proc: ", utf8proc_errmsg(n)));
      std::string r(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
      std::free(out);
      return r;
    });
  }

 private:
  int options_;
};

// Rust's char::to_lowercase: the simple lowercase mapping, except U+0130 (the one unconditional
// multi-character lowercase mapping), which becomes "i" + U+0307.
class Lowercase final : public Normalizer {
 public:
  void apply(std::string& s) const override {
    if (is_ascii(s)) {
      for (char& c : s) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      return;
    }
    s = map_valid_runs(s, [](std::string_view run) {
      std::string out;
      out.reserve(run.size());
      for (std::size_t i = 0; i < run.size();) {
        char32_t cp = 0;
        i += utf8_decode(run, i, &cp);
        if (cp == 0x130) {
          out += "i\xCC\x87";
        } else {
          out += utf8_encode(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
        }
      }
      return out;
    });
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& s) const override {
    if (right_) s.erase(trailing_space_start(s));
    if (left_) s.erase(0, leading_space_end(s));
  }

 private:
  bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string text) : text_(std::move(text)) {}
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, text_);
  }

 private:
  std::string text_;
};

// Every match of the pattern (Oniguruma's find_iter) replaced by the content.
class Replace final : public Normalizer {
 public:
  Replace(std::unique_ptr<SplitRegex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::string& s) const override { s = replace(s); }
  std::string replace(std::string_view s) const {
    if (s.empty()) return std::string();
    std::vector<std::pair<std::size_t, std::size_t>> found;
    pattern_->find_all(s, found);
    if (found.empty()) return std::string(s);
    std::string out;
    std::size_t prev = 0;
    for (const auto& [b, e] : found) {
      out.append(s.substr(prev, b - prev));
      out += content_;
      prev = e;
    }
    out.append(s.substr(prev));
    return out;
  }

 private:
  std::unique_ptr<SplitRegex> pattern_;
  std::string content_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::string& s) const override {
    for (const auto& n : steps_) n->apply(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::unique_ptr<Normalizer> read_normalizer(const Reader& r, const json& j, const std::string& where) {
  const std::string type = r.type_of(j, where);
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    return std::make_unique<Strip>(r.flag(j, "strip_left", false, where), r.flag(j, "strip_right", false, where));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(r.text(j, "prepend", where));
  if (type == "Replace") return std::make_unique<Replace>(read_pattern(r, j, where), r.text(j, "content", where));
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j.at("normalizers").is_array()) r.bad(where + ".normalizers", "is not a list");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < j.at("normalizers").size(); ++i) {
      steps.push_back(read_normalizer(r, j.at("normalizers")[i], str_cat(where, ".normalizers[", i, "]")));
    }
    return std::make_unique<NormalizerSequence>(std::move(steps));
  }
  r.unsupported(where, str_cat("the normalizer type '", type,
                               "' is not supported (ptdp reads NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, "
                               "Replace and Sequence)"));
}

// ---- pre-tokenizers -------------------------------------------------------------------------

// Text a step adds (ByteLevel's prefix space) lives in an arena that only grows while one piece
// is pre-tokenised, so the views into it stay valid.
using Arena = std::deque<std::string>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Splits each piece of `in` into `out` (non-empty pieces only).
  virtual void apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
                     Arena& arena) const = 0;
};

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
             Arena& arena) const override {
    static const SplitRegex gpt2(kGpt2SplitPattern, "GPT-2's pre-tokenisation regex");
    for (std::string_view piece : in) {
      if (add_prefix_space_ && !piece.empty() && piece.front() != ' ') {
        arena.push_back(str_cat(" ", piece));
        piece = arena.back();
      }
      if (use_regex_) {
        split_by_regex(piece, gpt2, SplitBehavior::Isolated, false, out);
      } else if (!piece.empty()) {
        out.push_back(piece);
      }
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(std::unique_ptr<SplitRegex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out, Arena&) const override {
    for (const std::string_view piece : in) split_by_regex(piece, *regex_, behavior_, invert_, out);
  }

 private:
  std::unique_ptr<SplitRegex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

SplitBehavior read_behavior(const Reader& r, const json& j, const std::string& where) {
  const std::string b = r.text(j, "behavior", where);
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  r.bad(where + ".behavior", str_cat("'", b, "' is not a split behavior"));
}

// Flattens Sequences into `steps`; says whether the last step is ByteLevel (the model then reads
// bytes). A ByteLevel step anywhere but last is refused: what follows it would see the mapped
// characters, which ptdp never builds.
void read_pre_tokenizer(const Reader& r, const json& j, const std::string& where,
                        std::vector<std::unique_ptr<PreTokenizer>>& steps, bool& byte_level) {
  const std::string type = r.type_of(j, where);
  if (byte_level) {
    r.unsupported(where, "a pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)");
  }
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j.at("pretokenizers").is_array()) {
      r.bad(where + ".pretokenizers", "is not a list");
    }
    for (std::size_t i = 0; i < j.at("pretokenizers").size(); ++i) {
      read_pre_tokenizer(r, j.at("pretokenizers")[i], str_cat(where, ".pretokenizers[", i, "]"), steps, byte_level);
    }
  } else if (type == "ByteLevel") {
    steps.push_back(std::make_unique<ByteLevelPre>(r.flag(j, "add_prefix_space", true, where),
                                                   r.flag(j, "use_regex", true, where)));
    byte_level = true;
  } else if (type == "Split") {
    steps.push_back(std::make_unique<SplitPre>(read_pattern(r, j, where), read_behavior(r, j, where),
                                               r.flag(j, "invert", false, where)));
  } else {
    r.unsupported(where, str_cat("the pre_tokenizer type '", type,
                                 "' is not supported (ptdp reads ByteLevel, Split and Sequence)"));
  }
}

// ---- decoders -------------------------------------------------------------------------------

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// Each token's characters mapped back to bytes; a token with a character outside the map is
// taken as its UTF-8 text.
class ByteLevelDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) {
      if (auto raw = byte_level_unmap(t)) {
        all += *raw;
      } else {
        all += t;
      }
    }
    tokens.assign(1, std::move(all));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(std::unique_ptr<Replace> replace) : replace_(std::move(replace)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_->replace(t);
  }

 private:
  std::unique_ptr<Replace> replace_;
};

// "<0xXX>" tokens become their bytes, a run of them one token.
class ByteFallbackDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool in_run = false;
    for (std::string& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') value = hex_byte(t[3], t[4]);
      if (value >= 0) {
        bytes += static_cast<char>(value);
        in_run = true;
        continue;
      }
      if (in_run) {
        out.push_back(std::move(bytes));
        bytes.clear();
        in_run = false;
      }
      out.push_back(std::move(t));
    }
    if (in_run) out.push_back(std::move(bytes));
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int hex_byte(char a, char b) {
    const int x = hex_digit(a), y = hex_digit(b);
    return x < 0 || y < 0 ? -1 : x * 16 + y;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Up to `start` leading and `stop` trailing copies of one character removed from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::size_t begin = 0;
      for (std::size_t i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      std::size_t end = t.size();
      for (std::size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                              t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps_) d->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

std::unique_ptr<Decoder> read_decoder(const Reader& r, const json& j, const std::string& where) {
  const std::string type = r.type_of(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(
        std::make_unique<Replace>(read_pattern(r, j, where), r.text(j, "content", where)));
  }
  if (type == "Strip") {
    const std::string content = r.text(j, "content", where);
    if (utf8_decode(content, 0, nullptr) != content.size() || content.empty()) {
      r.bad(where + ".content", "is not one character");
    }
    const auto count = [&](const char* key) -> std::size_t {
      if (!j.contains(key) || !j.at(key).is_number_unsigned()) r.bad(where + "." + key, "is not a count");
      return j.at(key).get<std::size_t>();
    };
    return std::make_unique<StripDecoder>(content, count("start"), count("stop"));
  }
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j.at("decoders").is_array()) r.bad(where + ".decoders", "is not a list");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (std::size_t i = 0; i < j.at("decoders").size(); ++i) {
      steps.push_back(read_decoder(r, j.at("decoders")[i], str_cat(where, ".decoders[", i, "]")));
    }
    return std::make_unique<DecoderSequence>(std::move(steps));
  }
  r.unsupported(where, str_cat("the decoder type '", type,
                               "' is not supported (ptdp reads ByteLevel, ByteFallback, Fuse, Replace, Strip and "
                               "Sequence)"));
}

// ---- added tokens ---------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
  bool operator==(const AddedToken&) const = default;
};

// The patterns of one matching pass, matched leftmost-longest (Aho-Corasick's LeftmostLongest).
class TokenTrie {
 public:
  void add(const std::string& pattern, int32_t id) {
    if (pattern.empty()) return;
    int node = 0;
    for (const char c : pattern) {
      const auto b = static_cast<unsigned char>(c);
      int child = -1;
      for (const auto& [k, v] : nodes_[node].next) {
        if (k == b) child = v;
      }
      if (child < 0) {
        child = static_cast<int>(nodes_.size());
        nodes_[node].next.emplace_back(b, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    if (nodes_[node].id < 0) nodes_[node].id = id;  // the first of equal patterns wins
    first_[static_cast<unsigned char>(pattern[0])] = true;
    empty_ = false;
  }
  bool empty() const { return empty_; }
  /// The leftmost-longest match at or after `from`: (start, end, id), or start == npos.
  std::tuple<std::size_t, std::size_t, int32_t> find(std::string_view s, std::size_t from) const {
    for (std::size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<unsigned char>(s[i])]) continue;
      int node = 0;
      std::size_t best_end = 0;
      int32_t best_id = -1;
      for (std::size_t j = i; j < s.size(); ++j) {
        const auto b = static_cast<unsigned char>(s[j]);
        int child = -1;
        for (const auto& [k, v] : nodes_[node].next) {
          if (k == b) child = v;
        }
        if (child < 0) break;
        node = child;
        if (nodes_[node].id >= 0) {
          best_end = j + 1;
          best_id = nodes_[node].id;
        }
      }
      if (best_id >= 0) return {i, best_end, best_id};
    }
    return {std::string_view::npos, 0, -1};
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;
    int32_t id = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_{};
  bool empty_ = true;
};

// ---- the tokenizer --------------------------------------------------------------------------

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);

  TokenizerType type() const override { return TokenizerType::HuggingFace; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const int32_t* ids, std::size_t count) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  int32_t bos() const override { return bos_; }
  int32_t token_to_id(std::string_view token) const override {
    const auto it = added_ids_.find(std::string(token));
    return it != added_ids_.end() ? it->second : model_->id_of(token);
  }
  std::string id_to_token(int32_t id) const override {
    const std::string* t = token_text(id);
    PTDP_CHECK_ARG(t != nullptr, str_cat("id ", id, " is not in the vocabulary"));
    return *t;
  }

 private:
  const std::string* token_text(int32_t id) const {
    const auto it = added_by_id_.find(id);
    return it != added_by_id_.end() ? &it->second.content : model_->token_of(id);
  }
  void add_tokens(const std::vector<AddedToken>& tokens);
  // AddedVocabulary::find_matches over one piece: calls `text(view)` for the pieces between
  // added tokens and `token(id)` for each added token, in order.
  template <typename Text, typename Token>
  void split_added(std::string_view s, const TokenTrie& trie, Text&& text, Token&& token) const;
  void encode_normalized(std::string_view s, std::vector<int32_t>& ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers_;
  std::unique_ptr<Decoder> decoder_;
  // Added vocabulary.
  std::unordered_map<std::string, int32_t> added_ids_;  // content -> id
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::vector<AddedToken> special_tokens_, added_tokens_;
  TokenTrie raw_trie_, normalized_trie_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1, bos_ = -1;
};

HfTokenizer::HfTokenizer(const std::string& path) {
  const Reader r(path);
  json root;
  try {
    root = json::parse(read_tokenizer_file(path));
  } catch (const json::exception& e) {
    throw_io_error(path, str_cat("is not JSON (", e.what(), ")"));
  }
  if (!root.is_object() || !root.contains("model")) r.bad("the file", "is not a tokenizer.json (no \"model\")");

  // The model.
  const json& m = root.at("model");
  if (!m.is_object()) r.bad("model", "is not an object");
  const std::string model_type = m.contains("type") && m.at("type").is_string() ? m.at("type").get<std::string>()
                                 : m.contains("merges")                         ? "BPE"
                                                                                : "";
  if (model_type != "BPE") {
    r.unsupported("model", str_cat("the model type '", model_type,
                                   "' is not supported: ptdp reads BPE models (WordPiece, Unigram and WordLevel "
                                   "tokenizers are not byte-pair encodings)"));
  }
  if (m.contains("dropout") && !m.at("dropout").is_null() &&
      !(m.at("dropout").is_number() && m.at("dropout").get<double>() == 0.0)) {
    r.unsupported("model.dropout", "BPE dropout (random merges) is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m.at(key).is_null() && !(m.at(key).is_string() && m.at(key).get<std::string>().empty())) {
      r.unsupported(str_cat("model.", key), "subword prefixes and suffixes are not supported");
    }
  }
  if (!m.contains("vocab") || !m.at("vocab").is_object()) r.bad("model.vocab", "is missing or not an object");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(m.at("vocab").size());
  for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() > std::numeric_limits<int32_t>::max()) {
      r.bad("model.vocab", str_cat("the id of '", it.key(), "' is not an integer in [0, 2^31)"));
    }
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.contains("merges") && !m.at("merges").is_null()) {
    const json& list = m.at("merges");
    if (!list.is_array()) r.bad("model.merges", "is not a list");
    merges.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const json& e = list[i];
      if (e.is_string()) {  // "a b"
        const std::string s = e.get<std::string>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          r.bad(str_cat("model.merges[", i, "]"), str_cat("'", s, "' is not two tokens separated by one space"));
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        r.bad(str_cat("model.merges[", i, "]"), "is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  BpeModel::Options options;
  if (m.contains("unk_token") && m.at("unk_token").is_string()) options.unk_token = m.at("unk_token").get<std::string>();
  options.fuse_unk = r.flag(m, "fuse_unk", false, "model");
  options.byte_fallback = r.flag(m, "byte_fallback", false, "model");
  options.ignore_merges = r.flag(m, "ignore_merges", false, "model");

  // Normalizer, pre-tokenizer, decoder.
  if (root.contains("normalizer") && !root.at("normalizer").is_null()) {
    normalizer_ = read_normalizer(r, root.at("normalizer"), "normalizer");
  }
  bool byte_level = false;
  if (root.contains("pre_tokenizer") && !root.at("pre_tokenizer").is_null()) {
    read_pre_tokenizer(r, root.at("pre_tokenizer"), "pre_tokenizer", pre_tokenizers_, byte_level);
  }
  if (root.contains("decoder") && !root.at("decoder").is_null()) {
    decoder_ = read_decoder(r, root.at("decoder"), "decoder");
  }
  model_ = std::make_unique<BpeModel>(std::move(vocab), merges, options, byte_level, path);

  // Added tokens, in the file's order, given ids as Hugging Face gives them (the file's "id" is
  // only a check there).
  std::vector<AddedToken> added;
  if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
    const json& list = root.at("added_tokens");
    if (!list.is_array()) r.bad("added_tokens", "is not a list");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string where = str_cat("added_tokens[", i, "]");
      const json& t = list[i];
      if (!t.is_object()) r.bad(where, "is not an object");
      AddedToken a;
      a.content = r.text(t, "content", where);
      a.single_word = r.flag(t, "single_word", false, where);
      a.lstrip = r.flag(t, "lstrip", false, where);
      a.rstrip = r.flag(t, "rstrip", false, where);
      a.normalized = r.flag(t, "normalized", true, where);
      a.special = r.flag(t, "special", false, where);
      added.push_back(std::move(a));
    }
  }
  add_tokens(added);

  // get_vocab(with_added_tokens = true).len(), or past the largest id should ids have holes.
  int64_t extra = 0;
  int64_t bound = model_->id_bound();
  for (const auto& [content, id] : added_ids_) {
    if (model_->id_of(content) < 0) ++extra;
    bound = std::max<int64_t>(bound, int64_t{id} + 1);
  }
  vocab_size_ = std::max(model_->size() + extra, bound);

  // eos and bos: tokenizer_config.json beside the file, else the usual names.
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  bool from_config = false;
  if (std::filesystem::is_regular_file(config, ec)) {
    json c;
    try {
      c = json::parse(read_tokenizer_file(config.string()));
    } catch (const json::exception& e) {
      throw_io_error(config.string(), str_cat("is not JSON (", e.what(), ")"));
    }
    const auto named = [&](const char* key) -> int32_t {
      if (!c.is_object() || !c.contains(key)) return -1;
      const json& v = c.at(key);
      std::string content;
      if (v.is_string()) {
        content = v.get<std::string>();
      } else if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
        content = v.at("content").get<std::string>();
      } else {
        return -1;
      }
      const int32_t id = token_to_id(content);
      if (id < 0) throw_io_error(config.string(), str_cat(key, " '", content, "' is not a token of ", path));
      return id;
    };
    eod_ = named("eos_token");
    bos_ = named("bos_token");
    from_config = true;
  }
  if (!from_config) {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
      if (eod_ < 0 && added_ids_.count(name)) eod_ = added_ids_.at(name);
    }
    for (const char* name : {"<|begin_of_text|>", "<s>", "<bos>"}) {
      if (bos_ < 0 && added_ids_.count(name)) bos_ = added_ids_.at(name);
    }
  }
}

// AddedVocabulary::add_tokens followed by refresh_added_tokens.
void HfTokenizer::add_tokens(const std::vector<AddedToken>& tokens) {
  std::unordered_map<std::string, bool> special_set;
  for (const AddedToken& t : tokens) {
    if (t.special && !t.content.empty() && !special_set.count(t.content)) {
      special_tokens_.push_back(t);
      special_set[t.content] = true;
    }
  }
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    bool seen = false;
    for (const auto& [id, old] : added_by_id_) seen = seen || old == t;
    if (seen) continue;
    int32_t id = token_to_id(t.content);
    if (id < 0) {
      const int64_t model_size = model_->size();
      int64_t max = -1;
      for (const auto& [content, i] : added_ids_) max = std::max<int64_t>(max, i);
      id = static_cast<int32_t>(max < 0 ? model_size : (max >= model_size || model_size == 0) ? max + 1 : model_size);
    }
    added_ids_[t.content] = id;
    added_by_id_[id] = t;
    if (!special_set.count(t.content)) added_tokens_.push_back(t);
  }
  // The two matching passes: tokens that are not normalized are found in the raw text, the
  // others (as the normalizer spells them) in the normalized pieces.
  const auto fill = [&](const std::vector<AddedToken>& list) {
    for (const AddedToken& t : list) {
      const int32_t id = token_to_id(t.content);
      if (!t.normalized) {
        raw_trie_.add(t.content, id);
      } else {
        std::string pattern = t.content;
        if (normalizer_) normalizer_->apply(pattern);
        normalized_trie_.add(pattern, id);
      }
    }
  };
  fill(special_tokens_);
  fill(added_tokens_);
}

template <typename Text, typename Token>
void HfTokenizer::split_added(std::string_view s, const TokenTrie& trie, Text&& text, Token&& token) const {
  if (trie.empty()) {
    text(s);
    return;
  }
  std::size_t start_offset = 0, from = 0;
  while (true) {
    auto [start, stop, id] = trie.find(s, from);
    if (start == std::string_view::npos) break;
    from = stop;  // the search goes on after this match whatever becomes of it
    const AddedToken& a = added_by_id_.at(id);
    if (a.single_word) {
      const std::optional<char32_t> before = last_char(s.substr(0, start));
      const std::optional<char32_t> after = first_char(s.substr(stop));
      const bool start_space = start == 0 || !(before && is_word_char(*before));
      const bool stop_space = stop == s.size() || !(after && is_word_char(*after));
      if (!start_space || !stop_space) continue;
    }
    if (a.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (a.rstrip) stop += leading_space_end(s.substr(stop));
    if (start_offset < start) text(s.substr(start_offset, start - start_offset));
    token(id);
    start_offset = stop;
  }
  if (start_offset < s.size()) text(s.substr(start_offset));
}

void HfTokenizer::encode_normalized(std::string_view s, std::vector<int32_t>& ids) const {
  split_added(
      s, normalized_trie_,
      [&](std::string_view piece) {
        thread_local std::vector<std::string_view> a, b;
        thread_local Arena arena;
        a.assign(1, piece);
        arena.clear();
        for (const auto& step : pre_tokenizers_) {
          b.clear();
          step->apply(a, b, arena);
          std::swap(a, b);
        }
        for (const std::string_view w : a) model_->encode_word(w, ids);
      },
      [&](int32_t id) { ids.push_back(id); });
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  split_added(
      text, raw_trie_,
      [&](std::string_view piece) {
        if (!normalizer_) {
          encode_normalized(piece, ids);
          return;
        }
        std::string normalized(piece);
        normalizer_->apply(normalized);
        encode_normalized(normalized, ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  return ids;
}

std::string HfTokenizer::decode(const int32_t* ids, std::size_t count) const {
  PTDP_CHECK_ARG(ids != nullptr || count == 0, "ids is NULL");
  std::vector<std::string> tokens;
  tokens.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::string* t = token_text(ids[i]);
    PTDP_CHECK_ARG(t != nullptr, str_cat("id ", ids[i], " at position ", i, " is not in the vocabulary"));
    tokens.push_back(*t);
  }
  if (!decoder_) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->apply(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path) { return std::make_unique<HfTokenizer>(path); }

}  // namespace ptdp
