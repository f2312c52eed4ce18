/* Every function of a published release that fills a struct for its caller, called as a
 * program built against that release calls it: compiled against the release's ptdp.h
 * (packaging/abi/releases/RELEASE/include), linked to its symbol versions, run with today's
 * libptdp.so.0 (tests/packaging/run_release_program.sh).
 *
 * Each struct lives in a buffer of guard bytes, as an uninitialised struct on an old program's
 * stack: the call must succeed, write nothing past the release's sizeof (the guard bytes that
 * follow it stay intact), set a struct_size no larger than that sizeof, and fill the fields
 * with the values the release documented (defaults, or what the command line or the model
 * says). The functions that take the room the caller has from struct_size get it set, as that
 * release's documentation told its programs to.
 *
 * PTDP_VERSION_MINOR selects the functions of 0.1.0, 0.2.0 and 0.3.0; PTDP_RELEASE_0_3_LAST
 * (the last header that carried 0.3.0, 0d1f475) adds those it declared. Exit status 0 when
 * every check holds; each failure is printed.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kGuard = 0xA5, kGuardBytes = 256 };

/* Room for any struct of any release and the guard bytes after it, aligned for any field. */
typedef union slot {
  long double align_ld;
  void* align_p;
  int64_t align_i;
  unsigned char bytes[4096];
} slot;

static int failures;

static void fail(const char* what, const char* why) {
  printf("FAIL %s: %s\n", what, why);
  ++failures;
}

/* A slot full of guard bytes: an uninitialised struct followed by the bytes after it. */
static void* guarded(slot* s) {
  memset(s->bytes, kGuard, sizeof s->bytes);
  return s->bytes;
}

/* The call succeeded, left the guard bytes after the struct's `size` bytes (its sizeof in this
 * release) untouched, and set a struct_size in (0, size] when the struct has one. */
static int filled(const char* what, ptdp_status status, const slot* s, size_t size, int has_struct_size) {
  if (status != PTDP_SUCCESS) {
    char why[1024];
    snprintf(why, sizeof why, "%s: %s", ptdp_status_string(status), ptdp_last_error());
    fail(what, why);
    return 0;
  }
  for (size_t i = size; i < size + kGuardBytes; ++i) {
    if (s->bytes[i] != kGuard) {
      char why[256];
      snprintf(why, sizeof why, "wrote byte %zu past the end of this release's %zu-byte struct", i - size, size);
      fail(what, why);
      return 0;
    }
  }
  if (has_struct_size) {
    size_t struct_size;
    memcpy(&struct_size, s->bytes, sizeof struct_size);
    if (struct_size == 0 || struct_size > size) {
      char why[256];
      snprintf(why, sizeof why, "struct_size = %zu, not in (0, %zu]", struct_size, size);
      fail(what, why);
      return 0;
    }
  }
  printf("ok   %s\n", what);
  return 1;
}

/* FILL(TYPE, P, CALL): P points to a TYPE of this release in guard bytes; CALL fills it. */
#define FILL(TYPE, P, CALL)                      \
  slot P##_slot;                                 \
  TYPE* P = (TYPE*)guarded(&P##_slot);           \
  const int P##_ok = filled(#CALL, (CALL), &P##_slot, sizeof(TYPE), 1)

/* The same for a function that reads the room it has from struct_size first. */
#define FILL_SIZED(TYPE, P, CALL)                \
  slot P##_slot;                                 \
  TYPE* P = (TYPE*)guarded(&P##_slot);           \
  P->struct_size = sizeof(TYPE);                 \
  const int P##_ok = filled(#CALL, (CALL), &P##_slot, sizeof(TYPE), 1)

/* The same for a record without struct_size (ptdp_iteration_result has none). */
#define FILL_RECORD(TYPE, P, CALL)               \
  slot P##_slot;                                 \
  TYPE* P = (TYPE*)guarded(&P##_slot);           \
  const int P##_ok = filled(#CALL, (CALL), &P##_slot, sizeof(TYPE), 0)

/* A value the release documented; `ok` says the struct was filled (else it was reported). */
#define EXPECT(ok, cond)                                 \
  do {                                                   \
    if ((ok) && !(cond)) fail(#cond, "does not hold");   \
  } while (0)

#define REQUIRE_OK(call)                                                                      \
  do {                                                                                        \
    ptdp_status st_ = (call);                                                                 \
    if (st_ != PTDP_SUCCESS) {                                                                \
      printf("FAIL %s: %s: %s\n", #call, ptdp_status_string(st_), ptdp_last_error());         \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static const char* const kTrainArgs[] = {
    "ptdp-train",          "--num-layers",        "2",           "--hidden-size",  "32",         "--num-attention-heads",
    "4",                   "--seq-length",        "16",          "--vocab-size",   "128",        "--micro-batch-size",
    "2",                   "--global-batch-size", "4",           "--train-iters",  "2",          "--lr",
    "0.001",               "--mock-data",         "--seed",      "77",             "--log-interval", "1"};
enum { kTrainArgc = (int)(sizeof kTrainArgs / sizeof kTrainArgs[0]) };

/* The getters of a parsed ptdp-train command line. */
static ptdp_train_config config_getters(void) {
  ptdp_train_config config = NULL;
  REQUIRE_OK(ptdp_train_config_parse(kTrainArgc, kTrainArgs, &config));

  FILL(ptdp_train_settings, settings, ptdp_train_config_settings(config, settings));
  EXPECT(settings_ok, settings->micro_batch_size == 2 && settings->global_batch_size == 4);
  EXPECT(settings_ok, settings->train_iters == 2 && settings->log_interval == 1 && settings->seed == 77);
  EXPECT(settings_ok, settings->data_source == PTDP_DATA_MOCK && strcmp(settings->device, "auto") == 0);

  FILL(ptdp_gpt_options, gpt, ptdp_train_config_gpt_options(config, gpt));
  EXPECT(gpt_ok, gpt->num_layers == 2 && gpt->hidden_size == 32 && gpt->num_attention_heads == 4);
  EXPECT(gpt_ok, gpt->seq_length == 16 && gpt->vocab_size == 128 && gpt->seed == 77);

  FILL(ptdp_optimizer_options, opt, ptdp_train_config_optimizer_options(config, opt));
  EXPECT(opt_ok, fabs(opt->lr - 1e-3) < 1e-12 && opt->optimizer == PTDP_OPTIMIZER_ADAM);

  FILL(ptdp_parallel_options, par, ptdp_train_config_parallel_options(config, par));
  EXPECT(par_ok, par->tensor_model_parallel_size == 1 && par->pipeline_model_parallel_size == 1);

  FILL(ptdp_runtime_options, rt, ptdp_train_config_runtime_options(config, rt));
  EXPECT(rt_ok, rt->use_mpi == 1 && rt->verify_collectives == 1);

  FILL(ptdp_gpt_data_options, data, ptdp_train_config_data_options(config, data));
  EXPECT(data_ok, data->source == PTDP_DATA_MOCK && data->seq_length == 16 && data->vocab_size == 128);
  EXPECT(data_ok, data->seed == 77 && data->num_samples[0] == 8);
  return config;
}

/* The *_init functions: each struct's defaults as the release documented them. */
static void init_functions(void) {
  FILL(ptdp_tensor_options, tensor, ptdp_tensor_options_init(tensor));
  EXPECT(tensor_ok, tensor->dtype == PTDP_DTYPE_F32 && tensor->device == PTDP_DEVICE_CPU);

  FILL(ptdp_runtime_options, rt, ptdp_runtime_options_init(rt));
  EXPECT(rt_ok, rt->comm_timeout_s <= 0 && rt->verify_collectives == 1 && rt->use_mpi == 1);

  FILL(ptdp_parallel_options, par, ptdp_parallel_options_init(par));
  EXPECT(par_ok, par->tensor_model_parallel_size == 1 && par->pipeline_model_parallel_size == 1 &&
                     par->virtual_pipeline_model_parallel_size == 1);

  FILL(ptdp_gpt_options, gpt, ptdp_gpt_options_init(gpt));
  EXPECT(gpt_ok, gpt->num_layers > 0 && gpt->hidden_size > 0 && gpt->seed == 1234);

  FILL(ptdp_pipeline_options, pipe, ptdp_pipeline_options_init(pipe));
  EXPECT(pipe_ok, pipe->scatter_gather == 1 && pipe->trace_path == NULL);

  FILL(ptdp_stage_callbacks, callbacks, ptdp_stage_callbacks_init(callbacks));
  EXPECT(callbacks_ok, callbacks->forward == NULL && callbacks->user_data == NULL);

  FILL(ptdp_schedule_costs, costs, ptdp_schedule_costs_init(costs));
  EXPECT(costs_ok, costs->forward == 1.0 && costs->backward == 2.0 && costs->p2p_latency == 0.0);

  FILL(ptdp_optimizer_options, opt, ptdp_optimizer_options_init(opt));
  EXPECT(opt_ok, fabs(opt->lr - 1e-4) < 1e-15 && opt->adam_beta1 == 0.9f && opt->clip_grad == 1.0f);

  FILL(ptdp_gpt_data_options, data, ptdp_gpt_data_options_init(data));
  EXPECT(data_ok, data->source == PTDP_DATA_MOCK && data->seq_length == 32 && data->seed == 1234);

  FILL(ptdp_generate_options, gen, ptdp_generate_options_init(gen));
  EXPECT(gen_ok, gen->max_new_tokens > 0 && gen->temperature > 0);

  FILL(ptdp_checkpoint_state, state, ptdp_checkpoint_state_init(state));
  EXPECT(state_ok, state->iteration == 0 && state->consumed_train_samples == 0);

  FILL(ptdp_plan_options, plan, ptdp_plan_options_init(plan));
  EXPECT(plan_ok, plan->num_layers == 2 && plan->hidden_size == 64 && plan->top == 5);

  FILL(ptdp_cluster, cluster, ptdp_cluster_init(cluster));
  EXPECT(cluster_ok, cluster->gpus_per_node == 8 && cluster->nodes == 1);
#if PTDP_VERSION_MINOR >= 2
  FILL(ptdp_trainer_options, trainer, ptdp_trainer_options_init(trainer));
  EXPECT(trainer_ok, trainer->print_log == 1);
#endif
#ifdef PTDP_RELEASE_0_3_LAST
  FILL(ptdp_tokenizer_options, tok, ptdp_tokenizer_options_init(tok));
  EXPECT(tok_ok, tok->vocab_file == NULL);
  FILL(ptdp_batch_masks, masks, ptdp_batch_masks_init(masks));
  EXPECT(masks_ok, masks->position_ids == NULL && masks->document_starts == NULL);
  FILL(ptdp_hf_save_options, hf, ptdp_hf_save_options_init(hf));
  EXPECT(hf_ok, hf->dtype == PTDP_DTYPE_F32 && hf->max_shard_size == 0);
  FILL(ptdp_preprocess_options, pre, ptdp_preprocess_options_init(pre));
  EXPECT(pre_ok, pre->workers == 1 && strcmp(pre->tokenizer_type, "ByteLevel") == 0);
#endif
}

/* ptdp-plan's functions: the clusters, the parsed command line, a layout. */
static void plan_functions(const char* dir) {
  FILL(ptdp_cluster, preset, ptdp_cluster_preset("dgx-a100", preset));
  EXPECT(preset_ok, preset->gpus_per_node == 8 && strcmp(preset->name, "dgx-a100") == 0);

  char path[4096];
  snprintf(path, sizeof path, "%s/cluster.json", dir);
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    fail("fopen", path);
    return;
  }
  fputs("{\"preset\": \"dgx-a100\", \"nodes\": 2}\n", f);
  fclose(f);
  FILL(ptdp_cluster, loaded, ptdp_cluster_load(path, loaded));
  EXPECT(loaded_ok, loaded->nodes == 2 && loaded->gpus_per_node == 8);

  const char* argv[] = {"ptdp-plan",   "--num-gpus",   "8",  "--num-layers", "4",  "--hidden-size", "256",
                        "--num-attention-heads", "8", "--seq-length", "128", "--vocab-size", "1024",
                        "--global-batch-size", "16"};
  const int32_t argc = (int32_t)(sizeof argv / sizeof argv[0]);
  slot cluster_slot, cli_slot;
  ptdp_cluster* cluster = (ptdp_cluster*)guarded(&cluster_slot);
  ptdp_plan_cli* cli = (ptdp_plan_cli*)guarded(&cli_slot);
  FILL(ptdp_plan_options, options, ptdp_plan_parse_args(argc, argv, options, cluster, cli));
  const int cluster_ok = filled("ptdp_plan_parse_args: cluster", PTDP_SUCCESS, &cluster_slot, sizeof *cluster, 1);
  const int cli_ok = filled("ptdp_plan_parse_args: cli", PTDP_SUCCESS, &cli_slot, sizeof *cli, 1);
  EXPECT(options_ok, options->num_layers == 4 && options->hidden_size == 256 && options->num_gpus == 8);
  EXPECT(cluster_ok, cluster->gpus_per_node == 8);
  EXPECT(cli_ok, cli->help == 0 && cli->json == 0);
  if (!options_ok || !cluster_ok) return;

  ptdp_plan plan = NULL;
  REQUIRE_OK(ptdp_plan_create(options, cluster, &plan));
  FILL_SIZED(ptdp_plan_layout, layout, ptdp_plan_get_layout(plan, 0, layout));
  EXPECT(layout_ok, layout->t * layout->p * layout->d == 8 && layout->memory_total > 0);
  ptdp_plan_destroy(plan);
}

/* A model on one process: training, evaluation and checkpoints. */
static void model_functions(ptdp_train_config config, const char* dir) {
  ptdp_runtime_options rt;
  REQUIRE_OK(ptdp_runtime_options_init(&rt));
  rt.use_mpi = 0;
  ptdp_runtime runtime = NULL;
  REQUIRE_OK(ptdp_runtime_create(&rt, &runtime));
  ptdp_parallel_options par;
  REQUIRE_OK(ptdp_parallel_options_init(&par));
  ptdp_groups groups = NULL;
  REQUIRE_OK(ptdp_groups_create(runtime, &par, &groups));
  ptdp_gpt_options gpt;
  REQUIRE_OK(ptdp_train_config_gpt_options(config, &gpt));
  ptdp_model model = NULL;
  REQUIRE_OK(ptdp_model_create(groups, &gpt, &model));
  ptdp_optimizer_options opt;
  REQUIRE_OK(ptdp_optimizer_options_init(&opt));
  ptdp_optimizer optimizer = NULL;
  REQUIRE_OK(ptdp_optimizer_create(model, &opt, &optimizer));
  const int32_t b = 2, m = 2;
  ptdp_schedule schedule = NULL;
  REQUIRE_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, m, 1, &schedule));

  {
    int32_t count = 0;
    REQUIRE_OK(ptdp_schedule_num_actions(schedule, 0, &count));
    slot s;
    ptdp_action* actions = (ptdp_action*)guarded(&s);
    const ptdp_status st = ptdp_schedule_actions(schedule, 0, actions, count, &count);
    const int ok = filled("ptdp_schedule_actions", st, &s, (size_t)count * sizeof(ptdp_action), 0);
    EXPECT(ok, count == 2 * m && actions[0].microbatch == 0);
  }

  int32_t tokens[2 * 2 * 16], labels[2 * 2 * 16];
  for (int i = 0; i < 2 * 2 * 16; ++i) {
    tokens[i] = (i * 7) % 128;
    labels[i] = (i * 7 + 7) % 128;
  }
  ptdp_pipeline_options po;
  REQUIRE_OK(ptdp_pipeline_options_init(&po));
  {
    FILL_RECORD(ptdp_iteration_result, result, ptdp_train_iteration(model, optimizer, schedule, tokens, labels, b, 0, &po,
                                                               result));
    EXPECT(result_ok, isfinite(result->loss) && result->loss > 0 && !result->skipped);
  }
  {
    float loss = 0.0f;
    REQUIRE_OK(ptdp_model_zero_grad(model));
    REQUIRE_OK(ptdp_model_forward_backward(model, tokens, labels, b, 1, 0, 1.0f, &loss));
    FILL_RECORD(ptdp_iteration_result, result, ptdp_optimizer_step(optimizer, 1, result));
    EXPECT(result_ok, isfinite(loss) && isfinite(result->grad_norm) && result->learning_rate > 0);
    float eval = 0.0f;
    REQUIRE_OK(ptdp_model_evaluate(model, tokens, labels, b, m, &eval));
    EXPECT(result_ok, isfinite(eval) && eval > 0);
  }
#ifdef PTDP_RELEASE_0_3_LAST
  {
    ptdp_batch_masks masks;
    REQUIRE_OK(ptdp_batch_masks_init(&masks));
    FILL_RECORD(ptdp_iteration_result, result, ptdp_train_iteration_masked(model, optimizer, schedule, tokens, labels, &masks,
                                                                      b, 2, &po, result));
    EXPECT(result_ok, isfinite(result->loss) && result->loss > 0);
  }
#endif

  char ckpt[4096];
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint", dir);
  ptdp_checkpoint_state saved;
  REQUIRE_OK(ptdp_checkpoint_state_init(&saved));
  saved.iteration = 2;
  saved.consumed_train_samples = 8;
  REQUIRE_OK(ptdp_checkpoint_save(ckpt, model, optimizer, config, &saved));
  {
    int64_t iteration = -1;
    FILL(ptdp_gpt_options, read, ptdp_checkpoint_read_options(ckpt, read, &iteration));
    EXPECT(read_ok, iteration == 2 && read->num_layers == 2 && read->hidden_size == 32 && read->vocab_size == 128);
  }
  {
    FILL(ptdp_checkpoint_state, state, ptdp_checkpoint_load(ckpt, model, optimizer, state));
    EXPECT(state_ok, state->iteration == 2 && state->consumed_train_samples == 8);
  }
#if PTDP_VERSION_MINOR >= 2
  {
    FILL_SIZED(ptdp_gpt_options, got, ptdp_model_get_options(model, got));
    EXPECT(got_ok, got->num_layers == 2 && got->hidden_size == 32 && got->seq_length == 16);
    FILL_SIZED(ptdp_gpt_options, preset, ptdp_gpt_options_from_preset("gpt2-124m", preset));
    EXPECT(preset_ok, preset->num_layers == 12 && preset->hidden_size == 768);
  }
#endif
#ifdef PTDP_RELEASE_0_3_LAST
  {
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    REQUIRE_OK(ptdp_hf_save(hf, model, NULL));
    ptdp_hf_architecture architecture;
    FILL_SIZED(ptdp_gpt_options, read, ptdp_hf_read_options(hf, read, &architecture));
    EXPECT(read_ok, read->num_layers == 2 && read->hidden_size == 32 && architecture == PTDP_HF_ARCHITECTURE_GPT2);
  }
#endif
  ptdp_schedule_destroy(schedule);
  ptdp_optimizer_destroy(optimizer);
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(runtime);
}

#if PTDP_VERSION_MINOR >= 2
/* The shared training loop's last report. */
static void trainer_functions(ptdp_train_config config) {
  ptdp_trainer_options options;
  REQUIRE_OK(ptdp_trainer_options_init(&options));
  options.print_log = 0;
  ptdp_trainer trainer = NULL;
  REQUIRE_OK(ptdp_trainer_create(config, &options, &trainer));
  REQUIRE_OK(ptdp_trainer_run(trainer));
  FILL_SIZED(ptdp_iteration_report, report, ptdp_trainer_last_report(trainer, report));
  EXPECT(report_ok, report->iteration == 2 && isfinite(report->lm_loss));
  ptdp_trainer_destroy(trainer);
}
#endif

#ifdef PTDP_RELEASE_0_3_LAST
/* ptdp-preprocess-data's function. */
static void preprocess_functions(const char* dir) {
  char input[4096], prefix[4096];
  snprintf(input, sizeof input, "%s/docs.jsonl", dir);
  snprintf(prefix, sizeof prefix, "%s/docs", dir);
  FILE* f = fopen(input, "w");
  if (f == NULL) {
    fail("fopen", input);
    return;
  }
  fputs("{\"text\": \"hello\"}\n{\"text\": \"world!\"}\n", f);
  fclose(f);
  ptdp_preprocess_options options;
  REQUIRE_OK(ptdp_preprocess_options_init(&options));
  const char* inputs[] = {input};
  options.inputs = inputs;
  options.num_inputs = 1;
  options.output_prefix = prefix;
  FILL_SIZED(ptdp_preprocess_result, result, ptdp_preprocess(&options, result));
  EXPECT(result_ok, result->documents == 2 && result->tokens == 11);
}
#endif

int main(void) {
  printf("a program built against ptdp %d.%d.%d%s, running with libptdp %s\n", PTDP_VERSION_MAJOR,
         PTDP_VERSION_MINOR, PTDP_VERSION_PATCH,
#ifdef PTDP_RELEASE_0_3_LAST
         " (its last header)",
#else
         "",
#endif
         ptdp_version());
  char dir[] = "/tmp/ptdp-release-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  ptdp_train_config config = config_getters();
  init_functions();
  plan_functions(dir);
  model_functions(config, dir);
#if PTDP_VERSION_MINOR >= 2
  trainer_functions(config);
#endif
#ifdef PTDP_RELEASE_0_3_LAST
  preprocess_functions(dir);
#endif
  ptdp_train_config_destroy(config);
  char command[4200];
  snprintf(command, sizeof command, "rm -rf '%s'", dir);
  if (system(command) != 0) printf("note: could not remove %s\n", dir);
  if (failures > 0) {
    printf("%d check(s) failed\n", failures);
    return 1;
  }
  printf("every struct-filling function of this release wrote within its struct\n");
  return 0;
}
