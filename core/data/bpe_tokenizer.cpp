// Byte-pair encoding: the byte-level map, the PCRE2 split regexes, Hugging Face's BPE merge
// loop, and GPT2BPETokenizer (vocab.json + merges.txt).
#include "core/data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/data/tokenizer_utf8.h"
#include "io/file_read.h"

namespace ptdp {

// ---- files ----------------------------------------------------------------------------------

std::string read_tokenizer_file(const std::string& path) {
  return read_regular_file(path, "tokenizer file", kMaxTokenizerFileBytes);
}

// ---- byte-level map -------------------------------------------------------------------------

namespace {

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the others (controls, space,
// DEL, NBSP, soft hyphen) for 256, 257, ... in byte order.
struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int, 324> byte_of;  // code point -> byte, or -1
  ByteLevelTables() {
    byte_of.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = printable ? b : next++;
      chars[b] = utf8_encode(static_cast<char32_t>(cp));
      byte_of[cp] = b;
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() { return byte_level_tables().chars; }

std::optional<std::string> byte_level_unmap(std::string_view mapped) {
  const ByteLevelTables& t = byte_level_tables();
  std::string out;
  out.reserve(mapped.size());
  std::size_t i = 0;
  while (i < mapped.size()) {
    char32_t cp = 0;
    const std::size_t n = utf8_decode(mapped, i, &cp);
    if (n == 0 || cp >= t.byte_of.size() || t.byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.byte_of[cp]));
    i += n;
  }
  return out;
}

std::string byte_level_map(std::string_view bytes) {
  const auto& chars = byte_level_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += chars[static_cast<unsigned char>(c)];
  return out;
}

// ---- regexes --------------------------------------------------------------------------------

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// Oniguruma's \s is the White_Space property; PCRE2's (10.42) also takes U+180E. Rewrites
// \s and \S outside and inside classes; every other escape is copied as it is.
std::string onig_whitespace(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += pattern[i];
        out += e;
      }
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// Per thread: a JIT stack large enough for long runs matched by backtracking patterns, the
// match context that hands it to PCRE2, and one match-data block (only the whole match is read).
struct MatchScratch {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* data = nullptr;
  MatchScratch() {
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    data = pcre2_match_data_create(1, nullptr);
    if (!stack || !context || !data) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

SplitRegex::SplitRegex(const std::string& pattern, const std::string& what) {
  const std::string rewritten = onig_whitespace(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw_error(ErrorCode::InvalidArgument, str_cat(what, ": the regex '", pattern, "' does not compile (PCRE2: ",
                                                    reinterpret_cast<const char*>(message), ")"));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void SplitRegex::find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  MatchScratch& m = match_scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t last_end = 0;
  bool have_last = false;
  std::size_t last_match_end = 0;
  while (last_end <= text.size()) {
    const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), subject, text.size(), last_end, 0, m.data,
                               m.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw_error(ErrorCode::Internal, str_cat("pre-tokenisation regex failed at byte ", last_end, ": ",
                                               reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
    const std::size_t s = ov[0], e = ov[1];
    if (s == e && have_last && last_match_end == e) {
      // Oniguruma's find_iter: no empty match right after the previous match; step one character.
      last_end += last_end < text.size() ? utf8_length_or_one(text, last_end) : 1;
      continue;
    }
    last_end = e;
    have_last = true;
    last_match_end = e;
    out.emplace_back(s, e);
  }
}

void split_by_regex(std::string_view text, const SplitRegex& regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string_view>& out) {
  if (text.empty()) return;  // the one empty piece Hugging Face makes is dropped anyway
  thread_local std::vector<std::pair<std::size_t, std::size_t>> found;
  found.clear();
  regex.find_all(text, found);
  // Every byte of the text in order: (start, end, is_match), as Pattern::find_matches gives them.
  struct Piece {
    std::size_t start, end;
    bool match;
  };
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  std::size_t prev = 0;
  for (const auto& [s, e] : found) {
    if (prev != s) pieces.push_back({prev, s, invert});
    pieces.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != text.size()) pieces.push_back({prev, text.size(), invert});

  auto emit = [&](std::size_t s, std::size_t e) {
    if (e > s) out.push_back(text.substr(s, e - s));
  };
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Piece& p : pieces) emit(p.start, p.end);
      break;
    case SplitBehavior::Removed:
      for (const Piece& p : pieces) {
        if (!p.match) emit(p.start, p.end);
      }
      break;
    case SplitBehavior::Contiguous:
    case SplitBehavior::MergedWithPrevious: {
      // Contiguous: runs of pieces with the same flag fuse; MergedWithPrevious: a match joins
      // the piece before it (when that piece was not a match itself).
      std::vector<std::pair<std::size_t, std::size_t>> acc;
      bool previous_match = false;
      for (const Piece& p : pieces) {
        const bool join = behavior == SplitBehavior::Contiguous ? p.match == previous_match
                                                                : (p.match && !previous_match);
        if (join && !acc.empty()) {
          acc.back().second = p.end;
        } else {
          acc.emplace_back(p.start, p.end);
        }
        previous_match = p.match;
      }
      for (const auto& [s, e] : acc) emit(s, e);
      break;
    }
    case SplitBehavior::MergedWithNext: {
      std::vector<std::pair<std::size_t, std::size_t>> acc;  // built from the end
      bool previous_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->match && !previous_match && !acc.empty()) {
          acc.back().first = it->start;
        } else {
          acc.emplace_back(it->start, it->end);
        }
        previous_match = it->match;
      }
      for (auto it = acc.rbegin(); it != acc.rend(); ++it) emit(it->first, it->second);
      break;
    }
  }
}

// ---- BPE model ------------------------------------------------------------------------------

namespace {

std::atomic<uint64_t> g_next_model_serial{1};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Words seen by this thread, for the last model it encoded with (keyed by the model's serial
// number, never by its address, which a later model may reuse). Short words only.
struct WordCache {
  uint64_t serial = 0;
  std::unordered_map<std::string, std::vector<int32_t>, TokenHash, std::equal_to<>> words;
};
constexpr std::size_t kCachedWordBytes = 64;
constexpr std::size_t kCachedWords = 1 << 17;

WordCache& word_cache(uint64_t serial) {
  thread_local WordCache cache;
  if (cache.serial != serial || cache.words.size() >= kCachedWords) {
    cache.words.clear();
    cache.serial = serial;
  }
  return cache;
}

std::string fallback_token(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

}  // namespace

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, const Options& options,
                   bool byte_level, const std::string& source)
    : byte_level_(byte_level), options_(options), serial_(g_next_model_serial.fetch_add(1)) {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) throw_io_error(source, str_cat("token '", token, "' has the negative id ", id));
    max_id = std::max(max_id, id);
  }
  // The id table is as long as the largest id: an id far beyond the vocabulary's size (2^31 - 1
  // in a file of ten tokens) would ask for gigabytes. Gaps up to 2^20 ids are allowed.
  constexpr int64_t kMaxIdGap = int64_t{1} << 20;
  if (static_cast<int64_t>(max_id) >= static_cast<int64_t>(vocab.size()) + kMaxIdGap)
    throw_io_error(source, str_cat("the largest token id ", max_id, " lies more than ", kMaxIdGap,
                                   " ids beyond the vocabulary's ", vocab.size(), " tokens"));
  tokens_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  present_.assign(tokens_.size(), 0);
  vocab_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    if (present_[id]) {
      throw_io_error(source, str_cat("id ", id, " belongs to two tokens, '", tokens_[id], "' and '", token, "'"));
    }
    present_[id] = 1;
    tokens_[id] = token;
    vocab_[std::move(token)] = id;
  }
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t ia = id_of(a), ib = id_of(b), merged = id_of(a + b);
    if (ia < 0 || ib < 0 || merged < 0) {
      const std::string& missing = ia < 0 ? a : ib < 0 ? b : a + b;
      throw_io_error(source, str_cat("merge ", rank + 1, " ('", a, "' '", b, "'): '", missing,
                                     "' is not in the vocabulary"));
    }
    // A pair listed twice keeps its last rank, as Hugging Face's map does.
    merges_[pair_key(ia, ib)] = {static_cast<int32_t>(rank), merged};
  }
  if (options_.unk_token) {
    unk_id_ = id_of(*options_.unk_token);
    if (unk_id_ < 0) throw_io_error(source, str_cat("the unk_token '", *options_.unk_token, "' is not in the vocabulary"));
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = byte_level_ ? id_of(byte_level_chars()[b]) : -1;
    fallback_ids_[b] = id_of(fallback_token(static_cast<unsigned char>(b)));
  }
  if (byte_level_ && options_.ignore_merges) {
    for (const auto& [token, id] : vocab_) {
      if (auto raw = byte_level_unmap(token)) raw_vocab_.emplace(std::move(*raw), id);
    }
  }
}

const std::string* BpeModel::token_of(int32_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(tokens_.size()) || !present_[id]) return nullptr;
  return &tokens_[id];
}

int32_t BpeModel::id_of(std::string_view token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

// Hugging Face's BPE::merge_word before the merges: one symbol per character (per byte for a
// byte-level model, whose characters each stand for one byte), unknown characters as their
// <0xXX> byte tokens with byte_fallback, else as the unk token (runs fused with fuse_unk), else
// dropped. A pending unk is only written when a known character or the end comes, as there.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  int32_t pending_unk = -1;
  auto unknown = [&](std::string_view spelled) {
    if (options_.byte_fallback) {
      bool all = true;
      for (const char c : spelled) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : spelled) symbols.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        return;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !options_.fuse_unk) symbols.push_back(pending_unk);
      pending_unk = unk_id_;
    }
  };
  auto known = [&](int32_t id) {
    if (pending_unk >= 0) {
      symbols.push_back(pending_unk);
      pending_unk = -1;
    }
    symbols.push_back(id);
  };
  if (byte_level_) {
    for (const char c : word) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        known(id);
      } else {
        unknown(byte_level_chars()[static_cast<unsigned char>(c)]);
      }
    }
  } else {
    for (std::size_t i = 0; i < word.size();) {
      const std::size_t n = utf8_length_or_one(word, i);
      const std::string_view spelled = word.substr(i, n);
      const auto it = vocab_.find(spelled);
      if (it != vocab_.end()) {
        known(it->second);
      } else {
        unknown(spelled);
      }
      i += n;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

// Hugging Face's Word::merge_all: a min-heap of (rank, position) over the adjacent pairs; an
// entry whose pair has changed since it was pushed is skipped.
void BpeModel::merge_word(std::vector<int32_t>& symbols) const {
  const std::size_t n = symbols.size();
  if (n < 2) return;
  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<uint8_t> alive;
  thread_local std::vector<Entry> heap;  // a min-heap through std::greater
  prev.resize(n);
  next.resize(n);
  alive.assign(n, 1);
  heap.clear();
  const auto push = [&](const Entry& e) {
    heap.push_back(e);
    std::push_heap(heap.begin(), heap.end(), std::greater<Entry>());
  };
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const auto it = merges_.find(pair_key(symbols[i], symbols[i + 1]));
    if (it != merges_.end()) push({it->second.first, static_cast<int32_t>(i), it->second.second});
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Entry>());
    const Entry top = heap.back();
    heap.pop_back();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    const auto it = merges_.find(pair_key(symbols[top.pos], symbols[right]));
    if (it == merges_.end() || it->second.second != top.merged) continue;
    symbols[top.pos] = top.merged;
    alive[right] = 0;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) {
      const auto p = merges_.find(pair_key(symbols[prev[top.pos]], symbols[top.pos]));
      if (p != merges_.end()) push({p->second.first, prev[top.pos], p->second.second});
    }
    if (next[top.pos] >= 0) {
      const auto q = merges_.find(pair_key(symbols[top.pos], symbols[next[top.pos]]));
      if (q != merges_.end()) push({q->second.first, top.pos, q->second.second});
    }
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[w++] = symbols[i];
  }
  symbols.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  // The cache holds what the rest gives (the ignore_merges lookup included), so a word seen
  // before costs one lookup.
  const bool cacheable = word.size() <= kCachedWordBytes;
  if (cacheable) {
    WordCache& cache = word_cache(serial_);
    const auto it = cache.words.find(word);
    if (it != cache.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  bool whole = false;
  if (options_.ignore_merges) {
    const auto& table = byte_level_ ? raw_vocab_ : vocab_;
    const auto it = table.find(word);
    if (it != table.end()) {
      symbols.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    initial_symbols(word, symbols);
    merge_word(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) word_cache(serial_).words.emplace(std::string(word), symbols);
}

// ---- GPT2BPETokenizer -----------------------------------------------------------------------

namespace {

const SplitRegex& gpt2_regex() {
  static const SplitRegex regex(kGpt2SplitPattern, "GPT-2's pre-tokenisation regex");
  return regex;
}

std::vector<std::pair<std::string, int32_t>> read_vocab_json(const std::string& path) {
  const std::string text = read_tokenizer_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_io_error(path, str_cat("is not JSON (", e.what(), ")"));
  }
  if (!j.is_object()) throw_io_error(path, "is not a JSON object of token -> id (vocab.json)");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      throw_io_error(path, str_cat("the id of '", it.key(), "' is not an integer in [0, 2^31)"));
    }
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }
  return vocab;
}

// merges.txt as Hugging Face's BPE::read_file reads it: "#version" lines are skipped, every
// other line is two tokens separated by one space. Blank lines are skipped too (GPT-2's reader
// gives them no pair either).
std::vector<std::pair<std::string, std::string>> read_merges_txt(const std::string& path) {
  const std::string text = read_tokenizer_file(path);
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.substr(0, 8) == "#version") continue;
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      throw_io_error(path, str_cat("line ", line_no, " is not two tokens separated by one space"));
    }
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  return merges;
}

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file)
      : model_(read_vocab_json(vocab_file), read_merges_txt(merge_file), BpeModel::Options{}, /*byte_level=*/true,
               vocab_file + " / " + merge_file) {
    eod_ = model_.id_of("<|endoftext|>");
  }
  TokenizerType type() const override { return TokenizerType::Gpt2Bpe; }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    thread_local std::vector<std::string_view> words;
    words.clear();
    split_by_regex(text, gpt2_regex(), SplitBehavior::Isolated, false, words);
    for (const std::string_view w : words) model_.encode_word(w, ids);
    return ids;
  }
  std::string decode(const int32_t* ids, std::size_t count) const override {
    PTDP_CHECK_ARG(ids != nullptr || count == 0, "ids is NULL");
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
      const std::string* token = model_.token_of(ids[i]);
      PTDP_CHECK_ARG(token != nullptr, str_cat("id ", ids[i], " at position ", i, " is not in the vocabulary"));
      if (auto raw = byte_level_unmap(*token)) {
        out += *raw;
      } else {
        out += *token;
      }
    }
    return out;
  }
  int64_t vocab_size() const override { return std::max(model_.size(), model_.id_bound()); }
  int32_t eod() const override { return eod_; }
  int32_t bos() const override { return -1; }
  int32_t token_to_id(std::string_view token) const override { return model_.id_of(token); }
  std::string id_to_token(int32_t id) const override {
    const std::string* token = model_.token_of(id);
    PTDP_CHECK_ARG(token != nullptr, str_cat("id ", id, " is not in the vocabulary"));
    return *token;
  }

 private:
  BpeModel model_;
  int32_t eod_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_bpe_tokenizer(const std::string& vocab_file, const std::string& merge_file) {
  return std::make_unique<Gpt2BpeTokenizer>(vocab_file, merge_file);
}

}  // namespace ptdp
