// Muon on one process (core API): which parameters are matrices and how fused weights split,
// the assignment of matrices to ranks, the update against a reference written here in double
// precision (momentum, Nesterov, Newton-Schulz, scale, decoupled weight decay; AdamW for the
// rest), the state names and their round trip.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/runtime.h"
#include "core/optim/muon.h"
#include "core/optim/optimizer.h"
#include "core/parallel/groups.h"
#include "core/params/params.h"

using namespace ptdp;

namespace {

// A table with the kinds of parameters a GPT has: a fused QKV with grouped-query row parts
// (2 groups of 2 query heads, head dim 2: [q q k v] per group, 8 rows each), SwiGLU's fc1 in
// two blocks, a plain weight, an embedding, a bias and a norm.
struct Fixture {
  std::shared_ptr<Runtime> rt = Runtime::create_self({});
  ProcessGroups groups{rt, ParallelConfig{0, 1, 1, 1}};
  ParamTable table{0, 1};
  int qkv, fc1, proj, emb, bias, norm;
  Fixture() {
    qkv = table.add("decoder.layers.0.self_attention.linear_qkv.weight", {16, 4}, 0, ParamInit::Normal, 0.5f);
    table.set_row_parts(qkv, {4, 2, 2});
    fc1 = table.add("decoder.layers.0.mlp.linear_fc1.weight", {12, 4}, 0, ParamInit::Normal, 0.5f, true, 2);
    proj = table.add("decoder.layers.0.self_attention.linear_proj.weight", {4, 5}, 1, ParamInit::Normal, 0.5f);
    emb = table.add("embedding.word_embeddings.weight", {7, 4}, 0, ParamInit::Normal, 0.5f);
    bias = table.add("decoder.layers.0.mlp.linear_fc1.bias", {12}, 0, ParamInit::Normal, 0.5f, false, 2);
    norm = table.add("decoder.final_layernorm.weight", {4}, -1, ParamInit::Ones, 0.0f, false);
    table.allocate(Device{});
    table.initialize(11);
  }
};

using Mat = std::vector<double>;  // row-major

// The Newton-Schulz iteration of kernels/backend.h, in double.
Mat newton_schulz(const Mat& g, int64_t rows, int64_t cols, const std::vector<std::array<float, 3>>& coef, int steps) {
  const bool tr = rows > cols;
  const int64_t k = std::min(rows, cols), n = std::max(rows, cols);
  Mat x(static_cast<std::size_t>(k * n));
  double ss = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = g[static_cast<std::size_t>(i * cols + j)];
      x[static_cast<std::size_t>(tr ? j * n + i : i * n + j)] = v;
      ss += v * v;
    }
  const double nrm = std::max(std::sqrt(ss), 1e-7);
  for (double& v : x) v /= nrm;
  for (int s = 0; s < steps; ++s) {
    const auto& c = coef[static_cast<std::size_t>(s) % coef.size()];
    Mat A(static_cast<std::size_t>(k * k), 0.0), B(A.size(), 0.0), y(x.size(), 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t l = 0; l < n; ++l) A[static_cast<std::size_t>(i * k + j)] += x[i * n + l] * x[j * n + l];
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double aa = 0;
        for (int64_t l = 0; l < k; ++l) aa += A[i * k + l] * A[l * k + j];
        B[i * k + j] = c[1] * A[i * k + j] + c[2] * aa;
      }
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double bx = 0;
        for (int64_t l = 0; l < k; ++l) bx += B[i * k + l] * x[l * n + j];
        y[i * n + j] = c[0] * x[i * n + j] + bx;
      }
    x.swap(y);
  }
  Mat out(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<std::size_t>(i * cols + j)] = x[static_cast<std::size_t>(tr ? j * n + i : i * n + j)];
  return out;
}

double grad_value(int step, int64_t e) { return std::sin(0.37 * static_cast<double>(e) + 1.3 * step) * (0.5 + 0.1 * step); }

}  // namespace

TEST_CASE("Muon's matrices: Megatron's rule, q/k/v and gate/up apart", "[optim][muon]") {
  Fixture f;
  CHECK(muon_is_matrix(f.table.info(f.qkv)));
  CHECK(muon_is_matrix(f.table.info(f.proj)));
  CHECK_FALSE(muon_is_matrix(f.table.info(f.emb)));
  CHECK_FALSE(muon_is_matrix(f.table.info(f.bias)));
  CHECK_FALSE(muon_is_matrix(f.table.info(f.norm)));
  MuonConfig cfg;
  std::vector<MuonMatrix> ms = muon_matrices({&f.table}, cfg);
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;
  for (const MuonMatrix& m : ms) shapes[m.name] = {m.rows, m.cols};
  const std::map<std::string, std::pair<int64_t, int64_t>> want = {
      {"decoder.layers.0.self_attention.linear_qkv.weight[q]", {8, 4}},
      {"decoder.layers.0.self_attention.linear_qkv.weight[k]", {4, 4}},
      {"decoder.layers.0.self_attention.linear_qkv.weight[v]", {4, 4}},
      {"decoder.layers.0.mlp.linear_fc1.weight[gate]", {6, 4}},
      {"decoder.layers.0.mlp.linear_fc1.weight[up]", {6, 4}},
      {"decoder.layers.0.self_attention.linear_proj.weight", {4, 5}}};
  CHECK(shapes == want);
  cfg.split_qkv = false;
  ms = muon_matrices({&f.table}, cfg);
  REQUIRE(ms.size() == 3);
  CHECK(ms[0].rows == 16);
  CHECK(ms[1].rows == 12);
  CHECK_THROWS_WITH(f.table.set_row_parts(f.qkv, {5, 2}), Catch::Contains("do not divide its 16 rows"));
}

TEST_CASE("Muon's assignment: largest first to the least loaded slot, the same on every rank", "[optim][muon]") {
  std::vector<MuonMatrix> ms(5);
  const double flops[] = {10, 40, 30, 20, 25};
  for (int i = 0; i < 5; ++i) ms[static_cast<std::size_t>(i)].flops = flops[i];
  const std::vector<double> load = muon_assign(ms, false, 2, 2, true);
  // 40 -> slot 0, 30 -> 1, 25 -> 2, 20 -> 3, 10 -> 3 (20 is the least).
  CHECK(load == std::vector<double>{40, 30, 25, 30});
  CHECK((ms[1].owner_data == 0 && ms[1].owner_tensor == 0));
  CHECK((ms[2].owner_data == 0 && ms[2].owner_tensor == 1));
  CHECK((ms[4].owner_data == 1 && ms[4].owner_tensor == 0));
  CHECK((ms[3].owner_data == 1 && ms[3].owner_tensor == 1));
  CHECK((ms[0].owner_data == 1 && ms[0].owner_tensor == 1));
  muon_assign(ms, false, 1, 4, false);
  for (const MuonMatrix& m : ms) CHECK(m.owner_tensor == -1);
  CHECK_THROWS_WITH(muon_assign(ms, false, 0, 1, true), Catch::Contains("slots must be >= 1"));
}

TEST_CASE("Muon's scale factors, coefficient sets and FLOPs", "[optim][muon]") {
  CHECK(muon_scale_factor(8, 2, MuonScaleMode::Spectral, 1.0f) == Approx(std::sqrt(8.0)));
  CHECK(muon_scale_factor(2, 8, MuonScaleMode::Spectral, 0.2f) == Approx(0.2 * std::sqrt(8.0)));
  CHECK(muon_scale_factor(8, 2, MuonScaleMode::ShapeScaling, 1.0f) == Approx(2.0));
  CHECK(muon_scale_factor(2, 8, MuonScaleMode::ShapeScaling, 1.0f) == Approx(1.0));
  CHECK(muon_scale_factor(2, 8, MuonScaleMode::UnitRmsNorm, 1.0f) == Approx(0.5));
  CHECK(muon_coefficients(NsCoefficients::Simple).size() == 1);
  CHECK(muon_coefficients(NsCoefficients::Quintic).size() == 5);
  CHECK(muon_coefficients(NsCoefficients::PolarExpress).size() == 8);
  CHECK(muon_coefficients(NsCoefficients::Aol).size() == 4);
  CHECK(muon_coefficients(NsCoefficients::Simple)[0][0] == 3.4445f);
  // k = 2, n = 8, 5 steps: 5 (4 k^2 n + 2 k^3) = 5 (128 + 16).
  CHECK(newton_schulz_flops(8, 2, 5) == Approx(720.0));
}

TEST_CASE("Muon's update equals the reference in double precision", "[optim][muon]") {
  for (const bool nesterov : {false, true}) {
    DYNAMIC_SECTION("nesterov " << nesterov) {
      Fixture f;
      OptimizerConfig oc;
      oc.kind = OptimizerKind::Muon;
      oc.lr.lr = 0.05;
      oc.weight_decay = 0.1f;
      oc.clip_grad = 0.0f;
      oc.muon.nesterov = nesterov;
      oc.muon.momentum = 0.9f;
      oc.muon.scale_mode = MuonScaleMode::Spectral;
      oc.muon.extra_scale_factor = 0.2f;
      Optimizer opt({&f.table}, {{}}, oc, f.groups);
      const std::vector<std::array<float, 3>> coef = muon_coefficients(oc.muon.coefficients);
      const std::vector<MuonMatrix> ms = muon_matrices({&f.table}, oc.muon);
      // Reference state: parameters, Muon momentum per matrix element, AdamW moments.
      const std::vector<float> p0 = f.table.masters_to_host();
      std::vector<double> p(p0.begin(), p0.end()), buf(p.size(), 0.0), m(p.size(), 0.0), v(p.size(), 0.0);
      const int64_t n = f.table.numel();
      for (int step = 1; step <= 3; ++step) {
        float* g = f.table.flat_grads().data<float>();
        std::vector<double> grad(static_cast<std::size_t>(n));
        for (int64_t e = 0; e < n; ++e) g[e] = static_cast<float>(grad[static_cast<std::size_t>(e)] = grad_value(step, e));
        opt.step(step - 1);
        const double lr = oc.lr.lr, mu = oc.muon.momentum;
        std::vector<double> update(static_cast<std::size_t>(n), 0.0);
        for (int i = 0; i < f.table.size(); ++i) {
          const ParamInfo& info = f.table.info(i);
          const std::size_t off = static_cast<std::size_t>(info.offset), cnt = static_cast<std::size_t>(info.local_shape.numel());
          if (muon_is_matrix(info)) {
            for (std::size_t e = off; e < off + cnt; ++e) {
              buf[e] = mu * buf[e] + (1 - mu) * grad[e];
              update[e] = nesterov ? (1 - mu) * grad[e] + mu * buf[e] : buf[e];
            }
          } else {  // AdamW, decay on weights only
            const double b1 = oc.beta1, b2 = oc.beta2;
            const double wd = info.weight_decay ? oc.weight_decay : 0.0;
            for (std::size_t e = off; e < off + cnt; ++e) {
              m[e] = b1 * m[e] + (1 - b1) * grad[e];
              v[e] = b2 * v[e] + (1 - b2) * grad[e] * grad[e];
              const double mh = m[e] / (1 - std::pow(b1, step)), vh = v[e] / (1 - std::pow(b2, step));
              p[e] = p[e] * (1 - lr * wd) - lr * mh / (std::sqrt(vh) + oc.eps);
            }
          }
        }
        for (const MuonMatrix& mx : ms) {
          const ParamInfo& info = f.table.info(mx.param);
          const int64_t C = mx.cols;
          Mat g2(static_cast<std::size_t>(mx.rows * C));
          const auto row_of = [&](int64_t r) { return (r / mx.part_rows) * mx.period + mx.part_lo + r % mx.part_rows; };
          for (int64_t r = 0; r < mx.rows; ++r)
            for (int64_t c = 0; c < C; ++c) g2[static_cast<std::size_t>(r * C + c)] = update[info.offset + row_of(r) * C + c];
          const Mat o = newton_schulz(g2, mx.rows, C, coef, oc.muon.ns_steps);
          const double scale = 0.2 * std::sqrt(static_cast<double>(std::max(mx.rows, C)));
          for (int64_t r = 0; r < mx.rows; ++r)
            for (int64_t c = 0; c < C; ++c) {
              const std::size_t e = static_cast<std::size_t>(info.offset + row_of(r) * C + c);
              p[e] = p[e] * (1 - lr * oc.weight_decay) - lr * scale * o[static_cast<std::size_t>(r * C + c)];
            }
        }
        const std::vector<float> got = f.table.masters_to_host();
        // fp32 against double: AdamW's elements to fp32 round-off; Muon's within the iteration's
        // amplification of round-off along small singular values (the product of the linear
        // coefficients, 493 for the quintic, times ~6e-8).
        double worst_muon = 0, worst_adam = 0;
        for (int i = 0; i < f.table.size(); ++i) {
          const ParamInfo& info = f.table.info(i);
          for (int64_t e = info.offset; e < info.offset + info.local_shape.numel(); ++e) {
            const double d = std::fabs(got[static_cast<std::size_t>(e)] - p[static_cast<std::size_t>(e)]) /
                             (1e-3 + std::fabs(p[static_cast<std::size_t>(e)]));
            (muon_is_matrix(info) ? worst_muon : worst_adam) = std::max(muon_is_matrix(info) ? worst_muon : worst_adam, d);
          }
        }
        INFO("step " << step);
        CHECK(worst_adam < 1e-5);
        CHECK(worst_muon < 1e-4);
        // Training moved every matrix by about lr * 0.2 * sqrt(max) per element.
        CHECK(std::fabs(got[static_cast<std::size_t>(f.table.info(f.proj).offset)] -
                        p0[static_cast<std::size_t>(f.table.info(f.proj).offset)]) > 1e-3);
      }
    }
  }
}

TEST_CASE("Muon's state: momentum for matrices, AdamW moments for the rest, round trip", "[optim][muon]") {
  Fixture f;
  OptimizerConfig oc;
  oc.kind = OptimizerKind::Muon;
  oc.clip_grad = 0.0f;
  Optimizer opt({&f.table}, {{}}, oc, f.groups);
  REQUIRE(opt.state_names() == std::vector<std::string>{"momentum_buffer", "exp_avg", "exp_avg_sq"});
  CHECK(opt.has_state(0, f.qkv, 0));
  CHECK_FALSE(opt.has_state(0, f.qkv, 1));
  CHECK_FALSE(opt.has_state(0, f.emb, 0));
  CHECK(opt.has_state(0, f.emb, 2));
  CHECK(state_applies({"exp_avg", "exp_avg_sq"}, 0, f.table.info(f.qkv)));  // AdamW keeps both everywhere
  const int64_t n = f.table.numel();
  for (int step = 0; step < 2; ++step) {
    float* g = f.table.flat_grads().data<float>();
    for (int64_t e = 0; e < n; ++e) g[e] = static_cast<float>(grad_value(step, e));
    opt.step(step);
  }
  std::vector<std::vector<float>> st;
  for (int k = 0; k < 3; ++k) st.push_back(opt.get_state(0, k));
  const auto at = [&](int param) { return static_cast<std::size_t>(f.table.info(param).offset); };
  CHECK(st[0][at(f.qkv)] != 0.0f);   // momentum of a matrix
  CHECK(st[1][at(f.qkv)] == 0.0f);   // no AdamW moment there
  CHECK(st[0][at(f.emb)] == 0.0f);
  CHECK(st[1][at(f.emb)] != 0.0f);
  CHECK(st[2][at(f.bias)] > 0.0f);
  // A second optimizer given the state continues exactly as the first.
  Fixture f2;
  Optimizer opt2({&f2.table}, {{}}, oc, f2.groups);
  f2.table.masters_from_host(f.table.masters_to_host().data());
  for (int k = 0; k < 3; ++k) opt2.set_state(0, k, st[static_cast<std::size_t>(k)].data());
  opt2.restore(opt.counters());
  for (Fixture* x : {&f, &f2}) {
    float* g = x->table.flat_grads().data<float>();
    for (int64_t e = 0; e < n; ++e) g[e] = static_cast<float>(grad_value(7, e));
  }
  opt.step(2);
  opt2.step(2);
  CHECK(f.table.masters_to_host() == f2.table.masters_to_host());
  CHECK(opt.state_bytes() < 3 * static_cast<std::size_t>(f.table.capacity()) * sizeof(float));
}
