// QK-clip (MuonClip: Kimi K2, arXiv 2507.20534; Megatron-Core's --qk-clip), after the optimizer
// step: every attention layer records, in the iteration's training forwards, the largest
// pre-softmax logit scale * q.k of each query head (the softmax's view: causal mask and documents
// respected); the maxima are reduced with MAX over the ranks that saw other tokens of the step
// (data and context groups) and gathered over the tensor group (which splits the heads) and the
// pipeline (which splits the layers), so every rank holds the whole model's table, the serial
// run's numbers. Where a head's maximum S exceeds the threshold tau, eta = tau / S scales its
// query rows of linear_qkv by eta^alpha and its key rows by eta^(1 - alpha), so that its logits
// shrink by eta.
//
// Grouped-query attention: a key head serves a/g query heads. As Megatron-Core's SelfAttention
// does, each group takes one eta from the largest maximum of its query heads, and every query
// head of the group is scaled by eta^alpha, the key head by eta^(1 - alpha) (for multi-head
// attention, a group of one, that is the per-head rule). Biases of the query and key rows
// (--add-qkv-bias) are scaled with their rows, so q and k themselves scale exactly.
//
// The fp32 masters are scaled (each rank its own heads' rows; under the distributed optimizer's
// sharded masters the data-parallel group gathers the parameter, every rank scales it and keeps
// its shard) and the 16-bit weights rounded from them, so every layout keeps the serial run's
// weights. Multi-latent attention is not covered yet (record_max_logits refuses it). The unfused
// core attention records through the backend's ring-attention block kernel (one extra attention
// pass), and refuses where the backend has none for the model's dtype and head dim.
#pragma once

#include "core/model/gpt_pipeline.h"
#include "core/train/iteration_metrics.h"

namespace ptdp {

/// Starts (on) or stops the recording of the largest attention logits in every attention layer
/// of this rank's chunks (the multi-token prediction modules' included), and clears what was
/// recorded. Throws Error(Unsupported) for multi-latent attention.
void record_max_logits(GptPipeline& model, bool on);

/// After the optimizer step of an iteration whose forwards recorded (record_max_logits): reduces
/// the maxima over the model's ranks (collective over the tensor, context, data and pipeline
/// groups), and where `apply`, rescales the query and key weights of every head whose maximum
/// exceeds `threshold` (see the top of this file); then clears the records. Returns the figures
/// per attention layer (the same on every rank). Throws Error(InvalidArgument) for a threshold
/// that is not positive or an alpha outside [0, 1].
QkClipMetrics apply_qk_clip(GptPipeline& model, ProcessGroups& groups, float threshold, float alpha,
                            bool apply = true);

}  // namespace ptdp
