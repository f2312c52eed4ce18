/* ptdp-generate: continues a prompt with a model loaded from a ptdp-train checkpoint, on one
 * process (the checkpoint is re-sharded to t = p = d = 1 whatever layout saved it), with a
 * key/value cache (--no-kv-cache recomputes the window for every token: the same tokens).
 *
 *   ptdp-generate --load ckpt --prompt "The licenses for most software" --max-new-tokens 200 \
 *       [--top-k 40] [--temperature 0.8] [--seed 1234] [--no-kv-cache] \
 *       [--tokenizer-type NAME --vocab-file F --merge-file F --tokenizer-model F --vocab-size N]
 *
 * --prompt is encoded with the tokenizer the flags name, or else the one the checkpoint was
 * trained with (its --tokenizer-type and files, or one token per byte for --text-file); the
 * prompt and its continuation are printed as text, which stops at the end-of-document token.
 * Ids the tokenizer does not know (the model's padded vocabulary) are printed as <ID>.
 * --prompt-ids "id id ..." takes and prints token ids.
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
    "  --prompt TEXT          prompt text, encoded with the tokenizer (the flags below, or the one the\n"
    "                         checkpoint was trained with); prints text up to the end-of-document token\n"
    "  --prompt-ids IDS       prompt as space-separated token ids; prints ids\n"
    "  --max-new-tokens N     tokens to generate (default 64)\n"
    "  --top-k K              sample among the K most likely tokens; 0 = all, 1 = greedy (default 0)\n"
    "  --temperature T        divides the logits, > 0 (default 1.0)\n"
    "  --seed S               sampling seed (default 1234)\n"
    "  --no-kv-cache          recompute the whole window for every token (the same tokens, slower)\n"
    "  --tokenizer-type NAME  ByteLevel, NullTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer or\n"
    "                         SentencePieceTokenizer (default: the checkpoint's)\n"
    "  --vocab-file PATH      GPT2BPETokenizer's vocab.json\n"
    "  --merge-file PATH      GPT2BPETokenizer's merges.txt\n"
    "  --tokenizer-model PATH tokenizer.json or SentencePiece .model\n"
    "  --vocab-size N         NullTokenizer's vocabulary size\n"
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

static const char* const tokenizer_names[] = {"ByteLevel", "NullTokenizer", "GPT2BPETokenizer", "HuggingFaceTokenizer",
                                              "SentencePieceTokenizer"};

/* Writes s[0, n) to stdout as valid UTF-8: each ill-formed subsequence (its maximal subpart, where
 * Python's errors="replace" and Rust's from_utf8_lossy, so Megatron's and Hugging Face's decoders,
 * cut it) becomes one U+FFFD. A model can end its text inside a character or pick byte tokens that
 * form none; ptdp_tokenizer_decode returns those bytes, the terminal gets what the references print. */
static void put_utf8_lossy(const unsigned char* s, size_t n) {
  static const char replacement[] = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      putchar(c);
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = 1;
    while (k < len && i + k < n) {
      const unsigned char d = s[i + k];
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) break;
      ++k;
    }
    if (len > 0 && k == len) {
      fwrite(s + i, 1, len, stdout);
    } else {
      fputs(replacement, stdout);
    }
    i += k;
  }
}

/* Writes the text of ids[0, count) to stdout: the tokenizer's decoding of each run of ids it
 * knows, "<ID>" for the others (a model's vocabulary is padded past the tokenizer's), as valid
 * UTF-8 (put_utf8_lossy). The text of the first `skip` bytes of the decoding is left out (the
 * prompt, printed as given). */
static ptdp_status print_text(ptdp_tokenizer tok, const int32_t* ids, size_t count, int64_t vocab, size_t skip) {
  size_t written = 0;
  size_t start = 0;
  while (start <= count) {
    size_t end = start;
    while (end < count && ids[end] >= 0 && ids[end] < vocab) ++end;
    if (end > start) {
      size_t length = 0;
      ptdp_status st = ptdp_tokenizer_decode(tok, ids + start, end - start, NULL, 0, &length);
      if (st != PTDP_SUCCESS && length == 0) return st;
      char* text = malloc(length + 1);
      if (!text) return PTDP_ERR_OUT_OF_MEMORY;
      st = ptdp_tokenizer_decode(tok, ids + start, end - start, text, length + 1, &length);
      if (st != PTDP_SUCCESS) {
        free(text);
        return st;
      }
      const size_t from = written >= skip ? 0 : (skip - written < length ? skip - written : length);
      put_utf8_lossy((const unsigned char*)text + from, length - from);
      written += length;
      free(text);
    }
    if (end >= count) break;
    printf("<%d>", (int)ids[end]);
    start = end + 1;
  }
  return PTDP_SUCCESS;
}

int main(int argc, char** argv) {
  const char *load = NULL, *prompt = NULL, *prompt_ids = NULL;
  ptdp_generate_options gen;
  ptdp_generate_options_init(&gen);
  ptdp_tokenizer_options to;
  ptdp_tokenizer_options_init(&to);
  int tokenizer_given = 0;
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
    } else if (strcmp(flag, "--tokenizer-type") == 0) {
      int found = -1;
      for (int t = 0; t < (int)(sizeof tokenizer_names / sizeof tokenizer_names[0]); ++t) {
        if (strcmp(value, tokenizer_names[t]) == 0) found = t;
      }
      if (found < 0) {
        return bad_flag(flag, value, "is not one of ByteLevel, NullTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer, "
                                     "SentencePieceTokenizer");
      }
      to.type = (ptdp_tokenizer_type)found;
      tokenizer_given = 1;
    } else if (strcmp(flag, "--vocab-file") == 0) {
      to.vocab_file = value;
    } else if (strcmp(flag, "--merge-file") == 0) {
      to.merge_file = value;
    } else if (strcmp(flag, "--tokenizer-model") == 0) {
      to.tokenizer_model = value;
    } else if (strcmp(flag, "--vocab-size") == 0) {
      if (!parse_long(value, &n) || n < 1 || n > 2147483646LL) return bad_flag(flag, value, "is not an integer > 0");
      to.vocab_size = n;
    } else {
      return bad_flag(flag, value, "unknown flag");
    }
  }
  if (!load) return bad_flag("--load", "", "is required");
  if ((prompt == NULL) == (prompt_ids == NULL)) return bad_flag("--prompt", "", "give exactly one of --prompt and --prompt-ids");
  if (!tokenizer_given && (to.vocab_file || to.merge_file || to.tokenizer_model || to.vocab_size)) {
    return bad_flag("--tokenizer-type", "", "is needed with --vocab-file, --merge-file, --tokenizer-model or --vocab-size");
  }
  if (prompt && *prompt == '\0') return bad_flag("--prompt", "", "is empty");

  int status = 0;
  ptdp_runtime runtime = NULL;
  ptdp_groups groups = NULL;
  ptdp_model model = NULL;
  ptdp_tokenizer tok = NULL;
  int32_t *ids = NULL, *out = NULL;
  size_t length = 0;
  int32_t count = 0;
  int64_t tokenizer_vocab = 0;
  int32_t eod = -1;

  /* Tokens of the prompt. */
  if (prompt) {
    if (tokenizer_given) {
      CHECK(ptdp_tokenizer_create(&to, &tok));
    } else {
      CHECK(ptdp_tokenizer_create_from_checkpoint(load, &tok));
    }
    CHECK(ptdp_tokenizer_vocab_size(tok, &tokenizer_vocab));
    CHECK(ptdp_tokenizer_eod(tok, &eod));
    /* The number of ids first: with no room the call reports it (and fails only if the prompt cannot
     * be encoded, which the second call reports). */
    ptdp_tokenizer_encode(tok, prompt, strlen(prompt), NULL, 0, &length);
    ids = malloc((length + 1) * sizeof(int32_t));
    if (!ids) {
      fprintf(stderr, "ptdp-generate: out of memory\n");
      status = 1;
      goto done;
    }
    CHECK(ptdp_tokenizer_encode(tok, prompt, strlen(prompt), ids, length + 1, &length));
  } else {
    ids = malloc((strlen(prompt_ids) / 2 + 2) * sizeof(int32_t));
    if (!ids) {
      fprintf(stderr, "ptdp-generate: out of memory\n");
      status = 1;
      goto done;
    }
    char* copy = strdup(prompt_ids);
    for (char* t = strtok(copy, " ,"); t; t = strtok(NULL, " ,")) {
      long long n = 0;
      if (!parse_long(t, &n) || n < 0 || n > 2147483647LL) {
        free(copy);
        status = bad_flag("--prompt-ids", t, "is not a token id");
        goto done;
      }
      ids[length++] = (int32_t)n;
    }
    free(copy);
  }
  if (length == 0) {
    status = bad_flag(prompt ? "--prompt" : "--prompt-ids", prompt ? prompt : prompt_ids, "has no tokens");
    goto done;
  }
  if (length > 2147483647u) {
    status = bad_flag("--prompt", "", "is too long");
    goto done;
  }
  out = malloc((length + (size_t)gen.max_new_tokens + 1) * sizeof(int32_t));
  if (!out) {
    fprintf(stderr, "ptdp-generate: out of memory\n");
    status = 1;
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

  /* The prompt's ids, then the new ones after them. */
  memcpy(out, ids, length * sizeof(int32_t));
  CHECK(ptdp_model_generate(model, ids, (int32_t)length, &gen, out + length, gen.max_new_tokens, &count));
  if (prompt) {
    int32_t kept = 0;
    while (kept < count && out[length + (size_t)kept] != eod) ++kept;
    /* The prompt as given, then what the whole sequence decodes to past the prompt's decoding
     * (a token's text can depend on the one before it, as SentencePiece's leading space does). */
    size_t prompt_text = 0;
    ptdp_tokenizer_decode(tok, ids, length, NULL, 0, &prompt_text); /* asks for the size only */
    fputs(prompt, stdout);
    CHECK(print_text(tok, out, length + (size_t)kept, tokenizer_vocab, prompt_text));
    putchar('\n');
  } else {
    for (size_t i = 0; i < length; ++i) printf("%d ", (int)ids[i]);
    for (int32_t i = 0; i < count; ++i) printf("%d%s", (int)out[length + (size_t)i], i + 1 < count ? " " : "\n");
  }

done:
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(runtime);
  ptdp_tokenizer_destroy(tok);
  free(ids);
  free(out);
  return status;
}
