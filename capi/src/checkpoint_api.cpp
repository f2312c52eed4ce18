// Checkpoints through the C API.
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/checkpoint/checkpoint.h"

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

// The optimizer handle's core object, checked to belong to `model`.
ptdp::Optimizer* optimizer_of(ptdp_optimizer optimizer, const ptdp_model_impl& model) {
  if (optimizer == nullptr) return nullptr;
  ptdp_optimizer_impl& o = live(optimizer, "optimizer");
  PTDP_CHECK_ARG(o.model == &model, "optimizer was not created for this model");
  return o.opt.get();
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_checkpoint_state_init(ptdp_checkpoint_state* state) {
  return guard(__func__, [&] { ptdp::capi::reset_options(state, "state"); });
}

PTDP_API ptdp_status ptdp_checkpoint_save(const char* directory, ptdp_model model, ptdp_optimizer optimizer,
                                          ptdp_train_config config, const ptdp_checkpoint_state* state) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    ptdp_model_impl& m = live(model, "model");
    ptdp::Optimizer* opt = optimizer_of(optimizer, m);
    require_non_null(state, "state");
    ptdp_checkpoint_state defaults;
    ptdp_checkpoint_state_init(&defaults);
    const ptdp_checkpoint_state st = ptdp::capi::read_options(state, defaults, "state", "ptdp_checkpoint_state_init");
    ptdp::capi::require_non_negative(st.iteration, "state->iteration");
    ptdp::capi::require_non_negative(st.consumed_train_samples, "state->consumed_train_samples");
    ptdp::capi::require_non_negative(st.consumed_valid_samples, "state->consumed_valid_samples");
    nlohmann::json train;
    if (config != nullptr) train = ptdp::train_args_to_json(live(config, "config").args);
    ptdp::CheckpointState s;
    s.iteration = st.iteration;
    s.consumed_train_samples = st.consumed_train_samples;
    s.consumed_valid_samples = st.consumed_valid_samples;
    ptdp::save_checkpoint(directory, *m.model, opt, config ? &train : nullptr, s);
  });
}

PTDP_API ptdp_status ptdp_checkpoint_load(const char* directory, ptdp_model model, ptdp_optimizer optimizer,
                                          ptdp_checkpoint_state* state) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    ptdp_model_impl& m = live(model, "model");
    ptdp::Optimizer* opt = optimizer_of(optimizer, m);
    const ptdp::CheckpointState s = ptdp::load_checkpoint(directory, *m.model, opt);
    if (state != nullptr) {
      ptdp_checkpoint_state_init(state);
      state->iteration = s.iteration;
      state->consumed_train_samples = s.consumed_train_samples;
      state->consumed_valid_samples = s.consumed_valid_samples;
    }
  });
}

PTDP_API ptdp_status ptdp_checkpoint_read_options(const char* directory, ptdp_gpt_options* options, int64_t* iteration) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    require_non_null(options, "options");
    int64_t it = 0;
    const ptdp::GptConfig c = ptdp::read_checkpoint_config(directory, &it);
    ptdp::capi::gpt_options(c, options);
    if (iteration != nullptr) *iteration = it;
  });
}

}  // extern "C"
