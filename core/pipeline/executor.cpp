#include "core/pipeline/executor.h"

#include <chrono>
#include <string>
#include <vector>

#include "base/error.h"

namespace ptdp {

namespace {

using Key = std::pair<int, int>;  // (microbatch, chunk)
using Clock = std::chrono::steady_clock;

constexpr int kActivationTag = 0;
constexpr int kGradientTag = 1;

Tensor take(std::map<Key, Tensor>& m, Key k, const Action& a, const char* what) {
  auto it = m.find(k);
  if (it == m.end()) {
    throw_error(ErrorCode::InvalidState, a.str() + ": its " + std::string(what) + " (microbatch " +
                                             std::to_string(k.first) + ", chunk " + std::to_string(k.second) +
                                             ") is not available; the schedule is inconsistent");
  }
  Tensor t = it->second;
  m.erase(it);
  return t;
}

class Runner {
 public:
  Runner(const Schedule& s, int rank, PipelineStages& stages, Communicator* pipeline, const TensorParallel& tp,
         const ExecutorOptions& o)
      : s_(s), rank_(rank), stages_(stages), pipeline_(pipeline), tp_(tp), o_(o) {}

  void run() {
    const auto& actions = s_.ranks.at(static_cast<std::size_t>(rank_));
    std::size_t i = 0;
    while (i < actions.size()) {
      if (is_communication(actions[i].kind)) {
        std::size_t j = i;
        while (j < actions.size() && is_communication(actions[j].kind)) ++j;
        communicate(actions, i, j);
        i = j;
      } else {
        compute(actions[i++]);
      }
    }
    if (!outputs_.empty() || !input_grads_.empty() || !inputs_.empty() || !output_grads_.empty()) {
      throw_error(ErrorCode::InvalidState, "rank " + std::to_string(rank_) + " finished its schedule with " +
                                               std::to_string(outputs_.size() + input_grads_.size()) +
                                               " tensors never sent and " +
                                               std::to_string(inputs_.size() + output_grads_.size()) +
                                               " received tensors never used");
    }
  }

 private:
  int last_chunk() const { return s_.num_chunks() - 1; }
  bool local(int chunk) const { return s_.rank_of_chunk(chunk) == rank_; }

  void compute(const Action& a) {
    const auto start = Clock::now();
    const Key k{a.microbatch, a.chunk};
    switch (a.kind) {
      case ActionKind::Forward: {
        Tensor input;
        if (a.chunk > 0) {
          input = local(a.chunk - 1) ? take(outputs_, {a.microbatch, a.chunk - 1}, a, "input")
                                     : take(inputs_, k, a, "received input");
        }
        Tensor out = stages_.forward(a.chunk, a.microbatch, input);
        if (a.chunk < last_chunk()) outputs_[k] = out;
        break;
      }
      case ActionKind::Backward:
      case ActionKind::BackwardInput: {
        Tensor grad;
        if (a.chunk < last_chunk()) {
          grad = local(a.chunk + 1) ? take(input_grads_, {a.microbatch, a.chunk + 1}, a, "output gradient")
                                    : take(output_grads_, k, a, "received output gradient");
        }
        Tensor dx = stages_.backward_input(a.chunk, a.microbatch, grad);
        if (a.kind == ActionKind::Backward) stages_.backward_weight(a.chunk, a.microbatch);
        if (a.chunk > 0) input_grads_[k] = dx;
        break;
      }
      case ActionKind::BackwardWeight: stages_.backward_weight(a.chunk, a.microbatch); break;
      default: break;
    }
    if (o_.trace) {
      o_.trace->add(a.str(), "compute", start, Clock::now(), 0);
    }
  }

  // Scatter/gather applies when every tensor rank holds the same boundary tensor and it splits.
  bool sliced(int64_t numel) const { return o_.scatter_gather && tp_.size > 1 && numel % tp_.size == 0; }

  Tensor my_slice(const Tensor& full) const {
    const int64_t n = full.numel() / tp_.size;
    return full.reshape({full.numel()}).view(n * tp_.rank, {n});
  }

  void communicate(const std::vector<Action>& actions, std::size_t begin, std::size_t end) {
    const auto start = Clock::now();
    PTDP_CHECK_ARG(pipeline_ != nullptr, "the schedule communicates but there is no pipeline communicator");
    std::vector<P2POp> ops;
    struct Arrival {
      Key key;
      bool gradient;
      Tensor buffer, full;  // buffer receives; full is the gathered tensor (same when not sliced)
    };
    std::vector<Arrival> arrivals;
    std::vector<Key> sent_outputs, sent_grads;
    std::string label;
    for (std::size_t i = begin; i < end; ++i) {
      const Action& a = actions[i];
      const Key k{a.microbatch, a.chunk};
      if (!label.empty()) label += ", ";
      label += a.str();
      switch (a.kind) {
        case ActionKind::SendActivation:
        case ActionKind::SendGradient: {
          const bool grad = a.kind == ActionKind::SendGradient;
          auto& from = grad ? input_grads_ : outputs_;
          auto it = from.find(k);
          if (it == from.end()) {
            throw_error(ErrorCode::InvalidState, a.str() + ": nothing computed to send; the schedule is inconsistent");
          }
          const Tensor& t = it->second;
          ops.push_back({P2POp::Kind::Send, sliced(t.numel()) ? my_slice(t) : t, a.peer,
                         grad ? kGradientTag : kActivationTag});
          (grad ? sent_grads : sent_outputs).push_back(k);
          break;
        }
        case ActionKind::RecvActivation:
        case ActionKind::RecvGradient: {
          const bool grad = a.kind == ActionKind::RecvGradient;
          // A gradient of chunk c's output has the shape of chunk c + 1's input.
          const Shape shape = stages_.input_shape(grad ? a.chunk + 1 : a.chunk, a.microbatch);
          const DType type = stages_.activation_dtype();
          Tensor full = Tensor::empty(shape, type, stages_.device());
          Tensor buffer = sliced(full.numel()) ? Tensor::empty({full.numel() / tp_.size}, type, stages_.device()) : full;
          ops.push_back({P2POp::Kind::Recv, buffer, a.peer, grad ? kGradientTag : kActivationTag});
          arrivals.push_back({k, grad, buffer, full});
          break;
        }
        default: break;
      }
    }
    pipeline_->batch_p2p(ops)->wait();
    for (Arrival& r : arrivals) {
      if (r.buffer.raw() != r.full.raw()) tp_.all_gather(r.buffer, r.full.reshape({r.full.numel()}));
      (r.gradient ? output_grads_ : inputs_)[r.key] = r.full;
    }
    for (const Key& k : sent_outputs) outputs_.erase(k);
    for (const Key& k : sent_grads) input_grads_.erase(k);
    if (o_.trace) o_.trace->add(label, "communication", start, Clock::now(), 1);
  }

  const Schedule& s_;
  int rank_;
  PipelineStages& stages_;
  Communicator* pipeline_;
  const TensorParallel& tp_;
  const ExecutorOptions& o_;
  std::map<Key, Tensor> outputs_;       // forward outputs waiting to be sent or used locally
  std::map<Key, Tensor> input_grads_;   // input gradients waiting to be sent or used locally
  std::map<Key, Tensor> inputs_;        // received activations
  std::map<Key, Tensor> output_grads_;  // received gradients
};

}  // namespace

void run_schedule(const Schedule& schedule, int rank, PipelineStages& stages, Communicator* pipeline,
                  const TensorParallel& tp, const ExecutorOptions& options) {
  PTDP_CHECK_ARG(rank >= 0 && rank < schedule.p, "pipeline rank " + std::to_string(rank) + " is outside the " +
                                                     std::to_string(schedule.p) + " ranks of the schedule");
  PTDP_CHECK_ARG(static_cast<int>(schedule.ranks.size()) == schedule.p,
                 "the schedule lists " + std::to_string(schedule.ranks.size()) + " ranks, want p = " +
                     std::to_string(schedule.p));
  Runner(schedule, rank, stages, pipeline, tp, options).run();
}

}  // namespace ptdp
