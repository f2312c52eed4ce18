/* The logits of a model imported from a Hugging Face directory, for test_hf_transformers.py to
 * compare with transformers' (the Python bindings are regenerated separately; this probe uses
 * the C API only). Under mpiexec -n N with tensor-parallel size T (N a multiple of T):
 *
 *   test_hf_probe HF_DIR TOKENS.i32 BATCH SEQ T OUT.f32
 *
 * reads BATCH * SEQ int32 token ids, imports the model at (T, 1, N / T) with seq_length SEQ and
 * no dropout (ptdp_hf_read_options, ptdp_model_create, ptdp_hf_load), and world rank 0 writes the
 * logits [BATCH, SEQ, V] as float32 (ptdp_model_logits). Exit status 0, or 1 naming the failure.
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
  if (argc != 7) {
    fprintf(stderr, "usage: test_hf_probe HF_DIR TOKENS.i32 BATCH SEQ T OUT.f32\n");
    return 2;
  }
  const char *dir = argv[1], *tokens_path = argv[2], *out_path = argv[6];
  const int batch = atoi(argv[3]), seq = atoi(argv[4]), t = atoi(argv[5]);
  int status = 0;
  ptdp_runtime rt = NULL;
  ptdp_groups groups = NULL;
  ptdp_model model = NULL;
  int32_t* tokens = NULL;
  float* logits = NULL;
  int32_t rank = 0, world = 1;
  size_t n = 0;

  if (batch <= 0 || seq <= 0 || t <= 0) {
    fprintf(stderr, "test_hf_probe: BATCH, SEQ and T must be positive\n");
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
  /* MoE with t > 1 runs with sequence parallelism, as Megatron requires. */
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

done:
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(rt);
  free(tokens);
  free(logits);
  return status;
}
