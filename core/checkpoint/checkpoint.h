// Checkpoints of a GPT and its optimizer (docs/architecture.md, principle 9; the C API's "Checkpoints"):
// one safetensors file per model-parallel shard (model_tpTT_ppPP.safetensors) written by the
// first data-parallel rank of the shard, holding the shard's parameter slices and, with an
// optimizer, the slices of its state (gathered over the data-parallel group when the
// distributed optimizer shards it); metadata.json with the layout, the model config, the
// counters and the tensor map (which file holds which block of which global tensor); the
// SHA-256 manifest; the atomic directory protocol of checkpoint_files.h.
//
// Loading reads, for every local slice, the block of the global tensor it covers from
// whichever files hold it, so any t, p, d and v load a checkpoint saved under any other. The
// word embedding is stored with the vocabulary padding of the saving layout: rows beyond it
// load as zeros (the padded rows never reach the loss). Every failure is agreed over the world:
// every rank throws the same error, naming the file, and nothing is changed.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/model/gpt_pipeline.h"
#include "core/optim/optimizer.h"

namespace ptdp {

struct CheckpointState {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
  /// What load_checkpoint read: the "train_config" the checkpoint recorded (ptdp-train's flags,
  /// train_args_to_json), null when it recorded none. Ignored by save_checkpoint.
  nlohmann::json train_config = {};
};

/// Saves DIR/iter_NNNNNNN and makes it the latest. `optimizer` may be null (parameters only);
/// `train_config` (may be null) is recorded in metadata.json. Collective over the world of the
/// model's groups.
void save_checkpoint(const std::string& dir, GptPipeline& model, Optimizer* optimizer, const nlohmann::json* train_config,
                     const CheckpointState& state);

/// Loads DIR's latest checkpoint into `model` (and `optimizer`, may be null), re-sharding.
/// Throws (on every rank alike) InvalidArgument for a config that differs or a missing
/// optimizer state, Io for a missing, truncated or corrupted file, and Io for metadata that
/// makes no sense although its hash matches (an iteration other than its directory's, negative
/// counters, an unknown optimizer kind or state, a loss scale that is not finite and > 0, a
/// layout that cannot exist or whose shards are not the listed files). Collective over the world.
CheckpointState load_checkpoint(const std::string& dir, GptPipeline& model, Optimizer* optimizer);

/// The model config DIR's latest checkpoint was saved with, and its iteration. No communication.
GptConfig read_checkpoint_config(const std::string& dir, int64_t* iteration);

/// "model_tp01_pp00.safetensors".
std::string checkpoint_shard_name(int tp_rank, int pp_rank);

/// Runs `body` on every rank of `groups`' world and agrees on the outcome: when it threw on
/// any rank, every rank throws the error of the lowest such rank (the others' messages say
/// which rank reported it). Collective over the world.
void agree_on_failure(ProcessGroups& groups, const std::function<void()>& body);

}  // namespace ptdp
