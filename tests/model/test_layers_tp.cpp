// The tensor-parallel layers through the C API equal serial computations (under mpiexec with
// t = W; every rank runs every check).
//
// usage: test_layers_tp
//
// Every layer is created twice with the same arguments and seed: on groups with tensor size 1
// (the serial layer: each rank holds the whole weight) and on groups with tensor size t = W.
// Each rank's slice of the parallel layer's weight (ptdp_layer_param) must equal the matching
// rows or columns of the serial one bit for bit (init is a pure function of seed, name and
// global index); biases, which start at zero, are written through the views to the same
// non-zero values on both. Forward outputs, input gradients and parameter gradients of both
// layers are compared with a serial computation done here in double precision (and the
// parallel layer's with the serial layer's), with two microbatches in flight: forward 0,
// forward 1, backward 1, backward 0, so the parameter gradients are the sums of both.
#include "model_test.h"

namespace {

using ct::Tensor;
using mt::Worst;

constexpr double kRel = 1e-5;
// Absolute floor for entries near zero. The values here are O(1) (inputs in [-1, 1), weights
// of std 0.5, biases in [-0.5, 0.5)); an output is a sum of at most 16 products and a weight
// gradient a sum of 2 x 6 of them, so fp32 round-off is bounded by about 16 * 2^-24 * sum|terms|
// ~ 1e-6 absolute; measured, beyond 1e-5 relative, at most 2.1e-7 (the summary prints the worst
// seen): entries that cancel to below 0.1 cannot be held to 1e-5 relative. A wrong slice, a
// missing reduction or an unmasked padded column is off by O(1).
constexpr double kFloor = 1e-6;

constexpr int64_t kN = 6;        // rows of a microbatch
constexpr int64_t kIn = 12;      // column-parallel input width
constexpr int64_t kHidden = 16;  // column-parallel output = row-parallel input (divisible by 1, 2, 4)
constexpr int64_t kOut = 12;     // row-parallel output
constexpr float kStd = 0.5f;

int g_t = 1, g_r = 0;  // this rank's tensor size and rank in the parallel groups
Worst g_worst[2];      // the serial layers' and the parallel layers' differences from the host
int g_which = 0;       // which of them the current comparisons belong to

// ---- host matrices (row-major, double) --------------------------------------------------------

using Mat = std::vector<double>;

Mat to_mat(const std::vector<float>& v) { return Mat(v.begin(), v.end()); }

/// y [n, o] = x [n, i] w^T (w [o, i]).
Mat matmul_t(const Mat& x, const Mat& w, int64_t n, int64_t i, int64_t o) {
  Mat y(static_cast<std::size_t>(n * o), 0.0);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < o; ++b) {
      double s = 0;
      for (int64_t k = 0; k < i; ++k) s += x[a * i + k] * w[b * i + k];
      y[a * o + b] = s;
    }
  return y;
}

/// dx [n, i] = dy [n, o] w (w [o, i]).
Mat matmul(const Mat& dy, const Mat& w, int64_t n, int64_t o, int64_t i) {
  Mat dx(static_cast<std::size_t>(n * i), 0.0);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t k = 0; k < i; ++k) {
      double s = 0;
      for (int64_t b = 0; b < o; ++b) s += dy[a * o + b] * w[b * i + k];
      dx[a * i + k] = s;
    }
  return dx;
}

/// dw [o, i] += dy^T [o, n] x [n, i].
void add_wgrad(Mat& dw, const Mat& dy, const Mat& x, int64_t n, int64_t o, int64_t i) {
  for (int64_t b = 0; b < o; ++b)
    for (int64_t k = 0; k < i; ++k)
      for (int64_t a = 0; a < n; ++a) dw[b * i + k] += dy[a * o + b] * x[a * i + k];
}

void add_bias(Mat& y, const Mat& b, int64_t n, int64_t o) {
  for (int64_t a = 0; a < n; ++a)
    for (int64_t c = 0; c < o; ++c) y[a * o + c] += b[c];
}

void add_colsum(Mat& db, const Mat& dy, int64_t n, int64_t o) {
  for (int64_t a = 0; a < n; ++a)
    for (int64_t c = 0; c < o; ++c) db[c] += dy[a * o + c];
}

/// Columns [c0, c0 + nc) of a [rows, cols] matrix.
template <typename T>
std::vector<T> cols_of(const std::vector<T>& m, int64_t rows, int64_t cols, int64_t c0, int64_t nc) {
  std::vector<T> out(static_cast<std::size_t>(rows * nc));
  for (int64_t a = 0; a < rows; ++a)
    for (int64_t c = 0; c < nc; ++c) out[a * nc + c] = m[a * cols + c0 + c];
  return out;
}

/// Rows [r0, r0 + nr) of a [rows, cols] matrix.
template <typename T>
std::vector<T> rows_of(const std::vector<T>& m, int64_t cols, int64_t r0, int64_t nr) {
  return std::vector<T>(m.begin() + r0 * cols, m.begin() + (r0 + nr) * cols);
}

std::vector<float> to_f(const Mat& m) { return std::vector<float>(m.begin(), m.end()); }

// Two microbatches through y = x W^T + b (W [o, i]) and back, in double: the serial reference.
struct SerialLinear {
  Mat x[2], y[2], dy[2], dx[2], dw, db;
};
SerialLinear serial_linear(const Mat& W, const Mat& b, int64_t n, int64_t i, int64_t o, uint64_t seed_x,
                           uint64_t seed_dy) {
  SerialLinear r;
  r.dw.assign(static_cast<std::size_t>(o * i), 0.0);
  r.db.assign(static_cast<std::size_t>(o), 0.0);
  for (int k = 0; k < 2; ++k) {
    r.x[k] = to_mat(mt::floats(n * i, seed_x + static_cast<uint64_t>(k)));
    r.y[k] = matmul_t(r.x[k], W, n, i, o);
    add_bias(r.y[k], b, n, o);
    r.dy[k] = to_mat(mt::floats(n * o, seed_dy + static_cast<uint64_t>(k)));
    r.dx[k] = matmul(r.dy[k], W, n, o, i);
    add_wgrad(r.dw, r.dy[k], r.x[k], n, o, i);
    add_colsum(r.db, r.dy[k], n, o);
  }
  return r;
}

// ---- tensors and layers -------------------------------------------------------------------------

Tensor f32(std::vector<int64_t> shape, const std::vector<float>& v) {
  ptdp_tensor h = nullptr;
  CT_OK(ptdp_tensor_create(nullptr, static_cast<int32_t>(shape.size()), shape.data(), v.data(), v.size() * sizeof(float), &h));
  return Tensor(h);
}

Tensor i32(const std::vector<int32_t>& v) {
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  o.dtype = PTDP_DTYPE_I32;
  const int64_t shape[1] = {static_cast<int64_t>(v.size())};
  ptdp_tensor h = nullptr;
  CT_OK(ptdp_tensor_create(&o, 1, shape, v.data(), v.size() * sizeof(int32_t), &h));
  return Tensor(h);
}

/// The f32 elements of `t`, after checking its shape.
std::vector<float> values(ptdp_tensor t, const std::vector<int64_t>& shape, const std::string& what) {
  int32_t ndim = -1;
  int64_t got[PTDP_MAX_DIMS] = {0};
  ptdp_dtype dtype = PTDP_DTYPE_I64;
  if (t == nullptr || ptdp_tensor_ndim(t, &ndim) != PTDP_SUCCESS || ptdp_tensor_shape(t, got, PTDP_MAX_DIMS) != PTDP_SUCCESS ||
      ptdp_tensor_dtype(t, &dtype) != PTDP_SUCCESS) {
    mt::expect(false, what + " is a live tensor", "a tensor", "none");
    return {};
  }
  mt::expect_eq(static_cast<int>(dtype), static_cast<int>(PTDP_DTYPE_F32), what + " dtype is f32");
  std::vector<int64_t> s(got, got + ndim);
  mt::expect(s == shape, what + " shape", ct::str(shape), ct::str(s));
  int64_t n = 0;
  ptdp_tensor_numel(t, &n);
  std::vector<float> v(static_cast<std::size_t>(n));
  if (dtype == PTDP_DTYPE_F32) CT_OK(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float)));
  return v;
}

void write(ptdp_tensor t, const std::vector<float>& v) {
  CT_OK(ptdp_tensor_copy_from_host(t, v.data(), v.size() * sizeof(float)));
}

class Layer {
 public:
  Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
  ~Layer() { CT_OK(ptdp_layer_destroy(h_)); }
  ptdp_layer* out() { return &h_; }
  ptdp_layer get() const { return h_; }
  operator ptdp_layer() const { return h_; }  // NOLINT

  /// A view of this rank's slice of "weight" or "bias" (or its gradient).
  Tensor param(const char* which) const {
    ptdp_tensor t = nullptr;
    CT_OK(ptdp_layer_param(h_, which, &t));
    return Tensor(t);
  }
  Tensor grad(const char* which) const {
    ptdp_tensor t = nullptr;
    CT_OK(ptdp_layer_grad(h_, which, &t));
    return Tensor(t);
  }
  Tensor forward(int64_t mb, ptdp_tensor x, ptdp_tensor labels = nullptr) const {
    ptdp_tensor y = nullptr;
    CT_OK(ptdp_layer_forward(h_, mb, x, labels, &y));
    return Tensor(y);
  }
  Tensor backward(int64_t mb, ptdp_tensor dy) const {
    ptdp_tensor dx = nullptr;
    CT_OK(ptdp_layer_backward(h_, mb, dy, &dx));
    return Tensor(dx);
  }

 private:
  ptdp_layer h_ = nullptr;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& check) {
  mt::expect_close(got, want, kRel, kFloor, check, &g_worst[g_which]);
}

void expect_close(const std::vector<float>& got, const Mat& want, const std::string& check) {
  expect_close(got, to_f(want), check);
}

// ---- column-parallel linear ------------------------------------------------------------------

void column_parallel(ptdp_groups serial, ptdp_groups parallel, int32_t bias, int32_t gather) {
  ct::context("column-parallel linear, bias " + std::to_string(bias) + ", gather_output " + std::to_string(gather) +
              ", t=" + std::to_string(g_t));
  const uint64_t seed = 11 + static_cast<uint64_t>(2 * bias + gather);
  Layer ref, tp;
  if (!CT_OK(ptdp_column_parallel_linear_create(serial, kIn, kHidden, bias, gather, kStd, seed, ref.out())).empty()) return;
  if (!CT_OK(ptdp_column_parallel_linear_create(parallel, kIn, kHidden, bias, gather, kStd, seed, tp.out())).empty()) return;
  const int64_t local = kHidden / g_t, c0 = local * g_r;

  // The slices of the weight are the serial weight's rows, exactly.
  const std::vector<float> w = values(ref.param("weight"), {kHidden, kIn}, "serial weight");
  mt::expect_bitwise(values(tp.param("weight"), {local, kIn}, "weight slice"), rows_of(w, kIn, c0, local),
                     "this rank's weight slice is rows [" + std::to_string(c0) + ", +" + std::to_string(local) + ") of the serial weight");
  mt::expect(std::any_of(w.begin(), w.end(), [](float v) { return v != 0.0f; }), "the weight is initialised (not all zero)");
  Mat b(static_cast<std::size_t>(kHidden), 0.0);
  if (bias) {
    mt::expect_zero(values(ref.param("bias"), {kHidden}, "serial bias"), 0, kHidden, "the bias starts at zero");
    const std::vector<float> bf = mt::floats(kHidden, 31, 0.5);
    write(ref.param("bias"), bf);
    write(tp.param("bias"), rows_of(bf, 1, c0, local));
    mt::expect_bitwise(values(tp.param("bias"), {local}, "bias slice"), rows_of(bf, 1, c0, local), "the bias view writes through");
    b = to_mat(bf);
  } else {
    ptdp_tensor none = nullptr;
    CT_STATUS(ptdp_layer_param(tp, "bias", &none), PTDP_ERR_INVALID_ARGUMENT);
  }

  // Serial results in double.
  const SerialLinear ref_out = serial_linear(to_mat(w), b, kN, kIn, kHidden, 40, 50);
  const auto& [x, y, dy, dx, dw, db] = ref_out;

  for (int which = 0; which < 2; ++which) {
    g_which = which;
    const Layer& l = which == 0 ? ref : tp;
    const int t = which == 0 ? 1 : g_t;
    const int64_t lo = kHidden / t, o0 = which == 0 ? 0 : c0;
    const std::string tag = which == 0 ? "serial layer: " : "parallel layer: ";
    Tensor xt[2] = {f32({kN, kIn}, to_f(x[0])), f32({kN, kIn}, to_f(x[1]))};
    Tensor yt[2] = {l.forward(0, xt[0]), l.forward(1, xt[1])};
    std::vector<float> yv[2];
    for (int k : {0, 1}) {
      const std::string mb = " (microbatch " + std::to_string(k) + ")";
      if (gather || t == 1) {
        yv[k] = values(yt[k], {kN, kHidden}, tag + "gathered output");
        expect_close(yv[k], y[k], tag + "forward output = x W^T + b" + mb);
      } else {
        yv[k] = values(yt[k], {kN, lo}, tag + "output slice");
        expect_close(yv[k], cols_of(y[k], kN, kHidden, o0, lo), tag + "forward output = this rank's columns of x W^T + b" + mb);
      }
    }
    for (int k : {1, 0}) {
      const std::string mb = " (microbatch " + std::to_string(k) + ")";
      const Mat g = gather || t == 1 ? dy[k] : cols_of(dy[k], kN, kHidden, o0, lo);
      Tensor gt = f32({kN, (gather || t == 1) ? kHidden : lo}, to_f(g));
      Tensor dxt = l.backward(k, gt);
      expect_close(values(dxt, {kN, kIn}, tag + "input gradient"), dx[k], tag + "input gradient = dy W (summed over ranks)" + mb);
    }
    expect_close(values(l.grad("weight"), {lo, kIn}, tag + "weight gradient"), rows_of(dw, kIn, o0, lo),
                 tag + "weight gradient = this rank's rows of the sum of dy^T x over both microbatches");
    if (bias) {
      expect_close(values(l.grad("bias"), {lo}, tag + "bias gradient"), rows_of(db, 1, o0, lo),
                   tag + "bias gradient = this rank's part of the column sums of dy");
    }
  }
}

// ---- row-parallel linear -----------------------------------------------------------------------

void row_parallel(ptdp_groups serial, ptdp_groups parallel, int32_t bias) {
  ct::context("row-parallel linear, bias " + std::to_string(bias) + ", t=" + std::to_string(g_t));
  const uint64_t seed = 21 + static_cast<uint64_t>(bias);
  Layer ref, tp;
  if (!CT_OK(ptdp_row_parallel_linear_create(serial, kHidden, kOut, bias, kStd, seed, ref.out())).empty()) return;
  if (!CT_OK(ptdp_row_parallel_linear_create(parallel, kHidden, kOut, bias, kStd, seed, tp.out())).empty()) return;
  const int64_t local = kHidden / g_t, c0 = local * g_r;

  const std::vector<float> w = values(ref.param("weight"), {kOut, kHidden}, "serial weight");
  mt::expect_bitwise(values(tp.param("weight"), {kOut, local}, "weight slice"), cols_of(w, kOut, kHidden, c0, local),
                     "this rank's weight slice is columns [" + std::to_string(c0) + ", +" + std::to_string(local) + ") of the serial weight");
  Mat b(static_cast<std::size_t>(kOut), 0.0);
  if (bias) {
    const std::vector<float> bf = mt::floats(kOut, 32, 0.5);
    write(ref.param("bias"), bf);
    write(tp.param("bias"), bf);  // the same on every rank, added once after the sum
    b = to_mat(bf);
  }

  const SerialLinear ref_out = serial_linear(to_mat(w), b, kN, kHidden, kOut, 60, 70);
  const auto& [x, y, dy, dx, dw, db] = ref_out;

  for (int which = 0; which < 2; ++which) {
    g_which = which;
    const Layer& l = which == 0 ? ref : tp;
    const int64_t li = which == 0 ? kHidden : local, i0 = which == 0 ? 0 : c0;
    const std::string tag = which == 0 ? "serial layer: " : "parallel layer: ";
    Tensor xt[2] = {f32({kN, li}, to_f(cols_of(x[0], kN, kHidden, i0, li))), f32({kN, li}, to_f(cols_of(x[1], kN, kHidden, i0, li)))};
    Tensor yt[2] = {l.forward(0, xt[0]), l.forward(1, xt[1])};
    for (int k : {0, 1}) {
      expect_close(values(yt[k], {kN, kOut}, tag + "output"), y[k],
                   tag + "forward output = x W^T + b, summed over ranks (microbatch " + std::to_string(k) + ")");
    }
    for (int k : {1, 0}) {
      Tensor gt = f32({kN, kOut}, to_f(dy[k]));
      Tensor dxt = l.backward(k, gt);
      expect_close(values(dxt, {kN, li}, tag + "input gradient"), cols_of(dx[k], kN, kHidden, i0, li),
                   tag + "input gradient = this rank's columns of dy W (microbatch " + std::to_string(k) + ")");
    }
    expect_close(values(l.grad("weight"), {kOut, li}, tag + "weight gradient"), cols_of(dw, kOut, kHidden, i0, li),
                 tag + "weight gradient = this rank's columns of the sum of dy^T x");
    if (bias) expect_close(values(l.grad("bias"), {kOut}, tag + "bias gradient"), db, tag + "bias gradient = the column sums of dy");
  }
}

// ---- column -> row, as in an MLP ---------------------------------------------------------------

void mlp_chain(ptdp_groups serial, ptdp_groups parallel) {
  ct::context("column -> row (MLP), t=" + std::to_string(g_t));
  Layer c1, r1, c2, r2;  // serial pair, parallel pair
  if (!CT_OK(ptdp_column_parallel_linear_create(serial, kIn, kHidden, 1, 0, kStd, 81, c1.out())).empty()) return;
  if (!CT_OK(ptdp_row_parallel_linear_create(serial, kHidden, kOut, 1, kStd, 82, r1.out())).empty()) return;
  if (!CT_OK(ptdp_column_parallel_linear_create(parallel, kIn, kHidden, 1, 0, kStd, 81, c2.out())).empty()) return;
  if (!CT_OK(ptdp_row_parallel_linear_create(parallel, kHidden, kOut, 1, kStd, 82, r2.out())).empty()) return;
  const int64_t local = kHidden / g_t, h0 = local * g_r;

  const std::vector<float> w1 = values(c1.param("weight"), {kHidden, kIn}, "serial W1");
  const std::vector<float> w2 = values(r1.param("weight"), {kOut, kHidden}, "serial W2");
  const std::vector<float> b1 = mt::floats(kHidden, 33, 0.5), b2 = mt::floats(kOut, 34, 0.5);
  write(c1.param("bias"), b1);
  write(r1.param("bias"), b2);
  write(c2.param("bias"), rows_of(b1, 1, h0, local));
  write(r2.param("bias"), b2);
  mt::expect_bitwise(values(c2.param("weight"), {local, kIn}, "W1 slice"), rows_of(w1, kIn, h0, local), "W1 slice = serial rows");
  mt::expect_bitwise(values(r2.param("weight"), {kOut, local}, "W2 slice"), cols_of(w2, kOut, kHidden, h0, local),
                     "W2 slice = serial columns");

  const Mat W1 = to_mat(w1), W2 = to_mat(w2), B1 = to_mat(b1), B2 = to_mat(b2);
  Mat x[2], h[2], y[2], dy[2], dh[2], dx[2];
  Mat dw1(W1.size(), 0.0), db1(B1.size(), 0.0), dw2(W2.size(), 0.0), db2(B2.size(), 0.0);
  for (int k = 0; k < 2; ++k) {
    x[k] = to_mat(mt::floats(kN * kIn, 90 + k));
    h[k] = matmul_t(x[k], W1, kN, kIn, kHidden);
    add_bias(h[k], B1, kN, kHidden);
    y[k] = matmul_t(h[k], W2, kN, kHidden, kOut);
    add_bias(y[k], B2, kN, kOut);
    dy[k] = to_mat(mt::floats(kN * kOut, 95 + k));
    dh[k] = matmul(dy[k], W2, kN, kOut, kHidden);
    dx[k] = matmul(dh[k], W1, kN, kHidden, kIn);
    add_wgrad(dw2, dy[k], h[k], kN, kOut, kHidden);
    add_colsum(db2, dy[k], kN, kOut);
    add_wgrad(dw1, dh[k], x[k], kN, kHidden, kIn);
    add_colsum(db1, dh[k], kN, kHidden);
  }

  for (int which = 0; which < 2; ++which) {
    g_which = which;
    const Layer& col = which == 0 ? c1 : c2;
    const Layer& row = which == 0 ? r1 : r2;
    const int64_t lh = which == 0 ? kHidden : local, o0 = which == 0 ? 0 : h0;
    const std::string tag = which == 0 ? "serial pair: " : "parallel pair: ";
    Tensor xt[2] = {f32({kN, kIn}, to_f(x[0])), f32({kN, kIn}, to_f(x[1]))};
    Tensor ht[2] = {col.forward(0, xt[0]), col.forward(1, xt[1])};
    Tensor yt[2] = {row.forward(0, ht[0]), row.forward(1, ht[1])};
    for (int k : {0, 1}) {
      expect_close(values(yt[k], {kN, kOut}, tag + "output"), y[k],
                   tag + "(x W1^T + b1) W2^T + b2 (microbatch " + std::to_string(k) + ")");
    }
    for (int k : {1, 0}) {
      Tensor gt = f32({kN, kOut}, to_f(dy[k]));
      Tensor dht = row.backward(k, gt);
      expect_close(values(dht, {kN, lh}, tag + "hidden gradient"), cols_of(dh[k], kN, kHidden, o0, lh),
                   tag + "hidden gradient (microbatch " + std::to_string(k) + ")");
      Tensor dxt = col.backward(k, dht);
      expect_close(values(dxt, {kN, kIn}, tag + "input gradient"), dx[k],
                   tag + "input gradient dy W2 W1 (microbatch " + std::to_string(k) + ")");
    }
    expect_close(values(col.grad("weight"), {lh, kIn}, "dW1"), rows_of(dw1, kIn, o0, lh), tag + "W1 gradient");
    expect_close(values(col.grad("bias"), {lh}, "db1"), rows_of(db1, 1, o0, lh), tag + "b1 gradient");
    expect_close(values(row.grad("weight"), {kOut, lh}, "dW2"), cols_of(dw2, kOut, kHidden, o0, lh), tag + "W2 gradient");
    expect_close(values(row.grad("bias"), {kOut}, "db2"), db2, tag + "b2 gradient");
  }
}

// ---- vocab-parallel embedding --------------------------------------------------------------------

void embedding(ptdp_groups serial, ptdp_groups parallel) {
  constexpr int64_t kVocab = 20, kH = 6, kIds = 10;
  ct::context("vocab-parallel embedding, t=" + std::to_string(g_t));
  Layer ref, tp;
  if (!CT_OK(ptdp_vocab_parallel_embedding_create(serial, kVocab, kH, kStd, 41, ref.out())).empty()) return;
  if (!CT_OK(ptdp_vocab_parallel_embedding_create(parallel, kVocab, kH, kStd, 41, tp.out())).empty()) return;
  const int64_t local = kVocab / g_t, r0 = local * g_r;
  const std::vector<float> w = values(ref.param("weight"), {kVocab, kH}, "serial table");
  mt::expect_bitwise(values(tp.param("weight"), {local, kH}, "table slice"), rows_of(w, kH, r0, local),
                     "this rank's rows of the table = the serial table's");
  ptdp_tensor none = nullptr;
  CT_STATUS(ptdp_layer_param(tp, "bias", &none), PTDP_ERR_INVALID_ARGUMENT);

  // Ids from every rank's range, the first and the last, and repeats (their gradients add up).
  const std::vector<int32_t> ids[2] = {{0, 19, 5, 5, 10, 14, 3, 19, 9, 15}, {7, 7, 7, 1, 12, 18, 4, 16, 11, 0}};
  Mat y[2], dy[2];
  Mat dw(static_cast<std::size_t>(kVocab * kH), 0.0);
  for (int k = 0; k < 2; ++k) {
    y[k].assign(static_cast<std::size_t>(kIds * kH), 0.0);
    dy[k] = to_mat(mt::floats(kIds * kH, 110 + k));
    for (int64_t a = 0; a < kIds; ++a)
      for (int64_t c = 0; c < kH; ++c) {
        y[k][a * kH + c] = w[ids[k][a] * kH + c];
        dw[ids[k][a] * kH + c] += dy[k][a * kH + c];
      }
  }
  for (int which = 0; which < 2; ++which) {
    g_which = which;
    const Layer& l = which == 0 ? ref : tp;
    const int64_t lr = which == 0 ? kVocab : local, o0 = which == 0 ? 0 : r0;
    const std::string tag = which == 0 ? "serial layer: " : "parallel layer: ";
    Tensor it[2] = {i32(ids[0]), i32(ids[1])};
    Tensor yt[2] = {l.forward(0, it[0]), l.forward(1, it[1])};
    for (int k : {0, 1}) {
      // A lookup copies rows: exact.
      mt::expect_bitwise(values(yt[k], {kIds, kH}, tag + "output"), to_f(y[k]),
                         tag + "forward output = the table's rows, on every rank (microbatch " + std::to_string(k) + ")");
    }
    for (int k : {1, 0}) {
      Tensor gt = f32({kIds, kH}, to_f(dy[k]));
      CT_OK(ptdp_layer_backward(l, k, gt, nullptr));
    }
    expect_close(values(l.grad("weight"), {lr, kH}, tag + "table gradient"), rows_of(dw, kH, o0, lr),
                 tag + "table gradient = this rank's rows of the scattered dy");
  }
}

// ---- vocab-parallel cross-entropy ----------------------------------------------------------------

void cross_entropy(ptdp_groups serial, ptdp_groups parallel) {
  constexpr int64_t kVocab = 10, kPadded = 12, kRows = 5;
  ct::context("vocab-parallel cross-entropy, vocab 10 padded to 12, t=" + std::to_string(g_t));
  Layer ref, tp;
  if (!CT_OK(ptdp_vocab_parallel_cross_entropy_create(serial, kVocab, kPadded, ref.out())).empty()) return;
  if (!CT_OK(ptdp_vocab_parallel_cross_entropy_create(parallel, kVocab, kPadded, tp.out())).empty()) return;
  const int64_t local = kPadded / g_t, c0 = local * g_r;
  ptdp_tensor none = nullptr;
  CT_STATUS(ptdp_layer_param(tp, "weight", &none), PTDP_ERR_INVALID_ARGUMENT);

  std::vector<float> logits[2];
  std::vector<int32_t> labels[2];
  Mat loss[2], dloss[2], dlogits[2];
  for (int k = 0; k < 2; ++k) {
    logits[k] = mt::floats(kRows * kPadded, 120 + k, 3.0);
    labels[k] = mt::ids(kRows, kVocab, 130 + k);
    labels[k][0] = kVocab - 1;  // the last real column (on the last rank for t = 4)
    // The padded columns hold large logits: if they took part, the loss would be far off.
    for (int64_t a = 0; a < kRows; ++a)
      for (int64_t c = kVocab; c < kPadded; ++c) logits[k][a * kPadded + c] = 50.0f + static_cast<float>(c);
    dloss[k] = to_mat(mt::floats(kRows, 140 + k));
    loss[k].assign(kRows, 0.0);
    dlogits[k].assign(static_cast<std::size_t>(kRows * kPadded), 0.0);
    for (int64_t a = 0; a < kRows; ++a) {
      double mx = -1e300;
      for (int64_t c = 0; c < kVocab; ++c) mx = std::fmax(mx, logits[k][a * kPadded + c]);
      double se = 0;
      for (int64_t c = 0; c < kVocab; ++c) se += std::exp(logits[k][a * kPadded + c] - mx);
      const int32_t lab = labels[k][static_cast<std::size_t>(a)];
      loss[k][a] = std::log(se) + mx - logits[k][a * kPadded + lab];
      for (int64_t c = 0; c < kVocab; ++c) {
        const double p = std::exp(logits[k][a * kPadded + c] - mx) / se;
        dlogits[k][a * kPadded + c] = dloss[k][a] * (p - (c == lab ? 1.0 : 0.0));
      }
    }
  }
  for (int which = 0; which < 2; ++which) {
    g_which = which;
    const Layer& l = which == 0 ? ref : tp;
    const int64_t lv = which == 0 ? kPadded : local, o0 = which == 0 ? 0 : c0;
    const std::string tag = which == 0 ? "serial layer: " : "parallel layer: ";
    std::vector<float> mine[2] = {cols_of(logits[0], kRows, kPadded, o0, lv), cols_of(logits[1], kRows, kPadded, o0, lv)};
    Tensor zt[2] = {f32({kRows, lv}, mine[0]), f32({kRows, lv}, mine[1])};
    Tensor lt[2] = {i32(labels[0]), i32(labels[1])};
    Tensor yt[2] = {l.forward(0, zt[0], lt[0]), l.forward(1, zt[1], lt[1])};
    for (int k : {0, 1}) {
      const std::string mb = " (microbatch " + std::to_string(k) + ")";
      expect_close(values(yt[k], {kRows}, tag + "losses"), loss[k], tag + "per-token loss = logsumexp over the real vocabulary - target" + mb);
      mt::expect_bitwise(values(zt[k], {kRows, lv}, tag + "logits"), mine[k], tag + "the caller's logits are left unchanged" + mb);
    }
    for (int k : {1, 0}) {
      const std::string mb = " (microbatch " + std::to_string(k) + ")";
      Tensor gt = f32({kRows}, to_f(dloss[k]));
      const std::vector<float> d = values(l.backward(k, gt), {kRows, lv}, tag + "dlogits");
      expect_close(d, cols_of(dlogits[k], kRows, kPadded, o0, lv), tag + "dlogits = dloss (softmax - one-hot)" + mb);
      bool padded_zero = true;
      for (int64_t a = 0; a < kRows; ++a)
        for (int64_t c = 0; c < lv; ++c)
          if (o0 + c >= kVocab && d.size() == static_cast<std::size_t>(kRows * lv) && d[a * lv + c] != 0.0f) padded_zero = false;
      mt::expect(padded_zero, tag + "dlogits of the padded columns are exactly zero" + mb);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, world = 1;
  ct::start(&argc, &argv, &rank, &world);
  const double start = ct::now_s();
  const ptdp_runtime_options ro = ct::runtime_options();
  ptdp_runtime rt = nullptr;
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    ct::Layout serial, parallel;
    serial.W = parallel.W = world;
    parallel.t = world;
    const ptdp_parallel_options so = serial.options(), po = parallel.options();
    ptdp_groups gs = nullptr, gp = nullptr;
    CT_OK(ptdp_groups_create(rt, &so, &gs));
    CT_OK(ptdp_groups_create(rt, &po, &gp));
    int32_t t = 0, r = -1;
    CT_OK(ptdp_groups_size(gp, PTDP_GROUP_TENSOR, &t));
    CT_OK(ptdp_groups_rank(gp, PTDP_GROUP_TENSOR, &r));
    mt::expect_eq(t, static_cast<int32_t>(world), "tensor group size = W");
    g_t = t;
    g_r = r;
    for (Worst& w : g_worst) w.rel_min = kFloor / kRel;

    for (int32_t bias : {0, 1})
      for (int32_t gather : {0, 1}) column_parallel(gs, gp, bias, gather);
    for (int32_t bias : {0, 1}) row_parallel(gs, gp, bias);
    mlp_chain(gs, gp);
    embedding(gs, gp);
    cross_entropy(gs, gp);

    ct::context("teardown");
    CT_OK(ptdp_groups_destroy(gp));
    CT_OK(ptdp_groups_destroy(gs));
    CT_OK(ptdp_runtime_destroy(rt));
  }
  for (Worst& w : g_worst) w.reduce();
  if (rank == 0) {
    for (int which = 0; which < 2; ++which) {
      const Worst& w = g_worst[which];
      std::printf("layers, W=%d, %s layers (t=%d) vs serial computation in double: worst rel %.3g (entries >= %.3g), "
                  "worst abs %.3g, absolute floor needed beyond 1e-5 relative %.3g (allowed %.3g)\n",
                  world, which == 0 ? "serial" : "parallel", which == 0 ? 1 : world, w.rel, w.rel_min, w.abs, w.floor, kFloor);
    }
    std::printf("elapsed %.3f s\n", ct::now_s() - start);
  }
  const int rc = ct::finish("test_layers_tp");
  MPI_Finalize();
  return rc;
}
