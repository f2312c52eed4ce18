// Dropout: mask from philox_uniform(global index) >= p, kept values scaled by 1/(1-p), and the
// same mask for every partition of the tensor (GlobalBlock).
#include <catch2/catch.hpp>

#include "kernels/cpu/dropout_mask.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::DropoutDesc;
using ptdp::GlobalBlock;

namespace {

GlobalBlock block3(int64_t s0, int64_t s1, int64_t s2, int64_t g0, int64_t g1, int64_t g2,
                   int64_t o0, int64_t o1, int64_t o2) {
  GlobalBlock b;
  b.shape[0] = s0;
  b.shape[1] = s1;
  b.shape[2] = s2;
  b.global_shape[0] = g0;
  b.global_shape[1] = g1;
  b.global_shape[2] = g2;
  b.offset[0] = o0;
  b.offset[1] = o1;
  b.offset[2] = o2;
  return b;
}

DropoutDesc desc(float p, GlobalBlock b, uint64_t seed = 1234, uint64_t stream = 99) {
  DropoutDesc d;
  d.p = p;
  d.rng = ptdp::PhiloxStream{seed, stream};
  d.block = b;
  return d;
}

/// Expected forward: x / (1 - p) where kept, exactly 0 elsewhere.
dvec dropout_ref(const dvec& x, const DropoutDesc& d) {
  const std::vector<bool> keep = dropout_mask_ref(d);
  dvec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = keep[i] ? x[i] / (1.0 - static_cast<double>(d.p)) : 0.0;
  return y;
}

/// Checks zeros are exactly where the mask drops and kept values are x/(1-p) within 2 ulp.
void check_dropout_output(const fvec& y, const fvec& x, const DropoutDesc& d) {
  const std::vector<bool> keep = dropout_mask_ref(d);
  std::size_t wrong_mask = 0, wrong_value = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!keep[i]) {
      if (!(y[i] == 0.0f)) ++wrong_mask;
    } else {
      const double want = static_cast<double>(x[i]) / (1.0 - static_cast<double>(d.p));
      if (!(std::fabs(y[i] - want) <= 2.5e-7 * std::fabs(want))) ++wrong_value;
    }
  }
  INFO("numel " << x.size() << " p " << d.p);
  CHECK(wrong_mask == 0);
  CHECK(wrong_value == 0);
}

}  // namespace

TEST_CASE("dropout_forward: p = 0 is the identity", "[dropout]") {
  for (int64_t n : {1, 3, 7, 33}) {
    Rand r(static_cast<uint32_t>(n));
    const fvec x = r.uniform(n);
    fvec y(x.size(), 5.0f);
    be().dropout_forward(x.data(), y.data(), kF32, desc(0.0f, GlobalBlock::flat(n)));
    CHECK_BITEQUAL(y, x);
  }
}

TEST_CASE("dropout_forward: p = 1 gives zeros, never NaN", "[dropout]") {
  for (int64_t n : {1, 7, 1000}) {
    Rand r(static_cast<uint32_t>(n) + 10);
    const fvec x = r.uniform(n);
    fvec y(x.size(), 5.0f);
    be().dropout_forward(x.data(), y.data(), kF32, desc(1.0f, GlobalBlock::flat(n)));
    CHECK_BITEQUAL(y, fvec(x.size(), 0.0f));
    fvec dx(x.size(), 5.0f);
    be().dropout_backward(x.data(), dx.data(), kF32, desc(1.0f, GlobalBlock::flat(n)));
    CHECK_BITEQUAL(dx, fvec(x.size(), 0.0f));
  }
}

TEST_CASE("dropout_forward: mask from philox_uniform(global index) >= p, kept values x/(1-p)",
          "[dropout]") {
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    for (int64_t n : {1, 3, 7, 33, 1001}) {
      Rand r(static_cast<uint32_t>(n * 7) + 3);
      const fvec x = r.uniform(n);
      const DropoutDesc d = desc(p, GlobalBlock::flat(n), 77, 1000 + static_cast<uint64_t>(n));
      fvec y(x.size(), 5.0f);
      be().dropout_forward(x.data(), y.data(), kF32, d);
      check_dropout_output(y, x, d);
      // In place.
      fvec z = x;
      be().dropout_forward(z.data(), z.data(), kF32, d);
      CHECK_BITEQUAL(z, y);
    }
  }
}

TEST_CASE("dropout_forward: an element whose uniform equals p exactly is kept", "[dropout]") {
  // keep = (uniform >= p): choosing p as the uniform value an element draws puts that element
  // exactly on the boundary.
  const int64_t n = 64;
  Rand r(31);
  const fvec x = r.uniform(n, 0.5f, 1.0f);
  const ptdp::PhiloxStream rng{11, 12};
  for (uint64_t i : {0u, 5u, 17u, 42u, 63u}) {
    const float p = ptdp::philox_uniform(rng, i);
    const DropoutDesc d = desc(p, GlobalBlock::flat(n), 11, 12);
    fvec y(x.size(), 5.0f);
    be().dropout_forward(x.data(), y.data(), kF32, d);
    INFO("index " << i << " p " << p);
    CHECK(y[i] != 0.0f);
    check_dropout_output(y, x, d);
  }
}

TEST_CASE("dropout_forward: kept fraction is close to 1 - p", "[dropout]") {
  const int64_t n = 200000;
  const fvec x(static_cast<std::size_t>(n), 1.0f);
  for (float p : {0.1f, 0.5f, 0.8f}) {
    fvec y(x.size());
    be().dropout_forward(x.data(), y.data(), kF32, desc(p, GlobalBlock::flat(n), 5, 6));
    int64_t kept = 0;
    for (float v : y) kept += v != 0.0f;
    const double frac = static_cast<double>(kept) / static_cast<double>(n);
    INFO("p " << p << " kept fraction " << frac);
    CHECK(std::fabs(frac - (1.0 - p)) < 0.005);  // sd ~ 0.0011
  }
}

TEST_CASE("dropout: different streams and seeds draw different masks", "[dropout]") {
  const int64_t n = 256;
  const fvec x(static_cast<std::size_t>(n), 1.0f);
  fvec a(x.size()), b(x.size()), c(x.size());
  be().dropout_forward(x.data(), a.data(), kF32, desc(0.5f, GlobalBlock::flat(n), 1, 1));
  be().dropout_forward(x.data(), b.data(), kF32, desc(0.5f, GlobalBlock::flat(n), 1, 2));
  be().dropout_forward(x.data(), c.data(), kF32, desc(0.5f, GlobalBlock::flat(n), 2, 1));
  CHECK(a != b);
  CHECK(a != c);
}

TEST_CASE("dropout: a sub-block draws the same mask as the full tensor", "[dropout]") {
  // Full tensor [S, H, D] = [3, 4, 5].
  const int64_t S = 3, H = 4, D = 5;
  Rand r(900);
  const fvec x = r.uniform(S * H * D);
  const float p = 0.4f;
  auto at = [&](int64_t i, int64_t h, int64_t e) {
    return static_cast<std::size_t>((i * H + h) * D + e);
  };

  fvec full(x.size());
  be().dropout_forward(x.data(), full.data(), kF32, desc(p, GlobalBlock::flat(S * H * D)));
  check_dropout_output(full, x, desc(p, GlobalBlock::flat(S * H * D)));

  // The same tensor described as 3-D.
  fvec full3(x.size());
  be().dropout_forward(x.data(), full3.data(), kF32, desc(p, block3(S, H, D, S, H, D, 0, 0, 0)));
  CHECK_BITEQUAL(full3, full);

  // Also check that the test itself is not vacuous: some dropped, some kept.
  int64_t kept = 0;
  for (float v : full) kept += v != 0.0f;
  CHECK(kept > 10);
  CHECK(kept < S * H * D - 10);

  // Sub-blocks: heads 1..2 (tensor parallel), positions 1..2 (sequence parallel), features
  // 2..4, and all three at once.
  struct Sub {
    int64_t o0, s0, o1, s1, o2, s2;
  };
  for (const Sub& b : {Sub{0, S, 1, 2, 0, D}, Sub{1, 2, 0, H, 0, D}, Sub{0, S, 0, H, 2, 3},
                       Sub{1, 1, 2, 2, 1, 3}, Sub{2, 1, 3, 1, 4, 1}}) {
    fvec xs, want;
    for (int64_t i = 0; i < b.s0; ++i)
      for (int64_t h = 0; h < b.s1; ++h)
        for (int64_t e = 0; e < b.s2; ++e) {
          xs.push_back(x[at(i + b.o0, h + b.o1, e + b.o2)]);
          want.push_back(full[at(i + b.o0, h + b.o1, e + b.o2)]);
        }
    const DropoutDesc d = desc(p, block3(b.s0, b.s1, b.s2, S, H, D, b.o0, b.o1, b.o2));
    fvec ys(xs.size(), 5.0f);
    INFO("block offsets " << b.o0 << "," << b.o1 << "," << b.o2 << " shape " << b.s0 << ","
                          << b.s1 << "," << b.s2);
    be().dropout_forward(xs.data(), ys.data(), kF32, d);
    CHECK_BITEQUAL(ys, want);
    // And the backward of the block uses the same mask.
    fvec dxs(xs.size(), 5.0f);
    be().dropout_backward(xs.data(), dxs.data(), kF32, d);
    CHECK_BITEQUAL(dxs, want);
  }
}

TEST_CASE("dropout: columns 4..7 of a rows x 12 matrix", "[dropout]") {
  const int64_t rows = 6, cols = 12;
  Rand r(901);
  const fvec x = r.uniform(rows * cols);
  const float p = 0.5f;
  fvec full(x.size());
  be().dropout_forward(x.data(), full.data(), kF32, desc(p, block3(rows, 1, cols, rows, 1, cols, 0, 0, 0)));
  CHECK_BITEQUAL(full, [&] {
    fvec f(x.size());
    be().dropout_forward(x.data(), f.data(), kF32, desc(p, GlobalBlock::flat(rows * cols)));
    return f;
  }());
  // Three column slices of 4 (a tensor-parallel split over hidden features).
  for (int64_t part = 0; part < 3; ++part) {
    fvec xs, want;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 4 * part; j < 4 * part + 4; ++j) {
        xs.push_back(x[static_cast<std::size_t>(i * cols + j)]);
        want.push_back(full[static_cast<std::size_t>(i * cols + j)]);
      }
    fvec ys(xs.size());
    INFO("columns " << 4 * part << ".." << 4 * part + 3);
    be().dropout_forward(xs.data(), ys.data(), kF32,
                         desc(p, block3(rows, 1, 4, rows, 1, cols, 0, 0, 4 * part)));
    CHECK_BITEQUAL(ys, want);
  }
  // Rows 2..4 as a flat block in the middle of the flat tensor (sequence split).
  {
    const fvec xs(x.begin() + 2 * cols, x.begin() + 5 * cols);
    const fvec want(full.begin() + 2 * cols, full.begin() + 5 * cols);
    fvec ys(xs.size());
    be().dropout_forward(xs.data(), ys.data(), kF32,
                         desc(p, block3(3, 1, cols, rows, 1, cols, 2, 0, 0)));
    CHECK_BITEQUAL(ys, want);
  }
}

TEST_CASE("dropout_backward matches finite differences", "[dropout][backward]") {
  for (float p : {0.0f, 0.25f, 0.6f}) {
    for (int64_t n : {1, 7, 33}) {
      Rand r(static_cast<uint32_t>(n) + 500);
      const fvec x = r.uniform(n), dy = r.uniform(n);
      const DropoutDesc d = desc(p, GlobalBlock::flat(n), 3, 4);
      const dvec G = to_d(dy);
      const dvec want = fd_grad([&](const dvec& xx) { return dot(G, dropout_ref(xx, d)); },
                                to_d(x));
      INFO("p " << p << " n " << n);
      fvec dx(x.size(), 5.0f);
      be().dropout_backward(dy.data(), dx.data(), kF32, d);
      CHECK_ALLCLOSE(dx, want, kFdAtol, kFdRtol);
      fvec inplace = dy;
      be().dropout_backward(inplace.data(), inplace.data(), kF32, d);
      CHECK_ALLCLOSE(inplace, want, kFdAtol, kFdRtol);
    }
  }
}

TEST_CASE("dropout: the CPU's keep helpers answer what dropout_forward applies",
          "[dropout][attention]") {
  // cpu::dropout_keep and cpu::dropout_keep_row are what the fused attention and
  // bias_dropout_add use: one definition of the mask.
  const DropoutDesc d = desc(0.4f, block3(2, 3, 37, 4, 5, 40, 1, 2, 3), 8, 9);
  const fvec ones(static_cast<std::size_t>(d.block.numel()), 1.0f);
  fvec y(ones.size());
  be().dropout_forward(ones.data(), y.data(), kF32, d);
  std::size_t wrong = 0, wrong_row = 0;
  std::vector<uint8_t> row(37);
  for (int64_t i0 = 0; i0 < 2; ++i0)
    for (int64_t i1 = 0; i1 < 3; ++i1) {
      ptdp::cpu::dropout_keep_row(d, i0, i1, 5, 37, row.data());
      for (int64_t i2 = 0; i2 < 37; ++i2) {
        const bool kept = y[static_cast<std::size_t>((i0 * 3 + i1) * 37 + i2)] != 0.0f;
        wrong += ptdp::cpu::dropout_keep(d, i0, i1, i2) != kept;
        if (i2 >= 5) wrong_row += (row[static_cast<std::size_t>(i2 - 5)] != 0) != kept;
      }
    }
  CHECK(wrong == 0);
  CHECK(wrong_row == 0);
}

TEST_CASE("dropout: the integer threshold keeps exactly the elements whose uniform is >= p",
          "[dropout]") {
  // dropout_keeps_bits(bits, dropout_threshold(p)) is what the kernels apply; it must agree with
  // philox_bits_to_uniform(bits) >= p for every bits, in particular next to the threshold.
  const float ps[] = {0.0f, 1e-30f, 5.9604645e-08f /* 2^-24 */, 1e-7f, 0.1f, 0.3333333f, 0.5f,
                      0.9999999f, 1.0f};
  std::size_t wrong = 0;
  for (float p : ps) {
    const int32_t t = ptdp::cpu::dropout_threshold(p);
    INFO("p " << p << " threshold " << t);
    for (int64_t k = -3; k <= 3; ++k) {
      const int64_t top = std::clamp<int64_t>(t + k, 0, (int64_t{1} << 24) - 1);
      for (uint32_t low : {0u, 1u, 0x7fu, 0xffu}) {
        const uint32_t bits = (static_cast<uint32_t>(top) << 8) | low;
        wrong += ptdp::cpu::dropout_keeps_bits(bits, t) !=
                 ptdp::cpu::dropout_keeps(ptdp::philox_bits_to_uniform(bits), p);
      }
    }
    Rand r(static_cast<uint32_t>(t) + 17);
    for (int i = 0; i < 2000; ++i) {
      const uint32_t bits = static_cast<uint32_t>(r.g());
      wrong += ptdp::cpu::dropout_keeps_bits(bits, t) !=
               ptdp::cpu::dropout_keeps(ptdp::philox_bits_to_uniform(bits), p);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("dropout: long rows, odd lengths and sub-blocks give the reference mask on 1 and 2 threads",
          "[dropout]") {
  // Pieces of 4096 elements and Philox batches of 256 elements end inside rows here; the
  // vectorised loops run their tails at every odd length.
  const GlobalBlock blocks[] = {GlobalBlock::flat(9001), GlobalBlock::flat(3),
                                block3(3, 2, 5003, 7, 2, 5003, 2, 0, 0),
                                block3(2, 3, 1001, 4, 5, 1100, 1, 2, 37)};
  for (const GlobalBlock& b : blocks) {
    Rand r(static_cast<uint32_t>(b.numel()));
    const fvec x = r.uniform(b.numel());
    const DropoutDesc d = desc(0.3f, b, 42, 7);
    fvec y1(x.size(), 5.0f), y2(x.size(), 6.0f);
    with_threads(1, [&] { be().dropout_forward(x.data(), y1.data(), kF32, d); });
    with_threads(2, [&] { be().dropout_forward(x.data(), y2.data(), kF32, d); });
    check_dropout_output(y1, x, d);
    CHECK_BITEQUAL(y2, y1);
    fvec inplace = x;
    be().dropout_backward(inplace.data(), inplace.data(), kF32, d);
    CHECK_BITEQUAL(inplace, y1);
  }
}
