// safetensors files (core/checkpoint/safetensors.h SafetensorsFile): the whole file. Every
// tensor the reader accepts is read back, raw, as floats and as a block, when it is small.
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::string path = fuzz::scratch_path("shard.safetensors");
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::refused_cleanly_or_ok([&] {
    const SafetensorsFile f(path);
    for (const SafetensorsTensorInfo& t : f.tensors()) {
      const uint64_t bytes = t.end - t.begin;
      if (bytes > (1u << 20)) continue;
      std::vector<unsigned char> raw(static_cast<std::size_t>(bytes));
      fuzz::refused_cleanly_or_ok([&] { f.read_raw(t.name, raw.data(), raw.size()); });
      if (!st_dtype_is_float(t.dtype)) continue;
      std::vector<float> values(static_cast<std::size_t>(t.numel()));
      fuzz::refused_cleanly_or_ok([&] { f.read_f32(t.name, values.data()); });
      const int64_t r1 = std::min<int64_t>(t.rows(), 2), c1 = std::min<int64_t>(t.cols(), 3);
      std::vector<float> block(static_cast<std::size_t>(r1 * c1));
      fuzz::refused_cleanly_or_ok([&] { f.read_block_f32(t.name, 0, r1, 0, c1, block.data()); });
    }
  });
  return 0;
}
