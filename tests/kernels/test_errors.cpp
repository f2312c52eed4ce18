// Bad arguments throw ptdp::Error(InvalidArgument) with a message, before any write.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

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
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), kF32, m.data(), rs.data(), 2, 0, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), kF32, m.data(), rs.data(), 2, -4, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), kF32, m.data(), rs.data(), -1, 4, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(nullptr, g.data(), bt.data(), y.data(), kF32, m.data(), rs.data(), 2, 4, 1e-5f));
  CHECK_INVALID_ARG(k.layernorm_forward(x.data(), g.data(), bt.data(), y.data(), kF32, nullptr, rs.data(), 2, 4, 1e-5f));
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
  fvec dx(16, 3.0f), dg(16), db(16);
  CHECK_INVALID_ARG(k.layernorm_backward(x.data(), g.data(), m.data(), rs.data(), y.data(), dx.data(), kF32, dg.data(), db.data(), 2, 0, false));
  CHECK_INVALID_ARG(k.layernorm_backward(x.data(), g.data(), m.data(), rs.data(), nullptr, dx.data(), kF32, dg.data(), db.data(), 2, 4, false));
  CHECK_BITEQUAL(dx, fvec(16, 3.0f));
}

TEST_CASE("softmax rejects causal sq > sk and negative sizes", "[errors][softmax]") {
  fvec x(64, 1.0f), y(64, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), kF32, 1, 4, 3, 1.0f, true));
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), kF32, -1, 2, 2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), kF32, 1, -2, 2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_forward(x.data(), y.data(), kF32, 1, 2, -2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_forward(nullptr, y.data(), kF32, 1, 2, 2, 1.0f, false));
  CHECK_INVALID_ARG(k.softmax_backward(x.data(), x.data(), y.data(), kF32, 1, -2, 2, 1.0f));
  CHECK_INVALID_ARG(k.softmax_backward(x.data(), nullptr, y.data(), kF32, 1, 2, 2, 1.0f));
  CHECK_BITEQUAL(y, fvec(64, 3.0f));
}

TEST_CASE("embedding rejects negative sizes and NULL pointers", "[errors][embedding]") {
  const std::vector<int32_t> ids = {0, 1};
  fvec table(16, 1.0f), out(16, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), 2, table.data(), kF32, 0, 4, -1, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), -2, table.data(), kF32, 0, 4, 2, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), 2, table.data(), kF32, 0, -4, 2, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(nullptr, 2, table.data(), kF32, 0, 4, 2, out.data()));
  CHECK_INVALID_ARG(k.embedding_forward(ids.data(), 2, table.data(), kF32, 0, 4, 2, nullptr));
  CHECK_BITEQUAL(out, fvec(16, 3.0f));
  CHECK_INVALID_ARG(k.embedding_backward(ids.data(), 2, out.data(), kF32, 0, 4, -1, table.data()));
  CHECK_INVALID_ARG(k.embedding_backward(ids.data(), 2, nullptr, kF32, 0, 4, 2, table.data()));
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
    CHECK_INVALID_ARG(k.dropout_forward(x.data(), y.data(), kF32, d));
    CHECK_INVALID_ARG(k.dropout_backward(x.data(), y.data(), kF32, d));
  }
  {
    ptdp::DropoutDesc d;
    d.p = 0.5f;
    d.block = ptdp::GlobalBlock::flat(16);
    CHECK_INVALID_ARG(k.dropout_forward(nullptr, y.data(), kF32, d));
    d.block.shape[0] = -16;
    d.block.global_shape[0] = -16;
    CHECK_INVALID_ARG(k.dropout_forward(x.data(), y.data(), kF32, d));
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
    CHECK_INVALID_ARG(k.dropout_forward(x.data(), y.data(), kF32, d));
  }
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
}

TEST_CASE("elementwise ops reject negative n and NULL pointers with n > 0", "[errors]") {
  fvec a(8, 1.0f), b(8, 2.0f), y(8, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG(k.add(a.data(), b.data(), y.data(), kF32, -1));
  CHECK_INVALID_ARG(k.add(nullptr, b.data(), y.data(), kF32, 8));
  CHECK_INVALID_ARG(k.add(a.data(), b.data(), nullptr, kF32, 8));
  CHECK_INVALID_ARG(k.axpy(1.0f, nullptr, y.data(), 8));
  CHECK_INVALID_ARG(k.axpy(1.0f, a.data(), y.data(), -8));
  CHECK_INVALID_ARG(k.scale(nullptr, 2.0f, 8));
  CHECK_INVALID_ARG(k.scale(y.data(), 2.0f, -1));
  CHECK_INVALID_ARG(k.fill(nullptr, DType::F32, 1.0, 8));
  CHECK_INVALID_ARG(k.fill(y.data(), DType::F32, 1.0, -8));
  CHECK_INVALID_ARG(k.sum_squares(nullptr, 8));
  CHECK_INVALID_ARG(k.sum_squares(a.data(), -8));
  CHECK_INVALID_ARG(k.gelu_forward(nullptr, y.data(), kF32, 8));
  CHECK_INVALID_ARG(k.gelu_forward(a.data(), y.data(), kF32, -8));
  CHECK_INVALID_ARG(k.gelu_backward(a.data(), nullptr, y.data(), kF32, 8));
  CHECK_INVALID_ARG(k.bias_add(y.data(), b.data(), kF32, -1, 4));
  CHECK_INVALID_ARG(k.bias_add(y.data(), nullptr, kF32, 2, 4));
  CHECK_INVALID_ARG(k.bias_grad(a.data(), kF32, y.data(), 2, -4, false));
  CHECK_INVALID_ARG(k.bias_grad(a.data(), kF32, nullptr, 2, 4, true));
  CHECK_BITEQUAL(y, fvec(8, 3.0f));
}

TEST_CASE("cross-entropy and optimizer ops reject bad sizes and NULL pointers",
          "[errors][cross_entropy][optimizer]") {
  fvec l(16, 1.0f), m(4, 3.0f), s(4, 3.0f), out(16, 3.0f);
  const std::vector<int32_t> t = {0, 1, 2, 3};
  auto& k = be();
  fvec tl(4, 3.0f);
  CHECK_INVALID_ARG(
      k.ce_forward_local(l.data(), kF32, t.data(), -1, 4, 0, m.data(), s.data(), tl.data()));
  CHECK_INVALID_ARG(
      k.ce_forward_local(nullptr, kF32, t.data(), 4, 4, 0, m.data(), s.data(), tl.data()));
  CHECK_INVALID_ARG(
      k.ce_forward_local(l.data(), kF32, t.data(), 4, -4, 0, m.data(), s.data(), tl.data()));
  CHECK_INVALID_ARG(
      k.ce_forward_local(l.data(), kF32, nullptr, 4, 4, 0, m.data(), s.data(), tl.data()));
  CHECK_INVALID_ARG(
      k.ce_forward_local(l.data(), kF32, t.data(), 4, 4, -1, m.data(), s.data(), tl.data()));
  CHECK_INVALID_ARG(k.ce_rescale(m.data(), s.data(), nullptr, 4));
  CHECK_INVALID_ARG(k.ce_rescale(m.data(), s.data(), s.data(), -4));
  CHECK_BITEQUAL(m, fvec(4, 3.0f));
  CHECK_BITEQUAL(s, fvec(4, 3.0f));
  CHECK_BITEQUAL(tl, fvec(4, 3.0f));
  CHECK_INVALID_ARG(k.ce_loss(m.data(), s.data(), nullptr, 4, out.data()));
  CHECK_INVALID_ARG(
      k.ce_backward(l.data(), kF32, m.data(), s.data(), t.data(), nullptr, 4, 4, 0, out.data()));
  CHECK_INVALID_ARG(
      k.ce_backward(l.data(), kF32, m.data(), s.data(), t.data(), s.data(), -4, 4, 0, out.data()));
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
  CHECK_NOTHROW(k.add(nullptr, nullptr, nullptr, kF32, 0));
  CHECK_NOTHROW(k.axpy(1.0f, nullptr, nullptr, 0));
  CHECK_NOTHROW(k.scale(nullptr, 1.0f, 0));
  CHECK_NOTHROW(k.fill(nullptr, DType::F16, 1.0, 0));
  CHECK_NOTHROW(k.gelu_forward(nullptr, nullptr, kF32, 0));
  CHECK_NOTHROW(k.cast(nullptr, DType::F32, nullptr, DType::BF16, 0));
  CHECK_NOTHROW(
      k.bias_dropout_add(nullptr, nullptr, nullptr, nullptr, kBF16, 0, 4, ptdp::DropoutDesc{}));
  CHECK_NOTHROW(k.ce_forward_local(nullptr, kF16, nullptr, 0, 4, 0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(k.ce_rescale(nullptr, nullptr, nullptr, 0));
  CHECK_NOTHROW(k.copy_2d(nullptr, 4, nullptr, 4, DType::I32, 0, 4));
  CHECK(k.sum_squares(nullptr, 0) == 0.0);
}

// ---- storage types and the new ops: the message names the op and the argument ---------------

TEST_CASE("ops taking a storage type reject non-floating types, naming the argument",
          "[errors][dtype]") {
  fvec a(16, 1.0f), b(16, 2.0f), y(16, 3.0f), st(4, 3.0f), st2(4, 3.0f);
  const std::vector<int32_t> ids = {0, 1, 2, 3};
  const auto bad = static_cast<DType>(9);
  auto& k = be();
  CHECK_INVALID_ARG_MSG(k.bias_add(y.data(), b.data(), DType::I32, 2, 4),
                        "bias_add: t = i32 is not a floating storage type (f32, bf16, f16)");
  CHECK_INVALID_ARG_MSG(k.bias_add(y.data(), b.data(), bad, 2, 4), "bias_add: t = 9 is not");
  CHECK_INVALID_ARG_MSG(k.bias_grad(a.data(), DType::I64, st.data(), 2, 4, false),
                        "bias_grad: t = i64");
  CHECK_INVALID_ARG_MSG(k.gelu_forward(a.data(), y.data(), DType::I32, 8), "gelu_forward: t = i32");
  CHECK_INVALID_ARG_MSG(k.gelu_backward(a.data(), b.data(), y.data(), DType::I32, 8),
                        "gelu_backward: t = i32");
  CHECK_INVALID_ARG_MSG(k.layernorm_forward(a.data(), b.data(), b.data(), y.data(), DType::I32,
                                            st.data(), st2.data(), 2, 4, 1e-5f),
                        "layernorm_forward: t = i32");
  CHECK_INVALID_ARG_MSG(
      k.layernorm_backward(a.data(), b.data(), st.data(), st.data(), b.data(), y.data(), DType::I32,
                           st2.data(), st2.data(), 2, 4, false),
      "layernorm_backward: t = i32");
  CHECK_INVALID_ARG_MSG(k.softmax_forward(a.data(), y.data(), DType::I32, 1, 4, 4, 1.0f, true),
                        "softmax_forward: t = i32");
  CHECK_INVALID_ARG_MSG(k.softmax_backward(a.data(), b.data(), y.data(), DType::I32, 1, 4, 4, 1.0f),
                        "softmax_backward: t = i32");
  ptdp::DropoutDesc d;
  d.block = ptdp::GlobalBlock::flat(16);
  CHECK_INVALID_ARG_MSG(k.dropout_forward(a.data(), y.data(), DType::I32, d),
                        "dropout_forward: t = i32");
  CHECK_INVALID_ARG_MSG(k.dropout_backward(a.data(), y.data(), DType::I64, d),
                        "dropout_backward: t = i64");
  CHECK_INVALID_ARG_MSG(k.add(a.data(), b.data(), y.data(), DType::I32, 8), "add: t = i32");
  CHECK_INVALID_ARG_MSG(k.fill_2d(y.data(), DType::I32, 4, 2, 4, 0.0f), "fill_2d: t = i32");
  CHECK_INVALID_ARG_MSG(k.copy_2d(y.data(), 4, a.data(), 4, bad, 2, 4),
                        "copy_2d: t = 9 is not a valid dtype");
  CHECK_INVALID_ARG_MSG(k.embedding_forward(ids.data(), 2, a.data(), DType::I32, 0, 4, 2, y.data()),
                        "embedding_forward: t = i32");
  CHECK_INVALID_ARG_MSG(
      k.embedding_backward(ids.data(), 2, a.data(), DType::I32, 0, 4, 2, y.data()),
      "embedding_backward: t = i32");
  CHECK_INVALID_ARG_MSG(k.ce_forward_local(a.data(), DType::I64, ids.data(), 4, 4, 0, st.data(),
                                           st.data(), st.data()),
                        "ce_forward_local: t = i64");
  CHECK_INVALID_ARG_MSG(k.ce_backward(a.data(), DType::I32, st.data(), st.data(), ids.data(),
                                      st.data(), 4, 4, 0, y.data()),
                        "ce_backward: t = i32");
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
  CHECK_BITEQUAL(st, fvec(4, 3.0f));
  CHECK_BITEQUAL(st2, fvec(4, 3.0f));
}

TEST_CASE("gemm rejects bad storage types and epilogues, naming the field", "[errors][gemm]") {
  fvec a(64, 1.0f), b(64, 1.0f), c(64, 5.0f), bias(8, 1.0f), aux(64, 2.0f);
  auto& k = be();
  auto d0 = gdesc(2, 3, 4);
  {
    auto d = d0;
    d.a_type = DType::I32;
    d.b_type = DType::I32;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()),
                          "gemm: a_type = i32 is not a floating storage type");
  }
  {
    auto d = d0;
    d.c_type = static_cast<DType>(-1);
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()), "gemm: c_type = -1");
  }
  {
    auto d = d0;
    d.a_type = DType::BF16;
    d.b_type = DType::F16;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()),
                          "gemm: b_type = f16 differs from a_type = bf16");
  }
  {
    auto d = d0;
    d.a_type = DType::F16;
    d.b_type = DType::F16;
    d.c_type = DType::BF16;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()),
                          "gemm: c_type = bf16 must be a_type = f16 or f32");
  }
  {
    auto d = d0;  // 16-bit operands cannot accumulate into another 16-bit type either
    d.c_type = DType::F16;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()), "gemm: c_type = f16");
  }
  {
    auto d = d0;
    d.epilogue = static_cast<ptdp::Epilogue>(7);
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()),
                          "gemm: epilogue = 7 is not a valid epilogue");
  }
  {
    auto d = d0;
    d.epilogue = ptdp::Epilogue::Bias;
    d.bias = bias.data();
    d.batch = 2;
    d.stride_c = 6;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()),
                          "gemm: epilogue bias needs batch == 1, got batch = 2");
  }
  {
    auto d = d0;
    d.epilogue = ptdp::Epilogue::Bias;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()), "gemm: bias is NULL");
    d.epilogue = ptdp::Epilogue::BiasGelu;
    d.aux = aux.data();
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()), "gemm: bias is NULL");
    d.bias = bias.data();
    d.aux = nullptr;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()), "gemm: aux is NULL");
    d.epilogue = ptdp::Epilogue::DGelu;
    CHECK_INVALID_ARG_MSG(k.gemm(d, a.data(), b.data(), c.data()), "gemm: aux is NULL");
  }
  CHECK_BITEQUAL(c, fvec(64, 5.0f));
  CHECK_BITEQUAL(aux, fvec(64, 2.0f));
}

TEST_CASE("bias_dropout_add rejects bad sizes, blocks, p and NULL pointers",
          "[errors][bias_dropout_add]") {
  fvec x(16, 1.0f), bias(4, 1.0f), res(16, 2.0f), y(16, 3.0f);
  auto& k = be();
  ptdp::DropoutDesc d;
  d.p = 0.25f;
  d.block = ptdp::GlobalBlock::flat(16);
  CHECK_INVALID_ARG_MSG(
      k.bias_dropout_add(x.data(), bias.data(), res.data(), y.data(), DType::I32, 4, 4, d),
      "bias_dropout_add: t = i32");
  CHECK_INVALID_ARG_MSG(
      k.bias_dropout_add(x.data(), bias.data(), res.data(), y.data(), kF32, -4, 4, d),
      "bias_dropout_add: rows must be >= 0");
  CHECK_INVALID_ARG_MSG(
      k.bias_dropout_add(x.data(), bias.data(), res.data(), y.data(), kF32, 4, 3, d),
      "bias_dropout_add: the dropout block has 16 elements, rows * cols = 12");
  CHECK_INVALID_ARG_MSG(
      k.bias_dropout_add(nullptr, bias.data(), res.data(), y.data(), kF32, 4, 4, d),
      "bias_dropout_add: x is NULL");
  CHECK_INVALID_ARG_MSG(k.bias_dropout_add(x.data(), bias.data(), nullptr, y.data(), kF32, 4, 4, d),
                        "bias_dropout_add: residual is NULL");
  CHECK_INVALID_ARG_MSG(
      k.bias_dropout_add(x.data(), bias.data(), res.data(), nullptr, kF32, 4, 4, d),
      "bias_dropout_add: y is NULL");
  d.p = 1.5f;
  CHECK_INVALID_ARG_MSG(
      k.bias_dropout_add(x.data(), bias.data(), res.data(), y.data(), kF32, 4, 4, d),
      "bias_dropout_add: p must be in [0, 1]");
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
  // bias may be NULL (no bias).
  d.p = 0.0f;
  CHECK_NOTHROW(k.bias_dropout_add(x.data(), nullptr, res.data(), y.data(), kF32, 4, 4, d));
  CHECK_BITEQUAL(y, fvec(16, 3.0f));
}

TEST_CASE("attention rejects empty shapes, bad dropout and NULL pointers, naming them",
          "[errors][attention]") {
  ptdp::AttentionDesc d;
  d.s = 3;
  d.b = 2;
  d.heads = 2;
  d.dh = 4;
  const std::size_t n_qkv = 3 * 2 * 2 * 3 * 4, n_ctx = 3 * 2 * 2 * 4, n_lse = 2 * 2 * 3;
  fvec qkv(n_qkv, 0.5f), ctx(n_ctx, 3.0f), lse(n_lse, 3.0f), dctx(n_ctx, 1.0f), dqkv(n_qkv, 3.0f),
      delta(n_lse, 3.0f);
  auto& k = be();
  const auto fwd = [&](const ptdp::AttentionDesc& dd) {
    k.attention_forward(dd, qkv.data(), ctx.data(), lse.data(), kF32);
  };
  const auto bwd = [&](const ptdp::AttentionDesc& dd) {
    k.attention_backward(dd, qkv.data(), ctx.data(), lse.data(), dctx.data(), dqkv.data(),
                         delta.data(), kF32);
  };
  for (const char* field : {"s", "b", "heads", "dh"}) {
    auto dd = d;
    int64_t& v = std::string(field) == "s"       ? dd.s
                 : std::string(field) == "b"     ? dd.b
                 : std::string(field) == "heads" ? dd.heads
                                                 : dd.dh;
    v = 0;
    CHECK_INVALID_ARG_MSG(fwd(dd), std::string("attention_forward: ") + field + " must be > 0");
    CHECK_INVALID_ARG_MSG(bwd(dd), std::string("attention_backward: ") + field + " must be > 0");
  }
  CHECK_INVALID_ARG_MSG(k.attention_forward(d, qkv.data(), ctx.data(), lse.data(), DType::I32),
                        "attention_forward: t = i32");
  CHECK_INVALID_ARG_MSG(k.attention_forward(d, nullptr, ctx.data(), lse.data(), kF32),
                        "attention_forward: qkv is NULL");
  CHECK_INVALID_ARG_MSG(k.attention_forward(d, qkv.data(), nullptr, lse.data(), kF32),
                        "attention_forward: ctx is NULL");
  CHECK_INVALID_ARG_MSG(k.attention_forward(d, qkv.data(), ctx.data(), nullptr, kF32),
                        "attention_forward: lse is NULL");
  CHECK_INVALID_ARG_MSG(k.attention_backward(d, qkv.data(), ctx.data(), lse.data(), nullptr,
                                             dqkv.data(), delta.data(), kF32),
                        "attention_backward: dctx is NULL");
  CHECK_INVALID_ARG_MSG(k.attention_backward(d, qkv.data(), ctx.data(), lse.data(), dctx.data(),
                                             nullptr, delta.data(), kF32),
                        "attention_backward: dqkv is NULL");
  CHECK_INVALID_ARG_MSG(k.attention_backward(d, qkv.data(), ctx.data(), lse.data(), dctx.data(),
                                             dqkv.data(), nullptr, kF32),
                        "attention_backward: delta is NULL");
  {
    auto dd = d;
    dd.scale = std::numeric_limits<float>::infinity();
    CHECK_INVALID_ARG_MSG(fwd(dd), "attention_forward: scale must be finite");
  }
  for (float p : {1.0f, -0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    auto dd = d;
    dd.dropout.p = p;
    INFO("p " << p);
    CHECK_INVALID_ARG_MSG(fwd(dd), "attention_forward: dropout p must be in [0, 1)");
    CHECK_INVALID_ARG_MSG(bwd(dd), "attention_backward: dropout p must be in [0, 1)");
  }
  {
    // With dropout the block must be the probabilities' [b, heads, s * s].
    auto dd = d;
    dd.dropout.p = 0.1f;
    dd.dropout.block = ptdp::GlobalBlock::flat(2 * 2 * 9);
    CHECK_INVALID_ARG_MSG(fwd(dd), "attention_forward: dropout block dim 0 shape 1 must be 2");
    for (int i = 0; i < 3; ++i) {
      dd.dropout.block.shape[i] = i == 0 ? 2 : i == 1 ? 2 : 9;
      dd.dropout.block.global_shape[i] = dd.dropout.block.shape[i];
    }
    dd.dropout.block.offset[1] = 1;  // heads 1..2 of 2
    CHECK_INVALID_ARG_MSG(fwd(dd), "attention_forward: block dim 1: offset 1 + shape 2 exceeds");
  }
  CHECK_BITEQUAL(ctx, fvec(n_ctx, 3.0f));
  CHECK_BITEQUAL(lse, fvec(n_lse, 3.0f));
  CHECK_BITEQUAL(dqkv, fvec(n_qkv, 3.0f));
  CHECK_BITEQUAL(delta, fvec(n_lse, 3.0f));
}

TEST_CASE("fused attention is supported on the CPU for every floating type",
          "[errors][attention]") {
  auto& k = be();
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    CHECK(k.fused_attention_supported(t, 64));
    CHECK(k.fused_attention_supported(t, 3));
    CHECK_FALSE(k.fused_attention_supported(t, 0));
  }
  CHECK_FALSE(k.fused_attention_supported(DType::I32, 64));
}

// ---- the Llama ops and grouped-query attention ------------------------------------------------

TEST_CASE("rmsnorm rejects bad sizes, eps, storage types and NULL pointers, naming them",
          "[errors][rmsnorm]") {
  fvec x(8, 1.0f), g(4, 1.0f), y(8, 3.0f), rs(2, 3.0f), dy(8, 1.0f), dx(8, 3.0f), dg(4, 3.0f);
  auto& k = be();
  const auto fwd = [&](const void* xx, const void* gg, void* yy, DType t, float* r, int64_t rows,
                       int64_t cols, float eps) {
    k.rmsnorm_forward(xx, gg, yy, t, r, rows, cols, eps);
  };
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), y.data(), kF32, rs.data(), 2, 0, 1e-5f),
                        "rmsnorm_forward: cols");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), y.data(), kF32, rs.data(), -1, 4, 1e-5f),
                        "rmsnorm_forward: rows");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), y.data(), kF32, rs.data(), 2, 4, -1e-5f),
                        "rmsnorm_forward: eps must be finite and >= 0");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), y.data(), kF32, rs.data(), 2, 4,
                            std::numeric_limits<float>::quiet_NaN()),
                        "rmsnorm_forward: eps");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), y.data(), DType::I32, rs.data(), 2, 4, 1e-5f),
                        "rmsnorm_forward: t = i32");
  CHECK_INVALID_ARG_MSG(fwd(nullptr, g.data(), y.data(), kF32, rs.data(), 2, 4, 1e-5f),
                        "rmsnorm_forward: x is NULL");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), nullptr, y.data(), kF32, rs.data(), 2, 4, 1e-5f),
                        "rmsnorm_forward: gamma is NULL");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), nullptr, kF32, rs.data(), 2, 4, 1e-5f),
                        "rmsnorm_forward: y is NULL");
  CHECK_INVALID_ARG_MSG(fwd(x.data(), g.data(), y.data(), kF32, nullptr, 2, 4, 1e-5f),
                        "rmsnorm_forward: rstd is NULL");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_backward(x.data(), g.data(), rs.data(), dy.data(), dx.data(),
                                           kF32, dg.data(), 2, 0, false),
                        "rmsnorm_backward: cols");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_backward(x.data(), g.data(), rs.data(), dy.data(), dx.data(),
                                           DType::I64, dg.data(), 2, 4, false),
                        "rmsnorm_backward: t = i64");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_backward(x.data(), g.data(), rs.data(), nullptr, dx.data(),
                                           kF32, dg.data(), 2, 4, false),
                        "rmsnorm_backward: dy is NULL");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_backward(x.data(), g.data(), nullptr, dy.data(), dx.data(),
                                           kF32, dg.data(), 2, 4, false),
                        "rmsnorm_backward: rstd is NULL");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_backward(x.data(), g.data(), rs.data(), dy.data(), dx.data(),
                                           kF32, nullptr, 0, 4, false),
                        "rmsnorm_backward: dgamma is NULL");  // even with rows == 0
  CHECK_BITEQUAL(y, fvec(8, 3.0f));
  CHECK_BITEQUAL(rs, fvec(2, 3.0f));
  CHECK_BITEQUAL(dx, fvec(8, 3.0f));
  CHECK_BITEQUAL(dg, fvec(4, 3.0f));
}

TEST_CASE("the split rmsnorm and row_dot reject bad sizes, widths and NULL pointers, naming them",
          "[errors][rmsnorm][split]") {
  fvec x(8, 1.0f), g(4, 1.0f), y(8, 3.0f), rs(2, 3.0f), sq(2, 4.0f), dot(2, 1.0f), dy(8, 1.0f),
      dx(8, 3.0f), dg(4, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_forward(x.data(), g.data(), sq.data(), y.data(), kF32,
                                                rs.data(), 2, 4, 3, 1e-5f),
                        "rmsnorm_split_forward: width = 3 is smaller than this device's cols = 4");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_forward(x.data(), g.data(), sq.data(), y.data(), kF32,
                                                rs.data(), 2, 0, 8, 1e-5f),
                        "rmsnorm_split_forward: cols");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_forward(x.data(), g.data(), sq.data(), y.data(), kF32,
                                                rs.data(), 2, 4, 8, -1.0f),
                        "rmsnorm_split_forward: eps must be finite and >= 0");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_forward(x.data(), g.data(), nullptr, y.data(), kF32,
                                                rs.data(), 2, 4, 8, 1e-5f),
                        "rmsnorm_split_forward: sum_sq is NULL");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_forward(x.data(), g.data(), sq.data(), y.data(),
                                                DType::I32, rs.data(), 2, 4, 8, 1e-5f),
                        "rmsnorm_split_forward: t = i32");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_backward(x.data(), g.data(), rs.data(), dot.data(),
                                                 dy.data(), dx.data(), kF32, dg.data(), 2, 4, 2,
                                                 false),
                        "rmsnorm_split_backward: width = 2 is smaller than this device's cols = 4");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_backward(x.data(), g.data(), rs.data(), nullptr,
                                                 dy.data(), dx.data(), kF32, dg.data(), 2, 4, 8,
                                                 false),
                        "rmsnorm_split_backward: dot is NULL");
  CHECK_INVALID_ARG_MSG(k.rmsnorm_split_backward(x.data(), g.data(), rs.data(), dot.data(),
                                                 dy.data(), dx.data(), kF32, nullptr, 0, 4, 8,
                                                 false),
                        "rmsnorm_split_backward: dgamma is NULL");  // even with rows == 0
  CHECK_INVALID_ARG_MSG(k.row_dot(x.data(), x.data(), nullptr, kF32, dot.data(), -1, 4),
                        "row_dot: rows");
  CHECK_INVALID_ARG_MSG(k.row_dot(x.data(), x.data(), nullptr, kF32, dot.data(), 2, -4),
                        "row_dot: cols");
  CHECK_INVALID_ARG_MSG(k.row_dot(x.data(), x.data(), nullptr, DType::I64, dot.data(), 2, 4),
                        "row_dot: t = i64");
  CHECK_INVALID_ARG_MSG(k.row_dot(x.data(), nullptr, nullptr, kF32, dot.data(), 2, 4),
                        "row_dot: b is NULL");
  CHECK_INVALID_ARG_MSG(k.row_dot(x.data(), x.data(), nullptr, kF32, nullptr, 2, 4),
                        "row_dot: out is NULL");
  CHECK_BITEQUAL(y, fvec(8, 3.0f));
  CHECK_BITEQUAL(rs, fvec(2, 3.0f));
  CHECK_BITEQUAL(dx, fvec(8, 3.0f));
  CHECK_BITEQUAL(dg, fvec(4, 3.0f));
  CHECK_BITEQUAL(dot, fvec(2, 1.0f));
}

TEST_CASE("swiglu rejects negative sizes, storage types and NULL pointers, naming them",
          "[errors][swiglu]") {
  fvec x(8, 1.0f), y(4, 3.0f), dy(4, 1.0f), dx(8, 3.0f);
  auto& k = be();
  CHECK_INVALID_ARG_MSG(k.swiglu_forward(x.data(), y.data(), kF32, -1, 2), "swiglu_forward: rows");
  CHECK_INVALID_ARG_MSG(k.swiglu_forward(x.data(), y.data(), kF32, 2, -2), "swiglu_forward: cols");
  CHECK_INVALID_ARG_MSG(k.swiglu_forward(x.data(), y.data(), DType::I32, 2, 2),
                        "swiglu_forward: t = i32");
  CHECK_INVALID_ARG_MSG(k.swiglu_forward(nullptr, y.data(), kF32, 2, 2),
                        "swiglu_forward: x is NULL");
  CHECK_INVALID_ARG_MSG(k.swiglu_forward(x.data(), nullptr, kF32, 2, 2),
                        "swiglu_forward: y is NULL");
  CHECK_INVALID_ARG_MSG(k.swiglu_backward(x.data(), dy.data(), dx.data(), kF32, 2, -1),
                        "swiglu_backward: cols");
  CHECK_INVALID_ARG_MSG(k.swiglu_backward(x.data(), dy.data(), dx.data(), DType::I64, 2, 2),
                        "swiglu_backward: t = i64");
  CHECK_INVALID_ARG_MSG(k.swiglu_backward(nullptr, dy.data(), dx.data(), kF32, 2, 2),
                        "swiglu_backward: x is NULL");
  CHECK_INVALID_ARG_MSG(k.swiglu_backward(x.data(), nullptr, dx.data(), kF32, 2, 2),
                        "swiglu_backward: dy is NULL");
  CHECK_INVALID_ARG_MSG(k.swiglu_backward(x.data(), dy.data(), nullptr, kF32, 2, 2),
                        "swiglu_backward: dx is NULL");
  CHECK_BITEQUAL(y, fvec(4, 3.0f));
  CHECK_BITEQUAL(dx, fvec(8, 3.0f));
}

TEST_CASE("rope rejects bad shapes, rot_dim, offsets and NULL pointers, naming them",
          "[errors][rope]") {
  ptdp::RopeDesc d;
  d.s = 2;
  d.b = 1;
  d.groups = 2;
  d.q_per_group = 1;
  d.dh = 4;
  d.rot_dim = 4;
  const fvec inv_freq = {1.0f, 0.1f};
  d.inv_freq = inv_freq.data();
  fvec qkv(2 * 1 * 2 * 3 * 4, 3.0f);
  auto& k = be();
  for (const char* op : {"rope_forward", "rope_backward"}) {
    const bool fwd = std::string(op) == "rope_forward";
    const auto call = [&](const ptdp::RopeDesc& dd, void* p, DType t) {
      if (fwd) k.rope_forward(p, t, dd);
      else k.rope_backward(p, t, dd);
    };
    const std::string o = std::string(op) + ": ";
    INFO(op);
    for (int64_t rd : {3, 0, -2, 6}) {
      auto dd = d;
      dd.rot_dim = rd;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32),
                            o + "rot_dim = " + std::to_string(rd) + " must be even and in (0, dh = 4]");
    }
    CHECK_INVALID_ARG_MSG(call(d, qkv.data(), DType::I32), o + "t = i32");
    for (float a : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
      auto dd = d;
      dd.amplitude = a;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32),
                            o + "amplitude = " + std::to_string(a) + " must be finite and > 0");
    }
    {
      auto dd = d;
      dd.groups = 0;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32), o + "groups must be > 0");
    }
    {
      auto dd = d;
      dd.q_per_group = 0;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32), o + "q_per_group must be > 0");
    }
    {
      auto dd = d;
      dd.dh = 0;
      dd.rot_dim = 0;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32), o + "dh must be > 0");
    }
    {
      auto dd = d;
      dd.s = -1;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32), o + "s");
    }
    {
      auto dd = d;
      dd.position_offset = -1;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32), o + "position_offset");
    }
    {
      auto dd = d;
      dd.inv_freq = nullptr;
      CHECK_INVALID_ARG_MSG(call(dd, qkv.data(), kF32), o + "inv_freq is NULL");
    }
    CHECK_INVALID_ARG_MSG(call(d, nullptr, kF32), o + "qkv is NULL");
  }
  CHECK_BITEQUAL(qkv, fvec(qkv.size(), 3.0f));
}

TEST_CASE("attention rejects groups that do not divide heads, naming them",
          "[errors][attention][gqa]") {
  ptdp::AttentionDesc d;
  d.s = 3;
  d.b = 1;
  d.heads = 6;
  d.dh = 2;
  fvec qkv(3 * 6 * 3 * 2, 0.5f), ctx(3 * 6 * 2, 3.0f), lse(6 * 3, 3.0f), dctx(ctx.size(), 1.0f),
      dqkv(qkv.size(), 3.0f), delta(lse.size(), 3.0f);
  auto& k = be();
  for (int64_t groups : {4, 12, 5}) {
    auto dd = d;
    dd.groups = groups;
    const std::string msg = "groups = " + std::to_string(groups) + " does not divide heads = 6";
    CHECK_INVALID_ARG_MSG(k.attention_forward(dd, qkv.data(), ctx.data(), lse.data(), kF32),
                          "attention_forward: " + msg);
    CHECK_INVALID_ARG_MSG(k.attention_backward(dd, qkv.data(), ctx.data(), lse.data(),
                                               dctx.data(), dqkv.data(), delta.data(), kF32),
                          "attention_backward: " + msg);
  }
  {
    auto dd = d;
    dd.groups = -2;
    CHECK_INVALID_ARG_MSG(k.attention_forward(dd, qkv.data(), ctx.data(), lse.data(), kF32),
                          "attention_forward: groups");
  }
  CHECK_BITEQUAL(ctx, fvec(ctx.size(), 3.0f));
  CHECK_BITEQUAL(lse, fvec(lse.size(), 3.0f));
  CHECK_BITEQUAL(dqkv, fvec(dqkv.size(), 3.0f));
  CHECK_BITEQUAL(delta, fvec(delta.size(), 3.0f));
}

TEST_CASE("grouped_gemm rejects bad sizes, totals, layouts and types before any write", "[errors][grouped_gemm]") {
  fvec a(64, 1.0f), b(64, 1.0f), c(64, 5.0f);
  const std::vector<int64_t> sizes = {2, 3}, negative = {2, -1};
  const auto desc = [&] {
    ptdp::GroupedGemmDesc d;
    d.groups = 2;
    d.sizes = sizes.data();
    d.m = 5;
    d.n = 2;
    d.k = 3;
    return d;
  };
  auto& k = be();
  {
    auto d = desc();
    d.sizes = negative.data();
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "grouped_gemm: sizes[1] must be >= 0");
  }
  {
    auto d = desc();
    d.m = 6;
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "m = 6 differs from sum(sizes) = 5");
  }
  {
    auto d = desc();
    d.varying = ptdp::GroupedDim::K;
    d.k = 4;
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "k = 4 differs from sum(sizes) = 5");
    d.k = 5;
    d.trans_b = true;
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "trans_b applies to varying M only");
  }
  {
    auto d = desc();
    d.sizes = nullptr;
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "grouped_gemm: sizes is NULL");
  }
  {
    auto d = desc();
    d.lda = 2;  // A rows are k = 3 long
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "grouped_gemm: lda = 2");
  }
  {
    auto d = desc();
    d.stride = 5;  // B_g [3, 2] spans 6 elements
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "grouped_gemm: stride = 5");
  }
  {
    auto d = desc();
    d.a_type = DType::BF16;
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "b_type = f32 differs from a_type = bf16");
    d.b_type = DType::BF16;
    d.c_type = DType::F16;
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "c_type = f16 must be");
  }
  {
    auto d = desc();
    d.varying = static_cast<ptdp::GroupedDim>(7);
    CHECK_INVALID_ARG_MSG(k.grouped_gemm(d, a.data(), b.data(), c.data()), "varying = 7");
  }
  CHECK_INVALID_ARG_MSG(k.grouped_gemm(desc(), nullptr, b.data(), c.data()), "grouped_gemm: a is NULL");
  CHECK_INVALID_ARG_MSG(k.grouped_gemm(desc(), a.data(), b.data(), nullptr), "grouped_gemm: c is NULL");
  CHECK_BITEQUAL(c, fvec(64, 5.0f));
}

TEST_CASE("moe_route refuses experts out of range and names the first bad slot", "[errors][moe]") {
  const std::vector<int32_t> idx = {0, 1, 3, -2, 9, 0};
  std::vector<int32_t> row_of(6, 77);
  std::vector<int64_t> counts(4, 77);
  auto& k = be();
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), 3, 2, 4, row_of.data(), counts.data()),
                        "moe_route: indices[1, 1] = -2 is outside [-1, experts = 4)");
  CHECK(row_of == std::vector<int32_t>(6, 77));
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), 3, 0, 4, row_of.data(), counts.data()), "moe_route: k must be > 0");
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), 3, 2, 0, row_of.data(), counts.data()),
                        "moe_route: experts must be > 0");
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), 3, 2, 5000, row_of.data(), counts.data()),
                        "moe_route: experts = 5000 exceeds 4096");
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), -1, 2, 4, row_of.data(), counts.data()),
                        "moe_route: tokens must be >= 0");
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), int64_t{1} << 30, 4, 4, row_of.data(), counts.data()),
                        "moe_route: tokens * k = 1073741824 * 4 exceeds 2^31 - 1");
  CHECK_INVALID_ARG_MSG(k.moe_route(idx.data(), 3, 2, 4, row_of.data(), nullptr), "moe_route: counts is NULL");
  CHECK_INVALID_ARG_MSG(k.moe_route(nullptr, 3, 2, 4, row_of.data(), counts.data()), "moe_route: indices is NULL");
}

TEST_CASE("moe permute and unpermute refuse bad sizes, types and NULL buffers", "[errors][moe]") {
  fvec x(32, 1.0f), y(32, 2.0f), p(8, 0.5f), dp(8, 3.0f);
  const std::vector<int32_t> row_of = {0, 1, 2, 3};
  auto& k = be();
  CHECK_INVALID_ARG_MSG(k.moe_permute(x.data(), kF32, row_of.data(), 2, 0, 4, 4, y.data()),
                        "moe_permute: k must be > 0");
  CHECK_INVALID_ARG_MSG(k.moe_permute(x.data(), kF32, row_of.data(), 2, 2, -4, 4, y.data()),
                        "moe_permute: h must be >= 0");
  CHECK_INVALID_ARG_MSG(k.moe_permute(x.data(), static_cast<DType>(9), row_of.data(), 2, 2, 4, 4, y.data()),
                        "moe_permute: t = 9 is not a valid dtype");
  CHECK_INVALID_ARG_MSG(k.moe_permute(x.data(), kF32, nullptr, 2, 2, 4, 4, y.data()), "moe_permute: row_of is NULL");
  CHECK_INVALID_ARG_MSG(k.moe_unpermute(x.data(), DType::I32, p.data(), row_of.data(), 2, 2, 4, 4, y.data()),
                        "moe_unpermute: t = i32 is not a floating storage type");
  CHECK_INVALID_ARG_MSG(k.moe_unpermute(x.data(), kF32, p.data(), row_of.data(), 2, 2, 4, -1, y.data()),
                        "moe_unpermute: rows must be >= 0");
  CHECK_INVALID_ARG_MSG(k.moe_unpermute(x.data(), kF32, p.data(), row_of.data(), 2, 2, 4, 4, nullptr),
                        "moe_unpermute: y is NULL");
  CHECK_INVALID_ARG_MSG(k.moe_unpermute_backward(y.data(), x.data(), kF32, nullptr, row_of.data(), 2, 2, 4, 4,
                                                 x.data(), dp.data()),
                        "moe_unpermute_backward: probs is NULL");
  CHECK_INVALID_ARG_MSG(k.moe_unpermute_backward(y.data(), x.data(), kF32, p.data(), row_of.data(), 2, 2, 4, 4,
                                                 x.data(), nullptr),
                        "moe_unpermute_backward: dprobs is NULL");
  CHECK_BITEQUAL(y, fvec(32, 2.0f));
  CHECK_BITEQUAL(dp, fvec(8, 3.0f));
}

TEST_CASE("the MoE router refuses what Megatron-Core refuses, naming the argument", "[errors][moe]") {
  fvec logits(64, 0.0f), probs(16, 4.0f), bias(8, 0.0f), dl(64, 4.0f);
  std::vector<int32_t> idx(16, 4);
  const auto desc = [] {
    ptdp::RouterDesc d;
    d.tokens = 2;
    d.experts = 8;
    d.topk = 2;
    return d;
  };
  auto& k = be();
  const auto fwd = [&](const ptdp::RouterDesc& d, const float* b = nullptr) {
    k.moe_router_forward(d, logits.data(), b, idx.data(), probs.data());
  };
  {
    auto d = desc();
    d.topk = 9;
    CHECK_INVALID_ARG_MSG(fwd(d), "moe_router_forward: topk = 9 must be in [1, experts = 8]");
    d.topk = 0;
    CHECK_INVALID_ARG_MSG(fwd(d), "moe_router_forward: topk = 0");
  }
  {
    auto d = desc();
    d.num_groups = 3;
    d.group_topk = 1;
    CHECK_INVALID_ARG_MSG(fwd(d), "num_groups = 3 does not divide experts = 8");
    d.num_groups = 4;
    d.group_topk = 5;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_topk = 5 must be in [1, num_groups = 4]");
    d.topk = 3;
    d.group_topk = 2;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_topk = 2 does not divide topk = 3");
    d.topk = 6;
    d.group_topk = 2;
    CHECK_INVALID_ARG_MSG(fwd(d), "topk / group_topk = 3 exceeds the experts per group, 2");
    // A fixed group score size lifts the divisibility rule but not the capacity of the groups.
    d.group_score_topk = 1;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_topk = 2 groups of 2 experts hold fewer than topk = 6");
    d.group_score_topk = 3;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_score_topk = 3 exceeds the experts per group, 2");
    d.group_score_topk = -1;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_score_topk");
  }
  {
    auto d = desc();
    d.group_score_topk = 2;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_score_topk = 2 needs num_groups > 0");
  }
  {
    auto d = desc();
    d.group_topk = 2;
    CHECK_INVALID_ARG_MSG(fwd(d), "group_topk = 2 needs num_groups > 0");
  }
  CHECK_INVALID_ARG_MSG(fwd(desc(), bias.data()), "moe_router_forward: expert_bias needs the sigmoid score function");
  {
    auto d = desc();
    d.score = ptdp::RouterScore::Sigmoid;
    d.pre_softmax = true;
    CHECK_INVALID_ARG_MSG(fwd(d), "pre_softmax applies to the softmax score function only");
    d.pre_softmax = false;
    d.score = static_cast<ptdp::RouterScore>(4);
    CHECK_INVALID_ARG_MSG(fwd(d), "moe_router_forward: score = 4 is neither softmax (0) nor sigmoid (1)");
  }
  {
    auto d = desc();
    d.scaling_factor = std::numeric_limits<float>::infinity();
    CHECK_INVALID_ARG_MSG(fwd(d), "moe_router_forward: scaling_factor must be finite");
    d = desc();
    d.experts = 0;
    CHECK_INVALID_ARG_MSG(fwd(d), "moe_router_forward: experts must be > 0");
  }
  CHECK_INVALID_ARG_MSG(k.moe_router_backward(desc(), logits.data(), idx.data(), nullptr, dl.data(), false),
                        "moe_router_backward: dprobs is NULL");
  CHECK_INVALID_ARG_MSG(k.moe_aux_scores_forward(ptdp::RouterScore::Softmax, logits.data(), 2, 0, dl.data()),
                        "moe_aux_scores_forward: experts must be > 0");
  CHECK_INVALID_ARG_MSG(k.moe_aux_scores_backward(ptdp::RouterScore::Sigmoid, logits.data(), nullptr, 2, 8,
                                                  dl.data(), true),
                        "moe_aux_scores_backward: dscores is NULL");
  CHECK_INVALID_ARG_MSG(k.moe_router_lse(logits.data(), -2, 8, dl.data()), "moe_router_lse: tokens must be >= 0");
  CHECK_INVALID_ARG_MSG(k.moe_router_z_loss_backward(logits.data(), probs.data(), std::nanf(""), 2, 8, dl.data(),
                                                     true),
                        "moe_router_z_loss_backward: scale must be finite");
  CHECK(idx == std::vector<int32_t>(16, 4));
  CHECK_BITEQUAL(probs, fvec(16, 4.0f));
  CHECK_BITEQUAL(dl, fvec(64, 4.0f));
}

TEST_CASE("newton_schulz rejects bad arguments, naming them, before touching x", "[newton_schulz][errors]") {
  fvec x(12, 0.5f);
  const fvec x0 = x;
  auto& k = be();
  auto good = [] {
    ptdp::NewtonSchulzDesc d;
    d.rows = 3;
    d.cols = 4;
    d.steps = 5;
    d.num_sets = 1;
    d.coefficients[0][0] = 3.4445f;
    d.coefficients[0][1] = -4.775f;
    d.coefficients[0][2] = 2.0315f;
    return d;
  };
  {
    auto d = good();
    d.rows = 0;
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d), "rows must be > 0, got 0");
  }
  {
    auto d = good();
    d.cols = -2;
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d), "cols must be > 0, got -2");
  }
  CHECK_INVALID_ARG_MSG(k.newton_schulz(nullptr, good()), "newton_schulz: x is NULL");
  for (int steps : {0, 101}) {
    auto d = good();
    d.steps = steps;
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d), "steps must be in [1, 100], got " + std::to_string(steps));
  }
  for (int sets : {0, 9}) {
    auto d = good();
    d.num_sets = sets;
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d), "num_sets must be in [1, 8], got " + std::to_string(sets));
  }
  {
    auto d = good();
    d.coefficients[0][1] = std::numeric_limits<float>::quiet_NaN();
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d), "coefficients[0][1] must be finite");
  }
  for (float eps : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    auto d = good();
    d.eps = eps;
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d), "newton_schulz: eps must be finite and > 0");
  }
  for (int precision : {-1, 3}) {
    auto d = good();
    d.precision = precision;
    CHECK_INVALID_ARG_MSG(k.newton_schulz(x.data(), d),
                          "precision must be 0 (fp32), 1 (tf32) or 2 (bf16), got " + std::to_string(precision));
  }
  CHECK(x == x0);
  // The steps' bound is inclusive: 100 steps run.
  auto d = good();
  d.steps = 100;
  k.newton_schulz(x.data(), d);
  CHECK(x != x0);
}
