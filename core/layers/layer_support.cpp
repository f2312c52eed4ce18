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

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) {
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in, "linear input");
  GemmDesc g;
  g.trans_b = true;
  g.m = n;
  g.n = out;
  g.k = in;
  x.backend().gemm(g, x.data<float>(), w.data<float>(), y.data<float>());
  if (b) x.backend().bias_add(y.data<float>(), b->data<float>(), n, out);
}

void linear_dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const int64_t out = w.dim(0), in = w.dim(1);
  GemmDesc g;
  g.m = rows_of(dy, out, "linear output gradient");
  g.n = in;
  g.k = out;
  dy.backend().gemm(g, dy.data<float>(), w.data<float>(), dx.data<float>());
}

void linear_wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor* db) {
  const int64_t out = dw.dim(0), in = dw.dim(1);
  const int64_t n = rows_of(dy, out, "linear output gradient");
  GemmDesc g;
  g.trans_a = true;
  g.m = out;
  g.n = in;
  g.k = n;
  g.beta = 1.0f;
  dy.backend().gemm(g, dy.data<float>(), x.data<float>(), dw.data<float>());
  if (db) dy.backend().bias_grad(dy.data<float>(), db->data<float>(), n, out, true);
}

}  // namespace ptdp
