// Rotary position embedding (rope_forward / rope_backward) on the fused QKV activation
// [s, b, groups, q_per_group + 2, dh]: against a double-precision reference of RopeDesc's
// formula in f32, bf16 and f16 storage; value heads and the features past rot_dim untouched;
// explicit positions equal to the offset form; the backward as the inverse and the adjoint of
// the forward, and as the gradient of <G, rope(x)> by finite differences; YaRN's amplitude
// (forward and backward), and amplitude 1 bit-identical to the descriptor without one.
#include <catch2/catch.hpp>

#include <omp.h>

#include "base/half.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;
using ptdp::RopeDesc;

namespace {

const auto& kTypes = kStorageTypes;

/// Relative tolerance of a result rounded once to t (after fp32 math).
double tol(DType t) { return t == DType::BF16 ? 1.0 / 128.0 : t == DType::F16 ? 1.0 / 1024.0 : 1e-6; }

struct Shape {
  int64_t s, b, groups, q_per_group, dh, rot_dim;
};

const Shape kShapes[] = {
    {1, 1, 1, 1, 2, 2},    // the smallest rotation
    {5, 2, 3, 1, 8, 8},    // multi-head attention (q, k, v per head)
    {7, 3, 2, 4, 16, 16},  // grouped-query: 4 query heads per key/value head
    {6, 2, 1, 8, 12, 8},   // multi-query, partial rotation (features 8..11 pass through)
    {9, 1, 2, 3, 10, 2},   // rot_dim 2: one frequency
};

/// Llama's frequencies: inv_freq[i] = base^(-2i / rot_dim).
fvec inv_freq_of(int64_t rot_dim, double base = 10000.0) {
  fvec f(static_cast<std::size_t>(rot_dim / 2));
  for (std::size_t i = 0; i < f.size(); ++i)
    f[i] = static_cast<float>(std::pow(base, -2.0 * static_cast<double>(i) / rot_dim));
  return f;
}

RopeDesc make_desc(const Shape& sh, const fvec& inv_freq) {
  RopeDesc d;
  d.s = sh.s;
  d.b = sh.b;
  d.groups = sh.groups;
  d.q_per_group = sh.q_per_group;
  d.dh = sh.dh;
  d.rot_dim = sh.rot_dim;
  d.inv_freq = inv_freq.data();
  return d;
}

int64_t qkv_size(const Shape& sh) { return sh.s * sh.b * sh.groups * (sh.q_per_group + 2) * sh.dh; }

int64_t position_of(const RopeDesc& d, int64_t si, int64_t bi) {
  return d.positions ? d.positions[si * d.b + bi] : si + d.position_offset;
}

/// RopeDesc's formula with the rotation in double: angle = fp32(p * inv_freq[i]), cos and sin of
/// it in double rounded to fp32 and multiplied by the amplitude in fp32, sign -1 for the backward.
dvec rope_ref(const dvec& x, const RopeDesc& d, double sign) {
  dvec y = x;
  const int64_t half = d.rot_dim / 2, slots = d.q_per_group + 2;
  for (int64_t si = 0; si < d.s; ++si)
    for (int64_t bi = 0; bi < d.b; ++bi) {
      const int64_t p = position_of(d, si, bi);
      for (int64_t g = 0; g < d.groups; ++g)
        for (int64_t h = 0; h < slots - 1; ++h) {  // every slot but the value head
          const std::size_t base =
              static_cast<std::size_t>((((si * d.b + bi) * d.groups + g) * slots + h) * d.dh);
          for (int64_t i = 0; i < half; ++i) {
            const float angle = static_cast<float>(p) * d.inv_freq[i];
            const double c = static_cast<float>(std::cos(static_cast<double>(angle))) * d.amplitude;
            const double sn = sign * (static_cast<float>(std::sin(static_cast<double>(angle))) * d.amplitude);
            const double x1 = x[base + static_cast<std::size_t>(i)];
            const double x2 = x[base + static_cast<std::size_t>(i + half)];
            y[base + static_cast<std::size_t>(i)] = x1 * c - x2 * sn;
            y[base + static_cast<std::size_t>(i + half)] = x2 * c + x1 * sn;
          }
        }
    }
  return y;
}

/// Whether element e of qkv is rotated: a query or key head, feature < rot_dim.
bool rotated(const Shape& sh, int64_t e) {
  const int64_t feature = e % sh.dh, slot = (e / sh.dh) % (sh.q_per_group + 2);
  return feature < sh.rot_dim && slot <= sh.q_per_group;
}

std::string describe(const Shape& sh) {
  std::ostringstream os;
  os << "s " << sh.s << " b " << sh.b << " groups " << sh.groups << " q_per_group "
     << sh.q_per_group << " dh " << sh.dh << " rot_dim " << sh.rot_dim;
  return os.str();
}

/// rope_forward and rope_backward of x (type t) under d against the double reference (O(1)
/// values: one ulp of the storage type, or fp32 round-off, absolute); the value heads and the
/// features past rot_dim pass through the forward bit for bit.
void check_rope(const Shape& sh, const RopeDesc& d, DType t, const fvec& x) {
  Stored fwd(x, t), bwd(x, t);
  be().rope_forward(fwd.data(), t, d);
  be().rope_backward(bwd.data(), t, d);
  CHECK_ALLCLOSE(fwd.values(), rope_ref(to_d(x), d, 1.0), 2.0 * tol(t), tol(t));
  CHECK_ALLCLOSE(bwd.values(), rope_ref(to_d(x), d, -1.0), 2.0 * tol(t), tol(t));
  const fvec got = fwd.values();
  std::size_t changed = 0;
  for (int64_t e = 0; e < qkv_size(sh); ++e)
    if (!rotated(sh, e)) changed += got[static_cast<std::size_t>(e)] != x[static_cast<std::size_t>(e)];
  CHECK(changed == 0);
}

}  // namespace

TEST_CASE("rope_forward and rope_backward against the double reference in every storage type",
          "[rope]") {
  uint32_t seed = 1;
  for (DType t : kTypes) {
    for (const Shape& sh : kShapes) {
      for (int64_t offset : {int64_t{0}, int64_t{1000}}) {
        const fvec inv_freq = inv_freq_of(sh.rot_dim);
        RopeDesc d = make_desc(sh, inv_freq);
        d.position_offset = offset;
        Rand r(seed++);
        const fvec x = rounded(r.uniform(qkv_size(sh), -2.0f, 2.0f), t);
        INFO(ptdp::dtype_name(t) << " " << describe(sh) << " offset " << offset);
        check_rope(sh, d, t, x);
      }
    }
  }
}

TEST_CASE("rope: explicit positions equal the offset form, and may differ per sequence",
          "[rope]") {
  const Shape sh{7, 3, 2, 4, 16, 12};
  const fvec inv_freq = inv_freq_of(sh.rot_dim);
  Rand r(50);
  const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f);
  for (DType t : kTypes) {
    INFO(ptdp::dtype_name(t));
    RopeDesc d = make_desc(sh, inv_freq);
    d.position_offset = 37;
    Stored want(x, t);
    be().rope_forward(want.data(), t, d);
    // positions[si * b + bi] = si + 37: the [s, b] token order.
    std::vector<int32_t> pos(static_cast<std::size_t>(sh.s * sh.b));
    for (int64_t si = 0; si < sh.s; ++si)
      for (int64_t bi = 0; bi < sh.b; ++bi)
        pos[static_cast<std::size_t>(si * sh.b + bi)] = static_cast<int32_t>(si + 37);
    RopeDesc dp = make_desc(sh, inv_freq);
    dp.positions = pos.data();
    dp.position_offset = 5;  // ignored with explicit positions
    Stored got(x, t);
    be().rope_forward(got.data(), t, dp);
    CHECK_BITEQUAL(got.values(), want.values());
    Stored got_b(x, t), want_b(x, t);
    be().rope_backward(got_b.data(), t, dp);
    be().rope_backward(want_b.data(), t, d);
    CHECK_BITEQUAL(got_b.values(), want_b.values());

    // Packed documents: each sequence restarts its positions at its own places; and positions
    // spread wider than the token count (the per-token table).
    for (int32_t spread : {1, 5000}) {
      for (int64_t si = 0; si < sh.s; ++si)
        for (int64_t bi = 0; bi < sh.b; ++bi)
          pos[static_cast<std::size_t>(si * sh.b + bi)] =
              static_cast<int32_t>((si % (bi + 2)) * spread + bi);
      const fvec xr = rounded(x, t);
      Stored f(xr, t), bk(xr, t);
      be().rope_forward(f.data(), t, dp);
      be().rope_backward(bk.data(), t, dp);
      INFO("spread " << spread);
      CHECK_ALLCLOSE(f.values(), rope_ref(to_d(xr), dp, 1.0), 2.0 * tol(t), tol(t));
      CHECK_ALLCLOSE(bk.values(), rope_ref(to_d(xr), dp, -1.0), 2.0 * tol(t), tol(t));
    }
  }
}

TEST_CASE("rope_backward after rope_forward is the identity, to round-off", "[rope][backward]") {
  uint32_t seed = 100;
  for (const Shape& sh : kShapes) {
    const fvec inv_freq = inv_freq_of(sh.rot_dim);
    RopeDesc d = make_desc(sh, inv_freq);
    d.position_offset = 4000;  // large angles
    Rand r(seed++);
    const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f);
    fvec y = x;
    be().rope_forward(y.data(), kF32, d);
    be().rope_backward(y.data(), kF32, d);
    INFO(describe(sh));
    CHECK_ALLCLOSE(y, to_d(x), 1e-6, 1e-6);
  }
}

TEST_CASE("rope_backward is the adjoint of rope_forward: <R x, y> = <x, R^T y>",
          "[rope][backward]") {
  uint32_t seed = 200;
  for (const Shape& sh : kShapes) {
    const fvec inv_freq = inv_freq_of(sh.rot_dim, 500.0);
    RopeDesc d = make_desc(sh, inv_freq);
    d.position_offset = 3;
    Rand r(seed++);
    const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f), y = r.uniform(qkv_size(sh), -2.0f, 2.0f);
    fvec rx = x, rty = y;
    be().rope_forward(rx.data(), kF32, d);
    be().rope_backward(rty.data(), kF32, d);
    const double lhs = dot(to_d(rx), to_d(y)), rhs = dot(to_d(x), to_d(rty));
    double mag = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) mag += std::fabs(static_cast<double>(x[i]) * y[i]);
    INFO(describe(sh) << " <Rx, y> " << lhs << " <x, R^T y> " << rhs);
    CHECK(std::fabs(lhs - rhs) <= 1e-6 * mag);
  }
}

TEST_CASE("rope_backward is the gradient of <G, rope_forward(x)> by finite differences",
          "[rope][backward]") {
  const Shape sh{4, 2, 2, 2, 6, 4};
  const fvec inv_freq = inv_freq_of(sh.rot_dim, 100.0);
  RopeDesc d = make_desc(sh, inv_freq);
  d.position_offset = 1;
  Rand r(300);
  const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f), G = r.uniform(qkv_size(sh));
  const dvec Gd = to_d(G);
  const dvec want = fd_grad([&](const dvec& xx) { return dot(Gd, rope_ref(xx, d, 1.0)); }, to_d(x));
  fvec got = G;
  be().rope_backward(got.data(), kF32, d);
  CHECK_ALLCLOSE(got, want, kFdAtol, kFdRtol);
}

TEST_CASE("rope is the same whatever the thread count, and s = 0 or b = 0 does nothing",
          "[rope]") {
  const Shape sh{33, 2, 2, 4, 16, 16};
  const fvec inv_freq = inv_freq_of(sh.rot_dim);
  const RopeDesc d = make_desc(sh, inv_freq);
  Rand r(400);
  const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f);
  const int saved = omp_get_max_threads();
  std::vector<fvec> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    fvec y = x;
    be().rope_forward(y.data(), kF32, d);
    results.push_back(y);
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < results.size(); ++i) CHECK_BITEQUAL(results[i], results[0]);

  RopeDesc empty = make_desc(sh, inv_freq);
  empty.s = 0;
  empty.inv_freq = nullptr;
  CHECK_NOTHROW(be().rope_forward(nullptr, kBF16, empty));
  empty.s = 3;
  empty.b = 0;
  CHECK_NOTHROW(be().rope_backward(nullptr, kF16, empty));
}

TEST_CASE("rope with an amplitude (YaRN's attention factor) scales cos and sin, forward and backward",
          "[rope][yarn]") {
  uint32_t seed = 500;
  for (DType t : kTypes) {
    for (const Shape& sh : kShapes) {
      const fvec inv_freq = inv_freq_of(sh.rot_dim);
      RopeDesc d = make_desc(sh, inv_freq);
      d.position_offset = 11;
      d.amplitude = 1.1386294f;  // 0.1 ln(4) + 1
      Rand r(seed++);
      const fvec x = rounded(r.uniform(qkv_size(sh), -2.0f, 2.0f), t);
      INFO(ptdp::dtype_name(t) << " " << describe(sh));
      // The rotation's norm grows by the amplitude on the rotated features, never elsewhere.
      check_rope(sh, d, t, x);
    }
  }
  // The backward is the adjoint (A R)^T = A R^T, so it is the gradient of <G, rope(x)>.
  const Shape sh{4, 2, 2, 2, 6, 4};
  const fvec inv_freq = inv_freq_of(sh.rot_dim, 100.0);
  RopeDesc d = make_desc(sh, inv_freq);
  d.amplitude = 0.75f;
  Rand r(600);
  const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f), G = r.uniform(qkv_size(sh));
  const dvec Gd = to_d(G);
  const dvec want = fd_grad([&](const dvec& xx) { return dot(Gd, rope_ref(xx, d, 1.0)); }, to_d(x));
  fvec got = G;
  be().rope_backward(got.data(), kF32, d);
  CHECK_ALLCLOSE(got, want, kFdAtol, kFdRtol);
}

TEST_CASE("rope with amplitude 1 is bit-identical to the plain rotation", "[rope][yarn]") {
  const Shape sh{7, 3, 2, 4, 16, 12};
  const fvec inv_freq = inv_freq_of(sh.rot_dim);
  Rand r(700);
  const fvec x = r.uniform(qkv_size(sh), -2.0f, 2.0f);
  for (DType t : kTypes) {
    INFO(ptdp::dtype_name(t));
    RopeDesc d = make_desc(sh, inv_freq);
    d.position_offset = 2000;
    // The unscaled rotation written out: x1 c - x2 s and x2 c + x1 s in fp32, one rounding each.
    const fvec xr = rounded(x, t);
    fvec want = xr;
    const int64_t half = sh.rot_dim / 2, slots = sh.q_per_group + 2;
    for (int64_t tok = 0; tok < sh.s * sh.b; ++tok)
      for (int64_t h = 0; h < sh.groups * slots; ++h) {
        if (h % slots == slots - 1) continue;  // the value head
        for (int64_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(tok / sh.b + 2000) * inv_freq[static_cast<std::size_t>(i)];
          const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
          const float sn = static_cast<float>(std::sin(static_cast<double>(angle)));
          const std::size_t at = static_cast<std::size_t>((tok * sh.groups * slots + h) * sh.dh + i);
          const float x1 = xr[at], x2 = xr[at + static_cast<std::size_t>(half)];
          // volatile: each product rounded to fp32 even where the test is built with FMA.
          const volatile float p1 = x1 * c, p2 = x2 * sn, p3 = x2 * c, p4 = x1 * sn;
          want[at] = p1 - p2;
          want[at + static_cast<std::size_t>(half)] = p3 + p4;
        }
      }
    Stored got(xr, t);
    be().rope_forward(got.data(), t, d);
    CHECK_BITEQUAL(got.values(), rounded(want, t));
  }
}
