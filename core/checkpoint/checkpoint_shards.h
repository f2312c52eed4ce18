// The part of a checkpoint that does not depend on the model: parameter tables as a layout
// spreads them over the ranks, their files and their tensor map, saved and loaded with the
// optimizer's state. save_checkpoint / load_checkpoint (checkpoint.h) describe a GptPipeline
// this way and add the model's own metadata; tests describe synthetic tables.
//
// Files: the dense parameters of pipeline rank PP's tensor rank TT in model_tpTT_ppPP, written
// by the first data+context-parallel rank of the shard (as ptdp has always written them); with
// mixture-of-experts parameters (ParamInfo::expert) also model_tpTT_ppPP_epEE for expert-tensor
// rank TT and expert-parallel rank EE of each stage, written by the first expert-data-parallel
// rank of the shard (a stage without expert parameters writes its expert shards empty, so the
// files are a function of the layout). Parameters are named globally (experts by their global
// index), so loading under any (t, etp, e, p, v, d) reads each local slice from whichever
// pieces hold it: checkpoints reshard across every dimension, optimizer state included.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/optim/optimizer.h"
#include "core/parallel/groups.h"
#include "core/params/params.h"

namespace ptdp {

struct CheckpointShards {
  ProcessGroups* groups = nullptr;
  /// This rank's tables (its model chunks, in local order) and, for each, the index of a
  /// parameter another table saves (the last stage's copy of a tied embedding), or -1.
  std::vector<ParamTable*> tables;
  std::vector<int> unsaved;
  /// Every table of the layout: chunks = p * v, chunk c on pipeline rank rank_of_chunk(c).
  int chunks = 1;
  std::function<int(int chunk)> rank_of_chunk;
  /// The parameters (without memory: names, shapes, slices) chunk `chunk` declares on world
  /// rank `world_rank` of its stage, less its unsaved one. The same on every rank.
  std::function<std::vector<ParamInfo>(int chunk, int world_rank)> saved_params;
};

/// "model_tp01_pp00_ep03.safetensors": the expert parameters of expert-tensor rank 1 and
/// expert-parallel rank 3 on pipeline rank 0.
std::string checkpoint_expert_shard_name(int etp_rank, int pp_rank, int ep_rank);

/// Saves DIR/iter_NNNNNNN and makes it the latest: the shards' files, and metadata.json with
/// the layout (its "layout" object extended by `extra`'s), the optimizer's counters, the files,
/// the tensor map and every other entry of `extra` ("model", "rng", "train_config", ...).
/// Collective over the world of the shards' groups.
void save_checkpoint_shards(const std::string& dir, const CheckpointShards& shards, Optimizer* optimizer,
                            const nlohmann::json& extra, const CheckpointState& state);

/// Loads DIR's latest checkpoint into the shards' tables (and `optimizer`, may be null),
/// resharding. `check_model(metadata, source)` may refuse the saved model (throwing); it runs
/// on every rank after the metadata's sense is checked. Errors as load_checkpoint's.
/// Collective over the world.
using CheckpointModelCheck = std::function<void(const nlohmann::json& metadata, const std::string& source)>;
CheckpointState load_checkpoint_shards(const std::string& dir, const CheckpointShards& shards, Optimizer* optimizer,
                                       const CheckpointModelCheck& check_model);

}  // namespace ptdp
