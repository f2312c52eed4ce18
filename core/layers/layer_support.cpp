#include "core/layers/layer_support.h"

#include "base/error.h"

namespace ptdp {

namespace {

GemmDesc typed(GemmDesc g, DType ab, DType c) {
  g.a_type = g.b_type = ab;
  g.c_type = c;
  return g;
}

// a and b of any shapes: only their storage types are compared.
void check_same_type(const Tensor& a, const Tensor& b, const char* what) {
  PTDP_CHECK_ARG(a.dtype() == b.dtype(), std::string(what) + ": " + a.str() + " and " + b.str() +
                                             " must have the same storage type");
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y, const Tensor* pre_gelu) {
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in, "linear input");
  check_same_type(x, w, "linear forward");
  check_same_type(x, y, "linear forward");
  GemmDesc g;
  g.trans_b = true;
  g.m = n;
  g.n = out;
  g.k = in;
  g = typed(g, x.dtype(), y.dtype());
  if (b) {
    check_same_type(x, *b, "linear bias");
    g.bias = b->raw();
    g.epilogue = Epilogue::Bias;
  }
  if (pre_gelu) {
    PTDP_CHECK_ARG(b != nullptr, "linear forward: the fused GeLU needs a bias");
    PTDP_CHECK_ARG(pre_gelu->numel() == y.numel() && pre_gelu->dtype() == y.dtype(),
                   "linear forward: pre-GeLU buffer " + pre_gelu->str() + " does not match the output " + y.str());
    g.epilogue = Epilogue::BiasGelu;
    g.aux = pre_gelu->raw();
  }
  x.backend().gemm(g, x.raw(), w.raw(), y.raw());
}

void linear_dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx, const Tensor* pre_gelu) {
  const int64_t out = w.dim(0), in = w.dim(1);
  check_same_type(dy, w, "linear dgrad");
  GemmDesc g;
  g.m = rows_of(dy, out, "linear output gradient");
  g.n = in;
  g.k = out;
  g = typed(g, dy.dtype(), dx.dtype());
  if (pre_gelu) {
    PTDP_CHECK_ARG(pre_gelu->numel() == dx.numel() && pre_gelu->dtype() == dx.dtype(),
                   "linear dgrad: pre-GeLU input " + pre_gelu->str() + " does not match the gradient " + dx.str());
    g.epilogue = Epilogue::DGelu;
    g.aux = pre_gelu->raw();
  }
  dy.backend().gemm(g, dy.raw(), w.raw(), dx.raw());
}

void linear_wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor* db) {
  const int64_t out = dw.dim(0), in = dw.dim(1);
  const int64_t n = rows_of(dy, out, "linear output gradient");
  check_same_type(dy, x, "linear wgrad");
  GemmDesc g;
  g.trans_a = true;
  g.m = out;
  g.n = in;
  g.k = n;
  g.beta = 1.0f;
  g = typed(g, dy.dtype(), dw.dtype());
  dy.backend().gemm(g, dy.raw(), x.raw(), dw.raw());
  if (db) dy.backend().bias_grad(dy.raw(), dy.dtype(), db->data<float>(), n, out, true);
}

}  // namespace ptdp
