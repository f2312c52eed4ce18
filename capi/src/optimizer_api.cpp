// The optimizer and training iterations through the C API.
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "capi/src/convert.h"
#include "capi/src/handles.h"
#include "core/train/trainer.h"


static_assert(PTDP_OPTIMIZER_ADAM == static_cast<int>(ptdp::OptimizerKind::Adam));
static_assert(PTDP_OPTIMIZER_SGD == static_cast<int>(ptdp::OptimizerKind::Sgd));
static_assert(PTDP_OPTIMIZER_MUON == static_cast<int>(ptdp::OptimizerKind::Muon));
static_assert(PTDP_MUON_SCALE_SPECTRAL == static_cast<int>(ptdp::MuonScaleMode::Spectral));
static_assert(PTDP_MUON_SCALE_UNIT_RMS_NORM == static_cast<int>(ptdp::MuonScaleMode::UnitRmsNorm));
static_assert(PTDP_MUON_SCALE_SHAPE_SCALING == static_cast<int>(ptdp::MuonScaleMode::ShapeScaling));
static_assert(PTDP_MUON_TP_DISTRIBUTED == static_cast<int>(ptdp::MuonTpMode::Distributed));
static_assert(PTDP_MUON_TP_DUPLICATED == static_cast<int>(ptdp::MuonTpMode::Duplicated));
static_assert(PTDP_MUON_TP_BLOCKWISE == static_cast<int>(ptdp::MuonTpMode::Blockwise));
static_assert(PTDP_NS_COEFFICIENTS_QUINTIC == static_cast<int>(ptdp::NsCoefficients::Quintic));
static_assert(PTDP_NS_COEFFICIENTS_SIMPLE == static_cast<int>(ptdp::NsCoefficients::Simple));
static_assert(PTDP_NS_COEFFICIENTS_POLAR_EXPRESS == static_cast<int>(ptdp::NsCoefficients::PolarExpress));
static_assert(PTDP_NS_COEFFICIENTS_AOL == static_cast<int>(ptdp::NsCoefficients::Aol));
static_assert(PTDP_NS_PRECISION_HIGHEST == static_cast<int>(ptdp::NsPrecision::Highest));
static_assert(PTDP_NS_PRECISION_HIGH == static_cast<int>(ptdp::NsPrecision::High));
static_assert(PTDP_NS_PRECISION_MEDIUM == static_cast<int>(ptdp::NsPrecision::Medium));
static_assert(PTDP_LR_CONSTANT == static_cast<int>(ptdp::LrDecayStyle::Constant));
static_assert(PTDP_LR_LINEAR == static_cast<int>(ptdp::LrDecayStyle::Linear));
static_assert(PTDP_LR_COSINE == static_cast<int>(ptdp::LrDecayStyle::Cosine));

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::optimizer_config;
using ptdp::capi::require_non_null;

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_optimizer_options_init(ptdp_optimizer_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    const ptdp::OptimizerConfig c;
    options->optimizer = PTDP_OPTIMIZER_ADAM;
    options->lr = c.lr.lr;
    options->min_lr = c.lr.min_lr;
    options->lr_decay_style = PTDP_LR_CONSTANT;
    options->lr_warmup_iters = 0;
    options->lr_decay_iters = 0;
    options->adam_beta1 = c.beta1;
    options->adam_beta2 = c.beta2;
    options->adam_eps = c.eps;
    options->weight_decay = c.weight_decay;
    options->sgd_momentum = c.momentum;
    options->clip_grad = c.clip_grad;
    options->dynamic_loss_scale = 0;
    options->initial_loss_scale = c.loss_scale.initial_scale;
    options->min_loss_scale = c.loss_scale.min_scale;
    options->loss_scale_window = c.loss_scale.growth_interval;
    options->hysteresis = c.loss_scale.hysteresis;
    options->use_distributed_optimizer = 0;
    options->ddp_bucket_size = 0;
    options->overlap_grad_reduce = 0;
    options->overlap_param_gather = 0;
    const ptdp::MuonConfig& m = c.muon;
    options->muon_momentum = m.momentum;
    options->muon_nesterov = m.nesterov ? 1 : 0;
    options->muon_num_ns_steps = m.ns_steps;
    options->muon_coefficient_type = static_cast<ptdp_ns_coefficients>(m.coefficients);
    options->muon_fp32_matmul_prec = static_cast<ptdp_ns_precision>(m.precision);
    options->muon_scale_mode = static_cast<ptdp_muon_scale_mode>(m.scale_mode);
    options->muon_extra_scale_factor = m.extra_scale_factor;
    options->muon_split_qkv = m.split_qkv ? 1 : 0;
    options->muon_tp_mode = static_cast<ptdp_muon_tp_mode>(m.tp_mode);
    options->qk_clip = m.qk_clip ? 1 : 0;
    options->qk_clip_threshold = m.qk_clip_threshold;
    options->qk_clip_alpha = m.qk_clip_alpha;
  });
}

PTDP_API ptdp_status ptdp_optimizer_create(ptdp_model model, const ptdp_optimizer_options* options,
                                           ptdp_optimizer* out) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    require_non_null(out, "out");
    const ptdp::OptimizerConfig c = optimizer_config(options);
    auto h = std::make_unique<ptdp_optimizer_impl>();
    h->groups = m.owner;
    h->model = &m;
    h->opt = ptdp::make_optimizer(*m.model, *m.owner->groups, c);
    ++m.dependents;
    ++m.owner->dependents;
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_optimizer_create_for_tensors(ptdp_groups groups, const ptdp_optimizer_options* options,
                                                       const ptdp_tensor* params, const ptdp_tensor* grads,
                                                       const int32_t* flags, int32_t count, ptdp_optimizer* out) {
  return guard(__func__, [&] {
    ptdp_groups_impl& g = live(groups, "groups");
    require_non_null(out, "out");
    PTDP_CHECK_ARG(count > 0, "count = " + std::to_string(count) + " is not > 0");
    require_non_null(params, "params");
    require_non_null(grads, "grads");
    ptdp::OptimizerConfig c = optimizer_config(options);
    std::set<const void*> seen;
    auto table = std::make_unique<ptdp::ParamTable>(0, 1);
    for (int32_t i = 0; i < count; ++i) {
      std::string at = "[";  // built piecewise: GCC 12 misreports "literal" + string as overlapping
      at += std::to_string(i);
      at += ']';
      const std::string pname = std::string("params") + at, gname = std::string("grads") + at;
      const ptdp::Tensor& p = live(params[i], pname.c_str()).tensor;
      const ptdp::Tensor& gr = live(grads[i], gname.c_str()).tensor;
      PTDP_CHECK_ARG(ptdp::dtype_is_float(p.dtype()) && p.device().type == ptdp::DeviceType::CPU,
                     pname + " is " + p.str() + ", want f32, bf16 or f16 on the CPU");
      PTDP_CHECK_ARG(i == 0 || p.dtype() == params[0]->tensor.dtype(),
                     pname + " is " + p.str() + "; every parameter must have the dtype of params[0] (" +
                         ptdp::dtype_name(params[0]->tensor.dtype()) + ")");
      PTDP_CHECK_ARG(gr.dtype() == ptdp::DType::F32 && gr.shape() == p.shape() && gr.device() == p.device(),
                     gname + " is " + gr.str() + ", want f32 (gradients accumulate in fp32) of the shape of " + pname +
                         " " + p.str());
      PTDP_CHECK_ARG(p.numel() > 0, pname + " " + p.str() + " is empty");
      const int32_t f = flags ? flags[i] : 0;
      PTDP_CHECK_ARG(f >= 0 && f <= (PTDP_PARAM_REPLICATED | PTDP_PARAM_NO_WEIGHT_DECAY),
                     std::string("flags") + at + " = " + std::to_string(f) + " is not a combination of ptdp_param_flags");
      PTDP_CHECK_ARG(seen.insert(params[i]).second && seen.insert(grads[i]).second,
                     pname + " or " + gname + " is registered twice");
      table->add("param." + std::to_string(i), {p.numel()}, (f & PTDP_PARAM_REPLICATED) ? -1 : 0, ptdp::ParamInit::Zeros,
                 0.0f, (f & PTDP_PARAM_NO_WEIGHT_DECAY) == 0);
    }
    // 16-bit parameters get fp32 master weights (the table's flat parameters) and a 16-bit model
    // copy that the handles view; the optimizer's step refreshes the copy.
    table->allocate(ptdp::Device{}, params[0]->tensor.dtype());
    // Move the values into the flat buffers before the optimizer, which may shard the fp32
    // masters over the data-parallel group.
    for (int32_t i = 0; i < count; ++i) {
      const ptdp::Tensor& p = params[i]->tensor;
      const ptdp::Tensor& gr = grads[i]->tensor;
      ptdp::Tensor pv = table->param(i), gv = table->grad(i), mv = table->weight(i);
      p.backend().cast(p.raw(), p.dtype(), pv.raw(), ptdp::DType::F32, p.numel());
      gv.backend().copy(gv.raw(), gr.raw(), gr.nbytes());
      if (mv.raw() != pv.raw()) mv.backend().copy(mv.raw(), p.raw(), p.nbytes());  // 16-bit: exact
    }
    // The caller reads its parameter tensors directly, not through the table: the step waits
    // for the updated weights itself.
    c.overlap_param_gather = false;
    auto h = std::make_unique<ptdp_optimizer_impl>();
    h->groups = &g;
    h->opt = std::make_unique<ptdp::Optimizer>(std::vector<ptdp::ParamTable*>{table.get()},
                                               std::vector<std::vector<int>>{}, c, *g.groups);
    // Re-point the handles at the buffers, as the optimizer left them (it pads them to a
    // multiple of the data-parallel size, which moves them).
    for (int32_t i = 0; i < count; ++i) {
      ptdp::Tensor& p = params[i]->tensor;
      ptdp::Tensor& gr = grads[i]->tensor;
      p = table->weight(i).reshape(p.shape());
      gr = table->grad(i).reshape(gr.shape());
    }
    h->tensors = std::move(table);
    ++g.dependents;
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_optimizer_destroy(ptdp_optimizer optimizer) {
  return guard(__func__, [&] {
    if (optimizer == nullptr) return;
    ptdp_optimizer_impl& o = live(optimizer, "optimizer");
    if (o.model) --o.model->dependents;
    --o.groups->dependents;
    ptdp::capi::release(optimizer);
  });
}

PTDP_API ptdp_status ptdp_optimizer_reduce_gradients(ptdp_optimizer optimizer) {
  return guard(__func__, [&] {
    ptdp_optimizer_impl& o = live(optimizer, "optimizer");
    if (o.tensors) o.opt->params_ready(0, 0, o.tensors->size());
    o.opt->finish_grad_sync();
  });
}

PTDP_API ptdp_status ptdp_optimizer_step(ptdp_optimizer optimizer, int64_t iteration, ptdp_iteration_result* result) {
  return guard(__func__, [&] {
    ptdp_optimizer_impl& o = live(optimizer, "optimizer");
    PTDP_CHECK_ARG(iteration >= 0, "iteration = " + std::to_string(iteration) + " is negative");
    if (o.tensors) o.opt->params_ready(0, 0, o.tensors->size());
    const ptdp::OptimizerStepResult s = o.opt->step(iteration);  // 16-bit model weights follow the masters
    ptdp::capi::iteration_result(s, o.opt->skipped_iterations(), 0.0f, result);
  });
}

PTDP_API ptdp_status ptdp_optimizer_state_bytes(ptdp_optimizer optimizer, size_t* bytes) {
  return guard(__func__, [&] {
    ptdp_optimizer_impl& o = live(optimizer, "optimizer");
    require_non_null(bytes, "bytes");
    *bytes = o.opt->state_bytes();
  });
}

}  // extern "C"
