// Runs the CPU backend's router (moe_router_forward, the math of kernels/moe_router_math.h) on
// given logits for test_router_deepseek.py. Given a JSON file holding a list of cases
//   {"experts", "topk", "score": "softmax"|"sigmoid", "pre_softmax", "num_groups", "group_topk",
//    "group_score_topk", "scaling_factor", "logits": [[E floats] per token], "bias": [E] or null}
// writes one JSON object per case and line: {"indices": [[k] per token], "probs": [[k] per token]},
// or {"error": message} when the descriptor is refused.
//
//   router_probe CASES.json
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/backend.h"

namespace {

using json = nlohmann::json;

json route(const json& c) {
  ptdp::RouterDesc d;
  const auto logits_rows = c.at("logits").get<std::vector<std::vector<float>>>();
  d.tokens = static_cast<int64_t>(logits_rows.size());
  d.experts = c.at("experts").get<int64_t>();
  d.topk = c.at("topk").get<int64_t>();
  d.score = c.at("score").get<std::string>() == "sigmoid" ? ptdp::RouterScore::Sigmoid : ptdp::RouterScore::Softmax;
  d.pre_softmax = c.value("pre_softmax", false);
  d.num_groups = c.value("num_groups", int64_t{0});
  d.group_topk = c.value("group_topk", int64_t{0});
  d.group_score_topk = c.value("group_score_topk", int64_t{0});
  d.scaling_factor = c.value("scaling_factor", 0.0f);
  std::vector<float> logits;  // [tokens, experts]
  for (const auto& r : logits_rows) logits.insert(logits.end(), r.begin(), r.end());
  std::vector<float> bias;  // [experts] or empty
  if (c.contains("bias") && !c.at("bias").is_null()) bias = c.at("bias").get<std::vector<float>>();
  std::vector<int32_t> indices(static_cast<std::size_t>(d.tokens * d.topk));  // [tokens, topk]
  std::vector<float> probs(indices.size());                                   // [tokens, topk]
  try {
    ptdp::cpu_backend().moe_router_forward(d, logits.data(), bias.empty() ? nullptr : bias.data(), indices.data(),
                                           probs.data());
  } catch (const ptdp::Error& e) {
    return {{"error", e.what()}};
  }
  json out = {{"indices", json::array()}, {"probs", json::array()}};
  for (int64_t t = 0; t < d.tokens; ++t) {
    const auto at = static_cast<std::ptrdiff_t>(t * d.topk), end = at + static_cast<std::ptrdiff_t>(d.topk);
    out["indices"].push_back(std::vector<int32_t>(indices.begin() + at, indices.begin() + end));
    out["probs"].push_back(std::vector<float>(probs.begin() + at, probs.begin() + end));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: router_probe CASES.json\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  const json cases = json::parse(in);
  for (const json& c : cases) std::cout << route(c).dump() << "\n";
  return 0;
}
