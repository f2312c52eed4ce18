// SentencePieceTokenizer's .model file (core/data/sentencepiece_tokenizer.h), read through
// Debian's libsentencepiece (not instrumented: the fuzzer sees ptdp's side of it), kSplit, then
// text to encode.
#include "core/data/sentencepiece_tokenizer.h"
#include "fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string path = fuzz::scratch_path("tokenizer.model");
  fuzz::write_file(path, parts[0]);
  fuzz::refused_cleanly_or_ok([&] { fuzz::exercise_tokenizer(*make_sentencepiece_tokenizer(path), parts[1]); });
  return 0;
}
