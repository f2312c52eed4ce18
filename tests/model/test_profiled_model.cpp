// A GPT trained with the profiling decorator installed (set_cpu_backend_decorator) computes
// bit for bit what it computes without it, and the decorator sees every GEMM under its layer's
// label and every call under forward, backward or recomputation.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/model/gpt.h"
#include "core/model/gpt_config.h"
#include "core/tensor/tensor.h"
#include "kernels/op_scope.h"
#include "kernels/profiling_backend.h"

namespace {

using ptdp::BackendOp;
using ptdp::Phase;
using ptdp::ProfilingBackend;

struct Run {
  std::vector<float> losses;
  std::vector<float> grads;
  std::vector<float> params;
};

// Builds the model and runs two training iterations of forward_backward (new ids, new dropout
// masks, gradients accumulated), with `decorator` as the CPU backend when it is not null.
Run train(const ptdp::GptConfig& cfg, ptdp::Backend* decorator) {
  ptdp::set_cpu_backend_decorator(decorator);
  Run run;
  try {
    ptdp::GptModel model(cfg, ptdp::TensorParallel{});
    const int64_t b = 2, n = b * cfg.seq_length;
    for (int it = 0; it < 2; ++it) {
      std::vector<int32_t> tokens(static_cast<std::size_t>(n)), labels(static_cast<std::size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        tokens[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 37 + it * 11 + 5) % cfg.vocab_size);
        labels[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 53 + it * 7 + 1) % cfg.vocab_size);
      }
      ptdp::Step step;
      step.iteration = it;
      step.microbatch = 0;
      step.training = true;
      run.losses.push_back(model.forward_backward(tokens.data(), labels.data(), b, step));
    }
    const auto host = [](const ptdp::Tensor& t) {
      std::vector<float> v(static_cast<std::size_t>(t.numel()));
      t.copy_to_host(v.data(), v.size() * sizeof(float));
      return v;
    };
    run.grads = host(model.params().flat_grads());
    run.params = host(model.params().flat_params());
  } catch (...) {
    ptdp::set_cpu_backend_decorator(nullptr);
    throw;
  }
  ptdp::set_cpu_backend_decorator(nullptr);
  return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int64_t calls(const std::vector<ProfilingBackend::Entry>& entries, Phase phase, BackendOp op, const char* label) {
  int64_t n = 0;
  for (const auto& e : entries) {
    if (e.phase == phase && e.op == op && (label == nullptr || e.label == label)) n += e.calls;
  }
  return n;
}

void check_identical(const ptdp::GptConfig& cfg, std::vector<ProfilingBackend::Entry>& entries) {
  const Run plain = train(cfg, nullptr);
  ProfilingBackend profiler(ptdp::cpu_backend());
  const Run profiled = train(cfg, &profiler);
  REQUIRE(plain.losses.size() == 2);
  CHECK(std::memcmp(plain.losses.data(), profiled.losses.data(), 2 * sizeof(float)) == 0);
  CHECK(same_bits(plain.grads, profiled.grads));
  CHECK(same_bits(plain.params, profiled.params));
  entries = profiler.entries();
}

}  // namespace

TEST_CASE("set_cpu_backend_decorator swaps the CPU backend and restores it", "[profiling]") {
  ptdp::Backend& cpu = ptdp::cpu_backend();
  CHECK(&ptdp::backend_for(ptdp::Device{}) == &cpu);
  ProfilingBackend profiler(cpu);
  CHECK(ptdp::set_cpu_backend_decorator(&profiler) == nullptr);
  CHECK(&ptdp::backend_for(ptdp::Device{}) == &profiler);
  ptdp::Tensor t = ptdp::Tensor::zeros({16}, ptdp::DType::F32, ptdp::Device{});  // a fill through it
  CHECK(ptdp::set_cpu_backend_decorator(nullptr) == &profiler);
  CHECK(&ptdp::backend_for(ptdp::Device{}) == &cpu);
  CHECK(calls(profiler.entries(), Phase::Other, BackendOp::Fill, "") == 1);
}

TEST_CASE("a profiled GPT (LayerNorm, GeLU, dropout, selective recomputation) is bit-identical", "[profiling]") {
  ptdp::GptConfig cfg;  // 2 layers, h 64, 4 heads, s 32, V 256, dropout 0.1
  cfg.recompute = ptdp::Recompute::Selective;
  cfg.attention = ptdp::AttentionImpl::Unfused;  // its GEMMs' labels (the CPU's auto is fused)
  std::vector<ProfilingBackend::Entry> entries;
  check_identical(cfg, entries);

  // Every GEMM of the forward and the backward carries its layer's label, none is unlabelled.
  for (const char* label : {"qkv", "proj", "fc1", "fc2", "attn_scores", "attn_context"}) {
    INFO(label);
    CHECK(calls(entries, Phase::Forward, BackendOp::Gemm, label) == 2 * cfg.num_layers);  // 2 iterations
    CHECK(calls(entries, Phase::Backward, BackendOp::Gemm, label) > 0);
  }
  CHECK(calls(entries, Phase::Forward, BackendOp::Gemm, "logits") == 2);
  CHECK(calls(entries, Phase::Backward, BackendOp::Gemm, "logits") == 4);  // dgrad and wgrad
  CHECK(calls(entries, Phase::Forward, BackendOp::Gemm, "") == 0);
  CHECK(calls(entries, Phase::Backward, BackendOp::Gemm, "") == 0);
  // Selective recomputation re-runs Q K^T (and its softmax and dropout) in the backward.
  CHECK(calls(entries, Phase::Recompute, BackendOp::Gemm, "attn_scores") == 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Recompute, BackendOp::SoftmaxForward, nullptr) == 2 * cfg.num_layers);
  // The other ops, each in its phase.
  CHECK(calls(entries, Phase::Forward, BackendOp::LayernormForward, nullptr) == 2 * (2 * cfg.num_layers + 1));
  CHECK(calls(entries, Phase::Backward, BackendOp::LayernormBackward, nullptr) == 2 * (2 * cfg.num_layers + 1));
  CHECK(calls(entries, Phase::Forward, BackendOp::BiasDropoutAdd, nullptr) == 2 * 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Forward, BackendOp::CeForwardLocal, nullptr) == 2);
  CHECK(calls(entries, Phase::Backward, BackendOp::CeBackward, nullptr) == 2);
  CHECK(calls(entries, Phase::Forward, BackendOp::EmbeddingForward, nullptr) == 4);  // words and positions
  CHECK(calls(entries, Phase::Backward, BackendOp::EmbeddingBackward, nullptr) == 4);
  CHECK(calls(entries, Phase::Backward, BackendOp::BiasGrad, "fc1") == 2 * cfg.num_layers);
  // The model's phases cover all its GEMMs: none is left outside forward, backward, recompute.
  CHECK(calls(entries, Phase::Other, BackendOp::Gemm, nullptr) == 0);
}

TEST_CASE("a profiled Llama-shaped GPT (RMSNorm, SwiGLU, RoPE, GQA, full recomputation) is bit-identical",
          "[profiling]") {
  ptdp::GptConfig cfg;
  cfg.normalization = ptdp::Normalization::RMSNorm;
  cfg.swiglu = true;
  cfg.position_embedding = ptdp::PositionEmbedding::Rope;
  cfg.num_query_groups = 2;
  cfg.add_bias_linear = false;
  cfg.recompute = ptdp::Recompute::Full;
  std::vector<ProfilingBackend::Entry> entries;
  check_identical(cfg, entries);

  CHECK(calls(entries, Phase::Forward, BackendOp::RopeForward, nullptr) == 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Backward, BackendOp::RopeBackward, nullptr) == 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Forward, BackendOp::SwigluForward, nullptr) == 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Backward, BackendOp::SwigluBackward, nullptr) == 2 * cfg.num_layers);
  // Full recomputation re-runs each layer's forward inside the backward.
  CHECK(calls(entries, Phase::Recompute, BackendOp::Gemm, "qkv") == 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Recompute, BackendOp::RmsnormForward, nullptr) == 2 * 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Recompute, BackendOp::SwigluForward, nullptr) == 2 * cfg.num_layers);
  CHECK(calls(entries, Phase::Forward, BackendOp::Gemm, "") == 0);
  CHECK(calls(entries, Phase::Backward, BackendOp::Gemm, "") == 0);
  CHECK(calls(entries, Phase::Recompute, BackendOp::Gemm, "") == 0);
}
