#include "core/train/training_loop.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <memory>
#include <utility>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/save_lock.h"
#include "core/comm/flight_recorder.h"
#include "core/data/gpt_dataset.h"
#include "core/pipeline/trace.h"
#include "core/train/device_peak.h"
#include "core/train/fault_injection.h"
#include "core/train/nan_check.h"
#include "core/train/plot.h"
#include "core/train/run_stop.h"
#include "core/train/supervisor.h"
#include "core/train/trainer.h"
#include "io/json_number.h"
#include "io/json_text.h"

namespace ptdp {

namespace {

double mem_high_water_mib() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S", &tm);
  return out;
}

// A progress bar when stdout is a terminal. Open MPI and PMI launchers hand every rank a
// pseudo-terminal whatever the job's real output is, so under them the bar is off unless
// PTDP_PROGRESS=1 asks for it; PTDP_PROGRESS=0 turns it off everywhere.
bool show_progress(std::FILE* out) {
  const char* force = std::getenv("PTDP_PROGRESS");
  if (force && *force) return std::strcmp(force, "0") != 0;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) return false;
  return out != nullptr && isatty(fileno(out));
}


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

// The flags whose change alters the training trajectory: the seed, the data and its tokenizer,
// the model's shape and architecture, the batch. Named as in train_args_to_json.
const char* const kTrajectoryFlags[] = {
    "seed", "mock-data", "data-path", "train-data-path", "valid-data-path", "test-data-path", "text-file", "split",
    "tokenizer-type", "vocab-file", "merge-file", "tokenizer-model", "eod-mask-loss", "reset-position-ids",
    "reset-attention-mask", "eod-token-id", "global-batch-size", "num-layers", "hidden-size", "ffn-hidden-size",
    "num-attention-heads", "seq-length", "max-position-embeddings", "vocab-size", "make-vocab-size-divisible-by",
    "hidden-dropout", "attention-dropout", "norm-epsilon", "layernorm-epsilon", "untie-embeddings-and-output-weights",
    "normalization", "swiglu", "position-embedding-type", "rotary-base", "rotary-percent", "use-rope-scaling",
    "rope-scaling-factor", "rope-scaling-low-freq-factor", "rope-scaling-high-freq-factor",
    "rope-scaling-original-max-position-embeddings", "group-query-attention", "num-query-groups", "kv-channels",
    "disable-bias-linear", "add-qkv-bias", "qk-layernorm", "optimizer", "fp16", "bf16"};

// Resuming with --load compares the trajectory flags with the ones the checkpoint recorded:
// refused (InvalidArgument naming each differing flag and both values) unless
// --override-resume-check. A checkpoint that recorded no flags (ptdp_checkpoint_save without a
// run, or older) is accepted with a note.
void check_resume_flags(const nlohmann::json& saved, const nlohmann::json& now, const TrainArgs& args, std::FILE* out) {
  if (!saved.is_object()) {
    if (out) std::fprintf(out, " note: the checkpoint in %s recorded no flags; the resume check is skipped\n", args.load.c_str());
    return;
  }
  std::string diffs;
  int n = 0;
  for (const char* key : kTrajectoryFlags) {
    if (!saved.contains(key) || !now.contains(key)) continue;  // a flag the checkpoint predates
    if (saved.at(key) == now.at(key)) continue;
    diffs += str_cat(n++ ? "; " : "", "--", key, " was ", json_text(saved.at(key)), ", now ", json_text(now.at(key)));
  }
  if (n == 0) return;
  if (args.override_resume_check) {
    if (out) std::fprintf(out, " warning: resuming from %s with changed flags (--override-resume-check): %s\n", args.load.c_str(), diffs.c_str());
    return;
  }
  throw_error(ErrorCode::InvalidArgument,
              str_cat("--load ", args.load, ": resuming with flags that change the training trajectory: ", diffs,
                      ". Use the flags the checkpoint was saved with, --finetune to start a new run from its "
                      "parameters, or --override-resume-check to resume anyway"));
}

}  // namespace

struct TrainingLoop::State {
  TrainArgs args;
  std::shared_ptr<Runtime> rt;
  std::unique_ptr<ProcessGroups> groups;
  GptConfig gpt;
  Device device;
  std::unique_ptr<GptPipeline> model;
  std::unique_ptr<Optimizer> optimizer;
  Schedule schedule;
  std::unique_ptr<GptDataset> data;
  std::vector<int32_t> tokens, labels;
  // --reset-position-ids / --reset-attention-mask: the batch's positions and documents.
  std::vector<int32_t> position_ids, document_starts;
  DocumentLayout layout;
  nlohmann::json config_json;  // recorded in every checkpoint
  int t = 1, p = 1, v = 1, d = 1, b = 1, m = 1;
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
  int64_t global_batch = 0;
  bool logger = false, progress = false, do_eval = false;
  int64_t iteration = 0, first_iteration = 0, consumed = 0, consumed_valid = 0, last_saved = -1;
  double peak_flops = 0;
  std::string peak_source;
  std::FILE* json = nullptr;
  PlotRun plot;  // the logging rank's curves for --plot-file
  std::unique_ptr<SaveDirLock> save_lock;  // world rank 0's lock of --save for the run's life
  // Set while a collective that agrees on its failures runs (setup, checkpoints): a failure
  // there is every rank's, and MPI can be finalised as usual.
  bool agreed = false;
  FaultInjector faults;                       // PTDP_FAULT (empty when unset)
  std::unique_ptr<NonFiniteCheck> nan_check;  // --check-for-nan-in-loss-and-grad
  int64_t consecutive_skips = 0;              // for --max-skipped-iterations

  ~State() {
    if (json) std::fclose(json);
  }
};

TrainingLoop::TrainingLoop(const TrainArgs& args, std::shared_ptr<Runtime> runtime, TrainingLoopHooks hooks)
    : s_(std::make_unique<State>()), hooks_(std::move(hooks)) {
  PTDP_CHECK_ARG(runtime != nullptr, "runtime is null");
  const bool alone = runtime->world_size() == 1;
  try {
    build(args, std::move(runtime));
  } catch (...) {
    if (!s_->agreed && !alone) abandon_mpi_finalize();
    throw;
  }
}

void TrainingLoop::build(const TrainArgs& args, std::shared_ptr<Runtime> runtime) {
  State& s = *s_;
  s.args = args;
  s.rt = std::move(runtime);
  const int world = s.rt->world_size();
  s.t = args.tensor_model_parallel_size;
  s.p = args.pipeline_model_parallel_size;
  s.v = virtual_pipeline_size(args);
  // The same numbers on every rank: a refusal here, and the groups' own check of the layout,
  // are every rank's.
  s.agreed = true;
  const int c = args.context_parallel_size;
  const int64_t model_ranks = static_cast<int64_t>(s.t) * s.p * c;  // int64: the flags are checked, not bounded
  if (world % model_ranks != 0) {
    throw_error(ErrorCode::InvalidArgument,
                "the world of " + std::to_string(world) + " ranks is not a multiple of --tensor-model-parallel-size " +
                    std::to_string(s.t) + " x --pipeline-model-parallel-size " + std::to_string(s.p) +
                    (c > 1 ? " x --context-parallel-size " + std::to_string(c) : std::string()));
  }
  s.d = static_cast<int>(world / model_ranks);
  s.b = args.micro_batch_size;
  s.global_batch = args.global_batch_size > 0 ? args.global_batch_size : static_cast<int64_t>(s.b) * s.d;
  if (s.global_batch % (static_cast<int64_t>(s.b) * s.d) != 0) {
    throw_error(ErrorCode::InvalidArgument, "--global-batch-size " + std::to_string(s.global_batch) +
                                                " is not a multiple of --micro-batch-size " + std::to_string(s.b) +
                                                " x data-parallel size " + std::to_string(s.d));
  }
  s.m = static_cast<int>(s.global_batch / (static_cast<int64_t>(s.b) * s.d));
  s.groups = std::make_unique<ProcessGroups>(s.rt, to_parallel_config(args, world));
  s.tp_rank = s.groups->rank(GroupKind::Tensor);
  s.pp_rank = s.groups->rank(GroupKind::Pipeline);
  s.dp_rank = s.groups->rank(GroupKind::Data);
  s.logger = hooks_.out != nullptr && s.pp_rank == s.p - 1 && s.tp_rank == 0 && s.dp_rank == 0 &&
             s.groups->rank(GroupKind::Context) == 0;
  s.progress = s.logger && show_progress(hooks_.out);
  s.config_json = train_args_to_json(args);

  // --save is this run's alone: world rank 0 takes its lock before anything else happens, and
  // every rank learns whether another run holds it.
  if (!args.save.empty()) {
    s.agreed = true;
    agree_on_failure(*s.groups, [&] {
      if (s.rt->world_rank() == 0) s.save_lock = std::make_unique<SaveDirLock>(args.save, SaveDirLock::Mode::Run);
    });
    if (s.save_lock && !s.save_lock->previous_holder().empty() && hooks_.out) {
      std::fprintf(hooks_.out, " warning: took over the stale lock %s of a run that ended without releasing it (%s)\n",
                   s.save_lock->path().c_str(), s.save_lock->previous_holder().c_str());
    }
  }

  s.agreed = true;
  agree_on_failure(*s.groups, [&] {
    s.device = pick_device(args.device, *s.rt);
    if (hooks_.before_allocation) {
      RunShape shape;
      shape.args = &args;
      shape.world = world;
      shape.t = s.t;
      shape.p = s.p;
      shape.v = s.v;
      shape.c = c;
      shape.d = s.d;
      shape.b = s.b;
      shape.m = s.m;
      shape.global_batch = s.global_batch;
      shape.local_size = s.rt->local_size();
      shape.device = s.device;
      hooks_.before_allocation(shape);
    }
    s.gpt = to_gpt_config(args);
    s.model = std::make_unique<GptPipeline>(s.gpt, *s.groups, s.device);
    s.optimizer = make_optimizer(*s.model, *s.groups, to_optimizer_config(args));
    s.schedule = make_schedule(schedule_kind(args), s.p, s.m, s.v);
    s.faults = FaultInjector::from_environment(s.rt->world_rank());
    // PTDP_FAULT's specs against this rank's part of the model: a nan spec's parameter must be
    // one this rank holds, an io-error spec needs a rank that writes checkpoint files.
    for (const FaultSpec& f : s.faults.specs()) {
      const int rank = s.rt->world_rank();
      if (f.kind == FaultKind::Nan && !f.param.empty()) {
        bool held = false;
        for (const auto& c : s.model->chunks()) held = held || c->params().find(f.param) >= 0;
        PTDP_CHECK_ARG(held, "PTDP_FAULT spec '" + f.text + "': rank " + std::to_string(rank) + " (pipeline stage " +
                                 std::to_string(s.pp_rank) + ") holds no parameter named " + f.param);
      }
      if (f.kind == FaultKind::IoError) {
        PTDP_CHECK_ARG(rank == 0 || s.groups->rank(GroupKind::DataContext) == 0,
                       "PTDP_FAULT spec '" + f.text + "': rank " + std::to_string(rank) +
                           " writes no checkpoint file (only the data-parallel rank 0 of each tensor and pipeline "
                           "rank does); name one of those");
      }
    }
    if (args.check_for_nan_in_loss_and_grad) {
      s.nan_check = std::make_unique<NonFiniteCheck>(*s.model, *s.groups, s.optimizer->config().loss_scale.dynamic);
    }
    // Samples: as many as the run reads, counted with the real global batch.
    const int64_t evals = args.eval_interval > 0 ? args.train_iters / args.eval_interval + 1 : 0;
    GptDatasetOptions o;
    o.split = args.split;
    o.seq_length = args.seq_length;
    o.seed = args.seed;
    o.num_samples = {args.train_iters * s.global_batch, evals * args.eval_iters * s.global_batch, 0};
    s.data = make_gpt_dataset(gpt_data_spec(args), o, args.vocab_size);  // one source, or Megatron's blends
    const std::size_t ids = static_cast<std::size_t>(s.m) * static_cast<std::size_t>(s.b) *
                            static_cast<std::size_t>(args.seq_length);
    s.tokens.resize(ids);
    s.labels.resize(ids);
    if (args.reset_position_ids) {
      s.position_ids.resize(ids);
      s.layout.position_ids = s.position_ids.data();
    }
    if (args.reset_attention_mask) {
      s.document_starts.resize(ids);
      s.layout.document_starts = s.document_starts.data();
    }
  });
  s.do_eval = args.eval_interval > 0 && args.eval_iters > 0 && s.data->num_samples(DataSplit::Valid) > 0;

  // Resume.
  if (!args.load.empty()) {
    if (std::filesystem::exists(std::filesystem::path(args.load) / "latest_checkpointed_iteration.txt")) {
      // --finetune (Megatron's): the parameters only; the iteration, the data position and the
      // optimizer (state and counters) start afresh.
      const CheckpointState st = load_checkpoint(args.load, *s.model, args.finetune ? nullptr : s.optimizer.get());
      // The same check on every rank (every rank read the same metadata): a resume that would
      // change the trajectory is everyone's refusal.
      if (!args.finetune) check_resume_flags(st.train_config, s.config_json, args, s.logger ? hooks_.out : nullptr);
      if (!args.finetune) {
        s.iteration = st.iteration;
        s.consumed = st.consumed_train_samples;
        s.consumed_valid = st.consumed_valid_samples;
      }
      if (s.logger && args.finetune) {
        std::fprintf(hooks_.out, " loaded the parameters of iteration %lld from %s to fine-tune from iteration 0\n",
                     static_cast<long long>(st.iteration), args.load.c_str());
      } else if (s.logger) {
        std::fprintf(hooks_.out, " loaded checkpoint from %s at iteration %lld\n", args.load.c_str(),
                     static_cast<long long>(s.iteration));
      }
    } else if (s.logger) {
      std::fprintf(hooks_.out, " no checkpoint found in %s: training from scratch\n", args.load.c_str());
    }
  }
  s.first_iteration = s.iteration;

  s.agreed = false;
  // The device's peak for the MFU: every rank measures at once (so each sees its share of a
  // node) and the mean is everyone's, so that every rank reports the same figures.
  if (args.peak_tflops > 0) {
    s.peak_flops = args.peak_tflops * 1e12;
    s.peak_source = "--peak-tflops";
  } else {
    s.rt->world().barrier()->wait();
    const DevicePeak peak = device_peak(s.device, s.gpt.precision);
    float gflops = static_cast<float>(peak.flops * 1e-9);
    s.rt->world().all_reduce(Tensor::borrow(&gflops, {1}, DType::F32), ReduceOp::Avg)->wait();
    s.peak_flops = static_cast<double>(gflops) * 1e9;
    s.peak_source = peak.source + (world > 1 ? ", mean of the ranks" : "");
  }
  s.agreed = true;
  agree_on_failure(*s.groups, [&] {
    if (s.logger && !args.log_json.empty()) {
      s.json = std::fopen(args.log_json.c_str(), s.iteration > 0 ? "a" : "w");
      PTDP_CHECK_ARG(s.json != nullptr, "--log-json " + args.log_json + ": cannot open for writing");
    }
  });
  s.agreed = false;
  if (s.logger && !args.plot_file.empty() && s.iteration > 0 && !args.log_json.empty() &&
      std::filesystem::is_regular_file(args.log_json)) {
    // A resumed run's curves start with the iterations its JSON log already holds.
    try {
      s.plot = read_training_log(args.log_json);
    } catch (const Error&) {
      s.plot = PlotRun{};
    }
  }
  s.plot.label = args.log_json.empty() ? "ptdp-train" : std::filesystem::path(args.log_json).filename().string();
  if (s.logger) {
    std::fprintf(hooks_.out,
                 " ptdp-train %s on %s: world %d = t %d x p %d x d %d%s, v %d, schedule %d, %d microbatches of %d, "
                 "global batch %lld, seq %d, %d layers, hidden %d, heads %d\n",
                 PTDP_VERSION_STRING, s.device.type == DeviceType::CUDA ? "cuda" : "cpu", world, s.t, s.p, s.d,
                 args.context_parallel_size > 1 ? (" x c " + std::to_string(args.context_parallel_size)).c_str() : "",
                 s.v,
                 static_cast<int>(s.schedule.kind), s.m, s.b, static_cast<long long>(s.global_batch), s.gpt.seq_length,
                 s.gpt.num_layers, s.gpt.hidden_size, s.gpt.num_attention_heads);
    std::fflush(hooks_.out);
  }
}

TrainingLoop::~TrainingLoop() = default;

int64_t TrainingLoop::iteration() const { return s_->iteration; }
int TrainingLoop::world_rank() const { return s_->rt->world_rank(); }
int TrainingLoop::world_size() const { return s_->rt->world_size(); }

void TrainingLoop::run() {
  State& s = *s_;
  const TrainArgs& a = s.args;
  std::FILE* out = hooks_.out;
  const int world = s.rt->world_size();
  const double model_flops = s.gpt.paper_flops(s.global_batch);
  const double executed_flops = s.gpt.paper_flops(s.global_batch, s.gpt.recompute == Recompute::Full);
  const double tokens_per_batch = static_cast<double>(s.global_batch) * s.gpt.seq_length;
  const int64_t trace_iteration =
      a.profile_trace.empty() ? -1 : (a.train_iters - s.iteration > 1 ? s.iteration + 1 : s.iteration);
  const int64_t rows = static_cast<int64_t>(s.m) * s.b;

  const auto clear_progress = [&] {
    if (s.progress) std::fprintf(out, "\r%*s\r", 60, "");
  };
  const auto read_share = [&](DataSplit split, int64_t batch_start) {
    s.data->get_batch(split, batch_start + static_cast<int64_t>(s.dp_rank) * rows, rows, s.tokens.data(),
                      s.labels.data());
    if (uses_eod_masks(a)) {  // Megatron's masks and positions from the end-of-document token
      eod_masks(s.tokens.data(), rows, a.seq_length, static_cast<int32_t>(*a.eod_token_id), a.eod_mask_loss,
                s.labels.data(), s.layout.position_ids ? s.position_ids.data() : nullptr,
                s.layout.document_starts ? s.document_starts.data() : nullptr);
    }
  };
  const auto save = [&] {
    CheckpointState st;
    st.iteration = s.iteration;
    st.consumed_train_samples = s.consumed;
    st.consumed_valid_samples = s.consumed_valid;
    if (!s.faults.empty()) s.faults.strike(FaultPoint::Save, s.iteration);
    const FaultSpec* io_error = s.faults.empty() ? nullptr : s.faults.take_io_error(s.iteration);
    s.agreed = true;  // save_checkpoint agrees on its failures
    if (io_error) {
      std::fprintf(stderr, "ptdp: PTDP_FAULT %s: rank %d's file writes fail during the save at iteration %lld\n",
                   io_error->text.c_str(), s.rt->world_rank(), static_cast<long long>(s.iteration));
      std::fflush(stderr);
      with_failing_writes([&] { save_checkpoint(a.save, *s.model, s.optimizer.get(), &s.config_json, st); });
    } else {
      save_checkpoint(a.save, *s.model, s.optimizer.get(), &s.config_json, st);
    }
    s.agreed = false;
    s.last_saved = s.iteration;
    if (s.logger) {
      clear_progress();
      std::fprintf(out, " saved checkpoint at iteration %8lld to %s\n", static_cast<long long>(s.iteration),
                   a.save.c_str());
      std::fflush(out);
    }
  };
  const auto draw = [&] {
    if (!s.logger || a.plot_file.empty()) return;
    write_training_plot({s.plot}, "ptdp-train", a.plot_file);
  };

  // Fault injection and the non-finite checks; none of it is set up when neither is asked for.
  int64_t current = 0;  // the 1-based iteration running
  IterationChecks checks;
  const bool checking = !s.faults.empty() || s.nan_check != nullptr;
  if (checking) {
    checks.grads_ready = [&](int j, int first, int end) {
      if (!s.faults.empty()) {
        const ParamTable& table = s.model->chunks()[static_cast<std::size_t>(j)]->params();
        for (const std::string& name : s.faults.nan_params(current)) {
          const int i = table.find(name);
          if (i < first || i >= end) continue;
          Tensor g = table.grad(i);
          if (g.numel() == 0) continue;
          const float nan = NAN;
          g.backend().copy_from_host(g.raw(), &nan, sizeof nan);
        }
      }
      if (s.nan_check) s.nan_check->check_grads(j, first, end);
    };
    checks.after_backward = [&](float& loss) {
      if (!s.faults.empty()) {
        s.faults.strike(FaultPoint::AfterBackward, current);
        if (s.faults.nan_loss(current)) loss = NAN;
      }
      if (s.nan_check) s.nan_check->check_loss(loss);
    };
    if (s.nan_check) {
      checks.before_step = [&] { s.nan_check->agree(); };
      checks.after_step = [&](const StepResult& step) { s.nan_check->check_after_reduction(step); };
    }
  }

  try {
    double interval_seconds = 0.0, interval_loss = 0.0;
    int64_t interval_iters = 0, interval_loss_iters = 0, nan_iters = 0;
    bool stopped = false;
    while (s.iteration < a.train_iters) {
      read_share(DataSplit::Train, s.consumed);
      current = s.iteration + 1;
      if (s.nan_check) s.nan_check->begin(current);
      if (!s.faults.empty()) s.faults.strike(FaultPoint::BeforeForward, current);
      TraceRecorder trace;
      ExecutorOptions eo;
      if (s.iteration == trace_iteration) eo.trace = &trace;
      const IterationResult res = train_iteration(*s.model, *s.optimizer, *s.groups, s.schedule, s.tokens.data(),
                                                  s.labels.data(), s.b, s.iteration, eo, s.layout,
                                                  checking ? &checks : nullptr);
      if (eo.trace) trace.write_merged(s.rt->world(), s.rt->world_rank(), a.profile_trace);
      ++s.iteration;
      s.consumed += s.global_batch;

      IterationReport r;
      r.iteration = s.iteration;
      r.train_iters = a.train_iters;
      r.consumed_samples = s.consumed;
      r.global_batch_size = s.global_batch;
      r.lm_loss = res.loss;
      r.learning_rate = res.step.lr;
      r.grad_norm = res.step.grad_norm;
      r.loss_scale = res.step.loss_scale;
      r.skipped = res.step.skipped;
      r.skipped_iterations = s.optimizer->skipped_iterations();
      r.elapsed_s = res.seconds;
      r.model_flops = model_flops;
      r.executed_flops = executed_flops;
      r.peak_flops = s.peak_flops;
      if (res.seconds > 0) {
        r.tokens_per_second = tokens_per_batch / res.seconds;
        r.tflops_per_device = executed_flops / res.seconds / world / 1e12;
        if (s.peak_flops > 0) r.mfu = model_flops / res.seconds / world / s.peak_flops;
      }
      r.mem_high_water_mib = mem_high_water_mib();

      interval_seconds += res.seconds;
      ++interval_iters;
      if (std::isnan(res.loss)) {
        ++nan_iters;
      } else if (!res.step.skipped) {
        interval_loss += res.loss;
        ++interval_loss_iters;
      }
      if (s.logger) {
        s.plot.train.push_back({r.iteration, r.lm_loss, r.learning_rate,
                                std::isfinite(r.grad_norm) ? r.grad_norm : NAN, r.loss_scale, r.tokens_per_second});
      }
      if (s.json) {
        // Every number through json_number: a value that is not finite is null, so the line
        // stays JSON whatever the run does.
        std::fprintf(s.json,
                     "{\"iteration\": %lld, \"consumed_samples\": %lld, \"lm_loss\": %s, \"learning_rate\": %s, "
                     "\"grad_norm\": %s, \"loss_scale\": %s, \"skipped\": %d, \"skipped_iterations\": %lld, "
                     "\"elapsed_ms\": %s, \"tokens_per_second\": %s, \"tflops_per_device\": %s, "
                     "\"mfu\": %s, \"global_batch_size\": %lld, \"mem_high_water_mib\": %s}\n",
                     static_cast<long long>(r.iteration), static_cast<long long>(r.consumed_samples),
                     json_number(r.lm_loss).c_str(), json_number(r.learning_rate).c_str(),
                     json_number(r.grad_norm).c_str(), json_number(static_cast<double>(r.loss_scale)).c_str(),
                     r.skipped ? 1 : 0, static_cast<long long>(r.skipped_iterations),
                     json_number(r.elapsed_s * 1e3, "%.3f").c_str(), json_number(r.tokens_per_second, "%.1f").c_str(),
                     json_number(r.tflops_per_device, "%.6f").c_str(), json_number(r.mfu, "%.6f").c_str(),
                     static_cast<long long>(s.global_batch), json_number(r.mem_high_water_mib, "%.1f").c_str());
        std::fflush(s.json);
      }

      s.consecutive_skips = res.step.skipped ? s.consecutive_skips + 1 : 0;
      const bool out_of_skips = a.max_skipped_iterations > 0 && s.consecutive_skips >= a.max_skipped_iterations;
      const bool log_now = s.iteration % a.log_interval == 0 || s.iteration == a.train_iters || out_of_skips;
      if (s.logger && log_now) {
        const double per_iter = interval_seconds / static_cast<double>(interval_iters);
        clear_progress();
        std::fprintf(
            out,
            " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
            "throughput per GPU (TFLOP/s/GPU): %.3f | learning rate: %E | global batch size: %5lld | "
            "lm loss: %E | loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3lld | "
            "number of nan iterations: %3lld | tokens per second: %.1f | MFU: %.2f%% | mem high-water (MiB): %.1f |\n",
            timestamp().c_str(), static_cast<long long>(s.iteration), static_cast<long long>(a.train_iters),
            static_cast<long long>(s.consumed), per_iter * 1e3, executed_flops / per_iter / world / 1e12,
            r.learning_rate, static_cast<long long>(s.global_batch),
            interval_loss_iters > 0 ? interval_loss / static_cast<double>(interval_loss_iters) : NAN,
            static_cast<double>(r.loss_scale), r.grad_norm, static_cast<long long>(r.skipped_iterations),
            static_cast<long long>(nan_iters), tokens_per_batch / per_iter,
            s.peak_flops > 0 ? 100.0 * model_flops / per_iter / world / s.peak_flops : 0.0, r.mem_high_water_mib);
        std::fflush(out);
        interval_seconds = interval_loss = 0.0;
        interval_iters = interval_loss_iters = nan_iters = 0;
      }
      if (out_of_skips) {
        // Skips are agreed over the world: every rank stops here alike.
        draw();
        throw RunStopped(kExitSkippedIterations,
                         "stopping at iteration " + std::to_string(s.iteration) + ": " +
                             std::to_string(s.consecutive_skips) +
                             " consecutive iterations were skipped for non-finite gradients (--max-skipped-iterations " +
                             std::to_string(a.max_skipped_iterations) + "; loss scale " +
                             json_number(r.loss_scale) + "): the run has diverged or its loss scale cannot recover");
      }
      if (s.progress) {
        constexpr int kWidth = 40;
        const int filled = static_cast<int>(kWidth * s.iteration / a.train_iters);
        std::string bar(kWidth, '.');
        for (int i = 0; i < filled; ++i) bar[static_cast<std::size_t>(i)] = '#';
        std::fprintf(out, "\r [%s] %lld/%lld", bar.c_str(), static_cast<long long>(s.iteration),
                     static_cast<long long>(a.train_iters));
        std::fflush(out);
      }

      if (s.do_eval && s.iteration % a.eval_interval == 0) {
        double sum = 0.0;
        for (int64_t k = 0; k < a.eval_iters; ++k) {
          read_share(DataSplit::Valid, s.consumed_valid);
          sum += evaluate(*s.model, s.tokens.data(), s.labels.data(), s.b, s.m, s.layout);
          s.consumed_valid += s.global_batch;
        }
        r.validated = true;
        r.validation_loss = static_cast<float>(sum / static_cast<double>(a.eval_iters));
        const double loss = r.validation_loss;
        if (s.logger) {
          s.plot.valid.push_back({r.iteration, loss});
          clear_progress();
          std::fprintf(out,
                       "-----------------------------------------------------------------------------------------\n"
                       " validation loss at iteration %lld | lm loss value: %E | lm loss PPL: %E | \n"
                       "-----------------------------------------------------------------------------------------\n",
                       static_cast<long long>(s.iteration), loss, std::exp(loss));
          std::fflush(out);
        }
        if (s.json) {
          std::fprintf(s.json, "{\"validation_iteration\": %lld, \"lm_loss\": %s, \"lm_loss_ppl\": %s}\n",
                       static_cast<long long>(s.iteration), json_number(loss).c_str(),
                       json_number(std::exp(loss)).c_str());
          std::fflush(s.json);
        }
      }
      if (log_now) draw();

      const bool exiting = a.exit_interval > 0 && s.iteration % a.exit_interval == 0 && s.iteration < a.train_iters;
      if (!a.save.empty() && ((a.save_interval > 0 && s.iteration % a.save_interval == 0) || exiting)) {
        save();
        r.saved = true;
      }
      // Stop when the caller asks on any rank: the callback's answer and request_stop() are
      // agreed over the world, so every rank leaves after the same iteration (saving first).
      bool want_stop = stop_requested_.load();
      if (hooks_.on_iteration) want_stop = hooks_.on_iteration(r) || want_stop;
      int32_t flag = want_stop ? 1 : 0;
      if (world > 1) s.rt->world().all_reduce(Tensor::borrow(&flag, {1}, DType::I32), ReduceOp::Max)->wait();
      stopped = flag != 0 && !exiting && s.iteration < a.train_iters;
      if (stopped) stop_requested_.store(false);  // honoured: a later run() goes on
      if (stopped && !a.save.empty() && !r.saved) {
        save();
        r.saved = true;
      }
      last_ = r;
      if (exiting || stopped) {
        if (s.logger) {
          clear_progress();
          if (exiting) {
            std::fprintf(out, " exiting at iteration %lld (--exit-interval %lld)\n",
                         static_cast<long long>(s.iteration), static_cast<long long>(a.exit_interval));
          } else {
            std::fprintf(out, " stopping at iteration %lld: a stop was requested\n",
                         static_cast<long long>(s.iteration));
          }
        }
        break;
      }
    }
    if (!a.save.empty() && s.iteration > s.first_iteration && s.last_saved != s.iteration) {
      save();
      last_.saved = true;
    }
    draw();
    if (s.logger) {
      clear_progress();
      std::fprintf(out, " training done: %lld iterations\n", static_cast<long long>(s.iteration));
      std::fflush(out);
    }
  } catch (const RunStopped&) {
    s.agreed = false;  // every rank stops alike: MPI finalises as usual
    throw;
  } catch (const Error& e) {
    if (!s.agreed && world > 1) abandon_mpi_finalize();
    s.agreed = false;
    if (e.code() == ErrorCode::Timeout && world > 1) flight_linger_after_timeout(s.rt->world_rank(), s.rt->settings().timeout_s);
    throw;
  } catch (...) {
    if (!s.agreed && world > 1) abandon_mpi_finalize();
    s.agreed = false;
    throw;
  }
}

namespace {

// --max-restarts outside an MPI launcher: this program becomes the supervisor of the job and
// relaunches itself (its executable, the same flags) under --launcher.
int supervise_self(const std::string& program, const std::vector<std::string>& args, const TrainArgs& parsed) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || exe.filename().string() != program) {
    std::fprintf(stderr,
                 "%s: --max-restarts: this front end runs in %s and cannot relaunch itself; run ptdp-train, or "
                 "call ptdp_train_supervise() with the job's command\n",
                 program.c_str(), ec ? "an unknown program" : exe.c_str());
    return 2;
  }
  SupervisorOptions o;
  o.command.push_back(exe.string());
  o.command.insert(o.command.end(), args.begin(), args.end());
  o.launcher = parsed.launcher;
  o.max_restarts = parsed.max_restarts;
  if (const char* b = std::getenv("PTDP_RESTART_BACKOFF_S"); b && *b) {
    char* end = nullptr;
    const double v = std::strtod(b, &end);
    if (end != b && *end == '\0' && std::isfinite(v) && v >= 0) o.backoff_s = v;
  }
  return supervise(o);
}

}  // namespace

int train_main(const std::string& program, const std::vector<std::string>& args,
               std::function<void(const RunShape&)> before_allocation) {
  int rank = 0;
  try {
    TrainArgs parsed;
    try {
      parsed = parse_train_args(args);
    } catch (const Error& e) {
      std::fprintf(stderr, "%s: %s\nrun '%s --help' for the flags\n", program.c_str(), e.what(), program.c_str());
      return 2;
    }
    if (parsed.help) {
      std::fputs(train_args_help(program).c_str(), stdout);
      std::fflush(stdout);
      return 0;
    }
    if (parsed.max_restarts > 0 && !started_by_mpi_launcher()) return supervise_self(program, args, parsed);
    RuntimeOptions ro;
    ro.timeout_s = parsed.comm_timeout.value_or(0);  // unset: PTDP_COMM_TIMEOUT_S, else 300
    std::shared_ptr<Runtime> rt = Runtime::create(ro);
    rank = rt->world_rank();
    TrainingLoopHooks hooks;
    hooks.before_allocation = std::move(before_allocation);
    TrainingLoop loop(parsed, rt, std::move(hooks));
    loop.run();
    return 0;
  } catch (const RunStopped& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), rank, e.what());
    std::fflush(stderr);
    return e.exit_status();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), rank, e.what());
    std::fflush(stderr);
    return 1;
  } catch (...) {
    std::fprintf(stderr, "%s: rank %d: unknown failure\n", program.c_str(), rank);
    return 1;
  }
}

}  // namespace ptdp
