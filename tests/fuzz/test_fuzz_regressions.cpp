// Inputs the fuzz targets found (fuzz/regressions/), through the parsers they crashed, now
// refused with clear errors. Each input is fed exactly as its fuzz target feeds it
// (fuzz/fuzz_support.h splits and writes it).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/args/train_args.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpoint_files.h"
#include "core/checkpoint/safetensors.h"
#include "core/data/indexed_dataset.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/plan/cluster.h"
#include "core/plan/plan_args.h"
#include "fuzz/fuzz_support.h"
#include "io/json_text.h"

namespace {

std::string regression(const std::string& name) {
  std::ifstream in(std::string(PTDP_FUZZ_REGRESSIONS) + "/" + name, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The message of the ptdp::Error that `body` throws (fails the test when it throws nothing).
template <typename F>
std::string error_of(F&& body, ptdp::ErrorCode code) {
  try {
    body();
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL("no error thrown");
  return "";
}

}  // namespace

TEST_CASE("fuzz: an .idx whose counts need more than 2^64 bytes is refused as truncated", "[fuzz][data]") {
  // fuzz_indexed_dataset: about 2^64 sequences and document indices; the message computed their size in a long double
  // and converted it to an integer it does not fit (UBSan: float-cast-overflow).
  const std::string input = regression("indexed_dataset_huge_counts");
  const auto parts = ptdp::fuzz::split_parts(bytes(input), input.size(), 2);
  const std::string prefix = ptdp::fuzz::scratch_path("huge_counts");
  ptdp::fuzz::write_file(prefix + ".idx", parts[0]);
  ptdp::fuzz::write_file(prefix + ".bin", parts[1]);
  const std::string msg = error_of([&] { ptdp::IndexedDataset ds(prefix); }, ptdp::ErrorCode::Io);
  CHECK_THAT(msg, Catch::Contains(prefix + ".idx: truncated: the header declares 18446742974197923842 sequences and "
                                                  "18446744073709551615 document indices, which need more than 2^64 "
                                                  "bytes, but the file has 83 bytes"));
}

TEST_CASE("fuzz: an .idx whose counts fit 64 bits still names the bytes they need", "[fuzz][data]") {
  std::string idx("MMIDIDX\0\0", 9);
  const uint64_t version = 1, seqs = 1000, docs = 3;
  idx.append(reinterpret_cast<const char*>(&version), 8);
  idx.push_back(4);
  idx.append(reinterpret_cast<const char*>(&seqs), 8);
  idx.append(reinterpret_cast<const char*>(&docs), 8);
  const std::string prefix = ptdp::fuzz::scratch_path("many_counts");
  ptdp::fuzz::write_file(prefix + ".idx", idx);
  ptdp::fuzz::write_file(prefix + ".bin", "");
  const std::string msg = error_of([&] { ptdp::IndexedDataset ds(prefix); }, ptdp::ErrorCode::Io);
  // 34 + 12 * 1000 + 8 * 3
  CHECK_THAT(msg, Catch::Contains("1000 sequences and 3 document indices, which need 12058 bytes, but the file has 34 bytes"));
}

TEST_CASE("fuzz: a safetensors shape with a 0 extent whose other extents overflow int64 is refused", "[fuzz][checkpoint]") {
  // fuzz_safetensors: shape [0, 2^62, 4] holds no bytes, so the byte count passed, but the
  // tensor's columns (2^62 * 4) overflowed int64 in cols() (UBSan: signed overflow).
  const std::string input = regression("safetensors_zero_extent_overflow");
  const std::string path = ptdp::fuzz::scratch_path("zero_extent.safetensors");
  ptdp::fuzz::write_file(path, input);
  const std::string msg = error_of([&] { ptdp::SafetensorsFile f(path); }, ptdp::ErrorCode::Io);
  CHECK_THAT(msg, Catch::Contains(path + ": bad safetensors header: tensor 't': shape [0, 4611686018427387904, 4] is too large"));
}

TEST_CASE("fuzz: a safetensors shape with a 0 extent and small other extents is read", "[fuzz][checkpoint]") {
  const std::string path = ptdp::fuzz::scratch_path("zero_extent_ok.safetensors");
  ptdp::SafetensorsWriter w;
  w.add("t", ptdp::StDType::F32, {0, 1024, 4}, nullptr);
  w.write(path);
  const ptdp::SafetensorsFile f(path);
  REQUIRE(f.tensors().size() == 1);
  CHECK(f.tensors()[0].rows() == 0);
  CHECK(f.tensors()[0].cols() == 4096);
}

TEST_CASE("fuzz: ptdp-train flags whose values are not UTF-8 convert to JSON text", "[fuzz][args]") {
  // fuzz_train_args: a --data-path with the byte 0xED (no UTF-8) parsed, but dumping the
  // flags as JSON (a checkpoint's metadata.json) threw nlohmann's type_error 316.
  const std::string input = regression("train_args_not_utf8");
  const ptdp::TrainArgs args = ptdp::parse_train_args(ptdp::fuzz::split_lines(bytes(input), input.size()));
  CHECK(args.data_path.find('\xED') != std::string::npos);
  const nlohmann::json j = ptdp::train_args_to_json(args);
  CHECK_THROWS_AS(j.dump(), nlohmann::json::type_error);  // what the callers must not do
  const std::string text = ptdp::json_text(j);
  CHECK_THAT(text, Catch::Contains("\"data-path\":\"0.3 a\xEF\xBF\xBD"));
}

TEST_CASE("fuzz: ptdp-plan's cluster with a GEMM table name that is not UTF-8 converts to JSON text", "[fuzz][plan]") {
  // fuzz_plan_args: --gemm-table-fp32 with the byte 0x9F parsed, and dumping the cluster as
  // JSON (what ptdp-plan --json prints) threw nlohmann's type_error 316 through the target.
  // The same class as train_args_not_utf8: every JSON text ptdp writes now goes through
  // json_text (io/json_text.h).
  const std::string input = regression("plan_args_cluster_not_utf8");
  const ptdp::plan::PlanArgs args = ptdp::plan::parse_plan_args(ptdp::fuzz::split_lines(bytes(input), input.size()));
  CHECK(args.cluster.gemm_table_fp32.find('\x9F') != std::string::npos);
  const nlohmann::json j = ptdp::plan::cluster_to_json(args.cluster);
  CHECK_THROWS_AS(j.dump(), nlohmann::json::type_error);
  const std::string text = ptdp::json_text(j);
  CHECK_THAT(text, Catch::Contains("\xEF\xBF\xBD" "dgx10@A%"));
  CHECK(nlohmann::json::parse(text)["gemm_table_fp32"].get<std::string>().find("\xEF\xBF\xBD") == 0);
  CHECK(ptdp::json_text(j, 2).find('\n') != std::string::npos);  // indented as asked
}

namespace {

// The directory fuzz_checkpoint_metadata builds around its input: iteration 1 with `metadata`
// as metadata.json, the small shard of fuzz/data, and a manifest with both true SHA-256s.
std::string checkpoint_with_metadata(const std::string& name, const std::string& metadata) {
  const std::string shard = [] {
    std::ifstream in(std::string(PTDP_FUZZ_REGRESSIONS) + "/../data/model_tp00_pp00.safetensors", std::ios::binary);
    REQUIRE(in.good());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  const std::string dir = ptdp::fuzz::scratch_path(name);
  std::filesystem::create_directories(dir + "/iter_0000001");
  ptdp::fuzz::write_file(dir + "/latest_checkpointed_iteration.txt", "1\n");
  ptdp::fuzz::write_file(dir + "/iter_0000001/model_tp00_pp00.safetensors", shard);
  ptdp::fuzz::write_file(dir + "/iter_0000001/metadata.json", metadata);
  ptdp::fuzz::write_file(dir + "/iter_0000001/manifest.sha256",
                         ptdp::sha256_bytes(metadata.data(), metadata.size()) + "  metadata.json\n" +
                             ptdp::sha256_bytes(shard.data(), shard.size()) + "  model_tp00_pp00.safetensors\n");
  return dir;
}

// fuzz/data/metadata.json with the text `from` replaced by `to` (exactly once).
std::string seed_metadata_with(const std::string& from, const std::string& to) {
  std::ifstream in(std::string(PTDP_FUZZ_REGRESSIONS) + "/../data/metadata.json", std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  std::string md = s.str();
  const std::size_t at = md.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(md.find(from, at + 1) == std::string::npos);
  return md.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("fuzz: a checkpoint's model field holding a float too large for an int is refused, naming it",
          "[fuzz][checkpoint]") {
  // fuzz_checkpoint_metadata: "ffn_hidden_size": 3666666666666666666666666662 (a JSON number
  // beyond 64 bits, so a double) was read with get<int>(), a float-to-int conversion out of
  // range (UBSan: float-cast-overflow).
  const std::string dir = checkpoint_with_metadata("float_as_int", regression("checkpoint_metadata_float_as_int"));
  int64_t iteration = -1;
  const std::string msg = error_of([&] { (void)ptdp::read_checkpoint_config(dir, &iteration); }, ptdp::ErrorCode::Io);
  CHECK_THAT(msg, Catch::Contains("metadata.json: \"model\" entry: \"ffn_hidden_size\" is 3.666666666666667e+27, not an integer"));
}

TEST_CASE("fuzz: every number of a checkpoint's metadata is read only when its field can hold it", "[fuzz][checkpoint]") {
  struct Case {
    std::string from, to, message;
  };
  // The seed's own values (fuzz/data/metadata.json), each replaced by one its field cannot hold.
  const Case cases[] = {
      {"\"num_layers\": 1", "\"num_layers\": 4294967298",
       "\"model\" entry: \"num_layers\" = 4294967298 is out of range (-2147483648 .. 2147483647)"},
      {"\"num_layers\": 1", "\"num_layers\": 2.5", "\"model\" entry: \"num_layers\" is 2.5, not an integer"},
      {"\"hidden_size\": 8", "\"hidden_size\": -1e300", "\"model\" entry: \"hidden_size\" is -1e+300, not an integer"},
      {"\"layernorm_epsilon\": 9.999999747378752e-06", "\"layernorm_epsilon\": 1e300",
       "\"model\" entry: \"layernorm_epsilon\" = 1e+300 is not a finite float"},
      {"\"seed\": 1234,\n  \"seq_length\"", "\"seed\": -1,\n  \"seq_length\"", "\"model\" entry: \"seed\" = -1 is out of range (0 .. 18446744073709551615)"},
      {"\"num_query_groups\": 2", "\"num_query_groups\": 1e10", "\"model\" entry: \"num_query_groups\" is 10000000000.0, not an integer"},
      {"\"rotary_base\": 10000.0", "\"rotary_base\": \"big\"", "\"model\" entry: \"rotary_base\" is \"big\", not a number"},
  };
  int n = 0;
  for (const Case& c : cases) {
    CAPTURE(c.to);
    const std::string dir = checkpoint_with_metadata("numbers_" + std::to_string(n++), seed_metadata_with(c.from, c.to));
    int64_t iteration = -1;
    const std::string msg =
        error_of([&] { (void)ptdp::read_checkpoint_config(dir, &iteration); }, ptdp::ErrorCode::Io);
    CHECK_THAT(msg, Catch::Contains(c.message));
  }
  // The seed itself reads (so each refusal above is the replaced number's).
  const std::string dir = checkpoint_with_metadata("numbers_seed", seed_metadata_with("\"num_layers\": 1", "\"num_layers\": 1"));
  int64_t iteration = -1;
  CHECK(ptdp::read_checkpoint_config(dir, &iteration).num_layers == 1);
  CHECK(iteration == 1);
}

TEST_CASE("fuzz: a SentencePiece model with a zero-length piece is refused, not thrown through", "[fuzz][data]") {
  // fuzz_sentencepiece_tokenizer: libsentencepiece's trie builder threw
  // Darts::Details::Exception ("zero-length key") out of LoadFromSerializedProto; it escaped the
  // tokenizer and terminated the process.
  const std::string input = regression("sentencepiece_zero_length_piece");
  const auto parts = ptdp::fuzz::split_parts(bytes(input), input.size(), 2);
  const std::string path = ptdp::fuzz::scratch_path("zero_length_piece.model");
  ptdp::fuzz::write_file(path, parts[0]);
  const std::string msg = error_of([&] { (void)ptdp::make_sentencepiece_tokenizer(path); }, ptdp::ErrorCode::Io);
  CHECK_THAT(msg, Catch::Contains(path + ": SentencePiece cannot load it: "));
  CHECK_THAT(msg, Catch::Contains("zero-length key"));
}
