// What the fuzz targets found, through the C API (fuzz/regressions/, tests/fuzz/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

TEST_CASE("fuzz: ptdp_train_config_to_json writes flags that are not UTF-8 as U+FFFD", "[fuzz][capi][args]") {
  // fuzz_train_args found that a path with bytes that are no UTF-8 made the JSON dump throw
  // (what ptdp_train_config_to_json and a checkpoint's metadata.json do).
  const char* argv[] = {"ptdp-train", "--data-path", "corpus\xED\xA0_text_document", "--save", "ck\xFF"};
  ptdp_train_config config = nullptr;
  REQUIRE(ptdp_train_config_parse(5, argv, &config) == PTDP_SUCCESS);
  size_t length = 0;
  REQUIRE(ptdp_train_config_to_json(config, nullptr, 0, &length) != PTDP_SUCCESS);  // tells the size
  REQUIRE(length > 0);
  std::vector<char> buffer(length + 1);
  REQUIRE(ptdp_train_config_to_json(config, buffer.data(), buffer.size(), &length) == PTDP_SUCCESS);
  const std::string text(buffer.data(), length);
  CHECK(text.find("\"data-path\":\"corpus\xEF\xBF\xBD\xEF\xBF\xBD_text_document\"") != std::string::npos);
  CHECK(text.find("\"save\":\"ck\xEF\xBF\xBD\"") != std::string::npos);
  REQUIRE(ptdp_train_config_destroy(config) == PTDP_SUCCESS);
}

TEST_CASE("fuzz: ptdp_plan_to_json writes a cluster name that is not UTF-8 as U+FFFD", "[fuzz][capi][plan]") {
  // fuzz_plan_args found that a cluster string with bytes that are no UTF-8 made the JSON dump
  // throw; ptdp_plan_to_json (ptdp-plan --json) writes the cluster's name in its report.
  ptdp_plan_options o;
  REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
  o.global_batch_size = 8;
  o.num_gpus = 8;
  ptdp_cluster cluster;
  REQUIRE(ptdp_cluster_init(&cluster) == PTDP_SUCCESS);
  std::snprintf(cluster.name, sizeof cluster.name, "%s", "lab\xFF" "node");
  ptdp_plan plan = nullptr;
  REQUIRE(ptdp_plan_create(&o, &cluster, &plan) == PTDP_SUCCESS);
  size_t length = 0;
  REQUIRE(ptdp_plan_to_json(plan, nullptr, 0, &length) != PTDP_SUCCESS);  // tells the size
  REQUIRE(length > 0);
  std::vector<char> buffer(length + 1);
  REQUIRE(ptdp_plan_to_json(plan, buffer.data(), buffer.size(), &length) == PTDP_SUCCESS);
  const std::string text(buffer.data(), length);
  CHECK(text.find("\"lab\xEF\xBF\xBDnode\"") != std::string::npos);
  REQUIRE(ptdp_plan_destroy(plan) == PTDP_SUCCESS);
}

TEST_CASE("fuzz: ptdp_tokenizer_create refuses a SentencePiece model with a zero-length piece", "[fuzz][capi][data]") {
  // fuzz_sentencepiece_tokenizer found a .model whose loading made libsentencepiece throw
  // (Darts::Details::Exception) through ptdp; the C API returns PTDP_ERR_IO naming the file.
  std::ifstream in(std::string(PTDP_FUZZ_REGRESSIONS) + "/sentencepiece_zero_length_piece", std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  std::string model = s.str();
  const std::size_t split = model.find("\xff\xfe" "PTDP-FUZZ-SPLIT");
  if (split != std::string::npos) model.resize(split);  // the fuzz input's first part is the .model
  const std::string path = "fuzz_zero_length_piece.model";
  {
    std::ofstream out(path, std::ios::binary);
    out << model;
  }
  ptdp_tokenizer_options options;
  REQUIRE(ptdp_tokenizer_options_init(&options) == PTDP_SUCCESS);
  options.type = PTDP_TOKENIZER_SENTENCE_PIECE;
  options.tokenizer_model = path.c_str();
  ptdp_tokenizer tokenizer = nullptr;
  CHECK(ptdp_tokenizer_create(&options, &tokenizer) == PTDP_ERR_IO);
  CHECK(tokenizer == nullptr);
  const std::string message = ptdp_last_error();
  CHECK(message.find(path + ": SentencePiece cannot load it: ") != std::string::npos);
  CHECK(message.find("zero-length key") != std::string::npos);
  std::remove(path.c_str());
}
