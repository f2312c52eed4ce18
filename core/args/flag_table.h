// What ptdp-train's and ptdp-plan's command lines have in common: reading `--flag value` and
// `--flag=value` against a table of flags, with our own messages for unknown flags (suggesting
// the nearest name), missing or empty values and values given to boolean flags; CLI11 collecting
// the values (the last of a repeated flag wins); the converters that turn a value into a number
// or a choice, naming the flag and the value when it does not fit; and the --help layout.
// Every error is Error(InvalidArgument); nothing here prints or exits.
#pragma once

#include <charconv>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"

namespace ptdp::cli {

/// Throws Error(InvalidArgument) with `message`.
[[noreturn]] void fail(const std::string& message);

/// Throws Error(InvalidArgument): "--flag: 'value' why".
[[noreturn]] void bad_value(const std::string& flag, const std::string& value, const std::string& why);

/// The converters' words, for a parser that reads a value its own way.
inline constexpr const char* kNotAnInteger = "is not an integer";
inline constexpr const char* kNotFinite = "is not a finite number";

/// "is out of range [lo, hi]".
template <typename T>
std::string out_of_range(T lo, T hi) {
  return str_cat("is out of range [", std::to_string(lo), ", ", std::to_string(hi), "]");
}

/// The whole of `value` read by std::from_chars: std::errc() on success, result_out_of_range when
/// it does not fit a T, invalid_argument otherwise (trailing characters included).
template <typename T>
std::errc read_whole(const std::string& value, T& out) {
  const char* last = value.data() + value.size();
  const auto [end, ec] = std::from_chars(value.data(), last, out);
  if (ec != std::errc()) return ec;
  return end == last ? std::errc() : std::errc::invalid_argument;
}

/// `value` as a T; throws naming the flag when it is not an integer or does not fit a T.
template <typename T>
T to_integer(const std::string& flag, const std::string& value) {
  T v{};
  const std::errc ec = read_whole(value, v);
  if (ec == std::errc::result_out_of_range) {
    bad_value(flag, value, out_of_range(std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  }
  if (ec != std::errc()) bad_value(flag, value, std::is_unsigned_v<T> ? "is not a non-negative integer" : kNotAnInteger);
  return v;
}

/// `value` as a finite double; throws naming the flag otherwise.
double to_number(const std::string& flag, const std::string& value);

/// A condition on a number and how a failing value is described ("must be > 0").
struct Check {
  std::function<bool(double)> ok;
  const char* want;
};
extern const Check kPositive;     ///< > 0
extern const Check kNonNegative;  ///< >= 0
extern const Check kProbability;  ///< in [0, 1)
extern const Check kAny;

/// A flag's choices: the command-line spelling and the value it stands for.
template <typename E>
using Choices = std::vector<std::pair<std::string, E>>;

/// The spellings joined by `separator`.
template <typename E>
std::string choice_list(const Choices<E>& choices, const char* separator) {
  std::string s;
  for (const auto& c : choices) {
    if (!s.empty()) s += separator;
    s += c.first;
  }
  return s;
}

/// "{a,b,c}": how --help names a choice's value.
template <typename E>
std::string choice_metavar(const Choices<E>& choices) {
  return str_cat("{", choice_list(choices, ","), "}");
}

/// The value `value` spells; throws "... is not one of a, b, c" otherwise.
template <typename E>
E to_choice(const std::string& flag, const std::string& value, const Choices<E>& choices) {
  for (const auto& c : choices) {
    if (c.first == value) return c.second;
  }
  bad_value(flag, value, str_cat("is not one of ", choice_list(choices, ", ")));
}

/// What the shared machinery knows of a flag; each parser derives its own Flag from it.
struct FlagSpec {
  std::string name;     ///< without the leading dashes
  std::string metavar;  ///< empty: a boolean flag, which takes no value
  std::string help;
  bool is_boolean() const { return metavar.empty(); }
};

/// How a tool words the arguments that are not flags.
struct Wording {
  std::string program;  ///< "ptdp-train": the default in the usage line, and CLI11's app name
  /// Set: "-x" is reported as "unknown flag -x (NOTE)"; empty: as an unexpected argument.
  std::string single_dash_note;
  /// What follows "unexpected argument 'x': ".
  std::string stray_note;
};

/// A parser's flags, in table order, viewed by their FlagSpec. The table must outlive it.
class FlagTable {
 public:
  template <typename F>
  FlagTable(const std::vector<F>& flags, Wording wording) : wording_(std::move(wording)) {
    for (const F& f : flags) flags_.push_back(&f);
  }

  /// The index of the flag named `name`, or std::nullopt.
  std::optional<std::size_t> index_of(const std::string& name) const;

  /// Reads a command line (without the program name): for each flag in table order, its value
  /// (the last one given; an empty string for a boolean flag) or std::nullopt when not given.
  /// Throws naming the flag: unknown flags (with the nearest name within two edits), missing or
  /// empty values, values given to boolean flags, and stray arguments.
  std::vector<std::optional<std::string>> read(const std::vector<std::string>& args) const;

  /// "Usage: PROGRAM [flags]\n\n", with the table's program when `program` is empty.
  std::string usage(const std::string& program) const;

 private:
  [[noreturn]] void unknown_flag(const std::string& name) const;
  std::vector<std::string> normalise(const std::vector<std::string>& args) const;

  std::vector<const FlagSpec*> flags_;
  Wording wording_;
};

/// True when `args` holds --help or -h anywhere.
bool asks_for_help(const std::vector<std::string>& args);

/// One flag's --help entry: "  --name METAVAR", its help from `column` on (on the next line when
/// the name is too long), then "Default: DEFAULT." (never split); lines wrap at `width` columns.
std::string help_entry(const FlagSpec& flag, const std::string& default_text, std::size_t column,
                       std::size_t width = std::numeric_limits<std::size_t>::max());

}  // namespace ptdp::cli
