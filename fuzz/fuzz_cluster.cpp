// ptdp-plan's cluster files (core/plan/cluster.h load_cluster): the file's text, parsed as the
// reader parses it, then cluster_from_json and the cluster's own checks.
#include <nlohmann/json.hpp>

#include "core/plan/cluster.h"
#include "fuzz/fuzz_support.h"
#include "io/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::string path = fuzz::scratch_path("cluster.json");
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::refused_cleanly_or_ok([&] {
    const plan::Cluster c = plan::load_cluster(path);
    c.validate();
    (void)json_text(plan::cluster_to_json(c));
  });
  return 0;
}
