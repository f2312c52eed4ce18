// Pipeline schedules as data (docs/architecture.md, principle 5): for each pipeline rank, the ordered list
// of actions it performs in one iteration. A schedule can be generated, checked, simulated,
// drawn and executed; the executor runs exactly these lists. A generator writes each rank's
// compute order; one pass (transfers.h) adds the sends and receives.
//
// Model chunks (virtual stages) are numbered 0 .. p*v - 1 in model order. Where they live is
// the schedule's placement (ChunkPlacement): round-robin, chunk c on pipeline rank c % p (with
// p = 4, v = 2, rank 0 holds chunks 0 and 4), or V-shaped (v = 2), rank r holding chunks r and
// 2p - 1 - r (with p = 4, rank 0 holds chunks 0 and 7, rank 3 chunks 3 and 4: the model goes
// down the ranks and comes back up, and the output of chunk p - 1 is handed to chunk p on the
// same rank without a transfer). Chunk 0 holds the embedding, chunk p*v - 1 the final
// LayerNorm, LM head and loss: under the V placement both live on rank 0.
//
// Communication semantics (shared by the checker, the simulator and the executor):
//  - SendActivation (mb, c): the output of chunk c for microbatch mb goes to the rank of chunk
//    c + 1. RecvActivation (mb, c): the input of chunk c arrives from the rank of chunk c - 1.
//  - SendGradient (mb, c): the gradient of chunk c's input goes to the rank of chunk c - 1.
//    RecvGradient (mb, c): the gradient of chunk c's output arrives from the rank of chunk c + 1.
//  - `peer` is the other pipeline rank. Between two ranks, transfers of one kind (activation or
//    gradient) are matched in order: the k-th send of a kind from A to B meets the k-th receive
//    of that kind on B from A, which must name the same (microbatch, chunk edge).
//  - A maximal run of consecutive communication actions in a rank's list is one batch, issued
//    together (batched send/recv) and completed together: neighbours exchanging in both
//    directions at once cannot deadlock. A batch completes once every transfer in it has met
//    its counterpart on the peer, i.e. the peer has reached (posted) the batch holding it.
//  - Compute actions run in list order; an action starts when the previous one has finished.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/parallel/layout.h"

namespace ptdp {

/// Numbers match ptdp_action_kind in the C API.
enum class ActionKind : int {
  Forward = 0,         ///< forward of (microbatch, chunk)
  Backward = 1,        ///< full backward: input and weight gradients together
  BackwardInput = 2,   ///< B of zero-bubble schedules: the input gradient only
  BackwardWeight = 3,  ///< W of zero-bubble schedules: the weight gradients, deferred
  SendActivation = 4,
  RecvActivation = 5,
  SendGradient = 6,
  RecvGradient = 7,
};
const char* action_kind_name(ActionKind k);
inline bool is_communication(ActionKind k) { return static_cast<int>(k) >= 4; }

struct Action {
  ActionKind kind = ActionKind::Forward;
  int microbatch = 0;
  int chunk = 0;  ///< global chunk index in [0, p*v)
  int peer = -1;  ///< pipeline rank of the other side (communication only)
  bool operator==(const Action&) const = default;
  /// The one text of an action, in the checker's and executor's messages, the drawings' titles
  /// and the trace's spans: "F mb3 c1", "B mb0 c7", "Bi mb2 c0", "W mb2 c0", "SendAct mb3 c1 -> 2",
  /// "RecvGrad mb4 c1 <- 2".
  std::string str() const;
};

/// The action `text` names, written as Action::str() writes it, or nothing. Compute actions have
/// had that text in the executor's trace spans of every ptdp version, so old traces read too.
std::optional<Action> parse_action(std::string_view text);

/// Numbers match ptdp_schedule_kind in the C API.
/// ForwardOnly (evaluation, generation) runs microbatch after microbatch through every chunk,
/// with no backward; it takes any v.
/// ZeroBubbleV (ZB-V, Qi et al., "Pipeline Parallelism with Controllable Memory") and DualPipeV
/// (DeepSeek's DualPipe, its V variant) run v = 2 chunks per rank in the V placement;
/// InterleavedZeroBubble is interleaved 1F1B (round-robin placement, v >= 2) with the backward
/// split into B and W and the W passes filling the waits.
enum class ScheduleKind : int {
  GPipe = 0,
  OneFOneB = 1,
  Interleaved1F1B = 2,
  ZeroBubbleH1 = 3,
  ForwardOnly = 4,
  ZeroBubbleV = 5,
  DualPipeV = 6,
  InterleavedZeroBubble = 7,
};
const char* schedule_kind_name(ScheduleKind k);

/// The placement a schedule kind runs in: V for ZeroBubbleV and DualPipeV, else round-robin.
ChunkPlacement placement_of(ScheduleKind kind);

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int p = 1;  ///< pipeline ranks
  int m = 1;  ///< microbatches per iteration
  int v = 1;  ///< chunks per rank
  std::vector<std::vector<Action>> ranks;  ///< ranks[r] = rank r's actions in order
  /// Where the chunks live; placement_of(kind) for generated schedules.
  ChunkPlacement placement = ChunkPlacement::RoundRobin;

  int num_chunks() const { return p * v; }
  int rank_of_chunk(int chunk) const { return placement_rank(placement, p, chunk); }
  int local_index(int chunk) const { return placement_local(placement, p, chunk); }
  int chunk_at(int rank, int j) const { return placement_chunk(placement, p, rank, j); }
};

/// Generates a schedule. Throws Error(InvalidArgument) naming the numbers when the kind cannot
/// serve (p, m, v): non-positive sizes, v > 1 for a kind without chunks, v == 1 for interleaved,
/// or m not a multiple of p where the schedule needs it, v != 2 for ZB-V and DualPipeV, m < 2p
/// for DualPipeV. Never silently changes m.
Schedule make_schedule(ScheduleKind kind, int p, int m, int v = 1);

/// The forward-only schedule (evaluation) of a model whose chunks are placed by `placement`
/// (v = 2 for V). Throws Error(InvalidArgument) as make_schedule().
Schedule make_forward_only(int p, int m, int v, ChunkPlacement placement);

}  // namespace ptdp
