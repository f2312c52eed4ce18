// Communicator over an MPI communicator, for CPU tensors (and host-staged device tensors).
// Operations are MPI's non-blocking ones; waits poll MPI_Testall against the deadline, so a
// rank that never arrives produces Error(Timeout), not a hang.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/comm/communicator.h"

namespace ptdp {

/// Throws Error(Communication) describing a failed MPI call.
void mpi_check(int rc, const std::string& what);

/// Held around every MPI call this file makes, so that the progress thread
/// (MpiCommunicator::background_progress) and the caller's thread never call into MPI at the
/// same time: what MPI_THREAD_SERIALIZED, the level ptdp asks for, requires.
std::recursive_mutex& mpi_call_mutex();

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (freed by the destructor) and sets MPI_ERRORS_RETURN on it.
  MpiCommunicator(MPI_Comm comm, std::string name, std::vector<int> world_ranks,
                  CommSettings settings);
  ~MpiCommunicator() override;

  MPI_Comm comm() const { return comm_; }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override;
  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  WorkPtr all_gather(const Tensor& in, const Tensor& out) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override;
  WorkPtr barrier() override;
  /// A thread that enters MPI's progress engine every 100 us (MPI_Iprobe, under
  /// mpi_call_mutex()) while any token lives: Open MPI's non-blocking collectives advance only
  /// inside MPI calls, so without it a reduction posted during the backward would wait for the
  /// next wait. One thread per process, shared by every token; nullptr when MPI was initialised
  /// below MPI_THREAD_SERIALIZED (then operations progress only inside ptdp's MPI calls).
  std::shared_ptr<void> background_progress() override;

  /// Operations abandoned by a timeout (or by dropping their Work) stay here, with the buffers
  /// MPI may still write, until they complete. Returns how many are still pending.
  int pending_orphans();

  // Used by MpiWork.
  struct Pending {
    std::vector<MPI_Request> requests;
    std::vector<Tensor> keep_alive;
    /// Runs once the requests complete (finish staging, divide for avg, check sizes); also for
    /// operations whose Work was dropped while in flight.
    std::function<void(const std::vector<MPI_Status>&)> finish;
  };
  void adopt(Pending&& p);
  /// Tests abandoned operations and finishes those that completed.
  void progress_orphans() { pending_orphans(); }
  void fail(const std::string& why) { mark_failed(why); }
  std::chrono::steady_clock::time_point work_deadline() const { return deadline(); }
  std::string abort_text(const std::string& what) const { return aborted_message(what); }

 private:
  /// The collective-consistency check (CommSettings::verify): every rank contributes its
  /// operation's signature; a disagreement throws InvalidArgument on every rank alike.
  void verify(const std::string& what, uint64_t seq, const Signature& mine);
  /// verify(), ending the operation's flight-recorder entry when the check fails.
  void verify_recorded(const std::string& what, uint64_t seq, const Signature& mine, uint64_t flight);
  int checked_count(int64_t n, const char* what) const;
  /// mpi_check() of a call that posts an operation, ending its flight-recorder entry on failure.
  static void posted(uint64_t flight, int rc, const std::string& what) {
    if (rc != MPI_SUCCESS) flight_end(flight, FlightState::Failed);
    mpi_check(rc, what);
  }

  MPI_Comm comm_;
  std::vector<Pending> orphans_;
  uint64_t verifying_flight_ = 0;  // the entry whose consistency check is in progress
};

/// Number of operations abandoned on communicators that no longer exist and still pending
/// (MPI_Finalize would wait for them forever, so the runtime skips it while this is > 0).
int mpi_leaked_operations();

}  // namespace ptdp
