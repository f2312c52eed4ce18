// The ways to create a runtime: over MPI_COMM_WORLD (with MPI initialised by the caller, or by
// ptdp itself), over a communicator the caller split, from a Fortran handle, and without MPI
// (use_mpi = 0); node-local ranks; isolation of ptdp's traffic from the caller's; bad inputs.
//
//   mpiexec -n W test_comm_runtime caller-init   the program calls MPI_Init / MPI_Finalize
//   [mpiexec -n W] test_comm_runtime ptdp-init   ptdp_runtime_create initialises MPI and
//                                                finalises it at exit (also run without mpiexec)
//
#include <cmath>
#include <cstdlib>
#include <limits>

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

/// On one runtime whose world is `members` (world ranks of MPI_COMM_WORLD, in runtime-rank
/// order): rank and size, node-local ranks, and collectives that stay within it.
void check_runtime(ptdp_runtime rt, const std::vector<int32_t>& members, int me, const std::string& what) {
  ct::context(what);
  const auto n = static_cast<int32_t>(members.size());
  int32_t want_rank = -1;
  for (int32_t i = 0; i < n; ++i)
    if (members[static_cast<std::size_t>(i)] == me) want_rank = i;
  int32_t rank = -7, size = -7;
  CT_OK(ptdp_runtime_world(rt, &rank, &size));
  expect_eq(size, n, "world size");
  expect_eq(rank, want_rank, "world rank");
  CT_OK(ptdp_runtime_world(rt, nullptr, nullptr));  // both outputs are optional
  int32_t local_rank = -7, local_size = -7;
  CT_OK(ptdp_runtime_local(rt, &local_rank, &local_size));
  // One machine: every rank of the runtime shares the node, ordered by runtime rank.
  expect_eq(local_size, n, "local size (all ranks on this one machine)");
  expect_eq(local_rank, want_rank, "local rank");
  int32_t gpu = -7;
  CT_OK(ptdp_runtime_gpu(rt, &gpu));
  expect(gpu >= -1, "ptdp_runtime_gpu gives -1 or an ordinal", ">= -1", ct::str(gpu));

  ptdp_groups g = nullptr;
  if (!CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) return;
  // The world of the runtime is exactly `members`: gather the MPI_COMM_WORLD ranks.
  Tensor mine = make(PTDP_DTYPE_I32, {static_cast<double>(me)});
  Tensor all = ct::zeros(PTDP_DTYPE_I32, n);
  if (CT_OK(ptdp_all_gather(g, PTDP_GROUP_WORLD, mine, all, nullptr)).empty()) {
    expect_vec(read(all), std::vector<double>(members.begin(), members.end()), "all_gather of the world ranks");
  }
  Tensor sum = make(PTDP_DTYPE_I64, {static_cast<double>(me + 1), 1.0});
  if (CT_OK(ptdp_all_reduce(g, PTDP_GROUP_WORLD, sum, PTDP_REDUCE_SUM, nullptr)).empty()) {
    double s = 0;
    for (int32_t r : members) s += r + 1;
    expect_vec(read(sum), {s, static_cast<double>(n)}, "all_reduce sum over the runtime's world");
  }
  // Groups of a t = 2 layout within this world, when it divides.
  if (n % 2 == 0) {
    ptdp_parallel_options o;
    ptdp_parallel_options_init(&o);
    o.tensor_model_parallel_size = 2;
    ptdp_groups g2 = nullptr;
    if (CT_OK(ptdp_groups_create(rt, &o, &g2)).empty()) {
      int32_t m[2] = {-7, -7}, count = -7;
      CT_OK(ptdp_groups_members(g2, PTDP_GROUP_TENSOR, m, 2, &count));
      expect_eq(count, int32_t{2}, "tensor group size");
      expect_vec(std::vector<int32_t>(m, m + 2), {want_rank & ~1, want_rank | 1},
                 "tensor group members, in runtime ranks");
      Tensor x = make(PTDP_DTYPE_F32, {static_cast<double>(me)});
      CT_OK(ptdp_all_reduce(g2, PTDP_GROUP_TENSOR, x, PTDP_REDUCE_SUM, nullptr));
      const double partner = members[static_cast<std::size_t>(want_rank ^ 1)];
      expect_vec(read(x), {me + partner}, "tensor group all_reduce");
      CT_OK(ptdp_groups_destroy(g2));
    }
  }
  CT_OK(ptdp_barrier(g, PTDP_GROUP_WORLD, nullptr));
  CT_OK(ptdp_groups_destroy(g));
}

/// ptdp's traffic goes over its own duplicate: a receive the caller posted on the caller's
/// communicator (any source, any tag) is not matched by ptdp's messages.
void check_isolation(ptdp_runtime rt, int me, int W) {
  ct::context("isolation from the caller's communicator");
  int caller_msg = -1;
  MPI_Request req;
  MPI_Irecv(&caller_msg, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
  ptdp_groups g = nullptr;
  if (CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) {
    const int next = (me + 1) % W, prev = (me + W - 1) % W;
    Tensor out = make(PTDP_DTYPE_I32, {-100.0 - me}), in = ct::zeros(PTDP_DTYPE_I32, 1);
    const ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, out, next, 0}, {PTDP_P2P_RECV, in, prev, 0}};
    CT_OK(ptdp_batch_send_recv(g, PTDP_GROUP_WORLD, ops, 2, nullptr));
    expect_vec(read(in), {-100.0 - prev}, "ptdp's ring message arrives at ptdp's receive");
    Tensor x = make(PTDP_DTYPE_I32, {1.0});
    CT_OK(ptdp_all_reduce(g, PTDP_GROUP_WORLD, x, PTDP_REDUCE_SUM, nullptr));
    // Test before anybody can have sent the caller's message: those are sent only after the
    // barrier below (a collective never matches a point-to-point receive).
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    expect(flag == 0, "the caller's pending receive on MPI_COMM_WORLD saw none of ptdp's traffic", "pending",
           "matched a message with " + std::to_string(caller_msg));
    CT_OK(ptdp_groups_destroy(g));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int next = (me + 1) % W;
  const int mine = 1000 + me;
  MPI_Send(&mine, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  expect_eq(caller_msg, 1000 + (me + W - 1) % W, "the caller's own message");
}

/// use_mpi = 0: a world of one, even under mpiexec.
void check_no_mpi(int me) {
  ct::context("use_mpi = 0");
  ptdp_runtime_options o = ct::runtime_options();
  o.use_mpi = 0;
  ptdp_runtime rt = nullptr;
  if (!CT_OK(ptdp_runtime_create(&o, &rt)).empty()) return;
  int32_t rank = -7, size = -7, lr = -7, ls = -7;
  CT_OK(ptdp_runtime_world(rt, &rank, &size));
  expect_eq(size, int32_t{1}, "world size");
  expect_eq(rank, int32_t{0}, "world rank");
  CT_OK(ptdp_runtime_local(rt, &lr, &ls));
  expect_eq(ls, int32_t{1}, "local size");
  expect_eq(lr, int32_t{0}, "local rank");
  ptdp_groups g = nullptr;
  if (CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) {
    Tensor t = make(PTDP_DTYPE_F32, {static_cast<double>(me), 2.0});
    CT_OK(ptdp_all_reduce(g, PTDP_GROUP_WORLD, t, PTDP_REDUCE_SUM, nullptr));
    expect_vec(read(t), {static_cast<double>(me), 2.0}, "all_reduce over a world of one is the identity");
    Tensor out = ct::zeros(PTDP_DTYPE_F32, 2);
    CT_OK(ptdp_all_gather(g, PTDP_GROUP_DATA, t, out, nullptr));
    expect_vec(read(out), {static_cast<double>(me), 2.0}, "all_gather over a world of one copies");
    Tensor in = ct::zeros(PTDP_DTYPE_F32, 2);
    const ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, t, 0, 4}, {PTDP_P2P_RECV, in, 0, 4}};
    CT_OK(ptdp_batch_send_recv(g, PTDP_GROUP_PIPELINE, ops, 2, nullptr));
    expect_vec(read(in), {static_cast<double>(me), 2.0}, "send to oneself in one batch");
    CT_OK(ptdp_barrier(g, PTDP_GROUP_EMBEDDING, nullptr));
    {
      // Tags are 0 to 32767 in every communicator, the world of one included.
      const ptdp_p2p_op big_tag[2] = {{PTDP_P2P_SEND, t, 0, 40000}, {PTDP_P2P_RECV, in, 0, 40000}};
      const std::string m = CT_STATUS(ptdp_batch_send_recv(g, PTDP_GROUP_WORLD, big_tag, 2, nullptr),
                                      PTDP_ERR_INVALID_ARGUMENT);
      expect_message(m, {"tag"}, "tag 40000 in a world of one");
    }
    CT_OK(ptdp_groups_destroy(g));
  }
  ptdp_parallel_options po;
  ptdp_parallel_options_init(&po);
  po.tensor_model_parallel_size = 2;
  const std::string msg = CT_STATUS(ptdp_groups_create(rt, &po, &g), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(msg, {"divisible"}, "t = 2 in a world of one");
  CT_OK(ptdp_runtime_destroy(rt));
}

void check_bad_inputs() {
  ct::context("bad inputs");
  ptdp_runtime rt = nullptr;
  std::string m;
  m = CT_STATUS(ptdp_runtime_create(nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create", "out"}, "ptdp_runtime_create(NULL out)");
  m = CT_STATUS(ptdp_runtime_create_from_mpi(nullptr, MPI_COMM_WORLD, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create_from_mpi", "out"}, "ptdp_runtime_create_from_mpi(NULL out)");
  m = CT_STATUS(ptdp_runtime_create_from_fortran(nullptr, MPI_Comm_c2f(MPI_COMM_WORLD), nullptr),
                PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create_from_fortran", "out"}, "ptdp_runtime_create_from_fortran(NULL out)");

  m = CT_STATUS(ptdp_runtime_create_from_mpi(nullptr, MPI_COMM_NULL, &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create_from_mpi", "comm", "MPI_COMM_NULL"}, "from_mpi(MPI_COMM_NULL)");
  expect(rt == nullptr, "from_mpi(MPI_COMM_NULL) leaves *out unchanged", "NULL", "a handle");
  m = CT_STATUS(ptdp_runtime_create_from_fortran(nullptr, MPI_Comm_c2f(MPI_COMM_NULL), &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create_from_fortran", "fortran_comm"}, "from_fortran(c2f(MPI_COMM_NULL))");
  expect(rt == nullptr, "from_fortran(null) leaves *out unchanged", "NULL", "a handle");

  ptdp_runtime_options o;
  ptdp_runtime_options_init(&o);
  expect_eq(o.struct_size, sizeof(ptdp_runtime_options), "options struct_size");
  expect_eq(o.verify_collectives, int32_t{1}, "verify_collectives default");
  expect_eq(o.use_mpi, int32_t{1}, "use_mpi default");
  expect(o.comm_timeout_s <= 0, "comm_timeout_s default means 'environment, else 300'", "<= 0", ct::str(o.comm_timeout_s));
  m = CT_STATUS(ptdp_runtime_options_init(nullptr), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"options"}, "ptdp_runtime_options_init(NULL)");

  ptdp_runtime_options zero = o;
  zero.struct_size = 0;
  m = CT_STATUS(ptdp_runtime_create(&zero, &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create", "struct_size"}, "ptdp_runtime_create with struct_size 0");
  m = CT_STATUS(ptdp_runtime_create_from_mpi(&zero, MPI_COMM_WORLD, &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create_from_mpi", "struct_size"}, "from_mpi with struct_size 0");
  m = CT_STATUS(ptdp_runtime_create_from_fortran(&zero, MPI_Comm_c2f(MPI_COMM_WORLD), &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"ptdp_runtime_create_from_fortran", "struct_size"}, "from_fortran with struct_size 0");

  ptdp_runtime_options bad = o;
  bad.verify_collectives = 2;
  m = CT_STATUS(ptdp_runtime_create(&bad, &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"verify_collectives"}, "verify_collectives = 2");
  bad = o;
  bad.use_mpi = 7;
  m = CT_STATUS(ptdp_runtime_create(&bad, &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"use_mpi"}, "use_mpi = 7");
  bad = o;
  bad.comm_timeout_s = std::numeric_limits<double>::quiet_NaN();
  m = CT_STATUS(ptdp_runtime_create_from_mpi(&bad, MPI_COMM_WORLD, &rt), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"comm_timeout_s"}, "comm_timeout_s = NaN");
  expect(rt == nullptr, "refused creations leave *out unchanged", "NULL", "a handle");

  int32_t r = 0;
  m = CT_STATUS(ptdp_runtime_world(nullptr, &r, &r), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"runtime"}, "ptdp_runtime_world(NULL)");
  m = CT_STATUS(ptdp_runtime_local(nullptr, &r, &r), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"runtime"}, "ptdp_runtime_local(NULL)");
  m = CT_STATUS(ptdp_runtime_gpu(nullptr, &r), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"runtime"}, "ptdp_runtime_gpu(NULL)");
  ptdp_groups g = nullptr;
  m = CT_STATUS(ptdp_groups_create(nullptr, nullptr, &g), PTDP_ERR_INVALID_ARGUMENT);
  expect_message(m, {"runtime"}, "ptdp_groups_create(NULL runtime)");
}

bool g_ptdp_inits = false;

// Registered before ptdp's own exit handler, so it runs after it: MPI must be finalised then.
void check_finalized_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    std::fprintf(stderr, "[rank %d] FAIL ptdp-init: MPI was not finalised at exit by ptdp\n", ct::g_rank);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "caller-init" && mode != "ptdp-init") {
    std::fprintf(stderr, "usage: test_comm_runtime caller-init|ptdp-init\n");
    return 2;
  }
  g_ptdp_inits = mode == "ptdp-init";

  ptdp_runtime world_rt = nullptr;
  if (g_ptdp_inits) {
    std::atexit(check_finalized_at_exit);
    int initialized = -1;
    MPI_Initialized(&initialized);
    // A refused call does not initialise MPI.
    CT_STATUS(ptdp_runtime_create(nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT);
    MPI_Initialized(&initialized);
    expect_eq(initialized, 0, "MPI is not initialised before ptdp_runtime_create");
    // Before MPI is initialised, the constructors that take a communicator refuse.
    const std::string m = CT_STATUS(ptdp_runtime_create_from_fortran(nullptr, 0, &world_rt), PTDP_ERR_INVALID_STATE);
    expect_message(m, {"not initialised"}, "from_fortran before MPI_Init");
    const std::string m2 = CT_STATUS(ptdp_runtime_create_from_mpi(nullptr, MPI_COMM_WORLD, &world_rt),
                                     PTDP_ERR_INVALID_STATE);
    expect_message(m2, {"not initialised"}, "from_mpi before MPI_Init");
    expect(world_rt == nullptr, "refused creations leave *out unchanged", "NULL", "a handle");
    ptdp_runtime_options o = ct::runtime_options();
    CT_OK(ptdp_runtime_create(&o, &world_rt));
    MPI_Initialized(&initialized);
    expect_eq(initialized, 1, "ptdp_runtime_create initialised MPI");
  } else {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    ptdp_runtime_options o = ct::runtime_options();
    CT_OK(ptdp_runtime_create(&o, &world_rt));
  }
  int me = 0, W = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  ct::g_rank = me;
  const double t0 = ct::now_s();

  std::vector<int32_t> everyone;
  for (int r = 0; r < W; ++r) everyone.push_back(r);

  if (world_rt) {
    check_runtime(world_rt, everyone, me, mode + ": ptdp_runtime_create (MPI_COMM_WORLD)");
    check_isolation(world_rt, me, W);
  }

  // From the Fortran handle of MPI_COMM_WORLD.
  {
    ptdp_runtime rt = nullptr;
    ptdp_runtime_options o = ct::runtime_options();
    ct::context("ptdp_runtime_create_from_fortran");
    if (CT_OK(ptdp_runtime_create_from_fortran(&o, MPI_Comm_c2f(MPI_COMM_WORLD), &rt)).empty()) {
      check_runtime(rt, everyone, me, "ptdp_runtime_create_from_fortran(MPI_COMM_WORLD)");
      CT_OK(ptdp_runtime_destroy(rt));
    }
  }

  // From a communicator the caller split itself: even and odd ranks. The caller frees its
  // communicator at once; the runtime works on its own duplicate.
  {
    MPI_Comm half = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
    ptdp_runtime rt = nullptr;
    ptdp_runtime_options o = ct::runtime_options();
    ct::context("ptdp_runtime_create_from_mpi");
    const bool ok = CT_OK(ptdp_runtime_create_from_mpi(&o, half, &rt)).empty();
    MPI_Comm_free(&half);
    if (ok) {
      std::vector<int32_t> same_parity;
      for (int r = me % 2; r < W; r += 2) same_parity.push_back(r);
      check_runtime(rt, same_parity, me, std::string("ptdp_runtime_create_from_mpi(") + (me % 2 ? "odd" : "even") + " ranks)");
      CT_OK(ptdp_runtime_destroy(rt));
    }
  }

  // Two runtimes alive at once over the same processes, used interleaved.
  {
    ct::context("two runtimes at once");
    ptdp_runtime a = nullptr, b = nullptr;
    ptdp_runtime_options o = ct::runtime_options();
    ptdp_groups ga = nullptr, gb = nullptr;
    if (CT_OK(ptdp_runtime_create_from_mpi(&o, MPI_COMM_WORLD, &a)).empty() &&
        CT_OK(ptdp_runtime_create_from_mpi(&o, MPI_COMM_WORLD, &b)).empty() &&
        CT_OK(ptdp_groups_create(a, nullptr, &ga)).empty() && CT_OK(ptdp_groups_create(b, nullptr, &gb)).empty()) {
      Tensor x = make(PTDP_DTYPE_F32, {1.0}), y = make(PTDP_DTYPE_F32, {2.0});
      ptdp_work wx = nullptr;
      CT_OK(ptdp_all_reduce(ga, PTDP_GROUP_WORLD, x, PTDP_REDUCE_SUM, &wx));
      CT_OK(ptdp_all_reduce(gb, PTDP_GROUP_WORLD, y, PTDP_REDUCE_SUM, nullptr));
      CT_OK(ptdp_work_wait(wx));
      CT_OK(ptdp_work_destroy(wx));
      expect_vec(read(x), {static_cast<double>(W)}, "all_reduce on runtime a");
      expect_vec(read(y), {2.0 * W}, "all_reduce on runtime b");
    }
    CT_OK(ptdp_groups_destroy(ga));
    CT_OK(ptdp_groups_destroy(gb));
    CT_OK(ptdp_runtime_destroy(a));
    CT_OK(ptdp_runtime_destroy(b));
  }

  check_no_mpi(me);
  check_bad_inputs();

  ct::context("");
  CT_OK(ptdp_runtime_destroy(world_rt));
  if (me == 0) std::printf("checks took %.2f s\n", ct::now_s() - t0);
  const int rc = ct::finish("test_comm_runtime");
  if (!g_ptdp_inits) MPI_Finalize();
  return rc;
}
