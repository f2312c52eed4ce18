// What the fuzz targets found, through the C API (fuzz/regressions/, tests/fuzz/CMakeLists.txt).
#include <catch2/catch.hpp>

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
