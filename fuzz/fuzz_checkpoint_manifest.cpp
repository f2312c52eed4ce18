// A checkpoint's tracker file and SHA-256 manifest (core/checkpoint/checkpoint_files.h
// read_latest_iteration, CheckpointReader): the input is the tracker's text, kSplit, then
// manifest.sha256 of iteration 1, in which "@METADATA@" stands for the true SHA-256 of the
// fixed metadata.json beside it (so the fuzzer can reach the files the manifest names). Every
// file the manifest lists is verified, and metadata.json read.
#include "core/checkpoint/checkpoint_files.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  static const std::string metadata = "{\"format\": \"ptdp-checkpoint\", \"version\": 1}\n";
  static const std::string metadata_hash = sha256_bytes(metadata.data(), metadata.size());
  const std::string dir = fuzz::scratch_path("ckpt");
  static const bool made = [&] {
    std::filesystem::create_directories(dir + "/iter_0000001");
    fuzz::write_file(dir + "/iter_0000001/metadata.json", metadata);
    fuzz::write_file(dir + "/iter_0000001/empty", "");
    return true;
  }();
  (void)made;
  std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  std::string& manifest = parts[1];
  for (std::size_t at = manifest.find("@METADATA@"); at != std::string::npos; at = manifest.find("@METADATA@", at))
    manifest.replace(at, 10, metadata_hash);
  fuzz::write_file(dir + "/latest_checkpointed_iteration.txt", parts[0]);
  fuzz::write_file(dir + "/iter_0000001/manifest.sha256", manifest);

  fuzz::refused_cleanly_or_ok([&] { (void)read_latest_iteration(dir); });
  fuzz::refused_cleanly_or_ok([&] {
    CheckpointReader reader(dir, 1);
    for (const auto& entry : reader.manifest()) fuzz::refused_cleanly_or_ok([&] { reader.verify(entry.first); });
    (void)reader.read_metadata();
  });
  return 0;
}
