// Data blends through the C API data functions (ptdp_gpt_data with Megatron's --data-path list
// and the per-split paths): the blend's size is sum_i ceil(N * w_i); its sample j is sample
// dataset_sample_index[j] of data set dataset_index[j] (checked against each data set's own
// samples, built with Megatron's 0.5% surplus), in the order of a transcription of Megatron's
// build_blending_indices; the global batch sequence is the same whatever (t, p, d) the flags
// give; per-split paths; bad lists named.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "idx_bytes.h"
#include "ptdp/ptdp.h"

namespace {

std::string last_error() { return ptdp_last_error(); }

constexpr int32_t kSeq = 8;
constexpr int32_t kVocab = 256;

// A data set of `docs` documents whose tokens lie in [base, base + 100), through the C API.
std::string make_dataset(const idx_bytes::TempDir& dir, const std::string& name, int docs, int base) {
  const std::string input = dir.prefix(name + ".jsonl");
  {
    std::ofstream f(input);
    for (int d = 0; d < docs; ++d) {
      std::string text;
      const int length = 3 + (d * 7) % 23;
      for (int k = 0; k < length; ++k) {
        if (k) text += ' ';
        text += std::to_string(base + (d * 31 + k * 17) % 100);
      }
      f << "{\"text\": \"" << text << "\"}\n";
    }
  }
  ptdp_preprocess_options o;
  REQUIRE(ptdp_preprocess_options_init(&o) == PTDP_SUCCESS);
  const char* inputs[1] = {input.c_str()};
  const std::string prefix = dir.prefix(name);
  o.inputs = inputs;
  o.num_inputs = 1;
  o.output_prefix = prefix.c_str();
  o.tokenizer_type = "NullTokenizer";
  o.vocab_size = 200;
  REQUIRE(ptdp_preprocess(&o, nullptr) == PTDP_SUCCESS);
  return ptdp::str_cat(prefix, "_text_document");
}

struct Data {
  ptdp_gpt_data d = nullptr;
  explicit Data(const ptdp_gpt_data_options& o) {
    const ptdp_status s = ptdp_gpt_data_create(&o, &d);
    INFO(last_error());
    REQUIRE(s == PTDP_SUCCESS);
  }
  ~Data() { ptdp_gpt_data_destroy(d); }
  Data(const Data&) = delete;
  Data& operator=(const Data&) = delete;
  int64_t count(ptdp_data_split split) const {
    int64_t n = -1;
    REQUIRE(ptdp_gpt_data_num_samples(d, split, &n) == PTDP_SUCCESS);
    return n;
  }
  // Samples [first, first + n) of a split: tokens then labels, each [n, s].
  std::pair<std::vector<int32_t>, std::vector<int32_t>> batch(ptdp_data_split split, int64_t first, int32_t n) const {
    std::vector<int32_t> t(static_cast<std::size_t>(n) * kSeq), l(t.size());
    REQUIRE(ptdp_gpt_data_batch(d, split, first, n, t.data(), l.data()) == PTDP_SUCCESS);
    return {t, l};
  }
};

ptdp_gpt_data_options options(const std::string& path, int64_t train, int64_t valid) {
  ptdp_gpt_data_options o;
  REQUIRE(ptdp_gpt_data_options_init(&o) == PTDP_SUCCESS);
  o.source = PTDP_DATA_INDEXED;
  o.path = path.c_str();
  o.split = "90,10,0";
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.seed = 77;
  o.num_samples[0] = train;
  o.num_samples[1] = valid;
  o.num_samples[2] = 0;
  return o;
}

// Megatron's build_blending_indices, transcribed on its own here: which data set each sample
// comes from and its index there.
void blending_indices(const std::vector<double>& w, int64_t size, std::vector<int>& which, std::vector<int64_t>& index) {
  std::vector<int64_t> current(w.size(), 0);
  for (int64_t j = 0; j < size; ++j) {
    const double at = j > 1 ? static_cast<double>(j) : 1.0;
    int best = 0;
    double best_error = w[0] * at - static_cast<double>(current[0]);
    for (std::size_t i = 1; i < w.size(); ++i) {
      const double e = w[i] * at - static_cast<double>(current[i]);
      if (e > best_error) {
        best_error = e;
        best = static_cast<int>(i);
      }
    }
    which.push_back(best);
    index.push_back(current[static_cast<std::size_t>(best)]++);
  }
}

}  // namespace

TEST_CASE("blend C API: Megatron's sizes, order and samples for --data-path W1 A W2 B", "[data][capi][blend]") {
  idx_bytes::TempDir dir("blend_capi");
  const std::string a = make_dataset(dir, "a", 60, 0), b = make_dataset(dir, "b", 45, 100);
  const std::string list = ptdp::str_cat("0.3 ", a, " 0.7 ", b);
  const int64_t wanted = 101, wanted_valid = 9;
  const Data blend(options(list, wanted, wanted_valid));
  const std::vector<double> w = {0.3 / (0.3 + 0.7), 0.7 / (0.3 + 0.7)};
  const int64_t target_a = static_cast<int64_t>(std::ceil(wanted * w[0]));
  const int64_t target_b = static_cast<int64_t>(std::ceil(wanted * w[1]));
  CHECK(target_a == 31);
  CHECK(target_b == 71);
  REQUIRE(blend.count(PTDP_SPLIT_TRAIN) == target_a + target_b);  // marginally more than asked
  CHECK(blend.count(PTDP_SPLIT_VALID) == static_cast<int64_t>(std::ceil(wanted_valid * w[0]) +
                                                             std::ceil(wanted_valid * w[1])));
  // The test split has weight 0 in --split: no samples (Megatron's None split).
  CHECK(blend.count(PTDP_SPLIT_TEST) == 0);
  std::vector<int32_t> t(kSeq), l(kSeq);
  CHECK(ptdp_gpt_data_batch(blend.d, PTDP_SPLIT_TEST, 0, 1, t.data(), l.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("split test") && Catch::Contains("no samples"));

  // Each data set alone, asked for its share with Megatron's 0.5% surplus, serves the samples.
  const auto buffer = [](int64_t target) { return static_cast<int64_t>(std::ceil(static_cast<double>(target) * 1.005)); };
  const Data only_a(options(a, buffer(target_a), 0)), only_b(options(b, buffer(target_b), 0));
  std::vector<int> which;
  std::vector<int64_t> index;
  blending_indices(w, target_a + target_b, which, index);
  const auto [tokens, labels] = blend.batch(PTDP_SPLIT_TRAIN, 0, static_cast<int32_t>(target_a + target_b));
  int drawn_a = 0;
  for (std::size_t j = 0; j < which.size(); ++j) {
    const std::vector<int32_t> row(tokens.begin() + static_cast<std::ptrdiff_t>(j * kSeq),
                                   tokens.begin() + static_cast<std::ptrdiff_t>((j + 1) * kSeq));
    // The tokens tell the data set: a's are below 100, b's from 100.
    const bool from_a = std::all_of(row.begin(), row.end(), [](int32_t x) { return x < 100; });
    const bool from_b = std::all_of(row.begin(), row.end(), [](int32_t x) { return x >= 100 && x < 200; });
    INFO("sample " << j);
    REQUIRE(from_a != from_b);
    CHECK((from_a ? 0 : 1) == which[j]);
    drawn_a += from_a ? 1 : 0;
    const auto [expect, expect_labels] = (from_a ? only_a : only_b).batch(PTDP_SPLIT_TRAIN, index[j], 1);
    CHECK(row == expect);
    CHECK(std::vector<int32_t>(labels.begin() + static_cast<std::ptrdiff_t>(j * kSeq),
                               labels.begin() + static_cast<std::ptrdiff_t>((j + 1) * kSeq)) == expect_labels);
  }
  CHECK(drawn_a == target_a);
  // The first samples, by hand: errors 0.3 vs 0.7 -> b; 0.3 vs -0.3 -> a; -0.4 vs 0.4 -> b; ...
  CHECK(std::vector<int>(which.begin(), which.begin() + 10) == std::vector<int>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1});
  // Indices wrap around the blend like every split's.
  const auto wrapped = blend.batch(PTDP_SPLIT_TRAIN, target_a + target_b + 3, 1);
  CHECK(wrapped.first == std::vector<int32_t>(tokens.begin() + 3 * kSeq, tokens.begin() + 4 * kSeq));

  // Without weights: one epoch each, weighed by their sizes, at most their sum; with no
  // samples wanted: every sample of both once.
  const Data unweighted(options(ptdp::str_cat(a, " ", b), 50, 0));
  const Data epoch_a(options(a, 0, 0)), epoch_b(options(b, 0, 0));
  CHECK(unweighted.count(PTDP_SPLIT_TRAIN) == 50);
  const Data everything(options(ptdp::str_cat(a, " ", b), 0, 0));
  CHECK(everything.count(PTDP_SPLIT_TRAIN) == epoch_a.count(PTDP_SPLIT_TRAIN) + epoch_b.count(PTDP_SPLIT_TRAIN));
  const Data capped(options(ptdp::str_cat(a, " ", b), 100000, 0));
  CHECK(capped.count(PTDP_SPLIT_TRAIN) == epoch_a.count(PTDP_SPLIT_TRAIN) + epoch_b.count(PTDP_SPLIT_TRAIN));
}

TEST_CASE("blend C API: the global batch sequence is the same for every (t, p, d)", "[data][capi][blend]") {
  idx_bytes::TempDir dir("blend_layout");
  const std::string a = make_dataset(dir, "a", 50, 0), b = make_dataset(dir, "b", 50, 100),
                    c = make_dataset(dir, "c", 30, 50);
  const std::string blend_words[] = {"0.2", a, "0.5", b, "0.3", c};
  const int64_t iterations = 12, global_batch = 8;
  // Each layout as ptdp-train's flags give it; its data options; d data-parallel readers, each
  // reading its m * b rows of every global batch (replica r starts at r * m * b).
  struct Layout {
    int t, p, d, b;
  };
  std::vector<std::vector<int32_t>> sequences;
  for (const Layout& L : {Layout{1, 1, 1, 8}, Layout{2, 2, 2, 2}, Layout{1, 2, 4, 1}, Layout{4, 1, 2, 4}}) {
    std::vector<std::string> args = {"ptdp-train", "--tensor-model-parallel-size", std::to_string(L.t),
                                     "--pipeline-model-parallel-size", std::to_string(L.p), "--num-layers", "4",
                                     "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length",
                                     std::to_string(kSeq), "--vocab-size", std::to_string(kVocab), "--micro-batch-size",
                                     std::to_string(L.b), "--global-batch-size", std::to_string(global_batch),
                                     "--train-iters", std::to_string(iterations), "--split", "90,10,0",
                                     "--seed", "5", "--data-path"};
    args.insert(args.end(), std::begin(blend_words), std::end(blend_words));
    std::vector<const char*> argv;
    for (const auto& s : args) argv.push_back(s.c_str());
    ptdp_train_config config = nullptr;
    REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &config) == PTDP_SUCCESS);
    ptdp_gpt_data_options o;
    REQUIRE(ptdp_train_config_data_options(config, &o) == PTDP_SUCCESS);
    CHECK(o.num_samples[0] == iterations * global_batch);
    CHECK(o.train_data_path == nullptr);
    const Data data(o);
    ptdp_train_config_destroy(config);
    const int64_t rows = global_batch / L.d;  // m * b per replica
    std::vector<int32_t> all;
    for (int64_t it = 0; it < iterations; ++it) {
      for (int r = 0; r < L.d; ++r) {
        const auto share = data.batch(PTDP_SPLIT_TRAIN, it * global_batch + r * rows, static_cast<int32_t>(rows));
        all.insert(all.end(), share.first.begin(), share.first.end());
      }
    }
    sequences.push_back(all);
  }
  for (std::size_t k = 1; k < sequences.size(); ++k) CHECK(sequences[k] == sequences[0]);
  // Data from all three sets reached the batches.
  bool seen[3] = {false, false, false};
  for (const int32_t x : sequences[0]) seen[x < 50 ? 0 : x < 100 ? 2 : 1] = true;
  CHECK((seen[0] && seen[1] && seen[2]));
}

TEST_CASE("blend C API: per-split data paths and bad lists", "[data][capi][blend]") {
  idx_bytes::TempDir dir("blend_split");
  const std::string a = make_dataset(dir, "a", 40, 0), b = make_dataset(dir, "b", 30, 100);
  const std::string valid_list = ptdp::str_cat("1 ", a, " 3 ", b);
  ptdp_gpt_data_options o = options("ignored", 30, 12);
  o.path = nullptr;
  o.train_data_path = a.c_str();
  o.valid_data_path = valid_list.c_str();
  const Data data(o);
  // The training split is all of a (no --split): the same samples as a alone split 100,0,0.
  ptdp_gpt_data_options whole = options(a, 30, 0);
  whole.split = "100,0,0";
  const Data only_a(whole);
  CHECK(data.count(PTDP_SPLIT_TRAIN) == only_a.count(PTDP_SPLIT_TRAIN));
  CHECK(data.batch(PTDP_SPLIT_TRAIN, 0, 20).first == only_a.batch(PTDP_SPLIT_TRAIN, 0, 20).first);
  // Validation blends a and b 1:3, 12 samples: ceil(3) + ceil(9).
  CHECK(data.count(PTDP_SPLIT_VALID) == 12);
  int from_b = 0;
  const auto valid = data.batch(PTDP_SPLIT_VALID, 0, 12).first;
  for (int j = 0; j < 12; ++j) from_b += valid[static_cast<std::size_t>(j * kSeq)] >= 100 ? 1 : 0;
  CHECK(from_b == 9);
  CHECK(data.count(PTDP_SPLIT_TEST) == 0);  // no --test-data-path

  // Through ptdp-train's flags: --valid-data-path takes a list, and --data-path excludes it.
  const std::vector<std::string> args = {"ptdp-train", "--train-data-path", a, "--valid-data-path", "1", a, "3", b,
                                         "--seq-length", std::to_string(kSeq)};
  std::vector<const char*> argv;
  for (const auto& s : args) argv.push_back(s.c_str());
  ptdp_train_config config = nullptr;
  REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &config) == PTDP_SUCCESS);
  ptdp_gpt_data_options from_flags;
  REQUIRE(ptdp_train_config_data_options(config, &from_flags) == PTDP_SUCCESS);
  CHECK(from_flags.source == PTDP_DATA_INDEXED);
  CHECK(std::string(from_flags.train_data_path) == a);
  CHECK(std::string(from_flags.valid_data_path) == valid_list);
  CHECK(from_flags.test_data_path == nullptr);
  ptdp_train_config_destroy(config);
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"ptdp-train", "--data-path", a, "--train-data-path", a}, "are exclusive"},
      {{"ptdp-train", "--data-path", "0.5", a, "x", b}, "mixes weights and prefixes"},
      {{"ptdp-train", "--data-path", "0", a, "1", b}, ptdp::str_cat("the weight '0' of ", a, " is not a finite number > 0")},
      {{"ptdp-train", "--valid-data-path", "-1", a, "2", b}, "--valid-data-path"},
      {{"ptdp-train", "--text-file", a, "--test-data-path", a}, "are exclusive"},
  };
  for (const auto& [flags, needle] : bad) {
    std::vector<const char*> v;
    for (const auto& s : flags) v.push_back(s.c_str());
    ptdp_train_config c = nullptr;
    INFO(needle);
    CHECK(ptdp_train_config_parse(static_cast<int32_t>(v.size()), v.data(), &c) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains(needle));
    CHECK(c == nullptr);
  }
  // Bad data options are named; a missing data set in a list is an I/O error naming it.
  ptdp_gpt_data_options wrong = options("x", 10, 0);
  wrong.source = PTDP_DATA_MOCK;
  wrong.train_data_path = a.c_str();
  ptdp_gpt_data d = nullptr;
  CHECK(ptdp_gpt_data_create(&wrong, &d) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("options->train_data_path is set but options->source"));
  const std::string missing = ptdp::str_cat("0.5 ", a, " 0.5 ", dir.prefix("nothing"));
  const ptdp_gpt_data_options m = options(missing, 10, 0);
  CHECK(ptdp_gpt_data_create(&m, &d) == PTDP_ERR_IO);
  CHECK_THAT(last_error(), Catch::Contains(dir.prefix("nothing") + ".idx"));
  CHECK(d == nullptr);
}
