// 16-bit storage (bf16, f16): every activation op run on 16-bit buffers against the same op in
// fp32 on the widened (already rounded) inputs; since compute is fp32 and each result is rounded
// once, the two differ by at most one unit in the last place of the storage type. fp32 outputs
// (statistics, parameter gradients) must match the fp32 op exactly. Also: GEMM with 16-bit
// operands and fp32 accumulation, every epilogue against the composition of plain ops, and
// bias_dropout_add against dropout_forward(x + bias) + residual.
#include <catch2/catch.hpp>

#include "base/half.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;
using ptdp::Epilogue;
using ptdp::GemmDesc;

namespace {

using hvec = std::vector<uint16_t>;


/// Relative spacing of t at 1 (one unit in the last place, relative).
double ulp(DType t) { return t == DType::BF16 ? 1.0 / 128.0 : 1.0 / 1024.0; }

/// Values below f16's normal range have an absolute spacing of 2^-24.
double sub_atol(DType t) { return t == DType::F16 ? std::ldexp(1.0, -24) : 0.0; }

/// got (16-bit) is within one unit in the last place of t of want (fp32).
#define CHECK_ULP(got16, t, want32) \
  CHECK_ALLCLOSE(from16((got16), (t)), to_d(want32), sub_atol(t), ulp(t))

const DType k16[] = {DType::BF16, DType::F16};

const char* name(DType t) { return ptdp::dtype_name(t); }

}  // namespace

// ---- elementwise and row ops -----------------------------------------------------------------

TEST_CASE("16-bit bias_add, add and gelu equal the fp32 ops rounded once", "[mixed]") {
  const int64_t rows = 7, cols = 33, n = rows * cols;
  for (DType t : k16) {
    INFO(name(t));
    Rand r(1);
    const fvec x = rounded(r.uniform(n, -4.0f, 4.0f), t);
    const fvec y = rounded(r.uniform(n, -4.0f, 4.0f), t);
    const fvec bias = rounded(r.uniform(cols), t);
    const hvec x16 = to16(x, t), y16 = to16(y, t), b16 = to16(bias, t);

    fvec want = x;
    be().bias_add(want.data(), bias.data(), kF32, rows, cols);
    hvec got = x16;
    be().bias_add(got.data(), b16.data(), t, rows, cols);
    CHECK_ULP(got, t, want);

    be().add(x.data(), y.data(), want.data(), kF32, n);
    be().add(x16.data(), y16.data(), got.data(), t, n);
    CHECK_ULP(got, t, want);

    be().gelu_forward(x.data(), want.data(), kF32, n);
    be().gelu_forward(x16.data(), got.data(), t, n);
    CHECK_ULP(got, t, want);
    hvec inplace = x16;
    be().gelu_forward(inplace.data(), inplace.data(), t, n);
    CHECK(inplace == got);

    be().gelu_backward(x.data(), y.data(), want.data(), kF32, n);
    be().gelu_backward(x16.data(), y16.data(), got.data(), t, n);
    CHECK_ULP(got, t, want);
  }
}

TEST_CASE("16-bit bias_grad and embedding_backward accumulate into fp32 exactly as fp32 does",
          "[mixed]") {
  const int64_t rows = 9, cols = 70;
  for (DType t : k16) {
    INFO(name(t));
    Rand r(2);
    const fvec dy = rounded(r.uniform(rows * cols), t);
    const hvec dy16 = to16(dy, t);
    for (bool accumulate : {false, true}) {
      const fvec init = r.uniform(cols);
      fvec want = init, got = init;
      be().bias_grad(dy.data(), kF32, want.data(), rows, cols, accumulate);
      be().bias_grad(dy16.data(), t, got.data(), rows, cols, accumulate);
      CHECK_BITEQUAL(got, want);
    }
    const int64_t vocab = 5, h = cols;
    const std::vector<int32_t> ids = r.ids(rows, 0, static_cast<int32_t>(2 * vocab - 1));
    fvec want(static_cast<std::size_t>(vocab * h), 0.5f), got = want;
    be().embedding_backward(ids.data(), rows, dy.data(), kF32, 3, vocab, h, want.data());
    be().embedding_backward(ids.data(), rows, dy16.data(), t, 3, vocab, h, got.data());
    CHECK_BITEQUAL(got, want);
  }
}

TEST_CASE("16-bit embedding_forward copies rows exactly", "[mixed]") {
  const int64_t vocab = 6, h = 5;
  for (DType t : k16) {
    Rand r(3);
    const hvec table = to16(r.uniform(vocab * h), t);
    const std::vector<int32_t> ids = {4, 2, 9, 3, -1};
    hvec out(ids.size() * h, 0x1234);
    be().embedding_forward(ids.data(), static_cast<int64_t>(ids.size()), table.data(), t, 2, vocab,
                           h, out.data());
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < h; ++c) {
        const int64_t row = ids[i] - 2;
        const uint16_t want =
            row >= 0 && row < vocab ? table[static_cast<std::size_t>(row * h + c)] : 0;
        CHECK(out[i * h + static_cast<std::size_t>(c)] == want);
      }
  }
}

TEST_CASE("16-bit layernorm: y and dx within one ulp, statistics and dgamma/dbeta exact",
          "[mixed][layernorm]") {
  const int64_t rows = 5, cols = 67;
  for (DType t : k16) {
    INFO(name(t));
    Rand r(4);
    fvec x = r.uniform(rows * cols, -1.0f, 1.0f);
    for (float& v : x) v += 1.5f;
    x = rounded(x, t);
    const fvec g = rounded(r.uniform(cols, 0.5f, 1.5f), t), b = rounded(r.uniform(cols), t);
    const fvec dy = rounded(r.uniform(rows * cols), t);
    const hvec x16 = to16(x, t), g16 = to16(g, t), b16 = to16(b, t), dy16 = to16(dy, t);
    const std::size_t R = static_cast<std::size_t>(rows);
    fvec y(x.size()), m(R), rs(R), m16(R), rs16(R);
    hvec y16(x.size());
    be().layernorm_forward(x.data(), g.data(), b.data(), y.data(), kF32, m.data(), rs.data(), rows,
                           cols, 1e-5f);
    be().layernorm_forward(x16.data(), g16.data(), b16.data(), y16.data(), t, m16.data(),
                           rs16.data(), rows, cols, 1e-5f);
    CHECK_ULP(y16, t, y);
    CHECK_BITEQUAL(m16, m);
    CHECK_BITEQUAL(rs16, rs);

    fvec dx(x.size()), dg(static_cast<std::size_t>(cols)), db(dg.size());
    hvec dx16(x.size());
    fvec dg16(dg.size()), db16(dg.size());
    be().layernorm_backward(x.data(), g.data(), m.data(), rs.data(), dy.data(), dx.data(), kF32,
                            dg.data(), db.data(), rows, cols, false);
    be().layernorm_backward(x16.data(), g16.data(), m.data(), rs.data(), dy16.data(), dx16.data(),
                            t, dg16.data(), db16.data(), rows, cols, false);
    CHECK_ULP(dx16, t, dx);
    CHECK_BITEQUAL(dg16, dg);
    CHECK_BITEQUAL(db16, db);
  }
}

TEST_CASE("16-bit softmax forward (causal) and backward within one ulp", "[mixed][softmax]") {
  const int64_t batch = 3, sq = 9, sk = 13;
  for (DType t : k16) {
    INFO(name(t));
    Rand r(5);
    const fvec x = rounded(r.uniform(batch * sq * sk, -3.0f, 3.0f), t);
    const fvec dy = rounded(r.uniform(batch * sq * sk), t);
    const hvec x16 = to16(x, t), dy16 = to16(dy, t);
    fvec y(x.size());
    hvec y16(x.size());
    be().softmax_forward(x.data(), y.data(), kF32, batch, sq, sk, 0.7f, true);
    be().softmax_forward(x16.data(), y16.data(), t, batch, sq, sk, 0.7f, true);
    CHECK_ULP(y16, t, y);
    hvec inplace = x16;  // y aliasing x: still one rounding
    be().softmax_forward(inplace.data(), inplace.data(), t, batch, sq, sk, 0.7f, true);
    CHECK(inplace == y16);

    // Backward from the 16-bit probabilities.
    const fvec yr = from16(y16, t);
    fvec dx(x.size());
    hvec dx16(x.size());
    be().softmax_backward(yr.data(), dy.data(), dx.data(), kF32, batch, sq, sk, 0.7f);
    be().softmax_backward(y16.data(), dy16.data(), dx16.data(), t, batch, sq, sk, 0.7f);
    CHECK_ULP(dx16, t, dx);
  }
}

TEST_CASE("16-bit dropout draws the fp32 mask and rounds once", "[mixed][dropout]") {
  const int64_t n = 1000;
  for (DType t : k16) {
    INFO(name(t));
    Rand r(6);
    const fvec x = rounded(r.uniform(n), t);
    const hvec x16 = to16(x, t);
    ptdp::DropoutDesc d;
    d.p = 0.3f;
    d.rng = ptdp::PhiloxStream{11, 12};
    d.block = ptdp::GlobalBlock::flat(n);
    fvec y(x.size());
    hvec y16(x.size());
    be().dropout_forward(x.data(), y.data(), kF32, d);
    be().dropout_forward(x16.data(), y16.data(), t, d);
    CHECK_ULP(y16, t, y);
    const fvec yw = from16(y16, t);
    std::size_t zeros_differ = 0;
    for (std::size_t i = 0; i < y.size(); ++i) zeros_differ += (y[i] == 0.0f) != (yw[i] == 0.0f);
    CHECK(zeros_differ == 0);
    be().dropout_backward(x.data(), y.data(), kF32, d);
    be().dropout_backward(x16.data(), y16.data(), t, d);
    CHECK_ULP(y16, t, y);
  }
}

TEST_CASE("16-bit cross-entropy: statistics exact, dlogits within one ulp",
          "[mixed][cross_entropy]") {
  const int64_t rows = 4, v = 300;
  for (DType t : k16) {
    INFO(name(t));
    Rand r(7);
    const fvec logits = rounded(r.uniform(rows * v, -5.0f, 5.0f), t);
    const hvec l16 = to16(logits, t);
    const std::vector<int32_t> targets = r.ids(rows, 0, static_cast<int32_t>(v - 1));
    const std::size_t R = static_cast<std::size_t>(rows);
    fvec m(R), s(R), tl(R), m16(R), s16(R), tl16(R);
    be().ce_forward_local(logits.data(), kF32, targets.data(), rows, v, 0, m.data(), s.data(),
                          tl.data());
    be().ce_forward_local(l16.data(), t, targets.data(), rows, v, 0, m16.data(), s16.data(),
                          tl16.data());
    CHECK_BITEQUAL(m16, m);
    CHECK_BITEQUAL(s16, s);
    CHECK_BITEQUAL(tl16, tl);
    const fvec dloss = r.uniform(rows, 0.5f, 1.5f);
    fvec dl(logits.size());
    hvec dl16(logits.size());
    be().ce_backward(logits.data(), kF32, m.data(), s.data(), targets.data(), dloss.data(), rows, v,
                     0, dl.data());
    be().ce_backward(l16.data(), t, m.data(), s.data(), targets.data(), dloss.data(), rows, v, 0,
                     dl16.data());
    CHECK_ULP(dl16, t, dl);
    hvec inplace = l16;  // dlogits aliasing logits, the target's gradient rounded once too
    be().ce_backward(inplace.data(), t, m.data(), s.data(), targets.data(), dloss.data(), rows, v,
                     0, inplace.data());
    CHECK(inplace == dl16);
  }
}

// ---- GEMM ----------------------------------------------------------------------------------

namespace {

/// Random A and B of na and nb elements, rounded to t: as fp32 (the widened values the
/// product must be computed from) and as 16-bit buffers.
struct Operands {
  fvec a, b;
  hvec a16, b16;
};

Operands operands(DType t, int64_t na, int64_t nb, uint32_t seed) {
  Rand r(seed);
  Operands o;
  o.a = rounded(r.uniform(na), t);
  o.b = rounded(r.uniform(nb), t);
  o.a16 = to16(o.a, t);
  o.b16 = to16(o.b, t);
  return o;
}

}  // namespace

TEST_CASE("gemm: bf16 and f16 operands accumulating into fp32 C with beta = 1", "[mixed][gemm]") {
  for (DType t : k16) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        GemmDesc d;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = 13;
        d.n = 7;
        d.k = 29;
        d.lda = (ta ? d.m : d.k) + 3;  // padded rows must be honoured when widening
        d.ldb = (tb ? d.k : d.n) + 1;
        d.beta = 1.0f;
        d.alpha = 0.75f;
        const Operands o = operands(t, (ta ? d.k : d.m) * d.lda, (tb ? d.n : d.k) * d.ldb, 8);
        Rand r(9);
        const fvec c0 = r.uniform(d.m * d.n);
        // Reference: double products of the rounded operands, accumulated into C.
        dvec want = to_d(c0);
        ref_gemm1(ta, tb, d.m, d.n, d.k, d.alpha, to_d(o.a).data(), d.lda, to_d(o.b).data(), d.ldb,
                  1.0, want.data(), d.n);
        GemmDesc d16 = d;
        d16.a_type = d16.b_type = t;
        fvec c = c0;
        INFO(name(t) << " trans_a " << ta << " trans_b " << tb);
        be().gemm(d16, o.a16.data(), o.b16.data(), c.data());
        CHECK_ALLCLOSE(c, want, 1e-5, 1e-5);
        // Twice: wgrad accumulation over two microbatches.
        be().gemm(d16, o.a16.data(), o.b16.data(), c.data());
        for (std::size_t i = 0; i < want.size(); ++i) want[i] = 2.0 * want[i] - c0[i];
        CHECK_ALLCLOSE(c, want, 1e-5, 1e-5);
      }
  }
}

TEST_CASE("gemm: 16-bit C is the fp32 result rounded once, with beta and padded ldc",
          "[mixed][gemm]") {
  for (DType t : k16) {
    for (float beta : {0.0f, 0.5f}) {
      GemmDesc d;
      d.trans_b = true;
      d.m = 9;
      d.n = 11;
      d.k = 17;
      d.ldc = d.n + 4;
      d.beta = beta;
      const Operands o = operands(t, d.m * d.k, d.n * d.k, 10);
      Rand r(11);
      const fvec c0 = rounded(r.uniform(d.m * d.ldc), t);
      fvec want = c0;
      be().gemm(d, o.a.data(), o.b.data(), want.data());
      GemmDesc d16 = d;
      d16.a_type = d16.b_type = d16.c_type = t;
      hvec c = to16(c0, t);
      INFO(name(t) << " beta " << beta);
      be().gemm(d16, o.a16.data(), o.b16.data(), c.data());
      CHECK_ULP(c, t, want);  // the padding columns keep their (exact) old values
    }
  }
}

TEST_CASE("gemm: strided-batched 16-bit attention reads from an interleaved QKV buffer",
          "[mixed][gemm]") {
  const int64_t s = 6, heads = 3, dh = 4, row = heads * 3 * dh;
  for (DType t : k16) {
    Rand r(12);
    const fvec qkv = rounded(r.uniform(s * row), t);
    const hvec qkv16 = to16(qkv, t);
    GemmDesc d;
    d.trans_b = true;
    d.m = d.n = s;
    d.k = dh;
    d.alpha = 0.5f;
    d.lda = d.ldb = row;
    d.batch = heads;
    d.stride_a = d.stride_b = 3 * dh;
    d.stride_c = s * s;
    fvec want(static_cast<std::size_t>(heads * s * s));
    be().gemm(d, qkv.data(), qkv.data() + dh, want.data());
    for (DType ct : {t, DType::F32}) {
      GemmDesc d16 = d;
      d16.a_type = d16.b_type = t;
      d16.c_type = ct;
      INFO(name(t) << " c_type " << name(ct));
      if (ct == DType::F32) {
        fvec c(want.size());
        be().gemm(d16, qkv16.data(), qkv16.data() + dh, c.data());
        CHECK_ALLCLOSE(c, to_d(want), 1e-6, 1e-6);
      } else {
        hvec c(want.size());
        be().gemm(d16, qkv16.data(), qkv16.data() + dh, c.data());
        CHECK_ULP(c, t, want);
      }
    }
  }
}

namespace {

/// Runs `d` (any types, one epilogue) and the same product as a plain fp32 GEMM followed by
/// bias_add / gelu_forward / gelu_backward in fp32, then rounds the composition to C's type once.
/// In fp32 the two must agree bit for bit; in 16-bit they agree after rounding, also bit for bit
/// on the CPU (one fp32 computation, one rounding), which is what is checked.
void check_epilogue(Epilogue e, DType t, bool beta) {
  GemmDesc d;
  d.trans_a = true;
  d.m = 10;
  d.n = 12;
  d.k = 21;
  d.lda = d.m + 2;
  d.ldc = d.n + 3;
  d.alpha = 1.25f;
  d.beta = beta ? 0.5f : 0.0f;
  Rand r(static_cast<uint32_t>(100 + static_cast<int>(e) * 10 + static_cast<int>(t)));
  const fvec a = rounded(r.uniform(d.k * d.lda), t), b = rounded(r.uniform(d.k * d.n), t);
  const fvec c0 = rounded(r.uniform(d.m * d.ldc), t);
  const fvec bias = rounded(r.uniform(d.n), t);
  const fvec aux_in = rounded(r.uniform(d.m * d.ldc, -3.0f, 3.0f), t);
  INFO("epilogue " << static_cast<int>(e) << " type " << name(t) << " beta " << d.beta);

  // Composition in fp32: r = alpha A^T B + beta C (C widened), then the epilogue by plain ops.
  fvec rr = c0;
  fvec want = rr, want_aux = aux_in;
  {
    be().gemm(d, a.data(), b.data(), rr.data());  // all fp32, on the widened values
    const int64_t m = d.m, n = d.n, ldc = d.ldc;
    fvec tile(static_cast<std::size_t>(m * n)), pre(tile.size()), out(tile.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        tile[static_cast<std::size_t>(i * n + j)] = rr[static_cast<std::size_t>(i * ldc + j)];
    switch (e) {
      case Epilogue::None:
        out = tile;
        break;
      case Epilogue::Bias:
        out = tile;
        be().bias_add(out.data(), bias.data(), kF32, m, n);
        break;
      case Epilogue::BiasGelu:
        pre = tile;
        be().bias_add(pre.data(), bias.data(), kF32, m, n);
        be().gelu_forward(pre.data(), out.data(), kF32, m * n);
        break;
      case Epilogue::DGelu: {
        fvec x(tile.size());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            x[static_cast<std::size_t>(i * n + j)] = aux_in[static_cast<std::size_t>(i * ldc + j)];
        be().gelu_backward(x.data(), tile.data(), out.data(), kF32, m * n);
        break;
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        want[static_cast<std::size_t>(i * ldc + j)] = out[static_cast<std::size_t>(i * n + j)];
        if (e == Epilogue::BiasGelu)
          want_aux[static_cast<std::size_t>(i * ldc + j)] =
              pre[static_cast<std::size_t>(i * n + j)];
      }
  }

  GemmDesc f = d;
  f.a_type = f.b_type = f.c_type = t;
  f.epilogue = e;
  if (t == DType::F32) {
    fvec c = c0, aux = aux_in;
    f.bias = bias.data();
    f.aux = aux.data();
    be().gemm(f, a.data(), b.data(), c.data());
    CHECK_BITEQUAL(c, want);
    CHECK_BITEQUAL(aux, want_aux);  // written by BiasGelu only; padding untouched
  } else {
    const hvec a16 = to16(a, t), b16 = to16(b, t), bias16 = to16(bias, t);
    hvec c = to16(c0, t), aux = to16(aux_in, t);
    f.bias = bias16.data();
    f.aux = aux.data();
    be().gemm(f, a16.data(), b16.data(), c.data());
    CHECK(c == to16(want, t));
    CHECK(aux == to16(want_aux, t));
  }
}

}  // namespace

TEST_CASE("gemm epilogues equal plain gemm + bias_add / gelu ops in fp32, rounded once",
          "[mixed][gemm][epilogue]") {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::BiasGelu, Epilogue::DGelu})
      for (bool beta : {false, true}) check_epilogue(e, t, beta);
}

TEST_CASE("gemm: BiasGelu then DGelu through the saved aux is the MLP's GeLU backward",
          "[mixed][gemm][epilogue]") {
  // Forward: H = gelu(X W^T + b) saving aux; backward: dPre = (dH W2...) * gelu'(aux) computed
  // here as dPre = (G I) * gelu'(aux) with an identity second operand, against gelu_backward.
  const int64_t m = 6, n = 8, k = 5;
  Rand r(300);
  const fvec x = r.uniform(m * k), w = r.uniform(n * k), bias = r.uniform(n), g = r.uniform(m * n);
  GemmDesc fwd;
  fwd.trans_b = true;
  fwd.m = m;
  fwd.n = n;
  fwd.k = k;
  fwd.epilogue = Epilogue::BiasGelu;
  fwd.bias = bias.data();
  fvec aux(static_cast<std::size_t>(m * n)), h(aux.size());
  fwd.aux = aux.data();
  be().gemm(fwd, x.data(), w.data(), h.data());
  fvec eye(static_cast<std::size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) eye[static_cast<std::size_t>(i * n + i)] = 1.0f;
  GemmDesc bwd;
  bwd.m = m;
  bwd.n = n;
  bwd.k = n;
  bwd.epilogue = Epilogue::DGelu;
  bwd.aux = aux.data();
  fvec dpre(aux.size());
  be().gemm(bwd, g.data(), eye.data(), dpre.data());
  fvec want(aux.size());
  be().gelu_backward(aux.data(), g.data(), want.data(), kF32, m * n);
  CHECK_BITEQUAL(dpre, want);
  // And the forward's C is gelu(aux).
  fvec want_h(aux.size());
  be().gelu_forward(aux.data(), want_h.data(), kF32, m * n);
  CHECK_BITEQUAL(h, want_h);
}

TEST_CASE("gemm accepts exactly the storage type combinations of GemmDesc",
          "[mixed][gemm][errors]") {
  fvec a(64, 0.0f), b(64, 0.0f), c(64, 0.0f);
  for (DType ta : {DType::F32, DType::BF16, DType::F16})
    for (DType tb : {DType::F32, DType::BF16, DType::F16})
      for (DType tc : {DType::F32, DType::BF16, DType::F16}) {
        GemmDesc d;
        d.m = d.n = d.k = 2;
        d.a_type = ta;
        d.b_type = tb;
        d.c_type = tc;
        const bool ok = ta == tb && (tc == ta || tc == DType::F32);
        INFO(name(ta) << " x " << name(tb) << " -> " << name(tc));
        if (ok) {
          CHECK_NOTHROW(be().gemm(d, a.data(), b.data(), c.data()));
        } else if (ta != tb) {
          CHECK_INVALID_ARG_MSG(be().gemm(d, a.data(), b.data(), c.data()), "gemm: b_type");
        } else {
          CHECK_INVALID_ARG_MSG(be().gemm(d, a.data(), b.data(), c.data()), "gemm: c_type");
        }
      }
}

// ---- bias + dropout + residual ---------------------------------------------------------------

namespace {

ptdp::DropoutDesc dropout_desc(float p, const ptdp::GlobalBlock& b) {
  ptdp::DropoutDesc d;
  d.p = p;
  d.rng = ptdp::PhiloxStream{77, 5};
  d.block = b;
  return d;
}

/// dropout_forward(x + bias) + residual from the plain fp32 ops.
fvec bda_composed(const fvec& x, const fvec* bias, const fvec& res, int64_t rows, int64_t cols,
                  const ptdp::DropoutDesc& d) {
  fvec xb = x, dropped(x.size()), y(x.size());
  if (bias) be().bias_add(xb.data(), bias->data(), kF32, rows, cols);
  be().dropout_forward(xb.data(), dropped.data(), kF32, d);
  be().add(res.data(), dropped.data(), y.data(), kF32, rows * cols);
  return y;
}

}  // namespace

TEST_CASE("bias_dropout_add equals dropout_forward(x + bias) + residual",
          "[mixed][bias_dropout_add]") {
  const int64_t rows = 12, cols = 40;  // [s, b, h] = [4, 3, 40]
  Rand r(400);
  const fvec x = r.uniform(rows * cols), bias = r.uniform(cols), res = r.uniform(rows * cols);
  // Flat, and a sequence-parallel block: rows 4..7 of s = 12 tokens in [s, b, h] = [4, 3, 40]
  // blocks of a [12, 3, 40] tensor.
  ptdp::GlobalBlock seq;
  seq.shape[0] = 4;
  seq.shape[1] = 3;
  seq.shape[2] = cols;
  seq.global_shape[0] = 12;
  seq.global_shape[1] = 3;
  seq.global_shape[2] = cols;
  seq.offset[0] = 4;
  for (const ptdp::GlobalBlock& blk : {ptdp::GlobalBlock::flat(rows * cols), seq}) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      const ptdp::DropoutDesc d = dropout_desc(p, blk);
      INFO("p " << p << " block shape " << blk.shape[0] << "," << blk.shape[1] << ","
                << blk.shape[2]);
      fvec y(x.size(), 9.0f);
      be().bias_dropout_add(x.data(), bias.data(), res.data(), y.data(), kF32, rows, cols, d);
      CHECK_BITEQUAL(y, bda_composed(x, &bias, res, rows, cols, d));
      // Without a bias, and in place over the residual.
      fvec yr = res;
      be().bias_dropout_add(x.data(), nullptr, yr.data(), yr.data(), kF32, rows, cols, d);
      CHECK_BITEQUAL(yr, bda_composed(x, nullptr, res, rows, cols, d));
    }
  }
  // p = 0 with a default DropoutDesc (what the layers pass outside training): no block needed.
  fvec y0(x.size(), 9.0f);
  be().bias_dropout_add(x.data(), bias.data(), res.data(), y0.data(), kF32, rows, cols,
                        ptdp::DropoutDesc{});
  CHECK_BITEQUAL(y0, bda_composed(x, &bias, res, rows, cols,
                                  dropout_desc(0.0f, ptdp::GlobalBlock::flat(rows * cols))));
}

TEST_CASE("bias_dropout_add over long and odd rows on 1 and 2 threads equals the composed ops",
          "[mixed][bias_dropout_add]") {
  // Rows of 1001 columns: the 256-element mask batches and 4096-element pieces end inside rows,
  // so the row segments and their vector tails are cut at every offset.
  const int64_t rows = 9, cols = 1001;
  Rand r(402);
  const fvec x = r.uniform(rows * cols), bias = r.uniform(cols), res = r.uniform(rows * cols);
  for (float p : {0.0f, 0.15f}) {
    const ptdp::DropoutDesc d = dropout_desc(p, ptdp::GlobalBlock::flat(rows * cols));
    INFO("p " << p);
    for (int threads : {1, 2}) {
      INFO("threads " << threads);
      fvec y(x.size(), 9.0f), yr = res;
      with_threads(threads, [&] {
        be().bias_dropout_add(x.data(), bias.data(), res.data(), y.data(), kF32, rows, cols, d);
        be().bias_dropout_add(x.data(), nullptr, yr.data(), yr.data(), kF32, rows, cols, d);
      });
      CHECK_BITEQUAL(y, bda_composed(x, &bias, res, rows, cols, d));
      CHECK_BITEQUAL(yr, bda_composed(x, nullptr, res, rows, cols, d));
    }
  }
}

TEST_CASE("16-bit bias_dropout_add is the fp32 computation rounded once",
          "[mixed][bias_dropout_add]") {
  const int64_t rows = 8, cols = 50;
  for (DType t : k16) {
    Rand r(401);
    const fvec x = rounded(r.uniform(rows * cols), t), bias = rounded(r.uniform(cols), t),
               res = rounded(r.uniform(rows * cols), t);
    const hvec x16 = to16(x, t), b16 = to16(bias, t), r16 = to16(res, t);
    for (float p : {0.0f, 0.2f}) {
      const ptdp::DropoutDesc d = dropout_desc(p, ptdp::GlobalBlock::flat(rows * cols));
      INFO(name(t) << " p " << p);
      // One fp32 computation (x + bias, dropped, + residual) then one rounding: the fp32 op on
      // the widened inputs, rounded.
      fvec want(x.size());
      be().bias_dropout_add(x.data(), bias.data(), res.data(), want.data(), kF32, rows, cols, d);
      hvec y(x.size());
      be().bias_dropout_add(x16.data(), b16.data(), r16.data(), y.data(), t, rows, cols, d);
      CHECK(y == to16(want, t));
      CHECK_ULP(y, t, bda_composed(x, &bias, res, rows, cols, d));
    }
  }
}
