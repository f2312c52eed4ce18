// GPT2BPETokenizer's files (core/data/bpe_tokenizer.h): vocab.json, kSplit, merges.txt, kSplit,
// then text to encode with the tokenizer read.
#include "core/data/bpe_tokenizer.h"
#include "fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 3);
  const std::string vocab = fuzz::scratch_path("vocab.json"), merges = fuzz::scratch_path("merges.txt");
  fuzz::write_file(vocab, parts[0]);
  fuzz::write_file(merges, parts[1]);
  fuzz::refused_cleanly_or_ok([&] { fuzz::exercise_tokenizer(*make_gpt2_bpe_tokenizer(vocab, merges), parts[2]); });
  return 0;
}
