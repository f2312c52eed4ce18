// Flight recorder and abort under mpiexec, through the C API only.
//
//   cascade (W = 4, t = 2, p = 2): rank 3 hangs (in a plain MPI_Barrier of the test, outside ptdp)
//     before its tensor-group all_reduce. Rank 2 computes a little, enters that all_reduce and
//     waits for rank 3; ranks 0 and 1 wait for pipeline receives from ranks 2 and 3 and time out
//     first, on the pipeline groups: their timeout names the wrong group. Every rank that times
//     out writes its record into PTDP_FLIGHT_RECORDER_DIR (the timeout message says where); rank
//     3 writes its own on request. ptdp_flight_analyze and the ptdp-flight-analyze tool must
//     then name rank 3 and the tensor-group all_reduce. Finally every rank aborts its runtime
//     and destroys groups and runtime promptly, though operations stay pending.
//   abort (W >= 2): the last rank never joins a world all_reduce; on every other rank a second
//     thread calls ptdp_runtime_abort while the main thread waits, which must return
//     PTDP_ERR_INVALID_STATE ("aborted") well before the deadline; later calls fail fast; groups
//     and runtime are destroyed at once. Plus the bad inputs of the new entry points.
//
// The deadline comes from PTDP_COMM_TIMEOUT_S (comm_timeout_s = 0), which ctest sets to 2.
//   PTDP_COMM_TIMEOUT_S=2 PTDP_FLIGHT_RECORDER_DIR=DIR mpiexec -n 4 test_comm_flight cascade TOOL
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::expect_message;
using ct::make;
using ct::Tensor;

constexpr double kTimeout = 2.0;
constexpr double kSlack = 5.0;

std::string flight_dir() {
  const char* d = std::getenv("PTDP_FLIGHT_RECORDER_DIR");
  return d ? d : "";
}

// Destroys groups and runtime, checking both return at once.
void destroy_quickly(ptdp_groups g, ptdp_runtime rt, const std::string& what) {
  const double start = ct::now_s();
  CT_OK(ptdp_groups_destroy(g));
  CT_OK(ptdp_runtime_destroy(rt));
  const double took = ct::now_s() - start;
  expect(took < 1.0, what + ": groups and runtime are destroyed promptly after ptdp_runtime_abort", "< 1 s",
         ct::str(took) + " s");
}

void run_cascade(int me, int W, const std::string& tool) {
  const std::string dir = flight_dir();
  if (!expect(!dir.empty(), "PTDP_FLIGHT_RECORDER_DIR is set", "a directory", "unset")) return;
  if (me == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);  // comm_timeout_s = 0: PTDP_COMM_TIMEOUT_S decides
  ptdp_runtime rt = nullptr;
  ptdp_groups g = nullptr;
  ct::Layout l;
  l.W = W;
  l.t = 2;
  l.p = 2;
  const ptdp_parallel_options po = l.options();
  if (!CT_OK(ptdp_runtime_create(&ro, &rt)).empty() || !CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) {
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const bool last_stage = l.pp(me) == 1;
  // A first iteration that works: tensor all_reduce, then stage 1 sends to stage 0.
  {
    Tensor x = make(PTDP_DTYPE_F32, {1.0, 2.0});
    CT_OK(ptdp_all_reduce(g, PTDP_GROUP_TENSOR, x, PTDP_REDUCE_SUM, nullptr));
    Tensor y = make(PTDP_DTYPE_F32, {3.0});
    if (last_stage) CT_OK(ptdp_send(g, PTDP_GROUP_PIPELINE, y, 0, 0, nullptr));
    else CT_OK(ptdp_recv(g, PTDP_GROUP_PIPELINE, y, 1, 0, nullptr));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = ct::now_s();

  Tensor x = make(PTDP_DTYPE_F32, {1.0, 2.0});
  Tensor y = make(PTDP_DTYPE_F32, {0.0});
  if (me == 3) {
    // Hangs outside ptdp until everybody else has timed out and written the record.
    MPI_Barrier(MPI_COMM_WORLD);
    CT_OK(ptdp_flight_recorder_dump(rt, nullptr));
  } else {
    ptdp_status s;
    std::string msg;
    if (me == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // compute before the all_reduce
      s = ptdp_all_reduce(g, PTDP_GROUP_TENSOR, x, PTDP_REDUCE_SUM, nullptr);
      msg = ct::expect_status(s, PTDP_ERR_TIMEOUT, "rank 2's tensor all_reduce times out");
      expect_message(msg, {"tensor group [2, 3]"}, "rank 2's timeout names its tensor group");
    } else {
      s = ptdp_recv(g, PTDP_GROUP_PIPELINE, y, 1, 0, nullptr);
      msg = ct::expect_status(s, PTDP_ERR_TIMEOUT, "the stage-0 receive times out");
      // The symptom the issue describes: the first timeout names a pipeline group.
      expect_message(msg, {"pipeline group"}, "the stage-0 timeout names its pipeline group");
    }
    const double took = ct::now_s() - t0;
    expect(took >= kTimeout && took < kTimeout + 0.5 + kSlack, "the timeout comes from PTDP_COMM_TIMEOUT_S = 2",
           "in [2, 7.5] s", ct::str(took) + " s");
    const std::string file = dir + "/flight-rank0000" + std::to_string(me) + ".json";
    expect_message(msg, {"flight record: " + file}, "the timeout message says where the record went");
    expect(std::filesystem::exists(file), "the record of a rank that timed out exists", file, "no file");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every record written

  if (me == 0) {
    size_t length = 0;
    int32_t culprit = -2;
    char report[8192];
    if (CT_OK(ptdp_flight_analyze(dir.c_str(), report, sizeof report, &length, &culprit)).empty()) {
      std::printf("%s", report);
      ct::expect_eq(culprit, 3, "the analyzer names rank 3");
      expect_message(report,
                     {"rank 3 never reached all_reduce", "on tensor group [2, 3]", "rank 2 timed out in all_reduce",
                      "first timeout: rank", "pipeline group", "a consequence"},
                     "the report names the root cause and the misleading first timeout");
      expect(length == std::strlen(report), "length is the report's strlen", ct::str(std::strlen(report)),
             ct::str(length));
    }
    // Too small a buffer: the needed length, nothing written.
    char small[4] = "abc";
    size_t need = 0;
    CT_STATUS(ptdp_flight_analyze(dir.c_str(), small, sizeof small, &need, nullptr), PTDP_ERR_INVALID_ARGUMENT);
    expect(need == length && std::string(small) == "abc", "a short buffer gets the length and is left alone");
    if (!tool.empty()) {
      const std::string cmd = tool + " " + dir + " > " + dir + "/tool.out 2>&1";
      const int rc = std::system(cmd.c_str());
      expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "ptdp-flight-analyze exits 1 when it finds a culprit", "1",
             ct::str(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1));
      std::FILE* f = std::fopen((dir + "/tool.out").c_str(), "r");
      std::string out;
      char buf[4096];
      size_t n = 0;
      while (f && (n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
      if (f) std::fclose(f);
      expect_message(out, {"culprit: rank 3", "rank 3 never reached all_reduce"}, "ptdp-flight-analyze's output");
    }
  }

  // Abort everything (operations stay pending on ranks 0, 1, 2) and leave promptly.
  CT_OK(ptdp_runtime_abort(rt));
  CT_OK(ptdp_runtime_abort(rt));  // twice is harmless
  const std::string m = CT_STATUS(ptdp_barrier(g, PTDP_GROUP_WORLD, nullptr), PTDP_ERR_INVALID_STATE);
  expect_message(m, {"aborted", "ptdp_runtime_abort"}, "a call after the abort fails fast and says why");
  int32_t rank = -1;
  CT_OK(ptdp_runtime_world(rt, &rank, nullptr));
  ct::expect_eq(rank, me, "queries still work after the abort");
  destroy_quickly(g, rt, "cascade");
}

void run_abort(int me, int W) {
  const int last = W - 1;
  ptdp_runtime rt = nullptr;
  ptdp_groups g = nullptr;
  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.verify_collectives = 0;
  if (!CT_OK(ptdp_runtime_create(&ro, &rt)).empty() || !CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) {
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != last) {
    std::atomic<bool> called{false};
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      called.store(ptdp_runtime_abort(rt) == PTDP_SUCCESS);
    });
    Tensor x = make(PTDP_DTYPE_F32, {1.0});
    const double start = ct::now_s();
    const std::string msg =
        CT_STATUS(ptdp_all_reduce(g, PTDP_GROUP_WORLD, x, PTDP_REDUCE_SUM, nullptr), PTDP_ERR_INVALID_STATE);
    const double took = ct::now_s() - start;
    watchdog.join();
    expect(called.load(), "ptdp_runtime_abort from another thread succeeds");
    expect_message(msg, {"all_reduce", "world group", "aborted"}, "the interrupted wait says it was aborted");
    expect(took < kTimeout, "the abort ends the wait before the deadline", "< 2 s", ct::str(took) + " s");
    Tensor y = make(PTDP_DTYPE_F32, {1.0});
    const double t1 = ct::now_s();
    CT_STATUS(ptdp_broadcast(g, PTDP_GROUP_WORLD, y, 0, nullptr), PTDP_ERR_INVALID_STATE);
    expect(ct::now_s() - t1 < 0.5, "later calls fail fast");
    ptdp_groups g2 = nullptr;
    CT_STATUS(ptdp_groups_create(rt, nullptr, &g2), PTDP_ERR_INVALID_STATE);
    expect(g2 == nullptr, "no groups on an aborted runtime");
    destroy_quickly(g, rt, "abort");
    MPI_Barrier(MPI_COMM_WORLD);  // releases the last rank
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // hangs outside ptdp until the others have aborted
    CT_OK(ptdp_groups_destroy(g));
    CT_OK(ptdp_runtime_destroy(rt));
  }

  // Bad inputs: named, no side effects.
  expect_message(CT_STATUS(ptdp_runtime_abort(nullptr), PTDP_ERR_INVALID_ARGUMENT), {"runtime"},
                 "ptdp_runtime_abort(NULL)");
  expect_message(CT_STATUS(ptdp_flight_recorder_dump(nullptr, "/tmp"), PTDP_ERR_INVALID_ARGUMENT), {"runtime"},
                 "ptdp_flight_recorder_dump(NULL runtime)");
  size_t length = 0;
  expect_message(CT_STATUS(ptdp_flight_analyze(nullptr, nullptr, 0, &length, nullptr), PTDP_ERR_INVALID_ARGUMENT),
                 {"dir"}, "ptdp_flight_analyze(NULL dir)");
  expect_message(CT_STATUS(ptdp_flight_analyze("/tmp", nullptr, 0, nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT),
                 {"length"}, "ptdp_flight_analyze(NULL length)");
  expect_message(CT_STATUS(ptdp_flight_analyze("/nonexistent/ptdp-flight", nullptr, 0, &length, nullptr), PTDP_ERR_IO),
                 {"/nonexistent/ptdp-flight"}, "ptdp_flight_analyze of a missing directory");
  ptdp_runtime self = nullptr;
  ptdp_runtime_options so;
  ptdp_runtime_options_init(&so);
  so.use_mpi = 0;
  if (CT_OK(ptdp_runtime_create(&so, &self)).empty()) {
    expect_message(CT_STATUS(ptdp_flight_recorder_dump(self, "/nonexistent/ptdp-flight"), PTDP_ERR_IO),
                   {"/nonexistent/ptdp-flight/flight-rank00000.json"}, "a dump into a missing directory");
    CT_OK(ptdp_runtime_abort(self));
    CT_OK(ptdp_runtime_destroy(self));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string tool = argc > 2 ? argv[2] : "";
  ct::context(mode);
  if (mode == "cascade" && W == 4) {
    run_cascade(me, W, tool);
  } else if (mode == "abort" && W >= 2) {
    run_abort(me, W);
  } else {
    expect(false, "usage: mpiexec -n 4 test_comm_flight cascade [TOOL] | mpiexec -n W>=2 test_comm_flight abort",
           "a mode", mode + " with W = " + std::to_string(W));
  }
  const int rc = ct::finish("test_comm_flight");
  MPI_Finalize();
  return rc;
}
