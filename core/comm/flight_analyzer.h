// Reads every rank's flight record (flight-rank*.json, written by FlightRecorder) and says where
// the ranks diverge: which rank the others wait for, in which operation on which group.
//
// Each operation still in flight on a rank (started or timed out, never completed) is a wait:
// a collective waits for the members of its group that never started that collective (their
// count of collectives on the group is lower) or that wrote no record; a p2p batch waits for its
// peers. Following the waits from rank to rank ends at the root causes: ranks that are not in
// any communication at all (hung in compute, or skipped the operation) or wrote no record
// (died). So a cascade (rank 3 hangs before a tensor-group all_reduce; rank 2 waits there; rank 0
// times out first, in a pipeline receive from rank 2) still names rank 3. Ranks that disagree on
// a collective (operation, dtype, element count, reduction or root at the same position on the
// same group) are reported too. When every rank joined the operation they wait in, a rank whose
// own deadline fired far later than it should have (it did not run: stopped, swapped out,
// starved) is named as stalled.
#pragma once

#include <string>
#include <vector>

namespace ptdp {

struct FlightFinding {
  enum class Kind { NeverReached, NoRecord, Mismatch, Cycle, Stalled };
  Kind kind = Kind::NeverReached;
  int rank = -1;           ///< the rank at fault
  std::string group;       ///< "tensor group [2, 3]"
  std::string op;          ///< "all_reduce"
  unsigned long long seq = 0;  ///< the waiting rank's sequence number of that operation
  std::vector<int> waiting;    ///< ranks stuck on it
  std::string text;        ///< one sentence
};

struct FlightAnalysis {
  int world_size = 0;
  std::vector<int> ranks_read;    ///< ranks with a record
  std::vector<int> ranks_missing; ///< ranks in [0, world_size) without one
  std::vector<FlightFinding> findings;
  int culprit = -1;               ///< the rank to look at first; -1 when the records agree
  std::string report;             ///< human-readable, several lines
};

/// Analyses the records of `dir` (throws Error(Io) when it has none or one is not valid JSON).
FlightAnalysis analyze_flight_records(const std::string& dir);
/// Analyses records given as JSON texts (one per rank), for tests and in-memory use.
FlightAnalysis analyze_flight_texts(const std::vector<std::string>& texts);

}  // namespace ptdp
