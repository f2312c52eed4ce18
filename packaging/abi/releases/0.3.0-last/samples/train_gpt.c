/* Trains a tiny GPT through the ptdp C API under MPI, e.g.
 *
 *   mpirun -np 2 ptdp_sample_train_gpt        (data parallel: d = 2)
 *   mpirun -np 4 ptdp_sample_train_gpt 2 2    (t = 2, p = 2)
 *
 * Arguments: [t [p]]; d = world / (t * p). Every rank builds its share of the model, reads its
 * share of each global batch of mock samples, and runs one training iteration per step through
 * a 1F1B pipeline schedule. The first rank of the last stage prints the loss (mock tokens are
 * uniform, so it stays near ln 256 = 5.55: see ptdp-train --text-file for learning). */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    ptdp_status st_ = (call);                                                                        \
    if (st_ != PTDP_SUCCESS) {                                                                       \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ptdp_status_string(st_), ptdp_last_error());     \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

int main(int argc, char** argv) {
  const int32_t t = argc > 1 ? atoi(argv[1]) : 1, p = argc > 2 ? atoi(argv[2]) : 1;
  const int32_t b = 2, m = 2, steps = 8; /* microbatch size, microbatches per replica, iterations */

  /* The MPI world (MPI is initialised here unless the caller already did). */
  ptdp_runtime runtime;
  CHECK(ptdp_runtime_create(NULL, &runtime));
  int32_t rank = 0, world = 1;
  CHECK(ptdp_runtime_world(runtime, &rank, &world));
  if (t < 1 || p < 1 || world % (t * p) != 0) {
    fprintf(stderr, "the world of %d ranks is not a multiple of t * p = %d\n", (int)world, (int)(t * p));
    return 2;
  }
  const int32_t d = world / (t * p);

  /* Process groups for (t, p, d), then this rank's share of a 4-layer GPT. */
  ptdp_parallel_options layout;
  CHECK(ptdp_parallel_options_init(&layout));
  layout.tensor_model_parallel_size = t;
  layout.pipeline_model_parallel_size = p;
  ptdp_groups groups;
  CHECK(ptdp_groups_create(runtime, &layout, &groups));
  int32_t dp_rank = 0, pp_rank = 0, tp_rank = 0;
  CHECK(ptdp_groups_rank(groups, PTDP_GROUP_DATA, &dp_rank));
  CHECK(ptdp_groups_rank(groups, PTDP_GROUP_PIPELINE, &pp_rank));
  CHECK(ptdp_groups_rank(groups, PTDP_GROUP_TENSOR, &tp_rank));

  ptdp_gpt_options gpt;
  CHECK(ptdp_gpt_options_init(&gpt));
  gpt.num_layers = 4;
  gpt.hidden_size = 32;
  gpt.num_attention_heads = 4;
  gpt.seq_length = 16;
  gpt.vocab_size = 256;
  ptdp_model model;
  CHECK(ptdp_model_create(groups, &gpt, &model));

  ptdp_optimizer_options opt;
  CHECK(ptdp_optimizer_options_init(&opt));
  opt.lr = 3e-3;
  ptdp_optimizer optimizer;
  CHECK(ptdp_optimizer_create(model, &opt, &optimizer));
  ptdp_schedule schedule;
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, p, m, 1, &schedule));

  /* Mock samples, the same on every rank; replica r reads samples r*m*b ... of each batch. */
  ptdp_gpt_data_options dopt;
  CHECK(ptdp_gpt_data_options_init(&dopt));
  dopt.seq_length = gpt.seq_length;
  dopt.vocab_size = gpt.vocab_size;
  dopt.num_samples[0] = (int64_t)steps * m * b * d;
  ptdp_gpt_data data;
  CHECK(ptdp_gpt_data_create(&dopt, &data));
  int32_t* tokens = malloc(sizeof(int32_t) * (size_t)(m * b * gpt.seq_length));
  int32_t* labels = malloc(sizeof(int32_t) * (size_t)(m * b * gpt.seq_length));
  if (!tokens || !labels) return 1;

  for (int64_t it = 0; it < steps; ++it) {
    const int64_t first = it * m * b * d + (int64_t)dp_rank * m * b;
    CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, first, m * b, tokens, labels));
    ptdp_iteration_result r;
    CHECK(ptdp_train_iteration(model, optimizer, schedule, tokens, labels, b, it, NULL, &r));
    if (pp_rank == p - 1 && tp_rank == 0 && dp_rank == 0)
      printf("iteration %lld: loss %.4f, grad norm %.3f\n", (long long)it + 1, (double)r.loss, r.grad_norm);
  }

  free(tokens);
  free(labels);
  CHECK(ptdp_gpt_data_destroy(data));
  CHECK(ptdp_schedule_destroy(schedule));
  CHECK(ptdp_optimizer_destroy(optimizer));
  CHECK(ptdp_model_destroy(model));
  CHECK(ptdp_groups_destroy(groups));
  CHECK(ptdp_runtime_destroy(runtime));
  return 0;
}
