// bench_common.h: small helpers shared by the benchmark programs (bench_kernels, bench_gpt,
// bench_gpu, bench_train). Header-only, all inline; nothing here is part of the ptdp libraries.
#pragma once

#include <cstring>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <optional>
#include <string>

namespace ptdp::bench {

/// The clock every benchmark times with: monotonic, so wall-clock adjustments cannot skew a run.
using Clock = std::chrono::steady_clock;

/// Seconds elapsed since t0, as a double, so timings need no duration casts at each call site.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// User + system CPU time of this process so far. Divided by wall time it gives the cores this
/// process kept busy, and it is subtracted from machine_busy_seconds() to see other processes.
inline double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/// CPU seconds all processes on the machine have spent busy so far (Linux /proc/stat; -1
/// where it cannot be read). Minus this process's own CPU time it shows whether anything else
/// competed for the cores during the run, which would skew the numbers.
inline double machine_busy_seconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return -1.0;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice,
                              &system, &idle, &iowait, &irq, &softirq, &steal);
  std::fclose(f);
  const long tick = sysconf(_SC_CLK_TCK);
  if (got < 7 || tick <= 0) return -1.0;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(tick);
}

/// Peak resident set size of this process so far, in bytes (Linux reports KiB), so a benchmark
/// can report the memory a run needed.
inline double max_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return 1024.0 * static_cast<double>(ru.ru_maxrss);
}

/// Strips trailing spaces and newlines and leading spaces from the strings OpenBLAS reports
/// (openblas_get_config, openblas_get_corename), which may carry them, so the header lines and
/// the --json fields print cleanly.
inline std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

/// Escapes s for use inside a JSON string literal (quote, backslash, \n, \t, other control
/// characters as \u00XX), so names, messages and library strings cannot break the --json file.
inline std::string json_escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

/// A number for the --json file: "%.6g", and null for inf/NaN, which JSON cannot represent.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

/// 124439808 -> "124,439,808": large counts (parameters) stay readable in the printed tables.
inline std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

/// SplitMix64 step: a fast, seedable generator, so benchmark inputs (random data, token ids)
/// are reproducible from run to run without <random>'s per-call overhead.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Parses a whole decimal int for a command-line flag: false on empty input, trailing
/// characters or overflow (std::atoi would silently accept "12x" or wrap around).
inline bool parse_int(const std::string& s, int& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < INT_MIN || v > INT_MAX) return false;
  out = static_cast<int>(v);
  return true;
}

/// Walks a command line in which "--flag value" and "--flag=value" mean the same.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
  /// Moves to the next argument; false when there is none left.
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    value_.clear();
    has_value_ = false;
    if (const auto eq = flag_.find('='); flag_.rfind("--", 0) == 0 && eq != std::string::npos) {
      value_ = flag_.substr(eq + 1);
      flag_ = flag_.substr(0, eq);
      has_value_ = true;
    }
    return true;
  }
  /// The flag, without any "=value".
  const std::string& flag() const { return flag_; }
  /// The argument as typed.
  const char* raw() const { return argv_[i_]; }
  /// value(), printing "PROG: FLAG needs a value" and setting exit_code to 2 when it is missing.
  bool require_value(std::string& out, int& exit_code) {
    if (value(out)) return true;
    std::fprintf(stderr, "%s: %s needs a value\n", argv_[0], flag_.c_str());
    exit_code = 2;
    return false;
  }
  /// The flag's value: after '=', else the next argument (consumed). False when the command
  /// line ends first.
  bool value(std::string& out) {
    if (!has_value_) {
      if (i_ + 1 >= argc_) return false;
      value_ = argv_[++i_];
      has_value_ = true;
    }
    out = value_;
    return true;
  }
  /// --help or -h.
  bool is_help() const { return flag_ == "--help" || flag_ == "-h"; }
  /// Prints "PROG: message", sets exit_code to 2 and returns false.
  bool fail(int& exit_code, const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n", argv_[0], message.c_str());
    exit_code = 2;
    return false;
  }
  /// fail() for an argument no flag of the program matches.
  bool unknown(int& exit_code) const {
    return fail(exit_code, "unknown argument '" + std::string(raw()) + "' (try --help)");
  }
  /// require_value() read as a whole int >= min; else fail() names the flag and the value.
  bool int_value(int& out, int min, int& exit_code) {
    std::string v;
    if (!require_value(v, exit_code)) return false;
    if (!parse_int(v, out) || out < min) {
      return fail(exit_code, flag_ + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
    }
    return true;
  }
  bool int_value(std::optional<int>& out, int min, int& exit_code) {
    int v = 0;
    if (!int_value(v, min, exit_code)) return false;
    out = v;
    return true;
  }
  /// require_value() read by std::atof, which must give a number >= 0 (seconds, say).
  bool non_negative_value(double& out, int& exit_code) {
    std::string v;
    if (!require_value(v, exit_code)) return false;
    out = std::atof(v.c_str());
    return out >= 0.0 || fail(exit_code, flag_ + " must be >= 0");
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_, value_;
  bool has_value_ = false;
};

/// Walks the command line: --help (or -h) prints help(argv[0]) and stops with exit code 0; every
/// other flag goes to on_flag(args), which returns false once it has reported a bad flag (and
/// set exit_code). False: stop with exit_code.
template <class OnFlag>
bool read_flags(int argc, char** argv, void (*help)(const char*), int& exit_code, OnFlag on_flag) {
  exit_code = 0;
  Args args(argc, argv);
  while (args.next()) {
    if (args.is_help()) {
      help(argv[0]);
      return false;
    }
    if (!on_flag(args)) return false;
  }
  return true;
}

/// The flags of the benchmarks that time named cases (bench_gpu, bench_kernels).
struct CaseOptions {
  bool quick = false;
  std::string filter;
  std::string json_path;
  int runs = 0;            // 0: default for the mode
  double min_time = -1.0;  // seconds per run; < 0: default for the mode
};

/// Reads the current flag into `o` when it is one of CaseOptions' (--quick, --filter, --json,
/// --runs N >= 1, --min-time S >= 0) and returns true, with `ok` false after reporting a bad
/// value; returns false for any other flag.
inline bool read_case_flag(Args& args, CaseOptions& o, bool& ok, int& exit_code) {
  const std::string& f = args.flag();
  if (f == "--quick") {
    o.quick = true;
  } else if (f == "--filter") {
    ok = args.require_value(o.filter, exit_code);
  } else if (f == "--json") {
    ok = args.require_value(o.json_path, exit_code);
  } else if (f == "--runs") {
    ok = args.int_value(o.runs, 1, exit_code);
  } else if (f == "--min-time") {
    ok = args.non_negative_value(o.min_time, exit_code);
  } else {
    return false;
  }
  return true;
}

/// One line of an options list: the flag as typed ("--runs N") and what it does; a '\n' in `text`
/// continues it on the next line, in the same column.
struct OptionHelp {
  const char* flag;
  const char* text;
};

/// Prints "Usage: ARGV0 [options]", a blank line, `intro` (ending with a heading such as
/// "Options:\n"), then `options` followed by --json PATH and --help, which every benchmark has,
/// their texts in one column two spaces right of the longest flag.
inline void print_help(const char* argv0, const char* intro, std::initializer_list<OptionHelp> options) {
  const OptionHelp common[] = {{"--json PATH", "also write the results as JSON to PATH"}, {"--help", "this text"}};
  std::size_t width = 0;
  for (const OptionHelp& o : options) width = std::max(width, std::strlen(o.flag));
  for (const OptionHelp& o : common) width = std::max(width, std::strlen(o.flag));
  std::printf("Usage: %s [options]\n\n%s", argv0, intro);
  const auto print = [width](const OptionHelp& o) {
    std::string text = o.text;
    for (std::size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) {
      text.insert(at + 1, width + 4, ' ');
    }
    std::printf("  %-*s  %s\n", static_cast<int>(width), o.flag, text.c_str());
  };
  for (const OptionHelp& o : options) print(o);
  for (const OptionHelp& o : common) print(o);
}

/// A benchmark's main(): `parse(argc, argv, options, exit_code)` (false: exit with exit_code,
/// 0 after --help), then `run(options)`, whose exception is reported as "PROGRAM: what" with
/// exit status 1.
template <class Options, class Parse, class Run>
int bench_main(int argc, char** argv, const char* program, Parse parse, Run run) {
  Options o;
  int exit_code = 0;
  if (!parse(argc, argv, o, exit_code)) return exit_code;
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

/// Writes `text` to `path` and says so; on failure prints why and returns false.
inline bool write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot open %s for writing: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "error writing %s\n", path.c_str());
    return false;
  }
  std::printf("Wrote %s\n", path.c_str());
  return true;
}

}  // namespace ptdp::bench
