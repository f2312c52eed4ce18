// Every collective on every group kind, for the layouts named on the command line, against
// closed-form values computed from rank-dependent data; group queries against the closed-form
// Megatron layout.
//
//   mpiexec -n W test_comm_collectives [--self] t,p[,v] ...
//
// --self creates the runtime with use_mpi = 0 (a world of one on every process).
#include <algorithm>
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

constexpr int kCount = 5;  // elements of an all_reduce
constexpr int kChunk = 3;  // elements per rank of reduce_scatter / all_gather

// Rank-dependent data; integers, so sums are exact in every dtype used with them.
double x_f32(int r, int i) { return (r + 1) * (i + 1) * (i % 2 ? -1 : 1) + r; }         // |x| <= 47
double x_i32(int r, int i) { return (r + 3) * 1000 * (i % 2 ? 1 : -1) + 17 * i - r; }    // fits i32
double x_i64(int r, int i) { return (r + 1) * 1e12 * (i % 2 ? -1 : 1) + i * 7 + r; }     // > 2^32, < 2^53
double x_half(int r, int i) { return (r + i) % 5 + r - 3; }                             // sum of 8 <= 88

using Fn = double (*)(int, int);

std::vector<double> values(Fn f, int r, int n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = f(r, i);
  return v;
}

std::vector<double> reduce(Fn f, const std::vector<int32_t>& members, int n, ptdp_reduce_op op) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    double acc = f(members[0], i);
    for (std::size_t j = 1; j < members.size(); ++j) {
      const double v = f(members[j], i);
      if (op == PTDP_REDUCE_SUM || op == PTDP_REDUCE_AVG) acc += v;
      if (op == PTDP_REDUCE_MAX) acc = std::max(acc, v);
      if (op == PTDP_REDUCE_MIN) acc = std::min(acc, v);
    }
    if (op == PTDP_REDUCE_AVG) acc /= static_cast<double>(members.size());
    out[static_cast<std::size_t>(i)] = acc;
  }
  return out;
}

const char* op_name(ptdp_reduce_op op) {
  switch (op) {
    case PTDP_REDUCE_SUM: return "sum";
    case PTDP_REDUCE_AVG: return "avg";
    case PTDP_REDUCE_MAX: return "max";
    case PTDP_REDUCE_MIN: return "min";
  }
  return "?";
}

void check_all_reduce(ptdp_groups g, ptdp_group_kind kind, const std::vector<int32_t>& members, int me,
                      ptdp_dtype dtype, Fn f, ptdp_reduce_op op) {
  const std::string what = std::string("all_reduce ") + op_name(op) + " " + ct::dtype_name(dtype);
  Tensor t = make(dtype, values(f, me, kCount));
  if (expect_status(ptdp_all_reduce(g, kind, t, op, nullptr), PTDP_SUCCESS, what).empty()) {
    expect_vec(read(t), reduce(f, members, kCount, op), what + " values", op == PTDP_REDUCE_AVG ? 1e-6 : 0);
  }
}

void check_reduce_scatter(ptdp_groups g, ptdp_group_kind kind, const std::vector<int32_t>& members,
                          int me, int grank, ptdp_dtype dtype, Fn f, ptdp_reduce_op op) {
  const std::string what = std::string("reduce_scatter ") + op_name(op) + " " + ct::dtype_name(dtype);
  const int n = static_cast<int>(members.size());
  Tensor in = make(dtype, values(f, me, n * kChunk));
  Tensor out = ct::zeros(dtype, kChunk);
  if (expect_status(ptdp_reduce_scatter(g, kind, in, out, op, nullptr), PTDP_SUCCESS, what).empty()) {
    const std::vector<double> all = reduce(f, members, n * kChunk, op);
    const std::vector<double> mine(all.begin() + grank * kChunk, all.begin() + (grank + 1) * kChunk);
    expect_vec(read(out), mine, what + " values", op == PTDP_REDUCE_AVG ? 1e-6 : 0);
    // The input is left alone.
    expect_vec(read(in), values(f, me, n * kChunk), what + " leaves the input unchanged");
  }
}

void check_all_gather(ptdp_groups g, ptdp_group_kind kind, const std::vector<int32_t>& members, int me,
                      ptdp_dtype dtype, Fn f) {
  const std::string what = std::string("all_gather ") + ct::dtype_name(dtype);
  const int n = static_cast<int>(members.size());
  Tensor in = make(dtype, values(f, me, kChunk));
  Tensor out = ct::zeros(dtype, n * kChunk);
  if (expect_status(ptdp_all_gather(g, kind, in, out, nullptr), PTDP_SUCCESS, what).empty()) {
    std::vector<double> want;
    for (int32_t r : members) {
      const std::vector<double> v = values(f, r, kChunk);
      want.insert(want.end(), v.begin(), v.end());
    }
    expect_vec(read(out), want, what + " values");
  }
}

void check_broadcast(ptdp_groups g, ptdp_group_kind kind, const std::vector<int32_t>& members, int me,
                     ptdp_dtype dtype, Fn f, int root) {
  const std::string what = std::string("broadcast ") + ct::dtype_name(dtype) + " from group rank " + std::to_string(root);
  // Every rank starts with its own data (shifted by the root so rounds differ).
  std::vector<double> mine = values(f, me, kChunk);
  for (double& v : mine) v += root;
  Tensor t = make(dtype, mine);
  if (expect_status(ptdp_broadcast(g, kind, t, root, nullptr), PTDP_SUCCESS, what).empty()) {
    std::vector<double> want = values(f, members[static_cast<std::size_t>(root)], kChunk);
    for (double& v : want) v += root;
    expect_vec(read(t), want, what + " values");
  }
}

/// Group queries of one kind against the closed form; returns the expected members.
std::vector<int32_t> check_queries(ptdp_groups g, const ct::Layout& L, ptdp_group_kind kind, int me) {
  const std::vector<int32_t> want = L.members(kind, me);
  const auto n = static_cast<int32_t>(want.size());
  int32_t want_rank = -1;
  for (int32_t i = 0; i < n; ++i)
    if (want[static_cast<std::size_t>(i)] == me) want_rank = i;

  int32_t rank = -7, size = -7;
  CT_OK(ptdp_groups_rank(g, kind, &rank));
  expect_eq(rank, want_rank, "ptdp_groups_rank");
  CT_OK(ptdp_groups_size(g, kind, &size));
  expect_eq(size, n, "ptdp_groups_size");

  std::vector<int32_t> got(static_cast<std::size_t>(n) + 1, -7);
  int32_t count = -7;
  CT_OK(ptdp_groups_members(g, kind, got.data(), n + 1, &count));
  expect_eq(count, n, "ptdp_groups_members count");
  got.resize(static_cast<std::size_t>(std::max(count, 0)));
  expect_vec(got, want, "ptdp_groups_members");

  // Capacity too small: refused, count still set.
  if (n > 0) {
    int32_t small_count = -7;
    std::vector<int32_t> small(static_cast<std::size_t>(n), -7);
    const std::string msg = CT_STATUS(ptdp_groups_members(g, kind, small.data(), n - 1, &small_count),
                                      PTDP_ERR_INVALID_ARGUMENT);
    expect_message(msg, {"capacity"}, "ptdp_groups_members with capacity n-1");
  } else {
    int32_t zero_count = -7;
    CT_OK(ptdp_groups_members(g, kind, nullptr, 0, &zero_count));
    expect_eq(zero_count, 0, "ptdp_groups_members of no group");
  }

  // The layout arithmetic (no communication) agrees with the groups.
  ptdp_parallel_options o = L.options();
  std::vector<int32_t> lay(static_cast<std::size_t>(n) + 1, -7);
  int32_t lay_count = -7;
  CT_OK(ptdp_layout_members(&o, L.W, me, kind, lay.data(), n + 1, &lay_count));
  lay.resize(static_cast<std::size_t>(std::max(lay_count, 0)));
  expect_vec(lay, got, "ptdp_layout_members agrees with ptdp_groups_members");
  return want;
}

void check_member_collectives(ptdp_groups g, ptdp_group_kind kind, const std::vector<int32_t>& members, int me) {
  const int n = static_cast<int>(members.size());
  int grank = 0;
  while (members[static_cast<std::size_t>(grank)] != me) ++grank;

  // The communicator really holds these ranks in this order: gather the world ranks.
  {
    Tensor mine = make(PTDP_DTYPE_I32, {static_cast<double>(me)});
    Tensor all = ct::zeros(PTDP_DTYPE_I32, n);
    if (CT_OK(ptdp_all_gather(g, kind, mine, all, nullptr)).empty()) {
      std::vector<double> want(members.begin(), members.end());
      expect_vec(read(all), want, "all_gather of the world ranks gives the members in group-rank order");
    }
  }

  for (ptdp_reduce_op op : {PTDP_REDUCE_SUM, PTDP_REDUCE_AVG, PTDP_REDUCE_MAX, PTDP_REDUCE_MIN})
    check_all_reduce(g, kind, members, me, PTDP_DTYPE_F32, x_f32, op);
  for (ptdp_reduce_op op : {PTDP_REDUCE_SUM, PTDP_REDUCE_MAX, PTDP_REDUCE_MIN}) {
    check_all_reduce(g, kind, members, me, PTDP_DTYPE_I32, x_i32, op);
    check_all_reduce(g, kind, members, me, PTDP_DTYPE_I64, x_i64, op);
  }
  check_all_reduce(g, kind, members, me, PTDP_DTYPE_BF16, x_half, PTDP_REDUCE_SUM);
  check_all_reduce(g, kind, members, me, PTDP_DTYPE_F16, x_half, PTDP_REDUCE_SUM);
  check_all_reduce(g, kind, members, me, PTDP_DTYPE_BF16, x_half, PTDP_REDUCE_MAX);

  check_reduce_scatter(g, kind, members, me, grank, PTDP_DTYPE_F32, x_f32, PTDP_REDUCE_SUM);
  check_reduce_scatter(g, kind, members, me, grank, PTDP_DTYPE_F32, x_f32, PTDP_REDUCE_AVG);
  check_reduce_scatter(g, kind, members, me, grank, PTDP_DTYPE_BF16, x_half, PTDP_REDUCE_SUM);
  check_reduce_scatter(g, kind, members, me, grank, PTDP_DTYPE_I64, x_i64, PTDP_REDUCE_MAX);

  check_all_gather(g, kind, members, me, PTDP_DTYPE_F32, x_f32);
  check_all_gather(g, kind, members, me, PTDP_DTYPE_BF16, x_half);
  check_all_gather(g, kind, members, me, PTDP_DTYPE_I64, x_i64);

  for (int root = 0; root < n; ++root) check_broadcast(g, kind, members, me, PTDP_DTYPE_F32, x_f32, root);
  check_broadcast(g, kind, members, me, PTDP_DTYPE_I64, x_i64, n - 1);
  check_broadcast(g, kind, members, me, PTDP_DTYPE_F16, x_half, n / 2);

  CT_OK(ptdp_barrier(g, kind, nullptr));

  // Local argument errors (the same on every rank, so nobody is left inside a collective).
  {
    Tensor t = make(PTDP_DTYPE_I32, values(x_i32, me, kCount));
    const std::string m1 = CT_STATUS(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_AVG, nullptr), PTDP_ERR_INVALID_ARGUMENT);
    expect_message(m1, {"avg"}, "all_reduce avg on i32");
    const std::string m2 = CT_STATUS(ptdp_broadcast(g, kind, t, n, nullptr), PTDP_ERR_INVALID_ARGUMENT);
    expect_message(m2, {"root"}, "broadcast from root = group size");
    Tensor wrong = ct::zeros(PTDP_DTYPE_I32, n * kCount + 1);
    const std::string m3 = CT_STATUS(ptdp_all_gather(g, kind, t, wrong, nullptr), PTDP_ERR_INVALID_ARGUMENT);
    expect_message(m3, {"all_gather"}, "all_gather into a buffer of the wrong size");
  }
}

void check_non_member(ptdp_groups g, ptdp_group_kind kind, int me) {
  Tensor t = make(PTDP_DTYPE_F32, values(x_f32, me, kCount));
  const std::string msg = CT_STATUS(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, nullptr), PTDP_ERR_INVALID_STATE);
  expect_message(msg, {"ptdp_all_reduce", "world rank " + std::to_string(me), ct::kind_name(kind)},
                 "all_reduce on a group this rank is not in");
  expect_vec(read(t), values(x_f32, me, kCount), "the refused all_reduce left the tensor alone");
  Tensor out = ct::zeros(PTDP_DTYPE_F32, kCount);
  CT_STATUS(ptdp_broadcast(g, kind, t, 0, nullptr), PTDP_ERR_INVALID_STATE);
  CT_STATUS(ptdp_all_gather(g, kind, t, out, nullptr), PTDP_ERR_INVALID_STATE);
  CT_STATUS(ptdp_reduce_scatter(g, kind, t, out, PTDP_REDUCE_SUM, nullptr), PTDP_ERR_INVALID_STATE);
  CT_STATUS(ptdp_barrier(g, kind, nullptr), PTDP_ERR_INVALID_STATE);
  CT_STATUS(ptdp_send(g, kind, t, 0, 0, nullptr), PTDP_ERR_INVALID_STATE);
  ptdp_work w = nullptr;
  CT_STATUS(ptdp_all_reduce(g, kind, t, PTDP_REDUCE_SUM, &w), PTDP_ERR_INVALID_STATE);
  expect(w == nullptr, "a refused non-blocking all_reduce leaves *work unchanged", "NULL", "a handle");
}

void check_layout(ptdp_runtime rt, const ct::Layout& L, int me) {
  ct::context(L.str());
  // The layout arithmetic for every rank, against the closed form.
  ptdp_parallel_options o = L.options();
  for (int r = 0; r < L.W; ++r) {
    for (ptdp_group_kind kind : ct::kAllKinds) {
      std::vector<int32_t> got(static_cast<std::size_t>(L.W), -7);
      int32_t count = -7;
      const ptdp_status s = ptdp_layout_members(&o, L.W, r, kind, got.data(), L.W, &count);
      if (s != PTDP_SUCCESS) {
        expect_status(s, PTDP_SUCCESS, "ptdp_layout_members");
        continue;
      }
      got.resize(static_cast<std::size_t>(count));
      expect_vec(got, L.members(kind, r),
                 std::string("ptdp_layout_members(rank ") + std::to_string(r) + ", " + ct::kind_name(kind) + ")");
    }
  }

  ptdp_groups g = nullptr;
  if (!CT_OK(ptdp_groups_create(rt, &o, &g)).empty()) return;
  for (ptdp_group_kind kind : ct::kAllKinds) {
    ct::context(L.str() + " kind=" + ct::kind_name(kind));
    const std::vector<int32_t> members = check_queries(g, L, kind, me);
    if (members.empty()) {
      check_non_member(g, kind, me);
    } else {
      check_member_collectives(g, kind, members, me);
    }
  }
  ct::context(L.str());
  CT_OK(ptdp_groups_destroy(g));
}

}  // namespace

int main(int argc, char** argv) {
  int world_rank = 0, world_size = 1;
  ct::start(&argc, &argv, &world_rank, &world_size);

  bool self = false;
  std::vector<const char*> specs;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--self") {
      self = true;
    } else {
      specs.push_back(argv[i]);
    }
  }

  ptdp_runtime_options ro = ct::runtime_options();
  ro.use_mpi = self ? 0 : 1;
  ptdp_runtime rt = nullptr;
  const double t0 = ct::now_s();
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    int32_t r = -1, n = -1;
    CT_OK(ptdp_runtime_world(rt, &r, &n));
    const int W = self ? 1 : world_size;
    const int me = self ? 0 : world_rank;
    expect_eq(n, static_cast<int32_t>(W), "runtime world size");
    expect_eq(r, static_cast<int32_t>(me), "runtime world rank");
    if (specs.empty()) expect(false, "usage: test_comm_collectives [--self] t,p[,v] ...", "layouts", "none");
    for (const char* spec : specs) {
      ct::Layout L;
      if (!ct::parse_layout(spec, W, &L)) {
        ct::context("");
        expect(false, std::string("layout argument '") + spec + "'", "t,p[,v] dividing W = " + std::to_string(W), spec);
        continue;
      }
      check_layout(rt, L, me);
    }
    ct::context("");
    CT_OK(ptdp_runtime_destroy(rt));
  }
  if (world_rank == 0) std::printf("checks took %.2f s\n", ct::now_s() - t0);
  const int rc = ct::finish("test_comm_collectives");
  MPI_Finalize();
  return rc;
}
