// Per-rank spans of forward, backward and communication, written as one Chrome/Perfetto trace
// JSON for the whole job (chrome://tracing, ui.perfetto.dev).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ptdp {

class Communicator;

class TraceRecorder {
 public:
  TraceRecorder();
  /// Records a complete span; `track` 0 is compute, 1 is communication.
  void add(std::string name, std::string category, std::chrono::steady_clock::time_point start,
           std::chrono::steady_clock::time_point end, int track);
  std::size_t size() const { return events_.size(); }
  void clear() { events_.clear(); }

  /// This rank's events as JSON objects, comma-separated, with pid = `rank`.
  std::string events_json(int rank) const;
  /// Gathers every rank's events over `world` and rank 0 writes `path` (one trace, a process per
  /// rank). Collective over `world`. Throws Error(Io) naming the path when it cannot be written.
  void write_merged(Communicator& world, int world_rank, const std::string& path) const;

  /// One recorded span: `name` as the executor writes it, its action's Action::str() ("F mb3 c1",
  /// "Bi mb0 c2", "W mb0 c2", "B mb1 c0"; a communication batch lists its transfers, separated by
  /// ", "), microseconds since the recorder was made.
  struct Event {
    std::string name, category;
    double ts_us, dur_us;
    int track;
  };
  /// This rank's spans in recording order (what measure_chunk_costs() reads).
  const std::vector<Event>& events() const { return events_; }

 private:
  std::chrono::steady_clock::time_point origin_;
  std::vector<Event> events_;
};

}  // namespace ptdp
