/* ptdp's Muon training of a model imported from a Hugging Face directory, for
 * test_muon_torch.py to compare with torch.optim.Muon + AdamW (C API only). Under mpiexec -n N:
 *
 *   muon_probe HF_DIR TOKENS.i32 LABELS.i32 BATCH SEQ ITERS T SETTINGS OUT_LOSSES.f32 OUT_HF_DIR
 *
 * imports the model at (T, 1, N / T) with seq_length SEQ and no dropout, creates a Muon optimizer
 * (ptdp_optimizer_options, PTDP_OPTIMIZER_MUON) from SETTINGS, comma-separated key=value pairs:
 * lr, wd (weight decay), momentum, nesterov (0/1), steps, coefficients (0 quintic, 1 simple,
 * 2 polar_express, 3 aol), precision (0 highest, 1 high, 2 medium), scale (0 spectral,
 * 1 unit_rms_norm, 2 shape_scaling), extra (the extra scale factor), tp (0 distributed,
 * 1 duplicated, 2 blockwise), dist (the distributed optimizer, 0/1), clip (clip_grad); then runs
 * ITERS training iterations, each one microbatch of the BATCH samples of TOKENS / LABELS (int32,
 * BATCH * SEQ each, the same batch every iteration unless the files hold ITERS batches), and world
 * rank 0 writes every iteration's loss (float32) to OUT_LOSSES; the trained model is written to
 * OUT_HF_DIR with ptdp_hf_save. Exit status 0, or 1 naming the failure, 2 for bad usage.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    ptdp_status st_ = (call);                                                                         \
    if (st_ != PTDP_SUCCESS) {                                                                        \
      fprintf(stderr, "muon_probe: %s: %s: %s\n", #call, ptdp_status_string(st_), ptdp_last_error()); \
      status = 1;                                                                                     \
      goto done;                                                                                      \
    }                                                                                                 \
  } while (0)

/* Reads `count` int32 values; returns how many batches of `per` the file held (0 on error). */
static size_t read_ids(const char* path, int32_t** out, size_t per, size_t most) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  int32_t* v = malloc(per * most * sizeof(int32_t));
  size_t got = v ? fread(v, sizeof(int32_t), per * most, f) : 0;
  fclose(f);
  if (got == 0 || got % per != 0) {
    free(v);
    return 0;
  }
  *out = v;
  return got / per;
}

/* Applies one key=value of SETTINGS; returns 0 for an unknown key. */
static int apply(ptdp_optimizer_options* o, const char* key, double v) {
  if (!strcmp(key, "lr")) o->lr = v;
  else if (!strcmp(key, "wd")) o->weight_decay = (float)v;
  else if (!strcmp(key, "momentum")) o->muon_momentum = (float)v;
  else if (!strcmp(key, "nesterov")) o->muon_nesterov = (int32_t)v;
  else if (!strcmp(key, "steps")) o->muon_num_ns_steps = (int32_t)v;
  else if (!strcmp(key, "coefficients")) o->muon_coefficient_type = (ptdp_ns_coefficients)(int)v;
  else if (!strcmp(key, "precision")) o->muon_fp32_matmul_prec = (ptdp_ns_precision)(int)v;
  else if (!strcmp(key, "scale")) o->muon_scale_mode = (ptdp_muon_scale_mode)(int)v;
  else if (!strcmp(key, "extra")) o->muon_extra_scale_factor = (float)v;
  else if (!strcmp(key, "tp")) o->muon_tp_mode = (ptdp_muon_tp_mode)(int)v;
  else if (!strcmp(key, "dist")) o->use_distributed_optimizer = (int32_t)v;
  else if (!strcmp(key, "clip")) o->clip_grad = (float)v;
  else return 0;
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 11) {
    fprintf(stderr, "usage: muon_probe HF_DIR TOKENS.i32 LABELS.i32 BATCH SEQ ITERS T SETTINGS OUT_LOSSES.f32 "
                    "OUT_HF_DIR\n");
    return 2;
  }
  const char *dir = argv[1], *settings = argv[8], *loss_path = argv[9], *out_dir = argv[10];
  const int batch = atoi(argv[4]), seq = atoi(argv[5]), iters = atoi(argv[6]), t = atoi(argv[7]);
  int status = 0;
  ptdp_runtime rt = NULL;
  ptdp_groups groups = NULL;
  ptdp_model model = NULL;
  ptdp_optimizer optimizer = NULL;
  ptdp_schedule schedule = NULL;
  int32_t *tokens = NULL, *labels = NULL;
  float* losses = NULL;
  int32_t rank = 0, world = 1;
  if (batch <= 0 || seq <= 0 || iters <= 0 || t <= 0) {
    fprintf(stderr, "muon_probe: BATCH, SEQ, ITERS and T must be positive\n");
    return 2;
  }
  const size_t per = (size_t)batch * (size_t)seq;
  const size_t nt = read_ids(argv[2], &tokens, per, (size_t)iters), nl = read_ids(argv[3], &labels, per, (size_t)iters);
  if (nt == 0 || nt != nl) {
    fprintf(stderr, "muon_probe: %s and %s must hold the same number (1..ITERS) of %zu-id batches\n", argv[2],
            argv[3], per);
    free(tokens);
    free(labels);
    return 1;
  }
  losses = calloc((size_t)iters, sizeof(float));

  CHECK(ptdp_runtime_create(NULL, &rt));
  CHECK(ptdp_runtime_world(rt, &rank, &world));
  ptdp_gpt_options o;
  CHECK(ptdp_gpt_options_init(&o));
  CHECK(ptdp_hf_read_options(dir, &o, NULL));
  ptdp_parallel_options po;
  CHECK(ptdp_parallel_options_init(&po));
  po.tensor_model_parallel_size = t;
  CHECK(ptdp_groups_create(rt, &po, &groups));
  o.seq_length = seq;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  CHECK(ptdp_model_create(groups, &o, &model));
  CHECK(ptdp_hf_load(dir, model));

  ptdp_optimizer_options opt;
  CHECK(ptdp_optimizer_options_init(&opt));
  opt.optimizer = PTDP_OPTIMIZER_MUON;
  {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", settings);
    for (char* item = strtok(buf, ","); item; item = strtok(NULL, ",")) {
      char* eq = strchr(item, '=');
      if (!eq) {
        fprintf(stderr, "muon_probe: setting '%s' is not key=value\n", item);
        status = 2;
        goto done;
      }
      *eq = '\0';
      if (!apply(&opt, item, atof(eq + 1))) {
        fprintf(stderr, "muon_probe: unknown setting '%s'\n", item);
        status = 2;
        goto done;
      }
    }
  }
  CHECK(ptdp_optimizer_create(model, &opt, &optimizer));
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &schedule));
  for (int it = 0; it < iters; ++it) {
    const size_t k = (size_t)it % nt;
    ptdp_iteration_result r;
    CHECK(ptdp_train_iteration(model, optimizer, schedule, tokens + k * per, labels + k * per, batch, it, NULL, &r));
    losses[it] = r.loss;
  }
  if (rank == 0) {
    FILE* out = fopen(loss_path, "wb");
    if (!out || fwrite(losses, sizeof(float), (size_t)iters, out) != (size_t)iters || fclose(out) != 0) {
      fprintf(stderr, "muon_probe: cannot write %s\n", loss_path);
      status = 1;
      goto done;
    }
  }
  CHECK(ptdp_hf_save(out_dir, model, NULL));

done:
  ptdp_schedule_destroy(schedule);
  ptdp_optimizer_destroy(optimizer);
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(rt);
  free(tokens);
  free(labels);
  free(losses);
  return status;
}
