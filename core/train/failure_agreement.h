// Whether the ranks of a training run agree on a failure. Every failure that ends a training
// loop's build or run is one of two kinds:
//  - every rank's: each rank throws it, because they voted on it (agree_on_failure, the
//    checkpoint writer's own votes) or ran the same check on the same numbers (the layout's
//    flags, the skipped-iterations budget, the non-finite checks); the ranks leave together and
//    MPI is finalised as usual;
//  - this rank's alone (a peer that timed out on it, a file that could not be read here, a
//    fault injected on it): the other ranks may wait forever in a collective it will never join,
//    so MPI is left unfinalised at exit and the launcher ends the job.
// A FailureAgreement::Watch spans a phase (the build, a run); a FailureAgreement::Agreed spans
// each stretch of it whose failures are every rank's. A failure that leaves the watch without
// having left an Agreed stretch is this rank's alone.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "core/parallel/groups.h"

namespace ptdp {

class FailureAgreement {
 public:
  /// For a world of `world_size` ranks (with one rank, every failure is everyone's) whose
  /// communication times out after `timeout_s`.
  FailureAgreement(int world_size, int world_rank, double timeout_s)
      : world_size_(world_size), world_rank_(world_rank), timeout_s_(timeout_s) {}
  FailureAgreement(const FailureAgreement&) = delete;
  FailureAgreement& operator=(const FailureAgreement&) = delete;

  /// A stretch whose failures every rank shares: an exception that leaves it is marked agreed.
  class Agreed {
   public:
    explicit Agreed(FailureAgreement& agreement)
        : agreement_(agreement), unwinding_(std::uncaught_exceptions()) {}
    ~Agreed() {
      if (std::uncaught_exceptions() > unwinding_) agreement_.agreed_ = true;
    }
    Agreed(const Agreed&) = delete;
    Agreed& operator=(const Agreed&) = delete;

   private:
    FailureAgreement& agreement_;
    int unwinding_;
  };

  /// A phase of the loop (its build, a run). When an exception leaves it that no Agreed stretch
  /// marked, this rank failed alone: MPI is left unfinalised (abandon_mpi_finalize).
  class Watch {
   public:
    explicit Watch(FailureAgreement& agreement)
        : agreement_(agreement), unwinding_(std::uncaught_exceptions()) {
      agreement_.agreed_ = false;
    }
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    FailureAgreement& agreement_;
    int unwinding_;
  };

  /// Runs `body` on every rank of `groups`' world and agrees on its outcome (agree_on_failure):
  /// a failure on any rank becomes every rank's, the lowest failing rank's error. Collective.
  void vote(ProcessGroups& groups, const std::function<void()>& body);

  /// Ends the run with a failure every rank reaches alike (the same check on the same agreed
  /// numbers): throws RunStopped(exit_status, message), marked agreed.
  [[noreturn]] void stop_run(int exit_status, const std::string& message);

  /// After a communication timed out on this rank, with PTDP_FLIGHT_RECORDER_DIR set: waits one
  /// deadline before returning, so that the ranks stuck behind this one write their flight
  /// records before its exit ends the job (flight_linger_after_timeout). At once with one rank.
  void linger_after_timeout() const noexcept;

 private:
  int world_size_, world_rank_;
  double timeout_s_;
  bool agreed_ = false;  // the exception leaving the watch left an Agreed stretch
};

}  // namespace ptdp
