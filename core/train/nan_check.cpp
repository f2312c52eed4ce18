#include "core/train/nan_check.h"

#include <cmath>
#include <vector>

#include "core/train/run_stop.h"

namespace ptdp {

namespace {

// What a gradient holds: 0 finite, 1 an infinity (no NaN), 2 a NaN.
int classify(const Tensor& g) {
  if (g.numel() == 0) return 0;
  // The device's sum of squares is a cheap filter: finite means every element is.
  const double sq = g.backend().sum_squares(static_cast<const float*>(g.raw()), g.numel());
  if (std::isfinite(sq)) return 0;
  std::vector<float> host(static_cast<std::size_t>(g.numel()));
  g.copy_to_host(host.data(), host.size() * sizeof(float));
  int found = 0;
  for (float x : host) {
    if (std::isnan(x)) return 2;
    if (std::isinf(x)) found = 1;
  }
  return found;  // 0: only the squares overflowed
}

}  // namespace

NonFiniteCheck::NonFiniteCheck(GptPipeline& model, ProcessGroups& groups, bool dynamic_loss_scale,
                               FailureAgreement& failures)
    : model_(model), groups_(groups), dynamic_(dynamic_loss_scale), failures_(failures) {}

void NonFiniteCheck::begin(int64_t iteration) {
  iteration_ = iteration;
  category_ = -1;
  what_.clear();
}

std::string NonFiniteCheck::where() const {
  const int p = groups_.size(GroupKind::Pipeline);
  std::string s = "rank " + std::to_string(groups_.rank(GroupKind::World)) + " (tensor rank " +
                  std::to_string(groups_.rank(GroupKind::Tensor)) + ", data rank " +
                  std::to_string(groups_.rank(GroupKind::Data)) + ", pipeline stage " +
                  std::to_string(groups_.rank(GroupKind::Pipeline)) + " of " + std::to_string(p);
  if (groups_.size(GroupKind::Context) > 1) s += ", context rank " + std::to_string(groups_.rank(GroupKind::Context));
  return s + ")";
}

void NonFiniteCheck::check_grads(int j, int first, int end) {
  if (category_ >= 0 && category_ < 2) return;  // the loss already is the finding
  const ParamTable& table = model_.chunks()[static_cast<std::size_t>(j)]->params();
  for (int i = first; i < end && i < table.size(); ++i) {
    if (category_ == 2 && (j > chunk_ || (j == chunk_ && i > index_))) break;  // an earlier one is known
    const int kind = classify(table.grad(i));
    if (kind == 0 || (kind == 1 && dynamic_)) continue;
    category_ = 2;
    chunk_ = j;
    index_ = i;
    what_ = std::string(kind == 2 ? "NaN" : "Inf") + " in the gradient of " + table.info(i).name +
            (model_.virtual_stages() > 1 ? " (model chunk " + std::to_string(model_.chunk_index(j)) + ")" : "") +
            " on " + where() + ", before the data-parallel reduction";
    break;
  }
}

void NonFiniteCheck::check_loss(float loss) {
  if (std::isfinite(loss)) return;
  const bool last = groups_.rank(GroupKind::Pipeline) == groups_.size(GroupKind::Pipeline) - 1;
  category_ = last ? 0 : 1;
  what_ = std::string(std::isnan(loss) ? "NaN" : "Inf") + " in the loss (this rank's copy of the mean over its " +
          "microbatches) on " + where();
}

void NonFiniteCheck::agree() {
  const int world = groups_.size(GroupKind::World), rank = groups_.rank(GroupKind::World);
  // The lowest key finds: category * world + rank.
  float key = category_ < 0 ? static_cast<float>(3 * world) : static_cast<float>(category_ * world + rank);
  if (world > 1) groups_.comm(GroupKind::World).all_reduce(Tensor::borrow(&key, {1}, DType::F32), ReduceOp::Min)->wait();
  const int k = static_cast<int>(key);
  if (k >= 3 * world) return;
  const int from = k % world;
  constexpr int kMax = 2048;
  std::vector<int32_t> buf(1 + kMax, 0);
  if (rank == from) {
    const int n = std::min<int>(kMax, static_cast<int>(what_.size()));
    buf[0] = n;
    for (int i = 0; i < n; ++i) buf[static_cast<std::size_t>(1 + i)] = static_cast<unsigned char>(what_[static_cast<std::size_t>(i)]);
  }
  if (world > 1) {
    groups_.comm(GroupKind::World)
        .broadcast(Tensor::borrow(buf.data(), {static_cast<int64_t>(buf.size())}, DType::I32), from)
        ->wait();
  }
  std::string what;
  for (int i = 0; i < buf[0]; ++i) what += static_cast<char>(buf[static_cast<std::size_t>(1 + i)]);
  failures_.stop_run(kExitNonFinite, "--check-for-nan-in-loss-and-grad: iteration " + std::to_string(iteration_) +
                                         ": " + what + "; stopping the run");
}

void NonFiniteCheck::check_after_reduction(const OptimizerStepResult& step) {
  if (std::isfinite(step.grad_norm) || dynamic_) return;
  failures_.stop_run(kExitNonFinite, "--check-for-nan-in-loss-and-grad: iteration " + std::to_string(iteration_) +
                                         ": the gradient norm after the data-parallel reduction is not finite (no "
                                         "rank found a non-finite local gradient before it); stopping the run");
}

TrainingHooks non_finite_check_hooks(std::shared_ptr<NonFiniteCheck> check) {
  TrainingHooks h;
  h.before_iteration = [check](int64_t iteration) { check->begin(iteration); };
  h.on_grads_ready = [check](int j, int first, int end) { check->check_grads(j, first, end); };
  h.after_backward = [check](float& loss) { check->check_loss(loss); };
  h.before_optimizer_step = [check] { check->agree(); };
  h.after_optimizer_step = [check](const OptimizerStepResult& step) { check->check_after_reduction(step); };
  return h;
}

}  // namespace ptdp
