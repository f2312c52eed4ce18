#include "core/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "base/error.h"
#include "core/pipeline/svg.h"

namespace ptdp::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}
std::string gib(double bytes) { return fmt("%.1f", bytes / kGiB) + " GiB"; }
std::string pct(double fraction) { return fmt("%.1f", 100.0 * fraction) + "%"; }
std::string secs(double s) { return s < 1.0 ? fmt("%.1f", s * 1e3) + " ms" : fmt("%.2f", s) + " s"; }

std::vector<int> divisors(int64_t n) {
  std::vector<int> out;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) out.push_back(static_cast<int>(i));
  }
  return out;
}

int recompute_rank(Recompute r) { return r == Recompute::None ? 0 : (r == Recompute::Selective ? 1 : 2); }

// Best first: shorter iteration; on (near) ties fewer model-parallel GPUs, less recomputation,
// no distributed optimizer, smaller microbatches, an even split.
bool better(const Estimate& a, const Estimate& b) {
  const double ta = a.iteration, tb = b.iteration;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  const Layout &x = a.layout, &y = b.layout;
  const bool xu = x.first > 0 || x.last > 0, yu = y.first > 0 || y.last > 0;
  return std::make_tuple(x.t * x.c * x.p, recompute_rank(x.recompute), x.distributed_optimizer, x.sequence_parallel,
                         x.b, x.v, xu, x.e * x.expert_tensor()) <
         std::make_tuple(y.t * y.c * y.p, recompute_rank(y.recompute), y.distributed_optimizer, y.sequence_parallel,
                         y.b, y.v, yu, y.e * y.expert_tensor());
}

// Chunk-microbatch pairs (p m v) up to which the list-scheduled schedules (ZB-V, DualPipeV,
// interleaved zero bubble) are searched.
constexpr int64_t kGeneratedScheduleActions = 4096;

// The schedules a (p, v) may run under the request's pin.
std::vector<ScheduleKind> schedules_for(const PlanRequest& req, int p, int v) {
  std::vector<ScheduleKind> out;
  const auto pinned = [&](ScheduleKind k) {
    if (req.schedule < 0) return true;
    const auto want = static_cast<ScheduleKind>(req.schedule);
    // As in ptdp-train: 1F1B with v > 1 chunks is the interleaved schedule.
    return want == k || (want == ScheduleKind::OneFOneB && k == ScheduleKind::Interleaved1F1B);
  };
  if (p == 1) {
    if (v != 1) return out;
    if (req.schedule < 0 || static_cast<ScheduleKind>(req.schedule) == ScheduleKind::OneFOneB) {
      out.push_back(ScheduleKind::OneFOneB);
    } else if (static_cast<ScheduleKind>(req.schedule) == ScheduleKind::GPipe ||
               static_cast<ScheduleKind>(req.schedule) == ScheduleKind::ZeroBubbleH1) {
      out.push_back(static_cast<ScheduleKind>(req.schedule));  // the chunk-per-rank schedules
    }
    return out;
  }
  if (v > 1) {
    if (pinned(ScheduleKind::Interleaved1F1B)) out.push_back(ScheduleKind::Interleaved1F1B);
    // The zero-bubble schedules (after the paper): interleaved zero bubble, and with two chunks
    // per rank ZB-V and DualPipeV in the V placement. Searched unless another schedule is pinned.
    if (req.schedule < 0 || req.schedule == static_cast<int>(ScheduleKind::InterleavedZeroBubble)) {
      out.push_back(ScheduleKind::InterleavedZeroBubble);
    }
    if (v == 2 && (req.schedule < 0 || req.schedule == static_cast<int>(ScheduleKind::ZeroBubbleV))) {
      out.push_back(ScheduleKind::ZeroBubbleV);
    }
    if (v == 2 && (req.schedule < 0 || req.schedule == static_cast<int>(ScheduleKind::DualPipeV))) {
      out.push_back(ScheduleKind::DualPipeV);
    }
    return out;
  }
  if (pinned(ScheduleKind::OneFOneB)) out.push_back(ScheduleKind::OneFOneB);
  if (pinned(ScheduleKind::ZeroBubbleH1)) out.push_back(ScheduleKind::ZeroBubbleH1);
  // GPipe is never faster than 1F1B and holds more: only when asked for.
  if (req.schedule == static_cast<int>(ScheduleKind::GPipe)) out.push_back(ScheduleKind::GPipe);
  return out;
}

// Why `e` is worse than `best`: the component that grew the most, in words.
std::string worse_because(const Estimate& e, const Estimate& best, const Cluster& cl) {
  const double slower = e.iteration / best.iteration - 1.0;
  struct Part {
    double delta;
    std::string text;
  };
  std::vector<Part> parts;
  const Layout &x = e.layout, &y = best.layout;
  {
    std::string why = str_cat("compute ", secs(e.compute), " vs ", secs(best.compute));
    if (x.recompute != y.recompute) {
      why += str_cat(" (", recompute_name(x.recompute), " recomputation vs ", recompute_name(y.recompute), ")");
    } else if (x.t != y.t || x.b != y.b) {
      why += " (per-GPU GEMMs of another size)";
    }
    parts.push_back({e.compute - best.compute, why});
  }
  if (e.expert_comm > 0 || best.expert_comm > 0) {
    std::string why = str_cat("MoE token exchanges ", secs(e.expert_comm), " vs ", secs(best.expert_comm));
    if (e.expert_crosses_nodes && !best.expert_crosses_nodes) {
      why = str_cat("e * etp = ", x.e * x.expert_tensor(), " spans nodes: the MoE token all-to-alls take ",
                    secs(e.expert_comm), " vs ", secs(best.expert_comm), " per iteration");
    }
    parts.push_back({e.expert_comm - best.expert_comm, why});
  }
  {
    // tensor_comm holds the MoE token exchanges too, counted above.
    const double tc = e.tensor_comm - e.expert_comm, btc = best.tensor_comm - best.expert_comm;
    std::string why = str_cat("tensor all-reduces ", secs(tc), " vs ", secs(btc));
    if (e.tensor_crosses_nodes && !best.tensor_crosses_nodes && best.tensor_allreduce_seconds > 0) {
      why = str_cat("t = ", x.t, " crosses nodes (", cl.gpus_per_node, " GPUs each): each tensor all-reduce ",
                    fmt("%.1f", e.tensor_allreduce_seconds / best.tensor_allreduce_seconds), "x slower, ",
                    secs(tc), " vs ", secs(btc), " per iteration");
    } else if (e.tensor_crosses_nodes && !best.tensor_crosses_nodes) {
      why = str_cat("t = ", x.t, " crosses nodes: tensor all-reduces over the inter-node network take ", secs(tc),
                    " per iteration");
    }
    parts.push_back({tc - btc, why});
  }
  parts.push_back({e.bubble - best.bubble, str_cat("pipeline bubble ", pct(e.bubble_fraction), " (", secs(e.bubble),
                                                   ") vs ", pct(best.bubble_fraction), " (", secs(best.bubble), ")")});
  parts.push_back({e.pipeline_comm - best.pipeline_comm,
                   str_cat("pipeline transfers ", secs(e.pipeline_comm), " vs ", secs(best.pipeline_comm))});
  parts.push_back({e.data_parallel + e.embedding_sync - best.data_parallel - best.embedding_sync,
                   str_cat("data-parallel reduction ", secs(e.data_parallel), " vs ", secs(best.data_parallel))});
  parts.push_back({e.optimizer - best.optimizer,
                   str_cat("optimizer step ", secs(e.optimizer), " vs ", secs(best.optimizer))});
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.delta > b.delta; });
  if (slower <= 1e-9) return "as fast as #1 (ranked after it by fewer model-parallel GPUs and less recomputation)";
  std::string out = str_cat(pct(slower), " slower: ", parts[0].text);
  if (parts.size() > 1 && parts[1].delta > 0.25 * parts[0].delta && parts[1].delta > 0) {
    out += str_cat("; ", parts[1].text);
  }
  return out;
}

// Whether the model is the paper's GPT (LayerNorm, GeLU, learned positions, multi-head
// attention with biases), for which the paper's parameter formula holds.
bool plain_gpt(const GptConfig& g) {
  return !g.moe.enabled() && g.normalization == Normalization::LayerNorm && !g.swiglu && g.learned_positions() &&
         g.query_groups() == g.num_attention_heads && g.attention_width() == g.hidden_size && g.add_bias_linear &&
         !g.qk_layernorm;
}

// The architecture in words: the options that differ from the GPT.
std::string architecture_words(const GptConfig& g) {
  if (plain_gpt(g)) return "";
  std::string w;
  const auto add = [&w](const std::string& s) { w += str_cat(w.empty() ? "" : ", ", s); };
  add(normalization_name(g.normalization));
  if (g.swiglu) add("SwiGLU");
  if (g.rope()) {
    add(str_cat("RoPE base ", fmt("%.0f", g.rotary_base), g.rope_scaling.enabled ? " scaled" : "",
                g.uses_yarn() ? str_cat(" with YaRN x", fmt("%g", g.yarn.factor)) : std::string()));
  } else if (!g.learned_positions()) {
    add("no position embedding");
  }
  const int groups = g.query_groups();
  if (g.multi_latent_attention) {
    add(str_cat("multi-latent attention (q_lora_rank ", g.q_lora_rank, ", kv_lora_rank ", g.kv_lora_rank,
                ", qk dims ", g.qk_head_dim, " + ", g.qk_pos_emb_head_dim, ", v dim ", g.v_head_dim,
                g.qk_layernorm ? ", latent norms)" : ")"));
  } else {
    if (groups != g.num_attention_heads) add(groups == 1 ? "multi-query attention" : str_cat("g = ", groups, " query groups"));
    if (g.attention_width() != g.hidden_size) add(str_cat("dh = ", g.head_dim()));
  }
  if (!g.add_bias_linear) add(g.add_qkv_bias ? "bias on qkv only" : "no linear bias");
  if (g.qk_layernorm && !g.multi_latent_attention) {
    add(g.qk_layernorm_across_heads ? "q/k norms across heads" : "q/k norms");
  }
  if (g.moe.enabled()) {
    add(str_cat("MoE: ", g.num_moe_layers(), " of ", g.num_layers, " layers with ", g.moe.num_experts,
                " experts of ffn ", g.moe_ffn(), ", top-", g.moe.router_topk,
                g.moe.shared_expert_intermediate_size > 0
                    ? str_cat(", shared ", g.moe.shared_expert_intermediate_size)
                    : std::string()));
  }
  if (g.mtp_num_layers > 0) {
    add(str_cat(g.mtp_num_layers, " MTP module", g.mtp_num_layers > 1 ? "s" : "", " on the last stage",
                g.mtp_moe() ? " (MoE layers)" : ""));
  }
  return w;
}

std::string model_line(const PlanRequest& req) {
  const GptConfig& g = req.model;
  const bool gpt = plain_gpt(g);
  const double billions = (gpt ? paper_parameters(g) : static_cast<double>(published_parameters(g))) / 1e9;
  std::string shape = str_cat("l = ", g.num_layers, ", h = ", g.hidden_size, ", a = ", g.num_attention_heads);
  if (!gpt) shape += str_cat(", ffn = ", g.ffn());
  shape += str_cat(", V = ", g.vocab_size, ", s = ", g.seq_length);
  if (!gpt) shape += str_cat("; ", architecture_words(g));
  return str_cat(gpt ? "GPT" : "Decoder", " of ", fmt(gpt ? "%.1f" : "%.2f", billions), "B parameters (", shape,
                 "), global batch ", req.global_batch_size, ", ", precision_name(req.precision),
                 req.optimizer == PlanOptimizer::Adam ? "" : str_cat(", ", optimizer_name(req.optimizer)));
}

}  // namespace

namespace {

// Tensor sizes: divisors of a node's GPUs, and whole nodes (to show what crossing costs); each
// must divide the GPUs, the heads, the query groups (each tensor rank holds whole key/value
// heads) and the MLP width.
struct TensorSizes {
  std::vector<int> usable;
  std::vector<int> excluded_by_heads;  ///< divide the GPUs but not the heads, groups or MLP width
};

// Whether t splits the attention heads, the query groups and the MLP width evenly.
bool splits_layer(const GptConfig& g, int t) {
  return g.num_attention_heads % t == 0 && g.query_groups() % t == 0 && g.ffn() % t == 0;
}

// What t does not divide, in Megatron's flag names: "num-attention-heads 14 or num-query-groups 2".
std::string not_divided(const GptConfig& g, int t) {
  std::string w;
  const auto add = [&w](const std::string& s) { w += str_cat(w.empty() ? "" : " or ", s); };
  if (g.num_attention_heads % t != 0) add(str_cat("num-attention-heads ", g.num_attention_heads));
  if (g.query_groups() % t != 0 && g.query_groups() != g.num_attention_heads) {
    add(str_cat("num-query-groups ", g.query_groups()));
  }
  if (g.ffn() % t != 0) add(str_cat("the MLP width ", g.ffn()));
  return w;
}

TensorSizes tensor_sizes(const PlanRequest& req, const Cluster& cl, int n) {
  const GptConfig& g = req.model;
  const int gpn = cl.gpus_per_node;
  std::set<int> t_options;
  for (int t : divisors(gpn)) t_options.insert(t);
  for (int t = 2 * gpn; t <= 4 * gpn; t *= 2) t_options.insert(t);
  if (req.tensor > 0) t_options = {req.tensor};
  TensorSizes out;
  for (int t : t_options) {
    if (n % t != 0) continue;
    if (!splits_layer(g, t)) {
      out.excluded_by_heads.push_back(t);
      continue;
    }
    out.usable.push_back(t);
  }
  return out;
}

bool uneven_pinned(const PlanRequest& req) { return req.first_stage_layers > 0 || req.last_stage_layers > 0; }

// Whether the layers split over p stages of v chunks with the request's pinned first and last
// stage layers.
bool pinned_split_runs(const PlanRequest& req, int p, int v) {
  PipelineSplit s;
  s.pipeline = p;
  s.virtual_stages = v;
  s.first_stage_layers = req.first_stage_layers;
  s.last_stage_layers = req.last_stage_layers;
  try {
    chunk_layer_counts(req.model.num_layers, s);
  } catch (const Error&) {
    return false;
  }
  return true;
}

// Pipeline sizes to try: every p up to the layers (those that do not divide them with uneven
// first and last stages only, as Megatron runs DeepSeek-V3's 61 layers on 16 stages), or with
// pinned uneven stages those the pinned counts allow.
std::vector<int> pipeline_options(const PlanRequest& req) {
  const GptConfig& g = req.model;
  if (!uneven_pinned(req)) {
    std::vector<int> ps;
    for (int p = 1; p <= g.num_layers; ++p) ps.push_back(p);
    return ps;
  }
  std::vector<int> ps;
  for (int p = 1; p <= g.num_layers; ++p) {
    if (pinned_split_runs(req, p, 1)) ps.push_back(p);
  }
  return ps;
}

// Chunks per pipeline rank the layers allow at pipeline size p, under the request's pin.
std::vector<int> virtual_stage_options(const PlanRequest& req, int p) {
  const GptConfig& g = req.model;
  std::vector<int> vs;
  if (uneven_pinned(req)) {
    for (int v = 1; v <= g.num_layers; ++v) {
      if ((v == 1 || p > 1) && pinned_split_runs(req, p, v)) vs.push_back(v);
    }
  } else if (req.layers_per_virtual_stage > 0) {
    if (g.num_layers % (p * req.layers_per_virtual_stage) == 0) {
      vs.push_back(g.num_layers / (p * req.layers_per_virtual_stage));
    }
  } else if (p == 1 || g.num_layers % p != 0) {
    vs.push_back(1);  // Megatron gives v with uneven stages only by --num-virtual-stages-per-pipeline-rank
  } else {
    vs = divisors(g.num_layers / p);
  }
  return vs;
}

// Context-parallel sizes to try: 1 unless the request allows more (0: 1, 2, 4, ... while 2 c
// divides the sequence and t c the GPUs; N: only N).
std::vector<int> context_parallel_options(const PlanRequest& req, const Cluster& cl, int n, int t) {
  if (req.context_parallel == 1) return {1};
  if (req.context_parallel > 1) return {req.context_parallel};
  std::vector<int> out;
  for (int c = 1; t * c <= n && c <= 4 * cl.gpus_per_node; c *= 2) {
    if (n % (t * c) == 0 && (c == 1 || req.model.seq_length % (2 * c) == 0)) out.push_back(c);
  }
  return out;
}

// The (e, etp) pairs of an MoE model on a stage of t c d ranks: e dividing num_experts, etp 1 or
// t (Megatron's usual choices: experts unsplit, or split as the dense layers are), e etp dividing
// the stage's ranks and etp the expert width; the request's pins; {1, t} for a dense model.
std::vector<std::pair<int, int>> expert_options(const PlanRequest& req, int t, int stage_ranks) {
  const GptConfig& g = req.model;
  if (!g.moe.enabled()) return {{1, 0}};
  std::set<int> etps = {1, t};
  if (req.expert_tensor > 0) etps = {req.expert_tensor};
  std::vector<std::pair<int, int>> out;
  for (int e : divisors(g.moe.num_experts)) {
    if (req.expert_model > 0 && e != req.expert_model) continue;
    for (int etp : etps) {
      if (stage_ranks % (e * etp) != 0 || g.moe_ffn() % etp != 0 || (etp > 1 && g.add_bias_linear)) continue;
      out.push_back({e, etp});
    }
  }
  return out;
}

struct Candidates {
  std::vector<Layout> layouts;      ///< in search order
  std::vector<std::string> no_run;  ///< why (t, p) pairs were skipped
};

// The first and last stage layers (Megatron's uneven stages; 0: no count of its own) that make
// the slowest stage of layout L fastest: the last stage also runs the logits layer and the loss,
// the first the embedding, so giving them fewer layers than the others can balance the
// pipeline. {0, 0} (the even split) unless some uneven split beats it by more than 0.5%.
// Counts up to twice the even share are tried, in steps of v; the splits allowed are
// core/model/pipeline_split.h's (checked here in closed form, for speed).
std::pair<int, int> balanced_split(const PlanRequest& req, const Cluster& cl, const Layout& L) {
  const int n = req.model.num_layers, p = L.p, v = L.v;
  const StageSeconds parts = stage_seconds(req, cl, L);
  // The slowest stage's seconds with `first` and `last` layers on the ends, or -1 when the
  // layers do not split so.
  const auto slowest = [&](int first, int last) {
    const int middle_stages = p - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);
    const int middle_layers = n - first - last;
    if (first % v != 0 || last % v != 0 || middle_layers < 0 || (middle_layers > 0) != (middle_stages > 0)) return -1.0;
    int per_middle = 0;
    if (middle_stages > 0) {
      if (middle_layers % middle_stages != 0 || (middle_layers / middle_stages) % v != 0) return -1.0;
      per_middle = middle_layers / middle_stages;
      if (per_middle == 0) return -1.0;
    }
    const int on_first = first > 0 ? first : per_middle, on_last = last > 0 ? last : per_middle;
    double worst = std::max(on_first * parts.layer + parts.first, on_last * parts.layer + parts.last);
    if (p > 2) worst = std::max(worst, per_middle * parts.layer);
    return worst;
  };
  const double even = n % (p * v) == 0 ? slowest(0, 0) : -1.0;
  std::pair<int, int> best{0, 0};
  double best_time = even;
  const int limit = std::min(n - 1, 2 * ((n + p - 1) / p));
  for (int first = 0; first <= limit; first += v) {
    for (int last = 0; last <= limit; last += v) {
      if (first == 0 && last == 0) continue;
      const double time = slowest(first, last);
      if (time < 0) continue;
      if (best_time < 0 || time < best_time * (1.0 - 1e-12)) {
        best = {first, last};
        best_time = time;
      }
    }
  }
  if (even >= 0 && best_time > even * (1.0 - 0.005)) return {0, 0};
  return best;
}

// Every layout of n GPUs the request allows, in a fixed order (so that ties rank the same way
// on every run): each (t, p, d, v, b, schedule, recomputation, optimizer) with an even split,
// and with p > 1 also with the uneven first and last stages that balance its stage times best
// (or only with the pinned ones).
Candidates candidate_layouts(const PlanRequest& req, const Cluster& cl, int n, const std::vector<int>& ts) {
  const int64_t B = req.global_batch_size;
  Candidates c;
  // by (t, p, v, b, recompute + sp + c, e, etp)
  std::map<std::tuple<int, int, int, int, int, int, int>, std::pair<int, int>> balanced;
  for (int t : ts) {
   for (int cp : context_parallel_options(req, cl, n, t)) {
    for (int p : pipeline_options(req)) {
      if (req.pipeline > 0 && p != req.pipeline) continue;
      if (n % (t * cp * p) != 0) continue;
      const int d = n / (t * cp * p);
      if (B % d != 0) {
        c.no_run.push_back(str_cat("t = ", t, cp > 1 ? str_cat(", c = ", cp) : std::string(), ", p = ", p, ": d = ", d,
                                   " does not divide the global batch ", B));
        continue;
      }
      for (int b : divisors(B / d)) {
        if (req.micro_batch > 0 && b != req.micro_batch) continue;
        const int m = static_cast<int>(B / d / b);
        for (int v : virtual_stage_options(req, p)) {
          if (v > 1 && (p == 1 || m % p != 0)) continue;  // interleaving needs m a multiple of p
          if (static_cast<int64_t>(p) * m * v > (1 << 24)) continue;  // beyond the schedule generator
          for (ScheduleKind kind : schedules_for(req, p, v)) {
            // The V placement takes an even split; DualPipeV needs m >= 2p microbatches.
            const bool v_shaped = kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV;
            if (v_shaped && (uneven_pinned(req) || req.layers_per_virtual_stage > 0 || req.model.num_layers % (2 * p) != 0)) {
              continue;
            }
            if (kind == ScheduleKind::DualPipeV && m < 2 * p) continue;
            // The generated schedules are searched where generating them stays quick.
            const bool generated = v_shaped || kind == ScheduleKind::InterleavedZeroBubble;
            if (generated && static_cast<int64_t>(p) * m * v > kGeneratedScheduleActions) continue;
            for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
              if (!req.allow_recompute[static_cast<int>(rc)]) continue;
              for (int variant = 0; variant < 4; ++variant) {
               for (const auto& [e, etp] : expert_options(req, t, t * cp * d)) {
                const int dist = variant % 2, sp = variant / 2;
                // MoE with t > 1 runs with sequence parallelism only (Megatron's rule).
                const bool moe_needs_sp = req.model.moe.enabled() && t > 1;
                if (dist == 1 && (!req.allow_distributed_optimizer || d == 1)) continue;
                if (sp == 0 && moe_needs_sp) continue;
                if (sp == 1 &&
                    (!(req.allow_sequence_parallel || moe_needs_sp) || t == 1 || req.model.seq_length % t != 0)) {
                  continue;
                }
                Layout L;
                L.t = t;
                L.p = p;
                L.d = d;
                L.v = v;
                L.b = b;
                L.m = m;
                L.schedule = kind;
                L.recompute = rc;
                L.distributed_optimizer = dist == 1;
                L.sequence_parallel = sp == 1;
                L.c = cp;
                L.e = e;
                L.etp = etp;
                if (uneven_pinned(req)) {
                  L.first = req.first_stage_layers;
                  L.last = req.last_stage_layers;
                  c.layouts.push_back(L);
                  continue;
                }
                // Layers that p does not divide run only with uneven first and last stages.
                const bool even_runs = req.model.num_layers % (p * v) == 0;
                if (even_runs) c.layouts.push_back(L);
                // Megatron gives v with uneven stages only by --num-virtual-stages-per-pipeline-rank.
                if (p == 1 || req.layers_per_virtual_stage > 0 || v_shaped) continue;
                const auto key = std::make_tuple(t, p, v, b, static_cast<int>(rc) + 3 * sp + 6 * cp, e, etp);
                if (balanced.count(key) == 0) balanced[key] = balanced_split(req, cl, L);
                const std::pair<int, int> split = balanced[key];
                if (split.first == 0 && split.second == 0) continue;
                L.first = split.first;
                L.last = split.second;
                c.layouts.push_back(L);
               }
              }
            }
          }
        }
      }
    }
  }
   }
  return c;
}

// The analytic estimates of the candidates: those that fit, and the one needing the least
// memory (which says how far off the rest are when nothing fits).
struct Scores {
  std::vector<Estimate> fitting;  ///< best first
  bool any = false;
  Estimate smallest;
};

Scores score_layouts(const PlanRequest& req, const Cluster& cl, const std::vector<Layout>& layouts) {
  Scores sc;
  for (const Layout& L : layouts) {
    Estimate e = estimate(req, cl, L, false);
    if (!sc.any || e.memory.total() < sc.smallest.memory.total()) sc.smallest = e;
    sc.any = true;
    if (e.fits) sc.fitting.push_back(std::move(e));
  }
  std::sort(sc.fitting.begin(), sc.fitting.end(), better);
  return sc;
}

// The leaders of the analytic ranking re-estimated with the schedule simulator (exact bubble
// and in-flight activations) and ranked again: simulating every candidate would be too slow,
// and the analytic ranking already puts the contenders first.
std::vector<Estimate> rank_leaders(const PlanRequest& req, const Cluster& cl, const std::vector<Estimate>& fitting) {
  const std::size_t refine =
      std::min<std::size_t>(fitting.size(), static_cast<std::size_t>(std::max(2 * req.top, 8)));
  std::vector<Estimate> leaders;
  for (std::size_t i = 0; i < refine; ++i) {
    Estimate e = estimate(req, cl, fitting[i].layout, true);
    if (e.fits) leaders.push_back(std::move(e));
  }
  if (leaders.empty()) leaders.push_back(fitting.front());  // every leader grew out of memory: keep the analytic best
  std::sort(leaders.begin(), leaders.end(), better);
  return leaders;
}

// What the heads, the query groups and the MLP width rule out, for the reasons (empty when they
// rule out nothing).
std::string heads_note(const PlanRequest& req, const TensorSizes& sizes) {
  const GptConfig& g = req.model;
  if (sizes.excluded_by_heads.empty()) return {};
  std::string allowed, excluded;
  for (int t : sizes.usable) allowed += str_cat(allowed.empty() ? "" : ", ", t);
  for (int t : sizes.excluded_by_heads) excluded += str_cat(excluded.empty() ? "" : ", ", t);
  bool by_groups = false, by_ffn = false;
  for (int t : sizes.excluded_by_heads) {
    by_groups = by_groups || (g.query_groups() % t != 0 && g.query_groups() != g.num_attention_heads);
    by_ffn = by_ffn || g.ffn() % t != 0;
  }
  std::string what = str_cat("num-attention-heads ", g.num_attention_heads);
  if (by_groups) what += str_cat(", num-query-groups ", g.query_groups());
  if (by_ffn) what += str_cat(" and the MLP width ", g.ffn());
  return str_cat(what, " rule out t = ", excluded, allowed.empty() ? "" : str_cat(", leaving t = ", allowed));
}

// Why no layout is feasible: none can run at all, or none fits in memory (then by how much,
// and what might help).
std::string infeasible_reason(const PlanRequest& req, const Cluster& cl, int n, const TensorSizes& sizes,
                              const Candidates& candidates, const Scores& scores) {
  const std::string note = heads_note(req, sizes);
  if (!scores.any) {
    std::string why = str_cat("no layout of ", n, " GPUs can run this model");
    if (sizes.usable.empty()) {
      why += str_cat(": no tensor-parallel size divides both the GPUs and the heads (and query groups)");
      if (req.tensor > 0) why += str_cat(" (pinned t = ", req.tensor, ")");
    }
    if (!note.empty()) why += str_cat("; ", note);
    const std::vector<std::string>& no_run = candidates.no_run;
    if (!no_run.empty()) why += str_cat("; ", no_run.front(), no_run.size() > 1 ? " (and others like it)" : "");
    if (req.pipeline > 0 || req.micro_batch > 0 || req.layers_per_virtual_stage > 0 || req.schedule >= 0 ||
        uneven_pinned(req)) {
      why += "; the pinned sizes or schedule leave no layout (layers must split over p * v, with the pinned first "
             "and last stage layers too, the batch over d * b, and interleaving needs m a multiple of p)";
    }
    return why;
  }
  const Estimate& smallest = scores.smallest;
  const double need = smallest.memory.total(), have = cl.usable_memory();
  std::string why = str_cat("no layout fits in memory: the smallest need is ", gib(need), " per GPU (",
                            smallest.layout.str(), ": weights ", gib(smallest.memory.weights), ", gradients ",
                            gib(smallest.memory.gradients), ", optimizer ", gib(smallest.memory.optimizer),
                            ", activations ", gib(smallest.memory.activations), "); the GPUs have ", gib(have),
                            " usable (", gib(cl.memory_bytes), " less ", gib(cl.memory_reserve_bytes),
                            " reserved): short by ", gib(need - have));
  if (!note.empty()) why += str_cat("; ", note);
  std::vector<std::string> hints;
  if (!req.allow_distributed_optimizer) hints.push_back("--use-distributed-optimizer");
  if (!req.allow_recompute[static_cast<int>(Recompute::Full)]) hints.push_back("full recomputation");
  if (req.micro_batch > 1) hints.push_back("a smaller --micro-batch-size");
  hints.push_back("more GPUs or GPUs with more memory");
  std::string h;
  for (const std::string& s : hints) h += str_cat(h.empty() ? "" : ", ", s);
  why += str_cat(" (try ", h, ")");
  return why;
}

// Whether a smaller p at the best layout's t is ruled out by memory: probes the least memory
// any layout with (t, p) needs (b = 1, 1F1B with the fewest slots, full recomputation and the
// distributed optimizer where allowed). Returns the largest such p in words, or empty.
std::string pipeline_ruled_out_by_memory(const PlanRequest& req, const Cluster& cl, int n, const Layout& best) {
  const GptConfig& g = req.model;
  const int64_t B = req.global_batch_size;
  std::string ruled_out;
  if (req.pipeline != 0 || req.micro_batch > 1 || uneven_pinned(req)) return ruled_out;
  for (int p : divisors(g.num_layers)) {
    if (p >= best.p || n % (best.t * best.c * p) != 0) continue;
    const int d = n / (best.t * best.c * p);
    if (B % d != 0) continue;
    Layout probe = best;
    probe.p = p;
    probe.d = d;
    probe.v = 1;
    probe.first = probe.last = 0;
    probe.b = 1;
    probe.m = static_cast<int>(B / d);
    probe.schedule = ScheduleKind::OneFOneB;
    probe.recompute = req.allow_recompute[static_cast<int>(Recompute::Full)] ? Recompute::Full : best.recompute;
    probe.distributed_optimizer = req.allow_distributed_optimizer && d > 1;
    const Estimate pe = estimate(req, cl, probe, false);
    if (!pe.fits) {
      ruled_out = str_cat("p = ", p, " (t = ", best.t, ") needs at least ", gib(pe.memory.total()), " > ",
                          gib(cl.usable_memory()), " usable per GPU");
    }
  }
  return ruled_out;
}

// "first stage 3, last stage 1, the others 2 layers" (or "stages of 3 and 1 layers" at p = 2).
std::string stage_words(const GptConfig& g, const Layout& L) {
  const std::vector<int> n = stage_layer_counts(g.num_layers, L.split());
  if (L.p == 2) return str_cat("stages of ", n.front(), " and ", n.back(), " layers");
  std::string s;
  if (L.first > 0) s += str_cat("first stage ", L.first, ", ");
  if (L.last > 0) s += str_cat("last stage ", L.last, ", ");
  return s + str_cat("the others ", n[1], " layers");
}

// Why uneven first and last stages: the last stage's logits layer and loss (and the first's
// embedding) make an even split's end stages the slowest; what the uneven split does to the
// slowest stage's time per microbatch.
std::string uneven_reason(const PlanRequest& req, const Cluster& cl, const Layout& L) {
  const GptConfig& g = req.model;
  const std::vector<double> uneven = stage_microbatch_seconds(req, cl, L);
  std::string why = str_cat("uneven stages (Megatron's --decoder-first-pipeline-num-layers / "
                            "--decoder-last-pipeline-num-layers: ",
                            stage_words(g, L), "): the last stage also runs the logits layer and the loss, the first "
                            "the embedding; slowest stage ",
                            secs(*std::max_element(uneven.begin(), uneven.end())), " per microbatch");
  Layout even = L;
  even.first = even.last = 0;
  try {
    const std::vector<double> e = stage_microbatch_seconds(req, cl, even);
    why += str_cat(" vs ", secs(*std::max_element(e.begin(), e.end())), " with ", g.num_layers / L.p,
                   " layers on every stage (last stage ", secs(e.back()), ", first ", secs(e.front()), ")");
  } catch (const Error&) {
    why += str_cat("; ", g.num_layers, " layers do not split evenly over p = ", L.p, " x v = ", L.v);
  }
  return why;
}

// Sequence parallelism's trade, measured on layout `e` against the same layout with the other
// setting: activation memory per GPU (the norms' and dropouts' activations split over t) and
// time (the same bytes through a reduce-scatter and an all-gather instead of an all-reduce, the
// norms and dropouts on s / t tokens).
std::string sequence_parallel_reason(const PlanRequest& req, const Cluster& cl, const Estimate& e) {
  Layout other = e.layout;
  other.sequence_parallel = !other.sequence_parallel;
  Estimate o;
  try {
    o = estimate(req, cl, other, e.simulated);
  } catch (const Error& err) {
    // The other choice is refused (MoE with t > 1 needs sequence parallelism): the layout's own
    // choice is the only one, whichever it is.
    return str_cat(e.layout.sequence_parallel ? "sequence parallelism (--sequence-parallel), required: without it, "
                                              : "no sequence parallelism: ",
                   err.what());
  }
  const Estimate& with = e.layout.sequence_parallel ? e : o;
  const Estimate& without = e.layout.sequence_parallel ? o : e;
  const std::string trade =
      str_cat("activations ", gib(with.memory.activations), " with it vs ", gib(without.memory.activations),
              " without; its reduce-scatter and all-gather move the bytes of the all-reduce they replace, and the "
              "norms and dropouts run on ",
              e.layout.c > 1 ? "s / (c t) = " : "s / t = ", req.model.seq_length / (e.layout.t * e.layout.c),
              " tokens: ", secs(with.iteration), " vs ", secs(without.iteration),
              " per iteration");
  if (e.layout.sequence_parallel) return str_cat("sequence parallelism (--sequence-parallel): ", trade);
  return str_cat("no sequence parallelism (", trade, without.fits && !with.fits ? "; it would not fit" : "", ")");
}

// Context parallelism's trade: each rank keeps and computes s / c tokens, the attention's keys
// and values travel around the ring.
std::string context_parallel_reason(const PlanRequest& req, const Cluster& cl, const Estimate& e) {
  const Layout& L = e.layout;
  return str_cat("context parallelism c = ", L.c, " (--context-parallel-size): each rank holds s / c = ",
                 req.model.seq_length / L.c, " tokens of every sequence (activations ", gib(e.memory.activations),
                 ") and its share of the attention; keys and values go around a ring of ", L.c, " ranks ",
                 L.t * L.c > cl.gpus_per_node ? "across nodes" : "inside a node",
                 ", hidden behind the attention products where shorter; the gradients are reduced over d c = ",
                 L.d * L.c, " ranks");
}

// Why e and etp: what the experts cost this layout (their share of each GPU's memory, the token
// exchanges), and the nearest other (e, etp) with the rest of the layout kept: how much slower
// it is and why, or that it does not fit.
std::string expert_parallel_reason(const PlanRequest& req, const Cluster& cl, const Estimate& best) {
  const GptConfig& g = req.model;
  const Layout& L = best.layout;
  std::string why = str_cat("e = ", L.e, ", etp = ", L.expert_tensor(), " (--expert-model-parallel-size, "
                            "--expert-tensor-parallel-size): each GPU holds ", g.moe.num_experts / L.e, " of the ",
                            g.moe.num_experts, " experts of every MoE layer",
                            L.expert_tensor() > 1 ? str_cat(", each split ", L.expert_tensor(), " ways") : "", ", ",
                            fmt("%.2f", static_cast<double>(best.expert_params_per_gpu) / 1e9),
                            "B expert parameters, their gradients reduced and (with the distributed optimizer) their "
                            "state sharded over edp = ",
                            L.expert_data(), " ranks");
  if (L.e > 1) {
    why += str_cat("; each token exchange (dispatch or combine) ", secs(best.alltoall_seconds),
                   best.expert_crosses_nodes ? " across nodes" : " inside a node", ", ", secs(best.expert_comm),
                   " per iteration");
  }
  // The alternatives with the rest of the layout kept.
  std::vector<std::string> others;
  for (const auto& [e, etp] : expert_options(req, L.t, L.t * L.c * L.d)) {
    if (e == L.e && etp == L.expert_tensor()) continue;
    if (e != L.e && etp != L.expert_tensor()) continue;  // one change at a time: the neighbours
    Layout other = L;
    other.e = e;
    other.etp = etp;
    try {
      const Estimate o = estimate(req, cl, other, best.simulated);
      const std::string name = str_cat("e = ", e, ", etp = ", o.layout.expert_tensor());
      if (!o.fits) {
        others.push_back(str_cat(name, " needs ", gib(o.memory.total()), " > ", gib(cl.usable_memory())));
      } else {
        others.push_back(str_cat(name, ": ", worse_because(o, best, cl)));
      }
    } catch (const Error&) {
    }
  }
  for (std::size_t i = 0; i < others.size() && i < 3; ++i) why += str_cat(i == 0 ? "; against " : ", ", others[i]);
  return why;
}

// Why the best layout was chosen, one reason per choice (t, p, d, schedule, recomputation,
// distributed optimizer), joined.
std::string why_best(const PlanRequest& req, const Cluster& cl, const Estimate& best,
                     const std::string& pipeline_ruled_out) {
  const GptConfig& g = req.model;
  const Layout& L = best.layout;
  std::vector<std::string> reasons;
  if (L.t == 1) {
    reasons.push_back("t = 1: no tensor parallelism needed");
  } else if (!best.tensor_crosses_nodes) {
    reasons.push_back(str_cat("t = ", L.t, " keeps the tensor all-reduces inside a node (",
                              secs(best.tensor_allreduce_seconds), " each, ", secs(best.tensor_comm), " per iteration)"));
  } else {
    reasons.push_back(str_cat("t = ", L.t, " spans nodes; nothing smaller is faster"));
  }
  if (L.p == 1) {
    reasons.push_back("p = 1: the model fits without a pipeline");
  } else if (!pipeline_ruled_out.empty()) {
    reasons.push_back(str_cat("p = ", L.p, " is needed for memory: ", pipeline_ruled_out));
  } else if (L.first == 0 && L.last == 0) {
    reasons.push_back(str_cat("p = ", L.p, " (", g.num_layers / L.p, " layers per stage) is the fastest split"));
  } else {
    reasons.push_back(str_cat("p = ", L.p, " is the fastest split"));
  }
  if (L.p > 1 && (L.first > 0 || L.last > 0)) reasons.push_back(uneven_reason(req, cl, L));
  reasons.push_back(str_cat("d = ", L.d, " replicas: m = ", L.m, " microbatches of b = ", L.b, " per pipeline"));
  if (L.p > 1) {
    std::string s = str_cat(schedule_short_name(L.schedule));
    if (L.v > 1) s += str_cat(" with v = ", L.v, " chunks per rank");
    s += str_cat(": bubble ", pct(best.bubble_fraction), " (analytic (p-1)/(v m) = ",
                 pct(static_cast<double>(L.p - 1) / (L.v * L.m)), ")");
    reasons.push_back(s);
  }
  reasons.push_back(str_cat("recomputation ", recompute_name(L.recompute), ", memory ", gib(best.memory.total()), " of ",
                            gib(cl.usable_memory()), " usable"));
  if (L.distributed_optimizer) {
    reasons.push_back(str_cat("the distributed optimizer shards the optimizer state to ", gib(best.memory.optimizer)));
  }
  if (L.t > 1 && (req.allow_sequence_parallel || g.moe.enabled())) {
    reasons.push_back(sequence_parallel_reason(req, cl, best));
  }
  if (L.c > 1) reasons.push_back(context_parallel_reason(req, cl, best));
  if (g.moe.enabled()) reasons.push_back(expert_parallel_reason(req, cl, best));
  std::string why;
  for (const std::string& s : reasons) why += str_cat(why.empty() ? "" : "; ", s);
  return why;
}

// What rules out the tensor sizes outside the table: each one's best layout (simulated leaders
// first, then the analytic rest) and what makes it slower, or that none fits; the sizes the
// heads exclude; and the pipeline sizes memory excludes.
std::vector<std::string> ruled_out_alternatives(const PlanResult& r, const TensorSizes& sizes,
                                                const std::vector<Estimate>& leaders,
                                                const std::vector<Estimate>& fitting,
                                                const std::string& pipeline_ruled_out) {
  const GptConfig& g = r.request.model;
  const Estimate& best = r.layouts.front();
  std::map<int, Estimate> best_of_t;
  for (const std::vector<Estimate>* list : {&leaders, &fitting}) {
    for (const Estimate& e : *list) {
      if (best_of_t.count(e.layout.t) == 0) best_of_t[e.layout.t] = e;
    }
  }
  std::vector<std::string> out;
  std::set<int> shown_t;
  for (const Estimate& e : r.layouts) shown_t.insert(e.layout.t);
  for (int t : sizes.usable) {
    if (shown_t.count(t) != 0) continue;
    auto it = best_of_t.find(t);
    if (it != best_of_t.end()) {
      out.push_back(str_cat("t = ", t, " at best (", it->second.layout.str(), "): ",
                            worse_because(it->second, best, r.cluster)));
    } else {
      out.push_back(str_cat("t = ", t, ": no layout fits in memory"));
    }
  }
  for (int t : sizes.excluded_by_heads) out.push_back(str_cat("t = ", t, ": does not divide ", not_divided(g, t)));
  if (!pipeline_ruled_out.empty()) out.push_back(pipeline_ruled_out);
  return out;
}

}  // namespace

PlanResult make_plan(const PlanRequest& req, const Cluster& cl) {
  req.validate();
  cl.validate();
  PlanResult r;
  r.request = req;
  r.cluster = cl;
  const int n = req.num_gpus > 0 ? req.num_gpus : cl.num_gpus();
  PTDP_CHECK_ARG(n <= cl.num_gpus(), str_cat("asked for ", n, " GPUs but the cluster has ", cl.nodes, " x ",
                                             cl.gpus_per_node, " = ", cl.num_gpus()));
  r.num_gpus = n;

  const TensorSizes sizes = tensor_sizes(req, cl, n);
  const Candidates candidates = candidate_layouts(req, cl, n, sizes.usable);
  const Scores scores = score_layouts(req, cl, candidates.layouts);
  r.considered = static_cast<int>(candidates.layouts.size());
  r.fitting = static_cast<int>(scores.fitting.size());
  if (scores.fitting.empty()) {
    r.feasible = false;
    r.reason = infeasible_reason(req, cl, n, sizes, candidates, scores);
    return r;
  }

  const std::vector<Estimate> leaders = rank_leaders(req, cl, scores.fitting);
  const std::size_t shown = std::min<std::size_t>(leaders.size(), static_cast<std::size_t>(req.top));
  r.layouts.assign(leaders.begin(), leaders.begin() + static_cast<std::ptrdiff_t>(shown));
  r.feasible = true;

  const Estimate& best = r.layouts.front();
  const std::string pipeline_ruled_out = pipeline_ruled_out_by_memory(req, cl, n, best.layout);
  r.why.push_back(why_best(req, cl, best, pipeline_ruled_out));
  for (std::size_t i = 1; i < r.layouts.size(); ++i) r.why.push_back(worse_because(r.layouts[i], best, cl));
  r.ruled_out = ruled_out_alternatives(r, sizes, leaders, scores.fitting, pipeline_ruled_out);
  return r;
}

namespace {

// How the GEMMs are priced: the precision's table, or the single efficiency.
std::string gemm_words(const PlanRequest& req, const Cluster& cl) {
  const std::string& table = req.precision == Precision::Fp32 ? cl.gemm_table_fp32 : cl.gemm_table_16bit;
  if (table.empty()) return str_cat("GEMM efficiency ", fmt("%.2f", cl.gemm_efficiency));
  return str_cat("GEMM efficiency by shape from table ", table, ", memory-bound kernels at ",
                 fmt("%.0f", cl.memory_bandwidth / 1e9), " GB/s");
}

}  // namespace

std::string plan_report(const PlanResult& r) {
  const Cluster& cl = r.cluster;
  const PlanRequest& req = r.request;
  std::string out = str_cat(model_line(req), "\n");
  const int64_t exact = req.model.parameter_count(r.layouts.empty() ? 1 : r.layouts.front().layout.t);
  out += str_cat("ptdp's model: ", exact, " parameters with the padded vocabulary (",
                 plain_gpt(req.model) ? str_cat("the paper's formula: ", fmt("%.0f", paper_parameters(req.model)))
                                      : str_cat(published_parameters(req.model), " with the vocabulary unpadded"),
                 ")", req.model.moe.enabled()
                          ? str_cat("; ", req.model.active_parameter_count(1), " active per token (k = ",
                                    req.model.moe.router_topk, " of ", req.model.moe.num_experts, " experts)")
                          : std::string(),
                 "\n");
  out += str_cat("cluster ", cl.name, ": ", r.num_gpus, " GPUs (", cl.gpus_per_node, " per node), ", gib(cl.memory_bytes),
                 " each (", gib(cl.memory_reserve_bytes), " reserved), ",
                 fmt("%.0f", (req.precision == Precision::Fp32 ? cl.peak_flops_fp32 : cl.peak_flops_16bit) / 1e12),
                 " TFLOP/s peak, ", gemm_words(req, cl), "\n");
  out += str_cat("searched ", r.considered, " layouts, ", r.fitting, " fit in memory\n");
  if (!r.feasible) {
    out += str_cat("\nno feasible layout: ", r.reason, "\n");
    return out;
  }
  out += "\n  #    t    p      d   v    b      m  schedule     recompute  dist-opt  mem GiB   iter s  bubble  TFLOP/s    MFU  "
         "first/last\n";
  for (std::size_t i = 0; i < r.layouts.size(); ++i) {
    const Estimate& e = r.layouts[i];
    const Layout& L = e.layout;
    char line[256];
    // Uneven stages: the first and last stage's layers ("-": no count of its own); even: "-".
    const std::string ends = L.first == 0 && L.last == 0
                                 ? std::string("-")
                                 : str_cat(L.first > 0 ? std::to_string(L.first) : std::string("-"), "/",
                                           L.last > 0 ? std::to_string(L.last) : std::string("-"));
    std::snprintf(line, sizeof line, "%3zu %4d %4d %6d %3d %4d %6d  %-11s  %-9s  %-8s %8.1f %8.3f %6.1f%% %8.1f %5.1f%%  %s\n",
                  i + 1, L.t, L.p, L.d, L.v, L.b, L.m, L.p == 1 && L.schedule == ScheduleKind::OneFOneB ? "-" : schedule_short_name(L.schedule),
                  recompute_name(L.recompute), L.distributed_optimizer ? "yes" : "no", e.memory.total() / kGiB,
                  e.iteration, 100.0 * e.bubble_fraction, e.tflops_per_gpu, 100.0 * e.mfu, ends.c_str());
    out += line;
  }
  bool any_sp = false;
  for (const Estimate& e : r.layouts) any_sp = any_sp || e.layout.sequence_parallel;
  bool any_cp = false;
  for (const Estimate& e : r.layouts) any_cp = any_cp || e.layout.c > 1;
  if (any_cp) {
    out += "context parallelism:";
    for (std::size_t i = 0; i < r.layouts.size(); ++i) {
      if (r.layouts[i].layout.c > 1) out += str_cat(" #", i + 1, " c=", r.layouts[i].layout.c);
    }
    out += "\n";
  }
  if (any_sp) {
    out += "sequence parallelism:";
    for (std::size_t i = 0; i < r.layouts.size(); ++i) {
      if (r.layouts[i].layout.sequence_parallel) out += str_cat(" #", i + 1);
    }
    out += "\n";
  }
  out += "\nWhy:\n";
  for (std::size_t i = 0; i < r.layouts.size(); ++i) out += str_cat("  #", i + 1, ": ", r.why[i], "\n");
  const Estimate& b = r.layouts.front();
  out += str_cat("\n#1 per GPU (pipeline rank ", b.memory_stage, "): weights ", gib(b.memory.weights), ", gradients ",
                 gib(b.memory.gradients), ", optimizer ", gib(b.memory.optimizer), ", activations ",
                 gib(b.memory.activations), " (", b.memory.slots, " microbatch slots)\n");
  out += str_cat("#1 per iteration: compute ", secs(b.compute), ", tensor all-reduces ", secs(b.tensor_comm),
                 ", pipeline transfers ", secs(b.pipeline_comm), ", bubble ", secs(b.bubble), ", data-parallel ",
                 secs(b.data_parallel), ", embedding sync ", secs(b.embedding_sync), ", optimizer ", secs(b.optimizer),
                 b.newton_schulz > 0 ? str_cat(" (Newton-Schulz ", secs(b.newton_schulz), " at peak)") : std::string(),
                 " = ", secs(b.iteration), b.simulated ? " (pipeline simulated)" : "", "\n");
  if (!r.ruled_out.empty()) {
    out += "\nRuled out:\n";
    for (const std::string& s : r.ruled_out) out += str_cat("  ", s, "\n");
  }
  return out;
}

nlohmann::json plan_to_json(const PlanResult& r) {
  using nlohmann::json;
  const GptConfig& g = r.request.model;
  json j = json::object();
  j["model"] = {{"num_layers", g.num_layers},
                {"hidden_size", g.hidden_size},
                {"num_attention_heads", g.num_attention_heads},
                {"num_query_groups", g.query_groups()},
                {"kv_channels", g.head_dim()},
                {"ffn_hidden_size", g.ffn()},
                {"vocab_size", g.vocab_size},
                {"seq_length", g.seq_length},
                {"normalization", normalization_name(g.normalization)},
                {"swiglu", g.swiglu},
                {"position_embedding_type", position_embedding_name(g.position_embedding)},
                {"add_bias_linear", g.add_bias_linear},
                {"add_qkv_bias", g.qkv_bias()},
                {"qk_layernorm", g.qk_layernorm},
                {"qk_layernorm_across_heads", g.qk_layernorm_across_heads},
                {"untie_embeddings_and_output_weights", !g.tie_embeddings},
                {"global_batch_size", r.request.global_batch_size},
                {"precision", precision_name(r.request.precision)},
                {"optimizer", optimizer_name(r.request.optimizer)},
                {"parameters", published_parameters(g)},
                {"parameters_formula", paper_parameters(g)}};
  if (g.multi_latent_attention) {
    j["model"]["multi_latent_attention"] = {{"q_lora_rank", g.q_lora_rank},
                                            {"kv_lora_rank", g.kv_lora_rank},
                                            {"qk_head_dim", g.qk_head_dim},
                                            {"qk_pos_emb_head_dim", g.qk_pos_emb_head_dim},
                                            {"v_head_dim", g.v_head_dim}};
  }
  if (g.moe.enabled()) {
    j["model"]["num_experts"] = g.moe.num_experts;
    j["model"]["moe_router_topk"] = g.moe.router_topk;
    j["model"]["num_moe_layers"] = g.num_moe_layers();
  }
  j["model"]["mtp_num_layers"] = g.mtp_num_layers;
  GptConfig unpadded = g;  // as "parameters": the published vocabulary
  unpadded.make_vocab_size_divisible_by = 1;
  j["model"]["active_parameters"] = unpadded.active_parameter_count(1);
  j["cluster"] = cluster_to_json(r.cluster);
  j["num_gpus"] = r.num_gpus;
  j["considered"] = r.considered;
  j["fitting"] = r.fitting;
  j["feasible"] = r.feasible;
  if (!r.feasible) j["reason"] = r.reason;
  json layouts = json::array();
  for (std::size_t i = 0; i < r.layouts.size(); ++i) {
    const Estimate& e = r.layouts[i];
    const Layout& L = e.layout;
    layouts.push_back({{"t", L.t},
                       {"p", L.p},
                       {"d", L.d},
                       {"v", L.v},
                       {"decoder_first_pipeline_num_layers", L.first},
                       {"decoder_last_pipeline_num_layers", L.last},
                       {"stage_layers", stage_layer_counts(g.num_layers, L.split())},
                       {"b", L.b},
                       {"m", L.m},
                       {"schedule", schedule_short_name(L.schedule)},
                       {"recompute", recompute_name(L.recompute)},
                       {"distributed_optimizer", L.distributed_optimizer},
                       {"sequence_parallel", L.sequence_parallel},
                       {"context_parallel", L.c},
                       {"expert_model_parallel", L.e},
                       {"expert_tensor_parallel", L.expert_tensor()},
                       {"parameters_exact", e.params_exact},
                       {"parameters_per_gpu", e.params_per_gpu},
                       {"memory_bytes",
                        {{"weights", e.memory.weights},
                         {"gradients", e.memory.gradients},
                         {"optimizer", e.memory.optimizer},
                         {"activations", e.memory.activations},
                         {"total", e.memory.total()},
                         {"slots", e.memory.slots},
                         {"pipeline_rank", e.memory_stage}}},
                       {"seconds",
                        {{"compute", e.compute},
                         {"tensor_comm", e.tensor_comm},
                         {"pipeline_comm", e.pipeline_comm},
                         {"bubble", e.bubble},
                         {"data_parallel", e.data_parallel},
                         {"embedding_sync", e.embedding_sync},
                         {"optimizer", e.optimizer},
                         {"newton_schulz", e.newton_schulz},
                         {"expert_comm", e.expert_comm},
                         {"iteration", e.iteration}}},
                       {"bubble_fraction", e.bubble_fraction},
                       {"simulated", e.simulated},
                       {"tflops_per_gpu", e.tflops_per_gpu},
                       {"mfu", e.mfu},
                       {"why", r.why[i]}});
  }
  j["layouts"] = layouts;
  j["ruled_out"] = r.ruled_out;
  return j;
}

void write_plan_schedule_svg(const PlanResult& r, int index, const std::string& path) {
  PTDP_CHECK_ARG(index >= 0 && index < static_cast<int>(r.layouts.size()),
                 str_cat("layout index ", index, " is outside [0, ", r.layouts.size(), ")"));
  const Estimate& e = r.layouts[static_cast<std::size_t>(index)];
  ScheduleCosts ms = e.costs;  // milliseconds read better on the axis
  ms.forward *= 1e3;
  ms.backward *= 1e3;
  ms.backward_input *= 1e3;
  ms.backward_weight *= 1e3;
  ms.p2p_latency *= 1e3;
  write_schedule_svg(make_schedule(e.layout.schedule, e.layout.p, e.layout.m, e.layout.v), ms, path);
}

}  // namespace ptdp::plan
