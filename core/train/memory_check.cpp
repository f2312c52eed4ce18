#include "core/train/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/env_switch.h"
#include "base/error.h"
#include "core/plan/cluster.h"
#include "core/plan/cost_model.h"
#include "core/tensor/tensor.h"
#ifdef PTDP_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#endif

namespace ptdp {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / kGiB);
  return buf;
}

// MemAvailable from /proc/meminfo in bytes, or sysconf's free pages; -1 when neither answers.
double node_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : -1.0;
}

// What the cgroup (v2) still allows: memory.max less memory.current; -1 without a limit.
double cgroup_available_bytes() {
  std::ifstream max_in("/sys/fs/cgroup/memory.max");
  std::string max_text;
  if (!(max_in >> max_text) || max_text == "max") return -1.0;
  const double limit = std::strtod(max_text.c_str(), nullptr);
  double current = 0;
  std::ifstream cur_in("/sys/fs/cgroup/memory.current");
  cur_in >> current;
  return std::max(0.0, limit - current);
}

// The planner's figure from `f`, or nullopt with the planner's reason (in `why_not`, may be
// null) for a layout or split it does not model.
template <class F>
auto planner_figure(F&& f, std::string* why_not) -> std::optional<decltype(f())> {
  try {
    return f();
  } catch (const Error& e) {
    if (why_not) *why_not = e.what();
    return std::nullopt;
  }
}

}  // namespace

bool memory_check_enabled() { return env_switch_on("PTDP_MEMORY_CHECK"); }

std::optional<MemoryNeed> estimate_run_memory(const TrainArgs& a, const RunLayout& layout, const Device& device,
                                              std::string* why_not) {
  plan::PlanRequest req;
  req.model = to_gpt_config(a);
  // --attention-backend auto as this device resolves it (the planner's own auto reads the
  // device off the precision: fp32 the CPU, 16 bits CUDA). The device is the run's, which this
  // build drives (the loop picked it).
  if (req.model.attention == AttentionImpl::Auto) {
    const bool fused = backend_for(device).fused_attention_supported(req.model.precision,
                                                                     req.model.attention_head_dim());
    req.model.attention = fused ? AttentionImpl::Fused : AttentionImpl::Unfused;
  }
  req.global_batch_size = layout.global_batch;
  req.precision = a.bf16 ? plan::Precision::Bf16 : a.fp16 ? plan::Precision::Fp16 : plan::Precision::Fp32;
  req.allow_distributed_optimizer = a.use_distributed_optimizer;
  req.allow_sequence_parallel = a.sequence_parallel;
  req.context_parallel = layout.c;
  req.num_gpus = layout.world;
  plan::Layout L;
  L.t = layout.t;
  L.p = layout.p;
  L.d = layout.d;
  L.v = layout.v;
  L.b = layout.b;
  L.m = layout.m;
  L.c = layout.c;
  L.first = a.decoder_first_pipeline_num_layers.value_or(0);
  L.last = a.decoder_last_pipeline_num_layers.value_or(0);
  L.schedule = schedule_kind(a);
  L.recompute = a.recompute_granularity;
  L.distributed_optimizer = a.use_distributed_optimizer;
  L.sequence_parallel = a.sequence_parallel && layout.t > 1;
  L.e = a.expert_model_parallel_size;
  L.etp = a.expert_tensor_parallel_size.value_or(0);
  const auto e = planner_figure(
      [&] { return plan::estimate(req, plan::cpu_cluster(layout.world, layout.world), L, false).memory; }, why_not);
  if (!e) return std::nullopt;
  return MemoryNeed{e->weights, e->gradients, e->optimizer, e->activations};
}

double available_memory_bytes(const Device& device, int local_size, std::string* source) {
  if (device.type == DeviceType::CUDA) {
#ifdef PTDP_HAVE_CUDA
    const double free_b = static_cast<double>(cuda::device_free_bytes(device.index));
    if (source) *source = "free on cuda:" + std::to_string(device.index);
    return free_b > 0 ? free_b : -1.0;
#else
    return -1.0;
#endif
  }
  const double node = node_available_bytes();
  const double group = cgroup_available_bytes();
  double avail = node;
  std::string from = "MemAvailable " + gib(node) + " GiB";
  if (group >= 0 && (node < 0 || group < node)) {
    avail = group;
    from = "the cgroup's memory.max leaves " + gib(group) + " GiB";
  }
  if (avail < 0) return -1.0;
  const int ranks = std::max(1, local_size);
  if (source) *source = from + (ranks > 1 ? " shared by " + std::to_string(ranks) + " ranks on this node" : "");
  return avail / ranks;
}

void refuse_run_that_does_not_fit(const TrainArgs& a, const RunLayout& layout, const Device& device,
                                  int local_size) {
  if (!memory_check_enabled()) return;
  // A layout the planner does not model is left to the model's own checks, which name the flag.
  const std::optional<MemoryNeed> estimate = estimate_run_memory(a, layout, device);
  if (!estimate) return;
  const MemoryNeed& need = *estimate;
  std::string source;
  const double avail = available_memory_bytes(device, local_size, &source);
  if (avail < 0 || need.total() <= avail) return;
  std::vector<std::pair<double, std::string>> items = {{need.weights, "parameters"},
                                                       {need.gradients, "gradients"},
                                                       {need.optimizer, "optimizer state"},
                                                       {need.activations, "activations"}};
  std::sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string parts;
  for (const auto& [bytes, name] : items) {
    if (!parts.empty()) parts += ", ";
    parts += name + " " + gib(bytes);
  }
  throw_error(ErrorCode::OutOfMemory,
              "the run would not fit: it needs " + gib(need.total()) + " GiB per rank (" + parts + " GiB; " +
                  std::to_string(a.num_layers) + " layers of hidden size " + std::to_string(a.hidden_size) +
                  ", micro-batch " + std::to_string(layout.b) + " x " + std::to_string(layout.m) +
                  " microbatches, t=" + std::to_string(layout.t) + " p=" + std::to_string(layout.p) +
                  " d=" + std::to_string(layout.d) + "); " + gib(avail) + " GiB available per rank on " +
                  device.str() + " (" + source +
                  "). Use more ranks or a smaller model, micro-batch or --recompute-granularity; "
                  "PTDP_MEMORY_CHECK=0 runs it anyway");
}

void refuse_model_that_does_not_fit(const GptConfig& config, const ProcessGroups& groups, const Device& device,
                                    int local_size) {
  if (!memory_check_enabled()) return;
  const int t = groups.size(GroupKind::Tensor), p = groups.size(GroupKind::Pipeline);
  const int v = groups.layout().virtual_stages();
  // A split the planner does not model is left to the model's own checks, which name it.
  const int stage = groups.rank(GroupKind::Pipeline);
  // The experts of an MoE model are split over e ranks of etp each.
  PipelineSplit split;
  split.pipeline = p;
  split.virtual_stages = v;
  const int e = groups.layout().expert_model(), etp = groups.layout().expert_tensor();
  const std::optional<int64_t> params =
      planner_figure([&] { return plan::stage_parameters(config, t, split, stage, e, etp); }, nullptr);
  if (!params) return;
  const double n = static_cast<double>(*params);
  const double weight_bytes = config.precision == DType::F32 ? 4.0 : 2.0;
  const double need = n * (weight_bytes + 4.0 + (config.precision == DType::F32 ? 0.0 : 4.0));
  std::string source;
  const double avail = available_memory_bytes(device, local_size, &source);
  if (avail < 0 || need <= avail) return;
  throw_error(ErrorCode::OutOfMemory,
              "the model would not fit: its " + std::to_string(*params) + " parameters on this rank (" +
                  std::to_string(config.num_layers) + " layers of hidden size " + std::to_string(config.hidden_size) +
                  ", vocabulary " + std::to_string(config.vocab_size) + ") need " + gib(need) +
                  " GiB with their gradients; " + gib(avail) + " GiB available on " + device.str() + " (" + source +
                  "). PTDP_MEMORY_CHECK=0 tries anyway");
}

}  // namespace ptdp
