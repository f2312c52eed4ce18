#include "core/layers/moe/experts.h"

#include <cmath>
#include <numeric>

#include "base/error.h"
#include "kernels/op_scope.h"

namespace ptdp {

GroupedExperts::GroupedExperts(ParamTable& params, const std::string& prefix, const LayerConfig& cfg,
                               TensorParallel tp)
    : params_(params), swiglu_(cfg.swiglu), h_(cfg.hidden_size), slots_(prefix) {
  const ExpertParallel& ep = tp.ep;
  const int e = cfg.moe.num_experts;
  PTDP_CHECK_ARG(e % ep.ep_size == 0, "--num-experts " + std::to_string(e) +
                                          " is not divisible by --expert-model-parallel-size " + std::to_string(ep.ep_size));
  local_ = e / ep.ep_size;
  const int64_t ffn = cfg.moe_ffn(), rows = (swiglu_ ? 2 : 1) * ffn;
  PTDP_CHECK_ARG(ffn % ep.etp_size == 0, "--moe-ffn-hidden-size " + std::to_string(ffn) +
                                             " is not divisible by --expert-tensor-parallel-size " +
                                             std::to_string(ep.etp_size));
  width_ = ffn / ep.etp_size;
  bias_on_rank_ = ep.etp_rank == 0;
  const float out_std = cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  const int first = ep.ep_rank * local_;
  // Declared like the dense MLP's (add() slices over the tensor group), then re-sliced over the
  // ExpertTensor group.
  const auto add = [&](const std::string& name, const Shape& shape, int dim, ParamInit init, float std, bool decay,
                       int blocks) {
    const int i = params.add(name, shape, dim, init, std, decay, blocks);
    params.set_expert(i, ep.etp_rank, ep.etp_size);
    return i;
  };
  const int blocks = swiglu_ ? 2 : 1;
  for (int j = 0; j < local_; ++j) {
    fc1_w_.push_back(add(prefix + ".linear_fc1.weight" + std::to_string(first + j), {rows, h_}, 0, ParamInit::Normal,
                         cfg.init_method_std, true, blocks));
  }
  for (int j = 0; j < local_; ++j) {
    fc2_w_.push_back(add(prefix + ".linear_fc2.weight" + std::to_string(first + j), {h_, ffn}, 1, ParamInit::Normal,
                         out_std, true, 1));
  }
  for (int j = 0; j < local_; ++j) {
    fc1_b_.push_back(cfg.add_bias_linear ? add(prefix + ".linear_fc1.bias" + std::to_string(first + j), {rows}, 0,
                                               ParamInit::Zeros, 0.0f, false, blocks)
                                         : -1);
    fc2_b_.push_back(cfg.add_bias_linear ? add(prefix + ".linear_fc2.bias" + std::to_string(first + j), {h_}, -1,
                                               ParamInit::Zeros, 0.0f, false, 1)
                                         : -1);
  }
}

namespace {

// The local experts' views of one projection as a grouped GEMM's fixed operand: the first
// view's address and the distance between consecutive ones (in elements). allocate() places
// same-shaped parameters declared one after the other at equal distances (each view rounded up
// to 16 elements), which the check confirms for the views `view` gives (weights, gradients).
struct Stacked {
  void* base = nullptr;
  int64_t stride = 0;
};

template <typename View>
Stacked stacked(const std::vector<int>& ids, const View& view) {
  Stacked s;
  const Tensor first = view(ids.front());
  s.base = first.raw();
  const std::size_t bytes = dtype_size(first.dtype());
  for (std::size_t j = 1; j < ids.size(); ++j) {
    const auto gap = static_cast<int64_t>(static_cast<const char*>(view(ids[j]).raw()) -
                                          static_cast<const char*>(view(ids[j - 1]).raw()));
    if (j == 1) s.stride = gap / static_cast<int64_t>(bytes);
    if (gap <= 0 || gap != s.stride * static_cast<int64_t>(bytes))
      throw_error(ErrorCode::Internal,
                  "experts: the local experts' parameters are not evenly spaced in the flat buffer");
  }
  return s;
}

// C [sum m_g, n] (beta: += ) = A [sum m_g, k] op(B_g) over the local experts' row counts.
void grouped_rows(const std::vector<int64_t>& sizes, bool trans_b, int64_t n, int64_t k, const Tensor& a,
                  const Stacked& b, const Tensor& c, float beta = 0.0f) {
  GroupedGemmDesc d;
  d.groups = static_cast<int64_t>(sizes.size());
  d.sizes = sizes.data();
  d.varying = GroupedDim::M;
  d.trans_b = trans_b;
  d.m = a.numel() / k;
  d.n = n;
  d.k = k;
  d.beta = beta;
  d.stride = b.stride;
  d.a_type = d.b_type = d.c_type = a.dtype();
  a.backend().grouped_gemm(d, a.raw(), b.base, c.raw());
}

// dW_g [m, n] += A_g^T B_g, the reduction over each local expert's rows: A [sum k_g, m],
// B [sum k_g, n] in the model's type, dW_g the fp32 main gradients.
void grouped_wgrad(const std::vector<int64_t>& sizes, int64_t m, int64_t n, const Tensor& a, const Tensor& b,
                   const Stacked& c) {
  GroupedGemmDesc d;
  d.groups = static_cast<int64_t>(sizes.size());
  d.sizes = sizes.data();
  d.varying = GroupedDim::K;
  d.m = m;
  d.n = n;
  d.k = a.numel() / m;
  d.beta = 1.0f;
  d.stride = c.stride;
  d.a_type = d.b_type = a.dtype();
  d.c_type = DType::F32;
  a.backend().grouped_gemm(d, a.raw(), b.raw(), c.base);
}

// A [rows, 1] column of ones in `like`'s type: multiplying it by an expert's bias row adds the
// bias to each of the expert's rows (and its transpose sums an expert's rows for the bias
// gradient), one grouped GEMM for all local experts.
Tensor ones_column(const Tensor& like, int64_t rows) {
  Tensor ones = empty_like(like, {rows, 1});  // [R, 1]
  like.backend().fill(ones.raw(), ones.dtype(), 1.0, rows);
  return ones;
}

}  // namespace

Tensor GroupedExperts::forward(const Tensor& x, const std::vector<int64_t>& counts, const Step& step) {
  const OpScope scope("experts");
  PTDP_CHECK_ARG(static_cast<int>(counts.size()) == local_, "experts: " + std::to_string(counts.size()) +
                                                                " row counts for " + std::to_string(local_) + " experts");
  const int64_t r = rows_of(x, h_, "experts input");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  PTDP_CHECK_ARG(total == r, "experts: the row counts sum to " + std::to_string(total) + ", the input has " +
                                 std::to_string(r));
  const int64_t pre_cols = (swiglu_ ? 2 : 1) * width_;
  Slot& s = slots_.create(step.microbatch);
  s.x = x;
  s.counts = counts;
  s.pre = empty_like(x, {r, pre_cols});  // [R, ffn_e/etp] (SwiGLU: [R, 2*ffn_e/etp])
  s.act = empty_like(x, {r, width_});    // [R, ffn_e/etp]
  Tensor y = empty_like(x, {r, h_});     // [R, h]
  if (r == 0) return y;
  Backend& be = x.backend();
  const auto weight = [&](int i) { return params_.weight(i); };
  // One grouped GEMM per projection over every local expert's rows (the counts are already on
  // the host: the dispatcher brought them there once for this layer and microbatch).
  grouped_rows(counts, true, pre_cols, h_, x, stacked(fc1_w_, weight), s.pre);
  if (fc1_b_.front() >= 0) {
    s.ones = ones_column(x, r);
    grouped_rows(counts, false, pre_cols, 1, s.ones, stacked(fc1_b_, weight), s.pre, 1.0f);
  }
  if (swiglu_) be.swiglu_forward(s.pre.raw(), s.act.raw(), s.pre.dtype(), r, width_);
  else be.gelu_forward(s.pre.raw(), s.act.raw(), s.act.dtype(), s.act.numel());
  grouped_rows(counts, true, h_, width_, s.act, stacked(fc2_w_, weight), y);
  if (fc2_b_.front() >= 0 && bias_on_rank_)
    grouped_rows(counts, false, h_, 1, s.ones, stacked(fc2_b_, weight), y, 1.0f);
  return y;
}

Tensor GroupedExperts::backward_input(const Tensor& dy, const Step& step) {
  const OpScope scope("experts");
  Slot& s = slots_.get(step.microbatch);
  const int64_t r = rows_of(s.x, h_, "experts input");
  PTDP_CHECK_ARG(dy.numel() == r * h_, "experts: output gradient " + dy.str() + " does not match [" +
                                           std::to_string(r) + ", " + std::to_string(h_) + "]");
  const int64_t pre_cols = (swiglu_ ? 2 : 1) * width_;
  s.dy = dy;
  s.dpre = empty_like(dy, {r, pre_cols});  // [R, ffn_e/etp] (SwiGLU: [R, 2*ffn_e/etp])
  Tensor dx = empty_like(dy, {r, h_});     // [R, h]
  if (r == 0) return dx;
  Backend& be = dy.backend();
  const auto weight = [&](int i) { return params_.weight(i); };
  if (swiglu_) {
    Tensor dact = empty_like(dy, {r, width_});  // [R, ffn_e/etp]
    grouped_rows(s.counts, false, width_, h_, dy, stacked(fc2_w_, weight), dact);
    be.swiglu_backward(s.pre.raw(), dact.raw(), s.dpre.raw(), dact.dtype(), r, width_);
  } else {
    grouped_rows(s.counts, false, width_, h_, dy, stacked(fc2_w_, weight), s.dpre);
    be.gelu_backward(s.pre.raw(), s.dpre.raw(), s.dpre.raw(), s.dpre.dtype(), s.dpre.numel());
  }
  grouped_rows(s.counts, false, h_, pre_cols, s.dpre, stacked(fc1_w_, weight), dx);
  return dx;
}

void GroupedExperts::backward_weight(const Step& step) {
  const OpScope scope("experts");
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "experts backward_weight before backward_input");
  const int64_t pre_cols = (swiglu_ ? 2 : 1) * width_;
  if (s.x.numel() > 0) {
    const auto grad = [&](int i) { return params_.grad(i); };
    grouped_wgrad(s.counts, h_, width_, s.dy, s.act, stacked(fc2_w_, grad));
    grouped_wgrad(s.counts, pre_cols, h_, s.dpre, s.x, stacked(fc1_w_, grad));
    // The biases' gradients: each expert's column sums, as 1 x n products with the ones. fc2's
    // is the whole one on every etp rank (dy is the same on each).
    if (fc1_b_.front() >= 0) {
      grouped_wgrad(s.counts, 1, h_, s.ones, s.dy, stacked(fc2_b_, grad));
      grouped_wgrad(s.counts, 1, pre_cols, s.ones, s.dpre, stacked(fc1_b_, grad));
    }
  }
  slots_.release(step.microbatch);
}

}  // namespace ptdp
