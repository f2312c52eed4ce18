// The CPU backend's memory movement and its process-wide instance (handed out with the
// runtime's thread count, kernels/cpu/cpu_threads.h); each op lives in its own file.
#include "kernels/cpu/cpu_backend.h"

#include <cstring>

#include "kernels/check.h"
#include "kernels/cpu/cpu_threads.h"

namespace ptdp {

void CpuBackend::copy_from_host(void* dst, const void* host_src, std::size_t bytes) {
  copy(dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  copy(host_dst, src, bytes);
}

void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  kcheck::not_null("copy", "dst", dst);
  kcheck::not_null("copy", "src", src);
  std::memmove(dst, src, bytes);
}

Backend& cpu_backend() {
  adopt_cpu_threads();  // the count a runtime chose, on every thread that computes
  static CpuBackend backend;
  return backend;
}

}  // namespace ptdp
