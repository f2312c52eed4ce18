#include "core/train/training_loop.h"

#include <string>
#include <utility>

#include "base/error.h"
#include "core/checkpoint/save_lock.h"
#include "core/pipeline/trace.h"
#include "core/train/batch_reader.h"
#include "core/train/device_peak.h"
#include "core/train/evaluator.h"
#include "core/train/failure_agreement.h"
#include "core/train/fault_injection.h"
#include "core/train/memory_check.h"
#include "core/train/metrics_sink.h"
#include "core/train/nan_check.h"
#include "core/train/resume.h"
#include "core/train/run_layout.h"
#include "core/train/run_stop.h"
#include "core/train/save_policy.h"
#include "core/train/trainer.h"
#include "io/json_number.h"

namespace ptdp {

namespace {

Device pick_device(const std::string& flag, const Runtime& rt) {
  bool have_cuda = false;
#ifdef PTDP_HAVE_CUDA
  have_cuda = true;
#endif
  if (flag == "cuda") {
    PTDP_CHECK_ARG(have_cuda, "--device cuda: this build of ptdp has no CUDA support");
    PTDP_CHECK_ARG(rt.gpu() >= 0, "--device cuda: rank " + std::to_string(rt.world_rank()) + " sees no GPU");
  }
  if (flag == "cuda" || (flag == "auto" && have_cuda && rt.gpu() >= 0)) return Device{DeviceType::CUDA, rt.gpu()};
  return Device{};
}

}  // namespace

// Members are destroyed in reverse: each component before what it refers to.
struct TrainingLoop::State {
  State(const TrainArgs& a, std::shared_ptr<Runtime> runtime, std::FILE* out_)
      : args(a), rt(std::move(runtime)), failures(rt->world_size(), rt->world_rank(), rt->settings().timeout_s),
        out(out_) {}

  TrainArgs args;
  std::shared_ptr<Runtime> rt;
  FailureAgreement failures;
  std::FILE* out;            // the caller's
  std::FILE* log = nullptr;  // `out` on the logging rank, else null
  bool logger = false;       // this is the logging rank (writes --log-json and --plot-file)
  RunLayout layout;
  std::unique_ptr<ProcessGroups> groups;
  nlohmann::json config_json;              // the flags, recorded in every checkpoint
  std::unique_ptr<SaveDirLock> save_lock;  // world rank 0's lock of --save for the run's life
  Device device;
  GptConfig gpt;
  std::unique_ptr<GptPipeline> model;
  std::unique_ptr<Optimizer> optimizer;
  Schedule schedule;
  std::unique_ptr<BatchReader> batches;
  TrainingHooks hooks;  // the loop's own (PTDP_FAULT, the non-finite checks), then the caller's
  RunFigures figures;
  std::unique_ptr<MetricsSink> metrics;
  std::unique_ptr<Evaluator> evaluator;
  std::unique_ptr<SavePolicy> saves;
  int64_t iteration = 0, first_iteration = 0, consumed = 0, consumed_valid = 0;
  int64_t consecutive_skips = 0;  // for --max-skipped-iterations
  int64_t trace_iteration = -1;   // the iteration --profile-trace records
};

TrainingLoop::TrainingLoop(const TrainArgs& args, std::shared_ptr<Runtime> runtime, TrainingHooks hooks,
                           std::FILE* log) {
  PTDP_CHECK_ARG(runtime != nullptr, "runtime is null");
  s_ = std::make_unique<State>(args, std::move(runtime), log);
  const FailureAgreement::Watch watch(s_->failures);
  build(std::move(hooks));
}

TrainingLoop::~TrainingLoop() = default;

int64_t TrainingLoop::iteration() const { return s_->iteration; }
int TrainingLoop::world_rank() const { return s_->rt->world_rank(); }
int TrainingLoop::world_size() const { return s_->rt->world_size(); }

void TrainingLoop::build(TrainingHooks hooks) {
  State& s = *s_;
  {
    // Up to the resume every failure is every rank's: the same checks of the same flags, or votes.
    const FailureAgreement::Agreed agreed(s.failures);
    lay_out();
    lock_save_dir();
    s.failures.vote(*s.groups, [&] { allocate(std::move(hooks)); });
    resume();
  }
  // The device's peak for the MFU (every rank measures at once; the mean is everyone's).
  const DevicePeak peak = run_device_peak(s.args.peak_tflops, s.rt->world(), s.device, s.gpt.precision);
  s.figures.model_flops = s.gpt.paper_flops(s.layout.global_batch);
  s.figures.executed_flops = s.gpt.paper_flops(s.layout.global_batch, s.gpt.recompute == Recompute::Full);
  s.figures.tokens_per_batch = static_cast<double>(s.layout.global_batch) * s.gpt.seq_length;
  s.figures.peak_flops = peak.flops;
  s.figures.world = s.layout.world;
  open_metrics();
  s.evaluator = std::make_unique<Evaluator>(s.args, *s.model, *s.batches, s.layout.global_batch, s.layout.m,
                                            s.layout.b);
  s.saves = std::make_unique<SavePolicy>(s.args, *s.model, *s.optimizer, s.config_json, s.failures, *s.metrics,
                                         s.hooks.around_save);
  print_header();
}

// The layout on this world and its groups; the logging rank.
void TrainingLoop::lay_out() {
  State& s = *s_;
  s.layout = run_layout(s.args, s.rt->world_size());
  s.groups = std::make_unique<ProcessGroups>(s.rt, to_parallel_config(s.args, s.layout.world));
  const ProcessGroups& g = *s.groups;
  const bool logger = g.rank(GroupKind::Pipeline) == s.layout.p - 1 && g.rank(GroupKind::Tensor) == 0 &&
                      g.rank(GroupKind::Data) == 0 && g.rank(GroupKind::Context) == 0;
  s.logger = logger;
  s.log = logger ? s.out : nullptr;
  s.config_json = train_args_to_json(s.args);
}

// --save is this run's alone: world rank 0 takes its lock before anything else happens, and
// every rank learns whether another run holds it.
void TrainingLoop::lock_save_dir() {
  State& s = *s_;
  if (s.args.save.empty()) return;
  s.failures.vote(*s.groups, [&] {
    if (s.rt->world_rank() == 0) s.save_lock = std::make_unique<SaveDirLock>(s.args.save, SaveDirLock::Mode::Run);
  });
  if (s.save_lock && !s.save_lock->previous_holder().empty() && s.out) {
    std::fprintf(s.out, " warning: took over the stale lock %s of a run that ended without releasing it (%s)\n",
                 s.save_lock->path().c_str(), s.save_lock->previous_holder().c_str());
  }
}

// What the run allocates once the planner says it fits: the model, the optimizer, the schedule,
// the data, and the hooks that act on them (PTDP_FAULT's specs checked against this rank's part).
void TrainingLoop::allocate(TrainingHooks hooks) {
  State& s = *s_;
  s.device = pick_device(s.args.device, *s.rt);
  refuse_run_that_does_not_fit(s.args, s.layout, s.device, s.rt->local_size());
  s.gpt = to_gpt_config(s.args);
  s.model = std::make_unique<GptPipeline>(s.gpt, *s.groups, s.device);
  s.optimizer = make_optimizer(*s.model, *s.groups, to_optimizer_config(s.args));
  s.schedule = make_schedule(schedule_kind(s.args), s.layout.p, s.layout.m, s.layout.v);
  FaultInjector faults = FaultInjector::from_environment(s.rt->world_rank());
  check_fault_specs(faults, *s.model, *s.groups);
  TrainingHooks own = fault_injection_hooks(std::move(faults), *s.model);
  if (s.args.check_for_nan_in_loss_and_grad) {
    own = chain(std::move(own), non_finite_check_hooks(std::make_shared<NonFiniteCheck>(
                                    *s.model, *s.groups, s.optimizer->config().loss_scale.dynamic, s.failures)));
  }
  s.hooks = chain(std::move(own), std::move(hooks));
  s.batches = std::make_unique<BatchReader>(s.args, s.layout.global_batch, s.layout.m, s.layout.b,
                                            s.groups->rank(GroupKind::Data));
}

void TrainingLoop::resume() {
  State& s = *s_;
  const CheckpointState start = resume_from_checkpoint(s.args, *s.model, *s.optimizer, s.config_json, s.log);
  s.iteration = s.first_iteration = start.iteration;
  s.consumed = start.consumed_train_samples;
  s.consumed_valid = start.consumed_valid_samples;
}

void TrainingLoop::open_metrics() {
  State& s = *s_;
  s.failures.vote(*s.groups,
                  [&] { s.metrics = std::make_unique<MetricsSink>(s.log, s.logger, s.args, s.figures, s.iteration > 0); });
  s.metrics->resume_plot();
}

void TrainingLoop::print_header() const {
  const State& s = *s_;
  if (s.log == nullptr) return;
  const RunLayout& L = s.layout;
  std::fprintf(s.log,
               " ptdp-train %s on %s: world %d = t %d x p %d x d %d%s, v %d, schedule %d, %d microbatches of %d, "
               "global batch %lld, seq %d, %d layers, hidden %d, heads %d\n",
               PTDP_VERSION_STRING, s.device.type == DeviceType::CUDA ? "cuda" : "cpu", L.world, L.t, L.p, L.d,
               L.c > 1 ? (" x c " + std::to_string(L.c)).c_str() : "", L.v, static_cast<int>(s.schedule.kind), L.m,
               L.b, static_cast<long long>(L.global_batch), s.gpt.seq_length, s.gpt.num_layers, s.gpt.hidden_size,
               s.gpt.num_attention_heads);
  std::fflush(s.log);
}

// As torchtitan's train(): iterations until --train-iters, an --exit-interval or a stop, then
// the last save. Only the stretches named Agreed (saves, the stops every rank makes alike) fail
// on every rank together; any other failure is this rank's (failure_agreement.h).
void TrainingLoop::run() {
  State& s = *s_;
  const FailureAgreement::Watch watch(s.failures);
  try {
    const int64_t left = s.args.train_iters - s.iteration;
    s.trace_iteration = s.args.profile_trace.empty() ? -1 : (left > 1 ? s.iteration + 1 : s.iteration);
    while (s.iteration < s.args.train_iters && run_iteration()) {
    }
    finish();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::Timeout) s.failures.linger_after_timeout();
    throw;
  }
}

// One iteration and what follows it: its record, validation, saves and the stop vote. Returns
// whether the run goes on.
bool TrainingLoop::run_iteration() {
  State& s = *s_;
  const TrainArgs& a = s.args;
  s.batches->read(DataSplit::Train, s.consumed);
  const IterationOutcome outcome = train_batch();
  ++s.iteration;
  s.consumed += s.layout.global_batch;
  IterationMetrics m = metrics_of(outcome);
  last_moe_ = m.moe;
  last_moe_exchange_seconds_ = outcome.moe_exchange_seconds;
  last_mtp_losses_ = m.mtp_losses;
  s.consecutive_skips = outcome.step.skipped ? s.consecutive_skips + 1 : 0;
  const bool out_of_skips = a.max_skipped_iterations > 0 && s.consecutive_skips >= a.max_skipped_iterations;
  const bool logged = s.metrics->record(m, out_of_skips);
  if (out_of_skips) stop_for_skips(m);
  if (s.evaluator->due(s.iteration)) {
    m.validated = true;
    m.validation_loss = s.evaluator->run(s.consumed_valid);
    s.metrics->record_validation(s.iteration, m.validation_loss);
  }
  if (logged) s.metrics->draw_plot();
  const bool exiting = a.exit_interval > 0 && s.iteration % a.exit_interval == 0 && s.iteration < a.train_iters;
  if (s.saves->due(s.iteration, exiting)) {
    save();
    m.saved = true;
  }
  const bool stopped = agree_to_stop(m) && !exiting && s.iteration < a.train_iters;
  if (stopped) stop_requested_.store(false);  // honoured: a later run() goes on
  if (stopped && s.saves->enabled() && !m.saved) {
    save();
    m.saved = true;
  }
  last_ = m;
  const auto it = static_cast<long long>(s.iteration);
  if (exiting) s.metrics->note(" exiting at iteration %lld (--exit-interval %lld)\n", it,
                                static_cast<long long>(a.exit_interval));
  if (stopped) s.metrics->note(" stopping at iteration %lld: a stop was requested\n", it);
  return !exiting && !stopped;
}

// The global batch just read through the model and the optimizer; recorded for --profile-trace
// when it is the iteration to trace.
IterationOutcome TrainingLoop::train_batch() {
  State& s = *s_;
  TraceRecorder trace;
  ExecutorOptions eo;
  if (s.iteration == s.trace_iteration) eo.trace = &trace;
  const IterationOutcome outcome =
      train_iteration(*s.model, *s.optimizer, *s.groups, s.schedule, s.batches->tokens(), s.batches->labels(),
                      s.layout.b, s.iteration, eo, s.batches->layout(), s.hooks);
  if (eo.trace) trace.write_merged(s.rt->world(), s.rt->world_rank(), s.args.profile_trace);
  return outcome;
}

IterationMetrics TrainingLoop::metrics_of(const IterationOutcome& outcome) const {
  const State& s = *s_;
  IterationMetrics m = s.figures.measure(outcome.seconds);
  m.iteration = s.iteration;
  m.train_iters = s.args.train_iters;
  m.consumed_samples = s.consumed;
  m.global_batch_size = s.layout.global_batch;
  m.lm_loss = outcome.loss;
  m.learning_rate = outcome.step.lr;
  m.grad_norm = outcome.step.grad_norm;
  m.loss_scale = outcome.step.loss_scale;
  m.skipped = outcome.step.skipped;
  m.skipped_iterations = s.optimizer->skipped_iterations();
  m.moe = outcome.moe;
  m.mtp_losses = outcome.mtp_losses;
  m.qk_clip = outcome.qk_clip;
  return m;
}

// Skips are agreed over the world: every rank stops here alike.
void TrainingLoop::stop_for_skips(const IterationMetrics& m) {
  State& s = *s_;
  s.metrics->draw_plot();
  s.failures.stop_run(kExitSkippedIterations,
                      "stopping at iteration " + std::to_string(s.iteration) + ": " +
                          std::to_string(s.consecutive_skips) +
                          " consecutive iterations were skipped for non-finite gradients (--max-skipped-iterations " +
                          std::to_string(s.args.max_skipped_iterations) + "; loss scale " +
                          json_number(m.loss_scale) + "): the run has diverged or its loss scale cannot recover");
}

// Stop when the caller asks on any rank: the after_iteration hook's answer and request_stop()
// are agreed over the world, so every rank leaves after the same iteration (saving first).
bool TrainingLoop::agree_to_stop(const IterationMetrics& m) {
  State& s = *s_;
  bool want_stop = stop_requested_.load();
  if (s.hooks.after_iteration) want_stop = s.hooks.after_iteration(m) || want_stop;
  int32_t flag = want_stop ? 1 : 0;
  if (s.layout.world > 1) s.rt->world().all_reduce(Tensor::borrow(&flag, {1}, DType::I32), ReduceOp::Max)->wait();
  return flag != 0;
}

void TrainingLoop::save() {
  State& s = *s_;
  CheckpointState state;
  state.iteration = s.iteration;
  state.consumed_train_samples = s.consumed;
  state.consumed_valid_samples = s.consumed_valid;
  s.saves->save(state);
}

void TrainingLoop::finish() {
  State& s = *s_;
  if (s.saves->due_at_end(s.iteration, s.first_iteration)) {
    save();
    last_.saved = true;
  }
  s.metrics->draw_plot();
  s.metrics->note(" training done: %lld iterations\n", static_cast<long long>(s.iteration));
}

}  // namespace ptdp
