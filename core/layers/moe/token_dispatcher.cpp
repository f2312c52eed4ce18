#include "core/layers/moe/token_dispatcher.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace ptdp {

namespace {

using Index = std::vector<int64_t>;

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// [idx.size(), cols] with row i = src's row idx[i], or zeros where idx[i] < 0.
Tensor gather_rows(const Tensor& src, const Index& idx, int64_t cols) {
  Tensor out = Tensor::empty({static_cast<int64_t>(idx.size()), cols}, src.dtype(), src.device());  // [R, cols]
  Backend& be = src.backend();
  const std::size_t bytes = static_cast<std::size_t>(cols) * dtype_size(src.dtype());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    void* row = element_ptr(out, static_cast<int64_t>(i) * cols);
    if (idx[i] < 0) be.fill(row, src.dtype(), 0.0, cols);
    else be.copy(row, element_ptr(src, idx[i] * cols), bytes);
  }
  return out;
}

// A zero [rows, cols] tensor with row idx[i] = src's row i (idx < 0: dropped).
Tensor scatter_rows(const Tensor& src, const Index& idx, int64_t rows, int64_t cols) {
  Tensor out = Tensor::zeros({rows, cols}, src.dtype(), src.device());  // [rows, cols]
  Backend& be = src.backend();
  const std::size_t bytes = static_cast<std::size_t>(cols) * dtype_size(src.dtype());
  for (std::size_t i = 0; i < idx.size(); ++i)
    if (idx[i] >= 0) be.copy(element_ptr(out, idx[i] * cols), element_ptr(src, static_cast<int64_t>(i) * cols), bytes);
  return out;
}

std::vector<float> host_f32(const Tensor& t) {
  std::vector<float> out(at(t.numel()));
  if (!out.empty()) (t.dtype() == DType::F32 ? t : t.to(DType::F32)).copy_to_host(out.data(), out.size() * sizeof(float));
  return out;
}

Tensor from_f32(const std::vector<float>& v, const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::from_host(v.data(), shape, DType::F32, device);
  return dtype == DType::F32 ? t : t.to(dtype);
}

// Every rank's `mine` (host int64 values), in group-rank order.
std::vector<int64_t> all_gather_ints(Communicator* comm, int size, const std::vector<int64_t>& mine, Device device) {
  if (size == 1) return mine;
  std::vector<int32_t> in(mine.begin(), mine.end()), out(in.size() * at(size));
  Tensor a = Tensor::from_host(in.data(), {static_cast<int64_t>(in.size())}, DType::I32, device);
  Tensor b = Tensor::empty({static_cast<int64_t>(out.size())}, DType::I32, device);
  comm->all_gather(a, b)->wait();
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
  if (!ops.empty()) comm->batch_p2p(ops)->wait();
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
    return to_experts(p, gather_rows(x, p.perm_src, h_));
  }

  Tensor combine(const Tensor& y, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    p.y_local = from_experts(p, y);
    const std::vector<float> yl = host_f32(p.y_local);
    std::vector<float> out(at(p.tokens * h_), 0.0f);  // [N, h]
    for (int64_t n = 0; n < p.tokens; ++n) {
      float* o = out.data() + n * h_;
      for (int j = 0; j < p.k; ++j) {
        const int64_t slot = n * p.k + j, row = p.slot_row[at(slot)];
        if (row < 0) continue;
        const float w = p.prob[at(slot)];
        const float* v = yl.data() + row * h_;
        for (int64_t c = 0; c < h_; ++c) o[c] += w * v[c];
      }
    }
    return from_f32(out, {p.tokens, h_}, y.dtype(), y.device());
  }

  Tensor combine_backward(const Tensor& dout, const Step& step, std::vector<float>* dprob) override {
    Plan& p = slots_.get(step.microbatch);
    const std::vector<float> d = host_f32(dout), yl = host_f32(p.y_local);
    std::vector<float> dl(at(static_cast<int64_t>(p.perm_src.size()) * h_), 0.0f);  // [R_l, h]
    dprob->assign(at(p.tokens * p.k), 0.0f);
    for (int64_t n = 0; n < p.tokens; ++n) {
      const float* g = d.data() + n * h_;
      for (int j = 0; j < p.k; ++j) {
        const int64_t slot = n * p.k + j, row = p.slot_row[at(slot)];
        if (row < 0) continue;
        const float w = p.prob[at(slot)];
        const float* v = yl.data() + row * h_;
        float* o = dl.data() + row * h_;
        double dot = 0.0;
        for (int64_t c = 0; c < h_; ++c) {
          dot += static_cast<double>(g[c]) * v[c];
          o[c] = w * g[c];
        }
        (*dprob)[at(slot)] = static_cast<float>(dot);
      }
    }
    return to_experts(p, from_f32(dl, {static_cast<int64_t>(p.perm_src.size()), h_}, dout.dtype(), dout.device()));
  }

  Tensor dispatch_backward(const Tensor& dxe, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    const std::vector<float> dl = host_f32(from_experts(p, dxe));
    std::vector<float> dx(at(p.tokens * h_), 0.0f);  // [N, h]
    for (int64_t n = 0; n < p.tokens; ++n) {
      for (int j = 0; j < p.k; ++j) {
        const int64_t row = p.slot_row[at(n * p.k + j)];
        if (row < 0) continue;
        for (int64_t c = 0; c < h_; ++c) dx[at(n * h_ + c)] += dl[at(row * h_ + c)];
      }
    }
    const Device device = dxe.device();
    const DType dtype = dxe.dtype();
    slots_.release(step.microbatch);
    return from_f32(dx, {static_cast<int64_t>(dx.size()) / h_, h_}, dtype, device);
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Plan {
    int64_t tokens = 0;
    int k = 0;
    Index slot_row;           // [N * k] row of the local permuted buffer, -1 where dropped
    std::vector<float> prob;  // [N * k]
    Index perm_src;           // [R_l] token of each permuted row (-1: a padding row)
    Index send_n, recv_n;     // [e] rows to and from each ExpertModel peer
    int64_t received = 0;     // rows this rank received (sum of recv_n)
    int64_t stride = 0;       // rows of each etp rank's block in the gathered buffer
    Index expert_src;         // [R] row of the gathered buffer behind each expert-major row
    std::vector<int64_t> counts;  // [E / e]
    Tensor y_local;           // [R_l, h]: the experts' outputs back in permuted order
  };

  void plan(Plan& p, const Routing& r, Device device) const {
    const int e = ep_.ep_size, local = experts_ / e, etp = ep_.etp_size;
    p.tokens = r.tokens;
    p.k = r.k;
    p.prob = r.prob;
    p.slot_row.assign(r.expert.size(), -1);
    // The permutation: expert-major, then token, then choice; an expert's padding rows last.
    std::vector<int64_t> lc(at(experts_), 0);
    std::vector<Index> by_expert(at(experts_));
    for (std::size_t s = 0; s < r.expert.size(); ++s)
      if (r.expert[s] >= 0) by_expert[at(r.expert[s])].push_back(static_cast<int64_t>(s));
    p.perm_src.clear();
    for (int x = 0; x < experts_; ++x) {
      for (int64_t s : by_expert[at(x)]) {
        p.slot_row[at(s)] = static_cast<int64_t>(p.perm_src.size());
        p.perm_src.push_back(s / r.k);
      }
      const int64_t pad = r.pad.empty() ? 0 : r.pad[at(x)];
      for (int64_t i = 0; i < pad; ++i) p.perm_src.push_back(-1);
      lc[at(x)] = static_cast<int64_t>(by_expert[at(x)].size()) + pad;
    }
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
    p.counts.assign(at(local), 0);
    p.expert_src.clear();
    for (int le = 0; le < local; ++le) {
      for (int er = 0; er < etp; ++er) {
        for (int q = 0; q < e; ++q) {
          // Offset of block (q, le) in etp rank er's received rows (peer-major, then expert).
          int64_t off = 0;
          for (int i = 0; i < q * local + le; ++i) off += rc[at(er * e * local + i)];
          const int64_t n = rc[at(er * e * local + q * local + le)];
          for (int64_t i = 0; i < n; ++i) p.expert_src.push_back(er * p.stride + off + i);
          p.counts[at(le)] += n;
        }
      }
    }
  }

  // This rank's permuted rows [R_l, h] -> the local experts' rows [R, h].
  Tensor to_experts(const Plan& p, const Tensor& rows) const {
    Tensor recv = exchange(ep_.ep_comm, ep_.ep_rank, rows, p.send_n, p.recv_n, h_);  // [received, h]
    if (ep_.etp_size > 1) {
      Index pad(at(p.stride), -1);
      std::iota(pad.begin(), pad.begin() + p.received, int64_t{0});
      const Tensor mine = gather_rows(recv, pad, h_);  // [stride, h]
      recv = Tensor::empty({ep_.etp_size * p.stride, h_}, rows.dtype(), rows.device());
      ep_.etp_comm->all_gather(mine, recv)->wait();
    }
    return gather_rows(recv, p.expert_src, h_);
  }

  // The local experts' rows [R, h] (partial sums over etp) -> this rank's permuted rows [R_l, h].
  Tensor from_experts(const Plan& p, const Tensor& rows) const {
    const int etp = ep_.etp_size;
    Tensor back = scatter_rows(rows, p.expert_src, etp * p.stride, h_);  // [etp * stride, h]
    if (etp > 1) {
      Tensor sum = Tensor::empty({p.stride, h_}, rows.dtype(), rows.device());  // [stride, h]
      ep_.etp_comm->reduce_scatter(back, sum, ReduceOp::Sum)->wait();
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
    const int64_t n = r.tokens, k = r.k;
    p.tokens = n;
    p.k = r.k;
    const Tensor all_x = gather(x);  // [G * N, h]
    // Every rank's choices, weights and padding.
    const std::vector<int64_t> ex = all_gather_ints(ep_.tp_ep_comm, size_, Index(r.expert.begin(), r.expert.end()), x.device());
    const std::vector<int64_t> pads = all_gather_ints(ep_.tp_ep_comm, size_, r.pad, x.device());
    std::vector<float> pr = r.prob;
    if (size_ > 1) pr = host_f32(gather(Tensor::from_host(r.prob.data(), {n * k}, DType::F32, x.device())));
    const int local = experts_ / ep_.ep_size;
    p.counts.assign(at(local), 0);
    p.src.clear();
    p.slot.clear();
    p.prob.clear();
    for (int le = 0; le < local; ++le) {
      const int x_id = ep_.ep_rank * local + le;
      for (std::size_t s = 0; s < ex.size(); ++s) {
        if (ex[s] != x_id) continue;
        p.src.push_back(static_cast<int64_t>(s) / k);
        p.slot.push_back(static_cast<int64_t>(s));
        p.prob.push_back(pr[s]);
      }
      for (int g = 0; g < size_; ++g) {
        for (int64_t i = 0; i < pads[at(g * experts_ + x_id)]; ++i) {
          p.src.push_back(-1);
          p.slot.push_back(-1);
          p.prob.push_back(0.0f);
        }
      }
      p.counts[at(le)] = static_cast<int64_t>(p.src.size()) - std::accumulate(p.counts.begin(), p.counts.end(), int64_t{0});
    }
    *counts = p.counts;
    return gather_rows(all_x, p.src, h_);
  }

  Tensor combine(const Tensor& y, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    p.y = host_f32(y);
    std::vector<float> out(at(size_ * p.tokens * h_), 0.0f);  // [G * N, h]
    for (std::size_t i = 0; i < p.src.size(); ++i) {
      if (p.src[i] < 0) continue;
      float* o = out.data() + p.src[i] * h_;
      const float* v = p.y.data() + static_cast<int64_t>(i) * h_;
      for (int64_t c = 0; c < h_; ++c) o[c] += p.prob[i] * v[c];
    }
    return reduce_scatter(out, p.tokens * h_, y.dtype(), y.device()).reshape({p.tokens, h_});
  }

  Tensor combine_backward(const Tensor& dout, const Step& step, std::vector<float>* dprob) override {
    Plan& p = slots_.get(step.microbatch);
    const std::vector<float> d = host_f32(gather(dout));  // [G * N, h]
    std::vector<float> dy(p.src.size() * at(h_), 0.0f);   // [R, h]
    std::vector<float> dp(at(size_ * p.tokens * p.k), 0.0f);  // [G * N * k]: this rank's experts' share
    for (std::size_t i = 0; i < p.src.size(); ++i) {
      if (p.src[i] < 0) continue;
      const float* g = d.data() + p.src[i] * h_;
      const float* v = p.y.data() + static_cast<int64_t>(i) * h_;
      double dot = 0.0;
      for (int64_t c = 0; c < h_; ++c) {
        dot += static_cast<double>(g[c]) * v[c];
        dy[i * at(h_) + at(c)] = p.prob[i] * g[c];
      }
      dp[at(p.slot[i])] = static_cast<float>(dot);
    }
    const std::vector<float> mine = host_f32(reduce_scatter(dp, p.tokens * p.k, DType::F32, dout.device()));
    *dprob = mine;
    return from_f32(dy, {static_cast<int64_t>(p.src.size()), h_}, dout.dtype(), dout.device());
  }

  Tensor dispatch_backward(const Tensor& dxe, const Step& step) override {
    Plan& p = slots_.get(step.microbatch);
    const std::vector<float> d = host_f32(dxe);
    std::vector<float> dx(at(size_ * p.tokens * h_), 0.0f);  // [G * N, h]
    for (std::size_t i = 0; i < p.src.size(); ++i) {
      if (p.src[i] < 0) continue;
      for (int64_t c = 0; c < h_; ++c) dx[at(p.src[i] * h_ + c)] += d[i * at(h_) + at(c)];
    }
    const int64_t tokens = p.tokens;
    slots_.release(step.microbatch);
    return reduce_scatter(dx, tokens * h_, dxe.dtype(), dxe.device()).reshape({tokens, h_});
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Plan {
    int64_t tokens = 0;
    int k = 0;
    Index src;                // [R] gathered token of each expert row (-1: padding)
    Index slot;               // [R] its slot in the gathered [G * N * k] routing
    std::vector<float> prob;  // [R]
    std::vector<int64_t> counts;
    std::vector<float> y;     // [R, h] the experts' (partial) outputs
  };

  // Every rank's t [n, ...] in group order: [G * n, ...] (t itself for a group of one).
  Tensor gather(const Tensor& t) const {
    if (size_ == 1) return t;
    Tensor out = Tensor::empty({size_ * t.numel()}, t.dtype(), t.device());
    ep_.tp_ep_comm->all_gather(t.reshape({t.numel()}), out)->wait();
    return out;
  }

  // The sum over the group of every rank's v [G * n] (fp32), this rank's [n] of it, in dtype.
  Tensor reduce_scatter(const std::vector<float>& v, int64_t n, DType dtype, Device device) const {
    Tensor all = Tensor::from_host(v.data(), {static_cast<int64_t>(v.size())}, DType::F32, device);
    Tensor mine = all;
    if (size_ > 1) {
      mine = Tensor::empty({n}, DType::F32, device);
      ep_.tp_ep_comm->reduce_scatter(all, mine, ReduceOp::Sum)->wait();
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

std::unique_ptr<TokenDispatcher> make_token_dispatcher(const LayerConfig& cfg, TensorParallel tp, const std::string& owner) {
  if (cfg.moe.dispatcher == MoeDispatcher::AllGather) return std::make_unique<AllGatherDispatcher>(cfg, tp, owner);
  return std::make_unique<AllToAllDispatcher>(cfg, tp, owner);
}

}  // namespace ptdp
