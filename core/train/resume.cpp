#include "core/train/resume.h"

#include <filesystem>
#include <string>

#include "base/error.h"
#include "io/json_text.h"

namespace ptdp {

namespace {

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
    "disable-bias-linear", "add-qkv-bias", "qk-layernorm", "qk-layernorm-across-heads", "optimizer", "fp16", "bf16",
    // YaRN (docs/deepseek.md).
    "rope-type", "rotary-scaling-factor", "mscale", "mscale-all-dim", "original-max-position-embeddings", "beta-fast",
    "beta-slow", "no-yarn-correction-range-round-to-int",
    // Mixture of experts: the experts, the router and the drop rule (not the dispatcher, the
    // recomputation or e and etp, which change no result).
    "num-experts", "moe-layer-freq", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
    "moe-shared-expert-gate", "moe-router-topk", "moe-router-score-function", "moe-router-pre-softmax",
    "moe-router-topk-scaling-factor", "moe-router-num-groups", "moe-router-group-topk",
    "moe-router-enable-expert-bias", "moe-router-bias-update-rate", "moe-router-load-balancing-type",
    "moe-aux-loss-coeff", "moe-z-loss-coeff", "moe-expert-capacity-factor", "moe-token-drop-policy",
    "moe-pad-expert-input-to-capacity"};

// Compares the trajectory flags with the ones the checkpoint recorded. A checkpoint that
// recorded no flags (ptdp_checkpoint_save without a run, or older) is accepted with a note.
void check_resume_flags(const nlohmann::json& saved, const nlohmann::json& now, const TrainArgs& args, std::FILE* out) {
  if (!saved.is_object()) {
    if (out) {
      std::fprintf(out, " note: the checkpoint in %s recorded no flags; the resume check is skipped\n",
                   args.load.c_str());
    }
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
    if (out) {
      std::fprintf(out, " warning: resuming from %s with changed flags (--override-resume-check): %s\n",
                   args.load.c_str(), diffs.c_str());
    }
    return;
  }
  throw_error(ErrorCode::InvalidArgument,
              str_cat("--load ", args.load, ": resuming with flags that change the training trajectory: ", diffs,
                      ". Use the flags the checkpoint was saved with, --finetune to start a new run from its "
                      "parameters, or --override-resume-check to resume anyway"));
}

}  // namespace

CheckpointState resume_from_checkpoint(const TrainArgs& args, GptPipeline& model, Optimizer& optimizer,
                                       const nlohmann::json& flags, std::FILE* log) {
  CheckpointState start;
  if (args.load.empty()) return start;
  if (!std::filesystem::exists(std::filesystem::path(args.load) / "latest_checkpointed_iteration.txt")) {
    if (log) std::fprintf(log, " no checkpoint found in %s: training from scratch\n", args.load.c_str());
    return start;
  }
  // --finetune (Megatron's): the parameters only; the iteration, the data position and the
  // optimizer (state and counters) start afresh.
  const CheckpointState loaded = load_checkpoint(args.load, model, args.finetune ? nullptr : &optimizer);
  if (args.finetune) {
    if (log) {
      std::fprintf(log, " loaded the parameters of iteration %lld from %s to fine-tune from iteration 0\n",
                   static_cast<long long>(loaded.iteration), args.load.c_str());
    }
    return start;
  }
  // The same check on every rank (every rank read the same metadata): a resume that would
  // change the trajectory is everyone's refusal.
  check_resume_flags(loaded.train_config, flags, args, log);
  start.iteration = loaded.iteration;
  start.consumed_train_samples = loaded.consumed_train_samples;
  start.consumed_valid_samples = loaded.consumed_valid_samples;
  if (log) {
    std::fprintf(log, " loaded checkpoint from %s at iteration %lld\n", args.load.c_str(),
                 static_cast<long long>(start.iteration));
  }
  return start;
}

}  // namespace ptdp
