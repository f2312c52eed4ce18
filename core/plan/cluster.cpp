#include "core/plan/cluster.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "core/plan/gemm_table.h"
#include "io/file_read.h"
#include "io/json_text.h"

namespace ptdp::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;

// The presets. Where the numbers come from:
//  - Memory: what nvidia-smi reports for the board (A100-SXM4-80GB 81920 MiB, H100-SXM5
//    81559 MiB, H200 143771 MiB). Reserve: CUDA context and cuBLAS workspaces (~1 GiB), NCCL
//    buffers and the caching allocator's fragmentation; Megatron users plan with a few GiB
//    of headroom.
//  - Peak rates: NVIDIA's data sheets, dense (no sparsity): A100 312 TFLOP/s bf16, 156 TF32;
//    H100/H200 SXM 989 bf16, 495 TF32.
//  - gemm_efficiency: the fraction of peak a transformer layer's work runs at once its GEMMs
//    are large, memory-bound kernels (LayerNorm, softmax, dropout, GeLU) included. Calibrated
//    on the paper's weak-scaling runs on A100 (Narayanan et al. 2021, Table 1: 44-52 % of peak
//    end to end, with communication and bubble on top of this); H100-class GPUs reach a lower
//    fraction of their higher peak on the same code (public MFU reports of 40-50 %).
//  - Bandwidths: what nccl-tests reports as bus bandwidth for large messages, per GPU. Inside
//    a DGX A100, NVLink 3 through NVSwitch (300 GB/s per direction) gives about 230 GB/s;
//    NVLink 4 (450 GB/s) about 360 GB/s. Between nodes each GPU has its own NIC: HDR
//    InfiniBand 200 Gb/s = 25 GB/s (about 23 achieved) on DGX A100, NDR 400 Gb/s = 50 GB/s
//    (about 45) on DGX H100/H200.
//  - Latencies: small-message collective latency of NCCL inside a node (~10 us) and across
//    InfiniBand (~20 us).
//  - memory_bandwidth: about 80 % of the HBM peak (A100 80GB 2.04 TB/s, H100 3.35, H200 4.8),
//    what a streaming kernel like the Adam update achieves.
Cluster dgx_a100() {
  Cluster c;
  c.name = "dgx-a100";
  c.gpus_per_node = 8;
  c.memory_bytes = 81920 * kMiB;
  c.memory_reserve_bytes = 3 * kGiB;
  c.peak_flops_16bit = 312 * kTera;
  c.peak_flops_fp32 = 156 * kTera;
  c.gemm_efficiency = 0.6;
  c.memory_bandwidth = 1630 * kGB;
  c.intra_node_bandwidth = 230 * kGB;
  c.intra_node_latency = 10 * kMicro;
  c.inter_node_bandwidth = 23 * kGB;
  c.inter_node_latency = 20 * kMicro;
  c.gemm_table_16bit = "a100-16bit";
  c.gemm_table_fp32 = "a100-tf32";
  return c;
}

Cluster dgx_h100() {
  Cluster c = dgx_a100();
  c.name = "dgx-h100";
  c.memory_bytes = 81559 * kMiB;
  c.peak_flops_16bit = 989 * kTera;
  c.peak_flops_fp32 = 495 * kTera;
  c.gemm_efficiency = 0.5;
  c.memory_bandwidth = 2680 * kGB;
  c.intra_node_bandwidth = 360 * kGB;
  c.inter_node_bandwidth = 45 * kGB;
  c.gemm_table_16bit = "h100-16bit";
  c.gemm_table_fp32 = "h100-tf32";
  return c;
}

Cluster dgx_h200() {
  Cluster c = dgx_h100();
  c.name = "dgx-h200";
  c.memory_bytes = 143771 * kMiB;
  c.memory_bandwidth = 3840 * kGB;
  return c;
}

// The H800 (SXM), as DeepSeek-V3 trained on it (DeepSeek-V3 technical report, section 3.1: 2048
// H800s, 8 per node, NVLink and NVSwitch inside a node, InfiniBand between): an H100 SXM with
// its NVLink cut to 400 GB/s (200 per direction) and the same SMs, memory and rates. Inside a
// node 160 GB/s achieved (the report's section 3.2.2 figure for NVLink), between nodes 8 NDR
// InfiniBand NICs of 400 Gb/s, one per GPU: 50 GB/s (the report's), about 45 achieved as for
// DGX H100.
Cluster hgx_h800() {
  Cluster c = dgx_h100();
  c.name = "hgx-h800";
  c.intra_node_bandwidth = 160 * kGB;
  return c;
}

// The CPU engine on the project's development machine (2 cores of a Skylake-X server; one
// thread per rank, as bench_train runs it), measured with bench_kernels --threads 1 while the
// machine was shared with other work. Rates are per core the rank holds (cpu_cluster shares them
// out when ranks outnumber cores):
//  - GEMMs: the built-in "cpu" table (bench_kernels --gemm-table, timed in the thread's CPU time;
//    its peak, the 90th percentile of the sgemm rates, 188 GFLOP/s, is the peak here);
//  - memory-bound kernels: about 3 GB/s over the bytes they must move, in CPU time (bench_kernels
//    mem/, wall-time GB/s forward / backward: LayerNorm 6.6 / 4.0, GeLU 3.6 / 4.6, softmax 1.8 /
//    11.0, dropout 1.7 / 1.7, bias-dropout-add 2.3, cross-entropy 1.0 / 3.3; 2.3 GB/s over a
//    bench_train layer's forward bytes, with the thread on its core 79 % of the wall time);
//  - the optimizer: AdamW streams 28 bytes per parameter at 16.4 GB/s wall, 20 in CPU time
//    (mem/adamw_step);
//  - collectives: MPI over shared memory, about 2 GB/s bus bandwidth and 30 us per collective
//    (bench_comm, 4 one-thread ranks on the 2 cores: all_reduce of 16 KiB 33 us, of 64 KiB - 4
//    MiB 1.5 - 2.4 GB/s); measured with the ranks sharing the cores, so not shared out again.
constexpr double kCpuElementwiseGBs = 3.0;
constexpr double kCpuStreamGBs = 20.0;
constexpr double kCpuMpiGBs = 2.0;
constexpr double kCpuMpiLatencyUs = 30.0;

const std::vector<std::pair<std::string, Cluster (*)()>>& presets() {
  static const std::vector<std::pair<std::string, Cluster (*)()>> table = {
      {"dgx-a100", &dgx_a100}, {"dgx-h100", &dgx_h100}, {"dgx-h200", &dgx_h200}, {"hgx-h800", &hgx_h800}};
  return table;
}

std::string preset_list() {
  std::string s;
  for (const auto& [name, make] : presets()) s += str_cat(s.empty() ? "" : ", ", name);
  return s;
}

// A JSON field: its key, the member it sets, and the unit factor from file units to SI.
struct Field {
  const char* key;
  double Cluster::*member;
  double unit;
  bool may_be_zero;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      {"memory_gib", &Cluster::memory_bytes, kGiB, false},
      {"memory_reserve_gib", &Cluster::memory_reserve_bytes, kGiB, true},
      {"peak_tflops_16bit", &Cluster::peak_flops_16bit, kTera, false},
      {"peak_tflops_fp32", &Cluster::peak_flops_fp32, kTera, false},
      {"gemm_efficiency", &Cluster::gemm_efficiency, 1.0, false},
      {"memory_bandwidth_gbs", &Cluster::memory_bandwidth, kGB, false},
      {"elementwise_bandwidth_gbs", &Cluster::elementwise_bandwidth, kGB, true},
      {"intra_node_bandwidth_gbs", &Cluster::intra_node_bandwidth, kGB, false},
      {"intra_node_latency_us", &Cluster::intra_node_latency, kMicro, true},
      {"inter_node_bandwidth_gbs", &Cluster::inter_node_bandwidth, kGB, false},
      {"inter_node_latency_us", &Cluster::inter_node_latency, kMicro, true},
  };
  return table;
}

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw_error(ErrorCode::InvalidArgument, str_cat(origin, ": ", what));
}

}  // namespace

void Cluster::validate() const {
  PTDP_CHECK_ARG(gpus_per_node > 0, str_cat("cluster ", name, ": gpus per node = ", gpus_per_node, " is not > 0"));
  PTDP_CHECK_ARG(nodes > 0, str_cat("cluster ", name, ": nodes = ", nodes, " is not > 0"));
  for (const Field& f : fields()) {
    const double v = this->*f.member / f.unit;
    const bool ok = std::isfinite(v) && (f.may_be_zero ? v >= 0 : v > 0);
    PTDP_CHECK_ARG(ok, str_cat("cluster ", name, ": ", f.key, " = ", v, " is not ", f.may_be_zero ? ">= 0" : "> 0"));
  }
  PTDP_CHECK_ARG(gemm_efficiency <= 1.0,
                 str_cat("cluster ", name, ": gemm_efficiency = ", gemm_efficiency, " is above 1 (a fraction of peak)"));
  for (const std::string* table : {&gemm_table_16bit, &gemm_table_fp32}) {
    if (table->empty()) continue;
    try {
      cached_gemm_table(*table);
    } catch (const Error& e) {
      throw_error(ErrorCode::InvalidArgument,
                  str_cat("cluster ", name, ": ", table == &gemm_table_16bit ? "gemm_table_16bit" : "gemm_table_fp32",
                          " = '", *table, "': ", e.what()));
    }
  }
  PTDP_CHECK_ARG(memory_reserve_bytes < memory_bytes,
                 str_cat("cluster ", name, ": memory_reserve_gib = ", memory_reserve_bytes / kGiB,
                         " leaves nothing of memory_gib = ", memory_bytes / kGiB));
}

Cluster cpu_cluster(int ranks, double cores) {
  PTDP_CHECK_ARG(ranks > 0, str_cat("cpu cluster: ranks = ", ranks, " is not > 0"));
  PTDP_CHECK_ARG(cores > 0 && std::isfinite(cores), str_cat("cpu cluster: cores = ", cores, " is not > 0"));
  // More ranks than cores: each rank runs a share cores / ranks of the time.
  const double share = std::min(1.0, cores / ranks);
  Cluster c;
  c.name = "cpu";
  c.gpus_per_node = ranks;
  c.nodes = 1;
  c.memory_bytes = 64 * kGiB;
  c.memory_reserve_bytes = 1 * kGiB;
  c.peak_flops_fp32 = builtin_gemm_table("cpu").peak_flops * share;
  c.peak_flops_16bit = c.peak_flops_fp32;
  c.gemm_efficiency = 0.5;
  c.gemm_table_16bit = "cpu";
  c.gemm_table_fp32 = "cpu";
  c.memory_bandwidth = kCpuStreamGBs * kGB * share;
  c.elementwise_bandwidth = kCpuElementwiseGBs * kGB * share;
  c.intra_node_bandwidth = kCpuMpiGBs * kGB;
  c.intra_node_latency = kCpuMpiLatencyUs * kMicro;
  c.inter_node_bandwidth = c.intra_node_bandwidth;
  c.inter_node_latency = c.intra_node_latency;
  return c;
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : presets()) names.push_back(name);
  return names;
}

Cluster cluster_preset(const std::string& name) {
  for (const auto& [n, make] : presets()) {
    if (n == name) return make();
  }
  throw_error(ErrorCode::InvalidArgument, str_cat("unknown cluster preset '", name, "' (presets: ", preset_list(), ")"));
}

Cluster cluster_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) bad(origin, "the cluster must be a JSON object");
  Cluster c = dgx_a100();
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) bad(origin, "\"preset\" must be a string");
    c = cluster_preset(j["preset"].get<std::string>());
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "preset") continue;
    if (key == "name") {
      if (!value.is_string() || value.get<std::string>().empty()) bad(origin, "\"name\" must be a non-empty string");
      c.name = value.get<std::string>();
      continue;
    }
    if (key == "gemm_table_16bit" || key == "gemm_table_fp32") {
      if (!value.is_string()) bad(origin, str_cat("\"", key, "\" must be a string (a table's name or a file's path)"));
      (key == "gemm_table_16bit" ? c.gemm_table_16bit : c.gemm_table_fp32) = value.get<std::string>();
      continue;
    }
    if (key == "gpus_per_node" || key == "nodes") {
      if (!value.is_number_integer() || value.get<int64_t>() <= 0 || value.get<int64_t>() > (1 << 20)) {
        bad(origin, str_cat("\"", key, "\" must be a positive integer, got ", json_text(value)));
      }
      (key == "nodes" ? c.nodes : c.gpus_per_node) = value.get<int>();
      continue;
    }
    const Field* field = nullptr;
    for (const Field& f : fields()) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) {
      std::string known = "name, preset, gpus_per_node, nodes, gemm_table_16bit, gemm_table_fp32";
      for (const Field& f : fields()) known += str_cat(", ", f.key);
      bad(origin, str_cat("unknown key \"", key, "\" (known: ", known, ")"));
    }
    if (!value.is_number()) bad(origin, str_cat("\"", key, "\" must be a number, got ", json_text(value)));
    c.*(field->member) = value.get<double>() * field->unit;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    bad(origin, e.what());
  }
  return c;
}

Cluster load_cluster(const std::string& path) {
  const std::string text = read_regular_file(path, "cluster file", kMaxSmallTextFileBytes);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw_io_error(path, "not valid JSON");
  return cluster_from_json(j, path);
}

nlohmann::json cluster_to_json(const Cluster& c) {
  nlohmann::json j = nlohmann::json::object();
  j["name"] = c.name;
  j["gpus_per_node"] = c.gpus_per_node;
  j["nodes"] = c.nodes;
  for (const Field& f : fields()) j[f.key] = c.*f.member / f.unit;
  j["gemm_table_16bit"] = c.gemm_table_16bit;
  j["gemm_table_fp32"] = c.gemm_table_fp32;
  return j;
}

}  // namespace ptdp::plan
