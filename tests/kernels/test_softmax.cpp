// Scaled, optionally causal softmax over the last dimension, forward and backward.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;

namespace {
struct SS {
  int64_t batch, sq, sk;
};
const SS kShapes[] = {{1, 1, 1}, {1, 3, 3}, {2, 3, 7}, {3, 7, 7}, {1, 5, 33}, {2, 4, 4},
                      {1, 1, 7}, {2, 7, 3} /* sq > sk, non-causal only */};
}  // namespace

TEST_CASE("softmax_forward: scale, causal mask and the sk > sq offset", "[softmax]") {
  uint32_t seed = 1;
  for (const SS& s : kShapes) {
    for (bool causal : {false, true}) {
      if (causal && s.sq > s.sk) continue;
      for (float scale : {1.0f, 0.125f, 2.5f}) {
        Rand r(seed++);
        const fvec x = r.uniform(s.batch * s.sq * s.sk, -3.0f, 3.0f);
        const dvec want = softmax_ref(to_d(x), s.batch, s.sq, s.sk, scale, causal);
        INFO("batch " << s.batch << " sq " << s.sq << " sk " << s.sk << " causal " << causal
                      << " scale " << scale);
        fvec y(x.size(), 42.0f);
        be().softmax_forward(x.data(), y.data(), kF32, s.batch, s.sq, s.sk, scale, causal);
        CHECK_ALLCLOSE(y, want, 1e-6, 1e-5);
        // Masked entries are exactly zero; visible ones strictly positive here.
        std::size_t bad_mask = 0;
        for (int64_t b = 0; b < s.batch; ++b)
          for (int64_t i = 0; i < s.sq; ++i)
            for (int64_t j = 0; j < s.sk; ++j) {
              const float v = y[static_cast<std::size_t>((b * s.sq + i) * s.sk + j)];
              const bool visible = !causal || j <= i + (s.sk - s.sq);
              if (visible ? !(v > 0.0f) : v != 0.0f) ++bad_mask;
            }
        CHECK(bad_mask == 0);
        // In place (y aliases x).
        fvec z = x;
        be().softmax_forward(z.data(), z.data(), kF32, s.batch, s.sq, s.sk, scale, causal);
        CHECK_ALLCLOSE(z, want, 1e-6, 1e-5);
      }
    }
  }
}

TEST_CASE("softmax_forward: large logits do not overflow", "[softmax]") {
  fvec x = {1000.0f, 999.0f, -1000.0f, 80.0f, 88.0f, 90.0f};
  const dvec want = softmax_ref(to_d(x), 1, 2, 3, 1.0, false);
  fvec y(x.size());
  be().softmax_forward(x.data(), y.data(), kF32, 1, 2, 3, 1.0f, false);
  CHECK_ALLCLOSE(y, want, 1e-6, 1e-5);
}

TEST_CASE("softmax_backward: dx = scale * y * (dy - sum dy y) matches finite differences",
          "[softmax][backward]") {
  uint32_t seed = 100;
  for (const SS& s : kShapes) {
    for (bool causal : {false, true}) {
      if (causal && s.sq > s.sk) continue;
      for (float scale : {1.0f, 0.35f, 2.0f}) {
        Rand r(seed++);
        const fvec x = r.uniform(s.batch * s.sq * s.sk, -2.0f, 2.0f);
        const fvec dy = r.uniform(s.batch * s.sq * s.sk);
        const dvec G = to_d(dy);
        const dvec want = fd_grad(
            [&](const dvec& xx) {
              return dot(G, softmax_ref(xx, s.batch, s.sq, s.sk, scale, causal));
            },
            to_d(x));
        const fvec y = to_f(softmax_ref(to_d(x), s.batch, s.sq, s.sk, scale, causal));
        INFO("batch " << s.batch << " sq " << s.sq << " sk " << s.sk << " causal " << causal
                      << " scale " << scale);
        fvec dx(x.size(), 31.0f);
        be().softmax_backward(y.data(), dy.data(), dx.data(), kF32, s.batch, s.sq, s.sk, scale);
        CHECK_ALLCLOSE(dx, want, kFdAtol, kFdRtol);
        // dx aliasing dy.
        fvec inplace = dy;
        be().softmax_backward(y.data(), inplace.data(), inplace.data(), kF32, s.batch, s.sq, s.sk,
                              scale);
        CHECK_ALLCLOSE(inplace, want, kFdAtol, kFdRtol);
      }
    }
  }
}

TEST_CASE("softmax forward then backward through the kernel", "[softmax][backward]") {
  const SS s{2, 5, 7};
  const float scale = 0.5f;
  Rand r(200);
  const fvec x = r.uniform(s.batch * s.sq * s.sk, -2.0f, 2.0f);
  const fvec dy = r.uniform(s.batch * s.sq * s.sk);
  fvec y(x.size()), dx(x.size());
  be().softmax_forward(x.data(), y.data(), kF32, s.batch, s.sq, s.sk, scale, true);
  be().softmax_backward(y.data(), dy.data(), dx.data(), kF32, s.batch, s.sq, s.sk, scale);
  const dvec G = to_d(dy);
  const dvec want = fd_grad(
      [&](const dvec& xx) { return dot(G, softmax_ref(xx, s.batch, s.sq, s.sk, scale, true)); },
      to_d(x));
  CHECK_ALLCLOSE(dx, want, kFdAtol, kFdRtol);
}
