// Point-to-point transfers: ring exchanges in both directions at once (ptdp_batch_send_recv
// with the sends listed before the receives, 1 MiB messages, which a naive blocking
// send-then-receive would deadlock on), ptdp_send/ptdp_recv with work handles started in
// opposite orders, and tags keeping messages apart.
//
//   mpiexec -n W test_comm_p2p t,p[,v] ...
//
// For each layout the exchanges run in the pipeline group (the neighbours of a pipeline stage)
// and in the world group.
#include "comm_test.h"

namespace {

using ct::expect;
using ct::expect_eq;
using ct::expect_status;
using ct::expect_vec;
using ct::Tensor;

constexpr int64_t kBig = (1 << 20) / 4;  // 1 MiB of i32

// Payload of a message from world rank `sender`, distinguished by `salt` (< 32): every element
// is distinct and exact in i32.
int32_t payload(int sender, int salt, int64_t i) {
  return static_cast<int32_t>(sender * (1 << 25) + salt * (1 << 19) + i);
}

Tensor message(int sender, int salt, int64_t n) {
  std::vector<int32_t> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = payload(sender, salt, i);
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  o.dtype = PTDP_DTYPE_I32;
  ptdp_tensor h = nullptr;
  expect_status(ptdp_tensor_create(&o, 1, &n, v.data(), v.size() * sizeof(int32_t), &h), PTDP_SUCCESS,
                "create a message");
  return Tensor(h);
}

Tensor buffer(int64_t n) {
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  o.dtype = PTDP_DTYPE_I32;
  ptdp_tensor h = nullptr;
  expect_status(ptdp_tensor_create(&o, 1, &n, nullptr, 0, &h), PTDP_SUCCESS, "create a buffer");
  return Tensor(h);
}

/// Checks that `t` holds the message of `sender` and `salt`; reports the first wrong element.
void expect_message_from(ptdp_tensor t, int sender, int salt, const std::string& what) {
  int64_t n = 0;
  ptdp_tensor_numel(t, &n);
  std::vector<int32_t> v(static_cast<std::size_t>(n));
  if (!expect_status(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(int32_t)), PTDP_SUCCESS, what).empty()) return;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t want = payload(sender, salt, i);
    if (v[static_cast<std::size_t>(i)] != want) {
      expect(false, what + " element " + std::to_string(i), std::to_string(want) + " (sender " +
             std::to_string(sender) + ", salt " + std::to_string(salt) + ")",
             std::to_string(v[static_cast<std::size_t>(i)]));
      return;
    }
  }
  expect(true, what);
}

struct Group {
  ptdp_groups g = nullptr;
  ptdp_group_kind kind = PTDP_GROUP_WORLD;
  std::vector<int32_t> members;
  int rank = 0;
  int size() const { return static_cast<int>(members.size()); }
  int world(int group_rank) const { return members[static_cast<std::size_t>((group_rank + size()) % size())]; }
};

/// Ring: every rank sends to its next and previous neighbour and receives from both, sends
/// listed first. With two ranks both neighbours are the same peer (the tags tell the directions
/// apart); with one, the rank exchanges with itself.
void ring(const Group& G, int me, bool nonblocking) {
  const std::string what = std::string(nonblocking ? "non-blocking " : "") + "ring batch_send_recv";
  const int next = (G.rank + 1) % G.size(), prev = (G.rank - 1 + G.size()) % G.size();
  Tensor to_next = message(me, 1, kBig), to_prev = message(me, 2, kBig);
  Tensor from_prev = buffer(kBig), from_next = buffer(kBig);
  const ptdp_p2p_op ops[4] = {
      {PTDP_P2P_SEND, to_next, next, 10},
      {PTDP_P2P_SEND, to_prev, prev, 11},
      {PTDP_P2P_RECV, from_prev, prev, 10},  // prev's "to_next"
      {PTDP_P2P_RECV, from_next, next, 11},  // next's "to_prev"
  };
  if (nonblocking) {
    ptdp_work w = nullptr;
    if (!CT_OK(ptdp_batch_send_recv(G.g, G.kind, ops, 4, &w)).empty()) return;
    ct::poll_until_done(w, what);
    CT_OK(ptdp_work_wait(w));
    CT_OK(ptdp_work_destroy(w));
  } else if (!CT_OK(ptdp_batch_send_recv(G.g, G.kind, ops, 4, nullptr)).empty()) {
    return;
  }
  expect_message_from(from_prev, G.world(prev), 1, what + ": from the previous rank");
  expect_message_from(from_next, G.world(next), 2, what + ": from the next rank");
  expect_message_from(to_next, me, 1, what + ": the send buffer is unchanged");
}

/// Pairs (0,1), (2,3), ... of the group exchange with ptdp_send/ptdp_recv; the even side starts
/// its send first, the odd side its receive, and each waits in the opposite order it started.
void pairs(const Group& G, int me) {
  if (G.size() < 2) return;
  const int peer = G.rank ^ 1;
  if (peer >= G.size()) return;
  const bool even = G.rank % 2 == 0;
  const int peer_world = G.world(peer);
  {
    const std::string what = "send/recv with work handles started in opposite orders";
    Tensor out = message(me, 3, kBig);
    Tensor in = buffer(kBig);
    ptdp_work first = nullptr, second = nullptr;
    if (even) {
      CT_OK(ptdp_send(G.g, G.kind, out, peer, 3, &first));
      CT_OK(ptdp_recv(G.g, G.kind, in, peer, 3, &second));
    } else {
      CT_OK(ptdp_recv(G.g, G.kind, in, peer, 3, &first));
      CT_OK(ptdp_send(G.g, G.kind, out, peer, 3, &second));
    }
    CT_OK(ptdp_work_wait(second));
    CT_OK(ptdp_work_wait(first));
    CT_OK(ptdp_work_wait(first));  // waiting twice is fine
    CT_OK(ptdp_work_destroy(first));
    CT_OK(ptdp_work_destroy(second));
    expect_message_from(in, peer_world, 3, what);
  }
  {
    // Blocking: the even side sends then receives, the odd side receives then sends.
    const std::string what = "blocking send/recv";
    Tensor out = message(me, 4, kBig);
    Tensor in = buffer(kBig);
    if (even) {
      CT_OK(ptdp_send(G.g, G.kind, out, peer, 0, nullptr));
      CT_OK(ptdp_recv(G.g, G.kind, in, peer, 0, nullptr));
    } else {
      CT_OK(ptdp_recv(G.g, G.kind, in, peer, 0, nullptr));
      CT_OK(ptdp_send(G.g, G.kind, out, peer, 0, nullptr));
    }
    expect_message_from(in, peer_world, 4, what);
  }
  {
    // Tags keep messages apart: two messages sent with tags 5 then 7 are received 7 first.
    // Then the roles swap. The sends are non-blocking (1 MiB: a blocking send of the tag-5
    // message would wait for a receive that is only posted after the tag-7 one).
    for (int round = 0; round < 2; ++round) {
      const bool sender = (round == 0) == even;
      const std::string what = "tags received in the opposite order (round " + std::to_string(round) + ")";
      if (sender) {
        Tensor a = message(me, 5, kBig), b = message(me, 7, kBig);
        ptdp_work wa = nullptr, wb = nullptr;
        CT_OK(ptdp_send(G.g, G.kind, a, peer, 5, &wa));
        CT_OK(ptdp_send(G.g, G.kind, b, peer, 7, &wb));
        CT_OK(ptdp_work_wait(wa));
        CT_OK(ptdp_work_wait(wb));
        CT_OK(ptdp_work_destroy(wa));
        CT_OK(ptdp_work_destroy(wb));
      } else {
        Tensor b = buffer(kBig), a = buffer(kBig);
        CT_OK(ptdp_recv(G.g, G.kind, b, peer, 7, nullptr));
        CT_OK(ptdp_recv(G.g, G.kind, a, peer, 5, nullptr));
        expect_message_from(b, peer_world, 7, what + ": tag 7");
        expect_message_from(a, peer_world, 5, what + ": tag 5");
      }
    }
  }
  {
    // Same peer and tag: messages arrive in the order they were sent (small and large).
    const std::string what = "same tag keeps order";
    if (even) {
      Tensor a = message(me, 8, 16), b = message(me, 9, kBig);
      ptdp_work wa = nullptr, wb = nullptr;
      CT_OK(ptdp_send(G.g, G.kind, a, peer, 12, &wa));
      CT_OK(ptdp_send(G.g, G.kind, b, peer, 12, &wb));
      CT_OK(ptdp_work_wait(wb));
      CT_OK(ptdp_work_wait(wa));
      CT_OK(ptdp_work_destroy(wa));
      CT_OK(ptdp_work_destroy(wb));
    } else {
      Tensor a = buffer(16), b = buffer(kBig);
      CT_OK(ptdp_recv(G.g, G.kind, a, peer, 12, nullptr));
      CT_OK(ptdp_recv(G.g, G.kind, b, peer, 12, nullptr));
      expect_message_from(a, peer_world, 8, what + ": first");
      expect_message_from(b, peer_world, 9, what + ": second");
    }
  }
  {
    // A batch holding a send and a receive to the same peer on the same tag, both sides
    // listing the send first: the two directions do not mix up.
    Tensor out = message(me, 10, kBig), in = buffer(kBig);
    const ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, out, peer, 0}, {PTDP_P2P_RECV, in, peer, 0}};
    CT_OK(ptdp_batch_send_recv(G.g, G.kind, ops, 2, nullptr));
    expect_message_from(in, peer_world, 10, "pair exchange in one batch, same tag");
  }
}

void bad_arguments(const Group& G, int me) {
  Tensor t = message(me, 0, 4);
  std::string m = CT_STATUS(ptdp_send(G.g, G.kind, t, G.size(), 0, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"peer"}, "send to peer = group size");
  m = CT_STATUS(ptdp_recv(G.g, G.kind, t, -1, 0, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"peer"}, "recv from peer -1");
  m = CT_STATUS(ptdp_send(G.g, G.kind, t, 0, 32768, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"tag"}, "send with tag 32768");
  m = CT_STATUS(ptdp_recv(G.g, G.kind, t, 0, -1, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"tag"}, "recv with tag -1");
  const ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, t, 0, 0}, {static_cast<ptdp_p2p_kind>(9), t, 0, 0}};
  m = CT_STATUS(ptdp_batch_send_recv(G.g, G.kind, ops, 2, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"ops[1]"}, "batch with a bad kind names the entry");
  m = CT_STATUS(ptdp_batch_send_recv(G.g, G.kind, nullptr, 1, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"ops"}, "batch with NULL ops");
  m = CT_STATUS(ptdp_batch_send_recv(G.g, G.kind, ops, -1, nullptr), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect_message(m, {"count"}, "batch with count -1");
  CT_OK(ptdp_batch_send_recv(G.g, G.kind, nullptr, 0, nullptr));  // an empty batch is fine
}

void check_layout(ptdp_runtime rt, const ct::Layout& L, int me) {
  ptdp_parallel_options o = L.options();
  ptdp_groups g = nullptr;
  ct::context(L.str());
  if (!CT_OK(ptdp_groups_create(rt, &o, &g)).empty()) return;
  for (ptdp_group_kind kind : {PTDP_GROUP_PIPELINE, PTDP_GROUP_WORLD}) {
    ct::context(L.str() + " kind=" + ct::kind_name(kind));
    Group G;
    G.g = g;
    G.kind = kind;
    G.members = L.members(kind, me);
    for (int i = 0; i < G.size(); ++i)
      if (G.members[static_cast<std::size_t>(i)] == me) G.rank = i;
    int32_t rank = -1;
    CT_OK(ptdp_groups_rank(g, kind, &rank));
    expect_eq(rank, static_cast<int32_t>(G.rank), "group rank");
    ring(G, me, false);
    ring(G, me, true);
    pairs(G, me);
    bad_arguments(G, me);
    CT_OK(ptdp_barrier(g, kind, nullptr));
  }
  ct::context(L.str());
  CT_OK(ptdp_groups_destroy(g));
}

}  // namespace

int main(int argc, char** argv) {
  int world_rank = 0, world_size = 1;
  ct::start(&argc, &argv, &world_rank, &world_size);

  const double t0 = ct::now_s();
  ptdp_runtime_options ro = ct::runtime_options();
  ptdp_runtime rt = nullptr;
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    if (argc < 2) expect(false, "usage: test_comm_p2p t,p[,v] ...", "layouts", "none");
    for (int i = 1; i < argc; ++i) {
      ct::Layout L;
      if (!ct::parse_layout(argv[i], world_size, &L)) {
        expect(false, std::string("layout argument '") + argv[i] + "'", "t,p[,v] dividing W", argv[i]);
        continue;
      }
      check_layout(rt, L, world_rank);
    }
    ct::context("");
    CT_OK(ptdp_runtime_destroy(rt));
  }
  if (world_rank == 0) std::printf("checks took %.2f s\n", ct::now_s() - t0);
  const int rc = ct::finish("test_comm_p2p");
  MPI_Finalize();
  return rc;
}
