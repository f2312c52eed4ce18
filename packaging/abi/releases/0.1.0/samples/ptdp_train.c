/* ptdp-train: trains a GPT with tensor, pipeline and data parallelism, Megatron-LM style.
 *
 *   mpirun -np 4 ptdp-train --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
 *       --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
 *       --micro-batch-size 4 --global-batch-size 16 --train-iters 200 --lr 1e-3 \
 *       --text-file corpus.txt --save ckpt --save-interval 100
 *
 * Written on the public C API only: the library parses the flags (so every binding accepts the
 * same ones), builds the samples, runs each iteration through the pipeline schedule and writes
 * the checkpoints; this program owns the loop and the log lines. The log line is Megatron's,
 * printed by the first rank of the last pipeline stage every --log-interval iterations.
 * Exit status: 0 on success, 1 on a failure (the message names what went wrong), 2 on bad flags.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <ptdp/ptdp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Everything the run holds; released by cleanup(). */
typedef struct run {
  ptdp_train_config config;
  ptdp_runtime runtime;
  ptdp_groups groups;
  ptdp_model model;
  ptdp_optimizer optimizer;
  ptdp_schedule schedule;
  ptdp_gpt_data data;
  FILE* json;
  int32_t* tokens;
  int32_t* labels;
  int32_t rank, world;
  int logger;     /* 1 on the rank that prints (last stage, first tensor and data rank) */
  int progress;   /* 1 when the logger's stdout is a terminal */
} run;

static void cleanup(run* r) {
  ptdp_gpt_data_destroy(r->data);
  ptdp_schedule_destroy(r->schedule);
  ptdp_optimizer_destroy(r->optimizer);
  ptdp_model_destroy(r->model);
  ptdp_groups_destroy(r->groups);
  ptdp_runtime_destroy(r->runtime);
  ptdp_train_config_destroy(r->config);
  if (r->json) fclose(r->json);
  free(r->tokens);
  free(r->labels);
}

/* Reports a failed call and ends the process. `everywhere`: the call fails on every rank alike
 * (checkpoints agree on their errors; data sets and models are built from the same inputs
 * everywhere), so every rank reports and shuts down cleanly. Otherwise, with several ranks, the
 * runtime is not finalised (the others may wait in a collective): exiting without MPI_Finalize
 * makes mpirun end the job with this rank named. */
static void fail(run* r, const char* what, ptdp_status st, int everywhere) {
  fprintf(stderr, "ptdp-train: rank %d: %s: %s: %s\n", (int)r->rank, what, ptdp_status_string(st),
          ptdp_last_error());
  fflush(stderr);
  if (!everywhere && r->world > 1) _exit(1);
  cleanup(r);
  exit(1);
}

#define CHECK(r, call)                               \
  do {                                               \
    ptdp_status st_ = (call);                        \
    if (st_ != PTDP_SUCCESS) fail(r, #call, st_, 0); \
  } while (0)

#define CHECK_ALL(r, call)                           \
  do {                                               \
    ptdp_status st_ = (call);                        \
    if (st_ != PTDP_SUCCESS) fail(r, #call, st_, 1); \
  } while (0)

/* A failure of this program's own checks, with a message. */
static void fail_msg(run* r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (r->rank == 0) {
    fprintf(stderr, "ptdp-train: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
  }
  va_end(ap);
  cleanup(r);
  exit(1);
}

static double mem_high_water_mib(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
  return (double)u.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

static void timestamp(char* out, size_t n) {
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
}

/* Model FLOPs of one iteration (the paper's formula: 72 B s l h^2 (1 + s/6h + V/12lh) without
 * recomputation, 96 B s l h^2 (1 + s/6h + V/16lh) with full recomputation). */
static double iteration_flops(const ptdp_gpt_options* g, int64_t global_batch) {
  const double B = (double)global_batch, s = g->seq_length, l = g->num_layers, h = g->hidden_size;
  const double V = g->vocab_size;
  if (g->recompute_granularity == PTDP_RECOMPUTE_FULL)
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

/* A progress bar when stdout is a terminal. Open MPI and PMI launchers hand every rank a
 * pseudo-terminal whatever the job's real output is, so under them the bar is off unless
 * PTDP_PROGRESS=1 asks for it; PTDP_PROGRESS=0 turns it off everywhere. */
static int show_progress(void) {
  const char* force = getenv("PTDP_PROGRESS");
  if (force && *force) return strcmp(force, "0") != 0;
  if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) return 0;
  return isatty(fileno(stdout));
}

static void progress_bar(const run* r, int64_t done, int64_t total) {
  if (!r->progress) return;
  const int width = 40;
  const int filled = total > 0 ? (int)(width * done / total) : width;
  char bar[64];
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '#' : '.';
  bar[width] = '\0';
  printf("\r [%s] %lld/%lld", bar, (long long)done, (long long)total);
  fflush(stdout);
}

static void clear_progress(const run* r) {
  if (r->progress) printf("\r%*s\r", 60, "");
}

/* This replica's share of a global batch: the caller passes first = batch start + dp_rank * m * b. */
static void read_share(run* r, ptdp_data_split split, int64_t first, int32_t count) {
  CHECK(r, ptdp_gpt_data_batch(r->data, split, first, count, r->tokens, r->labels));
}

static float evaluate(run* r, int64_t* consumed_valid, int64_t eval_iters, int64_t global_batch, int32_t dp_rank,
                      int32_t b, int32_t m) {
  double sum = 0.0;
  for (int64_t k = 0; k < eval_iters; ++k) {
    read_share(r, PTDP_SPLIT_VALID, *consumed_valid + (int64_t)dp_rank * m * b, m * b);
    float loss = 0.0f;
    CHECK(r, ptdp_model_evaluate(r->model, r->tokens, r->labels, b, m, &loss));
    sum += loss;
    *consumed_valid += global_batch;
  }
  return (float)(sum / (double)eval_iters);
}

static void save(run* r, const char* dir, int64_t iteration, int64_t consumed, int64_t consumed_valid) {
  ptdp_checkpoint_state state;
  CHECK(r, ptdp_checkpoint_state_init(&state));
  state.iteration = iteration;
  state.consumed_train_samples = consumed;
  state.consumed_valid_samples = consumed_valid;
  CHECK_ALL(r, ptdp_checkpoint_save(dir, r->model, r->optimizer, r->config, &state));
  if (r->logger) {
    clear_progress(r);
    printf(" saved checkpoint at iteration %8lld to %s\n", (long long)iteration, dir);
    fflush(stdout);
  }
}

static int file_exists(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, R_OK) == 0;
}

int main(int argc, char** argv) {
  run r;
  memset(&r, 0, sizeof r);

  /* Flags: parsed by the library. */
  ptdp_status st = ptdp_train_config_parse(argc, (const char* const*)argv, &r.config);
  if (st != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-train: %s\nrun 'ptdp-train --help' for the flags\n", ptdp_last_error());
    return 2;
  }
  ptdp_train_settings set;
  CHECK(&r, ptdp_train_config_settings(r.config, &set));
  if (set.help) {
    size_t len = 0;
    ptdp_train_config_help("ptdp-train", NULL, 0, &len);
    char* text = malloc(len + 1);
    if (text && ptdp_train_config_help("ptdp-train", text, len + 1, &len) == PTDP_SUCCESS) fputs(text, stdout);
    free(text);
    ptdp_train_config_destroy(r.config);
    return 0;
  }

  ptdp_gpt_options gpt;
  ptdp_optimizer_options opt;
  ptdp_parallel_options par;
  ptdp_runtime_options rt;
  ptdp_gpt_data_options dat;
  CHECK(&r, ptdp_train_config_gpt_options(r.config, &gpt));
  CHECK(&r, ptdp_train_config_optimizer_options(r.config, &opt));
  CHECK(&r, ptdp_train_config_parallel_options(r.config, &par));
  CHECK(&r, ptdp_train_config_runtime_options(r.config, &rt));
  CHECK(&r, ptdp_train_config_data_options(r.config, &dat));

  /* The world and its layout. */
  CHECK(&r, ptdp_runtime_create(&rt, &r.runtime));
  CHECK(&r, ptdp_runtime_world(r.runtime, &r.rank, &r.world));
  const int32_t t = par.tensor_model_parallel_size, p = par.pipeline_model_parallel_size;
  const int32_t v = par.virtual_pipeline_model_parallel_size;
  if (r.world % (t * p) != 0)
    fail_msg(&r, "the world of %d ranks is not a multiple of --tensor-model-parallel-size %d x "
                 "--pipeline-model-parallel-size %d", (int)r.world, (int)t, (int)p);
  const int32_t d = r.world / (t * p);

  /* The engine: fp32 on the CPU or on this rank's GPU (--device auto takes the GPU when the
   * build has CUDA and the rank sees one). */
  int32_t have_cuda = 0, gpu = -1;
  CHECK(&r, ptdp_has_feature(PTDP_FEATURE_CUDA, &have_cuda));
  CHECK(&r, ptdp_runtime_gpu(r.runtime, &gpu));
  if (strcmp(set.device, "cuda") == 0) {
    if (!have_cuda) fail_msg(&r, "--device cuda: this build of ptdp has no CUDA support");
    if (gpu < 0) fail_msg(&r, "--device cuda: rank %d sees no GPU", (int)r.rank);
    gpt.device = PTDP_DEVICE_CUDA;
  } else if (strcmp(set.device, "auto") == 0 && have_cuda && gpu >= 0) {
    gpt.device = PTDP_DEVICE_CUDA;
  }

  const int32_t b = set.micro_batch_size;
  const int64_t global_batch = set.global_batch_size > 0 ? set.global_batch_size : (int64_t)b * d;
  if (global_batch % ((int64_t)b * d) != 0)
    fail_msg(&r, "--global-batch-size %lld is not a multiple of --micro-batch-size %d x data-parallel size %d",
             (long long)global_batch, (int)b, (int)d);
  const int32_t m = (int32_t)(global_batch / ((int64_t)b * d));
  const ptdp_schedule_kind kind = v > 1 ? PTDP_SCHEDULE_INTERLEAVED_1F1B : set.pipeline_schedule;

  CHECK(&r, ptdp_groups_create(r.runtime, &par, &r.groups));
  int32_t tp_rank = 0, pp_rank = 0, dp_rank = 0;
  CHECK(&r, ptdp_groups_rank(r.groups, PTDP_GROUP_TENSOR, &tp_rank));
  CHECK(&r, ptdp_groups_rank(r.groups, PTDP_GROUP_PIPELINE, &pp_rank));
  CHECK(&r, ptdp_groups_rank(r.groups, PTDP_GROUP_DATA, &dp_rank));
  r.logger = pp_rank == p - 1 && tp_rank == 0 && dp_rank == 0;
  r.progress = r.logger && show_progress();

  CHECK_ALL(&r, ptdp_model_create(r.groups, &gpt, &r.model));
  CHECK_ALL(&r, ptdp_optimizer_create(r.model, &opt, &r.optimizer));
  CHECK_ALL(&r, ptdp_schedule_create(kind, p, m, v, &r.schedule));

  /* Samples: as many as the run reads, counted with the real global batch. */
  const int64_t evals = set.eval_interval > 0 ? set.train_iters / set.eval_interval + 1 : 0;
  dat.num_samples[0] = set.train_iters * global_batch;
  dat.num_samples[1] = evals * set.eval_iters * global_batch;
  dat.num_samples[2] = 0;
  CHECK_ALL(&r, ptdp_gpt_data_create(&dat, &r.data));
  int64_t valid_samples = 0;
  CHECK(&r, ptdp_gpt_data_num_samples(r.data, PTDP_SPLIT_VALID, &valid_samples));
  const int do_eval = set.eval_interval > 0 && set.eval_iters > 0 && valid_samples > 0;

  const size_t ids = (size_t)m * (size_t)b * (size_t)gpt.seq_length;
  r.tokens = malloc(ids * sizeof(int32_t));
  r.labels = malloc(ids * sizeof(int32_t));
  if (!r.tokens || !r.labels) fail_msg(&r, "out of memory for %zu token ids", ids);

  /* Resume. */
  int64_t iteration = 0, consumed = 0, consumed_valid = 0;
  if (set.load) {
    if (file_exists(set.load, "latest_checkpointed_iteration.txt")) {
      ptdp_checkpoint_state state;
      CHECK(&r, ptdp_checkpoint_state_init(&state));
      CHECK_ALL(&r, ptdp_checkpoint_load(set.load, r.model, r.optimizer, &state));
      iteration = state.iteration;
      consumed = state.consumed_train_samples;
      consumed_valid = state.consumed_valid_samples;
      if (r.logger) printf(" loaded checkpoint from %s at iteration %lld\n", set.load, (long long)iteration);
    } else if (r.logger) {
      printf(" no checkpoint found in %s: training from scratch\n", set.load);
    }
  }

  const int64_t first_iteration = iteration;
  if (r.logger && set.log_json) {
    r.json = fopen(set.log_json, iteration > 0 ? "a" : "w");
    if (!r.json) fail_msg(&r, "--log-json %s: cannot open for writing", set.log_json);
  }
  if (r.logger) {
    printf(" ptdp-train %s on %s: world %d = t %d x p %d x d %d, v %d, schedule %d, %d microbatches of %d, "
           "global batch %lld, seq %d, %d layers, hidden %d, heads %d\n",
           ptdp_version(), gpt.device == PTDP_DEVICE_CUDA ? "cuda" : "cpu", (int)r.world, (int)t, (int)p, (int)d,
           (int)v, (int)kind, (int)m, (int)b,
           (long long)global_batch, (int)gpt.seq_length, (int)gpt.num_layers, (int)gpt.hidden_size,
           (int)gpt.num_attention_heads);
    fflush(stdout);
  }

  const double flops = iteration_flops(&gpt, global_batch);
  const int64_t trace_iteration = set.profile_trace ? (set.train_iters - iteration > 1 ? iteration + 1 : iteration) : -1;
  double interval_seconds = 0.0, interval_loss = 0.0;
  int64_t interval_iters = 0, interval_loss_iters = 0, skipped_total = 0, nan_iters = 0, last_saved = -1;
  float last_loss_scale = 1.0f;
  double last_lr = 0.0, last_norm = 0.0;

  while (iteration < set.train_iters) {
    read_share(&r, PTDP_SPLIT_TRAIN, consumed + (int64_t)dp_rank * m * b, m * b);
    ptdp_pipeline_options po;
    CHECK(&r, ptdp_pipeline_options_init(&po));
    if (iteration == trace_iteration) po.trace_path = set.profile_trace;
    ptdp_iteration_result res;
    CHECK(&r, ptdp_train_iteration(r.model, r.optimizer, r.schedule, r.tokens, r.labels, b, iteration, &po, &res));
    ++iteration;
    consumed += global_batch;

    interval_seconds += res.seconds;
    ++interval_iters;
    if (isnan(res.loss)) {
      ++nan_iters;
    } else if (!res.skipped) {
      interval_loss += res.loss;
      ++interval_loss_iters;
    }
    skipped_total = res.skipped_iterations;
    last_loss_scale = res.loss_scale;
    last_lr = res.learning_rate;
    last_norm = res.grad_norm;

    if (r.logger && r.json) {
      fprintf(r.json,
              "{\"iteration\": %lld, \"consumed_samples\": %lld, \"lm_loss\": %.9g, \"learning_rate\": %.9g, "
              "\"grad_norm\": %.9g, \"loss_scale\": %.9g, \"skipped\": %d, \"skipped_iterations\": %lld, "
              "\"elapsed_ms\": %.3f, \"tokens_per_second\": %.1f, \"tflops_per_device\": %.6f, "
              "\"global_batch_size\": %lld, \"mem_high_water_mib\": %.1f}\n",
              (long long)iteration, (long long)consumed, (double)res.loss, res.learning_rate,
              isfinite(res.grad_norm) ? res.grad_norm : -1.0, (double)res.loss_scale, (int)res.skipped,
              (long long)res.skipped_iterations, res.seconds * 1e3,
              res.seconds > 0 ? (double)global_batch * gpt.seq_length / res.seconds : 0.0,
              res.seconds > 0 ? flops / res.seconds / r.world / 1e12 : 0.0, (long long)global_batch,
              mem_high_water_mib());
      fflush(r.json);
    }

    if (r.logger && (iteration % set.log_interval == 0 || iteration == set.train_iters)) {
      const double per_iter = interval_seconds / (double)interval_iters;
      char when[32];
      timestamp(when, sizeof when);
      clear_progress(&r);
      printf(" [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
             "throughput per GPU (TFLOP/s/GPU): %.3f | learning rate: %E | global batch size: %5lld | "
             "lm loss: %E | loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3lld | "
             "number of nan iterations: %3lld | tokens per second: %.1f | mem high-water (MiB): %.1f |\n",
             when, (long long)iteration, (long long)set.train_iters, (long long)consumed, per_iter * 1e3,
             flops / per_iter / r.world / 1e12, last_lr, (long long)global_batch,
             interval_loss_iters > 0 ? interval_loss / (double)interval_loss_iters : NAN, (double)last_loss_scale,
             last_norm, (long long)skipped_total, (long long)nan_iters,
             (double)global_batch * gpt.seq_length / per_iter, mem_high_water_mib());
      fflush(stdout);
      interval_seconds = 0.0;
      interval_loss = 0.0;
      interval_iters = interval_loss_iters = 0;
      nan_iters = 0;
    }
    progress_bar(&r, iteration, set.train_iters);

    if (do_eval && iteration % set.eval_interval == 0) {
      const float loss = evaluate(&r, &consumed_valid, set.eval_iters, global_batch, dp_rank, b, m);
      if (r.logger) {
        clear_progress(&r);
        printf("-----------------------------------------------------------------------------------------\n"
               " validation loss at iteration %lld | lm loss value: %E | lm loss PPL: %E | \n"
               "-----------------------------------------------------------------------------------------\n",
               (long long)iteration, (double)loss, exp((double)loss));
        if (r.json)
          fprintf(r.json, "{\"validation_iteration\": %lld, \"lm_loss\": %.9g, \"lm_loss_ppl\": %.9g}\n",
                  (long long)iteration, (double)loss, exp((double)loss));
        fflush(stdout);
      }
    }
    const int exiting = set.exit_interval > 0 && iteration % set.exit_interval == 0 && iteration < set.train_iters;
    if (set.save && ((set.save_interval > 0 && iteration % set.save_interval == 0) || exiting)) {
      save(&r, set.save, iteration, consumed, consumed_valid);
      last_saved = iteration;
    }
    if (exiting) {
      if (r.logger) printf(" exiting at iteration %lld (--exit-interval %lld)\n", (long long)iteration,
                           (long long)set.exit_interval);
      break;
    }
  }
  if (set.save && iteration > first_iteration && last_saved != iteration) save(&r, set.save, iteration, consumed, consumed_valid);
  clear_progress(&r);
  if (r.logger) {
    printf(" training done: %lld iterations\n", (long long)iteration);
    fflush(stdout);
  }
  cleanup(&r);
  return 0;
}
