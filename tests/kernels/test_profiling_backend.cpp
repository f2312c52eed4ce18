// The profiling decorator (kernels/profiling_backend.h): every call reaches the CPU backend
// unchanged (bit-identical results) and is filed under its op, the thread's phase and label.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "kernels/op_scope.h"
#include "kernels/profiling_backend.h"

namespace {

using ptdp::BackendOp;
using ptdp::Phase;
using ptdp::ProfilingBackend;

std::vector<float> values(std::size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1u;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

const ProfilingBackend::Entry* find(const std::vector<ProfilingBackend::Entry>& entries, Phase phase, BackendOp op,
                                    const char* label) {
  for (const auto& e : entries) {
    if (e.phase == phase && e.op == op && e.label == label) return &e;
  }
  return nullptr;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("op scopes nest and restore the label and the phase", "[profiling]") {
  REQUIRE(ptdp::op_context().label == nullptr);
  REQUIRE(ptdp::op_context().phase == Phase::Other);
  {
    const ptdp::PhaseScope backward(Phase::Backward);
    const ptdp::OpScope outer("fc1");
    CHECK(std::strcmp(ptdp::op_context().label, "fc1") == 0);
    {
      const ptdp::OpScope none(nullptr);  // keeps the enclosing label
      CHECK(std::strcmp(ptdp::op_context().label, "fc1") == 0);
      const ptdp::OpScope inner("attn_scores");
      const ptdp::PhaseScope recompute(Phase::Recompute);
      CHECK(std::strcmp(ptdp::op_context().label, "attn_scores") == 0);
      CHECK(ptdp::op_context().phase == Phase::Recompute);
    }
    CHECK(std::strcmp(ptdp::op_context().label, "fc1") == 0);
    CHECK(ptdp::op_context().phase == Phase::Backward);
  }
  CHECK(ptdp::op_context().label == nullptr);
  CHECK(ptdp::op_context().phase == Phase::Other);
}

TEST_CASE("the profiling backend files each call under its op, phase and label", "[profiling]") {
  ptdp::Backend& cpu = ptdp::cpu_backend();
  ProfilingBackend prof(cpu);
  CHECK(prof.device_type() == cpu.device_type());
  CHECK(std::strcmp(prof.name(), cpu.name()) == 0);

  // Two batched GEMMs [8 x 3] * [3 x 4], batch 2, under "qkv" in the forward; one under none.
  ptdp::GemmDesc g;
  g.m = 8;
  g.n = 4;
  g.k = 3;
  g.batch = 2;
  g.stride_a = 24;
  g.stride_b = 12;
  g.stride_c = 32;
  const std::vector<float> a = values(48, 1), b = values(24, 2);
  std::vector<float> c(64);
  {
    const ptdp::PhaseScope forward(Phase::Forward);
    const ptdp::OpScope label("qkv");
    prof.gemm(g, a.data(), b.data(), c.data());
    prof.gemm(g, a.data(), b.data(), c.data());
  }
  prof.gemm(g, a.data(), b.data(), c.data());
  std::vector<float> x = values(64, 3);
  double ss = 0.0;
  {
    const ptdp::PhaseScope optimizer(Phase::Optimizer);
    ss = prof.sum_squares(x.data(), 64);
  }
  CHECK(ss == cpu.sum_squares(x.data(), 64));

  const auto entries = prof.entries();
  REQUIRE(entries.size() == 3);
  const auto* qkv = find(entries, Phase::Forward, BackendOp::Gemm, "qkv");
  REQUIRE(qkv != nullptr);
  CHECK(qkv->calls == 2);
  CHECK(qkv->flops == 2.0 * (2.0 * 8 * 4 * 3 * 2));
  CHECK(qkv->seconds > 0.0);
  const auto* plain = find(entries, Phase::Other, BackendOp::Gemm, "");
  REQUIRE(plain != nullptr);
  CHECK(plain->calls == 1);
  const auto* norm = find(entries, Phase::Optimizer, BackendOp::SumSquares, "");
  REQUIRE(norm != nullptr);
  CHECK(norm->calls == 1);
  CHECK(norm->flops == 0.0);
  CHECK(std::strcmp(ptdp::backend_op_name(BackendOp::SumSquares), "sum_squares") == 0);
  CHECK(std::strcmp(ptdp::backend_op_name(BackendOp::SgdStep), "sgd_step") == 0);
  CHECK(std::strcmp(ptdp::backend_op_name(BackendOp::RmsnormSplitForward), "rmsnorm_split_forward") == 0);
  CHECK(std::strcmp(ptdp::backend_op_name(BackendOp::RmsnormSplitBackward), "rmsnorm_split_backward") == 0);
  CHECK(std::strcmp(ptdp::backend_op_name(BackendOp::RowDot), "row_dot") == 0);
  CHECK(std::strcmp(ptdp::backend_op_name(BackendOp::SwigluForward), "swiglu_forward") == 0);

  prof.reset();
  CHECK(prof.entries().empty());
}

TEST_CASE("results through the profiling backend are bit-identical to the CPU backend's", "[profiling]") {
  ptdp::Backend& cpu = ptdp::cpu_backend();
  ProfilingBackend prof(cpu);
  const int64_t rows = 33, cols = 70, k = 19;

  // GEMM with the fused bias + GeLU epilogue, saving the pre-GeLU values.
  const std::vector<float> x = values(rows * k, 4), w = values(cols * k, 5), bias = values(cols, 6);
  ptdp::GemmDesc g;
  g.trans_b = true;
  g.m = rows;
  g.n = cols;
  g.k = k;
  g.epilogue = ptdp::Epilogue::BiasGelu;
  g.bias = bias.data();
  std::vector<float> y1(rows * cols), aux1(rows * cols), y2(rows * cols), aux2(rows * cols);
  g.aux = aux1.data();
  cpu.gemm(g, x.data(), w.data(), y1.data());
  g.aux = aux2.data();
  prof.gemm(g, x.data(), w.data(), y2.data());
  CHECK(same_bits(y1, y2));
  CHECK(same_bits(aux1, aux2));

  // LayerNorm forward and backward.
  const std::vector<float> gamma = values(cols, 7), beta = values(cols, 8), dy = values(rows * cols, 9);
  std::vector<float> n1(rows * cols), n2(rows * cols), mean1(rows), mean2(rows), rstd1(rows), rstd2(rows);
  cpu.layernorm_forward(y1.data(), gamma.data(), beta.data(), n1.data(), ptdp::DType::F32, mean1.data(),
                        rstd1.data(), rows, cols, 1e-5f);
  prof.layernorm_forward(y1.data(), gamma.data(), beta.data(), n2.data(), ptdp::DType::F32, mean2.data(),
                         rstd2.data(), rows, cols, 1e-5f);
  CHECK(same_bits(n1, n2));
  std::vector<float> dx1(rows * cols), dx2(rows * cols), dg1(cols), dg2(cols), db1(cols), db2(cols);
  cpu.layernorm_backward(y1.data(), gamma.data(), mean1.data(), rstd1.data(), dy.data(), dx1.data(),
                         ptdp::DType::F32, dg1.data(), db1.data(), rows, cols, false);
  prof.layernorm_backward(y1.data(), gamma.data(), mean2.data(), rstd2.data(), dy.data(), dx2.data(),
                          ptdp::DType::F32, dg2.data(), db2.data(), rows, cols, false);
  CHECK(same_bits(dx1, dx2));
  CHECK(same_bits(dg1, dg2));
  CHECK(same_bits(db1, db2));

  // Dropout from the same Philox stream.
  ptdp::DropoutDesc d;
  d.p = 0.25f;
  d.rng = ptdp::PhiloxStream{1234, 77};
  d.block = ptdp::GlobalBlock::flat(rows * cols);
  std::vector<float> o1(rows * cols), o2(rows * cols);
  cpu.dropout_forward(n1.data(), o1.data(), ptdp::DType::F32, d);
  prof.dropout_forward(n1.data(), o2.data(), ptdp::DType::F32, d);
  CHECK(same_bits(o1, o2));

  // AdamW.
  const std::vector<float> grad = values(500, 10);
  std::vector<float> p1 = values(500, 11), m1 = values(500, 12), v1(500, 1e-3f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  ptdp::AdamWParams ap;
  ap.weight_decay = 0.1f;
  ap.step = 3;
  cpu.adamw_step(p1.data(), grad.data(), m1.data(), v1.data(), 500, ap);
  prof.adamw_step(p2.data(), grad.data(), m2.data(), v2.data(), 500, ap);
  CHECK(same_bits(p1, p2));
  CHECK(same_bits(m1, m2));
  CHECK(same_bits(v1, v2));

  const auto entries = prof.entries();
  CHECK(entries.size() == 5);  // gemm, layernorm fwd and bwd, dropout, adamw
  for (const auto& e : entries) CHECK(e.calls == 1);
}
