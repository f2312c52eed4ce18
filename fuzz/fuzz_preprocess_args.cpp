// The flag parsers of ptdp-preprocess-data and ptdp-merge-datasets (core/args/preprocess_args.h).
// Input: a command line, one argument per line; both parsers read it.
#include "core/args/preprocess_args.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> argv = fuzz::split_lines(data, size);
  fuzz::refused_cleanly_or_ok([&] { (void)parse_preprocess_args(argv); });
  fuzz::refused_cleanly_or_ok([&] { (void)parse_merge_args(argv); });
  return 0;
}
