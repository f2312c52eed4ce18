// Helper of test_blend_megatron.py: prints, as one JSON object, what ptdp's blend code makes of
// a weighted list or a list of sizes, for the Python transcription of Megatron's algorithm to
// compare with. Not a test by itself.
//
//   test_blend_indices_tool weights W1 W2 ... size N   Megatron's weighted blend of N samples:
//       the normalised weights (hex floats), each data set's target and buffer sample counts,
//       the blend's size, dataset_index and dataset_sample_index
//   test_blend_indices_tool exhaustive S1 S2 ...       the exhaustive blend of data sets of
//       S1, S2, ... samples
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/data/blended_dataset.h"

namespace {

template <typename T>
void print_list(const char* name, const std::vector<T>& v, bool last = false) {
  std::printf("\"%s\": [", name);
  for (std::size_t i = 0; i < v.size(); ++i) std::printf("%s%lld", i ? ", " : "", static_cast<long long>(v[i]));
  std::printf("]%s", last ? "" : ", ");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  std::vector<int16_t> which;
  std::vector<int64_t> index;
  if (mode == "weights") {
    std::vector<double> raw;
    int i = 2;
    for (; i < argc && std::string(argv[i]) != "size"; ++i) raw.push_back(std::strtod(argv[i], nullptr));
    if (i + 1 >= argc) return 2;
    const int64_t size = std::strtoll(argv[i + 1], nullptr, 10);
    // As BlendedMegatronDatasetBuilder, then BlendedDataset (which normalises again).
    const std::vector<double> w = ptdp::normalize_weights(raw);
    const std::vector<int64_t> target = ptdp::blend_dataset_sizes(w, size, 0.0);
    const std::vector<int64_t> buffer = ptdp::blend_dataset_sizes(w, size, ptdp::kMidLevelDatasetSurplus);
    int64_t total = 0;
    for (const int64_t t : target) total += t;
    const std::vector<double> w2 = ptdp::normalize_weights(w);
    ptdp::build_blending_indices(w2, total, which, index);
    std::printf("{\"normalized\": [");
    for (std::size_t k = 0; k < w.size(); ++k) std::printf("%s\"%a\"", k ? ", " : "", w[k]);
    std::printf("], ");
    print_list("target", target);
    print_list("buffer", buffer);
    std::printf("\"size\": %lld, ", static_cast<long long>(total));
  } else if (mode == "exhaustive") {
    std::vector<int64_t> sizes;
    for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoll(argv[i], nullptr, 10));
    ptdp::build_exhaustive_blending_indices(sizes, which, index);
    std::printf("{");
  } else {
    std::fprintf(stderr, "usage: %s weights W... size N | exhaustive S...\n", argv[0]);
    return 2;
  }
  print_list("dataset_index", which);
  print_list("dataset_sample_index", index, true);
  std::printf("}\n");
  return 0;
}
