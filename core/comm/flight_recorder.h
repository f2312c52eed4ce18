// Flight recorder: every rank keeps a ring of its last communication operations (collectives
// and point-to-point batches, on every communicator of the process: MPI, NCCL and self), so that
// after a hang each rank can say what it was doing and an analyzer can compare the ranks.
//
// The ring has a fixed number of slots, allocated once (PTDP_FLIGHT_RECORDER_ENTRIES, default
// 4096; 0 turns recording off); recording an operation copies a few numbers into the next slot
// under a mutex and allocates nothing. Each entry names its group (by an index into a table of
// the communicators this process created, which never shrinks), the operation, dtype, element
// count and bytes, the p2p peers as world ranks, the communicator's sequence number (the `#N`
// of timeout messages), the group's collective count, start and end wall-clock times, and a state.
//
// The ring is written as JSON (one file per rank, flight-rank00003.json) on request
// (ptdp_flight_recorder_dump) and, when PTDP_FLIGHT_RECORDER_DIR is set, into that directory
// whenever a wait times out. core/comm/flight_analyzer.h reads those files.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ptdp {

enum class FlightState : int { Started = 0, Completed = 1, TimedOut = 2, Failed = 3, Aborted = 4 };
const char* flight_state_name(FlightState s);

/// Default number of ring slots; PTDP_FLIGHT_RECORDER_ENTRIES overrides it.
inline constexpr int kDefaultFlightEntries = 4096;
/// Point-to-point transfers of one batch kept per entry (the rest are counted only).
inline constexpr int kFlightMaxPeers = 4;

/// What a communicator tells the recorder about an operation as it starts.
struct FlightOp {
  const char* op = "";         ///< all_reduce, reduce_scatter, all_gather, broadcast, batch_p2p, barrier
  const char* reduction = "";  ///< sum, avg, max, min; "" where none
  int dtype = -1;              ///< DType code; -1 where none (barrier, mixed p2p)
  int64_t count = 0;           ///< elements (for a p2p batch: of all its transfers)
  int64_t bytes = 0;
  int root = -1;               ///< broadcast root, group rank
  bool collective = true;
  int npeers = 0;              ///< p2p transfers in the batch
  int peers[kFlightMaxPeers] = {};       ///< world ranks
  bool peer_is_recv[kFlightMaxPeers] = {};
};

struct FlightEntry {
  uint64_t id = 0;        ///< 1-based order of recording on this process; 0: empty slot
  int group = -1;         ///< index into the group table
  uint64_t seq = 0;       ///< the communicator's sequence number
  uint64_t coll_seq = 0;  ///< n-th collective on the communicator; 0 for p2p batches
  char op[16] = {};
  char reduction[4] = {};
  int dtype = -1;
  int64_t count = 0;
  int64_t bytes = 0;
  int root = -1;
  int npeers = 0;
  int peers[kFlightMaxPeers] = {};
  bool peer_is_recv[kFlightMaxPeers] = {};
  double start_s = 0;  ///< wall clock, seconds since the Unix epoch
  double end_s = 0;    ///< 0 while not ended
  FlightState state = FlightState::Started;
};

struct FlightGroup {
  std::string name;          ///< "tensor group [2, 3]"
  int instance = 0;          ///< n-th communicator of that name on this process (0-based)
  std::vector<int> ranks;    ///< world ranks in group-rank order
  double timeout_s = 0;      ///< the communicator's deadline
  uint64_t last_seq = 0;     ///< sequence number of the last operation started
  uint64_t last_coll_seq = 0;
  uint64_t completed_coll_seq = 0;  ///< highest collective count that completed
};

class FlightRecorder {
 public:
  /// The process's recorder (one per rank).
  static FlightRecorder& instance();

  /// Slots in the ring; 0 when recording is off.
  int capacity();
  /// Re-sizes the ring and clears it (tests; the ring is otherwise sized once from the environment).
  void reset(int capacity);

  /// This process's place in the world, written into the dump (set by the runtime).
  void set_world(int rank, int size);

  /// Registers a communicator; returns its group index.
  int add_group(const std::string& name, const std::vector<int>& world_ranks, double timeout_s = 0);
  /// Records the start of an operation; returns its id (0 when recording is off).
  uint64_t start(int group, uint64_t seq, const FlightOp& op);
  /// Ends an operation (no-op when its slot has been reused since).
  void end(uint64_t id, FlightState state);

  /// The ring (oldest first), the group table and this process's place as JSON.
  std::string to_json();
  /// Writes to_json() to `path` (throws Error(Io) naming the path).
  void dump(const std::string& path);
  /// "flight-rank00003.json".
  static std::string file_name(int rank);
  /// When PTDP_FLIGHT_RECORDER_DIR is set: writes DIR/flight-rankNNNNN.json and returns its path;
  /// "" when the variable is unset; never throws (a failure to write is returned as
  /// "(could not write ...: why)").
  std::string dump_if_configured() noexcept;

 private:
  FlightRecorder() = default;
  void ensure_ring();  // requires mutex_

  std::mutex mutex_;
  bool sized_ = false;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 1;
  std::vector<FlightGroup> groups_;
  int world_rank_ = 0, world_size_ = 1;
};

/// After this rank's wait timed out, when PTDP_FLIGHT_RECORDER_DIR is set: waits `seconds`
/// (one deadline) before returning, saying so on stderr, so that ranks stuck behind this one
/// reach their own deadlines and write their records before this rank's exit makes the launcher
/// end the job. Returns at once when the variable is unset.
void flight_linger_after_timeout(int world_rank, double seconds) noexcept;

/// The ring size from PTDP_FLIGHT_RECORDER_ENTRIES (a non-negative integer), else the default.
/// Throws Error(InvalidArgument) when the variable holds something else.
int flight_entries_from_env();

}  // namespace ptdp
