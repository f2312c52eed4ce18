#include "core/comm/flight_recorder.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json_text.h"

namespace ptdp {

const char* flight_state_name(FlightState s) {
  switch (s) {
    case FlightState::Started: return "started";
    case FlightState::Completed: return "completed";
    case FlightState::TimedOut: return "timed_out";
    case FlightState::Failed: return "failed";
    case FlightState::Aborted: return "aborted";
  }
  return "?";
}

int flight_entries_from_env() {
  const char* v = std::getenv("PTDP_FLIGHT_RECORDER_ENTRIES");
  if (v == nullptr || *v == '\0') return kDefaultFlightEntries;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  PTDP_CHECK_ARG(errno == 0 && end != v && *end == '\0' && n >= 0 && n <= (1L << 24),
                 std::string("PTDP_FLIGHT_RECORDER_ENTRIES = '") + v +
                     "' is not a number of entries in [0, 16777216]");
  return static_cast<int>(n);
}

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void copy_name(char* dst, std::size_t cap, const char* src) {
  std::size_t n = src ? std::strlen(src) : 0;
  if (n >= cap) n = cap - 1;
  if (n) std::memcpy(dst, src, n);
  dst[n] = '\0';
}

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder* r = new FlightRecorder();  // never destroyed: used from atexit paths too
  return *r;
}

void FlightRecorder::ensure_ring() {
  if (sized_) return;
  sized_ = true;
  int n = kDefaultFlightEntries;
  try {
    n = flight_entries_from_env();
  } catch (const Error& e) {
    std::fprintf(stderr, "ptdp: %s; using %d\n", e.what(), kDefaultFlightEntries);
  }
  ring_.assign(static_cast<std::size_t>(n), FlightEntry{});
}

int FlightRecorder::capacity() {
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_ring();
  return static_cast<int>(ring_.size());
}

void FlightRecorder::reset(int capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  PTDP_CHECK_ARG(capacity >= 0, "flight recorder capacity " + std::to_string(capacity) + " is negative");
  sized_ = true;
  ring_.assign(static_cast<std::size_t>(capacity), FlightEntry{});
  next_id_ = 1;
  groups_.clear();
}

void FlightRecorder::set_world(int rank, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  world_rank_ = rank;
  world_size_ = size;
}

int FlightRecorder::add_group(const std::string& name, const std::vector<int>& world_ranks, double timeout_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  FlightGroup g;
  g.name = name;
  for (const FlightGroup& other : groups_) {
    if (other.name == name) ++g.instance;
  }
  g.ranks = world_ranks;
  g.timeout_s = timeout_s;
  groups_.push_back(std::move(g));
  return static_cast<int>(groups_.size()) - 1;
}

uint64_t FlightRecorder::start(int group, uint64_t seq, const FlightOp& op) {
  const double now = wall_now();
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_ring();
  if (group < 0 || group >= static_cast<int>(groups_.size())) return 0;
  FlightGroup& g = groups_[static_cast<std::size_t>(group)];
  g.last_seq = seq;
  if (op.collective) ++g.last_coll_seq;
  if (ring_.empty()) return 0;
  const uint64_t id = next_id_++;
  FlightEntry& e = ring_[static_cast<std::size_t>((id - 1) % ring_.size())];
  e = FlightEntry{};
  e.id = id;
  e.group = group;
  e.seq = seq;
  e.coll_seq = op.collective ? g.last_coll_seq : 0;
  copy_name(e.op, sizeof e.op, op.op);
  copy_name(e.reduction, sizeof e.reduction, op.reduction);
  e.dtype = op.dtype;
  e.count = op.count;
  e.bytes = op.bytes;
  e.root = op.root;
  e.npeers = op.npeers;
  for (int i = 0; i < kFlightMaxPeers && i < op.npeers; ++i) {
    e.peers[i] = op.peers[i];
    e.peer_is_recv[i] = op.peer_is_recv[i];
  }
  e.start_s = now;
  e.state = FlightState::Started;
  return id;
}

void FlightRecorder::end(uint64_t id, FlightState state) {
  if (id == 0) return;
  const double now = wall_now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (ring_.empty()) return;
  FlightEntry& e = ring_[static_cast<std::size_t>((id - 1) % ring_.size())];
  if (e.id != id || e.state != FlightState::Started) return;
  e.state = state;
  e.end_s = now;
  if (state == FlightState::Completed && e.coll_seq > 0 && e.group >= 0 &&
      e.group < static_cast<int>(groups_.size())) {
    FlightGroup& g = groups_[static_cast<std::size_t>(e.group)];
    if (e.coll_seq > g.completed_coll_seq) g.completed_coll_seq = e.coll_seq;
  }
}

std::string FlightRecorder::to_json() {
  using nlohmann::json;
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_ring();
  json j;
  j["format"] = "ptdp-flight-recorder";
  j["version"] = 1;
  j["rank"] = world_rank_;
  j["world_size"] = world_size_;
  j["capacity"] = ring_.size();
  j["recorded"] = next_id_ - 1;
  j["dumped_at"] = wall_now();
  json groups = json::array();
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    const FlightGroup& g = groups_[i];
    groups.push_back({{"index", i},
                      {"name", g.name},
                      {"instance", g.instance},
                      {"ranks", g.ranks},
                      {"timeout_s", g.timeout_s},
                      {"last_seq", g.last_seq},
                      {"last_collective", g.last_coll_seq},
                      {"completed_collective", g.completed_coll_seq}});
  }
  j["groups"] = std::move(groups);
  json entries = json::array();
  const uint64_t n = ring_.size();
  const uint64_t first = next_id_ > n ? next_id_ - n : 1;
  for (uint64_t id = first; id < next_id_; ++id) {
    const FlightEntry& e = ring_[static_cast<std::size_t>((id - 1) % n)];
    if (e.id != id) continue;
    json peers = json::array();
    for (int i = 0; i < e.npeers && i < kFlightMaxPeers; ++i) {
      peers.push_back({{"rank", e.peers[i]}, {"dir", e.peer_is_recv[i] ? "recv" : "send"}});
    }
    json je = {{"id", e.id},
               {"group", e.group},
               {"seq", e.seq},
               {"collective", e.coll_seq},
               {"op", e.op},
               {"reduction", e.reduction},
               {"dtype", e.dtype},
               {"count", e.count},
               {"bytes", e.bytes},
               {"root", e.root},
               {"transfers", e.npeers},
               {"peers", std::move(peers)},
               {"start", e.start_s},
               {"end", e.end_s},
               {"state", flight_state_name(e.state)}};
    entries.push_back(std::move(je));
  }
  j["entries"] = std::move(entries);
  return json_text(j, 1);
}

void FlightRecorder::dump(const std::string& path) {
  const std::string text = to_json();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw_io_error(path, std::string("cannot open for writing: ") + std::strerror(errno));
    f << text << '\n';
    f.flush();
    if (!f) throw_io_error(path, "write failed");
  }
  // Rename, so the analyzer never reads half a file.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw_io_error(path, "cannot rename the temporary file into place: " + why);
  }
}

void flight_linger_after_timeout(int world_rank, double seconds) noexcept {
  const char* dir = std::getenv("PTDP_FLIGHT_RECORDER_DIR");
  if (dir == nullptr || *dir == '\0' || !(seconds > 0)) return;
  std::fprintf(stderr,
               "ptdp: rank %d: a communication timed out; waiting %g s before leaving so that the other ranks "
               "write their flight records to %s\n",
               world_rank, seconds, dir);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

std::string FlightRecorder::file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "flight-rank%05d.json", rank);
  return buf;
}

std::string FlightRecorder::dump_if_configured() noexcept {
  const char* dir = std::getenv("PTDP_FLIGHT_RECORDER_DIR");
  if (dir == nullptr || *dir == '\0') return "";
  std::string path;
  try {
    int rank = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      rank = world_rank_;
    }
    path = std::string(dir) + "/" + file_name(rank);
    dump(path);
    return path;
  } catch (const std::exception& e) {
    return std::string("(could not write the flight record: ") + e.what() + ")";
  } catch (...) {
    return "(could not write the flight record)";
  }
}

}  // namespace ptdp
