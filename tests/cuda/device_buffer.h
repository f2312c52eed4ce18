// What the CUDA backend tests share: the skip without a GPU, the two backends, a buffer in
// device 0's memory from the caching allocator, and the element-wise tolerance check.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_probe.h"

namespace cuda_test {

/// Exits with ctest's SKIP_RETURN_CODE so a machine without a GPU reports "skipped", not "passed".
inline void require_gpu() {
  if (ptdp::cuda::device_count() == 0) {
    WARN("no CUDA device: skipping");
    std::exit(77);
  }
}

inline ptdp::Backend& gpu() { return ptdp::cuda::backend(0); }
inline ptdp::Backend& cpu() { return ptdp::cpu_backend(); }

/// n T's in device 0's memory, from the caching allocator.
template <typename T>
class Dev {
 public:
  explicit Dev(std::size_t n) : n_(n), p_(static_cast<T*>(ptdp::cuda::device_alloc(0, bytes()))) {}
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) { upload(host); }
  ~Dev() { ptdp::cuda::device_free(0, p_, bytes()); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  T* get() const { return p_; }
  std::size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& host) { gpu().copy_from_host(p_, host.data(), bytes()); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    gpu().copy_to_host(host.data(), p_, bytes());
    return host;
  }

 private:
  std::size_t n_;
  T* p_;
};

/// Every element within atol + rtol * |want|; equal values (infinities included) pass. A NaN
/// fails unless `nan_matches_nan` and the other side is NaN too (ops that propagate NaN inputs).
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                        double atol, const std::string& what, bool nan_matches_nan = false) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w || (nan_matches_nan && std::isnan(g) && std::isnan(w))) continue;
    const double err = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
    if (!(err <= tol)) {  // NaN fails
      ++bad;
      if (!(err - tol <= worst_excess)) {
        worst_excess = err - tol;
        worst = i;
      }
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ (atol " << atol << ", rtol "
            << rtol << "); worst at " << worst << ": got " << (got.empty() ? 0.0f : got[worst])
            << ", want " << (want.empty() ? 0.0f : want[worst]));
  CHECK(bad == 0);
}

}  // namespace cuda_test
