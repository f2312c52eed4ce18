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
// How eta is split over a layer's projections is the layer's (AttentionLayer::qk_clip_scales):
// linear_qkv with grouped-query attention takes one eta per key head, from its query heads'
// largest maximum, as Megatron-Core's SelfAttention does (its query heads by eta^alpha, the key
// head by eta^(1 - alpha); for multi-head attention that is the per-head rule; the bias rows
// with their weight rows); multi-latent attention scales each head's query nope rows by
// eta^alpha, its query rope rows by eta and its key nope rows by eta^(1 - alpha), the shared
// RoPE key untouched (Kimi K2, Megatron-Core's MLASelfAttention).
//
// The fp32 masters are scaled (each rank its own heads' rows; under the distributed optimizer's
// sharded masters the data-parallel group gathers the parameter, every rank scales it and keeps
// its shard) and the 16-bit weights rounded from them, so every layout keeps the serial run's
// weights. The unfused core attention records through the backend's ring-attention block kernel
// (one extra attention pass), and refuses where the backend has none for the dtype and head dim.
#pragma once

#include "core/model/gpt_pipeline.h"
#include "core/train/iteration_metrics.h"

namespace ptdp {

/// Starts (on) or stops the recording of the largest attention logits in every attention layer
/// of this rank's chunks (the multi-token prediction modules' included), and clears what was
/// recorded.
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
