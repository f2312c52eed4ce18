/* ptdp-convert: Hugging Face checkpoints in and out of ptdp, on the public C API.
 *
 *   ptdp-convert --from-hf llama-dir --to-ptdp ckpt [--seq-length 2048]
 *   mpirun -np 4 ptdp-convert --from-hf llama-dir --to-ptdp ckpt \
 *       --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 *   mpirun -np 2 ptdp-convert --from-hf mixtral-dir --to-ptdp ckpt --expert-model-parallel-size 2
 *   ptdp-convert --from-ptdp ckpt --to-hf out-dir [--dtype bf16] [--max-shard-size 5GB]
 *
 * --from-hf builds the model the Hugging Face config.json describes at the layout given (under
 * mpirun for t * p * d > 1; a mixture of experts with its experts over e ranks and each expert over
 * etp, and with the sequence parallelism MoE needs at t > 1), loads its weights (ptdp_hf_load),
 * each rank reading its own experts' tensors, and saves a ptdp checkpoint of
 * iteration 0 without optimizer state, which `ptdp-train --finetune --load CKPT` starts from (any
 * layout loads it); it copies config.json beside it as CKPT/hf_config.json and prints the
 * ptdp-train flags of the model; the tokenizer files of the directory (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, tokenizer.model, vocab.json, merges.txt) are kept
 * in CKPT too, where ptdp-generate --prompt finds them. --from-ptdp loads a ptdp checkpoint (saved
 * at any layout) and writes it as a Hugging Face directory (ptdp_hf_save), keeping the fields of
 * CKPT/hf_config.json (or --hf-config FILE) that ptdp does not describe, with the tokenizer files
 * CKPT holds.
 * Exit status: 0 on success, 1 on a failure (the message names what went wrong), 2 on bad flags.
 */
#include <errno.h>
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char* usage =
    "usage: ptdp-convert --from-hf DIR --to-ptdp CKPT [flags]\n"
    "       ptdp-convert --from-ptdp CKPT --to-hf DIR [flags]\n"
    "  --from-hf DIR                       a Hugging Face model directory (config.json, model.safetensors\n"
    "                                      or model.safetensors.index.json and its shards)\n"
    "  --to-ptdp CKPT                      the ptdp checkpoint to write (iteration 0, parameters only)\n"
    "  --from-ptdp CKPT                    a ptdp checkpoint directory (its latest iteration)\n"
    "  --to-hf DIR                         the Hugging Face directory to write\n"
    "  --tensor-model-parallel-size T      the layout to convert at (default 1); run T * P * D\n"
    "  --pipeline-model-parallel-size P      processes under mpirun (default 1)\n"
    "  --expert-model-parallel-size E      a mixture of experts' experts over E ranks of each stage\n"
    "                                      (default 1; E * ETP must divide the stage's T * D ranks)\n"
    "  --expert-tensor-parallel-size ETP   each expert's linears over ETP ranks (default: T)\n"
    "  --seq-length N                      [--from-hf] the context the ptdp model trains with (default:\n"
    "                                      the Hugging Face model's, or its sliding window)\n"
    "  --make-vocab-size-divisible-by N    [--from-hf] vocabulary padding of the ptdp model (default 128)\n"
    "  --dtype {fp32,bf16,fp16}            [--to-hf] storage type of the tensors (default fp32)\n"
    "  --max-shard-size SIZE               [--to-hf] split files above SIZE bytes (suffixes KB, MB, GB\n"
    "                                      as Hugging Face reads them, 1000-based; KiB, MiB, GiB)\n"
    "  --architecture NAME                 [--to-hf] auto (default), gpt2, llama, mistral, qwen2, mixtral,\n"
    "                                      qwen3_moe, qwen2_moe, olmoe, deepseek_v2 or deepseek_v3\n"
    "  --hf-config FILE                    [--to-hf] config.json whose other fields are kept (default:\n"
    "                                      CKPT/hf_config.json when it exists)\n"
    "  --help                              this text\n";

/* config.json's model_type of each ptdp_hf_architecture, in its order. */
static const char* const architecture_names[] = {"auto",      "gpt2",      "llama",       "mistral",
                                                 "qwen2",     "mixtral",   "qwen3_moe",   "qwen2_moe",
                                                 "olmoe",     "deepseek_v2", "deepseek_v3"};

static int bad_flag(const char* flag, const char* value, const char* why) {
  fprintf(stderr, "ptdp-convert: %s: '%s' %s\n%s", flag, value ? value : "", why, usage);
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

/* "5GB" -> 5e9, "500MiB" -> 500 * 2^20, "1234" -> 1234 (Hugging Face's convert_file_size_to_int). */
static int parse_size(const char* s, long long* out) {
  char* end = NULL;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || v < 0) return 0;
  static const struct {
    const char* suffix;
    long long factor;
  } units[] = {{"", 1},
               {"B", 1},
               {"KB", 1000LL},
               {"MB", 1000000LL},
               {"GB", 1000000000LL},
               {"KiB", 1LL << 10},
               {"MiB", 1LL << 20},
               {"GiB", 1LL << 30}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; ++i) {
    if (strcmp(end, units[i].suffix) == 0) {
      if (v > 0 && units[i].factor > (1LL << 62) / v) return 0;
      *out = v * units[i].factor;
      return 1;
    }
  }
  return 0;
}

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    ptdp_status st_ = (call);                                                                           \
    if (st_ != PTDP_SUCCESS) {                                                                          \
      fprintf(stderr, "ptdp-convert: %s: %s: %s\n", #call, ptdp_status_string(st_), ptdp_last_error()); \
      status = 1;                                                                                       \
      goto done;                                                                                        \
    }                                                                                                   \
  } while (0)

static int copy_file(const char* from, const char* to) {
  FILE* in = fopen(from, "rb");
  if (!in) return 0;
  FILE* out = fopen(to, "wb");
  if (!out) {
    fclose(in);
    return 0;
  }
  char buf[65536];
  size_t n = 0;
  int ok = 1;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) ok &= fwrite(buf, 1, n, out) == n;
  ok &= !ferror(in);
  fclose(in);
  ok &= fclose(out) == 0;
  return ok;
}

/* 1 for a regular file, 0 for nothing there, -1 for something else (a directory, a FIFO, a
 * device): never opened, so a FIFO cannot block the copy. */
static int file_exists(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  return S_ISREG(st.st_mode) ? 1 : -1;
}

/* The tokenizer files of a Hugging Face directory: kept beside a converted checkpoint, where
 * ptdp_tokenizer_create_from_checkpoint (ptdp-generate --prompt) finds them, and written back out
 * with an export. */
static const char* const tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                              "tokenizer.model", "vocab.json", "merges.txt"};

/* Copies the tokenizer files present in `from` to `to`; lists their names in `names` (room for
 * them all). Returns 0, naming the file, when one cannot be copied. */
static int copy_tokenizer_files(const char* from, const char* to, char* names, size_t room) {
  names[0] = '\0';
  for (size_t i = 0; i < sizeof tokenizer_files / sizeof tokenizer_files[0]; ++i) {
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/%s", from, tokenizer_files[i]);
    snprintf(dst, sizeof dst, "%s/%s", to, tokenizer_files[i]);
    const int kind = file_exists(src);
    if (kind == 0) continue;
    if (kind < 0) {
      fprintf(stderr, "ptdp-convert: %s is not a regular file: only regular files are copied\n", src);
      return 0;
    }
    if (!copy_file(src, dst)) {
      fprintf(stderr, "ptdp-convert: cannot copy %s to %s\n", src, dst);
      return 0;
    }
    if (names[0]) strncat(names, ", ", room - strlen(names) - 1);
    strncat(names, tokenizer_files[i], room - strlen(names) - 1);
  }
  return 1;
}

/* " FLAG X" with the fewest digits that read back as the same float (0.001, not 0.00100000005). */
static void print_float_flag(const char* flag, float x) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    snprintf(text, sizeof text, "%.*g", digits, (double)x);
    if ((float)strtod(text, NULL) == x) break;
  }
  printf(" %s %s", flag, text);
}

/* The MoE part of the ptdp-train flags: the experts, the router and its balancing loss (a
 * Hugging Face model states its router_aux_loss_coef; ptdp-train's default is 0). */
static void print_moe_flags(const ptdp_gpt_options* g) {
  static const char* const balancing[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};
  printf(" --num-experts %d --moe-router-topk %d", (int)g->num_experts, (int)g->moe_router_topk);
  if (g->moe_ffn_hidden_size > 0) printf(" --moe-ffn-hidden-size %d", (int)g->moe_ffn_hidden_size);
  if (g->moe_layer_freq && g->moe_layer_freq[0]) printf(" --moe-layer-freq \"%s\"", g->moe_layer_freq);
  if (g->moe_shared_expert_intermediate_size > 0)
    printf(" --moe-shared-expert-intermediate-size %d", (int)g->moe_shared_expert_intermediate_size);
  if (g->moe_shared_expert_gate) printf(" --moe-shared-expert-gate");
  if (g->moe_router_score_function == PTDP_MOE_SCORE_SIGMOID) printf(" --moe-router-score-function sigmoid");
  if (g->moe_router_pre_softmax) printf(" --moe-router-pre-softmax");
  if (g->moe_router_topk_scaling_factor > 0)
    print_float_flag("--moe-router-topk-scaling-factor", g->moe_router_topk_scaling_factor);
  if (g->moe_router_num_groups > 0 && g->moe_router_topk_limited_devices > 0)
    printf(" --moe-router-num-groups %d --moe-router-topk-limited-devices %d", (int)g->moe_router_num_groups,
           (int)g->moe_router_topk_limited_devices);
  else if (g->moe_router_num_groups > 0)
    printf(" --moe-router-num-groups %d --moe-router-group-topk %d", (int)g->moe_router_num_groups,
           (int)g->moe_router_group_topk);
  if (g->moe_router_group_score_topk > 0)
    printf(" --moe-router-group-score-topk %d", (int)g->moe_router_group_score_topk);
  if (g->moe_router_enable_expert_bias) {
    printf(" --moe-router-enable-expert-bias");
    print_float_flag("--moe-router-bias-update-rate", g->moe_router_bias_update_rate);
  }
  printf(" --moe-router-load-balancing-type %s", balancing[g->moe_router_load_balancing_type]);
  if (g->moe_aux_loss_coeff > 0) print_float_flag("--moe-aux-loss-coeff", g->moe_aux_loss_coeff);
  if (g->moe_z_loss_coeff > 0) print_float_flag("--moe-z-loss-coeff", g->moe_z_loss_coeff);
}

/* The ptdp-train flags that build this model (those a checkpoint is checked against). */
static void print_train_flags(const ptdp_gpt_options* g) {
  printf(
      "ptdp-train flags for this model: --num-layers %d --hidden-size %d --num-attention-heads %d "
      "--ffn-hidden-size %d --vocab-size %d --seq-length %d --max-position-embeddings %d --norm-epsilon %g",
      (int)g->num_layers, (int)g->hidden_size, (int)g->num_attention_heads, (int)g->ffn_hidden_size, (int)g->vocab_size,
      (int)g->seq_length, (int)g->max_position_embeddings, (double)g->layernorm_epsilon);
  if (g->normalization == PTDP_NORMALIZATION_RMSNORM) printf(" --normalization RMSNorm");
  if (g->swiglu) printf(" --swiglu");
  if (g->position_embedding_type == PTDP_POSITION_EMBEDDING_ROPE)
    printf(" --position-embedding-type rope --rotary-base %.17g", g->rotary_base);
  if (g->use_rope_scaling)
    printf(
        " --use-rope-scaling --rope-scaling-factor %g --rope-scaling-low-freq-factor %g "
        "--rope-scaling-high-freq-factor %g --rope-scaling-original-max-position-embeddings %d",
        (double)g->rope_scaling_factor, (double)g->rope_low_freq_factor, (double)g->rope_high_freq_factor,
        (int)g->rope_original_max_position_embeddings);
  if (g->rope_type == PTDP_ROPE_TYPE_YARN) {
    printf(" --rope-type yarn");
    print_float_flag("--rotary-scaling-factor", g->rotary_scaling_factor);
    printf(" --original-max-position-embeddings %d", (int)g->original_max_position_embeddings);
    print_float_flag("--beta-fast", g->beta_fast);
    print_float_flag("--beta-slow", g->beta_slow);
    if (g->mscale_all_dim > 0) {
      print_float_flag("--mscale", g->mscale);
      print_float_flag("--mscale-all-dim", g->mscale_all_dim);
    }
    if (g->yarn_no_round_to_int) printf(" --no-yarn-correction-range-round-to-int");
  }
  if (g->num_query_groups > 0 && g->num_query_groups != g->num_attention_heads)
    printf(" --group-query-attention --num-query-groups %d", (int)g->num_query_groups);
  if (g->kv_channels > 0) printf(" --kv-channels %d", (int)g->kv_channels);
  if (g->disable_bias_linear) printf(" --disable-bias-linear");
  if (g->add_qkv_bias) printf(" --add-qkv-bias");
  if (g->qk_layernorm) printf(" --qk-layernorm");
  if (g->qk_layernorm_across_heads) printf(" --qk-layernorm-across-heads");
  if (g->multi_latent_attention) {
    printf(" --multi-latent-attention");
    if (g->q_lora_rank > 0) printf(" --q-lora-rank %d", (int)g->q_lora_rank); /* unset: no query latent */
    printf(" --kv-lora-rank %d --qk-head-dim %d --qk-pos-emb-head-dim %d --v-head-dim %d", (int)g->kv_lora_rank,
           (int)g->qk_head_dim, (int)g->qk_pos_emb_head_dim, (int)g->v_head_dim);
  }
  if (g->mtp_num_layers > 0) printf(" --mtp-num-layers %d", (int)g->mtp_num_layers);
  if (g->untie_embeddings_and_output_weights) printf(" --untie-embeddings-and-output-weights");
  if (g->num_experts > 0) print_moe_flags(g);
  printf(" --hidden-dropout %g --attention-dropout %g\n", (double)g->hidden_dropout, (double)g->attention_dropout);
}

int main(int argc, char** argv) {
  const char *from_hf = NULL, *to_ptdp = NULL, *from_ptdp = NULL, *to_hf = NULL, *hf_config = NULL;
  long long t = 1, p = 1, e = 1, etp = 0, seq_length = 0, divisible = 0;
  ptdp_hf_save_options save;
  ptdp_hf_save_options_init(&save);
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return bad_flag(flag, NULL, "needs a value (or is unknown)");
    const char* value = argv[++i];
    long long n = 0;
    if (strcmp(flag, "--from-hf") == 0) {
      from_hf = value;
    } else if (strcmp(flag, "--to-ptdp") == 0) {
      to_ptdp = value;
    } else if (strcmp(flag, "--from-ptdp") == 0) {
      from_ptdp = value;
    } else if (strcmp(flag, "--to-hf") == 0) {
      to_hf = value;
    } else if (strcmp(flag, "--hf-config") == 0) {
      hf_config = value;
    } else if (strcmp(flag, "--tensor-model-parallel-size") == 0 ||
               strcmp(flag, "--pipeline-model-parallel-size") == 0 || strcmp(flag, "--seq-length") == 0 ||
               strcmp(flag, "--make-vocab-size-divisible-by") == 0) {
      if (!parse_long(value, &n) || n < 1 || n > 1000000000) return bad_flag(flag, value, "is not an integer >= 1");
      if (flag[2] == 't')
        t = n;
      else if (flag[2] == 'p')
        p = n;
      else if (flag[2] == 's')
        seq_length = n;
      else
        divisible = n;
    } else if (strcmp(flag, "--expert-model-parallel-size") == 0 ||
               strcmp(flag, "--expert-tensor-parallel-size") == 0) {
      if (!parse_long(value, &n) || n < 1 || n > 1000000000) return bad_flag(flag, value, "is not an integer >= 1");
      if (flag[9] == 'm')
        e = n;
      else
        etp = n;
    } else if (strcmp(flag, "--dtype") == 0) {
      if (strcmp(value, "fp32") == 0)
        save.dtype = PTDP_DTYPE_F32;
      else if (strcmp(value, "bf16") == 0)
        save.dtype = PTDP_DTYPE_BF16;
      else if (strcmp(value, "fp16") == 0)
        save.dtype = PTDP_DTYPE_F16;
      else
        return bad_flag(flag, value, "is not one of fp32, bf16, fp16");
    } else if (strcmp(flag, "--max-shard-size") == 0) {
      if (!parse_size(value, &n)) return bad_flag(flag, value, "is not a size (e.g. 5GB, 500MB, 1073741824)");
      save.max_shard_size = n;
    } else if (strcmp(flag, "--architecture") == 0) {
      int found = -1;
      for (int k = 0; k < (int)(sizeof architecture_names / sizeof architecture_names[0]); ++k)
        if (strcmp(value, architecture_names[k]) == 0) found = k;
      if (found < 0)
        return bad_flag(flag, value, "is not one of auto, gpt2, llama, mistral, qwen2, mixtral, qwen3_moe, qwen2_moe, "
                                       "olmoe, deepseek_v2, deepseek_v3");
      save.architecture = (ptdp_hf_architecture)found;
    } else {
      return bad_flag(flag, value, "unknown flag");
    }
  }
  const int import = from_hf != NULL;
  if (import == (from_ptdp != NULL)) return bad_flag("--from-hf", "", "give exactly one of --from-hf and --from-ptdp");
  if (import && !to_ptdp) return bad_flag("--to-ptdp", "", "is required with --from-hf");
  if (!import && !to_hf) return bad_flag("--to-hf", "", "is required with --from-ptdp");
  if ((import && to_hf) || (!import && to_ptdp))
    return bad_flag(import ? "--to-hf" : "--to-ptdp", "", "does not go with this direction");

  int status = 0;
  ptdp_runtime runtime = NULL;
  ptdp_groups groups = NULL;
  ptdp_model model = NULL;
  int32_t rank = 0, world = 1;
  char base_path[4096];

  ptdp_gpt_options g;
  ptdp_hf_architecture arch = PTDP_HF_ARCHITECTURE_AUTO;
  int64_t iteration = 0;
  CHECK(ptdp_runtime_create(NULL, &runtime));
  CHECK(ptdp_runtime_world(runtime, &rank, &world));
  if (world % (t * p) != 0) {
    if (rank == 0)
      fprintf(stderr, "ptdp-convert: the world of %d processes is not a multiple of t %lld x p %lld\n", (int)world, t,
              p);
    status = 2;
    goto done;
  }
  /* The model first: whether it has experts decides the groups (the expert layout, and the
   * sequence parallelism Megatron's MoE layer needs at t > 1). */
  CHECK(ptdp_gpt_options_init(&g));
  if (import) {
    CHECK(ptdp_hf_read_options(from_hf, &g, &arch));
  } else {
    CHECK(ptdp_checkpoint_read_options(from_ptdp, &g, &iteration));
  }
  if (g.num_experts == 0 && (e > 1 || etp > 0)) {
    if (rank == 0)
      fprintf(stderr, "ptdp-convert: --expert-model-parallel-size %lld / --expert-tensor-parallel-size %lld: %s has "
              "no experts\n", e, etp, import ? from_hf : from_ptdp);
    status = 2;
    goto done;
  }
  ptdp_parallel_options po;
  CHECK(ptdp_parallel_options_init(&po));
  po.tensor_model_parallel_size = (int32_t)t;
  po.pipeline_model_parallel_size = (int32_t)p;
  po.expert_model_parallel_size = (int32_t)e;
  po.expert_tensor_parallel_size = (int32_t)etp;
  po.sequence_parallel = g.num_experts > 0 && t > 1;
  CHECK(ptdp_groups_create(runtime, &po, &groups));

  if (import) {
    if (seq_length > 0) g.seq_length = (int32_t)seq_length;
    if (divisible > 0) g.make_vocab_size_divisible_by = (int32_t)divisible;
    CHECK(ptdp_model_create(groups, &g, &model));
    CHECK(ptdp_hf_load(from_hf, model));
    ptdp_checkpoint_state state;
    CHECK(ptdp_checkpoint_state_init(&state));
    CHECK(ptdp_checkpoint_save(to_ptdp, model, NULL, NULL, &state));
    if (rank == 0) {
      char from[4096];
      snprintf(from, sizeof from, "%s/config.json", from_hf);
      snprintf(base_path, sizeof base_path, "%s/hf_config.json", to_ptdp);
      if (!copy_file(from, base_path)) {
        fprintf(stderr, "ptdp-convert: cannot copy %s to %s\n", from, base_path);
        status = 1;
        goto done;
      }
      char kept[256];
      if (!copy_tokenizer_files(from_hf, to_ptdp, kept, sizeof kept)) {
        status = 1;
        goto done;
      }
      printf("ptdp-convert: %s (%s, %d layers, hidden %d, vocabulary %d) -> %s at t %lld, p %lld, d %lld", from_hf,
             architecture_names[arch], (int)g.num_layers, (int)g.hidden_size, (int)g.vocab_size, to_ptdp, t, p,
             world / (t * p));
      if (g.num_experts > 0)
        printf(", %d experts over e %lld, etp %lld", (int)g.num_experts, e, etp > 0 ? etp : t);
      printf("\n");
      if (kept[0]) printf("ptdp-convert: kept the tokenizer's %s in %s (ptdp-generate --prompt uses it)\n", kept, to_ptdp);
      print_train_flags(&g);
    }
  } else {
    CHECK(ptdp_model_create(groups, &g, &model));
    CHECK(ptdp_checkpoint_load(from_ptdp, model, NULL, NULL));
    if (hf_config) {
      save.base_config = hf_config;
    } else {
      snprintf(base_path, sizeof base_path, "%s/hf_config.json", from_ptdp);
      if (file_exists(base_path) != 0) save.base_config = base_path; /* a non-regular one is refused by ptdp_hf_save */
    }
    CHECK(ptdp_hf_save(to_hf, model, &save));
    char kept[256];
    if (rank == 0 && !copy_tokenizer_files(from_ptdp, to_hf, kept, sizeof kept)) {
      status = 1;
      goto done;
    }
    if (rank == 0 && kept[0]) printf("ptdp-convert: copied the tokenizer's %s to %s\n", kept, to_hf);
    if (rank == 0)
      printf("ptdp-convert: %s (iteration %lld) -> %s%s%s\n", from_ptdp, (long long)iteration, to_hf,
             save.base_config ? ", keeping the other fields of " : "", save.base_config ? save.base_config : "");
  }

done:
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  ptdp_runtime_destroy(runtime);
  return status;
}
