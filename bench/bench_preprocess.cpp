// bench_preprocess: documents/s and MB/s of ptdp-preprocess-data's engine
// (ptdp::preprocess_json_lines) on two inputs, with 1 and 2 workers (or --workers LIST):
//
//  1. the GNU GPL v3 (/usr/share/common-licenses/GPL-3) split into paragraphs, one JSON line
//     each, the file read --gpl-passes times (default 200) so the run lasts long enough to time;
//  2. a generated JSON-lines file of --size-mb MB (default 100; --quick: 10) of English-like
//     documents of 200 B to 8 KB with escapes and non-ASCII text, written to /tmp at bench time
//     and removed afterwards (--keep keeps it).
//
// The tokenizer is ByteLevel unless the tokenizer flags of ptdp-preprocess-data are given
// (--tokenizer-type, --vocab-file, --merge-file, --tokenizer-model, --vocab-size). Each
// configuration runs --runs times (default 3); the table shows the median run. MB are 2^20
// bytes of JSON input, as Megatron's progress line counts them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "bench/bench_common.h"
#include "core/data/preprocess.h"
#include "core/data/tokenizer.h"
#include "io/json_text.h"

namespace {

namespace fs = std::filesystem;

struct Config {
  double size_mb = 100;
  int gpl_passes = 200;
  int runs = 3;
  std::vector<int> workers{1, 2};
  bool keep = false;
  ptdp::TokenizerConfig tokenizer;
};

[[noreturn]] void usage(int status) {
  std::fprintf(status ? stderr : stdout,
               "usage: bench_preprocess [--quick] [--size-mb MB] [--gpl-passes N] [--runs N] [--workers N,N,...]\n"
               "                        [--keep] [--tokenizer-type NAME] [--vocab-file PATH] [--merge-file PATH]\n"
               "                        [--tokenizer-model PATH] [--vocab-size N]\n");
  std::exit(status);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--quick") {
      c.size_mb = 10;
      c.gpl_passes = 40;
      c.runs = 1;
    } else if (a == "--size-mb") {
      c.size_mb = std::atof(value().c_str());
    } else if (a == "--gpl-passes") {
      c.gpl_passes = std::atoi(value().c_str());
    } else if (a == "--runs") {
      c.runs = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--workers") {
      c.workers.clear();
      std::stringstream ss(value());
      for (std::string w; std::getline(ss, w, ',');) c.workers.push_back(std::max(1, std::atoi(w.c_str())));
    } else if (a == "--keep") {
      c.keep = true;
    } else if (a == "--tokenizer-type") {
      const auto t = ptdp::tokenizer_type_from_name(value());
      if (!t) usage(2);
      c.tokenizer.type = *t;
    } else if (a == "--vocab-file") {
      c.tokenizer.vocab_file = value();
    } else if (a == "--merge-file") {
      c.tokenizer.merge_file = value();
    } else if (a == "--tokenizer-model") {
      c.tokenizer.tokenizer_model = value();
    } else if (a == "--vocab-size") {
      c.tokenizer.vocab_size = std::atoll(value().c_str());
    } else if (a == "--help" || a == "-h") {
      usage(0);
    } else {
      usage(2);
    }
  }
  return c;
}

// The GPL's paragraphs as JSON lines; returns the number of documents.
int64_t write_gpl(const std::string& path) {
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  if (!in) return -1;
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::ofstream out(path);
  int64_t docs = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find("\n\n", start);
    if (end == std::string::npos) end = text.size();
    const std::string paragraph = text.substr(start, end - start);
    if (paragraph.find_first_not_of(" \n") != std::string::npos) {
      out << ptdp::json_text(nlohmann::json{{"text", paragraph + "\n"}}) << "\n";
      ++docs;
    }
    start = end + 2;
  }
  return docs;
}

// English-like documents from a fixed word list, with quotes, newlines and UTF-8 (escaped by
// the JSON writer), until `bytes` bytes are written; returns the number of documents.
int64_t write_generated(const std::string& path, int64_t bytes) {
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
      "he", "I", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
      "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will",
      "would", "who", "so", "no", "parallelism", "pipeline", "tensor", "gradient", "café", "naïve", "\"quoted\"",
      "Zürich", "東京", "data-parallel", "1024", "3.14159", "e.g.", "(see", "below)"};
  constexpr std::size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  std::ofstream out(path, std::ios::binary);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int64_t written = 0, docs = 0;
  std::string text;
  while (written < bytes) {
    text.clear();
    const std::size_t target = 200 + next() % 8000;
    while (text.size() < target) {
      text += kWords[next() % kNumWords];
      const uint64_t r = next() % 100;
      text += r < 2 ? ".\n\n" : r < 8 ? ". " : r < 12 ? ", " : " ";
    }
    const std::string line = ptdp::json_text(nlohmann::json{{"id", docs}, {"text", text}}) + "\n";
    out << line;
    written += static_cast<int64_t>(line.size());
    ++docs;
  }
  return docs;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  f >> one;
  return one.empty() ? "unknown" : one;
}

struct Figures {
  double docs_per_s = 0, mb_per_s = 0, seconds = 0, cpu_seconds = 0;
  int64_t documents = 0, tokens = 0, bytes = 0;
};

Figures run(const Config& c, const std::vector<std::string>& inputs, const std::string& prefix, int workers,
            const ptdp::Tokenizer& tokenizer) {
  ptdp::PreprocessOptions o;
  o.inputs = inputs;
  o.output_prefix = prefix;
  o.tokenizer = c.tokenizer;
  o.workers = workers;
  o.log_interval = 0;
  std::vector<Figures> all;
  for (int r = 0; r < c.runs; ++r) {
    const double cpu0 = ptdp::bench::cpu_seconds();
    const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, tokenizer, nullptr);
    Figures f;
    f.cpu_seconds = ptdp::bench::cpu_seconds() - cpu0;
    f.seconds = s.seconds;
    f.documents = s.documents;
    f.tokens = s.tokens;
    f.bytes = s.bytes;
    f.docs_per_s = static_cast<double>(s.documents) / s.seconds;
    f.mb_per_s = static_cast<double>(s.bytes) / s.seconds / 1024 / 1024;
    all.push_back(f);
  }
  std::sort(all.begin(), all.end(), [](const Figures& a, const Figures& b) { return a.seconds < b.seconds; });
  return all[all.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  const fs::path dir = fs::temp_directory_path() / ("ptdp_bench_preprocess_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int status = 0;
  try {
    const std::unique_ptr<ptdp::Tokenizer> tokenizer = ptdp::make_tokenizer(c.tokenizer);
    std::printf("bench_preprocess: tokenizer %s (%lld ids), %u hardware threads, load average %s\n",
                ptdp::tokenizer_type_name(tokenizer->type()), static_cast<long long>(tokenizer->vocab_size()),
                std::thread::hardware_concurrency(), load_average().c_str());
    const std::string gpl = (dir / "gpl.jsonl").string();
    const int64_t gpl_docs = write_gpl(gpl);
    const std::string generated = (dir / "generated.jsonl").string();
    const auto t0 = ptdp::bench::Clock::now();
    const int64_t gen_docs = write_generated(generated, static_cast<int64_t>(c.size_mb * 1024 * 1024));
    std::printf("inputs: GPL-3 as %lld paragraphs x %d passes; generated %s: %lld documents, %.1f MB (written in "
                "%.1f s)\n\n",
                static_cast<long long>(gpl_docs), c.gpl_passes, generated.c_str(), static_cast<long long>(gen_docs),
                static_cast<double>(fs::file_size(generated)) / 1024 / 1024, ptdp::bench::seconds_since(t0));
    std::printf("%-22s %8s %11s %9s %12s %12s %9s %9s %13s\n", "input", "workers", "documents", "MB", "docs/s",
                "MB/s", "seconds", "cpu s", "MB/cpu-s");
    struct Input {
      const char* name;
      std::vector<std::string> files;
    };
    std::vector<Input> inputs;
    if (gpl_docs > 0) inputs.push_back({"GPL-3 paragraphs", std::vector<std::string>(static_cast<std::size_t>(c.gpl_passes), gpl)});
    inputs.push_back({"generated JSON lines", {generated}});
    for (const Input& in : inputs) {
      for (const int w : c.workers) {
        const Figures f = run(c, in.files, (dir / "out").string(), w, *tokenizer);
        const double mb = static_cast<double>(f.bytes) / 1024 / 1024;
        std::printf("%-22s %8d %11lld %9.1f %12.0f %12.2f %9.2f %9.2f %13.2f\n", in.name, w,
                    static_cast<long long>(f.documents), mb, f.docs_per_s, f.mb_per_s, f.seconds, f.cpu_seconds,
                    mb / std::max(f.cpu_seconds, 1e-9));
        std::fflush(stdout);
      }
    }
    std::printf("\n(median of %d run%s; cpu s: this process's CPU time, all threads; MB/cpu-s shows the cost\n"
                " when other processes share the cores; load average now %s)\n",
                c.runs, c.runs > 1 ? "s" : "", load_average().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_preprocess: %s\n", e.what());
    status = 1;
  }
  if (!c.keep) fs::remove_all(dir);
  return status;
}
