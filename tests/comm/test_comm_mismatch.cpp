// Ranks that disagree (verify_collectives = 1, the default): every rank gets
// PTDP_ERR_INVALID_ARGUMENT with a message saying what they disagree on, and the group keeps
// working. Also receive buffers of the wrong size, and ranks asking for different layouts.
//
//   mpiexec -n W test_comm_mismatch        (W >= 2)
//
#include <cstdlib>

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

/// A correct all_reduce on the group right after a refused one succeeds with the right sum.
void still_works(ptdp_groups g, ptdp_group_kind kind, int group_size, const std::string& after) {
  Tensor one = make(PTDP_DTYPE_F32, {1.0, 2.0});
  if (CT_OK(ptdp_all_reduce(g, kind, one, PTDP_REDUCE_SUM, nullptr)).empty()) {
    expect_vec(read(one), {1.0 * group_size, 2.0 * group_size}, "the group still works after " + after);
  }
}

void collective_mismatches(ptdp_groups g, ptdp_group_kind kind, int grank, int n) {
  const bool odd_one = grank == 0;  // group rank 0 does something different from the others
  {
    const std::string what = "all_reduce of 4 elements on rank 0, 5 on the others";
    Tensor t = ct::zeros(PTDP_DTYPE_F32, odd_one ? 4 : 5);
    ptdp_tensor_fill(t, 3.0);
    const std::string msg = expect_status(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, nullptr),
                                          PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"ptdp_all_reduce", "disagree", "element count", "4 to 5", "all_reduce"}, what);
    // Nothing was reduced.
    expect_vec(read(t), std::vector<double>(odd_one ? 4 : 5, 3.0), what + ": the tensor is unchanged");
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "all_reduce of f32 on rank 0, i32 on the others";
    Tensor t = ct::zeros(odd_one ? PTDP_DTYPE_F32 : PTDP_DTYPE_I32, 4);
    const std::string msg = expect_status(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, nullptr),
                                          PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"disagree", "dtype", "f32", "i32"}, what);
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "all_reduce of bf16 on rank 0, f16 on the others (same byte size)";
    Tensor t = ct::zeros(odd_one ? PTDP_DTYPE_BF16 : PTDP_DTYPE_F16, 4);
    const std::string msg = expect_status(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, nullptr),
                                          PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"disagree", "dtype"}, what);
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "all_reduce sum on rank 0, max on the others";
    Tensor t = ct::zeros(PTDP_DTYPE_F32, 4);
    const std::string msg = expect_status(
        ptdp_all_reduce(g, kind, t, odd_one ? PTDP_REDUCE_SUM : PTDP_REDUCE_MAX, nullptr),
        PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"disagree"}, what);
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "all_reduce on rank 0, broadcast on the others";
    Tensor t = ct::zeros(PTDP_DTYPE_F32, 4);
    const ptdp_status s = odd_one ? ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, nullptr)
                                  : ptdp_broadcast(g, kind, t, 0, nullptr);
    const std::string msg = expect_status(s, PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"disagree", "operation", "all_reduce", "broadcast"}, what);
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "broadcast from root 0 on rank 0, root 1 on the others";
    Tensor t = ct::zeros(PTDP_DTYPE_F32, 4);
    const std::string msg = expect_status(ptdp_broadcast(g, kind, t, odd_one ? 0 : 1, nullptr),
                                          PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"ptdp_broadcast", "disagree", "root"}, what);
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "all_gather of 2 elements on rank 0, 3 on the others";
    const int c = odd_one ? 2 : 3;
    Tensor in = ct::zeros(PTDP_DTYPE_F32, c), out = ct::zeros(PTDP_DTYPE_F32, c * n);
    const std::string msg = expect_status(ptdp_all_gather(g, kind, in, out, nullptr), PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"ptdp_all_gather", "disagree", "element count"}, what);
    still_works(g, kind, n, what);
  }
  {
    const std::string what = "reduce_scatter of 2 per rank on rank 0, 3 on the others";
    const int c = odd_one ? 2 : 3;
    Tensor in = ct::zeros(PTDP_DTYPE_F32, c * n), out = ct::zeros(PTDP_DTYPE_F32, c);
    const std::string msg = expect_status(ptdp_reduce_scatter(g, kind, in, out, PTDP_REDUCE_SUM, nullptr),
                                          PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"ptdp_reduce_scatter", "disagree", "element count"}, what);
    still_works(g, kind, n, what);
  }
  {
    // Non-blocking: the disagreement is reported by the call itself, no work handle is made.
    const std::string what = "non-blocking all_reduce with disagreeing counts";
    Tensor t = ct::zeros(PTDP_DTYPE_F32, odd_one ? 6 : 7);
    ptdp_work w = nullptr;
    const std::string msg = expect_status(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, &w),
                                          PTDP_ERR_INVALID_ARGUMENT, what);
    expect_message(msg, {"disagree", "element count", "6 to 7"}, what);
    expect(w == nullptr, what + ": no work handle", "NULL", "a handle");
    ptdp_work_destroy(w);
    still_works(g, kind, n, what);
  }
}

/// Sizes of point-to-point messages: between group ranks 0 and 1 of the group.
void recv_size_mismatches(ptdp_groups g, ptdp_group_kind kind, int grank) {
  if (grank > 1) return;
  const int peer = 1 - grank;
  {
    const std::string what = "receive 4 elements into a buffer of 6";
    if (grank == 0) {
      Tensor t = make(PTDP_DTYPE_F32, {1, 2, 3, 4});
      CT_OK(ptdp_send(g, kind, t, peer, 0, nullptr));
    } else {
      Tensor t = make(PTDP_DTYPE_F32, {9, 9, 9, 9, 9, 9});
      const std::string msg = expect_status(ptdp_recv(g, kind, t, peer, 0, nullptr), PTDP_ERR_INVALID_ARGUMENT, what);
      expect_message(msg, {"ptdp_recv", "received 4 elements", "[6]", "from peer 0"}, what);
    }
  }
  {
    // The same through a batch, waited on a work handle: reported by ptdp_work_wait.
    const std::string what = "batched receive of 4 elements into a buffer of 6, on a work handle";
    if (grank == 0) {
      Tensor t = make(PTDP_DTYPE_I64, {1, 2, 3, 4});
      CT_OK(ptdp_send(g, kind, t, peer, 1, nullptr));
    } else {
      Tensor t = ct::zeros(PTDP_DTYPE_I64, 6);
      const ptdp_p2p_op op = {PTDP_P2P_RECV, t, peer, 1};
      ptdp_work w = nullptr;
      CT_OK(ptdp_batch_send_recv(g, kind, &op, 1, &w));
      const std::string msg = expect_status(ptdp_work_wait(w), PTDP_ERR_INVALID_ARGUMENT, what);
      expect_message(msg, {"ptdp_work_wait", "received 4 elements", "[6]"}, what);
      // "Waiting again on a completed operation returns its result again": the error again.
      expect_status(ptdp_work_wait(w), PTDP_ERR_INVALID_ARGUMENT, what + ": waiting again");
      ptdp_work_destroy(w);
    }
  }
  {
    const std::string what = "receive 6 elements into a buffer of 4";
    if (grank == 0) {
      Tensor t = make(PTDP_DTYPE_F32, {1, 2, 3, 4, 5, 6});
      CT_OK(ptdp_send(g, kind, t, peer, 2, nullptr));
    } else {
      Tensor t = ct::zeros(PTDP_DTYPE_F32, 4);
      const std::string msg = expect_status(ptdp_recv(g, kind, t, peer, 2, nullptr), PTDP_ERR_COMMUNICATION, what);
      expect_message(msg, {"ptdp_recv", "longer than the receive buffer"}, what);
    }
  }
  {
    // The pair still exchanges correctly afterwards.
    const std::string what = "send/recv after the size mismatches";
    Tensor out = make(PTDP_DTYPE_F32, {static_cast<double>(grank) + 10, 20});
    Tensor in = ct::zeros(PTDP_DTYPE_F32, 2);
    const ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, out, peer, 3}, {PTDP_P2P_RECV, in, peer, 3}};
    if (CT_OK(ptdp_batch_send_recv(g, kind, ops, 2, nullptr)).empty()) {
      expect_vec(read(in), {static_cast<double>(peer) + 10, 20}, what);
    }
  }
}

/// Ranks passing different sizes to ptdp_groups_create are all refused; the runtime stays usable.
void layout_mismatches(ptdp_runtime rt, int me, int W) {
  struct Case {
    const char* what;
    const char* names;  // what the message must name
    int t0, p0, v0;     // world rank 0
    int t, p, v;        // the others
  };
  const Case cases[] = {
      {"tensor_model_parallel_size 2 on rank 0, 1 on the others", "tensor parallel size", 2, 1, 1, 1, 1, 1},
      {"pipeline_model_parallel_size 1 on rank 0, 2 on the others", "pipeline parallel size", 1, 1, 1, 1, 2, 1},
      {"virtual_pipeline_model_parallel_size 2 on rank 0, 1 on the others", "virtual pipeline size", 1, 2, 2, 1, 2, 1},
  };
  for (const Case& c : cases) {
    ptdp_parallel_options o;
    ptdp_parallel_options_init(&o);
    o.tensor_model_parallel_size = me == 0 ? c.t0 : c.t;
    o.pipeline_model_parallel_size = me == 0 ? c.p0 : c.p;
    o.virtual_pipeline_model_parallel_size = me == 0 ? c.v0 : c.v;
    ptdp_groups g = nullptr;
    const std::string msg = expect_status(ptdp_groups_create(rt, &o, &g), PTDP_ERR_INVALID_ARGUMENT, c.what);
    expect_message(msg, {"ptdp_groups_create", "disagree", c.names}, c.what);
    expect(g == nullptr, std::string(c.what) + ": *out unchanged", "NULL", "a handle");
    ptdp_groups_destroy(g);
  }
  // An invalid layout on every rank is refused locally with the numbers.
  if (W % 3 != 0) {
    ptdp_parallel_options o;
    ptdp_parallel_options_init(&o);
    o.tensor_model_parallel_size = 3;
    ptdp_groups g = nullptr;
    const std::string msg = CT_STATUS(ptdp_groups_create(rt, &o, &g), PTDP_ERR_INVALID_ARGUMENT);
    expect_message(msg, {"divisible", std::to_string(W), "3"}, "t = 3 on every rank");
  }
  ptdp_groups g = nullptr;
  if (CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) {
    still_works(g, PTDP_GROUP_WORLD, W, "refused ptdp_groups_create calls");
    CT_OK(ptdp_groups_destroy(g));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int world_rank = 0, world_size = 1;
  ct::start(&argc, &argv, &world_rank, &world_size);

  ptdp_runtime_options ro = ct::runtime_options();
  expect_eq(ro.verify_collectives, int32_t{1}, "verify_collectives defaults to 1");
  ptdp_runtime rt = nullptr;
  if (world_size < 2) {
    expect(false, "test_comm_mismatch needs 2 or more ranks", ">= 2", std::to_string(world_size));
  } else if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    // On the world group, and on the tensor group of a t = 2 layout (group rank 0 of each
    // tensor group disagrees with its partner).
    ct::Layout L;
    L.W = world_size;
    L.t = 2;
    ptdp_parallel_options o = L.options();
    ptdp_groups g = nullptr;
    if (CT_OK(ptdp_groups_create(rt, &o, &g)).empty()) {
      ct::context("world group");
      collective_mismatches(g, PTDP_GROUP_WORLD, world_rank, world_size);
      recv_size_mismatches(g, PTDP_GROUP_WORLD, world_rank);
      ct::context("tensor group");
      collective_mismatches(g, PTDP_GROUP_TENSOR, world_rank % 2, 2);
      recv_size_mismatches(g, PTDP_GROUP_TENSOR, world_rank % 2);
      ct::context("world group, at the end");
      still_works(g, PTDP_GROUP_WORLD, world_size, "all the mismatches");
      CT_OK(ptdp_groups_destroy(g));
    }
    ct::context("ptdp_groups_create");
    layout_mismatches(rt, world_rank, world_size);
    ct::context("");
    CT_OK(ptdp_runtime_destroy(rt));
  }
  const int rc = ct::finish("test_comm_mismatch");
  MPI_Finalize();
  return rc;
}
