// ptdp::preprocess_json_lines and merge_datasets (Megatron's preprocess_data.py and
// merge_datasets.py): JSON lines in, indexed data sets out, read back by ptdp's reader and
// byte-for-byte equal to write_indexed_dataset of the same token lists; several inputs, gzip,
// --append-eod, two keys, bad lines named FILE:LINE or skipped and counted, workers, merging;
// GPT2BPETokenizer, HuggingFaceTokenizer and SentencePieceTokenizer files giving the ids the
// reference libraries gave (tests/data/fixtures/tokenizer_expected.json).
#include <catch2/catch.hpp>

#include <zlib.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/data/indexed_dataset.h"
#include "core/data/preprocess.h"
#include "core/data/tokenizer.h"
#include "idx_bytes.h"

using ptdp::IndexedDataset;
using ptdp::IndexedDType;
using ptdp::PreprocessOptions;
using ptdp::TokenizerType;

namespace {

using Docs = std::vector<std::vector<std::vector<int32_t>>>;

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile g = gzopen(path.c_str(), "wb");
  REQUIRE(g != nullptr);
  REQUIRE(gzwrite(g, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(g) == Z_OK);
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> v;
  for (const unsigned char c : s) v.push_back(c);
  return v;
}

// Both files of two data sets are byte for byte the same.
void check_same_files(const std::string& a, const std::string& b) {
  CHECK(slurp(a + ".bin") == slurp(b + ".bin"));
  CHECK(slurp(a + ".idx") == slurp(b + ".idx"));
}

PreprocessOptions byte_options(const std::vector<std::string>& inputs, const std::string& prefix) {
  PreprocessOptions o;
  o.inputs = inputs;
  o.output_prefix = prefix;
  o.tokenizer.type = TokenizerType::ByteLevel;
  o.log_interval = 0;
  return o;
}

std::string error_of(const PreprocessOptions& o, ptdp::ErrorCode* code = nullptr) {
  try {
    ptdp::preprocess_json_lines(o, nullptr);
  } catch (const ptdp::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

// Three documents as JSON lines, with escapes, UTF-8, a list of sentences and an empty text.
const std::string kLines =
    "{\"text\": \"Hello, world.\\n\", \"id\": 1}\n"
    "{\"id\": 2, \"text\": \"caf\\u00e9 \\\"quoted\\\" \\t tab\"}\r\n"
    "{\"text\": \"\"}\n"
    "{\"text\": [\"first sentence. \", \"\", \"second.\"], \"other\": 3}\n"
    "{\"text\": \"no final newline\"}";

Docs expected_docs() {
  return Docs{{bytes_of("Hello, world.\n")},
              {bytes_of("caf\xc3\xa9 \"quoted\" \t tab")},
              {},
              {bytes_of("first sentence. "), bytes_of("second.")},
              {bytes_of("no final newline")}};
}

}  // namespace

TEST_CASE("preprocess: Megatron's dtype choice and output names", "[data][preprocess]") {
  CHECK(ptdp::optimal_token_dtype(256) == IndexedDType::UInt16);
  CHECK(ptdp::optimal_token_dtype(65499) == IndexedDType::UInt16);
  CHECK(ptdp::optimal_token_dtype(65500) == IndexedDType::Int32);
  CHECK(ptdp::optimal_token_dtype(128256) == IndexedDType::Int32);
  CHECK(ptdp::preprocess_output_prefix("out/corpus", "text") == "out/corpus_text_document");
}

TEST_CASE("preprocess: JSON lines read back by ptdp's reader, byte-for-byte the writer's files",
          "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_basic");
  const std::string input = dir.prefix("in.jsonl");
  write_text(input, kLines);
  PreprocessOptions o = byte_options({input}, dir.prefix("out"));
  const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, nullptr);
  CHECK(s.documents == 5);
  CHECK(s.bad_lines == 0);
  CHECK(s.bytes == static_cast<int64_t>(kLines.size()));
  CHECK(s.dtype == IndexedDType::UInt16);
  REQUIRE(s.outputs == std::vector<std::string>{dir.prefix("out_text_document")});
  const Docs docs = expected_docs();
  int64_t tokens = 0;
  for (const auto& d : docs) {
    for (const auto& q : d) tokens += static_cast<int64_t>(q.size());
  }
  CHECK(s.tokens == tokens);

  const IndexedDataset ds(s.outputs[0]);
  CHECK(ds.dtype() == IndexedDType::UInt16);
  REQUIRE(ds.num_documents() == 5);
  CHECK(ds.num_sequences() == 5);  // the empty text has none, the list two
  CHECK(ds.document(0) == docs[0][0]);
  CHECK(ds.document(1) == docs[1][0]);
  CHECK(ds.document(2).empty());
  CHECK(ds.document_end_sequence(3) - ds.document_first_sequence(3) == 2);
  CHECK(ds.sequence(ds.document_first_sequence(3)) == docs[3][0]);
  CHECK(ds.document(4) == docs[4][0]);

  // The must-show: the same token lists through write_indexed_dataset give the same bytes.
  const std::string reference = dir.prefix("reference");
  ptdp::write_indexed_dataset(reference, docs, IndexedDType::UInt16);
  check_same_files(s.outputs[0], reference);
  // No temporary files are left behind.
  CHECK_FALSE(std::filesystem::exists(s.outputs[0] + ".bin.tmp"));
  CHECK_FALSE(std::filesystem::exists(s.outputs[0] + ".idx.tmp"));
}

TEST_CASE("preprocess: workers keep the input order, and several inputs and gzip equal the concatenation",
          "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_workers");
  // 5000 documents of varying length, so batches of several lines go to several workers.
  std::string all;
  for (int i = 0; i < 5000; ++i) {
    all += ptdp::str_cat("{\"text\": \"document ", i, std::string(static_cast<std::size_t>(i % 97), 'x'), "\"}\n");
  }
  const std::string whole = dir.prefix("all.jsonl");
  write_text(whole, all);
  ptdp::preprocess_json_lines(byte_options({whole}, dir.prefix("w1")), nullptr);
  for (int workers : {2, 3}) {
    PreprocessOptions o = byte_options({whole}, dir.prefix(ptdp::str_cat("w", workers)));
    o.workers = workers;
    const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, nullptr);
    CHECK(s.documents == 5000);
    check_same_files(s.outputs[0], dir.prefix("w1_text_document"));
  }
  // The same lines in three files, the middle one gzip'ed (no trailing newline in the last).
  const std::size_t cut1 = all.find('\n', 1000) + 1, cut2 = all.find('\n', 200000) + 1;
  write_text(dir.prefix("a.jsonl"), all.substr(0, cut1));
  write_gzip(dir.prefix("b.jsonl.gz"), all.substr(cut1, cut2 - cut1));
  write_text(dir.prefix("c.jsonl"), all.substr(cut2, all.size() - cut2 - 1));
  PreprocessOptions o = byte_options({dir.prefix("a.jsonl"), dir.prefix("b.jsonl.gz"), dir.prefix("c.jsonl")},
                                     dir.prefix("parts"));
  o.workers = 2;
  const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, nullptr);
  CHECK(s.documents == 5000);
  CHECK(s.bytes == static_cast<int64_t>(all.size()) - 1);
  check_same_files(s.outputs[0], dir.prefix("w1_text_document"));
  // A gzip file holding concatenated members reads as their concatenation.
  const std::string two = dir.prefix("two.jsonl.gz");
  write_gzip(dir.prefix("m1.gz"), all.substr(0, cut1));
  write_gzip(dir.prefix("m2.gz"), all.substr(cut1));
  {
    std::ofstream f(two, std::ios::binary);
    for (const char* m : {"m1.gz", "m2.gz"}) {
      const std::vector<unsigned char> b = slurp(dir.prefix(m));
      f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
  }
  ptdp::preprocess_json_lines(byte_options({two}, dir.prefix("members")), nullptr);
  check_same_files(dir.prefix("members_text_document"), dir.prefix("w1_text_document"));
}

TEST_CASE("preprocess: --append-eod and two --json-keys", "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_eod");
  const std::string input = dir.prefix("ids.jsonl");
  write_text(input,
             "{\"text\": \"5 6 7\", \"title\": \"1\"}\n"
             "{\"text\": \"\", \"title\": \"2 3\"}\n"
             "{\"text\": [\"8\", \"9 10\"], \"title\": \"4\"}\n");
  PreprocessOptions o = byte_options({input}, dir.prefix("out"));
  o.tokenizer.type = TokenizerType::Null;
  o.tokenizer.vocab_size = 100;  // ids below 100; eod = 100
  o.append_eod = true;
  o.json_keys = {"text", "title"};
  const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, nullptr);
  CHECK(s.documents == 3);
  CHECK(s.dtype == IndexedDType::UInt16);
  REQUIRE(s.outputs.size() == 2);
  // The eod ends a document with tokens, in its last sequence; an empty one stays empty.
  const Docs text{{{5, 6, 7, 100}}, {}, {{8}, {9, 10, 100}}};
  const Docs title{{{1, 100}}, {{2, 3, 100}}, {{4, 100}}};
  ptdp::write_indexed_dataset(dir.prefix("text_ref"), text, IndexedDType::UInt16);
  ptdp::write_indexed_dataset(dir.prefix("title_ref"), title, IndexedDType::UInt16);
  check_same_files(dir.prefix("out_text_document"), dir.prefix("text_ref"));
  check_same_files(dir.prefix("out_title_document"), dir.prefix("title_ref"));
  CHECK(IndexedDataset(dir.prefix("out_text_document")).document(2) == std::vector<int32_t>{8, 9, 10, 100});

  // A vocabulary of 65,500 ids or more is written as int32.
  o.tokenizer.vocab_size = 70000;
  o.json_keys = {"text"};
  o.output_prefix = dir.prefix("wide");
  write_text(input, "{\"text\": \"69999 0 65536\"}\n");
  const ptdp::PreprocessStats w = ptdp::preprocess_json_lines(o, nullptr);
  CHECK(w.dtype == IndexedDType::Int32);
  const IndexedDataset wide(dir.prefix("wide_text_document"));
  CHECK(wide.dtype() == IndexedDType::Int32);
  CHECK(wide.document(0) == std::vector<int32_t>{69999, 0, 65536, 70000});

  // ByteLevel has no end-of-document token.
  PreprocessOptions b = byte_options({input}, dir.prefix("bytes"));
  b.append_eod = true;
  CHECK_THAT(error_of(b), Catch::Contains("--append-eod") && Catch::Contains("no end-of-document token"));
}

TEST_CASE("preprocess: bad lines are named FILE:LINE, or skipped and counted", "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_bad");
  const std::string input = dir.prefix("bad.jsonl");
  write_text(input,
             "{\"text\": \"good one\"}\n"
             "{\"text\": \"unterminated}\n"
             "{\"body\": \"no text key\"}\n"
             "{\"text\": 42}\n"
             "[\"not\", \"an object\"]\n"
             "\n"
             "{\"text\": [\"list\", 7]}\n"
             "{\"text\": \"good two\"}\n");
  PreprocessOptions o = byte_options({input}, dir.prefix("out"));
  ptdp::ErrorCode code{};
  const std::string m = error_of(o, &code);
  CHECK(code == ptdp::ErrorCode::InvalidArgument);
  CHECK_THAT(m, Catch::Contains(input + ":2: not JSON"));
  CHECK_THAT(m, Catch::Contains("--skip-bad-lines"));
  // Nothing is left behind by the failed run.
  CHECK_FALSE(std::filesystem::exists(dir.prefix("out_text_document.bin")));
  CHECK_FALSE(std::filesystem::exists(dir.prefix("out_text_document.bin.tmp")));
  CHECK_FALSE(std::filesystem::exists(dir.prefix("out_text_document.idx.tmp")));

  // Each kind of bad line, alone after a good one, is named with its line.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"body\": \"x\"}", ":2: key 'text' is missing"},
      {"{\"text\": 42}", ":2: key 'text' holds a number, not a string"},
      {"{\"text\": null}", ":2: key 'text' holds null, not a string"},
      {"{\"text\": [\"a\", 7]}", ":2: key 'text' holds a list with something else than strings"},
      {"[1, 2]", ":2: not a JSON object"},
      {"", ":2: an empty line"},
      {"{\"text\": \"\\u00\"}", ":2: not JSON"},
  };
  for (const auto& [line, needle] : cases) {
    write_text(input, ptdp::str_cat("{\"text\": \"ok\"}\n", line, "\n"));
    const std::string e = error_of(o);
    INFO(line);
    CHECK_THAT(e, Catch::Contains(input + needle));
  }
  // Text the tokenizer refuses is a bad line too.
  write_text(input, "{\"text\": \"1 2\"}\n{\"text\": \"3 four\"}\n");
  PreprocessOptions n = o;
  n.tokenizer.type = TokenizerType::Null;
  n.tokenizer.vocab_size = 10;
  CHECK_THAT(error_of(n), Catch::Contains(input + ":2: key 'text': "));

  // --skip-bad-lines: the six bad lines are dropped and counted, the good ones kept in order.
  write_text(input,
             "{\"text\": \"good one\"}\n"
             "{\"text\": \"unterminated}\n"
             "{\"body\": \"no text key\"}\n"
             "{\"text\": 42}\n"
             "[\"not\", \"an object\"]\n"
             "\n"
             "{\"text\": [\"list\", 7]}\n"
             "{\"text\": \"good two\"}\n");
  o.skip_bad_lines = true;
  o.workers = 2;
  const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, nullptr);
  CHECK(s.documents == 2);
  CHECK(s.bad_lines == 6);
  const IndexedDataset ds(s.outputs[0]);
  REQUIRE(ds.num_documents() == 2);
  CHECK(ds.document(0) == bytes_of("good one"));
  CHECK(ds.document(1) == bytes_of("good two"));
}

TEST_CASE("preprocess: bad options and unreadable inputs are named", "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_opts");
  const std::string input = dir.prefix("in.jsonl");
  write_text(input, kLines);
  ptdp::ErrorCode code{};
  CHECK_THAT(error_of(byte_options({dir.prefix("missing.jsonl")}, dir.prefix("o")), &code),
             Catch::Contains(dir.prefix("missing.jsonl")) && Catch::Contains("no such file"));
  CHECK(code == ptdp::ErrorCode::Io);
  CHECK_THAT(error_of(byte_options({dir.path.string()}, dir.prefix("o"))), Catch::Contains("is a directory"));
  CHECK_THAT(error_of(byte_options({}, dir.prefix("o"))), Catch::Contains("--input"));
  CHECK_THAT(error_of(byte_options({input}, dir.prefix("nodir/o")), &code),
             Catch::Contains("the directory of --output-prefix does not exist"));
  PreprocessOptions o = byte_options({input}, dir.prefix("o"));
  o.json_keys = {"text", "text"};
  CHECK_THAT(error_of(o), Catch::Contains("--json-keys"));
  o = byte_options({input}, dir.prefix("o"));
  o.workers = 0;
  CHECK_THAT(error_of(o), Catch::Contains("--workers"));
  // A truncated gzip file is an I/O error naming it.
  std::string big;
  for (int i = 0; i < 2000; ++i) big += ptdp::str_cat("{\"text\": \"line ", i, "\"}\n");
  write_gzip(dir.prefix("t.gz"), big);
  std::vector<unsigned char> gz = slurp(dir.prefix("t.gz"));
  gz.resize(gz.size() / 2);
  {
    std::ofstream f(dir.prefix("t.gz"), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(gz.data()), static_cast<std::streamsize>(gz.size()));
  }
  CHECK_THAT(error_of(byte_options({dir.prefix("t.gz")}, dir.prefix("o")), &code),
             Catch::Contains(dir.prefix("t.gz")) && Catch::Contains("truncated"));
  CHECK(code == ptdp::ErrorCode::Io);
}

TEST_CASE("merge: merged data sets equal preprocessing the concatenation", "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_merge");
  std::string a, b, c;
  for (int i = 0; i < 300; ++i) a += ptdp::str_cat("{\"text\": \"a", i, "\"}\n");
  for (int i = 0; i < 7; ++i) b += ptdp::str_cat("{\"text\": [\"b", i, "\", \"and more\"]}\n");
  for (int i = 0; i < 50; ++i) c += ptdp::str_cat("{\"text\": \"", std::string(static_cast<std::size_t>(i), 'c'), "\"}\n");
  write_text(dir.prefix("a.jsonl"), a);
  write_text(dir.prefix("b.jsonl"), b);
  write_text(dir.prefix("c.jsonl"), c);
  write_text(dir.prefix("abc.jsonl"), a + b + c);
  for (const char* n : {"a", "b", "c", "abc"}) {
    ptdp::preprocess_json_lines(byte_options({dir.prefix(std::string(n) + ".jsonl")}, dir.prefix(n)), nullptr);
  }
  ptdp::merge_datasets({dir.prefix("a_text_document"), dir.prefix("b_text_document"), dir.prefix("c_text_document")},
                       dir.prefix("merged"));
  check_same_files(dir.prefix("merged"), dir.prefix("abc_text_document"));
  const IndexedDataset merged(dir.prefix("merged"));
  CHECK(merged.num_documents() == 357);

  // Megatron's --input DIR: every pair in the directory, in the order of their names.
  const std::filesystem::path shards = dir.path / "shards";
  std::filesystem::create_directories(shards);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"a", "2"}, {"b", "10"}, {"c", "3"}}) {
    for (const char* ext : {".bin", ".idx"}) {
      std::filesystem::copy_file(dir.prefix(from + "_text_document") + ext, shards / (to + "_part" + ext));
    }
  }
  const std::vector<std::string> found = ptdp::dataset_prefixes_in(shards.string());
  REQUIRE(found.size() == 3);
  CHECK(found[0] == (shards / "10_part").string());  // sorted as names: "10" < "2" < "3"
  CHECK(found[1] == (shards / "2_part").string());
  CHECK(found[2] == (shards / "3_part").string());
  write_text((shards / "README.txt").string(), "stray");
  CHECK_THROWS_WITH(ptdp::dataset_prefixes_in(shards.string()), Catch::Contains("README.txt"));

  // Different dtypes are refused, naming the file; nothing is written.
  write_text(dir.prefix("wide.jsonl"), "{\"text\": \"1 2\"}\n");
  PreprocessOptions w = byte_options({dir.prefix("wide.jsonl")}, dir.prefix("wide"));
  w.tokenizer.type = TokenizerType::Null;
  w.tokenizer.vocab_size = 100000;
  ptdp::preprocess_json_lines(w, nullptr);
  CHECK_THROWS_WITH(ptdp::merge_datasets({dir.prefix("a_text_document"), dir.prefix("wide_text_document")},
                                         dir.prefix("mixed")),
                    Catch::Contains("wide_text_document.idx") && Catch::Contains("int32") &&
                        Catch::Contains("uint16"));
  CHECK_FALSE(std::filesystem::exists(dir.prefix("mixed.bin")));
  CHECK_FALSE(std::filesystem::exists(dir.prefix("mixed.bin.tmp")));
  CHECK_THROWS_WITH(ptdp::merge_datasets({dir.prefix("nothing")}, dir.prefix("x")), Catch::Contains("nothing.idx"));
}

TEST_CASE("writer: streamed documents equal write_indexed_dataset for every integer dtype", "[data][preprocess]") {
  idx_bytes::TempDir dir("pre_writer");
  const Docs docs{{{0, 1, 2}, {3}, {}}, {{120, 7, 100}}, {}, {{9, 9}, {10, 11, 12, 13}}};
  for (IndexedDType dt : {IndexedDType::UInt8, IndexedDType::Int8, IndexedDType::Int16, IndexedDType::UInt16,
                          IndexedDType::Int32, IndexedDType::Int64}) {
    const std::string name = ptdp::indexed_dtype_name(dt);
    {
      ptdp::IndexedDatasetWriter w(dir.prefix(name), dt);
      for (const auto& d : docs) {
        std::vector<int32_t> tokens;
        std::vector<int64_t> lengths;
        for (const auto& q : d) {
          tokens.insert(tokens.end(), q.begin(), q.end());
          lengths.push_back(static_cast<int64_t>(q.size()));
        }
        w.add_document(tokens.data(), lengths.data(), lengths.size());
      }
      CHECK(w.num_documents() == 4);
      CHECK(w.num_sequences() == 6);
      w.finish();
    }
    ptdp::write_indexed_dataset(dir.prefix(name + "_ref"), docs, dt);
    check_same_files(dir.prefix(name), dir.prefix(name + "_ref"));
  }
  // A token the dtype cannot hold is refused; an unfinished writer leaves nothing behind.
  {
    ptdp::IndexedDatasetWriter w(dir.prefix("small"), IndexedDType::UInt8);
    const int32_t t[2] = {1, 256};
    const int64_t len = 2;
    CHECK_THROWS_WITH(w.add_document(t, &len, 1), Catch::Contains("256 does not fit in uint8"));
  }
  CHECK_FALSE(std::filesystem::exists(dir.prefix("small.bin.tmp")));
  CHECK_FALSE(std::filesystem::exists(dir.prefix("small.bin")));
  CHECK_THROWS_WITH(ptdp::IndexedDatasetWriter(dir.prefix("f"), IndexedDType::Float32), Catch::Contains("float32"));
}

TEST_CASE("preprocess: vocabulary-file tokenizers write the reference libraries' ids", "[data][preprocess]") {
  const std::string fixtures = PTDP_TOKENIZER_FIXTURES;
  std::ifstream in(fixtures + "/tokenizer_expected.json");
  REQUIRE(in.good());
  const nlohmann::json expected = nlohmann::json::parse(in);
  idx_bytes::TempDir dir("pre_tokenizers");
  struct Case {
    const char* name;
    TokenizerType type;
    std::string vocab_file, merge_file, model;
  };
  const std::vector<Case> cases = {
      {"gpt2", TokenizerType::Gpt2Bpe, fixtures + "/tokenizer_gpt2_vocab.json", fixtures + "/tokenizer_gpt2_merges.txt", ""},
      {"llama3", TokenizerType::HuggingFace, "", "", fixtures + "/tokenizer_llama3.json"},
      {"qwen2", TokenizerType::HuggingFace, "", "", fixtures + "/tokenizer_qwen2.json"},
      {"sp_bpe", TokenizerType::SentencePiece, "", "", fixtures + "/tokenizer_sp_bpe.model"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const nlohmann::json& e = expected.at(c.name);
    const std::string input = dir.prefix(std::string(c.name) + ".jsonl");
    {
      std::ofstream f(input);
      for (const auto& k : e.at("cases")) f << nlohmann::json{{"text", k.at("text")}}.dump() << "\n";
    }
    PreprocessOptions o = byte_options({input}, dir.prefix(c.name));
    o.tokenizer.type = c.type;
    o.tokenizer.vocab_file = c.vocab_file;
    o.tokenizer.merge_file = c.merge_file;
    o.tokenizer.tokenizer_model = c.model;
    o.append_eod = true;
    o.workers = 2;
    const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(o, nullptr);
    CHECK(s.dtype == IndexedDType::UInt16);  // a few hundred ids
    const IndexedDataset ds(s.outputs[0]);
    REQUIRE(ds.num_documents() == static_cast<int64_t>(e.at("cases").size()));
    const int32_t eod = e.at("eod").get<int32_t>();
    for (std::size_t d = 0; d < e.at("cases").size(); ++d) {
      std::vector<int32_t> ids = e.at("cases")[d].at("ids").get<std::vector<int32_t>>();
      if (!ids.empty()) ids.push_back(eod);  // --append-eod: only documents with tokens
      INFO("document " << d << ": " << e.at("cases")[d].at("text").get<std::string>());
      CHECK(ds.document(static_cast<int64_t>(d)) == ids);
    }
  }
}
