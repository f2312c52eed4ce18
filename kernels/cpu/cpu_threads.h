// The size of the CPU backend's OpenMP team. OpenBLAS (its OpenMP build, which the build
// prefers) and the kernels' own parallel regions share libgomp's team, so one count sizes both.
// OpenMP keeps that count per thread (the nthreads ICV), so a count set here reaches the
// calling thread at once and every other thread when it next takes the CPU backend.
#pragma once

namespace ptdp {

/// Sets the CPU backend's threads for the whole process (`threads` >= 1): the calling thread's
/// OpenMP and OpenBLAS counts now, every other thread's on its next cpu_backend().
void set_cpu_threads(int threads);

/// The count of the last set_cpu_threads(), or 0 when it was never called.
int cpu_threads_set() noexcept;

/// Gives the calling thread the count of the last set_cpu_threads() if it has not had it yet
/// (one atomic load and a thread-local compare otherwise). A thread's own omp_set_num_threads()
/// after that stands until the next set_cpu_threads().
void adopt_cpu_threads() noexcept;

}  // namespace ptdp
