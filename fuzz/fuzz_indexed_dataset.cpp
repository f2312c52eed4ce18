// Megatron's indexed data sets (core/data/indexed_dataset.h): PREFIX.idx, kSplit, PREFIX.bin.
// Every sequence and document that the reader accepts is read back (a bounded number of tokens).
#include "core/data/indexed_dataset.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string prefix = fuzz::scratch_path("data");
  fuzz::write_file(prefix + ".idx", parts[0]);
  fuzz::write_file(prefix + ".bin", parts[1]);
  fuzz::refused_cleanly_or_ok([&] {
    const IndexedDataset ds(prefix);
    int64_t budget = 1 << 16;  // tokens read per input, so that huge lengths stay cheap
    std::vector<int32_t> buf;
    for (int64_t i = 0; i < ds.num_sequences() && budget > 0; ++i) {
      fuzz::refused_cleanly_or_ok([&] {
        const int64_t n = std::min(ds.sequence_length(i), budget);
        buf.resize(static_cast<std::size_t>(n));
        ds.read_sequence(i, 0, n, buf.data());
        budget -= n + 1;
      });
    }
    for (int64_t d = 0; d < ds.num_documents() && budget > 0; ++d) {
      fuzz::refused_cleanly_or_ok([&] {
        const int64_t n = ds.document_length(d);
        if (n > budget) return;
        budget -= n + 1;
        (void)ds.document(d);
      });
    }
  });
  return 0;
}
