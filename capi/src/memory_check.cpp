#include "capi/src/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
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

namespace ptdp::capi {

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

}  // namespace

bool memory_check_enabled() { return env_switch_on("PTDP_MEMORY_CHECK"); }

bool estimate_run_memory(const RunShape& shape, MemoryNeed* need) {
  const TrainArgs& a = *shape.args;
  plan::PlanRequest req;
  req.model = to_gpt_config(a);
  // --attention-backend auto as this device resolves it (the planner's own auto reads the
  // device off the precision: fp32 the CPU, 16 bits CUDA).
  if (req.model.attention == AttentionImpl::Auto) {
    try {
      const Backend& be = backend_for(shape.device);
      const bool fused = be.fused_attention_supported(req.model.precision, req.model.head_dim());
      req.model.attention = fused ? AttentionImpl::Fused : AttentionImpl::Unfused;
    } catch (const Error&) {
      // no backend for the device here: the planner's auto stands
    }
  }
  req.global_batch_size = shape.global_batch;
  req.precision = a.bf16 ? plan::Precision::Bf16 : a.fp16 ? plan::Precision::Fp16 : plan::Precision::Fp32;
  req.allow_distributed_optimizer = a.use_distributed_optimizer;
  req.allow_sequence_parallel = a.sequence_parallel;
  req.context_parallel = shape.c;
  req.num_gpus = shape.world;
  plan::Layout L;
  L.t = shape.t;
  L.p = shape.p;
  L.d = shape.d;
  L.v = shape.v;
  L.b = shape.b;
  L.m = shape.m;
  L.c = shape.c;
  L.first = a.decoder_first_pipeline_num_layers.value_or(0);
  L.last = a.decoder_last_pipeline_num_layers.value_or(0);
  L.schedule = schedule_kind(a);
  L.recompute = a.recompute_granularity;
  L.distributed_optimizer = a.use_distributed_optimizer;
  L.sequence_parallel = a.sequence_parallel && shape.t > 1;
  try {
    const plan::Estimate e = plan::estimate(req, plan::cpu_cluster(shape.world, shape.world), L, false);
    need->weights = e.memory.weights;
    need->gradients = e.memory.gradients;
    need->optimizer = e.memory.optimizer;
    need->activations = e.memory.activations;
    return true;
  } catch (const Error&) {
    return false;  // a layout the planner does not model (a pinned custom layout, ...): no check
  }
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

void refuse_run_that_does_not_fit(const RunShape& shape) {
  if (!memory_check_enabled()) return;
  MemoryNeed need;
  if (!estimate_run_memory(shape, &need)) return;
  std::string source;
  const double avail = available_memory_bytes(shape.device, shape.local_size, &source);
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
  const TrainArgs& a = *shape.args;
  throw_error(ErrorCode::OutOfMemory,
              "the run would not fit: it needs " + gib(need.total()) + " GiB per rank (" + parts + " GiB; " +
                  std::to_string(a.num_layers) + " layers of hidden size " + std::to_string(a.hidden_size) +
                  ", micro-batch " + std::to_string(shape.b) + " x " + std::to_string(shape.m) +
                  " microbatches, t=" + std::to_string(shape.t) + " p=" + std::to_string(shape.p) +
                  " d=" + std::to_string(shape.d) + "); " + gib(avail) + " GiB available per rank on " +
                  shape.device.str() + " (" + source +
                  "). Use more ranks or a smaller model, micro-batch or --recompute-granularity; "
                  "PTDP_MEMORY_CHECK=0 runs it anyway");
}

void refuse_model_that_does_not_fit(const GptConfig& config, const ProcessGroups& groups, const Device& device,
                                    int local_size) {
  if (!memory_check_enabled()) return;
  const int t = groups.size(GroupKind::Tensor), p = groups.size(GroupKind::Pipeline);
  const int v = groups.layout().virtual_stages();
  int64_t params = 0;
  try {
    params = plan::stage_parameters(config, t, p, v, groups.rank(GroupKind::Pipeline));
  } catch (const Error&) {
    return;  // a split the planner does not model
  }
  const double n = static_cast<double>(params);
  const double weight_bytes = config.precision == DType::F32 ? 4.0 : 2.0;
  const double need = n * (weight_bytes + 4.0 + (config.precision == DType::F32 ? 0.0 : 4.0));
  std::string source;
  const double avail = available_memory_bytes(device, local_size, &source);
  if (avail < 0 || need <= avail) return;
  throw_error(ErrorCode::OutOfMemory,
              "the model would not fit: its " + std::to_string(params) + " parameters on this rank (" +
                  std::to_string(config.num_layers) + " layers of hidden size " + std::to_string(config.hidden_size) +
                  ", vocabulary " + std::to_string(config.vocab_size) + ") need " + gib(need) +
                  " GiB with their gradients; " + gib(avail) + " GiB available on " + device.str() + " (" + source +
                  "). PTDP_MEMORY_CHECK=0 tries anyway");
}

}  // namespace ptdp::capi
