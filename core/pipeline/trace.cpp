#include "core/pipeline/trace.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "core/comm/communicator.h"
#include "io/json_number.h"

namespace ptdp {

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

// A common origin for every rank: microseconds since the steady clock's epoch are comparable
// across the processes of one machine and close enough across machines for a timeline.
double since_epoch_us(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

TraceRecorder::TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}

void TraceRecorder::add(std::string name, std::string category, std::chrono::steady_clock::time_point start,
                        std::chrono::steady_clock::time_point end, int track) {
  events_.push_back(Event{std::move(name), std::move(category), since_epoch_us(start),
                          std::chrono::duration<double, std::micro>(end - start).count(), track});
}

std::string TraceRecorder::events_json(int rank) const {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n"
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"compute\"}},\n"
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": \"communication\"}}",
                rank, rank, rank, rank);
  out += buf;
  // Built as a string, not in a fixed buffer: a long name cannot truncate the JSON, and a time
  // that is not finite is null (json_number).
  for (const Event& e : events_) {
    out += ",\n{\"name\": \"";
    out += json_escape(e.name);
    out += "\", \"cat\": \"";
    out += json_escape(e.category);
    out += "\", \"ph\": \"X\", \"ts\": ";
    out += json_number(e.ts_us, "%.3f");
    out += ", \"dur\": ";
    out += json_number(e.dur_us, "%.3f");
    out += ", \"pid\": ";
    out += std::to_string(rank);
    out += ", \"tid\": ";
    out += std::to_string(e.track);
    out += "}";
  }
  return out;
}

void TraceRecorder::write_merged(Communicator& world, int world_rank, const std::string& path) const {
  const std::string mine = events_json(world_rank);
  const int n = world.size();
  // Every rank's length, then every rank's text padded to the longest (as 32-bit words).
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<std::size_t>(n));
  world.all_gather(Tensor::borrow(&len, {1}, DType::I64), Tensor::borrow(lens.data(), {n}, DType::I64))->wait();
  int64_t longest = 0;
  for (int64_t l : lens) longest = std::max(longest, l);
  const int64_t words = (longest + 3) / 4;
  std::vector<int32_t> send(static_cast<std::size_t>(words), 0), all(static_cast<std::size_t>(words * n), 0);
  std::memcpy(send.data(), mine.data(), mine.size());
  world.all_gather(Tensor::borrow(send.data(), {words}, DType::I32), Tensor::borrow(all.data(), {words * n}, DType::I32))
      ->wait();
  if (world_rank != 0) return;
  std::ofstream f(path);
  if (!f) throw_error(ErrorCode::Io, "cannot write the trace to '" + path + "'");
  f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (int r = 0; r < n; ++r) {
    if (r) f << ",\n";
    f.write(reinterpret_cast<const char*>(all.data() + r * words), lens[static_cast<std::size_t>(r)]);
  }
  f << "\n]}\n";
  if (!f) throw_error(ErrorCode::Io, "writing the trace to '" + path + "' failed");
}

}  // namespace ptdp
