// Vocabulary-parallel embedding lookup and its backward.
#include <catch2/catch.hpp>

#include <omp.h>

#include "reference.h"

using namespace ptdp_test;

namespace {
dvec embed_ref(const std::vector<int32_t>& ids, const dvec& table, int64_t vocab_start,
               int64_t vocab_rows, int64_t h) {
  dvec out(ids.size() * static_cast<std::size_t>(h), 0.0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    if (row < 0 || row >= vocab_rows) continue;
    for (int64_t c = 0; c < h; ++c)
      out[i * static_cast<std::size_t>(h) + static_cast<std::size_t>(c)] =
          table[static_cast<std::size_t>(row * h + c)];
  }
  return out;
}

struct Case {
  int64_t n, vocab_start, vocab_rows, h, vocab_total;
};
const Case kCases[] = {{1, 0, 1, 1, 1},   {3, 0, 7, 3, 7},   {7, 4, 3, 5, 12},
                       {33, 5, 5, 2, 15}, {9, 10, 5, 7, 15}, {20, 0, 4, 1, 8},
                       {5, 2, 3, 260, 6}};
}  // namespace

TEST_CASE("embedding_forward: owned ids copy table rows, others give zero rows", "[embedding]") {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    Rand r(seed++);
    const std::vector<int32_t> ids = r.ids(c.n, 0, static_cast<int32_t>(c.vocab_total - 1));
    const fvec table = r.uniform(c.vocab_rows * c.h);
    const dvec want = embed_ref(ids, to_d(table), c.vocab_start, c.vocab_rows, c.h);
    fvec out(static_cast<std::size_t>(c.n * c.h), 123.0f);
    INFO("n " << c.n << " vocab_start " << c.vocab_start << " vocab_rows " << c.vocab_rows
              << " h " << c.h);
    be().embedding_forward(ids.data(), c.n, table.data(), kF32, c.vocab_start, c.vocab_rows, c.h,
                           out.data());
    CHECK_ALLCLOSE(out, want, 0.0, 0.0);  // copies are exact
  }
}

TEST_CASE("embedding_forward: the range boundaries and negative ids", "[embedding]") {
  const int64_t h = 2, start = 3, rows = 2;
  const fvec table = {1, 2, 3, 4};
  const std::vector<int32_t> ids = {2, 3, 4, 5, -1, 0};
  fvec out(ids.size() * h, 9.0f);
  be().embedding_forward(ids.data(), static_cast<int64_t>(ids.size()), table.data(), kF32, start, rows,
                         h, out.data());
  CHECK_BITEQUAL(out, (fvec{0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0}));
}

TEST_CASE("embedding: vocab-parallel slices sum to the full lookup", "[embedding]") {
  Rand r(50);
  const int64_t V = 11, h = 3, n = 17;
  const std::vector<int32_t> ids = r.ids(n, 0, V - 1);
  const fvec table = r.uniform(V * h);
  fvec full(static_cast<std::size_t>(n * h));
  be().embedding_forward(ids.data(), n, table.data(), kF32, 0, V, h, full.data());
  for (int64_t t : {2, 3}) {
    fvec sum(full.size(), 0.0f);
    int64_t start = 0;
    for (int64_t part = 0; part < t; ++part) {
      const int64_t rows = V / t + (part < V % t ? 1 : 0);
      fvec out(full.size());
      be().embedding_forward(ids.data(), n, table.data() + start * h, kF32, start, rows, h,
                             out.data());
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
      start += rows;
    }
    INFO("t " << t);
    CHECK_BITEQUAL(sum, full);
  }
}

TEST_CASE("embedding_backward matches finite differences, duplicates accumulate",
          "[embedding][backward]") {
  uint32_t seed = 100;
  for (const Case& c : kCases) {
    Rand r(seed++);
    std::vector<int32_t> ids = r.ids(c.n, 0, static_cast<int32_t>(c.vocab_total - 1));
    if (c.n >= 3) ids[2] = ids[0] = static_cast<int32_t>(c.vocab_start);  // a duplicate owned id
    const fvec table = r.uniform(c.vocab_rows * c.h);
    const fvec dout = r.uniform(c.n * c.h);
    const dvec G = to_d(dout);
    const dvec want = fd_grad(
        [&](const dvec& t) { return dot(G, embed_ref(ids, t, c.vocab_start, c.vocab_rows, c.h)); },
        to_d(table));
    INFO("n " << c.n << " vocab_start " << c.vocab_start << " vocab_rows " << c.vocab_rows
              << " h " << c.h);
    fvec dtable(table.size(), 0.0f);
    be().embedding_backward(ids.data(), c.n, dout.data(), kF32, c.vocab_start, c.vocab_rows, c.h,
                            dtable.data());
    CHECK_ALLCLOSE(dtable, want, kFdAtol, kFdRtol);

    // Existing contents are added to.
    const fvec init = r.uniform(c.vocab_rows * c.h);
    fvec acc = init;
    be().embedding_backward(ids.data(), c.n, dout.data(), kF32, c.vocab_start, c.vocab_rows, c.h,
                            acc.data());
    dvec want_acc(want);
    for (std::size_t i = 0; i < want_acc.size(); ++i) want_acc[i] += init[i];
    CHECK_ALLCLOSE(acc, want_acc, kFdAtol, kFdRtol);
  }
}

TEST_CASE("embedding_backward: many duplicates, out-of-range ids ignored, deterministic",
          "[embedding][backward]") {
  const int64_t h = 3, start = 10, rows = 4, n = 40;
  Rand r(7);
  std::vector<int32_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<std::size_t>(i)] = static_cast<int32_t>(i % 3 == 0 ? 11 : (i % 3 == 1 ? 3 + i : -1));
  const fvec dout = r.uniform(n * h);
  dvec want(static_cast<std::size_t>(rows * h), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[static_cast<std::size_t>(i)] - start;
    if (row < 0 || row >= rows) continue;
    for (int64_t c = 0; c < h; ++c)
      want[static_cast<std::size_t>(row * h + c)] += dout[static_cast<std::size_t>(i * h + c)];
  }
  fvec a(static_cast<std::size_t>(rows * h), 0.0f), b(a);
  be().embedding_backward(ids.data(), n, dout.data(), kF32, start, rows, h, a.data());
  be().embedding_backward(ids.data(), n, dout.data(), kF32, start, rows, h, b.data());
  CHECK_ALLCLOSE(a, want, 1e-5, 1e-5);
  CHECK_BITEQUAL(a, b);
}

TEST_CASE("embedding_backward is deterministic whatever the thread count",
          "[embedding][backward]") {
  // Many tokens hitting few rows: a thread-order-dependent float summation would show up in
  // the low bits.
  const int64_t h = 300, start = 0, rows = 3, n = 500;
  Rand r(8);
  const std::vector<int32_t> ids = r.ids(n, 0, static_cast<int32_t>(rows - 1));
  const fvec dout = r.uniform(n * h, -1.0f, 1.0f);
  const int saved = omp_get_max_threads();
  std::vector<fvec> results;
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    fvec d(static_cast<std::size_t>(rows * h), 0.0f);
    be().embedding_backward(ids.data(), n, dout.data(), kF32, start, rows, h, d.data());
    results.push_back(d);
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < results.size(); ++i) CHECK_BITEQUAL(results[i], results[0]);
  dvec want(static_cast<std::size_t>(rows * h), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < h; ++c)
      want[static_cast<std::size_t>(ids[static_cast<std::size_t>(i)] * h + c)] +=
          dout[static_cast<std::size_t>(i * h + c)];
  CHECK_ALLCLOSE(results[0], want, 1e-4, 1e-5);
}
