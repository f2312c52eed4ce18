// HuggingFaceTokenizer's files (core/data/hf_tokenizer.h): tokenizer.json, kSplit, text to
// encode, and optionally kSplit and the tokenizer_config.json read beside it.
#include <filesystem>

#include "core/data/hf_tokenizer.h"
#include "fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string path = fuzz::scratch_path("tokenizer.json"), config = fuzz::scratch_path("tokenizer_config.json");
  fuzz::write_file(path, parts[0]);
  if (parts.size() > 2) {
    fuzz::write_file(config, parts[2]);
  } else {
    std::error_code ec;
    std::filesystem::remove(config, ec);
  }
  fuzz::refused_cleanly_or_ok([&] { fuzz::exercise_tokenizer(*make_hf_tokenizer(path), parts[1]); });
  return 0;
}
