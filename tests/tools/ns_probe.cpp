// Runs the CPU backend's newton_schulz on given matrices for test_newton_schulz_torch.py. Given a
// JSON file holding a list of cases
//   {"rows", "cols", "steps", "coefficients": [[a, b, c], ...], "eps", "precision", "x": [rows*cols floats]}
// writes one JSON object per case and line: {"x": [rows*cols floats]} (the result, row-major), or
// {"error": message} when the descriptor is refused.
//
//   ns_probe CASES.json
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/backend.h"

namespace {

using json = nlohmann::json;

json orthogonalise(const json& c) {
  ptdp::NewtonSchulzDesc d;
  d.rows = c.at("rows").get<int64_t>();
  d.cols = c.at("cols").get<int64_t>();
  d.steps = c.at("steps").get<int>();
  const auto sets = c.at("coefficients").get<std::vector<std::vector<float>>>();
  if (sets.size() > 8) return json{{"error", "more than 8 coefficient sets"}};
  d.num_sets = static_cast<int>(sets.size());
  for (std::size_t i = 0; i < sets.size(); ++i) {
    if (sets[i].size() != 3) return json{{"error", "a coefficient set is not (a, b, c)"}};
    for (std::size_t j = 0; j < 3; ++j) d.coefficients[i][j] = sets[i][j];
  }
  d.eps = c.value("eps", 1e-7f);
  d.precision = c.value("precision", 0);
  std::vector<float> x = c.at("x").get<std::vector<float>>();
  if (static_cast<int64_t>(x.size()) != d.rows * d.cols) return json{{"error", "x is not rows * cols floats"}};
  try {
    ptdp::cpu_backend().newton_schulz(x.data(), d);
  } catch (const ptdp::Error& e) {
    return json{{"error", e.what()}};
  }
  return json{{"x", x}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ns_probe CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "ns_probe: cannot read " << argv[1] << "\n";
    return 2;
  }
  const json cases = json::parse(in);
  for (const json& c : cases) std::cout << orthogonalise(c).dump() << "\n";
  return 0;
}
