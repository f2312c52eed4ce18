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
  double gemm_efficiency = 0;       ///< without GEMM tables: achieved fraction of peak for a
                                    ///< transformer layer's math at large sizes, including its
                                    ///< memory-bound kernels
  double memory_bandwidth = 0;      ///< achieved device-memory bytes/s (the optimizer step)
  /// Bytes/s the memory-bound kernels of a layer (norms, activation, softmax, dropout, the
  /// loss) achieve with a GEMM table; 0: memory_bandwidth (GPUs, where they are bandwidth-bound;
  /// on a CPU thread they are bound by their arithmetic and run slower than a stream).
  double elementwise_bandwidth = 0;
  double intra_node_bandwidth = 0;  ///< achieved collective bus bandwidth per GPU inside a node, bytes/s
  double intra_node_latency = 0;    ///< seconds per collective or transfer inside a node
  double inter_node_bandwidth = 0;  ///< achieved bandwidth per GPU between nodes, bytes/s
  double inter_node_latency = 0;    ///< seconds per collective or transfer between nodes
  /// GEMM efficiency by shape (core/plan/gemm_table.h) for 16-bit and for fp32 training: a
  /// built-in table's name ("a100-16bit", "a100-tf32", "h100-16bit", "h100-tf32", "cpu") or a
  /// JSON file's path (bench_kernels --gemm-table). With a table every GEMM of a layer is priced
  /// at its own shape's efficiency and the memory-bound kernels at memory_bandwidth;
  /// gemm_efficiency is then unused. Empty: gemm_efficiency for every GEMM (the older model).
  std::string gemm_table_16bit;
  std::string gemm_table_fp32;

  int num_gpus() const { return gpus_per_node * nodes; }
  double usable_memory() const { return memory_bytes - memory_reserve_bytes; }
  /// Throws Error(InvalidArgument) naming the field and its value when one is out of range.
  void validate() const;
};

/// The names of the presets, e.g. "dgx-a100".
std::vector<std::string> cluster_preset_names();
/// One node of a preset. Throws Error(InvalidArgument) listing the presets for an unknown name.
Cluster cluster_preset(const std::string& name);

/// The CPU engine on this kind of machine as a "cluster": `ranks` MPI ranks of one thread each
/// (the "GPUs", all on one node) sharing `cores` cores. Its GEMMs are priced with the built-in
/// "cpu" table (bench_kernels --gemm-table), its memory-bound kernels and optimizer at the
/// single-thread bandwidth bench_kernels measures, its collectives at MPI's shared-memory
/// bandwidth and latency (bench_comm, measured with 4 ranks on 2 cores, so taken as they are);
/// with more ranks than cores the compute and memory-bound rates are shared: multiplied by
/// cores / ranks. See cluster.cpp for the measured numbers.
Cluster cpu_cluster(int ranks, double cores);

/// Reads a cluster from JSON: an object whose keys are the field names above (bandwidths in
/// GB/s, latencies in microseconds, memory in GiB, peak rates in TFLOP/s; see cluster_to_json),
/// optionally "preset": NAME as the starting point (else dgx-a100), and "gemm_table_16bit",
/// "gemm_table_fp32" (a built-in table's name, a JSON file's path, or "" for none). Unknown keys
/// are refused.
/// Throws Error(InvalidArgument) naming `origin` and the key for bad content.
Cluster cluster_from_json(const nlohmann::json& j, const std::string& origin);
/// Reads cluster_from_json() from a file; Error(Io) naming the path when it cannot be read or
/// is not JSON.
Cluster load_cluster(const std::string& path);
/// The cluster in the units cluster_from_json() reads.
nlohmann::json cluster_to_json(const Cluster& c);

}  // namespace ptdp::plan
