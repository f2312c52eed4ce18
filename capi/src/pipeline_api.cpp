// Running a pipeline schedule on a user's own model chunks through callbacks.
#include <string>

#include "capi/src/handles.h"
#include "capi/src/pipeline_run.h"
#include "core/pipeline/executor.h"

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

// A callback's failure travels through the executor as an exception that keeps its status.
struct CallbackFailure {
  ptdp_status status;
  std::string message;
};

class CallbackStages final : public ptdp::PipelineStages {
 public:
  CallbackStages(const ptdp_stage_callbacks& cb, ptdp::Shape shape) : cb_(cb), shape_(shape) {}

  ptdp::Shape input_shape(int, int) override { return shape_; }

  ptdp::Tensor forward(int chunk, int mb, const ptdp::Tensor& input) override {
    ptdp_tensor in = input.defined() ? ptdp::capi::wrap_tensor(input) : nullptr;
    ptdp_tensor out = nullptr;
    const ptdp_status st = cb_.forward(cb_.user_data, chunk, mb, in, &out);
    if (in) ptdp_tensor_destroy(in);
    return result(st, "forward", chunk, mb, out);
  }

  ptdp::Tensor backward_input(int chunk, int mb, const ptdp::Tensor& grad) override {
    ptdp_tensor g = grad.defined() ? ptdp::capi::wrap_tensor(grad) : nullptr;
    ptdp_tensor out = nullptr;
    const ptdp_status st = cb_.backward_input(cb_.user_data, chunk, mb, g, &out);
    if (g) ptdp_tensor_destroy(g);
    return result(st, "backward_input", chunk, mb, out);
  }

  void backward_weight(int chunk, int mb) override {
    if (!cb_.backward_weight) return;  // computed in backward_input
    const ptdp_status st = cb_.backward_weight(cb_.user_data, chunk, mb);
    if (st != PTDP_SUCCESS) fail(st, "backward_weight", chunk, mb);
  }

 private:
  [[noreturn]] void fail(ptdp_status st, const char* what, int chunk, int mb) {
    throw CallbackFailure{st, std::string("the ") + what + " callback of chunk " + std::to_string(chunk) +
                                  ", microbatch " + std::to_string(mb) + " returned '" + ptdp_status_string(st) +
                                  "': " + ptdp_last_error()};
  }

  ptdp::Tensor result(ptdp_status st, const char* what, int chunk, int mb, ptdp_tensor out) {
    if (st != PTDP_SUCCESS) {
      if (out) ptdp_tensor_destroy(out);
      fail(st, what, chunk, mb);
    }
    if (!out) return ptdp::Tensor();
    ptdp::Tensor t = live(out, "callback output").tensor;
    ptdp_tensor_destroy(out);
    PTDP_CHECK_ARG(t.dtype() == ptdp::DType::F32 && t.numel() == shape_.numel(),
                   std::string("the ") + what + " callback of chunk " + std::to_string(chunk) + ", microbatch " +
                       std::to_string(mb) + " returned " + t.str() + ", want f32 " + shape_.str());
    return t;
  }

  const ptdp_stage_callbacks& cb_;
  ptdp::Shape shape_;
};

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_stage_callbacks_init(ptdp_stage_callbacks* callbacks) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(callbacks, "callbacks");
  });
}

PTDP_API ptdp_status ptdp_pipeline_run(ptdp_groups groups, ptdp_schedule schedule, const ptdp_stage_callbacks* callbacks,
                                       const ptdp_pipeline_options* options) {
  ptdp_status callback_status = PTDP_SUCCESS;
  std::string callback_message;
  const ptdp_status st = guard(__func__, [&] {
    ptdp_groups_impl& g = live(groups, "groups");
    const ptdp::Schedule& s = live(schedule, "schedule").schedule;
    require_non_null(callbacks, "callbacks");
    ptdp_stage_callbacks defaults;
    ptdp_stage_callbacks_init(&defaults);
    const ptdp_stage_callbacks cb = ptdp::capi::read_options(callbacks, defaults,
                                                             "callbacks", "ptdp_stage_callbacks_init");
    require_non_null(reinterpret_cast<const void*>(cb.forward), "callbacks->forward");
    require_non_null(reinterpret_cast<const void*>(cb.backward_input), "callbacks->backward_input");
    const ptdp::Shape shape = ptdp::Shape::from(cb.activation_shape, cb.activation_ndim, "callbacks->activation_shape");
    PTDP_CHECK_ARG(shape.numel() > 0, "callbacks->activation_shape " + shape.str() + " has no elements");
    const ptdp::Layout& layout = g.groups->layout();
    PTDP_CHECK_ARG(s.p == layout.pipeline(), "the schedule is for p = " + std::to_string(s.p) +
                                                 "; the groups have pipeline size " + std::to_string(layout.pipeline()));
    if (!cb.backward_weight) {
      for (const auto& actions : s.ranks)
        for (const ptdp::Action& a : actions)
          PTDP_CHECK_ARG(a.kind != ptdp::ActionKind::BackwardWeight && a.kind != ptdp::ActionKind::BackwardInput,
                         "the schedule splits backward into input and weight gradients; set callbacks->backward_weight");
    }
    const ptdp::capi::PipelineRun run(options);
    PTDP_CHECK_ARG(!run.has_masks(),
                   "options->masks is set, but the stages of ptdp_pipeline_run are the caller's "
                   "callbacks, which read their own inputs");
    CallbackStages stages(cb, shape);
    ptdp::Communicator* pipe = s.p > 1 ? &g.groups->comm(ptdp::GroupKind::Pipeline) : nullptr;
    try {
      ptdp::run_schedule(s, g.groups->rank(ptdp::GroupKind::Pipeline), stages, pipe, ptdp::capi::tensor_parallel(g),
                         run.executor());
    } catch (const CallbackFailure& f) {
      callback_status = f.status;
      callback_message = f.message;
      return;
    }
    run.finish(g);
  });
  if (st == PTDP_SUCCESS && callback_status != PTDP_SUCCESS) {
    return ptdp::capi::set_last_error(callback_status, __func__, callback_message.c_str());
  }
  return st;
}

}  // extern "C"
