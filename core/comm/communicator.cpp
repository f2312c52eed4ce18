#include "core/comm/communicator.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace ptdp {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

double comm_timeout_from_env() {
  const char* v = std::getenv("PTDP_COMM_TIMEOUT_S");
  if (v == nullptr || *v == '\0') return kDefaultCommTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(v, &end);
  PTDP_CHECK_ARG(errno == 0 && end != v && *end == '\0' && std::isfinite(s) && s > 0,
                 std::string("PTDP_COMM_TIMEOUT_S = '") + v + "' is not a positive number of seconds");
  return s;
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

namespace {
std::atomic<int64_t> g_wait_ns{0};
}

double comm_wait_seconds() { return static_cast<double>(g_wait_ns.load()) * 1e-9; }

void add_comm_wait_seconds(double seconds) { g_wait_ns.fetch_add(static_cast<int64_t>(seconds * 1e9)); }

std::string format_seconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", seconds);
  return buf;
}

void Communicator::check_tag(int tag) {
  PTDP_CHECK_ARG(tag >= 0 && tag <= kMaxTag,
                 "tag = " + std::to_string(tag) + " is outside [0, " + std::to_string(kMaxTag) + "]");
}

Communicator::Communicator(std::string name, int rank, int size, std::vector<int> world_ranks,
                           CommSettings settings)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      world_ranks_(std::move(world_ranks)),
      settings_(settings) {
  set_timeout(settings.timeout_s);
  flight_group_ = FlightRecorder::instance().add_group(name_, world_ranks_, settings_.timeout_s);
  if (settings_.abort_scope) {
    settings_.abort_scope->add(this);
    if (settings_.abort_scope->aborted()) aborted_.store(true);
  }
}

Communicator::~Communicator() {
  if (settings_.abort_scope) settings_.abort_scope->remove(this);
}

void CommAbortScope::abort() {
  aborted_.store(true);
  std::lock_guard<std::mutex> lock(mutex_);
  for (Communicator* c : members_) c->abort();
}

void CommAbortScope::add(Communicator* c) {
  std::lock_guard<std::mutex> lock(mutex_);
  members_.push_back(c);
}

void CommAbortScope::remove(Communicator* c) {
  std::lock_guard<std::mutex> lock(mutex_);
  members_.erase(std::remove(members_.begin(), members_.end(), c), members_.end());
}

uint64_t Communicator::flight_start(uint64_t seq, const FlightOp& op) const {
  return FlightRecorder::instance().start(flight_group_, seq, op);
}

FlightOp Communicator::flight_collective(const char* op, const Tensor& t, const char* reduction, int root) {
  FlightOp f;
  f.op = op;
  f.reduction = reduction;
  f.dtype = static_cast<int>(t.dtype());
  f.count = t.numel();
  f.bytes = static_cast<int64_t>(t.nbytes());
  f.root = root;
  return f;
}

FlightOp Communicator::flight_p2p(const std::vector<P2POp>& ops) const {
  FlightOp f;
  f.op = "batch_p2p";
  f.collective = false;
  f.npeers = static_cast<int>(ops.size());
  int dtype = ops.empty() ? -1 : static_cast<int>(ops.front().tensor.dtype());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& o = ops[i];
    f.count += o.tensor.numel();
    f.bytes += static_cast<int64_t>(o.tensor.nbytes());
    if (static_cast<int>(o.tensor.dtype()) != dtype) dtype = -1;
    if (i < static_cast<std::size_t>(kFlightMaxPeers)) {
      f.peers[i] = o.peer >= 0 && o.peer < size_ ? world_ranks_[static_cast<std::size_t>(o.peer)] : o.peer;
      f.peer_is_recv[i] = o.kind == P2POp::Kind::Recv;
    }
  }
  f.dtype = dtype;
  return f;
}

std::string Communicator::aborted_message(const std::string& what) const {
  return what + ": the communicator was aborted (ptdp_runtime_abort); the operation was abandoned";
}

void Communicator::set_timeout(double seconds) {
  PTDP_CHECK_ARG(std::isfinite(seconds) && seconds > 0,
                 "timeout must be a positive number of seconds, got " + std::to_string(seconds));
  settings_.timeout_s = seconds;
}

uint64_t Communicator::begin(const char* op) {
  if (aborted()) {
    throw_error(ErrorCode::InvalidState, std::string(op) + " on " + name_ +
                                             ": the communicator was aborted (ptdp_runtime_abort) and "
                                             "cannot be used again");
  }
  if (failed()) {
    throw_error(ErrorCode::InvalidState, std::string(op) + " on " + name_ +
                                             ": the communicator failed earlier and cannot be "
                                             "used again (" + failure_ + ")");
  }
  return ++seq_;
}

std::string Communicator::describe(const std::string& op, uint64_t seq) const {
  return op + " #" + std::to_string(seq) + " on " + name_ + " (size " + std::to_string(size_) +
         ") at world rank " + std::to_string(settings_.world_rank);
}

std::chrono::steady_clock::time_point Communicator::deadline() const {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(settings_.timeout_s));
}

namespace {

const char* signature_op_name(int64_t code) {
  switch (code) {
    case 1: return "all_reduce";
    case 2: return "reduce_scatter";
    case 3: return "all_gather";
    case 4: return "broadcast";
  }
  return "?";
}

// Field 3 is the reduction of all_reduce and reduce_scatter, the root of broadcast.
bool field3_is_reduction(int64_t op) { return op == 1 || op == 2; }

std::string signature_field(int field, int64_t v, int64_t op) {
  if (field == 0) return signature_op_name(v);
  if (field == 1) return dtype_valid(static_cast<int>(v)) ? dtype_name(static_cast<DType>(v)) : "?";
  if (field == 3 && field3_is_reduction(op) && v >= 0 && v <= 3) return reduce_op_name(static_cast<ReduceOp>(v));
  return std::to_string(v);
}

}  // namespace

void Communicator::pack_signature(const Signature& mine, int64_t packed[8]) {
  const int64_t fields[4] = {mine.op, static_cast<int64_t>(mine.dtype), mine.count, mine.extra};
  for (int i = 0; i < 4; ++i) {
    packed[2 * i] = fields[i];
    packed[2 * i + 1] = -fields[i];
  }
}

void Communicator::check_signature(const std::string& what, uint64_t seq, const Signature& mine,
                                   const int64_t reduced[8]) const {
  const int64_t fields[4] = {mine.op, static_cast<int64_t>(mine.dtype), mine.count, mine.extra};
  for (int i = 0; i < 4; ++i) {
    const int64_t hi = reduced[2 * i], lo = -reduced[2 * i + 1];
    if (hi == lo) continue;
    const std::string name = i == 0   ? "operation"
                             : i == 1 ? "dtype"
                             : i == 2 ? "element count"
                                      : (field3_is_reduction(mine.op) ? "reduction" : "root");
    throw_error(ErrorCode::InvalidArgument,
                describe(what, seq) + ": ranks disagree on the " + name + " (from " +
                    signature_field(i, lo, mine.op) + " to " + signature_field(i, hi, mine.op) +
                    "; this rank: " + signature_field(i, fields[i], mine.op) + ")");
  }
}

void Communicator::check_tensor(const Tensor& t, const char* what) const {
  PTDP_CHECK_ARG(t.defined(), std::string(what) + " is an undefined tensor");
}

void Communicator::check_peer(int peer, const char* what) const {
  PTDP_CHECK_ARG(peer >= 0 && peer < size_, std::string(what) + " = " + std::to_string(peer) +
                                                " is not a rank of " + name_ + " (size " +
                                                std::to_string(size_) + ")");
}

void Communicator::check_reduce(const Tensor& t, ReduceOp op) const {
  PTDP_CHECK_ARG(static_cast<int>(op) >= 0 && static_cast<int>(op) <= 3,
                 "op = " + std::to_string(static_cast<int>(op)) + " is not a reduction");
  PTDP_CHECK_ARG(op != ReduceOp::Avg || dtype_is_float(t.dtype()),
                 std::string("avg needs a floating tensor, got ") + dtype_name(t.dtype()));
}

void Communicator::check_chunks(const Tensor& big, const Tensor& chunk, const char* op) const {
  PTDP_CHECK_ARG(big.dtype() == chunk.dtype(),
                 std::string(op) + ": dtypes differ (" + dtype_name(big.dtype()) + " and " +
                     dtype_name(chunk.dtype()) + ")");
  PTDP_CHECK_ARG(big.numel() == chunk.numel() * size_,
                 std::string(op) + ": the gathered tensor has " + std::to_string(big.numel()) +
                     " elements, want group size " + std::to_string(size_) + " x " +
                     std::to_string(chunk.numel()));
  PTDP_CHECK_ARG(big.device() == chunk.device(), std::string(op) + ": tensors on different devices");
}

WorkPtr Communicator::send(const Tensor& t, int peer, int tag) {
  return batch_p2p({P2POp{P2POp::Kind::Send, t, peer, tag}});
}

WorkPtr Communicator::recv(const Tensor& t, int peer, int tag) {
  return batch_p2p({P2POp{P2POp::Kind::Recv, t, peer, tag}});
}

// ---- self --------------------------------------------------------------------------------

SelfCommunicator::SelfCommunicator(CommSettings settings, std::string name)
    : Communicator(std::move(name), 0, 1, {settings.world_rank}, settings) {}

WorkPtr SelfCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "tensor");
  check_reduce(t, op);
  const uint64_t seq = begin("all_reduce");
  flight_end(flight_start(seq, flight_collective("all_reduce", t, reduce_op_name(op))), FlightState::Completed);
  return std::make_unique<DoneWork>();  // one rank: sum, avg, max and min are the identity
}

WorkPtr SelfCommunicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_tensor(in, "in");
  check_tensor(out, "out");
  check_reduce(in, op);
  check_chunks(in, out, "reduce_scatter");
  const uint64_t seq = begin("reduce_scatter");
  flight_end(flight_start(seq, flight_collective("reduce_scatter", in, reduce_op_name(op))), FlightState::Completed);
  if (out.raw() != in.raw()) out.backend().copy(out.raw(), in.raw(), out.nbytes());
  return std::make_unique<DoneWork>();
}

WorkPtr SelfCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  check_tensor(in, "in");
  check_tensor(out, "out");
  check_chunks(out, in, "all_gather");
  const uint64_t seq = begin("all_gather");
  flight_end(flight_start(seq, flight_collective("all_gather", in)), FlightState::Completed);
  if (out.raw() != in.raw()) out.backend().copy(out.raw(), in.raw(), in.nbytes());
  return std::make_unique<DoneWork>();
}

WorkPtr SelfCommunicator::broadcast(const Tensor& t, int root) {
  check_tensor(t, "tensor");
  check_peer(root, "root");
  const uint64_t seq = begin("broadcast");
  flight_end(flight_start(seq, flight_collective("broadcast", t, "", root)), FlightState::Completed);
  return std::make_unique<DoneWork>();
}

WorkPtr SelfCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  // A send to oneself must meet a receive with the same tag in the same batch, in order.
  std::vector<const P2POp*> sends, recvs;
  for (const P2POp& op : ops) {
    check_tensor(op.tensor, "p2p tensor");
    check_peer(op.peer, "peer");
    check_tag(op.tag);
    (op.kind == P2POp::Kind::Send ? sends : recvs).push_back(&op);
  }
  // Pair every send with the first unused receive of the same tag; copy only once all match.
  std::vector<bool> used(recvs.size(), false);
  std::vector<std::pair<const P2POp*, const P2POp*>> pairs;
  for (const P2POp* s : sends) {
    const P2POp* match = nullptr;
    for (std::size_t i = 0; i < recvs.size() && !match; ++i) {
      if (used[i] || recvs[i]->tag != s->tag) continue;
      PTDP_CHECK_ARG(recvs[i]->tensor.nbytes() == s->tensor.nbytes(),
                     "send of " + s->tensor.str() + " to self meets a receive of " +
                         recvs[i]->tensor.str() + " (sizes differ)");
      used[i] = true;
      match = recvs[i];
    }
    PTDP_CHECK_ARG(match != nullptr, "send to self (tag " + std::to_string(s->tag) +
                                         ") has no matching receive in the same batch; it would "
                                         "never complete");
    pairs.emplace_back(s, match);
  }
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    PTDP_CHECK_ARG(used[i], "receive from self (tag " + std::to_string(recvs[i]->tag) +
                                ") has no matching send in the same batch; it would never complete");
  }
  const uint64_t seq = begin("batch_p2p");
  for (auto [s, r] : pairs) r->tensor.backend().copy(r->tensor.raw(), s->tensor.raw(), s->tensor.nbytes());
  flight_end(flight_start(seq, flight_p2p(ops)), FlightState::Completed);
  return std::make_unique<DoneWork>();
}

WorkPtr SelfCommunicator::barrier() {
  FlightOp f;
  f.op = "barrier";
  flight_end(flight_start(begin("barrier"), f), FlightState::Completed);
  return std::make_unique<DoneWork>();
}

}  // namespace ptdp
