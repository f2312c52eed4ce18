// Megatron's --moe-layer-freq: which decoder layers have an MoE MLP. The value is an integer N
// (layer i is MoE when i % N == 0: every layer for 1, layers 0, 2, 4, ... for 2) or Megatron's
// list pattern, a Python list expression of 0 (dense) and 1 (MoE) per layer such as
// "([0]*3+[1]*1)*3" or "[1,0,1]". Megatron eval()s the pattern after checking its characters;
// ptdp parses the same grammar (list literals, '+' concatenation, '*' repetition, parentheses)
// without evaluating anything. Shared by ptdp-train, ptdp-plan, checkpoints and the C API.
#pragma once

#include <string>
#include <vector>

namespace ptdp {

/// One entry per layer (1: MoE, 0: dense) for `value` over `num_layers` layers; empty when every
/// layer is MoE by the integer form (N = 1), as MoeConfig::layer_pattern has it. A list pattern
/// is returned as written (its length is LayerConfig::validate's to check against the layers).
/// Throws Error(InvalidArgument) "--moe-layer-freq: 'VALUE' ..." (with `flag` in place of
/// --moe-layer-freq) naming what is wrong and where: an integer below 1, a character Megatron
/// refuses, a syntax error, an entry that is not 0 or 1, a pattern over 1048576 entries.
std::vector<int> parse_moe_layer_freq(const std::string& value, int num_layers,
                                      const std::string& flag = "moe-layer-freq");

/// The shortest value parse_moe_layer_freq reads back as `pattern` over `num_layers` layers:
/// "1" for an empty pattern, "N" when the pattern is every N-th layer from layer 0, else the
/// list "[1,0,1,...]".
std::string format_moe_layer_freq(const std::vector<int>& pattern, int num_layers);

}  // namespace ptdp
