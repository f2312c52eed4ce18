#include "core/model/generate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "base/error.h"
#include "base/philox.h"

namespace ptdp {

void GenerateConfig::validate() const {
  PTDP_CHECK_ARG(max_new_tokens >= 0, "max_new_tokens must be >= 0, got " + std::to_string(max_new_tokens));
  PTDP_CHECK_ARG(top_k >= 0, "top_k must be >= 0, got " + std::to_string(top_k));
  PTDP_CHECK_ARG(temperature > 0 && std::isfinite(temperature),
                 "temperature must be > 0, got " + std::to_string(temperature));
}

std::vector<int32_t> generate(GptModel& model, const std::vector<int32_t>& prompt, const GenerateConfig& config) {
  config.validate();
  PTDP_CHECK_ARG(!prompt.empty(), "the prompt is empty");
  const int s = model.config().seq_length;
  const int vocab = model.config().vocab_size;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    PTDP_CHECK_ARG(prompt[i] >= 0 && prompt[i] < vocab, "prompt[" + std::to_string(i) + "] = " +
                                                            std::to_string(prompt[i]) +
                                                            " is outside the vocabulary [0, " +
                                                            std::to_string(vocab) + ")");
  }
  std::vector<int32_t> text = prompt, out;
  std::vector<int32_t> window(static_cast<std::size_t>(s));
  std::vector<std::pair<float, int32_t>> ranked(static_cast<std::size_t>(vocab));
  const PhiloxStream stream{config.seed, philox_name_hash("ptdp_model_generate")};
  KvCache cache;
  cache.capacity = s;
  std::vector<float> logits;
  for (int n = 0; n < config.max_new_tokens; ++n) {
    // The last s tokens (positions 0 .. len - 1).
    const std::size_t len = std::min(text.size(), static_cast<std::size_t>(s));
    const float* row = nullptr;
    if (config.use_kv_cache) {
      if (n > 0 && text.size() <= static_cast<std::size_t>(s)) {
        logits = model.decode(&text.back(), 1, cache);  // the window grew by the last token
      } else {  // the first window, or one that slid: encode it whole
        cache.reset();
        logits = model.decode(text.data() + (text.size() - len), static_cast<int64_t>(len), cache);
      }
      row = logits.data() + (logits.size() - static_cast<std::size_t>(vocab));
    } else {
      // Padded after the end (positions past the context never reach it).
      std::copy(text.end() - static_cast<std::ptrdiff_t>(len), text.end(), window.begin());
      std::fill(window.begin() + static_cast<std::ptrdiff_t>(len), window.end(), 0);
      logits = model.logits(window.data(), 1);
      row = logits.data() + (len - 1) * static_cast<std::size_t>(vocab);
    }
    for (int v = 0; v < vocab; ++v) ranked[static_cast<std::size_t>(v)] = {row[v] / config.temperature, v};
    // Most likely first; ties by the smaller id, so the order is the same everywhere.
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    const std::size_t k = config.top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(config.top_k), ranked.size())
                                           : ranked.size();
    double total = 0.0;
    for (std::size_t i = 0; i < k; ++i) total += std::exp(static_cast<double>(ranked[i].first - ranked[0].first));
    const double u = static_cast<double>(philox_uniform(stream, static_cast<uint64_t>(n))) * total;
    double acc = 0.0;
    int32_t next = ranked[k - 1].second;
    for (std::size_t i = 0; i < k; ++i) {
      acc += std::exp(static_cast<double>(ranked[i].first - ranked[0].first));
      if (u < acc) {
        next = ranked[i].second;
        break;
      }
    }
    text.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace ptdp
