#include "core/comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "core/comm/runtime.h"

namespace ptdp {

namespace {

std::atomic<int> g_leaked{0};

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;  // moved as bits; reductions are staged through f32
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }

// Waits between polls, by time since the wait began: yield for the first millisecond (fast
// completions keep microsecond latency), then sleep 50 us, and 1 ms once the wait is long, so
// oversubscribed ranks leave the cores to the peers they are waiting for.
class Backoff {
 public:
  void pause() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    if (waited < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else if (waited < std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// One posted operation: its requests, the tensors that must outlive them, and what to do once
// they complete. An error is remembered, so waiting again reports it again.
class MpiWork final : public Work {
 public:
  // `flight`: the flight-recorder entry this work ends; a consistency check (`check_only`) ends
  // it only when it times out or is aborted, since the operation itself follows.
  MpiWork(MpiCommunicator& owner, std::string what, MpiCommunicator::Pending pending, uint64_t flight = 0,
          bool check_only = false)
      : owner_(owner), what_(std::move(what)), pending_(std::move(pending)), flight_(flight), check_only_(check_only) {}

  ~MpiWork() override {
    if (!done_ && !pending_.requests.empty()) owner_.adopt(std::move(pending_));
  }

  bool test() override {
    if (failed_) throw_error(error_code_, error_);
    if (done_) return true;
    try {
      if (!test_requests()) return false;
    } catch (const Error& e) {
      done_ = failed_ = true;
      error_code_ = e.code();
      error_ = e.what();
      if (!check_only_) FlightRecorder::instance().end(flight_, FlightState::Failed);
      throw;
    }
    if (!check_only_) FlightRecorder::instance().end(flight_, FlightState::Completed);
    return true;
  }

  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    struct Account {  // counts the blocked time however the wait ends
      std::chrono::steady_clock::time_point t0;
      ~Account() { add_comm_wait_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()); }
    } account{start};
    const auto deadline = owner_.work_deadline();
    Backoff backoff;
    while (!test()) {
      if (owner_.aborted()) give_up(ErrorCode::InvalidState, FlightState::Aborted, owner_.abort_text(what_));
      owner_.progress_orphans();
      if (std::chrono::steady_clock::now() > deadline) {
        std::string why = what_ + ": timed out after " + format_seconds(owner_.settings().timeout_s) +
                          " waiting for the other ranks of the group";
        owner_.fail(why);
        FlightRecorder::instance().end(flight_, FlightState::TimedOut);
        const std::string dumped = FlightRecorder::instance().dump_if_configured();
        if (!dumped.empty()) why += "; flight record: " + dumped;
        give_up(ErrorCode::Timeout, FlightState::TimedOut, why);
      }
      backoff.pause();
    }
  }

 private:
  // Abandons the operation (its requests go to the communicator's orphans) and throws.
  [[noreturn]] void give_up(ErrorCode code, FlightState state, const std::string& why) {
    FlightRecorder::instance().end(flight_, state);
    owner_.adopt(std::move(pending_));
    pending_.requests.clear();
    done_ = failed_ = true;
    error_code_ = code;
    error_ = why;
    throw_error(code, why);
  }

  bool test_requests() {
    std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
    int flag = 0;
    std::vector<MPI_Status> statuses(pending_.requests.size());
    const int rc = MPI_Testall(static_cast<int>(pending_.requests.size()), pending_.requests.data(),
                               &flag, statuses.data());
    if (rc != MPI_SUCCESS) {
      std::string detail;
      for (const MPI_Status& st : statuses) {
        if (st.MPI_ERROR == MPI_ERR_TRUNCATE) detail = ": a message was longer than the receive buffer";
      }
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      throw_error(ErrorCode::Communication, what_ + " failed: " + std::string(msg, len) + detail);
    }
    if (!flag) return false;
    done_ = true;
    if (pending_.finish) pending_.finish(statuses);
    return true;
  }

  MpiCommunicator& owner_;
  std::string what_;
  MpiCommunicator::Pending pending_;
  uint64_t flight_ = 0;
  bool check_only_ = false;
  bool done_ = false;
  bool failed_ = false;
  ErrorCode error_code_ = ErrorCode::Internal;
  std::string error_;
};

}  // namespace

void mpi_check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_error(ErrorCode::Communication, what + ": " + std::string(msg, len));
}

int mpi_leaked_operations() { return g_leaked.load(); }

std::recursive_mutex& mpi_call_mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {

// The progress thread: enters MPI's progress engine (MPI_Iprobe on MPI_COMM_SELF matches
// nothing and drives every pending request) until the last token goes.
class ProgressThread {
 public:
  ProgressThread() : thread_([this] { run(); }) {}
  ~ProgressThread() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void run() {
    while (!stop_.load()) {
      {
        std::unique_lock<std::recursive_mutex> lock(mpi_call_mutex(), std::try_to_lock);
        if (lock.owns_lock()) {
          int finalized = 0;
          MPI_Finalized(&finalized);
          if (finalized) return;
          int flag = 0;
          MPI_Status status;
          MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, &status);
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::shared_ptr<void> MpiCommunicator::background_progress() {
  int level = MPI_THREAD_SINGLE;
  {
    std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
    mpi_check(MPI_Query_thread(&level), "MPI_Query_thread");
  }
  if (level < MPI_THREAD_SERIALIZED) return nullptr;
  static std::mutex m;
  static std::weak_ptr<ProgressThread> current;
  std::lock_guard<std::mutex> lock(m);
  std::shared_ptr<ProgressThread> thread = current.lock();
  if (!thread) {
    thread = std::make_shared<ProgressThread>();
    current = thread;
  }
  return thread;
}

namespace {
int comm_rank(MPI_Comm c) {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  int r = 0;
  mpi_check(MPI_Comm_rank(c, &r), "MPI_Comm_rank");
  return r;
}
int comm_size(MPI_Comm c) {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  int n = 0;
  mpi_check(MPI_Comm_size(c, &n), "MPI_Comm_size");
  return n;
}
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, std::vector<int> world_ranks,
                                 CommSettings settings)
    : Communicator(std::move(name), comm_rank(comm), comm_size(comm), std::move(world_ranks), settings),
      comm_(comm) {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const int left = pending_orphans();
  if (left > 0) {
    g_leaked.fetch_add(left);
    // MPI may still write into the buffers of operations that never completed (a late peer can
    // complete them): they are kept, deliberately leaked, rather than freed under MPI's feet.
    static auto* graveyard = new std::vector<Pending>();
    for (Pending& p : orphans_) graveyard->push_back(std::move(p));
    orphans_.clear();
  }
  // An aborted communicator is left to MPI (not freed), knowingly: its peers may never complete
  // what is pending on it, and nothing here may wait for them.
  if (aborted()) {
    if (left > 0) abandon_mpi_finalize();
    return;
  }
  MPI_Comm_free(&comm_);  // deferred by MPI until pending operations complete
}

void MpiCommunicator::adopt(Pending&& p) {
  if (!p.requests.empty()) orphans_.push_back(std::move(p));
}

int MpiCommunicator::pending_orphans() {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  int left = 0;
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    int flag = 0;
    std::vector<MPI_Status> statuses(it->requests.size());
    const int rc = MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &flag,
                               statuses.data());
    if (rc == MPI_SUCCESS && flag && it->finish) {
      // Nobody waits for this operation any more: finish it, and keep errors to ourselves.
      try {
        it->finish(statuses);
      } catch (...) {
      }
    }
    if (rc != MPI_SUCCESS || flag) {
      it = orphans_.erase(it);
    } else {
      ++left;
      ++it;
    }
  }
  return left;
}

int MpiCommunicator::checked_count(int64_t n, const char* what) const {
  PTDP_CHECK_ARG(n <= INT_MAX, std::string(what) + " has " + std::to_string(n) +
                                   " elements, more than one MPI message can carry (" +
                                   std::to_string(INT_MAX) + "); split it");
  return static_cast<int>(n);
}

namespace {

// Host memory MPI reads and writes for `t`: the tensor itself on the CPU; for device memory a
// host copy (filled from the device when `fill`), since ptdp does not assume a CUDA-aware MPI.
// Several ranks sharing one GPU use this path (NCCL refuses two ranks on one device).
Tensor host_side(const Tensor& t, bool fill) {
  if (t.device().type == DeviceType::CPU) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  if (fill) t.copy_to_host(h.raw(), h.nbytes());
  return h;
}

// Copies a staged host buffer back to its device tensor (no-op when they are the same).
void to_device(const Tensor& host, const Tensor& t) {
  if (host.raw() != t.raw()) t.backend().copy_from_host(t.raw(), host.raw(), host.nbytes());
}

}  // namespace

void MpiCommunicator::verify(const std::string& what, uint64_t seq, const Signature& mine) {
  if (!settings().verify || size() == 1) return;
  int64_t buf[8];
  pack_signature(mine, buf);
  MPI_Request req;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, 8, MPI_INT64_T, MPI_MAX, comm_, &req), describe(what, seq));
  Pending p;
  p.requests.push_back(req);
  MpiWork(*this, describe(what, seq) + " (consistency check)", std::move(p), verifying_flight_, true).wait();
  check_signature(what, seq, mine, buf);
}

void MpiCommunicator::verify_recorded(const std::string& what, uint64_t seq, const Signature& mine, uint64_t flight) {
  verifying_flight_ = flight;
  try {
    verify(what, seq, mine);
    verifying_flight_ = 0;
  } catch (const Error& e) {
    verifying_flight_ = 0;
    // A timeout has recorded its own state; a disagreement or an MPI error ends the entry here.
    flight_end(flight, e.code() == ErrorCode::InvalidState ? FlightState::Aborted : FlightState::Failed);
    throw;
  }
}

WorkPtr MpiCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "tensor");
  check_reduce(t, op);
  const int count = checked_count(t.numel(), "tensor");
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const uint64_t seq = begin("all_reduce");
  progress_orphans();
  const std::string what = describe(std::string("all_reduce(") + reduce_op_name(op) + ", " + t.str() + ")", seq);
  const uint64_t flight = flight_start(seq, flight_collective("all_reduce", t, reduce_op_name(op)));
  verify_recorded("all_reduce", seq, {kSigAllReduce, t.dtype(), t.numel(), static_cast<int64_t>(op)}, flight);
  Pending p;
  Tensor buf = is_half(t.dtype()) ? t.to(DType::F32) : t;
  Tensor host = host_side(buf, true);
  p.keep_alive = {t, buf, host};
  MPI_Request req;
  posted(flight, MPI_Iallreduce(MPI_IN_PLACE, host.raw(), count, mpi_type(host.dtype()), mpi_op(op), comm_, &req), what);
  p.requests.push_back(req);
  const int n = size();
  p.finish = [t, buf, host, op, n](const std::vector<MPI_Status>&) {
    if (op == ReduceOp::Avg) host.backend().scale(host.data<float>(), 1.0f / static_cast<float>(n), host.numel());
    to_device(host, buf);
    if (buf.raw() != t.raw()) buf.backend().cast(buf.raw(), DType::F32, t.raw(), t.dtype(), t.numel());
  };
  return std::make_unique<MpiWork>(*this, what, std::move(p), flight);
}

WorkPtr MpiCommunicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_tensor(in, "in");
  check_tensor(out, "out");
  check_reduce(in, op);
  check_chunks(in, out, "reduce_scatter");
  checked_count(in.numel(), "in");
  const int count = checked_count(out.numel(), "out");
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const uint64_t seq = begin("reduce_scatter");
  progress_orphans();
  const std::string what = describe(std::string("reduce_scatter(") + reduce_op_name(op) + ", " + in.str() + ")", seq);
  const uint64_t flight = flight_start(seq, flight_collective("reduce_scatter", in, reduce_op_name(op)));
  verify_recorded("reduce_scatter", seq, {kSigReduceScatter, in.dtype(), in.numel(), static_cast<int64_t>(op)}, flight);
  const bool stage = is_half(in.dtype());
  Tensor src = stage ? in.to(DType::F32) : in;
  Tensor dst = stage ? Tensor::empty(out.shape(), DType::F32, out.device()) : out;
  Tensor hsrc = host_side(src, true), hdst = host_side(dst, false);
  // In place (out is this rank's chunk of in): MPI_IN_PLACE leaves the result at the start of
  // the buffer; finish moves it to this rank's chunk.
  const bool in_place =
      hdst.raw() == static_cast<char*>(hsrc.raw()) + static_cast<std::size_t>(rank()) * hdst.nbytes();
  Pending p;
  p.keep_alive = {in, out, src, dst, hsrc, hdst};
  MPI_Request req;
  posted(flight, MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : hsrc.raw(), in_place ? hsrc.raw() : hdst.raw(), count,
                                      mpi_type(src.dtype()), mpi_op(op), comm_, &req),
            what);
  p.requests.push_back(req);
  const int n = size();
  p.finish = [out, dst, hsrc, hdst, op, n, in_place](const std::vector<MPI_Status>&) {
    if (in_place && hdst.raw() != hsrc.raw()) std::memmove(hdst.raw(), hsrc.raw(), hdst.nbytes());
    if (op == ReduceOp::Avg) hdst.backend().scale(hdst.data<float>(), 1.0f / static_cast<float>(n), hdst.numel());
    to_device(hdst, dst);
    if (dst.raw() != out.raw()) dst.backend().cast(dst.raw(), DType::F32, out.raw(), out.dtype(), out.numel());
  };
  return std::make_unique<MpiWork>(*this, what, std::move(p), flight);
}

WorkPtr MpiCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  check_tensor(in, "in");
  check_tensor(out, "out");
  check_chunks(out, in, "all_gather");
  checked_count(out.numel(), "out");
  const int count = checked_count(in.numel(), "in");
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const uint64_t seq = begin("all_gather");
  progress_orphans();
  const std::string what = describe("all_gather(" + in.str() + ")", seq);
  const uint64_t flight = flight_start(seq, flight_collective("all_gather", in));
  verify_recorded("all_gather", seq, {kSigAllGather, in.dtype(), in.numel(), 0}, flight);
  Tensor hin = host_side(in, true), hout = host_side(out, false);
  Pending p;
  p.keep_alive = {in, out, hin, hout};
  MPI_Request req;
  const MPI_Datatype type = mpi_type(in.dtype());
  // In place (in is this rank's chunk of out): MPI takes this rank's part from out itself.
  const bool in_place =
      hin.raw() == static_cast<char*>(hout.raw()) + static_cast<std::size_t>(rank()) * hin.nbytes();
  if (in_place) posted(flight, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hout.raw(), count, type, comm_, &req), what);
  else posted(flight, MPI_Iallgather(hin.raw(), count, type, hout.raw(), count, type, comm_, &req), what);
  p.requests.push_back(req);
  if (hout.raw() != out.raw()) p.finish = [out, hout](const std::vector<MPI_Status>&) { to_device(hout, out); };
  return std::make_unique<MpiWork>(*this, what, std::move(p), flight);
}

WorkPtr MpiCommunicator::broadcast(const Tensor& t, int root) {
  check_tensor(t, "tensor");
  check_peer(root, "root");
  const int count = checked_count(t.numel(), "tensor");
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const uint64_t seq = begin("broadcast");
  progress_orphans();
  const std::string what = describe("broadcast(" + t.str() + ", root " + std::to_string(root) + ")", seq);
  const uint64_t flight = flight_start(seq, flight_collective("broadcast", t, "", root));
  verify_recorded("broadcast", seq, {kSigBroadcast, t.dtype(), t.numel(), root}, flight);
  Tensor host = host_side(t, rank() == root);
  Pending p;
  p.keep_alive = {t, host};
  MPI_Request req;
  posted(flight, MPI_Ibcast(host.raw(), count, mpi_type(t.dtype()), root, comm_, &req), what);
  p.requests.push_back(req);
  if (host.raw() != t.raw()) p.finish = [t, host](const std::vector<MPI_Status>&) { to_device(host, t); };
  return std::make_unique<MpiWork>(*this, what, std::move(p), flight);
}

WorkPtr MpiCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  for (const P2POp& op : ops) {
    check_tensor(op.tensor, "p2p tensor");
    check_peer(op.peer, "peer");
    check_tag(op.tag);
    checked_count(op.tensor.numel(), "p2p tensor");
  }
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const uint64_t seq = begin("batch_p2p");
  progress_orphans();
  std::string summary;
  for (const P2POp& op : ops) {
    summary += (summary.empty() ? "" : ", ") + std::string(op.kind == P2POp::Kind::Send ? "send " : "recv ") +
               op.tensor.str() + (op.kind == P2POp::Kind::Send ? " to " : " from ") +
               std::to_string(op.peer);
  }
  const std::string what = describe("batch_p2p(" + summary + ")", seq);
  const uint64_t flight = flight_start(seq, flight_p2p(ops));
  Pending p;
  // Receives first, then sends: all are non-blocking, so the order only helps MPI match early.
  std::vector<const P2POp*> recvs;
  std::vector<std::pair<Tensor, Tensor>> staged_recvs;  // (host buffer, device tensor)
  for (int pass = 0; pass < 2; ++pass) {
    for (const P2POp& op : ops) {
      const bool is_recv = op.kind == P2POp::Kind::Recv;
      if (is_recv != (pass == 0)) continue;
      MPI_Request req;
      const int count = static_cast<int>(op.tensor.numel());
      const MPI_Datatype type = mpi_type(op.tensor.dtype());
      const Tensor host = host_side(op.tensor, !is_recv);
      if (is_recv) {
        posted(flight, MPI_Irecv(host.raw(), count, type, op.peer, op.tag, comm_, &req), what);
        recvs.push_back(&op);
        staged_recvs.emplace_back(host, op.tensor);
      } else {
        posted(flight, MPI_Isend(host.raw(), count, type, op.peer, op.tag, comm_, &req), what);
      }
      p.requests.push_back(req);
      p.keep_alive.push_back(op.tensor);
      p.keep_alive.push_back(host);
    }
  }
  // Receives were posted first, so statuses[i] belongs to recvs[i]. A message shorter than
  // its buffer is reported, not silently accepted.
  struct Expect {
    MPI_Datatype type;
    int64_t count;
    std::string desc;
  };
  std::vector<Expect> expect;
  for (const P2POp* r : recvs) {
    expect.push_back({mpi_type(r->tensor.dtype()), r->tensor.numel(),
                      r->tensor.str() + " from peer " + std::to_string(r->peer)});
  }
  p.finish = [expect, what, staged_recvs](const std::vector<MPI_Status>& statuses) {
    for (const auto& [host, device] : staged_recvs) to_device(host, device);
    for (std::size_t i = 0; i < expect.size(); ++i) {
      MPI_Status st = statuses[i];
      int got = 0;
      MPI_Get_count(&st, expect[i].type, &got);
      if (got != expect[i].count) {
        throw_error(ErrorCode::InvalidArgument,
                    what + ": received " + std::to_string(got) + " elements for " + expect[i].desc +
                        " (sender and receiver disagree on the size)");
      }
    }
  };
  return std::make_unique<MpiWork>(*this, what, std::move(p), flight);
}

WorkPtr MpiCommunicator::barrier() {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  const uint64_t seq = begin("barrier");
  progress_orphans();
  const std::string what = describe("barrier", seq);
  FlightOp fb;
  fb.op = "barrier";
  const uint64_t flight = flight_start(seq, fb);
  Pending p;
  MPI_Request req;
  posted(flight, MPI_Ibarrier(comm_, &req), what);
  p.requests.push_back(req);
  return std::make_unique<MpiWork>(*this, what, std::move(p), flight);
}

}  // namespace ptdp
