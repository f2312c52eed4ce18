#include "core/plan/gemm_table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "io/file_read.h"

namespace ptdp::plan {

namespace {

constexpr double kTera = 1e12;

// Where the GPU tables come from.
//
// A tensor-core GEMM runs near the device's peak once every dimension covers many of its tiles,
// and loses rate when a dimension is small: a thread-block tile of 128-256 rows or columns is
// partly idle (tile quantisation), there are too few tiles to fill the 108 (A100) or 132 (H100)
// SMs (wave quantisation), and a short K leaves too little work per byte loaded. NVIDIA's
// "Matrix Multiplication Background User's Guide" (docs.nvidia.com/deeplearning/performance)
// shows cuBLAS throughput against each dimension (figures; the numbers here are approximate
// read-offs, not a measurement): with the other two large, fp16 throughput is about half the
// large-size rate at a dimension of 128, about 70 % at 256, 85 % at 512, 92 % at 1024 and 97 %
// at 2048; large square fp16 GEMMs reach about 270 TFLOP/s of the A100's 312 (86 %) and about
// 700 of the H100 SXM's 989 (71 %). The factors below are that curve per dimension (the same
// for M, N and K), multiplied, and
// capped by the roofline (a GEMM cannot run faster than its bytes can be streamed from HBM:
// 2 M N K / (e (M K + K N + M N)) FLOPs per byte times the achieved bandwidth), which is what
// makes the attention products (K or N = the head size, 64-160) run at a fraction of peak.
//
// The large-size rates: NVIDIA publishes about 86 % of the A100's peak for large square fp16
// GEMMs with today's cuBLAS; the paper's own Table 1 (Narayanan et al. 2021, weak scaling on DGX
// A100, PTDP-BRIEF.md), run through this whole model (GEMMs at these shapes, the memory-bound
// kernels at the achieved HBM bandwidth, communication, bubble), implies 72 % for the layer
// GEMMs of the paper's 2021 software, and that is the A100 figure used: every Table 1 row then
// comes out within 10 % (tests/plan/test_plan_model.cpp), while 86 % over-predicts the large
// models by 15-20 %. H100 SXM: about 700 of 989 TFLOP/s (71 %) for large fp16 GEMMs. TF32 (fp32
// training on GPUs) follows the same curve against the TF32 peak.
struct SizeFactor {
  double size, factor;
};
const std::vector<SizeFactor>& tensor_core_size_curve() {
  static const std::vector<SizeFactor> curve = {
      {16, 0.10},  {32, 0.18},  {64, 0.32},  {128, 0.50},  {256, 0.70},  {512, 0.85},
      {1024, 0.92}, {2048, 0.97}, {4096, 0.99}, {8192, 1.0}, {16384, 1.0}, {32768, 1.0}};
  return curve;
}

double curve_at(double x) {
  const std::vector<SizeFactor>& c = tensor_core_size_curve();
  if (x <= c.front().size) return c.front().factor;
  if (x >= c.back().size) return c.back().factor;
  for (std::size_t i = 1; i < c.size(); ++i) {
    if (x <= c[i].size) {
      const double f = std::log(x / c[i - 1].size) / std::log(c[i].size / c[i - 1].size);
      return c[i - 1].factor + f * (c[i].factor - c[i - 1].factor);
    }
  }
  return c.back().factor;
}

struct GpuSpec {
  const char* name;
  double peak_tflops;       // data-sheet dense peak
  double large_efficiency;  // large square GEMM
  double bandwidth_gbs;     // achieved HBM bandwidth (the roofline)
  double element_bytes;
};

GemmTable gpu_table(const GpuSpec& g) {
  GemmTable t;
  t.name = g.name;
  t.source = str_cat("built in: NVIDIA's published cuBLAS throughput versus GEMM size (Matrix Multiplication "
                     "Background User's Guide), large-size efficiency ",
                     g.large_efficiency, " of ", g.peak_tflops, " TFLOP/s, capped by the roofline at ",
                     g.bandwidth_gbs, " GB/s; see core/plan/gemm_table.cpp");
  t.peak_flops = g.peak_tflops * kTera;
  for (const SizeFactor& s : tensor_core_size_curve()) t.sizes.push_back(s.size);
  const std::size_t n = t.sizes.size();
  t.efficiency.resize(n * n * n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t k = 0; k < n; ++k) {
        const double M = t.sizes[i], N = t.sizes[j], K = t.sizes[k];
        const double shape = g.large_efficiency * curve_at(M) * curve_at(N) * curve_at(K);
        const double intensity = 2.0 * M * N * K / (g.element_bytes * (M * K + K * N + M * N));
        const double roof = intensity * g.bandwidth_gbs * 1e9 / t.peak_flops;
        t.efficiency[(i * n + j) * n + k] = std::min(shape, roof);
      }
    }
  }
  return t;
}

using Maker = GemmTable (*)();
const std::vector<std::pair<std::string, Maker>>& makers() {
  static const std::vector<std::pair<std::string, Maker>> table = {
      {"a100-16bit", [] { return gpu_table({"a100-16bit", 312, 0.72, 1630, 2}); }},
      {"a100-tf32", [] { return gpu_table({"a100-tf32", 156, 0.72, 1630, 4}); }},
      {"h100-16bit", [] { return gpu_table({"h100-16bit", 989, 0.71, 2680, 2}); }},
      {"h100-tf32", [] { return gpu_table({"h100-tf32", 495, 0.71, 2680, 4}); }},
      {"cpu", &cpu_table},
  };
  return table;
}

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw_error(ErrorCode::InvalidArgument, str_cat(origin, ": ", what));
}

// Position of x on the log-spaced axis: the cell [i, i + 1] and the fraction inside it.
std::pair<std::size_t, double> locate(const std::vector<double>& sizes, double x) {
  const std::size_t n = sizes.size();
  if (n == 1 || x <= sizes.front()) return {0, 0.0};
  if (x >= sizes.back()) return {n - 2, 1.0};
  std::size_t i = static_cast<std::size_t>(std::upper_bound(sizes.begin(), sizes.end(), x) - sizes.begin()) - 1;
  i = std::min(i, n - 2);
  return {i, std::log(x / sizes[i]) / std::log(sizes[i + 1] / sizes[i])};
}

}  // namespace

double GemmTable::at(double m, double n, double k) const {
  const std::size_t s = sizes.size();
  if (s == 1) return efficiency.front();
  const auto [i, fi] = locate(sizes, m);
  const auto [j, fj] = locate(sizes, n);
  const auto [l, fl] = locate(sizes, k);
  double e = 0;
  for (int di = 0; di < 2; ++di) {
    for (int dj = 0; dj < 2; ++dj) {
      for (int dl = 0; dl < 2; ++dl) {
        const double w = (di ? fi : 1 - fi) * (dj ? fj : 1 - fj) * (dl ? fl : 1 - fl);
        if (w == 0) continue;
        e += w * efficiency[((i + di) * s + j + dj) * s + l + dl];
      }
    }
  }
  return e;
}

double GemmTable::seconds(double m, double n, double k, double count) const {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
  return 2.0 * m * n * k * count / rate(m, n, k);
}

void GemmTable::validate(const std::string& origin) const {
  if (sizes.empty()) bad(origin, "\"sizes\" is empty");
  if (!(std::isfinite(peak_flops) && peak_flops > 0)) bad(origin, str_cat("peak_tflops = ", peak_flops / kTera, " is not > 0"));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (!(std::isfinite(sizes[i]) && sizes[i] > 0)) bad(origin, str_cat("sizes[", i, "] = ", sizes[i], " is not > 0"));
    if (i > 0 && !(sizes[i] > sizes[i - 1])) bad(origin, str_cat("sizes are not ascending at sizes[", i, "] = ", sizes[i]));
  }
  const std::size_t n = sizes.size();
  if (efficiency.size() != n * n * n) {
    bad(origin, str_cat("\"efficiency\" holds ", efficiency.size(), " values, not sizes^3 = ", n * n * n));
  }
  for (std::size_t i = 0; i < efficiency.size(); ++i) {
    const double e = efficiency[i];
    if (!(std::isfinite(e) && e > 0 && e <= 1.0)) {
      bad(origin, str_cat("efficiency at (M, N, K) = (", sizes[i / (n * n)], ", ", sizes[(i / n) % n], ", ",
                          sizes[i % n], ") = ", e, " is not in (0, 1]"));
    }
  }
}

std::vector<std::string> gemm_table_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : makers()) names.push_back(name);
  return names;
}

GemmTable builtin_gemm_table(const std::string& name) {
  for (const auto& [n, make] : makers()) {
    if (n == name) return make();
  }
  std::string list;
  for (const auto& [n, make] : makers()) list += str_cat(list.empty() ? "" : ", ", n);
  throw_error(ErrorCode::InvalidArgument, str_cat("unknown GEMM table '", name, "' (built in: ", list,
                                                  "; or the path of a JSON file written by bench_kernels --gemm-table)"));
}

nlohmann::json gemm_table_to_json(const GemmTable& t) {
  nlohmann::json j = nlohmann::json::object();
  j["name"] = t.name;
  j["source"] = t.source;
  j["peak_tflops"] = t.peak_flops / kTera;
  j["sizes"] = t.sizes;
  const std::size_t n = t.sizes.size();
  nlohmann::json e = nlohmann::json::array();
  for (std::size_t i = 0; i < n; ++i) {
    nlohmann::json plane = nlohmann::json::array();
    for (std::size_t jj = 0; jj < n; ++jj) {
      nlohmann::json row = nlohmann::json::array();
      for (std::size_t k = 0; k < n; ++k) row.push_back(std::round(t.efficiency[(i * n + jj) * n + k] * 1e4) / 1e4);
      plane.push_back(row);
    }
    e.push_back(plane);
  }
  j["efficiency"] = e;
  return j;
}

GemmTable gemm_table_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) bad(origin, "a GEMM table must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "name" && key != "source" && key != "peak_tflops" && key != "sizes" && key != "efficiency") {
      bad(origin, str_cat("unknown key \"", key, "\" (known: name, source, peak_tflops, sizes, efficiency)"));
    }
  }
  GemmTable t;
  if (j.contains("name")) {
    if (!j["name"].is_string()) bad(origin, "\"name\" must be a string");
    t.name = j["name"].get<std::string>();
  }
  if (t.name.empty()) t.name = origin;
  if (j.contains("source")) {
    if (!j["source"].is_string()) bad(origin, "\"source\" must be a string");
    t.source = j["source"].get<std::string>();
  }
  if (!j.contains("peak_tflops") || !j["peak_tflops"].is_number()) bad(origin, "\"peak_tflops\" must be a number");
  t.peak_flops = j["peak_tflops"].get<double>() * kTera;
  if (!j.contains("sizes") || !j["sizes"].is_array()) bad(origin, "\"sizes\" must be an array of numbers");
  for (const auto& s : j["sizes"]) {
    if (!s.is_number()) bad(origin, "\"sizes\" must be an array of numbers");
    t.sizes.push_back(s.get<double>());
  }
  const std::size_t n = t.sizes.size();
  if (!j.contains("efficiency") || !j["efficiency"].is_array() || j["efficiency"].size() != n) {
    bad(origin, str_cat("\"efficiency\" must be an array of ", n, " planes (one per M of \"sizes\")"));
  }
  for (const auto& plane : j["efficiency"]) {
    if (!plane.is_array() || plane.size() != n) bad(origin, str_cat("each \"efficiency\" plane must hold ", n, " rows"));
    for (const auto& row : plane) {
      if (!row.is_array() || row.size() != n) bad(origin, str_cat("each \"efficiency\" row must hold ", n, " numbers"));
      for (const auto& e : row) {
        if (!e.is_number()) bad(origin, "\"efficiency\" values must be numbers");
        t.efficiency.push_back(e.get<double>());
      }
    }
  }
  t.validate(origin);
  return t;
}

GemmTable load_gemm_table(const std::string& name_or_path) {
  for (const auto& [n, make] : makers()) {
    if (n == name_or_path) return make();
  }
  if (describe_path_kind(name_or_path) == "missing" && name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".json") == std::string::npos) {
    builtin_gemm_table(name_or_path);  // throws, listing the built-in names
  }
  const std::string text = read_regular_file(name_or_path, "GEMM table file", kMaxJsonFileBytes);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw_io_error(name_or_path, "not valid JSON");
  return gemm_table_from_json(j, name_or_path);
}

const GemmTable& cached_gemm_table(const std::string& name_or_path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<const GemmTable>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(name_or_path);
  if (it == cache.end()) {
    it = cache.emplace(name_or_path, std::make_unique<const GemmTable>(load_gemm_table(name_or_path))).first;
  }
  return *it->second;
}

}  // namespace ptdp::plan
