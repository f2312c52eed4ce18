#include "core/train/training_hooks.h"

#include <utility>

namespace ptdp {

namespace {

// `a` then `b`, or whichever is set (void hooks).
template <class... Args>
std::function<void(Args...)> both(std::function<void(Args...)> a, std::function<void(Args...)> b) {
  if (!a) return b;
  if (!b) return a;
  return [a = std::move(a), b = std::move(b)](Args... args) {
    a(args...);
    b(args...);
  };
}

}  // namespace

TrainingHooks chain(TrainingHooks first, TrainingHooks second) {
  TrainingHooks h;
  h.before_iteration = both(std::move(first.before_iteration), std::move(second.before_iteration));
  h.on_grads_ready = both(std::move(first.on_grads_ready), std::move(second.on_grads_ready));
  h.after_backward = both(std::move(first.after_backward), std::move(second.after_backward));
  h.before_optimizer_step = both(std::move(first.before_optimizer_step), std::move(second.before_optimizer_step));
  h.after_optimizer_step = both(std::move(first.after_optimizer_step), std::move(second.after_optimizer_step));
  if (first.around_save && second.around_save) {
    h.around_save = [outer = std::move(first.around_save), inner = std::move(second.around_save)](
                        int64_t iteration, const std::function<void()>& save) {
      outer(iteration, [&] { inner(iteration, save); });
    };
  } else {
    h.around_save = first.around_save ? std::move(first.around_save) : std::move(second.around_save);
  }
  if (first.after_iteration && second.after_iteration) {
    h.after_iteration = [a = std::move(first.after_iteration),
                         b = std::move(second.after_iteration)](const IterationMetrics& m) {
      const bool stop_a = a(m);
      return b(m) || stop_a;
    };
  } else {
    h.after_iteration = first.after_iteration ? std::move(first.after_iteration) : std::move(second.after_iteration);
  }
  return h;
}

}  // namespace ptdp
