// The MPI communicator pieces the full-sharding distributed optimizer relies on, under mpiexec
// (any world size; the engine's core API, not the C API, since views are internal):
// - reduce_scatter with `out` this rank's own chunk of `in` (in place, MPI_IN_PLACE underneath)
//   gives the same bits as into a separate buffer, for Sum and Avg;
// - all_gather with `in` this rank's own chunk of `out` (in place) gives every chunk;
// - background_progress(): while its token lives, a non-blocking all-reduce posted and then left
//   alone (no MPI call from this thread for up to 2 s) completes: the first test() after the
//   wait finds it done. Without a token the same is only reported (Open MPI may need the
//   caller's calls to advance a multi-round collective).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/runtime.h"
#include "core/tensor/tensor.h"

namespace {

int g_failed = 0, g_passed = 0, g_rank = 0;

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "[rank %d] FAIL %s\n", g_rank, what.c_str());
}

float value(int rank, int64_t i) { return 0.1f * static_cast<float>(rank + 1) + 0.37f * static_cast<float>(i % 11); }

// Whether a posted all-reduce completes while this thread makes no MPI call for up to 2 s.
bool completes_unattended(ptdp::Communicator& world) {
  std::vector<float> x(4096, 1.0f);
  ptdp::WorkPtr w = world.all_reduce(ptdp::Tensor::borrow(x.data(), {4096}, ptdp::DType::F32), ptdp::ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const bool done = w->test();
  w->wait();
  return done && x[0] == static_cast<float>(world.size());
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  {
    ptdp::RuntimeOptions o;
    o.timeout_s = 60;
    auto rt = ptdp::Runtime::create(o);
    ptdp::Communicator& world = rt->world();
    const int n = world.size(), r = world.rank();
    g_rank = r;
    const int64_t k = 37;
    for (const ptdp::ReduceOp op : {ptdp::ReduceOp::Sum, ptdp::ReduceOp::Avg}) {
      std::vector<float> a(static_cast<std::size_t>(n * k)), b, sep(static_cast<std::size_t>(k));
      for (int64_t i = 0; i < n * k; ++i) a[static_cast<std::size_t>(i)] = value(r, i);
      b = a;
      world.reduce_scatter(ptdp::Tensor::borrow(a.data(), {n * k}, ptdp::DType::F32),
                           ptdp::Tensor::borrow(sep.data(), {k}, ptdp::DType::F32), op)
          ->wait();
      world.reduce_scatter(ptdp::Tensor::borrow(b.data(), {n * k}, ptdp::DType::F32),
                           ptdp::Tensor::borrow(b.data() + r * k, {k}, ptdp::DType::F32), op)
          ->wait();
      expect(std::memcmp(sep.data(), b.data() + r * k, static_cast<std::size_t>(k) * sizeof(float)) == 0,
             std::string("reduce_scatter in place equals the separate-buffer one bitwise (") +
                 (op == ptdp::ReduceOp::Sum ? "sum" : "avg") + ")");
    }
    for (const ptdp::DType dt : {ptdp::DType::F32, ptdp::DType::BF16}) {
      std::vector<float> want(static_cast<std::size_t>(n * k));
      for (int q = 0; q < n; ++q)
        for (int64_t i = 0; i < k; ++i) want[static_cast<std::size_t>(q * k + i)] = value(q, i);
      ptdp::Tensor all = ptdp::Tensor::zeros({n * k}, dt);
      ptdp::Tensor mine = all.view(r * k, {k});
      const ptdp::Tensor src = ptdp::Tensor::from_host(want.data() + r * k, {k}, ptdp::DType::F32).to(dt);
      mine.backend().copy(mine.raw(), src.raw(), src.nbytes());
      world.all_gather(mine, all)->wait();
      const ptdp::Tensor expected = ptdp::Tensor::from_host(want.data(), {n * k}, ptdp::DType::F32).to(dt);
      expect(std::memcmp(all.raw(), expected.raw(), all.nbytes()) == 0,
             std::string("all_gather in place gives every rank's chunk (") + ptdp::dtype_name(dt) + ")");
    }
    std::shared_ptr<void> token = world.background_progress();
    expect(token != nullptr, "background_progress() gives a token under MPI_THREAD_SERIALIZED");
    expect(completes_unattended(world), "with the progress thread a posted all-reduce completes unattended");
    token.reset();
    const bool alone = completes_unattended(world);
    if (r == 0) {
      std::printf("without the progress thread the unattended all-reduce %s\n",
                  alone ? "completed too (MPI progressed it)" : "did not complete (needs MPI calls)");
      std::fflush(stdout);
    }
  }
  int failed = 0, passed = 0;
  MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&g_passed, &passed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("test_comm_in_place: %d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
