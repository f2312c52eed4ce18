// A rank that never arrives: the last rank skips one all_reduce on the world group, the others
// must get PTDP_ERR_TIMEOUT after the runtime's deadline (2 s) with a message naming the
// operation, the group, its size, the sequence number and the rank; the failed group then
// refuses further work. The skipping rank performs the all_reduce late (after the others'
// deadline, timed by the clock, not by a collective on the failed communicator), which
// completes the others' abandoned operation, and everybody finishes on a fresh runtime.
//
//   mpiexec -n W test_comm_timeout option   (comm_timeout_s = 2 in the options)
//   PTDP_COMM_TIMEOUT_S=2 mpiexec -n W test_comm_timeout env   (timeout from the environment)
#include <cstdlib>
#include <thread>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::expect_eq;
using ct::expect_message;
using ct::expect_status;
using ct::expect_vec;
using ct::make;
using ct::read;
using ct::Tensor;

constexpr double kTimeout = 2.0;
constexpr double kSlack = 5.0;  // the deadline may be overshot by this much on a loaded machine

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  const std::string mode = argc > 1 ? argv[1] : "";
  const int last = W - 1;

  if (W < 2 || (mode != "option" && mode != "env")) {
    expect(false, "usage: mpiexec -n W test_comm_timeout option|env with W >= 2", "W >= 2 and a mode",
           "W = " + std::to_string(W) + ", mode '" + mode + "'");
    const int rc = ct::finish("test_comm_timeout");
    MPI_Finalize();
    return rc;
  }
  ct::context("timeout from " + mode);

  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.verify_collectives = 0;  // the skipped all_reduce itself must be what times out
  if (mode == "option") {
    ro.comm_timeout_s = kTimeout;
  } else {
    const char* env = std::getenv("PTDP_COMM_TIMEOUT_S");
    expect(env != nullptr && std::string(env) == "2", "PTDP_COMM_TIMEOUT_S is set to 2 for this test", "2",
           env ? env : "unset");
    ro.comm_timeout_s = 0;  // <= 0: take the environment's
  }

  ptdp_runtime rt = nullptr;
  ptdp_groups g = nullptr;
  if (!CT_OK(ptdp_runtime_create(&ro, &rt)).empty() || !CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) {
    MPI_Abort(MPI_COMM_WORLD, 2);  // nothing below can work
  }
  {
    Tensor warm = make(PTDP_DTYPE_F32, {1.0});
    CT_OK(ptdp_all_reduce(g, PTDP_GROUP_WORLD, warm, PTDP_REDUCE_SUM, nullptr));
    expect_vec(read(warm), {static_cast<double>(W)}, "a first all_reduce works");
  }

  // Everybody leaves this barrier at about the same time; the skipping rank measures from here.
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = ct::now_s();
  const std::vector<double> want = {W * (W + 1) / 2.0, static_cast<double>(W)};
  Tensor t = make(PTDP_DTYPE_F32, {static_cast<double>(me + 1), 1.0});

  if (me != last) {
    const double start = ct::now_s();
    const ptdp_status s = ptdp_all_reduce(g, PTDP_GROUP_WORLD, t, PTDP_REDUCE_SUM, nullptr);
    const double took = ct::now_s() - start;
    const std::string msg = expect_status(s, PTDP_ERR_TIMEOUT, "all_reduce that the last rank skips");
    expect_message(msg,
                   {"ptdp_all_reduce", "all_reduce", "world group", "(size " + std::to_string(W) + ")", "#",
                    "world rank " + std::to_string(me), "timed out"},
                   "the timeout message names the operation, group, size, sequence number and rank");
    expect(took >= kTimeout, "the timeout is not reported before the deadline", ">= " + ct::str(kTimeout) + " s",
           ct::str(took) + " s");
    expect(took < kTimeout + kSlack, "the timeout is reported soon after the deadline",
           "< " + ct::str(kTimeout + kSlack) + " s", ct::str(took) + " s");
    if (me == 0) std::printf("rank 0 timed out after %.2f s: %s\n", took, msg.c_str());

    // The failed group refuses further work.
    Tensor again = make(PTDP_DTYPE_F32, {1.0});
    const std::string m2 = CT_STATUS(ptdp_all_reduce(g, PTDP_GROUP_WORLD, again, PTDP_REDUCE_SUM, nullptr),
                                     PTDP_ERR_INVALID_STATE);
    expect_message(m2, {"ptdp_all_reduce", "world group"}, "a second all_reduce on the failed group");
    ptdp_work w = nullptr;
    CT_STATUS(ptdp_barrier(g, PTDP_GROUP_WORLD, &w), PTDP_ERR_INVALID_STATE);
    expect(w == nullptr, "a refused barrier makes no work handle", "NULL", "a handle");
  } else {
    // Arrive well after the others gave up.
    const double late = t0 + kTimeout + 1.5;
    while (ct::now_s() < late) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // This completes the others' abandoned all_reduce (their MPI progresses it while they wait
    // in the fresh runtime's creation below), so it succeeds here with everybody's data.
    if (CT_OK(ptdp_all_reduce(g, PTDP_GROUP_WORLD, t, PTDP_REDUCE_SUM, nullptr)).empty()) {
      expect_vec(read(t), want, "the late all_reduce sums every rank's contribution");
    }
  }

  // Everybody finishes on a fresh runtime over the same processes (from the Fortran handle of
  // MPI_COMM_WORLD), with a generous deadline.
  {
    ptdp_runtime_options fresh_o = ct::runtime_options(30.0);
    ptdp_runtime fresh = nullptr;
    ptdp_groups fg = nullptr;
    if (CT_OK(ptdp_runtime_create_from_fortran(&fresh_o, MPI_Comm_c2f(MPI_COMM_WORLD), &fresh)).empty() &&
        CT_OK(ptdp_groups_create(fresh, nullptr, &fg)).empty()) {
      CT_OK(ptdp_barrier(fg, PTDP_GROUP_WORLD, nullptr));
      Tensor x = make(PTDP_DTYPE_F32, {static_cast<double>(me + 1), 1.0});
      CT_OK(ptdp_all_reduce(fg, PTDP_GROUP_WORLD, x, PTDP_REDUCE_SUM, nullptr));
      expect_vec(read(x), want, "an all_reduce on the fresh runtime");
      CT_OK(ptdp_barrier(fg, PTDP_GROUP_WORLD, nullptr));
    }
    CT_OK(ptdp_groups_destroy(fg));
    CT_OK(ptdp_runtime_destroy(fresh));
  }
  if (me != last) {
    // The abandoned all_reduce wrote its result into the tensor once MPI completed it; either
    // way, the tensor stayed alive and holds either the input or the full sum.
    const std::vector<double> got = read(t);
    expect(got == want || got == std::vector<double>{static_cast<double>(me + 1), 1.0},
           "the abandoned all_reduce's tensor holds the input or the sum", ct::str(want), ct::str(got));
  }

  CT_OK(ptdp_groups_destroy(g));
  CT_OK(ptdp_runtime_destroy(rt));
  const double total = ct::now_s() - t0;
  if (me == 0) std::printf("timeout scenario took %.2f s\n", total);
  const int rc = ct::finish("test_comm_timeout");
  MPI_Finalize();
  return rc;
}
