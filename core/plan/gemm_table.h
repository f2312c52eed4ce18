// GEMM efficiency by shape and device: the fraction of a device's peak one GEMM C[M, N] =
// A[M, K] B[K, N] achieves, read from a table of measured (or published) efficiencies on a grid
// of sizes and interpolated in log space between them.
//
// The planner's time model prices every GEMM of a layer with its own shape (QKV, the attention
// products, the projection, the MLP's two, the logits layer; forward, input gradient and weight
// gradient), so a small model whose GEMMs are thin runs at the rate its shapes allow instead of
// one efficiency for every size.
//
// Tables:
//  - "a100-16bit", "a100-tf32", "h100-16bit", "h100-tf32": built in (gemm_table.cpp documents the
//    sources: NVIDIA's published cuBLAS throughput versus size and the efficiencies the paper's
//    own Table 1 implies on A100);
//  - "cpu": sgemm through OpenBLAS measured on the project's development machine by
//    `bench_kernels --gemm-table PATH` (ships as data/gemm_tables/cpu.json and built in);
//  - any JSON file of the same form (gemm_table_to_json), e.g. another CPU measured with
//    bench_kernels, or a GPU's cuBLAS rates written in that form (bench_gpu has no mode that
//    writes one yet).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptdp::plan {

struct GemmTable {
  std::string name;    ///< "a100-16bit", "cpu", a file's "name"
  std::string source;  ///< where the numbers come from, in words
  /// The rate efficiency 1 stood for where the table was made, FLOP/s (the device's data-sheet
  /// peak for GPUs; the 90th percentile of the measured sgemm rates for a CPU table). The time
  /// model multiplies the efficiencies with the cluster's own peak, which for a preset is this.
  double peak_flops = 0;
  /// Grid sizes shared by M, N and K, ascending, > 0.
  std::vector<double> sizes;
  /// Efficiency in (0, 1] at (M, N, K) = (sizes[i], sizes[j], sizes[k]), index (i * n + j) * n + k.
  std::vector<double> efficiency;

  bool empty() const { return sizes.empty(); }
  /// Efficiency at any (M, N, K) > 0: trilinear interpolation in (log M, log N, log K) between
  /// the grid's points, clamped to the grid's range (sizes outside it take the edge's value).
  double at(double m, double n, double k) const;
  /// FLOP/s of one GEMM of this shape: peak_flops * at(m, n, k).
  double rate(double m, double n, double k) const { return peak_flops * at(m, n, k); }
  /// Seconds of `count` GEMMs of shape (m, n, k): 2 m n k count / rate.
  double seconds(double m, double n, double k, double count = 1) const;
  /// Throws Error(InvalidArgument) naming `origin` and what is wrong.
  void validate(const std::string& origin) const;
};

/// The built-in "cpu" table: bench_kernels --gemm-table on the project's development machine
/// (OpenBLAS sgemm, one thread, as each bench_train rank runs), generated into
/// core/plan/gemm_table_cpu.cpp by scripts/gemm-table-to-cpp.py from data/gemm_tables/cpu.json.
GemmTable cpu_table();
/// The built-in tables' names.
std::vector<std::string> gemm_table_names();
/// A built-in table; Error(InvalidArgument) listing the names for an unknown one.
GemmTable builtin_gemm_table(const std::string& name);
/// {"name", "source", "peak_tflops", "sizes": [...], "efficiency": [[[...]]] (M, N, K nested)}.
nlohmann::json gemm_table_to_json(const GemmTable& t);
/// Reads gemm_table_to_json's form; Error(InvalidArgument) naming `origin` and the key.
GemmTable gemm_table_from_json(const nlohmann::json& j, const std::string& origin);
/// A built-in name, or a JSON file's path (Error(Io) naming it when it cannot be read).
GemmTable load_gemm_table(const std::string& name_or_path);
/// load_gemm_table() once per name or path for the life of the process (the planner prices
/// thousands of layouts); thread-safe. The reference stays valid.
const GemmTable& cached_gemm_table(const std::string& name_or_path);

}  // namespace ptdp::plan
