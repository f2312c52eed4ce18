// CLI11 matches the flags and collects their values. It never sees anything ambiguous: a first
// walk over the tokens turns `--flag value` into `--flag=value` (so values may start with '-'),
// and reports unknown flags, missing values and values given to boolean flags in our own words,
// naming the flag.
#include "core/args/flag_table.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <CLI/CLI.hpp>

namespace ptdp::cli {

void fail(const std::string& message) { throw_error(ErrorCode::InvalidArgument, message); }

void bad_value(const std::string& flag, const std::string& value, const std::string& why) {
  fail(str_cat("--", flag, ": '", value, "' ", why));
}

double to_number(const std::string& flag, const std::string& value) {
  double v = 0;
  const std::errc ec = read_whole(value, v);
  if (ec == std::errc::result_out_of_range) bad_value(flag, value, "is out of range for a double");
  if (ec != std::errc()) bad_value(flag, value, "is not a number");
  if (!std::isfinite(v)) bad_value(flag, value, kNotFinite);
  return v;
}

const Check kPositive{[](double v) { return v > 0; }, "must be > 0"};
const Check kNonNegative{[](double v) { return v >= 0; }, "must be >= 0"};
const Check kProbability{[](double v) { return v >= 0 && v < 1; }, "must be in [0, 1)"};
const Check kAny{[](double) { return true; }, ""};

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::size_t> FlagTable::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < flags_.size(); ++i) {
    if (flags_[i]->name == name) return i;
  }
  return std::nullopt;
}

void FlagTable::unknown_flag(const std::string& name) const {
  std::string message = str_cat("unknown flag --", name);
  const FlagSpec* best = nullptr;
  std::size_t best_distance = 3;  // suggest only near misses
  for (const FlagSpec* f : flags_) {
    // The distance is at least the difference in length: a long name costs no quadratic work.
    const std::size_t longer = std::max(name.size(), f->name.size()), shorter = std::min(name.size(), f->name.size());
    if (longer - shorter >= best_distance) continue;
    const std::size_t d = edit_distance(name, f->name);
    if (d < best_distance) {
      best_distance = d;
      best = f;
    }
  }
  if (best) message += str_cat(" (did you mean --", best->name, "?)");
  fail(message);
}

/// Turns the command line into `--flag=value` and `--switch` tokens, reporting what CLI11 would
/// word its own way.
std::vector<std::string> FlagTable::normalise(const std::vector<std::string>& args) const {
  std::vector<std::string> tokens;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      const std::size_t eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      const std::optional<std::size_t> index = index_of(name);
      if (!index) unknown_flag(name);
      const FlagSpec& f = *flags_[*index];
      if (f.is_boolean()) {
        if (eq != std::string::npos) fail(str_cat("--", name, " takes no value, got '", a.substr(eq + 1), "'"));
        tokens.push_back(a);
        continue;
      }
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else {
        if (i + 1 == args.size()) fail(str_cat("--", name, ": missing value (", f.metavar, ")"));
        value = args[++i];
        if (value.size() > 2 && value.compare(0, 2, "--") == 0) {
          fail(str_cat("--", name, ": missing value (", f.metavar, ") before ", value));
        }
      }
      if (value.empty()) fail(str_cat("--", name, ": empty value; expected ", f.metavar));
      tokens.push_back(str_cat("--", name, "=", value));
    } else if (!wording_.single_dash_note.empty() && a.size() > 1 && a[0] == '-' &&
               std::isalpha(static_cast<unsigned char>(a[1]))) {
      fail(str_cat("unknown flag ", a, " (", wording_.single_dash_note, ")"));
    } else {
      fail(str_cat("unexpected argument '", a, "': ", wording_.stray_note));
    }
  }
  return tokens;
}

std::vector<std::optional<std::string>> FlagTable::read(const std::vector<std::string>& args) const {
  std::vector<std::string> tokens = normalise(args);
  CLI::App app{wording_.program};
  app.set_help_flag();  // --help is the caller's; CLI11 must neither print nor throw CallForHelp
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // argparse: last wins
  std::vector<CLI::Option*> options;
  options.reserve(flags_.size());
  for (const FlagSpec* f : flags_) {
    const std::string name = str_cat("--", f->name);
    options.push_back(f->is_boolean() ? app.add_flag(name, f->help) : app.add_option(name, f->help));
  }
  std::reverse(tokens.begin(), tokens.end());  // CLI11 consumes its vector from the back
  try {
    app.parse(tokens);
  } catch (const CLI::Error& e) {
    fail(str_cat("command line: ", e.what()));
  }
  std::vector<std::optional<std::string>> values(flags_.size());
  for (std::size_t i = 0; i < flags_.size(); ++i) {
    if (options[i]->count() == 0) continue;
    values[i] = flags_[i]->is_boolean() ? std::string() : options[i]->as<std::string>();
  }
  return values;
}

std::string FlagTable::usage(const std::string& program) const {
  return str_cat("Usage: ", program.empty() ? wording_.program : program, " [flags]\n\n");
}

bool asks_for_help(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; });
}

std::string help_entry(const FlagSpec& flag, const std::string& default_text, std::size_t column,
                       std::size_t width) {
  std::vector<std::string> words;
  for (std::size_t at = 0; at < flag.help.size();) {
    const std::size_t end = std::min(flag.help.find(' ', at), flag.help.size());
    if (end > at) words.push_back(flag.help.substr(at, end - at));
    at = end + 1;
  }
  words.push_back(str_cat("Default: ", default_text, "."));
  std::string out;
  std::string line = str_cat("  --", flag.name, flag.is_boolean() ? "" : " ", flag.metavar);
  if (line.size() + 2 > column) {
    out += str_cat(line, "\n");
    line.clear();
  }
  line.append(column - line.size(), ' ');
  bool first = true;
  for (const std::string& w : words) {
    if (!first && line.size() + 1 + w.size() > width) {
      out += str_cat(line, "\n");
      line.assign(column, ' ');
      first = true;
    }
    line += str_cat(first ? "" : " ", w);
    first = false;
  }
  return str_cat(out, line, "\n");
}

}  // namespace ptdp::cli
