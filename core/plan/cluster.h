// A cluster as the planner sees it: nodes of identical GPUs, their memory and arithmetic rate,
// and the two levels of interconnect (inside a node, between nodes). Presets describe NVIDIA DGX
// nodes; a small JSON file can describe any other machine.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptdp::plan {

struct Cluster {
  std::string name = "dgx-a100";
  int gpus_per_node = 8;
  int nodes = 1;
  double memory_bytes = 0;          ///< per GPU
  double memory_reserve_bytes = 0;  ///< per GPU, never planned for: runtime context, communication
                                    ///< buffers, allocator fragmentation
  double peak_flops_16bit = 0;      ///< dense bf16/fp16 tensor-core FLOP/s per GPU
  double peak_flops_fp32 = 0;       ///< FLOP/s per GPU for fp32 training (TF32 tensor cores on GPUs)
  double gemm_efficiency = 0;       ///< achieved fraction of peak for a transformer layer's math at
                                    ///< large sizes, including its memory-bound kernels
  double memory_bandwidth = 0;      ///< achieved device-memory bytes/s (the optimizer step)
  double intra_node_bandwidth = 0;  ///< achieved collective bus bandwidth per GPU inside a node, bytes/s
  double intra_node_latency = 0;    ///< seconds per collective or transfer inside a node
  double inter_node_bandwidth = 0;  ///< achieved bandwidth per GPU between nodes, bytes/s
  double inter_node_latency = 0;    ///< seconds per collective or transfer between nodes

  int num_gpus() const { return gpus_per_node * nodes; }
  double usable_memory() const { return memory_bytes - memory_reserve_bytes; }
  /// Throws Error(InvalidArgument) naming the field and its value when one is out of range.
  void validate() const;
};

/// The names of the presets, e.g. "dgx-a100".
std::vector<std::string> cluster_preset_names();
/// One node of a preset. Throws Error(InvalidArgument) listing the presets for an unknown name.
Cluster cluster_preset(const std::string& name);

/// Reads a cluster from JSON: an object whose keys are the field names above (bandwidths in
/// GB/s, latencies in microseconds, memory in GiB, peak rates in TFLOP/s; see cluster_to_json),
/// optionally "preset": NAME as the starting point (else dgx-a100). Unknown keys are refused.
/// Throws Error(InvalidArgument) naming `origin` and the key for bad content.
Cluster cluster_from_json(const nlohmann::json& j, const std::string& origin);
/// Reads cluster_from_json() from a file; Error(Io) naming the path when it cannot be read or
/// is not JSON.
Cluster load_cluster(const std::string& path);
/// The cluster in the units cluster_from_json() reads.
nlohmann::json cluster_to_json(const Cluster& c);

}  // namespace ptdp::plan
