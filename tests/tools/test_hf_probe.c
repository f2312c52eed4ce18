/* The logits of a model imported from a Hugging Face directory, for test_hf_transformers.py to
 * compare with transformers' (the Python bindings are regenerated separately; this probe uses
 * the C API only). Under mpiexec -n N with tensor-parallel size T (N a multiple of T):
 *
 *   test_hf_probe HF_DIR TOKENS.i32 BATCH SEQ T OUT.f32 [E [ETP]]
 *
 * reads BATCH * SEQ int32 token ids, imports the model at (T, 1, N / T) with seq_length SEQ and
 * no dropout (ptdp_hf_read_options, ptdp_model_create, ptdp_hf_load), and world rank 0 writes the
 * logits [BATCH, SEQ, V] as float32 (ptdp_model_logits). A mixture of experts is imported with
 * its experts split over E expert-parallel ranks (default 1), each expert's linears over ETP
 * ranks (default 0: T), and with sequence parallelism when T > 1, which MoE needs. Exit status
 * 0, or 1 naming the failure.
 *
 * With PTDP_HF_PROBE_MTP_OUT=FILE and a model with multi-token prediction (DeepSeek's MTP layers),
 * it then runs one training iteration on the same tokens (labels: the next token, the last
 * position ignored; one microbatch of BATCH) and world rank 0 writes each depth's MTP loss
 * (ptdp_model_mtp_losses, computed before the update) to FILE as float32.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    ptdp_status st_ = (call);                                                                            \
    if (st_ != PTDP_SUCCESS) {                                                                           \
      fprintf(stderr, "test_hf_probe: %s: %s: %s\n", #call, ptdp_status_string(st_), ptdp_last_error()); \
      status = 1;                                                                                        \
      goto done;                                                                                         \
    }                                                                                                    \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 7 || argc > 9) {
    fprintf(stderr, "usage: test_hf_probe HF_DIR TOKENS.i32 BATCH SEQ T OUT.f32 [E [ETP]]\n");
    return 2;
  }
  const char *dir = argv[1], *tokens_path = argv[2], *out_path = argv[6];
  const int batch = atoi(argv[3]), seq = atoi(argv[4]), t = atoi(argv[5]);
  const int e = argc > 7 ? atoi(argv[7]) : 1, etp = argc > 8 ? atoi(argv[8]) : 0;
  int status = 0;
  ptdp_runtime rt = NULL;
  ptdp_groups groups = NULL;
  ptdp_model model = NULL;
  ptdp_optimizer optimizer = NULL;
  ptdp_schedule schedule = NULL;
  int32_t* tokens = NULL;
  int32_t* labels = NULL;
  float* logits = NULL;
  int32_t rank = 0, world = 1;
  size_t n = 0;

  if (batch <= 0 || seq <= 0 || t <= 0 || e <= 0 || etp < 0) {
    fprintf(stderr, "test_hf_probe: BATCH, SEQ, T and E must be positive, ETP >= 0\n");
    return 2;
  }
  n = (size_t)batch * (size_t)seq;
  tokens = malloc(n * sizeof(int32_t));
  FILE* f = fopen(tokens_path, "rb");
  if (!tokens || !f || fread(tokens, sizeof(int32_t), n, f) != n) {
    fprintf(stderr, "test_hf_probe: cannot read %zu token ids from %s\n", n, tokens_path);
    if (f) fclose(f);
    free(tokens);
    return 1;
  }
  fclose(f);

  CHECK(ptdp_runtime_create(NULL, &rt));
  CHECK(ptdp_runtime_world(rt, &rank, &world));
  ptdp_gpt_options o;
  CHECK(ptdp_gpt_options_init(&o));
  CHECK(ptdp_hf_read_options(dir, &o, NULL));
  ptdp_parallel_options po;
  CHECK(ptdp_parallel_options_init(&po));
  po.tensor_model_parallel_size = t;
  po.expert_model_parallel_size = e;
  po.expert_tensor_parallel_size = etp;
  /* Megatron's MoE layer with t > 1 works on the s / t tokens of sequence parallelism; a dense
   * model keeps the layout it was always compared at. */
  po.sequence_parallel = o.num_experts > 0 && t > 1;
  CHECK(ptdp_groups_create(rt, &po, &groups));
  o.seq_length = seq;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  CHECK(ptdp_model_create(groups, &o, &model));
  CHECK(ptdp_hf_load(dir, model));
  const size_t count = n * (size_t)o.vocab_size;
  logits = malloc(count * sizeof(float));
  if (!logits) {
    fprintf(stderr, "test_hf_probe: out of memory\n");
    status = 1;
    goto done;
  }
  CHECK(ptdp_model_logits(model, tokens, batch, logits, count * sizeof(float)));
  if (rank == 0) {
    FILE* out = fopen(out_path, "wb");
    if (!out || fwrite(logits, sizeof(float), count, out) != count || fclose(out) != 0) {
      fprintf(stderr, "test_hf_probe: cannot write %s\n", out_path);
      status = 1;
    }
  }
  const char* mtp_path = getenv("PTDP_HF_PROBE_MTP_OUT");
  if (mtp_path && o.mtp_num_layers > 0 && status == 0) {
    labels = malloc(n * sizeof(int32_t));
    if (!labels) {
      status = 1;
      goto done;
    }
    for (size_t i = 0; i < n; ++i) labels[i] = (i + 1) % (size_t)seq == 0 ? PTDP_IGNORE_INDEX : tokens[i + 1];
    ptdp_optimizer_options opt;
    CHECK(ptdp_optimizer_options_init(&opt));
    CHECK(ptdp_optimizer_create(model, &opt, &optimizer));
    CHECK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &schedule));
    ptdp_iteration_result r;
    CHECK(ptdp_train_iteration(model, optimizer, schedule, tokens, labels, batch, 0, NULL, &r));
    float mtp[8];
    int32_t depths = 0;
    CHECK(ptdp_model_mtp_losses(model, mtp, 8, &depths));
    if (rank == 0) {
      FILE* out = fopen(mtp_path, "wb");
      if (!out || fwrite(mtp, sizeof(float), (size_t)depths, out) != (size_t)depths || fclose(out) != 0) {
        fprintf(stderr, "test_hf_probe: cannot write %s\n", mtp_path);
        status = 1;
      }
    }
  }

done:
  ptdp_schedule_destroy(schedule);
  ptdp_optimizer_destroy(optimizer);
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(rt);
  free(tokens);
  free(labels);
  free(logits);
  return status;
}
