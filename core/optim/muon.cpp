#include "core/optim/muon.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "kernels/backend.h"

namespace ptdp {

bool muon_is_matrix(const ParamInfo& p) {
  if (p.global_shape.ndim() != 2) return false;
  // Megatron's is_embedding_or_output_parameter: the word and position embeddings and the
  // untied output layer (a tied one is the embedding itself).
  return p.name.find("embedding") == std::string::npos && p.name.rfind("output_layer", 0) != 0;
}

std::vector<std::array<float, 3>> muon_coefficients(NsCoefficients type) {
  switch (type) {
    case NsCoefficients::Simple: return {{3.4445f, -4.7750f, 2.0315f}};
    case NsCoefficients::Quintic:
      return {{4.0848f, -6.8946f, 2.9270f},
              {3.9505f, -6.3029f, 2.6377f},
              {3.7418f, -5.5913f, 2.3037f},
              {2.8769f, -3.1427f, 1.2046f},
              {2.8366f, -3.0525f, 1.2012f}};
    case NsCoefficients::PolarExpress:  // with Polar Express's 1.01^degree safety division
      return {{8.2051f, -22.9019f, 16.4607f}, {4.0664f, -2.8612f, 0.5184f}, {3.9096f, -2.8234f, 0.5250f},
              {3.2856f, -2.4153f, 0.4853f},   {2.2779f, -1.6198f, 0.3985f}, {1.8726f, -1.2307f, 0.3585f},
              {1.8564f, -1.2132f, 0.3568f},   {1.8750f, -1.2500f, 0.3750f}};
    case NsCoefficients::Aol:
      return {{4.0098f, -7.0585f, 2.4635f},
              {3.4585f, -5.5479f, 2.5959f},
              {2.7573f, -3.2939f, 1.4254f},
              {2.7215f, -3.0494f, 1.3169f}};
  }
  throw_error(ErrorCode::InvalidArgument, "Newton-Schulz coefficient type " +
                                              std::to_string(static_cast<int>(type)) + " is not known");
}

float muon_scale_factor(int64_t rows, int64_t cols, MuonScaleMode mode, float extra) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  double f = 1.0;
  switch (mode) {
    case MuonScaleMode::Spectral: f = std::sqrt(std::max(r, c)); break;
    case MuonScaleMode::UnitRmsNorm: f = std::sqrt(r / c); break;
    case MuonScaleMode::ShapeScaling: f = std::sqrt(std::max(1.0, r / c)); break;
  }
  return static_cast<float>(f * extra);
}

namespace {

int split_size(const ParamTable& t, const ParamInfo& p) { return p.split_size > 0 ? p.split_size : t.tp_size(); }

std::string bracketed(int64_t j) {
  std::string s = "[";
  s += std::to_string(j);
  s += ']';
  return s;
}

// The matrices of parameter i: its parts (split_qkv) or the whole, on the global rows or, for
// blockwise over a split parameter, on this rank's slice.
void add_matrices(const ParamTable& t, int space, int i, const MuonConfig& cfg, std::vector<MuonMatrix>& out) {
  const ParamInfo& p = t.info(i);
  const int S = split_size(t, p);
  const bool local = cfg.tp_mode == MuonTpMode::Blockwise && S > 1 && p.partition_dim >= 0;
  const int64_t R = local ? p.local_shape[0] : p.global_shape[0];
  const int64_t C = local ? p.local_shape[1] : p.global_shape[1];
  MuonMatrix base;
  base.space = space;
  base.param = i;
  base.expert = p.expert;
  base.local = local;
  base.cols = C;
  std::vector<std::pair<std::string, std::array<int64_t, 3>>> parts;  // name, {period, lo, rows}
  if (cfg.split_qkv && !p.row_parts.empty()) {
    static const char* kQkv[] = {"[q]", "[k]", "[v]"};
    const int64_t period = std::accumulate(p.row_parts.begin(), p.row_parts.end(), int64_t{0});
    int64_t lo = 0;
    for (std::size_t j = 0; j < p.row_parts.size(); ++j) {
      parts.push_back({j < 3 && p.row_parts.size() == 3 ? std::string(kQkv[j]) : bracketed(static_cast<int64_t>(j)),
                       {period, lo, p.row_parts[j]}});
      lo += p.row_parts[j];
    }
  } else if (cfg.split_qkv && p.partition_blocks > 1) {
    const int64_t n = R / p.partition_blocks;
    for (int k = 0; k < p.partition_blocks; ++k)
      parts.push_back({p.partition_blocks == 2 ? std::string(k == 0 ? "[gate]" : "[up]") : bracketed(k),
                       {R, k * n, n}});
  } else {
    parts.push_back({"", {R, 0, R}});
  }
  for (const auto& [suffix, part] : parts) {
    MuonMatrix m = base;
    m.name = p.name + suffix;
    m.period = part[0];
    m.part_lo = part[1];
    m.part_rows = part[2];
    m.periods = R / part[0];
    m.rows = m.part_rows * m.periods;
    m.flops = newton_schulz_flops(m.rows, m.cols, cfg.ns_steps);
    out.push_back(m);
  }
}

}  // namespace

std::vector<MuonMatrix> muon_matrices(const std::vector<ParamTable*>& tables, const MuonConfig& config) {
  std::vector<MuonMatrix> out;
  for (std::size_t s = 0; s < tables.size(); ++s) {
    const ParamTable& t = *tables[s];
    for (int i = 0; i < t.size(); ++i)
      if (muon_is_matrix(t.info(i))) add_matrices(t, static_cast<int>(s), i, config, out);
  }
  return out;
}

std::vector<double> muon_assign(std::vector<MuonMatrix>& ms, bool expert, int tensor_slots, int data_slots,
                                bool per_tensor_rank) {
  PTDP_CHECK_ARG(tensor_slots >= 1 && data_slots >= 1, "Muon's slots must be >= 1");
  std::vector<std::size_t> order;
  for (std::size_t k = 0; k < ms.size(); ++k)
    if (ms[k].expert == expert) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ms[a].flops > ms[b].flops; });
  std::vector<double> load(static_cast<std::size_t>(tensor_slots) * static_cast<std::size_t>(data_slots), 0.0);
  for (const std::size_t k : order) {
    const std::size_t slot = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[slot] += ms[k].flops;
    ms[k].owner_data = static_cast<int>(slot) / tensor_slots;
    ms[k].owner_tensor = per_tensor_rank ? static_cast<int>(slot) % tensor_slots : -1;
  }
  return load;
}

MuonOrthogonalizer::MuonOrthogonalizer(const std::vector<ParamTable*>& tables, const MuonConfig& config,
                                       bool sharded_data, ProcessGroups& groups)
    : tables_(tables),
      config_(config),
      groups_(groups),
      coefficients_(muon_coefficients(config.coefficients)),
      sharded_data_(sharded_data) {
  PTDP_CHECK_ARG(coefficients_.size() <= 8, "at most 8 Newton-Schulz coefficient sets");
  matrices_ = muon_matrices(tables_, config_);
  for (const bool expert : {false, true}) {
    const GroupKind tk = expert ? GroupKind::ExpertTensor : GroupKind::Tensor;
    const GroupKind dk = expert ? GroupKind::ExpertData : GroupKind::DataContext;
    const bool per_rank = config_.tp_mode == MuonTpMode::Distributed;
    muon_assign(matrices_, expert, per_rank ? groups_.size(tk) : 1, sharded_data ? groups_.size(dk) : 1, per_rank);
  }
}

std::vector<MuonOrthogonalizer::Piece> MuonOrthogonalizer::pieces(const MuonMatrix& mx, int r, int size) const {
  const ParamInfo& p = tables_[static_cast<std::size_t>(mx.space)]->info(mx.param);
  const int64_t C = mx.cols;
  std::vector<Piece> out;
  const auto emit = [&](int64_t local, int64_t m, int64_t count) {
    if (!out.empty() && out.back().local + out.back().count == local && out.back().m + out.back().count == m)
      out.back().count += count;
    else
      out.push_back({local, m, count});
  };
  for (int64_t mr = 0; mr < mx.rows; ++mr) {
    const int64_t gr = (mr / mx.part_rows) * mx.period + mx.part_lo + mr % mx.part_rows;
    if (mx.local || p.partition_dim < 0 || size == 1) {
      emit(gr * C, mr * C, C);  // the rank holds every row whole
    } else if (p.partition_dim == 0) {
      const int64_t R = p.global_shape[0], nb = p.partition_blocks, L = R / (size * nb);
      const int64_t block = gr / (R / nb), within = gr % (R / nb);
      if (within / L != r) continue;  // another rank's row
      emit((block * L + within % L) * C, mr * C, C);
    } else {
      const int64_t L = p.global_shape[1] / size;
      emit(gr * L, mr * C + r * L, L);
    }
  }
  return out;
}

namespace {

int64_t total(const std::vector<std::vector<int64_t>>& v, std::size_t q) {
  return std::accumulate(v[q].begin(), v[q].end(), int64_t{0});
}

}  // namespace

void MuonOrthogonalizer::orthogonalize(const std::vector<float*>& work, Backend& be) {
  PTDP_CHECK_ARG(work.size() == tables_.size(), "orthogonalize: one work buffer per parameter space");
  run_group(false, work, be);
  run_group(true, work, be);
}

void MuonOrthogonalizer::run_group(bool expert, const std::vector<float*>& work, Backend& be) {
  std::vector<std::size_t> idx;
  for (std::size_t k = 0; k < matrices_.size(); ++k)
    if (matrices_[k].expert == expert) idx.push_back(k);
  if (idx.empty()) return;
  const GroupKind tk = expert ? GroupKind::ExpertTensor : GroupKind::Tensor;
  const GroupKind dk = expert ? GroupKind::ExpertData : GroupKind::DataContext;
  const int T = groups_.size(tk), me = groups_.rank(tk);
  const int my_d = sharded_data_ ? groups_.rank(dk) : 0;
  const Device device = tables_.front()->flat_grads().device();
  const auto base = [&](const MuonMatrix& m) {
    return work[static_cast<std::size_t>(m.space)] + tables_[static_cast<std::size_t>(m.space)]->info(m.param).offset;
  };
  const auto replicated = [&](const MuonMatrix& m) {
    return tables_[static_cast<std::size_t>(m.space)]->info(m.param).partition_dim < 0 || m.local;
  };
  const auto piece_elems = [](const std::vector<Piece>& ps) {
    int64_t n = 0;
    for (const Piece& p : ps) n += p.count;
    return n;
  };

  // Matrices another data index owns: this rank contributes zeros to the reduce-scatter.
  std::vector<std::size_t> mine;
  for (const std::size_t k : idx) {
    const MuonMatrix& m = matrices_[k];
    if (m.owner_data == my_d) {
      mine.push_back(k);
      continue;
    }
    for (const Piece& p : pieces(m, me, T)) be.fill(base(m) + p.local, DType::F32, 0.0, p.count);
  }

  // Who computes what: distributed, one tensor rank; duplicated, every tensor rank; blockwise
  // (and tensor-replicated parameters in any mode), each rank from its own copy.
  const auto computes = [&](const MuonMatrix& m, int r) { return m.owner_tensor < 0 || m.owner_tensor == r; };
  const auto needs_gather = [&](const MuonMatrix& m) { return T > 1 && !replicated(m); };

  // 1. Pieces to the ranks that compute: to peer q, this rank's pieces of the matrices q computes.
  std::vector<std::vector<int64_t>> send_n(static_cast<std::size_t>(T)), recv_n(static_cast<std::size_t>(T));
  for (const std::size_t k : mine) {
    const MuonMatrix& m = matrices_[k];
    if (!needs_gather(m)) continue;
    for (int q = 0; q < T; ++q) {
      if (q == me) continue;
      if (computes(m, q)) send_n[static_cast<std::size_t>(q)].push_back(piece_elems(pieces(m, me, T)));
      if (computes(m, me)) recv_n[static_cast<std::size_t>(q)].push_back(piece_elems(pieces(m, q, T)));
    }
  }
  std::vector<Tensor> send(static_cast<std::size_t>(T)), recv(static_cast<std::size_t>(T));
  std::vector<P2POp> ops;
  for (int q = 0; q < T; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    const int64_t ns = total(send_n, uq), nr = total(recv_n, uq);
    if (ns > 0) {
      send[uq] = Tensor::empty({ns}, DType::F32, device);
      int64_t at = 0;
      for (const std::size_t k : mine) {
        const MuonMatrix& m = matrices_[k];
        if (!needs_gather(m) || !computes(m, q)) continue;
        for (const Piece& p : pieces(m, me, T)) {
          be.copy(send[uq].data<float>() + at, base(m) + p.local, static_cast<std::size_t>(p.count) * sizeof(float));
          at += p.count;
        }
      }
      ops.push_back({P2POp::Kind::Send, send[uq], q, 0});
    }
    if (nr > 0) {
      recv[uq] = Tensor::empty({nr}, DType::F32, device);
      ops.push_back({P2POp::Kind::Recv, recv[uq], q, 0});
    }
  }
  Communicator* comm = T > 1 ? &groups_.comm_for_tensors(tk, device) : nullptr;
  if (!ops.empty()) comm->batch_p2p(ops)->wait();

  // 2. Newton-Schulz on the matrices this rank computes; their results go back to the peers
  // that hold pieces (distributed mode).
  NewtonSchulzDesc desc;
  desc.steps = config_.ns_steps;
  desc.num_sets = static_cast<int>(coefficients_.size());
  for (std::size_t j = 0; j < coefficients_.size(); ++j)
    for (int c = 0; c < 3; ++c) desc.coefficients[j][c] = coefficients_[j][static_cast<std::size_t>(c)];
  desc.eps = config_.ns_eps;
  desc.precision = static_cast<int>(config_.precision);
  std::vector<int64_t> recv_at(static_cast<std::size_t>(T), 0);
  std::vector<std::vector<std::pair<std::size_t, Tensor>>> results(static_cast<std::size_t>(T));  // per peer
  Tensor M;
  for (const std::size_t k : mine) {
    const MuonMatrix& m = matrices_[k];
    if (!computes(m, me)) continue;
    const int64_t n = m.rows * m.cols;
    if (!M.defined() || M.numel() < n) M = Tensor::empty({n}, DType::F32, device);
    float* x = M.data<float>();
    for (const Piece& p : pieces(m, me, T))
      be.copy(x + p.m, base(m) + p.local, static_cast<std::size_t>(p.count) * sizeof(float));
    if (needs_gather(m)) {
      for (int q = 0; q < T; ++q) {
        if (q == me) continue;
        const auto uq = static_cast<std::size_t>(q);
        for (const Piece& p : pieces(m, q, T)) {
          be.copy(x + p.m, recv[uq].data<float>() + recv_at[uq], static_cast<std::size_t>(p.count) * sizeof(float));
          recv_at[uq] += p.count;
        }
      }
    }
    desc.rows = m.rows;
    desc.cols = m.cols;
    be.newton_schulz(x, desc);
    be.scale(x, muon_scale_factor(m.rows, m.cols, config_.scale_mode, config_.extra_scale_factor), n);
    for (const Piece& p : pieces(m, me, T))
      be.copy(base(m) + p.local, x + p.m, static_cast<std::size_t>(p.count) * sizeof(float));
    if (m.owner_tensor < 0 || T == 1) continue;  // every tensor rank computed its own
    for (int q = 0; q < T; ++q) {
      if (q == me) continue;
      const std::vector<Piece> ps = pieces(m, q, T);
      Tensor out = Tensor::empty({piece_elems(ps)}, DType::F32, device);
      int64_t at = 0;
      for (const Piece& p : ps) {
        be.copy(out.data<float>() + at, x + p.m, static_cast<std::size_t>(p.count) * sizeof(float));
        at += p.count;
      }
      results[static_cast<std::size_t>(q)].push_back({k, out});
    }
  }

  // 3. Results back (distributed mode): from each owner, this rank's pieces of its matrices.
  if (config_.tp_mode != MuonTpMode::Distributed || T == 1) return;
  std::vector<P2POp> back;
  std::vector<Tensor> sendback(static_cast<std::size_t>(T)), recvback(static_cast<std::size_t>(T));
  for (int q = 0; q < T; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    if (q == me) continue;
    int64_t ns = 0, nr = 0;
    for (const auto& r : results[uq]) ns += r.second.numel();
    for (const std::size_t k : mine)
      if (matrices_[k].owner_tensor == q) nr += piece_elems(pieces(matrices_[k], me, T));
    if (ns > 0) {
      sendback[uq] = Tensor::empty({ns}, DType::F32, device);
      int64_t at = 0;
      for (const auto& r : results[uq]) {
        be.copy(sendback[uq].data<float>() + at, r.second.data<float>(), r.second.nbytes());
        at += r.second.numel();
      }
      back.push_back({P2POp::Kind::Send, sendback[uq], q, 1});
    }
    if (nr > 0) {
      recvback[uq] = Tensor::empty({nr}, DType::F32, device);
      back.push_back({P2POp::Kind::Recv, recvback[uq], q, 1});
    }
  }
  if (!back.empty()) comm->batch_p2p(back)->wait();
  std::vector<int64_t> at(static_cast<std::size_t>(T), 0);
  for (const std::size_t k : mine) {
    const MuonMatrix& m = matrices_[k];
    if (m.owner_tensor == me) continue;
    const auto uq = static_cast<std::size_t>(m.owner_tensor);
    for (const Piece& p : pieces(m, me, T)) {
      be.copy(base(m) + p.local, recvback[uq].data<float>() + at[uq], static_cast<std::size_t>(p.count) * sizeof(float));
      at[uq] += p.count;
    }
  }
}

}  // namespace ptdp
