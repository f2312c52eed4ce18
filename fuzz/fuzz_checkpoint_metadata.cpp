// A checkpoint's metadata.json (core/checkpoint/checkpoint.h read_checkpoint_config,
// checkpoint_files.h CheckpointReader and TensorMap::from_json): the input is metadata.json of
// iteration 1 of a checkpoint directory whose manifest lists it with its true SHA-256, beside
// the small shard fuzz/data/model_tp00_pp00.safetensors. Every tensor of an accepted tensor map
// is read back through the re-sharding reader when it is small.
#include <fstream>
#include <sstream>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpoint_files.h"
#include "fuzz/fuzz_support.h"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) std::abort();
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  static const std::string shard = read_all(PTDP_FUZZ_DATA_DIR "/model_tp00_pp00.safetensors");
  static const std::string shard_hash = sha256_bytes(shard.data(), shard.size());
  const std::string dir = fuzz::scratch_path("ckpt");
  static const bool made = [&] {
    std::filesystem::create_directories(dir + "/iter_0000001");
    fuzz::write_file(dir + "/latest_checkpointed_iteration.txt", "1\n");
    fuzz::write_file(dir + "/iter_0000001/model_tp00_pp00.safetensors", shard);
    return true;
  }();
  (void)made;
  const std::string_view md(reinterpret_cast<const char*>(data), size);
  fuzz::write_file(dir + "/iter_0000001/metadata.json", md);
  fuzz::write_file(dir + "/iter_0000001/manifest.sha256",
                   sha256_bytes(data, size) + "  metadata.json\n" + shard_hash + "  model_tp00_pp00.safetensors\n");

  fuzz::refused_cleanly_or_ok([&] {
    int64_t iteration = -1;
    (void)read_checkpoint_config(dir, &iteration);
  });
  fuzz::refused_cleanly_or_ok([&] {
    CheckpointReader reader(dir);
    const nlohmann::json j = reader.read_metadata();
    if (!j.is_object() || !j.contains("tensors")) return;
    reader.set_tensor_map(TensorMap::from_json(j["tensors"], reader.path_for("metadata.json")));
    for (const auto& kv : reader.tensor_map().entries()) {
      const std::string& name = kv.first;
      const TensorEntry& entry = kv.second;
      const int64_t rows = entry.rows(), cols = entry.cols();
      if (rows < 0 || cols < 0 || rows > 4096 || cols > 4096 || rows * cols > 65536) continue;
      std::vector<float> out(static_cast<std::size_t>(rows * cols));
      fuzz::refused_cleanly_or_ok([&] { reader.read_block(name, 0, rows, 0, cols, out.data()); });
    }
  });
  return 0;
}
