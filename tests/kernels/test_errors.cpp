// Bad arguments throw ptdp::Error(InvalidArgument) with a message, before any write.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;

namespace {
ptdp::GemmDesc gdesc(int64_t m, int64_t n, int64_t k) {
  ptdp::GemmDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  return d;
}
}  // namespace

TEST_CASE("gemm rejects bad sizes, leading dimensions and NULL operands", "[errors][gemm]") {
  fvec a(64, 1.0f), b(64, 1.0f), c(64, 5.0f);
  const fvec c0 = c;
  auto& k = be();
  CHECK_INVALID_ARG(k.gemm(gdesc(-1, 2, 2), a.data(), b.data(), c.data()));
  CHECK_INVALID_ARG(k.gemm(gdesc(2, -1, 2), a.data(), b.data(), c.data()));
  CHECK_INVALID_ARG(k.gemm(gdesc(2, 2, -3), a.data(), b.data(), c.data()));
  {
    auto d = gdesc(2, 2, 2);
    d.batch = -1;
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  {
    auto d = gdesc(3, 4, 5);
    d.lda = 3;  // A is [3, 5]: lda must be >= 5
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  {
    auto d = gdesc(3, 4, 5);
    d.trans_a = true;  // A stored [5, 3]: lda must be >= 3
    d.lda = 2;
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  {
    auto d = gdesc(3, 4, 5);
    d.ldb = 3;  // B is [5, 4]: ldb must be >= 4
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  {
    auto d = gdesc(3, 4, 5);
    d.trans_b = true;  // B stored [4, 5]: ldb must be >= 5
    d.ldb = 4;
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  {
    auto d = gdesc(3, 4, 5);
    d.ldc = 3;  // C is [3, 4]
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  {
    auto d = gdesc(3, 4, 5);
    d.lda = -5;
    CHECK_INVALID_ARG(k.gemm(d, a.data(), b.data(), c.data()));
  }
  CHECK_INVALID_ARG(k.gemm(gdesc(2, 2, 2), nullptr, b.data(), c.data()));
  CHECK_INVALID_ARG(k.gemm(gdesc(2, 2, 2), a.data(), nullptr, c.data()));
  CHECK_INVALID_ARG(k.gemm(gdesc(2, 2, 2), a.data(), b.data(), nullptr));
  // Nothing was written by any failed call.
  CHECK_BITEQUAL(c, c0);
}

TEST_CASE("layernorm rejects cols <= 0, negative rows and NULL pointers", "[errors][layernorm]") {
  fvec x(16, 1.0f), g(16, 1.0f), bt(16, 0.0f), y(16, 3.0f), m(4, 3.0f), rs(4, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), m.data(), rs.data(), 2, 0, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), m.data(), rs.data(), 2, -4, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), m.data(), rs.data(), -1, 4, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(nullptr, g.data(), bt.data(), y.data(), m.data(), rs.data(), 2, 4, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), nullptr, rs.data(), 2, 4, 1e-5f));
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
  fvec dx(16, 3.0f), dg(16), db(16);
  CHECK_INVALID_ARG(k.layernorm_backward(x.data(), g.data(), m.data(), rs.data(), y.data(), dx.data(), dg.data(), db.data(), 2, 0, false));
  CHECK_INVALID_ARG(k.layernorm_backward(x.data(), g.data(), m.data(), rs.data(), nullptr, dx.data(), dg.data(), db.data(), 2, 4, false));
  CHECK_BITEQUAL(dx, fvec(16, 3.0f));
}

TEST_CASE("softmax rejects causal sq > sk and negative sizes", "[errors][softmax]") {
  fvec x(64, 1.0f), y(64, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), 1, 4, 3, 1.0f, true));
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), -1, 2, 2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), 1, -2, 2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), 1, 2, -2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_forward(nullptr, y.data(), 1, 2, 2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_backward(x.data(), x.data(), y.data(), 1, -2, 2, 1.0f));
  CHECK_INVALID_ARG(k.softmax_backward(x.data(), nullptr, y.data(), 1, 2, 2, 1.0f));
  CHECK_BITEQUAL(y, fvec(64, 3.0f));
}

TEST_CASE("embedding rejects negative sizes and NULL pointers", "[errors][embedding]") {
  const std::vector<int32_t> ids = {0, 1};
  fvec table(16, 1.0f), out(16, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), 2, table.data(), 0, 4, -1, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), -2, table.data(), 0, 4, 2, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), 2, table.data(), 0, -4, 2, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(nullptr, 2, table.data(), 0, 4, 2, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), 2, table.data(), 0, 4, 2, nullptr));
  CHECK_BITEQUAL(out, fvec(16, 3.0f));
  CHECK_INVALID_ARG(k.embedding_backward(ids.data(), 2, out.data(), 0, 4, -1, table.data()));
  CHECK_INVALID_ARG(k.embedding_backward(ids.data(), 2, nullptr, 0, 4, 2, table.data()));
  CHECK_BITEQUAL(table, fvec(16, 1.0f));
}

TEST_CASE("cast rejects non-float dtypes and negative n", "[errors][cast]") {
  fvec src(4, 1.0f);
  std::vector<int64_t> dst(4, 7);
  auto& k = be();
  CHECK_INVALID_ARG(k.cast(src.data(), DType::F32, dst.data(), DType::I32, 4));
  CHECK_INVALID_ARG(k.cast(src.data(), DType::I32, dst.data(), DType::F32, 4));
  CHECK_INVALID_ARG(k.cast(src.data(), DType::F32, dst.data(), DType::I64, 4));
  CHECK_INVALID_ARG(k.cast(src.data(), DType::I64, dst.data(), DType::BF16, 4));
  CHECK_INVALID_ARG(k.cast(src.data(), DType::F32, dst.data(), DType::F16, -1));
  CHECK_INVALID_ARG(k.cast(nullptr, DType::F32, dst.data(), DType::F16, 4));
  CHECK(dst == std::vector<int64_t>(4, 7));
}

TEST_CASE("dropout rejects p outside 0..1 and inconsistent blocks", "[errors][dropout]") {
  fvec x(16, 1.0f), y(16, 3.0f);
  auto& k = be();
  for (float p : {-0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    ptdp::DropoutDesc d;
    d.p = p;
    d.block = ptdp::GlobalBlock::flat(16);
    INFO("p " << p);
    CHECK_INVALID_ARG(k.dropout_forward(x.data(), y.data(), d));
    CHECK_INVALID_ARG(k.dropout_backward(x.data(), y.data(), d));
  }
  {
    ptdp::DropoutDesc d;
    d.p = 0.5f;
    d.block = ptdp::GlobalBlock::flat(16);
    CHECK_INVALID_ARG(k.dropout_forward(nullptr, y.data(), d));
    d.block.shape[0] = -16;
    d.block.global_shape[0] = -16;
    CHECK_INVALID_ARG(k.dropout_forward(x.data(), y.data(), d));
  }
  {
    // Heads 3..4 of a tensor with 4 heads: the block runs past the global shape.
    ptdp::DropoutDesc d;
    d.p = 0.5f;
    d.block.shape[0] = 2;
    d.block.shape[1] = 2;
    d.block.shape[2] = 4;
    d.block.global_shape[0] = 2;
    d.block.global_shape[1] = 4;
    d.block.global_shape[2] = 4;
    d.block.offset[1] = 3;
    CHECK_INVALID_ARG(k.dropout_forward(x.data(), y.data(), d));
  }
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
}

TEST_CASE("elementwise ops reject negative n and NULL pointers with n > 0", "[errors]") {
  fvec a(8, 1.0f), b(8, 2.0f), y(8, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.add(a.data(), b.data(), y.data(), -1));
  CHECK_INVALID_ARG(k.add(nullptr, b.data(), y.data(), 8));
  CHECK_INVALID_ARG(k.add(a.data(), b.data(), nullptr, 8));
  CHECK_INVALID_ARG(k.axpy(1.0f, nullptr, y.data(), 8));
  CHECK_INVALID_ARG(k.axpy(1.0f, a.data(), y.data(), -8));
  CHECK_INVALID_ARG(k.scale(nullptr, 2.0f, 8));
  CHECK_INVALID_ARG(k.scale(y.data(), 2.0f, -1));
  CHECK_INVALID_ARG(k.fill(nullptr, DType::F32, 1.0, 8));
  CHECK_INVALID_ARG(k.fill(y.data(), DType::F32, 1.0, -8));
  CHECK_INVALID_ARG(k.sum_squares(nullptr, 8));
  CHECK_INVALID_ARG(k.sum_squares(a.data(), -8));
  CHECK_INVALID_ARG(k.gelu_forward(nullptr, y.data(), 8));
  CHECK_INVALID_ARG(k.gelu_forward(a.data(), y.data(), -8));
  CHECK_INVALID_ARG(k.gelu_backward(a.data(), nullptr, y.data(), 8));
  CHECK_INVALID_ARG(k.bias_add(y.data(), b.data(), -1, 4));
  CHECK_INVALID_ARG(k.bias_add(y.data(), nullptr, 2, 4));
  CHECK_INVALID_ARG(k.bias_grad(a.data(), y.data(), 2, -4, false));
  CHECK_INVALID_ARG(k.bias_grad(a.data(), nullptr, 2, 4, true));
  CHECK_BITEQUAL(y, fvec(8, 3.0f));
}

TEST_CASE("cross-entropy and optimizer ops reject bad sizes and NULL pointers",
          "[errors][cross_entropy][optimizer]") {
  fvec l(16, 1.0f), m(4, 3.0f), s(4, 3.0f), out(16, 3.0f);
  const std::vector<int32_t> t = {0, 1, 2, 3};
  auto& k = be();
  CHECK_INVALID_ARG(k.ce_row_max(l.data(), -1, 4, m.data()));
  CHECK_INVALID_ARG(k.ce_row_max(nullptr, 4, 4, m.data()));
  CHECK_INVALID_ARG(k.ce_sum_exp(l.data(), m.data(), 4, -4, s.data()));
  CHECK_INVALID_ARG(k.ce_target_logit(l.data(), nullptr, 4, 4, 0, s.data()));
  CHECK_INVALID_ARG(k.ce_loss(m.data(), s.data(), nullptr, 4, out.data()));
  CHECK_INVALID_ARG(k.ce_backward(l.data(), m.data(), s.data(), t.data(), nullptr, 4, 4, 0, out.data()));
  CHECK_INVALID_ARG(k.ce_backward(l.data(), m.data(), s.data(), t.data(), s.data(), -4, 4, 0, out.data()));
  CHECK_BITEQUAL(out, fvec(16, 3.0f));

  fvec p(4, 1.0f), g(4, 1.0f), mm(4, 0.0f), vv(4, 0.0f);
  ptdp::AdamWParams ap;
  CHECK_INVALID_ARG(k.adamw_step(p.data(), g.data(), mm.data(), vv.data(), -4, ap));
  CHECK_INVALID_ARG(k.adamw_step(p.data(), nullptr, mm.data(), vv.data(), 4, ap));
  ap.step = 0;  // steps count from 1; bias correction would divide by zero
  CHECK_INVALID_ARG(k.adamw_step(p.data(), g.data(), mm.data(), vv.data(), 4, ap));
  ptdp::SgdParams sp;
  sp.momentum = 0.9f;
  CHECK_INVALID_ARG(k.sgd_step(p.data(), g.data(), mm.data(), -4, sp));
  CHECK_INVALID_ARG(k.sgd_step(p.data(), g.data(), nullptr, 4, sp));  // momentum needs a buffer
  CHECK_BITEQUAL(p, fvec(4, 1.0f));
}

TEST_CASE("size-0 calls accept NULL pointers and do nothing", "[errors]") {
  auto& k = be();
  CHECK_NOTHROW(k.add(nullptr, nullptr, nullptr, 0));
  CHECK_NOTHROW(k.axpy(1.0f, nullptr, nullptr, 0));
  CHECK_NOTHROW(k.scale(nullptr, 1.0f, 0));
  CHECK_NOTHROW(k.fill(nullptr, DType::F16, 1.0, 0));
  CHECK_NOTHROW(k.gelu_forward(nullptr, nullptr, 0));
  CHECK_NOTHROW(k.cast(nullptr, DType::F32, nullptr, DType::BF16, 0));
  CHECK(k.sum_squares(nullptr, 0) == 0.0);
}
