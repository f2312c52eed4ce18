// Communicator: the collectives and point-to-point transfers the engine needs, on tensors,
// over one group of ranks. Implementations: MPI (CPU tensors), NCCL (GPU tensors), self
// (world of one).
//
// Every operation is non-blocking and returns a Work to wait on, so communication overlaps
// compute; the blocking forms are `op(...)->wait()`. Every wait has a deadline: when it passes,
// wait() throws Error(Timeout) naming the operation, the group, its size, the operation's
// sequence number and this rank, and the communicator is marked failed (later calls throw
// Error(InvalidState)) because a collective that one rank abandoned cannot be resumed.
// Every operation is recorded in this process's flight recorder (flight_recorder.h), and a
// runtime's communicators can be aborted together (CommAbortScope, ptdp_runtime_abort).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/flight_recorder.h"
#include "core/tensor/tensor.h"

namespace ptdp {

/// Reductions; numbers match ptdp_reduce_op in the C API.
enum class ReduceOp : int { Sum = 0, Avg = 1, Max = 2, Min = 3 };
const char* reduce_op_name(ReduceOp op);

/// Default deadline for any blocking wait; PTDP_COMM_TIMEOUT_S overrides it.
inline constexpr double kDefaultCommTimeoutS = 300.0;
/// The timeout from PTDP_COMM_TIMEOUT_S when set to a positive number, else the default.
/// Throws Error(InvalidArgument) when the variable is set to something that is not one.
double comm_timeout_from_env();

class Communicator;

/// What ptdp_runtime_abort reaches: every communicator created with the same settings (the
/// runtime's, its groups' and their NCCL communicators) registers here while it lives.
class CommAbortScope {
 public:
  bool aborted() const { return aborted_.load(); }
  /// Marks the scope aborted and aborts every registered communicator (Communicator::abort).
  void abort();
  void add(Communicator* c);
  void remove(Communicator* c);

 private:
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::vector<Communicator*> members_;
};

/// Settings shared by a runtime's communicators.
struct CommSettings {
  double timeout_s = kDefaultCommTimeoutS;
  /// Before each collective, check that every rank of the group calls the same operation
  /// with the same element count, dtype and root (one small extra all-reduce). Mismatches are
  /// then reported as Error(InvalidArgument) on every rank instead of being undefined. The check
  /// completes before the operation starts, so a non-blocking collective then returns only once
  /// every rank of the group has started it: ranks must start collectives on different groups
  /// in the same order (as MPI requires of blocking ones). Turn it off for full overlap.
  bool verify = true;
  int world_rank = 0;  ///< this process's rank in the runtime's world, for messages
  /// The runtime's abort scope (none for communicators made outside a runtime).
  std::shared_ptr<CommAbortScope> abort_scope = {};
};

/// Seconds this process has spent blocked in Work::wait() on any communicator: what a training
/// iteration reports as time waiting on communication.
double comm_wait_seconds();
void add_comm_wait_seconds(double seconds);

/// A pending operation.
class Work {
 public:
  virtual ~Work() = default;
  /// True when the operation has completed (drives progress; never blocks).
  virtual bool test() = 0;
  /// Blocks until the operation completes or the deadline passes (Error(Timeout)).
  virtual void wait() = 0;
};
using WorkPtr = std::unique_ptr<Work>;

/// One half of a point-to-point exchange in a batch.
struct P2POp {
  enum class Kind { Send, Recv } kind = Kind::Send;
  Tensor tensor;
  int peer = 0;  ///< rank in this communicator's group
  int tag = 0;   ///< >= 0; messages with the same peer and tag arrive in order
};

class Communicator {
 public:
  Communicator(std::string name, int rank, int size, std::vector<int> world_ranks,
               CommSettings settings);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// World ranks of the members, in group-rank order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  /// "tensor group [2, 3]".
  const std::string& name() const { return name_; }
  const CommSettings& settings() const { return settings_; }
  void set_timeout(double seconds);

  /// In place over `t`. Avg divides by the group size (floating dtypes only).
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op) = 0;
  /// in holds size() equal chunks; out (one chunk) receives this rank's reduced chunk. out may
  /// be this rank's own chunk of in (in place, as NCCL allows); in's other chunks are then
  /// clobbered.
  virtual WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  /// out holds size() chunks the size of in, in group-rank order. in may be this rank's own
  /// chunk of out (in place).
  virtual WorkPtr all_gather(const Tensor& in, const Tensor& out) = 0;
  /// `root` is a group rank.
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;
  /// Sends and receives issued together: neighbours that exchange in both directions at once
  /// never deadlock, whatever order each lists its operations in.
  virtual WorkPtr batch_p2p(const std::vector<P2POp>& ops) = 0;
  virtual WorkPtr barrier() = 0;

  WorkPtr send(const Tensor& t, int peer, int tag = 0);
  WorkPtr recv(const Tensor& t, int peer, int tag = 0);

  /// Keeps non-blocking operations progressing while this process computes, for as long as the
  /// returned token lives (MPI: a background thread that enters MPI's progress engine; the
  /// self and NCCL communicators progress on their own and return nullptr).
  virtual std::shared_ptr<void> background_progress() { return nullptr; }

  /// True after an operation timed out or failed; the communicator then refuses new work.
  bool failed() const { return !failure_.empty(); }

  /// Stops the communicator without the other ranks (ptdp_runtime_abort): later calls and waits
  /// fail fast with Error(InvalidState), operations in flight are abandoned, and destruction
  /// frees nothing that would need the peers (MPI: the communicator is not freed; NCCL:
  /// ncclCommAbort). Safe from another thread while one waits (MPI, self); idempotent.
  virtual void abort() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(); }

  /// This communicator's index in the flight recorder's group table.
  int flight_group() const { return flight_group_; }

 protected:
  /// Starts the bookkeeping of one operation: checks the communicator is usable and returns
  /// the operation's sequence number.
  uint64_t begin(const char* op);
  /// Records an operation in the flight recorder; returns its id for flight_end().
  uint64_t flight_start(uint64_t seq, const FlightOp& op) const;
  static void flight_end(uint64_t id, FlightState state) { FlightRecorder::instance().end(id, state); }
  /// The flight record of a collective on `t`.
  static FlightOp flight_collective(const char* op, const Tensor& t, const char* reduction = "", int root = -1);
  /// The flight record of a p2p batch (peers as world ranks).
  FlightOp flight_p2p(const std::vector<P2POp>& ops) const;
  /// The message of a wait that ends because the communicator was aborted.
  std::string aborted_message(const std::string& what) const;
  /// "all_reduce(sum, 1024 x f32) #17 on tensor group [2, 3] (size 2) at world rank 3".
  std::string describe(const std::string& op, uint64_t seq) const;
  void mark_failed(const std::string& why) { failure_ = why; }
  std::chrono::steady_clock::time_point deadline() const;

  /// What every rank contributes to the consistency check of a collective (CommSettings::verify).
  struct Signature {
    int64_t op;  ///< one of the kSig* codes
    DType dtype;
    int64_t count;
    int64_t extra;  ///< reduction or root
  };
  enum : int64_t { kSigAllReduce = 1, kSigReduceScatter, kSigAllGather, kSigBroadcast };
  /// Packs (v, -v) per field, so one MAX all-reduce over the group yields each field's max and min.
  static void pack_signature(const Signature& mine, int64_t packed[8]);
  /// Throws InvalidArgument on every rank alike when the reduced signature shows that the ranks
  /// disagree on the operation, dtype, element count or root.
  void check_signature(const std::string& what, uint64_t seq, const Signature& mine,
                       const int64_t reduced[8]) const;

  // Shared argument checks (throw InvalidArgument naming the argument).
  void check_tensor(const Tensor& t, const char* what) const;
  void check_peer(int peer, const char* what) const;
  static void check_tag(int tag);
  void check_reduce(const Tensor& t, ReduceOp op) const;
  void check_chunks(const Tensor& big, const Tensor& chunk, const char* op) const;

 private:
  std::string name_;
  int rank_;
  int size_;
  std::vector<int> world_ranks_;
  CommSettings settings_;
  uint64_t seq_ = 0;
  std::string failure_;
  std::atomic<bool> aborted_{false};
  int flight_group_ = -1;
};

/// A Work that is already complete (self communicator, empty operations).
class DoneWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

/// The world of one: every collective is a local copy.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(CommSettings settings, std::string name = "world [0]");
  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override;
  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  WorkPtr all_gather(const Tensor& in, const Tensor& out) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override;
  WorkPtr barrier() override;
};

/// "[0, 1, 2]".
std::string format_ranks(const std::vector<int>& ranks);
/// "2 s", "0.5 s".
std::string format_seconds(double seconds);

/// Largest point-to-point tag (MPI guarantees at least this much).
inline constexpr int kMaxTag = 32767;

}  // namespace ptdp
