// bench_tokenizer: encode throughput of ptdp's tokenizers (core/data/tokenizer.h), in MB/s of
// input text, on one thread and on N threads sharing one tokenizer (as ptdp-preprocess-data's
// workers do).
//
// The text is the GNU GPL v3 (/usr/share/common-licenses/GPL-3, or --text PATH) repeated
// --repeat times, cut into paragraphs (documents); each thread encodes a contiguous share of the
// documents. Every tokenizer encodes the same documents; the ids of the N-thread run must equal
// the one-thread run's (checked). MB is 10^6 bytes; the time is the median of --runs runs.
//
// Tokenizers: by default the committed test fixtures (tests/data/fixtures: a GPT-2 BPE, Llama 3
// and Qwen2 shaped tokenizer.json files, a SentencePiece BPE, all with small vocabularies) and
// ByteLevel; or one given with Megatron's flags (--tokenizer-type NAME --vocab-file ...
// --merge-file ... --tokenizer-model ...), e.g. a real Llama 3 tokenizer.json.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <functional>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "bench/bench_common.h"
#include "core/data/bpe_tokenizer.h"
#include "core/data/tokenizer.h"

namespace {

using ptdp::bench::Clock;
using ptdp::bench::seconds_since;

struct Options {
  std::string text = "/usr/share/common-licenses/GPL-3";
  int repeat = 20;
  int threads = 0;  // 0: the machine's hardware threads
  int runs = 3;
  bool quick = false;
  std::string json_path;
  ptdp::TokenizerConfig config;
  bool config_given = false;
};

void help(const char* argv0) {
  ptdp::bench::print_help(
      argv0,
      "Encode throughput (MB/s of text) of ptdp's tokenizers on one thread and on N threads\n"
      "sharing one tokenizer, on the GPL-3 text repeated. Without --tokenizer-type: ByteLevel and\n"
      "the test fixtures (GPT-2 BPE, Llama 3 and Qwen2 tokenizer.json, SentencePiece BPE).\n\nOptions:\n",
      {{"--text PATH", "the text (default /usr/share/common-licenses/GPL-3)"},
       {"--repeat R", "the text repeated R times (default 20)"},
       {"--threads N", "threads of the parallel run (default: hardware threads)"},
       {"--runs N", "timed runs, the median is reported (default 3)"},
       {"--quick", "repeat 2, one run"},
       {"--tokenizer-type NAME", "one tokenizer: ByteLevel, NullTokenizer, GPT2BPETokenizer,\n"
                                 "HuggingFaceTokenizer, SentencePieceTokenizer"},
       {"--vocab-file PATH", "GPT2BPETokenizer's vocab.json"},
       {"--merge-file PATH", "GPT2BPETokenizer's merges.txt"},
       {"--tokenizer-model PATH", "tokenizer.json or SentencePiece .model"}});
}

bool parse(int argc, char** argv, Options& o, int& exit_code) {
  return ptdp::bench::read_flags(argc, argv, help, exit_code, [&](ptdp::bench::Args& a) {
    const std::string& f = a.flag();
    std::string v;
    if (f == "--text") return a.require_value(o.text, exit_code);
    if (f == "--repeat") return a.int_value(o.repeat, 1, exit_code);
    if (f == "--threads") return a.int_value(o.threads, 1, exit_code);
    if (f == "--runs") return a.int_value(o.runs, 1, exit_code);
    if (f == "--json") return a.require_value(o.json_path, exit_code);
    if (f == "--quick") {
      o.quick = true;
      return true;
    }
    if (f == "--tokenizer-type") {
      if (!a.require_value(v, exit_code)) return false;
      const auto t = ptdp::tokenizer_type_from_name(v);
      if (!t) return a.fail(exit_code, "--tokenizer-type: '" + v + "' is not a tokenizer type");
      o.config.type = *t;
      o.config_given = true;
      return true;
    }
    if (f == "--vocab-file") return a.require_value(o.config.vocab_file, exit_code);
    if (f == "--merge-file") return a.require_value(o.config.merge_file, exit_code);
    if (f == "--tokenizer-model") return a.require_value(o.config.tokenizer_model, exit_code);
    return a.unknown(exit_code);
  });
}

struct Named {
  std::string name;
  std::unique_ptr<ptdp::Tokenizer> tokenizer;
};

// Encodes documents [begin, end) into out[begin, end).
void encode_range(const ptdp::Tokenizer& t, const std::vector<std::string>& docs, std::size_t begin,
                  std::size_t end, std::vector<std::vector<int32_t>>& out) {
  for (std::size_t d = begin; d < end; ++d) out[d] = t.encode(docs[d]);
}

double timed(int runs, const std::function<void()>& body) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    body();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run(Options& o) {
  if (o.quick) {
    o.repeat = 2;
    o.runs = 1;
  }
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const std::string one = ptdp::read_tokenizer_file(o.text);
  std::vector<std::string> docs;
  std::size_t bytes = 0;
  for (int r = 0; r < o.repeat; ++r) {
    for (std::size_t at = 0; at < one.size();) {
      std::size_t end = one.find("\n\n", at);
      end = end == std::string::npos ? one.size() : end + 2;
      docs.push_back(one.substr(at, end - at));
      bytes += end - at;
      at = end;
    }
  }

  std::vector<Named> toks;
  if (o.config_given) {
    toks.push_back({ptdp::tokenizer_type_name(o.config.type), ptdp::make_tokenizer(o.config)});
  } else {
    const std::string dir = PTDP_TOKENIZER_FIXTURES;
    ptdp::TokenizerConfig c;
    toks.push_back({"ByteLevel", ptdp::make_tokenizer(c)});
    c.type = ptdp::TokenizerType::Gpt2Bpe;
    c.vocab_file = dir + "/tokenizer_gpt2_vocab.json";
    c.merge_file = dir + "/tokenizer_gpt2_merges.txt";
    toks.push_back({"GPT2BPETokenizer (fixture)", ptdp::make_tokenizer(c)});
    c = {};
    c.type = ptdp::TokenizerType::HuggingFace;
    c.tokenizer_model = dir + "/tokenizer_llama3.json";
    toks.push_back({"HuggingFaceTokenizer (Llama 3 fixture)", ptdp::make_tokenizer(c)});
    c.tokenizer_model = dir + "/tokenizer_qwen2.json";
    toks.push_back({"HuggingFaceTokenizer (Qwen2 fixture, NFC)", ptdp::make_tokenizer(c)});
    c.type = ptdp::TokenizerType::SentencePiece;
    c.tokenizer_model = dir + "/tokenizer_sp_bpe.model";
    toks.push_back({"SentencePieceTokenizer (fixture)", ptdp::make_tokenizer(c)});
  }

  std::printf("text: %s x %d = %zu documents, %.2f MB; %d threads; median of %d runs\n", o.text.c_str(), o.repeat,
              docs.size(), bytes / 1e6, threads, o.runs);
  std::printf("%-44s %12s %10s %12s %12s %8s\n", "tokenizer", "tokens", "bytes/tok", "1 thread MB/s",
              "N threads MB/s", "speedup");
  std::string json = "{\"text_bytes\": " + std::to_string(bytes) + ", \"threads\": " + std::to_string(threads) +
                     ", \"tokenizers\": [";
  for (std::size_t k = 0; k < toks.size(); ++k) {
    const ptdp::Tokenizer& t = *toks[k].tokenizer;
    std::vector<std::vector<int32_t>> serial(docs.size()), parallel(docs.size());
    encode_range(t, docs, 0, docs.size(), serial);  // warm-up (caches, pages)
    const double t1 = timed(o.runs, [&] { encode_range(t, docs, 0, docs.size(), serial); });
    // The threads live through every run (as ptdp-preprocess-data's workers do), so each keeps
    // its caches warm; the first round is a warm-up.
    std::barrier start(threads + 1), done(threads + 1);
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      const std::size_t b = docs.size() * i / threads, e = docs.size() * (i + 1) / threads;
      pool.emplace_back([&, b, e] {
        for (int r = 0; r <= o.runs; ++r) {
          start.arrive_and_wait();
          encode_range(t, docs, b, e, parallel);
          done.arrive_and_wait();
        }
      });
    }
    start.arrive_and_wait();
    done.arrive_and_wait();
    const double tn = timed(o.runs, [&] {
      start.arrive_and_wait();
      done.arrive_and_wait();
    });
    for (auto& th : pool) th.join();
    if (serial != parallel) throw ptdp::Error(ptdp::ErrorCode::Internal, toks[k].name + ": threads changed the ids");
    std::size_t tokens = 0;
    for (const auto& v : serial) tokens += v.size();
    const double mb1 = bytes / 1e6 / t1, mbn = bytes / 1e6 / tn;
    std::printf("%-44s %12zu %10.2f %12.2f %12.2f %7.2fx\n", toks[k].name.c_str(), tokens,
                static_cast<double>(bytes) / std::max<std::size_t>(tokens, 1), mb1, mbn, mbn / mb1);
    json += std::string(k ? ", " : "") + "{\"name\": \"" + ptdp::bench::json_escape(toks[k].name) +
            "\", \"tokens\": " + std::to_string(tokens) + ", \"mb_per_s_1\": " + ptdp::bench::json_number(mb1) +
            ", \"mb_per_s_n\": " + ptdp::bench::json_number(mbn) + "}";
  }
  json += "]}\n";
  if (!o.json_path.empty() && !ptdp::bench::write_text_file(o.json_path, json)) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ptdp::bench::bench_main<Options>(argc, argv, "bench_tokenizer", parse, run);
}
