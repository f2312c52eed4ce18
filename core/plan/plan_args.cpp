// ptdp-plan's flags, one table (name, meaning, how the value is read and checked) that the
// parser and the help text both walk. As in core/train/train_args.cpp, a first walk turns
// `--flag value` into `--flag=value` and reports unknown flags and missing values in our own
// words; CLI11 then collects the values (the last of a repeated flag wins); the table converts
// and checks them, naming the flag and the value.
#include "core/plan/plan_args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <system_error>

#include <CLI/CLI.hpp>

#include "kernels/error.h"

namespace ptdp::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

[[noreturn]] void fail(const std::string& message) { throw_error(ErrorCode::InvalidArgument, message); }

[[noreturn]] void bad_value(const std::string& flag, const std::string& value, const std::string& why) {
  fail(str_cat("--", flag, ": '", value, "' ", why));
}

int64_t to_int(const std::string& flag, const std::string& value, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size()) bad_value(flag, value, "is not an integer");
  if (v < lo || v > hi) bad_value(flag, value, str_cat("is out of range [", lo, ", ", hi, "]"));
  return v;
}

double to_positive(const std::string& flag, const std::string& value, bool zero_ok) {
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v)) {
    bad_value(flag, value, "is not a finite number");
  }
  if (zero_ok ? v < 0 : v <= 0) bad_value(flag, value, zero_ok ? "must be >= 0" : "must be > 0");
  return v;
}

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

struct Flag {
  std::string name;
  std::string metavar;  // empty: boolean
  std::string help;
  std::string default_text;
  int phase = 1;  // 0: picks the base cluster, applied before every other flag
  std::function<void(PlanArgs&, const std::string&)> set;
  bool is_boolean() const { return metavar.empty(); }
};

// Where --nodes and --num-gpus meet after the table is applied.
struct Extra {
  bool nodes_given = false;
  bool cluster_given = false;
  bool cluster_file_given = false;
};
thread_local Extra* g_extra = nullptr;  // set while one parse runs on this thread

Flag value_flag(std::string name, std::string metavar, std::string help, std::string def,
                std::function<void(PlanArgs&, const std::string&)> set, int phase = 1) {
  Flag f;
  f.name = std::move(name);
  f.metavar = std::move(metavar);
  f.help = std::move(help);
  f.default_text = std::move(def);
  f.set = std::move(set);
  f.phase = phase;
  return f;
}

Flag bool_flag(std::string name, std::string help, std::function<void(PlanArgs&)> on) {
  Flag f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.default_text = "off";
  f.set = [on = std::move(on)](PlanArgs& a, const std::string&) { on(a); };
  return f;
}

Flag model_int(const std::string& name, const std::string& help, int GptConfig::*field, int64_t lo, std::string def) {
  return value_flag(name, "N", help, std::move(def), [name, field, lo](PlanArgs& a, const std::string& v) {
    a.request.model.*field = static_cast<int>(to_int(name, v, lo, kIntMax));
  });
}

Flag cluster_number(const std::string& name, const std::string& metavar, const std::string& help,
                    double Cluster::*field, double unit, bool zero_ok) {
  return value_flag(name, metavar, help, "from the cluster", [name, field, unit, zero_ok](PlanArgs& a, const std::string& v) {
    a.cluster.*field = to_positive(name, v, zero_ok) * unit;
  });
}

std::string preset_list() {
  std::string s;
  for (const std::string& n : cluster_preset_names()) s += str_cat(s.empty() ? "" : "|", n);
  return s;
}

std::vector<Flag> make_flags() {
  std::vector<Flag> v;
  // Model (ptdp-train's names).
  v.push_back(model_int("num-layers", "Transformer layers l.", &GptConfig::num_layers, 1, "2"));
  v.push_back(model_int("hidden-size", "Hidden size h.", &GptConfig::hidden_size, 1, "64"));
  v.push_back(model_int("ffn-hidden-size", "MLP hidden size; 0 means 4 * hidden-size.", &GptConfig::ffn_hidden_size, 0, "0"));
  v.push_back(model_int("num-attention-heads", "Attention heads a; t must divide them.", &GptConfig::num_attention_heads, 1, "4"));
  v.push_back(model_int("seq-length", "Tokens per sample s.", &GptConfig::seq_length, 1, "32"));
  v.push_back(model_int("max-position-embeddings", "Rows of the position table; 0 means seq-length.",
                        &GptConfig::max_position_embeddings, 0, "0"));
  v.push_back(model_int("vocab-size", "Vocabulary V.", &GptConfig::vocab_size, 1, "256"));
  v.push_back(model_int("make-vocab-size-divisible-by", "Pad the vocabulary to a multiple of this times t.",
                        &GptConfig::make_vocab_size_divisible_by, 1, "128"));
  v.push_back(bool_flag("untie-embeddings-and-output-weights", "The LM head has its own weights.",
                        [](PlanArgs& a) { a.request.model.tie_embeddings = false; }));
  v.push_back(value_flag("attention-dropout", "P", "Attention dropout (the CPU engine keeps the dropped probabilities too).",
                         "0.1", [](PlanArgs& a, const std::string& s) {
                           const double p = to_positive("attention-dropout", s, true);
                           if (p >= 1) bad_value("attention-dropout", s, "must be in [0, 1)");
                           a.request.model.attention_dropout = static_cast<float>(p);
                         }));
  // Batch, precision, what may be used.
  v.push_back(value_flag("global-batch-size", "N", "Samples per iteration B over all replicas (required).", "none",
                         [](PlanArgs& a, const std::string& s) { a.request.global_batch_size = to_int("global-batch-size", s, 1, kIntMax); }));
  v.push_back(value_flag("micro-batch-size", "N", "Pin the microbatch size b.", "searched",
                         [](PlanArgs& a, const std::string& s) { a.request.micro_batch = static_cast<int>(to_int("micro-batch-size", s, 1, kIntMax)); }));
  v.push_back(value_flag("tensor-model-parallel-size", "N", "Pin t.", "searched", [](PlanArgs& a, const std::string& s) {
    a.request.tensor = static_cast<int>(to_int("tensor-model-parallel-size", s, 1, kIntMax));
  }));
  v.push_back(value_flag("pipeline-model-parallel-size", "N", "Pin p.", "searched", [](PlanArgs& a, const std::string& s) {
    a.request.pipeline = static_cast<int>(to_int("pipeline-model-parallel-size", s, 1, kIntMax));
  }));
  v.push_back(value_flag("num-layers-per-virtual-pipeline-stage", "N", "Pin v = num-layers / (p * N).", "searched",
                         [](PlanArgs& a, const std::string& s) {
                           a.request.layers_per_virtual_stage =
                               static_cast<int>(to_int("num-layers-per-virtual-pipeline-stage", s, 1, kIntMax));
                         }));
  v.push_back(value_flag("pipeline-schedule", "{1f1b,gpipe,zb-h1}",
                         "Pin the schedule (1f1b includes interleaved 1F1B when v > 1).", "1f1b, interleaved, zb-h1",
                         [](PlanArgs& a, const std::string& s) {
                           if (s == "1f1b") a.request.schedule = static_cast<int>(ScheduleKind::OneFOneB);
                           else if (s == "gpipe") a.request.schedule = static_cast<int>(ScheduleKind::GPipe);
                           else if (s == "zb-h1") a.request.schedule = static_cast<int>(ScheduleKind::ZeroBubbleH1);
                           else bad_value("pipeline-schedule", s, "is not one of 1f1b, gpipe, zb-h1");
                         }));
  v.push_back(value_flag("recompute-granularity", "{none,full,selective}", "Pin activation recomputation.",
                         "all three searched", [](PlanArgs& a, const std::string& s) {
                           Recompute r;
                           if (s == "none") r = Recompute::None;
                           else if (s == "full") r = Recompute::Full;
                           else if (s == "selective") r = Recompute::Selective;
                           else bad_value("recompute-granularity", s, "is not one of none, full, selective");
                           for (int i = 0; i < 3; ++i) a.request.allow_recompute[i] = i == static_cast<int>(r);
                         }));
  v.push_back(bool_flag("use-distributed-optimizer", "Allow sharding the optimizer state over the data-parallel group.",
                        [](PlanArgs& a) { a.request.allow_distributed_optimizer = true; }));
  v.push_back(bool_flag("bf16", "Train in bfloat16 (fp32 master weights); default fp32 as ptdp-train.",
                        [](PlanArgs& a) { a.request.precision = Precision::Bf16; }));
  v.push_back(bool_flag("fp16", "Train in float16 (fp32 master weights).", [](PlanArgs& a) { a.request.precision = Precision::Fp16; }));
  v.push_back(bool_flag("no-scatter-gather-tensors-in-pipeline", "Send whole activations between stages.",
                        [](PlanArgs& a) { a.request.scatter_gather = false; }));
  v.push_back(bool_flag("no-overlap-grad-reduce", "Do not overlap the data-parallel reduction with the backward.",
                        [](PlanArgs& a) { a.request.overlap_grad_reduce = false; }));
  // Cluster.
  v.push_back(value_flag("cluster", str_cat("{", preset_list(), "}"), "Cluster preset (one node; see --nodes).", "dgx-a100",
                         [](PlanArgs& a, const std::string& s) {
                           try {
                             a.cluster = cluster_preset(s);
                           } catch (const Error&) {
                             bad_value("cluster", s, str_cat("is not a preset (", preset_list(), ")"));
                           }
                           g_extra->cluster_given = true;
                         },
                         0));
  v.push_back(value_flag("cluster-file", "PATH", "Cluster from a JSON file (keys as --list-clusters shows).", "none",
                         [](PlanArgs& a, const std::string& s) {
                           a.cluster = load_cluster(s);
                           g_extra->cluster_file_given = true;
                         },
                         0));
  v.push_back(value_flag("nodes", "N", "Nodes of the cluster.", "1 (or what --num-gpus needs)",
                         [](PlanArgs& a, const std::string& s) {
                           a.cluster.nodes = static_cast<int>(to_int("nodes", s, 1, 1 << 20));
                           g_extra->nodes_given = true;
                         }));
  v.push_back(value_flag("num-gpus", "N", "GPUs to plan for (the world size t * p * d).", "every GPU of the nodes",
                         [](PlanArgs& a, const std::string& s) { a.request.num_gpus = static_cast<int>(to_int("num-gpus", s, 1, 1 << 24)); }));
  v.push_back(value_flag("gpus-per-node", "N", "GPUs per node.", "from the cluster", [](PlanArgs& a, const std::string& s) {
    a.cluster.gpus_per_node = static_cast<int>(to_int("gpus-per-node", s, 1, 1 << 16));
  }));
  v.push_back(cluster_number("memory-gib", "GIB", "Memory per GPU.", &Cluster::memory_bytes, kGiB, false));
  v.push_back(cluster_number("memory-reserve-gib", "GIB", "Memory per GPU kept free (context, buffers, fragmentation).",
                             &Cluster::memory_reserve_bytes, kGiB, true));
  v.push_back(cluster_number("peak-tflops-16bit", "X", "Dense bf16/fp16 peak per GPU.", &Cluster::peak_flops_16bit, 1e12, false));
  v.push_back(cluster_number("peak-tflops-fp32", "X", "Peak per GPU for fp32 training.", &Cluster::peak_flops_fp32, 1e12, false));
  v.push_back(cluster_number("gemm-efficiency", "X", "Achieved fraction of peak for large layers, in (0, 1].",
                             &Cluster::gemm_efficiency, 1.0, false));
  v.push_back(cluster_number("memory-bandwidth-gbs", "X", "Achieved device-memory bandwidth.", &Cluster::memory_bandwidth, 1e9, false));
  v.push_back(cluster_number("intra-node-bandwidth-gbs", "X", "Collective bus bandwidth per GPU inside a node.",
                             &Cluster::intra_node_bandwidth, 1e9, false));
  v.push_back(cluster_number("intra-node-latency-us", "X", "Latency of a collective or transfer inside a node.",
                             &Cluster::intra_node_latency, 1e-6, true));
  v.push_back(cluster_number("inter-node-bandwidth-gbs", "X", "Bandwidth per GPU between nodes.",
                             &Cluster::inter_node_bandwidth, 1e9, false));
  v.push_back(cluster_number("inter-node-latency-us", "X", "Latency of a collective or transfer between nodes.",
                             &Cluster::inter_node_latency, 1e-6, true));
  // Output.
  v.push_back(value_flag("top", "N", "Layouts to show.", "5",
                         [](PlanArgs& a, const std::string& s) { a.request.top = static_cast<int>(to_int("top", s, 1, 1000)); }));
  v.push_back(bool_flag("json", "Print the answer as JSON.", [](PlanArgs& a) { a.json = true; }));
  v.push_back(value_flag("schedule-svg", "PATH", "Draw the chosen layout's pipeline schedule as SVG.", "none",
                         [](PlanArgs& a, const std::string& s) { a.schedule_svg = s; }));
  v.push_back(bool_flag("list-clusters", "Print the presets as JSON and exit.", [](PlanArgs& a) { a.list_clusters = true; }));
  v.push_back(bool_flag("help", "Show this help (also -h).", [](PlanArgs& a) { a.help = true; }));
  return v;
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = make_flags();
  return table;
}

const Flag* find_flag(const std::string& name) {
  for (const Flag& f : flags()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown_flag(const std::string& name) {
  std::string message = str_cat("unknown flag --", name);
  const Flag* best = nullptr;
  std::size_t best_distance = 3;
  for (const Flag& f : flags()) {
    const std::size_t d = edit_distance(name, f.name);
    if (d < best_distance) {
      best_distance = d;
      best = &f;
    }
  }
  if (best) message += str_cat(" (did you mean --", best->name, "?)");
  fail(message);
}

std::vector<std::string> normalise(const std::vector<std::string>& args) {
  std::vector<std::string> tokens;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      const std::size_t eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      const Flag* f = find_flag(name);
      if (f == nullptr) unknown_flag(name);
      if (f->is_boolean()) {
        if (eq != std::string::npos) fail(str_cat("--", name, " takes no value, got '", a.substr(eq + 1), "'"));
        tokens.push_back(a);
        continue;
      }
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else {
        if (i + 1 == args.size()) fail(str_cat("--", name, ": missing value (", f->metavar, ")"));
        value = args[++i];
        if (value.size() > 2 && value.compare(0, 2, "--") == 0) {
          fail(str_cat("--", name, ": missing value (", f->metavar, ") before ", value));
        }
      }
      if (value.empty()) fail(str_cat("--", name, ": empty value; expected ", f->metavar));
      tokens.push_back(str_cat("--", name, "=", value));
    } else {
      fail(str_cat("unexpected argument '", a, "': flags start with -- (see --help)"));
    }
  }
  return tokens;
}

}  // namespace

PlanArgs parse_plan_args(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      PlanArgs h;
      h.help = true;
      return h;
    }
  }
  std::vector<std::string> tokens = normalise(args);
  const std::vector<Flag>& table = flags();
  CLI::App app{"ptdp-plan"};
  app.set_help_flag();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<CLI::Option*> options;
  for (const Flag& f : table) {
    const std::string name = str_cat("--", f.name);
    options.push_back(f.is_boolean() ? app.add_flag(name, f.help) : app.add_option(name, f.help));
  }
  std::reverse(tokens.begin(), tokens.end());
  try {
    app.parse(tokens);
  } catch (const CLI::Error& e) {
    fail(str_cat("command line: ", e.what()));
  }

  PlanArgs out;
  out.cluster = cluster_preset("dgx-a100");
  Extra extra;
  struct Scope {
    explicit Scope(Extra* e) { g_extra = e; }
    ~Scope() { g_extra = nullptr; }
  } scope(&extra);
  for (int phase = 0; phase < 2; ++phase) {
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (table[i].phase != phase || options[i]->count() == 0) continue;
      table[i].set(out, table[i].is_boolean() ? std::string() : options[i]->as<std::string>());
    }
  }
  if (out.list_clusters) return out;
  if (extra.cluster_given && extra.cluster_file_given) fail("--cluster and --cluster-file are exclusive");
  if (app.count("--bf16") > 0 && app.count("--fp16") > 0) fail("--fp16 and --bf16 are exclusive");
  PlanRequest& r = out.request;
  if (r.global_batch_size == 0) {
    fail("--global-batch-size is required: the planner splits it over d replicas and m microbatches of b");
  }
  const GptConfig& g = r.model;
  if (g.hidden_size % g.num_attention_heads != 0) {
    fail(str_cat("--num-attention-heads ", g.num_attention_heads, " does not divide --hidden-size ", g.hidden_size));
  }
  if (g.max_position_embeddings > 0 && g.seq_length > g.max_position_embeddings) {
    fail(str_cat("--seq-length ", g.seq_length, " is longer than --max-position-embeddings ", g.max_position_embeddings));
  }
  if (r.micro_batch > 0 && r.global_batch_size % r.micro_batch != 0) {
    fail(str_cat("--global-batch-size ", r.global_batch_size, " is not a multiple of --micro-batch-size ", r.micro_batch));
  }
  if (r.pipeline > 0 && g.num_layers % r.pipeline != 0) {
    fail(str_cat("--num-layers ", g.num_layers, " is not divisible by --pipeline-model-parallel-size ", r.pipeline));
  }
  if (r.tensor > 0 && g.num_attention_heads % r.tensor != 0) {
    fail(str_cat("--tensor-model-parallel-size ", r.tensor, " does not divide --num-attention-heads ", g.num_attention_heads));
  }
  if (r.num_gpus > 0) {
    const int needed = (r.num_gpus + out.cluster.gpus_per_node - 1) / out.cluster.gpus_per_node;
    if (!extra.nodes_given) {
      out.cluster.nodes = std::max(out.cluster.nodes, needed);
    } else if (out.cluster.nodes < needed) {
      fail(str_cat("--num-gpus ", r.num_gpus, " needs ", needed, " nodes of ", out.cluster.gpus_per_node,
                   " GPUs, but --nodes is ", out.cluster.nodes));
    }
  }
  try {
    out.cluster.validate();
  } catch (const Error& e) {
    fail(str_cat("the cluster flags: ", e.what()));
  }
  return out;
}

std::string plan_args_help(const std::string& program) {
  constexpr std::size_t kColumn = 36;
  std::string out = str_cat("Usage: ", program.empty() ? std::string("ptdp-plan") : program, " [flags]\n\n");
  out +=
      "Plans how to lay out a GPT on a GPU cluster: searches tensor (t), pipeline (p, v), data (d)\n"
      "parallelism, the microbatch size, the schedule and recomputation, estimates memory per GPU and\n"
      "time per iteration with the performance model of Narayanan et al. (SC'21), and shows the\n"
      "fastest layouts that fit, with the reasons. Flags share ptdp-train's names where they overlap.\n"
      "Exit status: 0 with a layout, 1 when none fits (the message says what is missing), 2 on bad flags.\n\n";
  for (const Flag& f : flags()) {
    std::string line = str_cat("  --", f.name, f.is_boolean() ? "" : " ", f.metavar);
    if (line.size() + 2 > kColumn) {
      out += str_cat(line, "\n");
      line.clear();
    }
    line.append(kColumn - line.size(), ' ');
    out += str_cat(line, f.help, " Default: ", f.default_text, ".\n");
  }
  return out;
}

}  // namespace ptdp::plan
