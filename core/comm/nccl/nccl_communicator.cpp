#include "core/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace ptdp {

namespace {

void cuda_check(cudaError_t rc, const std::string& what) {
  if (rc != cudaSuccess) throw_error(ErrorCode::Device, what + ": " + cudaGetErrorString(rc));
}

/// Returns ncclSuccess or ncclInProgress (a non-blocking communicator still working); throws
/// on anything else.
ncclResult_t nccl_check(ncclResult_t rc, const std::string& what) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    throw_error(ErrorCode::Communication, what + ": " + ncclGetErrorString(rc));
  }
  return rc;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

class NcclCommunicator;

// Completes when its event has fired on the communicator's stream.
class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& owner, std::string what, cudaEvent_t done, std::vector<Tensor> keep, uint64_t flight)
      : owner_(owner), what_(std::move(what)), done_event_(done), keep_(std::move(keep)), flight_(flight) {}
  ~NcclWork() override;
  bool test() override;
  void wait() override;

 private:
  NcclCommunicator& owner_;
  std::string what_;
  cudaEvent_t done_event_;
  std::vector<Tensor> keep_;
  uint64_t flight_ = 0;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device, CommSettings settings)
      : Communicator("nccl " + bootstrap.name(), bootstrap.rank(), bootstrap.size(),
                     bootstrap.world_ranks(), settings),
        bootstrap_(bootstrap),
        device_(device) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
    ncclUniqueId id{};
    if (rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    // The id travels as 32-bit words over the bootstrap communicator, under its deadline.
    static_assert(sizeof(ncclUniqueId) % 4 == 0);
    Tensor words = Tensor::borrow(&id, {static_cast<int64_t>(sizeof id / 4)}, DType::I32);
    bootstrap_.broadcast(words, 0)->wait();
    // Non-blocking, so that a peer which dies after the id broadcast is a timeout here rather
    // than a ncclCommInitRank that never returns. Every call on the communicator may then
    // return ncclInProgress; settle() waits for it under the deadline before the next one.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const std::string init = "creating the NCCL communicator of " + name() + " on cuda:" +
                             std::to_string(device_) + " at world rank " +
                             std::to_string(settings.world_rank);
    try {
      nccl_check(ncclCommInitRankConfig(&comm_, size(), id, rank(), &config), init + ": ncclCommInitRankConfig");
      settle(init, deadline());
      cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
    } catch (...) {  // no destructor runs for a constructor that throws
      if (comm_ != nullptr) ncclCommAbort(comm_);
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      throw;
    }
  }

  ~NcclCommunicator() override {
    if (comm_ != nullptr && !failed() && !aborted()) {
      // Finalize drains the queued work (bounded by the deadline); destroy then frees it.
      try {
        if (nccl_check(ncclCommFinalize(comm_), "ncclCommFinalize") == ncclInProgress) {
          settle("finalising " + name(), deadline());
        }
        ncclCommDestroy(comm_);
        comm_ = nullptr;
      } catch (...) {  // settle() has aborted the communicator, or finalize failed
      }
    }
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override {
    check_device_tensor(t, "tensor");
    check_reduce(t, op);
    const uint64_t seq = begin("all_reduce");
    const std::string what = describe(std::string("all_reduce(") + reduce_op_name(op) + ", " + t.str() + ")", seq);
    const uint64_t flight = flight_start(seq, flight_collective("all_reduce", t, reduce_op_name(op)));
    verify(what, seq, {kSigAllReduce, t.dtype(), t.numel(), static_cast<int64_t>(op)}, flight);
    return launch(what, flight, {t}, [&] {
      return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                           nccl_op(op), comm_, stream_);
    });
  }

  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_device_tensor(in, "in");
    check_device_tensor(out, "out");
    check_reduce(in, op);
    check_chunks(in, out, "reduce_scatter");
    const uint64_t seq = begin("reduce_scatter");
    const std::string what = describe(std::string("reduce_scatter(") + reduce_op_name(op) + ", " + in.str() + ")", seq);
    const uint64_t flight = flight_start(seq, flight_collective("reduce_scatter", in, reduce_op_name(op)));
    verify(what, seq, {kSigReduceScatter, in.dtype(), in.numel(), static_cast<int64_t>(op)}, flight);
    return launch(what, flight, {in, out}, [&] {
      return ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()),
                               nccl_type(in.dtype()), nccl_op(op), comm_, stream_);
    });
  }

  WorkPtr all_gather(const Tensor& in, const Tensor& out) override {
    check_device_tensor(in, "in");
    check_device_tensor(out, "out");
    check_chunks(out, in, "all_gather");
    const uint64_t seq = begin("all_gather");
    const std::string what = describe("all_gather(" + in.str() + ")", seq);
    const uint64_t flight = flight_start(seq, flight_collective("all_gather", in));
    verify(what, seq, {kSigAllGather, in.dtype(), in.numel(), 0}, flight);
    return launch(what, flight, {in, out}, [&] {
      return ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                           comm_, stream_);
    });
  }

  WorkPtr broadcast(const Tensor& t, int root) override {
    check_device_tensor(t, "tensor");
    check_peer(root, "root");
    const uint64_t seq = begin("broadcast");
    const std::string what = describe("broadcast(" + t.str() + ", root " + std::to_string(root) + ")", seq);
    const uint64_t flight = flight_start(seq, flight_collective("broadcast", t, "", root));
    verify(what, seq, {kSigBroadcast, t.dtype(), t.numel(), root}, flight);
    return launch(what, flight, {t}, [&] {
      return ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                           comm_, stream_);
    });
  }

  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override {
    std::vector<Tensor> keep;
    for (const P2POp& op : ops) {
      check_device_tensor(op.tensor, "p2p tensor");
      check_peer(op.peer, "peer");
      check_tag(op.tag);
      keep.push_back(op.tensor);
    }
    const uint64_t seq = begin("batch_p2p");
    const std::string what = describe("batch_p2p(" + std::to_string(ops.size()) + " transfers)", seq);
    const uint64_t flight = flight_start(seq, flight_p2p(ops));
    // NCCL has no tags: transfers between two peers complete in the order both issue them,
    // which the pipeline schedules guarantee.
    return launch(what, flight, std::move(keep), [&] {
      ncclResult_t rc = ncclGroupStart();
      for (const P2POp& op : ops) {
        if (rc != ncclSuccess) break;
        const auto count = static_cast<size_t>(op.tensor.numel());
        rc = op.kind == P2POp::Kind::Send
                 ? ncclSend(op.tensor.raw(), count, nccl_type(op.tensor.dtype()), op.peer, comm_, stream_)
                 : ncclRecv(op.tensor.raw(), count, nccl_type(op.tensor.dtype()), op.peer, comm_, stream_);
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

  WorkPtr barrier() override {
    const uint64_t seq = begin("barrier");
    const std::string what = describe("barrier", seq);
    FlightOp fb;
    fb.op = "barrier";
    const uint64_t flight = flight_start(seq, fb);
    return launch(what, flight, {}, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

  // Used by NcclWork.
  void poll_async_error(const std::string& what) {
    if (aborted()) throw_error(ErrorCode::InvalidState, aborted_message(what));
    if (comm_ == nullptr) throw_error(ErrorCode::InvalidState, what + ": the NCCL communicator was aborted");
    ncclResult_t state = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &state), what + ": ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) {
      mark_failed(what + ": " + ncclGetErrorString(state));
      throw_error(ErrorCode::Communication, what + ": NCCL reported " + ncclGetErrorString(state));
    }
  }
  /// Waits until the communicator has finished its last call (state no longer ncclInProgress).
  /// An error is thrown as Communication; past `until` the communicator is aborted and
  /// Error(Timeout) names `what`.
  void settle(const std::string& what, std::chrono::steady_clock::time_point until) {
    int sleep_us = 10;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(comm_, &state), what + ": ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        const std::string why = what + ": NCCL reported " + ncclGetErrorString(state);
        mark_failed(why);
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw_error(ErrorCode::Communication, why);
      }
      if (std::chrono::steady_clock::now() > until) {
        const std::string why = what + ": timed out after " + format_seconds(settings().timeout_s) +
                                " (a peer never joined or stopped answering); the NCCL communicator was aborted";
        abort_after_timeout(why);
        throw_error(ErrorCode::Timeout, why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, 1000);
    }
  }

  /// ptdp_runtime_abort: ncclCommAbort releases kernels stuck on peers that will never come.
  /// Unlike the MPI communicator's, not safe while another thread uses this communicator.
  void abort() override {
    Communicator::abort();
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  void abort_after_timeout(const std::string& why) {
    mark_failed(why);
    ncclCommAbort(comm_);  // makes the stuck kernels return
    comm_ = nullptr;
  }
  std::chrono::steady_clock::time_point work_deadline() const { return deadline(); }
  int device() const { return device_; }

 private:
  void check_device_tensor(const Tensor& t, const char* what) const {
    check_tensor(t, what);
    PTDP_CHECK_ARG(t.device().type == DeviceType::CUDA && t.device().index == device_,
                   std::string(what) + " is " + t.str() + "; this NCCL communicator works on cuda:" +
                       std::to_string(device_) + " tensors");
  }

  void verify(const std::string& what, uint64_t seq, const Signature& mine, uint64_t flight) {
    if (!settings().verify || size() == 1) return;
    int64_t buf[8];
    pack_signature(mine, buf);
    try {
      bootstrap_.all_reduce(Tensor::borrow(buf, {8}, DType::I64), ReduceOp::Max)->wait();
      check_signature(what, seq, mine, buf);
    } catch (const Error& e) {
      flight_end(flight, e.code() == ErrorCode::Timeout ? FlightState::TimedOut : FlightState::Failed);
      throw;
    }
  }

  template <typename Enqueue>
  WorkPtr launch(const std::string& what, uint64_t flight, std::vector<Tensor> keep, Enqueue&& enqueue) {
    cuda_check(cudaSetDevice(device_), what + ": cudaSetDevice");
    // Order after the work already queued on the backend's compute stream (which produced the
    // tensors) and on the legacy default stream (callers' own kernels).
    cudaEvent_t ready = nullptr, done = nullptr;
    cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what + ": cudaEventCreate");
    cuda_check(cudaEventRecord(ready, compute_stream()), what + ": cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready, 0), what + ": cudaStreamWaitEvent");
    cuda_check(cudaEventRecord(ready, cudaStreamLegacy), what + ": cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready, 0), what + ": cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    // On a non-blocking communicator the kernels may be enqueued after the call returns
    // ncclInProgress: the done event is recorded only once they are on the stream.
    if (nccl_check(enqueue(), what) == ncclInProgress) settle(what, deadline());
    cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what + ": cudaEventCreate");
    cuda_check(cudaEventRecord(done, stream_), what + ": cudaEventRecord");
    return std::make_unique<NcclWork>(*this, what, done, std::move(keep), flight);
  }

 public:
  /// The CUDA backend's compute stream on this communicator's device.
  cudaStream_t compute_stream() const { return static_cast<cudaStream_t>(cuda::compute_stream(device_)); }

 private:
  Communicator& bootstrap_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
};

NcclWork::~NcclWork() {
  // Tensors must outlive the kernels reading them: wait (bounded) before releasing them.
  if (!done_) {
    try {
      wait();
    } catch (...) {
    }
  }
  cudaEventDestroy(done_event_);
}

bool NcclWork::test() {
  if (done_) return true;
  const cudaError_t rc = cudaEventQuery(done_event_);
  if (rc == cudaSuccess) {
    done_ = true;
    FlightRecorder::instance().end(flight_, FlightState::Completed);
    // Later compute on the backend's stream and the default stream sees the results without a
    // host round trip.
    cudaStreamWaitEvent(owner_.compute_stream(), done_event_, 0);
    cudaStreamWaitEvent(cudaStreamLegacy, done_event_, 0);
    return true;
  }
  try {
    if (rc != cudaErrorNotReady) cuda_check(rc, what_);
    owner_.poll_async_error(what_);
  } catch (const Error& e) {
    FlightRecorder::instance().end(flight_, e.code() == ErrorCode::InvalidState ? FlightState::Aborted : FlightState::Failed);
    throw;
  }
  return false;
}

void NcclWork::wait() {
  const auto start = std::chrono::steady_clock::now();
  struct Account {
    std::chrono::steady_clock::time_point t0;
    ~Account() { add_comm_wait_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()); }
  } account{start};
  const auto deadline = owner_.work_deadline();
  int sleep_us = 10;
  while (!test()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::string why = what_ + ": timed out after " + format_seconds(owner_.settings().timeout_s) +
                        "; the NCCL communicator was aborted";
      FlightRecorder::instance().end(flight_, FlightState::TimedOut);
      const std::string dumped = FlightRecorder::instance().dump_if_configured();
      if (!dumped.empty()) why += "; flight record: " + dumped;
      owner_.abort_after_timeout(why);
      done_ = true;  // the abort released the kernels; nothing is left to wait for
      throw_error(ErrorCode::Timeout, why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 1000);
  }
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     CommSettings settings) {
  return std::make_unique<NcclCommunicator>(bootstrap, device, settings);
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace ptdp
