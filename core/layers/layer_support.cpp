#include "core/layers/layer_support.h"

#include "kernels/error.h"

namespace ptdp {

void TensorParallel::all_reduce(const Tensor& t, ReduceOp op) const {
  if (size == 1) return;
  comm->all_reduce(t, op)->wait();
}

void TensorParallel::all_gather(const Tensor& in, const Tensor& out) const {
  if (size == 1) {
    in.backend().copy(out.raw(), in.raw(), in.nbytes());
    return;
  }
  comm->all_gather(in, out)->wait();
}

uint64_t dropout_stream(const Step& step, int layer, DropoutSite site) {
  // splitmix64 over the coordinates: distinct (iteration, microbatch, layer, site) give
  // unrelated streams.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(static_cast<uint64_t>(step.iteration));
  h = mix(h ^ static_cast<uint64_t>(step.microbatch));
  h = mix(h ^ static_cast<uint64_t>(static_cast<int64_t>(layer)));
  return mix(h ^ static_cast<uint64_t>(site));
}

int64_t rows_of(const Tensor& t, int64_t cols, const char* what) {
  PTDP_CHECK_ARG(cols > 0 && t.numel() % cols == 0,
                 std::string(what) + " " + t.str() + " is not a whole number of rows of " + std::to_string(cols));
  return t.numel() / cols;
}

Tensor empty_like(const Tensor& like, const Shape& shape) { return Tensor::empty(shape, like.dtype(), like.device()); }

void* element_ptr(const Tensor& t, int64_t offset) {
  PTDP_CHECK_ARG(offset >= 0 && offset < t.numel(),
                 "element " + std::to_string(offset) + " is outside " + t.str());
  return static_cast<char*>(t.raw()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

namespace {

GemmDesc typed(GemmDesc g, DType ab, DType c) {
  g.a_type = g.b_type = ab;
  g.c_type = c;
  return g;
}

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
