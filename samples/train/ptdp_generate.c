/* ptdp-generate: continues a prompt with a model loaded from a ptdp-train checkpoint, on one
 * process (the checkpoint is re-sharded to t = p = d = 1 whatever layout saved it), with a
 * key/value cache (--no-kv-cache recomputes the window for every token: the same tokens).
 *
 *   ptdp-generate --load ckpt --prompt "The licenses for most software" --max-new-tokens 200 \
 *       [--top-k 40] [--temperature 0.8] [--seed 1234] [--no-kv-cache]
 *
 * The prompt is read as bytes (the byte-level tokenizer of --text-file); models trained on
 * pre-tokenized data take --prompt-ids "id id ..." and print token ids.
 * Exit status: 0 on success, 1 on a failure, 2 on bad flags.
 */
#include <errno.h>
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* usage =
    "usage: ptdp-generate --load DIR (--prompt TEXT | --prompt-ids \"ID ID ...\") [flags]\n"
    "  --load DIR             checkpoint directory written by ptdp-train --save (required)\n"
    "  --prompt TEXT          prompt, one token per byte (models trained with --text-file)\n"
    "  --prompt-ids IDS       prompt as space-separated token ids (pre-tokenized data)\n"
    "  --max-new-tokens N     tokens to generate (default 64)\n"
    "  --top-k K              sample among the K most likely tokens; 0 = all, 1 = greedy (default 0)\n"
    "  --temperature T        divides the logits, > 0 (default 1.0)\n"
    "  --seed S               sampling seed (default 1234)\n"
    "  --no-kv-cache          recompute the whole window for every token (the same tokens, slower)\n"
    "  --help                 this text\n";

static int bad_flag(const char* flag, const char* value, const char* why) {
  fprintf(stderr, "ptdp-generate: %s: '%s' %s\n%s", flag, value ? value : "", why, usage);
  return 2;
}

static int parse_long(const char* s, long long* out) {
  char* end = NULL;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return 0;
  *out = v;
  return 1;
}

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    ptdp_status st_ = (call);                                                                          \
    if (st_ != PTDP_SUCCESS) {                                                                         \
      fprintf(stderr, "ptdp-generate: %s: %s: %s\n", #call, ptdp_status_string(st_), ptdp_last_error()); \
      status = 1;                                                                                      \
      goto done;                                                                                       \
    }                                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  const char *load = NULL, *prompt = NULL, *prompt_ids = NULL;
  ptdp_generate_options gen;
  ptdp_generate_options_init(&gen);
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (strcmp(flag, "--no-kv-cache") == 0) {
      gen.no_kv_cache = 1;
      continue;
    }
    if (i + 1 >= argc) return bad_flag(flag, NULL, "needs a value (or is unknown)");
    const char* value = argv[++i];
    long long n = 0;
    if (strcmp(flag, "--load") == 0) {
      load = value;
    } else if (strcmp(flag, "--prompt") == 0) {
      prompt = value;
    } else if (strcmp(flag, "--prompt-ids") == 0) {
      prompt_ids = value;
    } else if (strcmp(flag, "--max-new-tokens") == 0) {
      if (!parse_long(value, &n) || n < 0 || n > 1000000) return bad_flag(flag, value, "is not an integer in [0, 1000000]");
      gen.max_new_tokens = (int32_t)n;
    } else if (strcmp(flag, "--top-k") == 0) {
      if (!parse_long(value, &n) || n < 0 || n > 1000000000) return bad_flag(flag, value, "is not an integer >= 0");
      gen.top_k = (int32_t)n;
    } else if (strcmp(flag, "--seed") == 0) {
      if (!parse_long(value, &n) || n < 0) return bad_flag(flag, value, "is not an integer >= 0");
      gen.seed = (uint64_t)n;
    } else if (strcmp(flag, "--temperature") == 0) {
      char* end = NULL;
      const double tv = strtod(value, &end);
      if (end == value || *end != '\0' || !(tv > 0.0) || tv > 1e6) return bad_flag(flag, value, "is not a number > 0");
      gen.temperature = (float)tv;
    } else {
      return bad_flag(flag, value, "unknown flag");
    }
  }
  if (!load) return bad_flag("--load", "", "is required");
  if ((prompt == NULL) == (prompt_ids == NULL)) return bad_flag("--prompt", "", "give exactly one of --prompt and --prompt-ids");

  int status = 0;
  ptdp_runtime runtime = NULL;
  ptdp_groups groups = NULL;
  ptdp_model model = NULL;
  int32_t *ids = NULL, *out = NULL;
  int32_t length = 0, count = 0;

  /* Tokens of the prompt. */
  const size_t cap = prompt ? strlen(prompt) + 1 : strlen(prompt_ids) / 2 + 2;
  ids = malloc(cap * sizeof(int32_t));
  out = malloc(((size_t)gen.max_new_tokens + 1) * sizeof(int32_t));
  if (!ids || !out) {
    fprintf(stderr, "ptdp-generate: out of memory\n");
    status = 1;
    goto done;
  }
  if (prompt) {
    for (const unsigned char* c = (const unsigned char*)prompt; *c; ++c) ids[length++] = *c;
  } else {
    char* copy = strdup(prompt_ids);
    for (char* tok = strtok(copy, " ,"); tok; tok = strtok(NULL, " ,")) {
      long long n = 0;
      if (!parse_long(tok, &n) || n < 0 || n > 2147483647LL) {
        free(copy);
        status = bad_flag("--prompt-ids", tok, "is not a token id");
        goto done;
      }
      ids[length++] = (int32_t)n;
    }
    free(copy);
  }
  if (length == 0) {
    status = bad_flag("--prompt", "", "is empty");
    goto done;
  }

  /* One process, no MPI: the model the checkpoint describes, without dropout. */
  ptdp_runtime_options ro;
  CHECK(ptdp_runtime_options_init(&ro));
  ro.use_mpi = 0;
  CHECK(ptdp_runtime_create(&ro, &runtime));
  ptdp_parallel_options po;
  CHECK(ptdp_parallel_options_init(&po));
  CHECK(ptdp_groups_create(runtime, &po, &groups));
  ptdp_gpt_options g;
  int64_t iteration = 0;
  CHECK(ptdp_checkpoint_read_options(load, &g, &iteration));
  g.hidden_dropout = 0.0f;
  g.attention_dropout = 0.0f;
  CHECK(ptdp_model_create(groups, &g, &model));
  CHECK(ptdp_checkpoint_load(load, model, NULL, NULL));
  fprintf(stderr, "ptdp-generate: %d layers, hidden %d, vocabulary %d, context %d, from iteration %lld of %s\n",
          (int)g.num_layers, (int)g.hidden_size, (int)g.vocab_size, (int)g.seq_length, (long long)iteration, load);

  CHECK(ptdp_model_generate(model, ids, length, &gen, out, gen.max_new_tokens, &count));
  if (prompt) {
    fputs(prompt, stdout);
    for (int32_t i = 0; i < count; ++i) {
      if (out[i] < 256) putchar(out[i]);
      else printf("<%d>", (int)out[i]);
    }
    putchar('\n');
  } else {
    for (int32_t i = 0; i < length; ++i) printf("%d ", (int)ids[i]);
    for (int32_t i = 0; i < count; ++i) printf("%d%s", (int)out[i], i + 1 < count ? " " : "\n");
  }

done:
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(runtime);
  free(ids);
  free(out);
  return status;
}
