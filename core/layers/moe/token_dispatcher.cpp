#include "core/layers/moe/token_dispatcher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>

#include "base/error.h"

namespace ptdp {

namespace {

using Index = std::vector<int64_t>;

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

int64_t total(const Index& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

std::atomic<int64_t> g_exchange_ns{0};

// Runs one of the dispatchers' communications (its call and its wait), adding its wall time to
// moe_exchange_seconds().
template <typename F>
void timed_exchange(F&& communicate) {
  const auto t0 = std::chrono::steady_clock::now();
  communicate();
  g_exchange_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                              .count());
}

// [rows, cols] of `like`'s type and device: zeros where some rows will not be written (padding).
Tensor rows_buffer(const Tensor& like, int64_t rows, int64_t cols, bool zero) {
  return zero ? Tensor::zeros({rows, cols}, like.dtype(), like.device()) : empty_like(like, {rows, cols});
}

// Every rank's `mine` (host int64 values), in group-rank order.
std::vector<int64_t> all_gather_ints(Communicator* comm, int size, const std::vector<int64_t>& mine, Device device) {
  if (size == 1) return mine;
  std::vector<int32_t> in(mine.begin(), mine.end()), out(in.size() * at(size));
  Tensor a = Tensor::from_host(in.data(), {static_cast<int64_t>(in.size())}, DType::I32, device);
  Tensor b = Tensor::empty({static_cast<int64_t>(out.size())}, DType::I32, device);
  timed_exchange([&] { comm->all_gather(a, b)->wait(); });
  b.copy_to_host(out.data(), out.size() * sizeof(int32_t));
  return {out.begin(), out.end()};
}

// All-to-all-v over `comm`: rows [send_off[q], +send_n[q]) of src go to peer q; peer p's rows
// arrive in order of p. One batch of sends and receives; a rank's own rows are copied.
Tensor exchange(Communicator* comm, int me, const Tensor& src, const Index& send_n, const Index& recv_n, int64_t cols) {
  const int64_t total = std::accumulate(recv_n.begin(), recv_n.end(), int64_t{0});
  Tensor out = Tensor::empty({total, cols}, src.dtype(), src.device());  // [sum recv_n, cols]
  std::vector<P2POp> ops;
  int64_t send_off = 0, recv_off = 0;
  for (std::size_t q = 0; q < send_n.size(); ++q) {
    const int64_t sn = send_n[q], rn = recv_n[q];
    if (static_cast<int>(q) == me) {
      PTDP_CHECK_ARG(sn == rn, "token exchange: " + std::to_string(sn) + " rows to self, " + std::to_string(rn) + " expected");
      if (sn > 0)
        src.backend().copy(element_ptr(out, recv_off * cols), element_ptr(src, send_off * cols),
                           static_cast<std::size_t>(sn * cols) * dtype_size(src.dtype()));
    } else {
      if (sn > 0) ops.push_back({P2POp::Kind::Send, src.view(send_off * cols, {sn, cols}), static_cast<int>(q), 0});
      if (rn > 0) ops.push_back({P2POp::Kind::Recv, out.view(recv_off * cols, {rn, cols}), static_cast<int>(q), 0});
    }
    send_off += sn;
    recv_off += rn;
  }
  if (!ops.empty()) timed_exchange([&] { comm->batch_p2p(ops)->wait(); });
  return out;
}

// ---- alltoall ------------------------------------------------------------------------------

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  AllToAllDispatcher(const LayerConfig& cfg, TensorParallel tp, const std::string& owner)
      : h_(cfg.hidden_size), experts_(cfg.moe.num_experts), ep_(tp.ep), slots_(owner + " (alltoall)") {}

  Tensor dispatch(const Tensor& x, const Routing& r, const Step& step, std::vector<int64_t>* counts) override {
    Plan& p = slots_.create(step.microbatch);
    plan(p, r, x.device());
    *counts = p.counts;
    Tensor rows = rows_buffer(x, p.rows, h_, p.padded);  // [R_l, h]
    x.backend().moe_permute(x.raw(), x.dtype(), p.row_of.data<int32_t>(), p.tokens, p.k, h_, p.rows, rows.raw());
    return to_experts(p, rows);
  }

  Tensor combine(const Tensor& y, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    p.y_local = from_experts(p, y);
    Tensor out = empty_like(y, {p.tokens, h_});  // [N, h]
    y.backend().moe_unpermute(p.y_local.raw(), y.dtype(), p.prob.data<float>(), p.row_of.data<int32_t>(), p.tokens,
                              p.k, h_, p.rows, out.raw());
    return out;
  }

  Tensor combine_backward(const Tensor& dout, const Step& step, Tensor* dprob) override {
    Plan& p = slots_.get(step.microbatch);
    Tensor de = rows_buffer(dout, p.rows, h_, p.padded);                    // [R_l, h]
    *dprob = Tensor::empty({p.tokens * p.k}, DType::F32, dout.device());  // [N * k] fp32
    dout.backend().moe_unpermute_backward(dout.raw(), p.y_local.raw(), dout.dtype(), p.prob.data<float>(),
                                          p.row_of.data<int32_t>(), p.tokens, p.k, h_, p.rows, de.raw(),
                                          dprob->data<float>());
    return to_experts(p, de);
  }

  Tensor dispatch_backward(const Tensor& dxe, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    const Tensor rows = from_experts(p, dxe);  // [R_l, h]
    Tensor dx = empty_like(dxe, {p.tokens, h_});  // [N, h]
    dxe.backend().moe_unpermute(rows.raw(), dxe.dtype(), nullptr, p.row_of.data<int32_t>(), p.tokens, p.k, h_, p.rows,
                                dx.raw());
    slots_.release(step.microbatch);
    return dx;
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Plan {
    int64_t tokens = 0;
    int k = 0;
    Tensor row_of;            // [N * k] int32: the slot's row of the local permuted rows, -1 where dropped
    Tensor prob;              // [N, k] fp32
    int64_t rows = 0;         // R_l, the local permuted rows (padding included)
    bool padded = false;      // some of them are padding (written by no slot)
    Index send_n, recv_n;     // [e] rows to and from each ExpertModel peer
    int64_t received = 0;     // rows this rank received (sum of recv_n)
    int64_t stride = 0;       // rows of each etp rank's block in the gathered buffer
    Tensor expert_row;        // [etp * stride] int32: the expert-major row of each gathered row (-1:
                              // none); undefined where the gathered rows are expert-major already
    std::vector<int64_t> counts;  // [E / e]
    Tensor y_local;           // [R_l, h]: the experts' outputs back in permuted order
  };

  void plan(Plan& p, const Routing& r, Device device) const {
    const int e = ep_.ep_size, local = experts_ / e, etp = ep_.etp_size;
    p.tokens = r.tokens;
    p.k = r.k;
    p.row_of = r.row_of;
    p.prob = r.prob;
    // The router's expert-sorted rows are the permutation: expert-major, then token, then
    // choice, an expert's padding rows last. Only per-expert counts are handled on the host.
    const Index& lc = r.counts;  // [E]
    p.rows = total(lc);
    p.padded = total(r.pad) > 0;
    // Every ExpertModel peer's counts: what goes to whom.
    const std::vector<int64_t> all = all_gather_ints(ep_.ep_comm, e, lc, device);  // [e, E]
    p.send_n.assign(at(e), 0);
    p.recv_n.assign(at(e), 0);
    Index mine(at(e * local));  // [e, E / e]: rows from peer q for each local expert
    for (int q = 0; q < e; ++q) {
      for (int le = 0; le < local; ++le) {
        p.send_n[at(q)] += lc[at(q * local + le)];
        mine[at(q * local + le)] = all[at(q * experts_ + ep_.ep_rank * local + le)];
        p.recv_n[at(q)] += mine[at(q * local + le)];
      }
    }
    p.received = std::accumulate(p.recv_n.begin(), p.recv_n.end(), int64_t{0});
    // Every etp rank's received counts: the rows the expert-major buffer holds.
    const std::vector<int64_t> rc = all_gather_ints(ep_.etp_comm, etp, mine, device);  // [etp, e, E / e]
    p.stride = 0;
    for (int er = 0; er < etp; ++er) {
      int64_t rows = 0;
      for (int i = 0; i < e * local; ++i) rows += rc[at(er * e * local + i)];
      p.stride = std::max(p.stride, rows);
    }
    // The gathered rows arrive etp rank-major, then peer, then expert; the experts want them
    // expert-major (then etp rank, then peer): each gathered row's destination, uploaded once.
    p.counts.assign(at(local), 0);
    std::vector<int32_t> dest(at(etp * p.stride), -1);
    int64_t row = 0;
    bool moved = false;
    for (int le = 0; le < local; ++le) {
      for (int er = 0; er < etp; ++er) {
        for (int q = 0; q < e; ++q) {
          // Offset of block (q, le) in etp rank er's received rows (peer-major, then expert).
          int64_t off = 0;
          for (int i = 0; i < q * local + le; ++i) off += rc[at(er * e * local + i)];
          const int64_t n = rc[at(er * e * local + q * local + le)];
          for (int64_t i = 0; i < n; ++i, ++row) {
            dest[at(er * p.stride + off + i)] = static_cast<int32_t>(row);
            moved = moved || er * p.stride + off + i != row;
          }
          p.counts[at(le)] += n;
        }
      }
    }
    moved = moved || row != etp * p.stride;
    p.expert_row = moved ? Tensor::from_host(dest.data(), {etp * p.stride}, DType::I32, device) : Tensor();
  }

  // This rank's permuted rows [R_l, h] -> the local experts' rows [R, h].
  Tensor to_experts(const Plan& p, const Tensor& rows) const {
    Tensor recv = exchange(ep_.ep_comm, ep_.ep_rank, rows, p.send_n, p.recv_n, h_);  // [received, h]
    Backend& be = rows.backend();
    if (ep_.etp_size > 1) {
      Tensor mine = empty_like(rows, {p.stride, h_});  // [stride, h]: the received rows, zeros after
      if (p.received > 0) be.copy(mine.raw(), recv.raw(), recv.nbytes());
      if (p.stride > p.received)
        be.fill(element_ptr(mine, p.received * h_), mine.dtype(), 0.0, (p.stride - p.received) * h_);
      recv = Tensor::empty({ep_.etp_size * p.stride, h_}, rows.dtype(), rows.device());
      timed_exchange([&] { ep_.etp_comm->all_gather(mine, recv)->wait(); });
    }
    if (!p.expert_row.defined()) return recv;
    const int64_t r = total(p.counts);
    Tensor out = empty_like(rows, {r, h_});  // [R, h]
    be.moe_permute(recv.raw(), recv.dtype(), p.expert_row.data<int32_t>(), p.expert_row.numel(), 1, h_, r, out.raw());
    return out;
  }

  // The local experts' rows [R, h] (partial sums over etp) -> this rank's permuted rows [R_l, h].
  Tensor from_experts(const Plan& p, const Tensor& rows) const {
    const int etp = ep_.etp_size;
    Tensor back = rows;  // [etp * stride, h]
    if (p.expert_row.defined()) {
      back = empty_like(rows, {etp * p.stride, h_});
      rows.backend().moe_unpermute(rows.raw(), rows.dtype(), nullptr, p.expert_row.data<int32_t>(),
                                   p.expert_row.numel(), 1, h_, total(p.counts), back.raw());
    }
    if (etp > 1) {
      Tensor sum = Tensor::empty({p.stride, h_}, rows.dtype(), rows.device());  // [stride, h]
      timed_exchange([&] { ep_.etp_comm->reduce_scatter(back, sum, ReduceOp::Sum)->wait(); });
      back = sum;
    }
    const Tensor mine = back.view(0, {p.received, h_});  // [received, h]
    return exchange(ep_.ep_comm, ep_.ep_rank, mine, p.recv_n, p.send_n, h_);
  }

  int64_t h_;
  int experts_;
  ExpertParallel ep_;
  Slots<Plan> slots_;
};

// ---- allgather -----------------------------------------------------------------------------

class AllGatherDispatcher final : public TokenDispatcher {
 public:
  AllGatherDispatcher(const LayerConfig& cfg, TensorParallel tp, const std::string& owner)
      : h_(cfg.hidden_size), experts_(cfg.moe.num_experts), ep_(tp.ep), slots_(owner + " (allgather)") {
    size_ = ep_.ep_size * ep_.etp_size;
  }

  Tensor dispatch(const Tensor& x, const Routing& r, const Step& step, std::vector<int64_t>* counts) override {
    Plan& p = slots_.create(step.microbatch);
    p.tokens = r.tokens;
    p.k = r.k;
    const Tensor all_x = gather(x);  // [G * N, h]
    // Every rank's choices, weights and padding, sorted by expert over all of them: this rank's
    // experts' rows are one window of the sorted rows. The permutation moves every gathered
    // slot's row (e times this rank's share; moe_permute has no expert window).
    const Tensor all_expert = gather(r.expert);  // [G * N * k] int32
    p.prob = gather(r.prob);                     // [G * N * k] fp32
    const std::vector<int64_t> pads = all_gather_ints(ep_.tp_ep_comm, size_, r.pad, x.device());  // [G, E]
    std::vector<int64_t> all_counts;  // [E]
    route_rows(all_expert, all_expert.numel(), pads, experts_, &p.row_of, &all_counts);
    const int local = experts_ / ep_.ep_size;
    const auto first = all_counts.begin() + ep_.ep_rank * local;
    p.first = std::accumulate(all_counts.begin(), first, int64_t{0});
    p.counts.assign(first, first + local);
    p.rows = total(all_counts);
    p.padded = total(pads) > 0;
    *counts = p.counts;
    Tensor rows = rows_buffer(x, p.rows, h_, p.padded);  // [R_all, h]
    x.backend().moe_permute(all_x.raw(), x.dtype(), p.row_of.data<int32_t>(), size_ * p.tokens, p.k, h_, p.rows,
                            rows.raw());
    return rows.view(p.first * h_, {total(p.counts), h_});
  }

  Tensor combine(const Tensor& y, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    // The other ranks' experts' rows are zeros here: the combine over all slots adds this rank's
    // experts' share, in fp32, and the reduce-scatter sums the shares.
    p.y = rows_buffer(y, p.rows, h_, true);  // [R_all, h]
    if (y.numel() > 0) y.backend().copy(element_ptr(p.y, p.first * h_), y.raw(), y.nbytes());
    const Tensor y32 = p.y.dtype() == DType::F32 ? p.y : p.y.to(DType::F32);       // [R_all, h] fp32
    Tensor out = Tensor::empty({size_ * p.tokens, h_}, DType::F32, y.device());  // [G * N, h] fp32
    y.backend().moe_unpermute(y32.raw(), DType::F32, p.prob.data<float>(), p.row_of.data<int32_t>(), size_ * p.tokens,
                              p.k, h_, p.rows, out.raw());
    return reduce_scatter(out, p.tokens * h_, y.dtype()).reshape({p.tokens, h_});
  }

  Tensor combine_backward(const Tensor& dout, const Step& step, Tensor* dprob) override {
    Plan& p = slots_.get(step.microbatch);
    const Tensor d = gather(dout);                   // [G * N, h]
    Tensor de = rows_buffer(dout, p.rows, h_, p.padded);  // [R_all, h]
    // [G * N * k] fp32: this rank's experts' share of the weights' gradient
    Tensor dp = Tensor::empty({size_ * p.tokens * p.k}, DType::F32, dout.device());
    dout.backend().moe_unpermute_backward(d.raw(), p.y.raw(), dout.dtype(), p.prob.data<float>(),
                                          p.row_of.data<int32_t>(), size_ * p.tokens, p.k, h_, p.rows, de.raw(),
                                          dp.data<float>());
    *dprob = reduce_scatter(dp, p.tokens * p.k, DType::F32);
    return de.view(p.first * h_, {total(p.counts), h_});
  }

  Tensor dispatch_backward(const Tensor& dxe, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    Backend& be = dxe.backend();
    // This rank's experts' rows in a zero [R_all, h] fp32 buffer, summed per token in fp32.
    Tensor rows = Tensor::zeros({p.rows, h_}, DType::F32, dxe.device());  // [R_all, h] fp32
    if (dxe.numel() > 0) be.cast(dxe.raw(), dxe.dtype(), element_ptr(rows, p.first * h_), DType::F32, dxe.numel());
    Tensor dx = Tensor::empty({size_ * p.tokens, h_}, DType::F32, dxe.device());  // [G * N, h] fp32
    be.moe_unpermute(rows.raw(), DType::F32, nullptr, p.row_of.data<int32_t>(), size_ * p.tokens, p.k, h_, p.rows,
                     dx.raw());
    const int64_t tokens = p.tokens;
    slots_.release(step.microbatch);
    return reduce_scatter(dx, tokens * h_, dxe.dtype()).reshape({tokens, h_});
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Plan {
    int64_t tokens = 0;
    int k = 0;
    Tensor row_of;     // [G * N * k] int32: each gathered slot's row of the sorted rows, -1 where dropped
    Tensor prob;       // [G * N * k] fp32: the gathered weights
    int64_t rows = 0;  // R_all: the sorted rows of every expert (padding included)
    int64_t first = 0; // this rank's experts' first row among them
    bool padded = false;
    std::vector<int64_t> counts;  // [E / e]
    Tensor y;          // [R_all, h]: this rank's experts' (partial) outputs, zeros elsewhere
  };

  // Every rank's t [n, ...] in group order, flattened: [G * n ...] (t itself for a group of one).
  Tensor gather(const Tensor& t) const {
    if (size_ == 1) return t;
    Tensor out = Tensor::empty({size_ * t.numel()}, t.dtype(), t.device());
    timed_exchange([&] { ep_.tp_ep_comm->all_gather(t.reshape({t.numel()}), out)->wait(); });
    return out;
  }

  // The sum over the group of every rank's v [G * n] fp32, this rank's [n] of it, in dtype.
  Tensor reduce_scatter(const Tensor& v, int64_t n, DType dtype) const {
    Tensor mine = v.reshape({v.numel()});
    if (size_ > 1) {
      mine = Tensor::empty({n}, DType::F32, v.device());
      timed_exchange([&] { ep_.tp_ep_comm->reduce_scatter(v.reshape({v.numel()}), mine, ReduceOp::Sum)->wait(); });
    }
    return dtype == DType::F32 ? mine : mine.to(dtype);
  }

  int64_t h_;
  int experts_;
  ExpertParallel ep_;
  int size_ = 1;  // e * etp
  Slots<Plan> slots_;
};

}  // namespace

double moe_exchange_seconds() { return static_cast<double>(g_exchange_ns.load()) * 1e-9; }

std::unique_ptr<TokenDispatcher> make_token_dispatcher(const LayerConfig& cfg, TensorParallel tp, const std::string& owner) {
  if (cfg.moe.dispatcher == MoeDispatcher::AllGather) return std::make_unique<AllGatherDispatcher>(cfg, tp, owner);
  return std::make_unique<AllToAllDispatcher>(cfg, tp, owner);
}

}  // namespace ptdp
