// A recursive-descent reader of Megatron's list patterns, Python's own precedence:
//   sum     := product ('+' product)*
//   product := atom ('*' atom)*
//   atom    := INTEGER | '[' [sum (',' sum)* [',']] ']' | '(' sum ')'
// A value is an integer or a list of integers; '+' adds integers or concatenates lists, '*'
// multiplies integers or repeats a list (a count below 1 gives the empty list, as Python).
#include "core/model/moe_layer_freq.h"

#include <charconv>
#include <cstdint>

#include "base/error.h"

namespace ptdp {

namespace {

// Beyond any model's depth, and small enough that "[1]*9999999999" cannot exhaust memory.
constexpr int64_t kMaxEntries = int64_t{1} << 20;
// Parentheses and brackets nested deeper than this are refused before the stack is at risk.
constexpr int kMaxDepth = 64;

/// "--flag: 'value' why", the words of the flag parsers (core/args/flag_table.h).
[[noreturn]] void bad_value(const std::string& flag, const std::string& value, const std::string& why) {
  throw_error(ErrorCode::InvalidArgument, str_cat("--", flag, ": '", value, "' ", why));
}

/// The whole of `text` as a non-negative decimal number that fits `out`.
template <typename T>
bool read_number(const std::string& text, T& out) {
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(text.data(), last, out);
  return ec == std::errc() && end == last && !text.empty() && text[0] != '-';
}

struct Value {
  bool is_list = false;
  int64_t number = 0;
  std::vector<int64_t> list;
};

class PatternReader {
 public:
  PatternReader(const std::string& flag, const std::string& text) : flag_(flag), text_(text) {}

  std::vector<int64_t> read() {
    const Value v = sum(0);
    if (pos_ != text_.size()) fail(str_cat("has '", text_[pos_], "' where the pattern should end"));
    if (!v.is_list) fail("is a number, not a list of 0 and 1 per layer");
    return v.list;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    bad_value(flag_, text_, str_cat(why, " (at character ", pos_ + 1, ")"));
  }

  bool take(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Value sum(int depth) {
    Value v = product(depth);
    while (take('+')) {
      const Value rhs = product(depth);
      if (v.is_list != rhs.is_list) fail("adds a number to a list");
      if (v.is_list) {
        if (static_cast<int64_t>(v.list.size() + rhs.list.size()) > kMaxEntries) too_long();
        v.list.insert(v.list.end(), rhs.list.begin(), rhs.list.end());
      } else if (__builtin_add_overflow(v.number, rhs.number, &v.number)) {
        fail("overflows a 64-bit integer");
      }
    }
    return v;
  }

  Value product(int depth) {
    Value v = atom(depth);
    while (take('*')) {
      const Value rhs = atom(depth);
      if (v.is_list && rhs.is_list) fail("multiplies two lists");
      if (!v.is_list && !rhs.is_list) {
        if (__builtin_mul_overflow(v.number, rhs.number, &v.number)) fail("overflows a 64-bit integer");
        continue;
      }
      const std::vector<int64_t>& list = v.is_list ? v.list : rhs.list;
      const int64_t times = v.is_list ? rhs.number : v.number;
      std::vector<int64_t> out;
      if (times > 0 && !list.empty()) {
        if (times > kMaxEntries / static_cast<int64_t>(list.size())) too_long();
        for (int64_t i = 0; i < times; ++i) out.insert(out.end(), list.begin(), list.end());
      }
      v.is_list = true;
      v.list = std::move(out);
    }
    return v;
  }

  Value atom(int depth) {
    if (depth > kMaxDepth) fail(str_cat("nests brackets deeper than ", kMaxDepth));
    Value v;
    if (take('(')) {
      v = sum(depth + 1);
      if (!take(')')) fail("misses a ')'");
      return v;
    }
    if (take('[')) {
      v.is_list = true;
      while (!take(']')) {
        const Value item = sum(depth + 1);
        if (item.is_list) fail("has a list inside a list");
        v.list.push_back(item.number);
        if (static_cast<int64_t>(v.list.size()) > kMaxEntries) too_long();
        if (!take(',')) {
          if (!take(']')) fail("misses a ']' or ','");
          break;
        }
      }
      return v;
    }
    const std::size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (start == pos_) {
      if (pos_ == text_.size()) fail("ends where a number, '[' or '(' should follow");
      fail(str_cat("has '", text_[pos_], "' where a number, '[' or '(' should be"));
    }
    int64_t n = 0;
    if (!read_number(text_.substr(start, pos_ - start), n)) fail("has a number beyond 64 bits");
    v.number = n;
    return v;
  }

  [[noreturn]] void too_long() const { fail(str_cat("has more than ", kMaxEntries, " entries")); }

  const std::string& flag_;
  const std::string& text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<int> parse_moe_layer_freq(const std::string& value, int num_layers, const std::string& flag) {
  if (value.find('[') == std::string::npos) {
    int every = 0;
    if (!read_number(value, every) || every < 1) {
      bad_value(flag, value, "is not an integer >= 1 (every N-th layer is MoE) or a list pattern");
    }
    std::vector<int> pattern;
    if (every == 1) return pattern;
    for (int i = 0; i < num_layers; ++i) pattern.push_back(i % every == 0 ? 1 : 0);
    return pattern;
  }
  // Megatron's own check before its eval(): digits, ',', '[', ']', '(', ')', '+', '*' only.
  for (std::size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    const bool allowed = (c >= '0' && c <= '9') || c == ',' || c == '[' || c == ']' || c == '(' || c == ')' ||
                         c == '+' || c == '*';
    if (!allowed) {
      bad_value(flag, value,
                     str_cat("has '", c, "' (at character ", i + 1,
                             "); a pattern holds only digits, ',', '[', ']', '(', ')', '+' and '*', as Megatron's"));
    }
  }
  const std::vector<int64_t> entries = PatternReader(flag, value).read();
  std::vector<int> pattern;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] != 0 && entries[i] != 1) {
      bad_value(flag, value,
                     str_cat("gives layer ", i, " the entry ", entries[i], "; each entry is 0 (dense) or 1 (MoE)"));
    }
    pattern.push_back(static_cast<int>(entries[i]));
  }
  return pattern;
}

std::string format_moe_layer_freq(const std::vector<int>& pattern, int num_layers) {
  if (pattern.empty()) return "1";
  if (static_cast<int>(pattern.size()) == num_layers && pattern[0] == 1) {
    // Only one N can fit: the distance to the second MoE layer (num_layers if there is none).
    std::size_t every = 1;
    while (every < pattern.size() && pattern[every] == 0) ++every;
    bool same = every > 1;
    for (std::size_t i = 0; i < pattern.size() && same; ++i) same = pattern[i] == (i % every == 0 ? 1 : 0);
    if (same) return std::to_string(every);
  }
  std::string s = "[";
  for (std::size_t i = 0; i < pattern.size(); ++i) s += str_cat(i > 0 ? "," : "", pattern[i]);
  return s + "]";
}

}  // namespace ptdp
