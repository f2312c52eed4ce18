// Muon's orthogonalisation over the flat buffers of the parameter spaces: which parameters are
// Muon's matrices, where each matrix's Newton-Schulz iteration runs, and the exchanges that
// bring a matrix's pieces to that rank and its result back.
//
// A matrix is a 2-D hidden weight (every 2-D parameter but the embeddings and the output
// layer, Megatron's rule) or one part of a fused one: q, k and v of the fused QKV (the same
// part of every query group, ParamInfo::row_parts) and the gate and up halves of SwiGLU's fc1
// (ParamInfo::partition_blocks), as a model with separate projections has them
// (MuonConfig::split_qkv). Each MoE expert's linears are matrices of their own.
//
// Where the iteration runs (MuonConfig::tp_mode):
//   distributed  the whole matrix, on one rank of its tensor x data group: the matrices are
//                spread over the t*d "slots" of a pipeline stage by cost (largest first, each to
//                the least loaded slot), the pieces of a matrix are sent to its owner over the
//                tensor group and the results sent back, so each matrix is orthogonalised once.
//   duplicated   the whole matrix, on every tensor rank of its owner's data index (all-gather
//                of the pieces): the same numbers, t times the work.
//   blockwise    each tensor rank's piece on its own (Megatron's definition): a different update.
// With the distributed optimizer the data-parallel ranks share the work too (slots over the
// data group; the caller all-gathers the momentum before and reduce-scatters the results after,
// every other rank contributing zeros), so the per-rank Newton-Schulz work falls as 1/(t d).
// Without it every data-parallel replica orthogonalises every matrix of its tensor slot.
//
// Every rank of a stage enumerates the same matrices in the same order (expert matrices: the
// same shapes on every expert rank), so the assignment needs no communication.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/params/params.h"
#include "core/parallel/groups.h"

namespace ptdp {

class Backend;

/// Whether Muon orthogonalises parameter `p` (Megatron's rule: 2-D and neither an embedding
/// nor the output layer); the others take the scalar optimizer.
bool muon_is_matrix(const ParamInfo& p);

/// The Newton-Schulz coefficient sets of `type` (Megatron's / Emerging-Optimizers' tables).
std::vector<std::array<float, 3>> muon_coefficients(NsCoefficients type);

/// The update scale of an [rows, cols] matrix: MuonScaleMode's factor times extra.
float muon_scale_factor(int64_t rows, int64_t cols, MuonScaleMode mode, float extra);

struct MuonMatrix {
  int space = 0, param = 0;
  std::string name;  ///< the parameter's name, with "[q]", "[k]", "[v]", "[gate]", "[up]" for parts
  /// The rows of the parameter (its global dim 0, or its local one for blockwise) that form the
  /// matrix: rows [k * period + part_lo, k * period + part_lo + part_rows) for k < periods.
  int64_t period = 0, part_lo = 0, part_rows = 0, periods = 1;
  int64_t rows = 0, cols = 0;  ///< the matrix orthogonalised
  bool expert = false;
  bool local = false;       ///< blockwise: this rank's piece only
  int owner_data = 0;       ///< data(-parallel) index of the ranks that compute it
  int owner_tensor = -1;    ///< tensor rank that computes it; -1: every tensor rank (duplicated, blockwise)
  double flops = 0;  ///< newton_schulz_flops (kernels/backend.h) of the matrix
};

/// Every matrix of `tables` (MuonMatrix::owner_* unset), in the order every rank enumerates
/// them: by space, parameter, part.
std::vector<MuonMatrix> muon_matrices(const std::vector<ParamTable*>& tables, const MuonConfig& config);
/// Spreads the matrices of one region (expert or not) over tensor_slots x data_slots by cost:
/// largest first, each to the least loaded slot, the lowest on ties. per_tensor_rank: the
/// tensor slot is MuonMatrix::owner_tensor (distributed mode); otherwise every tensor rank of
/// the owner's data index computes (owner_tensor -1). Returns each slot's FLOPs.
std::vector<double> muon_assign(std::vector<MuonMatrix>& matrices, bool expert, int tensor_slots, int data_slots,
                                bool per_tensor_rank);

class MuonOrthogonalizer {
 public:
  /// `tables`: the optimizer's spaces. `sharded_data`: the distributed optimizer shares the work
  /// over the data-parallel groups (of the dense and the expert region).
  MuonOrthogonalizer(const std::vector<ParamTable*>& tables, const MuonConfig& config, bool sharded_data,
                     ProcessGroups& groups);

  /// `work[s]` (space s's flat buffer, capacity() elements, on the parameters' device) holds the
  /// momentum update of every local element of space s's matrices. Replaces those elements by
  /// the scaled orthogonalised update where this rank's data index owns the matrix and by 0
  /// elsewhere. Collective over the tensor (and expert-tensor) groups.
  void orthogonalize(const std::vector<float*>& work, Backend& be);

  const std::vector<MuonMatrix>& matrices() const { return matrices_; }

 private:
  struct Piece {
    int64_t local = 0;  ///< element offset in the parameter's local slice
    int64_t m = 0;      ///< element offset in the matrix
    int64_t count = 0;
  };
  /// The pieces tensor rank `r` (of `size`) holds of matrix `mx`, in packing order.
  std::vector<Piece> pieces(const MuonMatrix& mx, int r, int size) const;
  void run_group(bool expert, const std::vector<float*>& work, Backend& be);

  std::vector<ParamTable*> tables_;
  MuonConfig config_;
  ProcessGroups& groups_;
  std::vector<std::array<float, 3>> coefficients_;
  std::vector<MuonMatrix> matrices_;
  bool sharded_data_ = false;
};

}  // namespace ptdp
