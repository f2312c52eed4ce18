// Preprocessing and merging through the C API: ptdp_preprocess with its options and result,
// the data set read back with ptdp_dataset_open, ptdp_preprocess_main's exit statuses and
// messages (a bad line named FILE:LINE, --skip-bad-lines counting), ptdp_merge_datasets equal to
// preprocessing the concatenation, and every bad argument named.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/error.h"
#include "idx_bytes.h"
#include "ptdp/ptdp.h"

namespace {

std::string last_error() { return ptdp_last_error(); }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<int32_t> document(ptdp_dataset ds, int64_t i) {
  std::vector<int32_t> out(4096);
  int64_t n = 0;
  REQUIRE(ptdp_dataset_document(ds, i, out.data(), static_cast<int64_t>(out.size()), &n) == PTDP_SUCCESS);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> v;
  for (const unsigned char c : s) v.push_back(c);
  return v;
}

// Runs a main with the program name and flags; returns the exit code (the call must succeed).
int32_t run_main(ptdp_status (*main_fn)(int32_t, const char* const*, int32_t*), std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  int32_t code = -1;
  REQUIRE(main_fn(static_cast<int32_t>(argv.size()), argv.data(), &code) == PTDP_SUCCESS);
  return code;
}

// What a function wrote to stderr while it ran.
template <typename F>
std::string capture_stderr(F&& f) {
  std::fflush(stderr);
  char path[] = "/tmp/ptdp_stderr_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = dup(2);
  dup2(fd, 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::remove(path);
  return text;
}

}  // namespace

TEST_CASE("preprocess C API: defaults, a run, its result, and the data set read back", "[data][capi][preprocess]") {
  ptdp_preprocess_options o;
  REQUIRE(ptdp_preprocess_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.struct_size == sizeof(ptdp_preprocess_options));
  CHECK(std::string(o.tokenizer_type) == "ByteLevel");
  CHECK(o.workers == 1);
  CHECK(o.num_json_keys == 0);
  CHECK(o.log_interval == 0);
  CHECK(o.append_eod == 0);
  CHECK(o.skip_bad_lines == 0);

  idx_bytes::TempDir dir("pre_capi");
  const std::string input = dir.prefix("in.jsonl");
  write_text(input, "{\"text\": \"ab\", \"title\": \"T1\"}\n{\"text\": \"\", \"title\": \"T2\"}\n{\"text\": \"xyz\", \"title\": \"\"}\n");
  const std::string prefix = dir.prefix("out");
  const char* inputs[1] = {input.c_str()};
  const char* keys[2] = {"text", "title"};
  o.inputs = inputs;
  o.num_inputs = 1;
  o.json_keys = keys;
  o.num_json_keys = 2;
  o.output_prefix = prefix.c_str();
  o.workers = 2;
  ptdp_preprocess_result r{};
  r.struct_size = sizeof r;
  REQUIRE(ptdp_preprocess(&o, &r) == PTDP_SUCCESS);
  CHECK(r.struct_size == sizeof r);
  CHECK(r.documents == 3);
  CHECK(r.bad_lines == 0);
  CHECK(r.tokens == 2 + 3 + 2 + 2);
  CHECK(r.dtype_code == 8);  // uint16
  CHECK(r.bytes == static_cast<int64_t>(slurp(input).size()));
  CHECK(r.seconds >= 0);

  ptdp_dataset ds = nullptr;
  REQUIRE(ptdp_dataset_open((prefix + "_text_document").c_str(), &ds) == PTDP_SUCCESS);
  int64_t n = 0;
  REQUIRE(ptdp_dataset_num_documents(ds, &n) == PTDP_SUCCESS);
  CHECK(n == 3);
  REQUIRE(ptdp_dataset_num_sequences(ds, &n) == PTDP_SUCCESS);
  CHECK(n == 2);
  CHECK(document(ds, 0) == bytes_of("ab"));
  CHECK(document(ds, 1).empty());
  CHECK(document(ds, 2) == bytes_of("xyz"));
  ptdp_dataset_destroy(ds);
  REQUIRE(ptdp_dataset_open((prefix + "_title_document").c_str(), &ds) == PTDP_SUCCESS);
  CHECK(document(ds, 1) == bytes_of("T2"));
  CHECK(document(ds, 2).empty());
  ptdp_dataset_destroy(ds);

  // NULL result is fine; a result struct_size below the first published size is refused.
  REQUIRE(ptdp_preprocess(&o, nullptr) == PTDP_SUCCESS);
  ptdp_preprocess_result small{};
  small.struct_size = 4;
  CHECK(ptdp_preprocess(&o, &small) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("result->struct_size"));
}

TEST_CASE("preprocess C API: bad arguments are named and change nothing", "[data][capi][preprocess]") {
  idx_bytes::TempDir dir("pre_capi_bad");
  const std::string input = dir.prefix("in.jsonl");
  write_text(input, "{\"text\": \"ab\"}\n");
  const std::string prefix = dir.prefix("out");
  const char* inputs[1] = {input.c_str()};
  const char* null_inputs[1] = {nullptr};
  ptdp_preprocess_options base;
  REQUIRE(ptdp_preprocess_options_init(&base) == PTDP_SUCCESS);
  base.inputs = inputs;
  base.num_inputs = 1;
  base.output_prefix = prefix.c_str();
  struct Case {
    const char* what;
    void (*edit)(ptdp_preprocess_options&);
    ptdp_status status;
    const char* mention;
  };
  static const char* const* kNullInputs = nullptr;
  (void)kNullInputs;
  const std::vector<Case> cases = {
      {"no inputs", [](ptdp_preprocess_options& x) { x.num_inputs = 0; }, PTDP_ERR_INVALID_ARGUMENT,
       "options->num_inputs"},
      {"NULL inputs", [](ptdp_preprocess_options& x) { x.inputs = nullptr; }, PTDP_ERR_INVALID_ARGUMENT,
       "options->inputs is NULL"},
      {"NULL output", [](ptdp_preprocess_options& x) { x.output_prefix = nullptr; }, PTDP_ERR_INVALID_ARGUMENT,
       "options->output_prefix is NULL"},
      {"bad tokenizer", [](ptdp_preprocess_options& x) { x.tokenizer_type = "WordPiece"; },
       PTDP_ERR_INVALID_ARGUMENT, "options->tokenizer_type = 'WordPiece'"},
      {"no workers", [](ptdp_preprocess_options& x) { x.workers = 0; }, PTDP_ERR_INVALID_ARGUMENT,
       "options->workers"},
      {"keys without names", [](ptdp_preprocess_options& x) { x.num_json_keys = 1; }, PTDP_ERR_INVALID_ARGUMENT,
       "options->json_keys is NULL"},
      {"eod without a token", [](ptdp_preprocess_options& x) { x.append_eod = 1; }, PTDP_ERR_INVALID_ARGUMENT,
       "--append-eod"},
      {"struct_size 0", [](ptdp_preprocess_options& x) { x.struct_size = 0; }, PTDP_ERR_INVALID_ARGUMENT,
       "options->struct_size is 0"},
  };
  for (const Case& c : cases) {
    ptdp_preprocess_options o = base;
    c.edit(o);
    INFO(c.what);
    ptdp_preprocess_result r{};
    r.struct_size = sizeof r;
    r.documents = -7;
    CHECK(ptdp_preprocess(&o, &r) == c.status);
    CHECK_THAT(last_error(), Catch::Contains("ptdp_preprocess") && Catch::Contains(c.mention));
    CHECK(r.documents == -7);
    CHECK_FALSE(std::filesystem::exists(prefix + "_text_document.bin"));
  }
  ptdp_preprocess_options o = base;
  o.inputs = null_inputs;
  CHECK(ptdp_preprocess(&o, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("options->inputs[0] is NULL"));
  CHECK(ptdp_preprocess(nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("options is NULL"));
  CHECK(ptdp_preprocess_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  // A missing input is an I/O error naming it.
  const std::string missing = dir.prefix("missing.jsonl");
  const char* missing_inputs[1] = {missing.c_str()};
  o = base;
  o.inputs = missing_inputs;
  CHECK(ptdp_preprocess(&o, nullptr) == PTDP_ERR_IO);
  CHECK_THAT(last_error(), Catch::Contains(missing));
}

TEST_CASE("preprocess C API: ptdp_preprocess_main's flags, statuses and messages", "[data][capi][preprocess]") {
  idx_bytes::TempDir dir("pre_main");
  const std::string input = dir.prefix("in.jsonl");
  write_text(input, "{\"text\": \"1 2 3\"}\n{\"text\": 7}\n{\"text\": \"4\"}\n");
  const std::string out = dir.prefix("out");
  const std::vector<std::string> base = {"ptdp-preprocess-data", "--input", input, "--output-prefix", out,
                                         "--tokenizer-type", "NullTokenizer", "--vocab-size", "50",
                                         "--log-interval", "1"};
  // A bad line stops the run with status 1, naming FILE:LINE.
  std::string err = capture_stderr([&] { CHECK(run_main(ptdp_preprocess_main, base) == 1); });
  CHECK_THAT(err, Catch::Contains(input + ":2: key 'text' holds a number, not a string"));
  CHECK_FALSE(std::filesystem::exists(out + "_text_document.idx"));
  // --skip-bad-lines counts it; the progress lines are Megatron's.
  std::vector<std::string> args = base;
  args.push_back("--skip-bad-lines");
  args.push_back("--append-eod");
  err = capture_stderr([&] { CHECK(run_main(ptdp_preprocess_main, args) == 0); });
  CHECK_THAT(err, Catch::Contains("Processed 1 documents (") && Catch::Contains("Processed 2 documents (") &&
                      Catch::Contains(" docs/s, ") && Catch::Contains(" MB/s)."));
  CHECK_THAT(err, Catch::Contains("skipping " + input + ":2:"));
  ptdp_dataset ds = nullptr;
  REQUIRE(ptdp_dataset_open((out + "_text_document").c_str(), &ds) == PTDP_SUCCESS);
  CHECK(document(ds, 0) == std::vector<int32_t>{1, 2, 3, 50});
  CHECK(document(ds, 1) == std::vector<int32_t>{4, 50});
  ptdp_dataset_destroy(ds);
  // Bad flags: status 2 and the flag named.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"ptdp-preprocess-data", "--output-prefix", out, "--tokenizer-type", "ByteLevel"}, "--input is required"},
      {{"ptdp-preprocess-data", "--input", input, "--tokenizer-type", "ByteLevel"}, "--output-prefix is required"},
      {{"ptdp-preprocess-data", "--input", input, "--output-prefix", out}, "--tokenizer-type is required"},
      {{"ptdp-preprocess-data", "--input", input, "--output-prefix", out, "--tokenizer-type", "Bert"},
       "--tokenizer-type: 'Bert'"},
      {{"ptdp-preprocess-data", "--input", input, "--output-prefix", out, "--tokenizer-type", "ByteLevel",
        "--workers", "0"},
       "--workers: '0' must be >= 1"},
      {{"ptdp-preprocess-data", "--input", input, "--output-prefix", out, "--tokenizer-type", "ByteLevel",
        "--split-sentences"},
       "--split-sentences is not supported"},
      {{"ptdp-preprocess-data", "--input", input, "--output-prefix", out, "--tokenizer-type", "ByteLevel",
        "--worker", "2"},
       "unknown flag --worker (did you mean --workers?)"},
      {{"ptdp-preprocess-data", "--input", "--output-prefix", out}, "--input: missing value"},
  };
  for (const auto& [args, needle] : bad) {
    INFO(needle);
    const auto& a = args;  // clang before 16 cannot capture a structured binding in a lambda
    err = capture_stderr([&] { CHECK(run_main(ptdp_preprocess_main, a) == 2); });
    CHECK_THAT(err, Catch::Contains(needle));
  }
  // Several inputs after one --input, two keys after --json-keys.
  const std::string second = dir.prefix("second.jsonl");
  write_text(second, "{\"text\": \"9\", \"t\": \"8\"}\n");
  write_text(input, "{\"text\": \"1\", \"t\": \"2\"}\n");
  CHECK(run_main(ptdp_preprocess_main, {"ptdp-preprocess-data", "--input", input, second, "--json-keys", "text", "t",
                                        "--output-prefix", out, "--tokenizer-type", "NullTokenizer", "--vocab-size",
                                        "50", "--workers", "2"}) == 0);
  REQUIRE(ptdp_dataset_open((out + "_t_document").c_str(), &ds) == PTDP_SUCCESS);
  CHECK(document(ds, 0) == std::vector<int32_t>{2});
  CHECK(document(ds, 1) == std::vector<int32_t>{8});
  ptdp_dataset_destroy(ds);
  // --help is status 0; the C-level checks of the entry point.
  CHECK(run_main(ptdp_preprocess_main, {"ptdp-preprocess-data", "--help"}) == 0);
  int32_t code = 0;
  CHECK(ptdp_preprocess_main(0, nullptr, &code) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("argc"));
  const char* argv[2] = {"x", nullptr};
  CHECK(ptdp_preprocess_main(2, argv, &code) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("argv[1] is NULL"));
  CHECK(ptdp_preprocess_main(1, argv, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("exit_code is NULL"));
}

TEST_CASE("merge C API: ptdp_merge_datasets equals preprocessing the concatenation", "[data][capi][preprocess]") {
  idx_bytes::TempDir dir("pre_capi_merge");
  std::string a, b;
  for (int i = 0; i < 40; ++i) a += ptdp::str_cat("{\"text\": \"first ", i, "\"}\n");
  for (int i = 0; i < 25; ++i) b += ptdp::str_cat("{\"text\": \"second ", i, "\"}\n");
  write_text(dir.prefix("a.jsonl"), a);
  write_text(dir.prefix("b.jsonl"), b);
  write_text(dir.prefix("ab.jsonl"), a + b);
  for (const char* n : {"a", "b", "ab"}) {
    const std::string in = dir.prefix(std::string(n) + ".jsonl"), out = dir.prefix(n);
    CHECK(run_main(ptdp_preprocess_main, {"ptdp-preprocess-data", "--input", in, "--output-prefix", out,
                                          "--tokenizer-type", "ByteLevel", "--log-interval", "0"}) == 0);
  }
  const std::string pa = dir.prefix("a_text_document"), pb = dir.prefix("b_text_document");
  const char* prefixes[2] = {pa.c_str(), pb.c_str()};
  const std::string merged = dir.prefix("merged");
  REQUIRE(ptdp_merge_datasets(prefixes, 2, merged.c_str()) == PTDP_SUCCESS);
  CHECK(slurp(merged + ".bin") == slurp(dir.prefix("ab_text_document") + ".bin"));
  CHECK(slurp(merged + ".idx") == slurp(dir.prefix("ab_text_document") + ".idx"));
  // The tool's way: --datasets in order, or a directory sorted by name.
  const std::string merged2 = dir.prefix("merged2");
  CHECK(run_main(ptdp_merge_datasets_main,
                 {"ptdp-merge-datasets", "--datasets", pa, pb, "--output-prefix", merged2}) == 0);
  CHECK(slurp(merged2 + ".idx") == slurp(merged + ".idx"));
  std::string err = capture_stderr([&] {
    CHECK(run_main(ptdp_merge_datasets_main, {"ptdp-merge-datasets", "--output-prefix", merged2}) == 2);
  });
  CHECK_THAT(err, Catch::Contains("give either --input DIR or --datasets"));
  err = capture_stderr([&] {
    CHECK(run_main(ptdp_merge_datasets_main,
                   {"ptdp-merge-datasets", "--input", dir.prefix("nodir"), "--output-prefix", merged2}) == 1);
  });
  CHECK_THAT(err, Catch::Contains("nodir is not a directory"));
  // Bad arguments.
  CHECK(ptdp_merge_datasets(prefixes, 0, merged.c_str()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("count = 0"));
  CHECK(ptdp_merge_datasets(nullptr, 1, merged.c_str()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("prefixes is NULL"));
  CHECK(ptdp_merge_datasets(prefixes, 2, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("output_prefix is NULL"));
  const std::string missing = dir.prefix("missing");
  const char* bad[2] = {pa.c_str(), missing.c_str()};
  CHECK(ptdp_merge_datasets(bad, 2, dir.prefix("m3").c_str()) == PTDP_ERR_IO);
  CHECK_THAT(last_error(), Catch::Contains(missing + ".idx"));
  CHECK_FALSE(std::filesystem::exists(dir.prefix("m3.bin")));
}
