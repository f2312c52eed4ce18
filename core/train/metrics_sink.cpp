#include "core/train/metrics_sink.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "base/error.h"
#include "io/json_number.h"

namespace ptdp {

namespace {

double mem_high_water_mib() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S", &tm);
  return out;
}

// A progress bar when stdout is a terminal. Open MPI and PMI launchers hand every rank a
// pseudo-terminal whatever the job's real output is, so under them the bar is off unless
// PTDP_PROGRESS=1 asks for it; PTDP_PROGRESS=0 turns it off everywhere.
bool progress_wanted(std::FILE* out) {
  const char* force = std::getenv("PTDP_PROGRESS");
  if (force && *force) return std::strcmp(force, "0") != 0;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) return false;
  return out != nullptr && isatty(fileno(out));
}

// The MoE fields of an iteration's JSON line (with their leading comma), or nothing for a dense
// model: the logged losses and every MoE layer's expert load.
std::string moe_json(const MoeMetrics& moe) {
  if (moe.moe_layers == 0) return "";
  std::string out;
  if (moe.has_load_balancing_loss) out += ", \"load_balancing_loss\": " + json_number(moe.load_balancing_loss);
  if (moe.has_z_loss) out += ", \"z_loss\": " + json_number(moe.z_loss);
  out += ", \"moe_expert_load\": [";
  for (std::size_t i = 0; i < moe.loads.size(); ++i) {
    const MoeLayerLoad& l = moe.loads[i];
    out += (i ? ", " : "") + std::string("{\"layer\": ") + std::to_string(l.layer) +
           ", \"min\": " + std::to_string(l.min_tokens) + ", \"max\": " + std::to_string(l.max_tokens) + "}";
  }
  return out + "]";
}

// The multi-token prediction losses of an iteration's JSON line ("mtp_1_loss", ...; with their
// leading comma), or nothing without MTP.
std::string mtp_json(const std::vector<float>& losses) {
  std::string out;
  for (std::size_t k = 0; k < losses.size(); ++k)
    out += ", \"mtp_" + std::to_string(k + 1) + "_loss\": " + json_number(losses[k]);
  return out;
}

// QK-clip's fields of an iteration's JSON line (with their leading comma), or nothing without
// it: per attention layer, the largest logit (Megatron's max_attention_logit) and the query
// heads rescaled.
std::string qk_clip_json(const QkClipMetrics& qk) {
  if (qk.max_logits.empty()) return "";
  std::string out = ", \"max_attention_logit\": [";
  for (std::size_t l = 0; l < qk.max_logits.size(); ++l) out += (l ? ", " : "") + json_number(qk.max_logits[l]);
  out += "], \"qk_clipped_heads\": [";
  for (std::size_t l = 0; l < qk.clipped_heads.size(); ++l) out += (l ? ", " : "") + std::to_string(qk.clipped_heads[l]);
  return out + "]";
}

// The iteration's point of the curves.
TrainPoint plot_point(const IterationMetrics& m) {
  TrainPoint p;
  p.iteration = m.iteration;
  p.lm_loss = m.lm_loss;
  p.learning_rate = m.learning_rate;
  p.grad_norm = std::isfinite(m.grad_norm) ? m.grad_norm : NAN;
  p.loss_scale = m.loss_scale;
  p.tokens_per_second = m.tokens_per_second;
  if (m.moe.has_load_balancing_loss) p.load_balancing_loss = m.moe.load_balancing_loss;
  if (m.moe.has_z_loss) p.z_loss = m.moe.z_loss;
  for (const MoeLayerLoad& l : m.moe.loads)
    p.expert_load.push_back({l.layer, static_cast<double>(l.min_tokens), static_cast<double>(l.max_tokens)});
  return p;
}

}  // namespace

IterationMetrics RunFigures::measure(double seconds) const {
  IterationMetrics r;
  r.elapsed_s = seconds;
  r.model_flops = model_flops;
  r.executed_flops = executed_flops;
  r.peak_flops = peak_flops;
  if (seconds > 0) {
    r.tokens_per_second = tokens_per_batch / seconds;
    r.tflops_per_device = executed_flops / seconds / world / 1e12;
    if (peak_flops > 0) r.mfu = model_flops / seconds / world / peak_flops;
  }
  r.mem_high_water_mib = mem_high_water_mib();
  return r;
}

MetricsSink::MetricsSink(std::FILE* out, bool logger, const TrainArgs& args, const RunFigures& figures,
                         bool resumed)
    : out_(logger ? out : nullptr), logger_(logger), args_(args), figures_(figures), resumed_(resumed) {
  progress_ = out_ != nullptr && progress_wanted(out_);
  plot_.label = args.log_json.empty() ? "ptdp-train" : std::filesystem::path(args.log_json).filename().string();
  if (!logger_ || args.log_json.empty()) return;
  json_ = std::fopen(args.log_json.c_str(), resumed ? "a" : "w");
  PTDP_CHECK_ARG(json_ != nullptr, "--log-json " + args.log_json + ": cannot open for writing");
}

MetricsSink::~MetricsSink() {
  if (json_) std::fclose(json_);
}

void MetricsSink::resume_plot() {
  if (!logger_ || args_.plot_file.empty() || !resumed_ || args_.log_json.empty() ||
      !std::filesystem::is_regular_file(args_.log_json)) {
    return;
  }
  const std::string label = plot_.label;
  try {
    plot_ = read_training_log(args_.log_json);
  } catch (const Error& e) {
    plot_ = PlotRun{};
    if (out_ != nullptr)
      std::fprintf(out_, " warning: --plot-file %s starts without the iterations before this run: %s\n",
                   args_.plot_file.c_str(), e.what());
  }
  plot_.label = label;
}

bool MetricsSink::record(const IterationMetrics& m, bool stopping) {
  if (!logger_) return false;
  plot_.train.push_back(plot_point(m));
  if (json_) write_json_line(m);
  interval_seconds_ += m.elapsed_s;
  interval_load_balancing_loss_ += m.moe.load_balancing_loss;
  interval_z_loss_ += m.moe.z_loss;
  interval_mtp_losses_.resize(m.mtp_losses.size(), 0.0);
  for (std::size_t k = 0; k < m.mtp_losses.size(); ++k) interval_mtp_losses_[k] += m.mtp_losses[k];
  ++interval_iters_;
  if (std::isnan(m.lm_loss)) {
    ++nan_iters_;
  } else if (!m.skipped) {
    interval_loss_ += m.lm_loss;
    ++interval_loss_iters_;
  }
  const bool log_now = m.iteration % args_.log_interval == 0 || m.iteration == args_.train_iters || stopping;
  if (log_now && out_ != nullptr) print_log_line(m);
  else if (log_now) reset_interval();
  if (!stopping) show_progress(m.iteration);
  return log_now;
}

void MetricsSink::write_json_line(const IterationMetrics& m) {
  // Every number through json_number: a value that is not finite is null, so the line stays
  // JSON whatever the run does.
  std::fprintf(json_,
               "{\"iteration\": %lld, \"consumed_samples\": %lld, \"lm_loss\": %s, \"learning_rate\": %s, "
               "\"grad_norm\": %s, \"loss_scale\": %s, \"skipped\": %d, \"skipped_iterations\": %lld, "
               "\"elapsed_ms\": %s, \"tokens_per_second\": %s, \"tflops_per_device\": %s, "
               "\"mfu\": %s, \"global_batch_size\": %lld, \"mem_high_water_mib\": %s%s%s%s}\n",
               static_cast<long long>(m.iteration), static_cast<long long>(m.consumed_samples),
               json_number(m.lm_loss).c_str(), json_number(m.learning_rate).c_str(), json_number(m.grad_norm).c_str(),
               json_number(static_cast<double>(m.loss_scale)).c_str(), m.skipped ? 1 : 0,
               static_cast<long long>(m.skipped_iterations), json_number(m.elapsed_s * 1e3, "%.3f").c_str(),
               json_number(m.tokens_per_second, "%.1f").c_str(), json_number(m.tflops_per_device, "%.6f").c_str(),
               json_number(m.mfu, "%.6f").c_str(), static_cast<long long>(m.global_batch_size),
               json_number(m.mem_high_water_mib, "%.1f").c_str(), moe_json(m.moe).c_str(),
               mtp_json(m.mtp_losses).c_str(), qk_clip_json(m.qk_clip).c_str());
  std::fflush(json_);
}

// Megatron's MoE and MTP entries of the log line (the interval's means, after the lm loss), or nothing
// for a dense model.
std::string MetricsSink::moe_log(const MoeMetrics& moe) const {
  std::string out;
  const double n = static_cast<double>(std::max<int64_t>(1, interval_iters_));
  char buf[64];
  if (moe.has_load_balancing_loss) {
    std::snprintf(buf, sizeof buf, " load_balancing_loss: %E |", interval_load_balancing_loss_ / n);
    out += buf;
  }
  if (moe.has_z_loss) {
    std::snprintf(buf, sizeof buf, " z_loss: %E |", interval_z_loss_ / n);
    out += buf;
  }
  // Megatron's MTPLossLoggingHelper: "mtp_k loss" per depth, the interval's mean.
  for (std::size_t k = 0; k < interval_mtp_losses_.size(); ++k) {
    std::snprintf(buf, sizeof buf, " mtp_%zu loss: %E |", k + 1, interval_mtp_losses_[k] / n);
    out += buf;
  }
  return out;
}

// Megatron's line: the interval's mean time and loss, the last iteration's other figures.
void MetricsSink::print_log_line(const IterationMetrics& m) {
  const double per_iter = interval_seconds_ / static_cast<double>(interval_iters_);
  const RunFigures& f = figures_;
  clear_progress();
  std::fprintf(
      out_,
      " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
      "throughput per GPU (TFLOP/s/GPU): %.3f | learning rate: %E | global batch size: %5lld | "
      "lm loss: %E |%s loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3lld | "
      "number of nan iterations: %3lld | tokens per second: %.1f | MFU: %.2f%% | mem high-water (MiB): %.1f |\n",
      timestamp().c_str(), static_cast<long long>(m.iteration), static_cast<long long>(m.train_iters),
      static_cast<long long>(m.consumed_samples), per_iter * 1e3, f.executed_flops / per_iter / f.world / 1e12,
      m.learning_rate, static_cast<long long>(m.global_batch_size),
      interval_loss_iters_ > 0 ? interval_loss_ / static_cast<double>(interval_loss_iters_) : NAN,
      moe_log(m.moe).c_str(), static_cast<double>(m.loss_scale), m.grad_norm,
      static_cast<long long>(m.skipped_iterations), static_cast<long long>(nan_iters_), f.tokens_per_batch / per_iter,
      f.peak_flops > 0 ? 100.0 * f.model_flops / per_iter / f.world / f.peak_flops : 0.0, m.mem_high_water_mib);
  std::fflush(out_);
  reset_interval();
}

void MetricsSink::reset_interval() {
  interval_seconds_ = interval_loss_ = interval_load_balancing_loss_ = interval_z_loss_ = 0.0;
  interval_mtp_losses_.clear();
  interval_iters_ = interval_loss_iters_ = nan_iters_ = 0;
}

void MetricsSink::show_progress(int64_t iteration) {
  if (!progress_) return;
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(kWidth * iteration / args_.train_iters);
  std::string bar(kWidth, '.');
  for (int i = 0; i < filled; ++i) bar[static_cast<std::size_t>(i)] = '#';
  std::fprintf(out_, "\r [%s] %lld/%lld", bar.c_str(), static_cast<long long>(iteration),
               static_cast<long long>(args_.train_iters));
  std::fflush(out_);
}

void MetricsSink::record_validation(int64_t iteration, float validation_loss) {
  if (!logger_) return;
  const double loss = validation_loss;
  plot_.valid.push_back({iteration, loss});
  if (out_ != nullptr) {
    clear_progress();
    std::fprintf(out_,
                 "-----------------------------------------------------------------------------------------\n"
                 " validation loss at iteration %lld | lm loss value: %E | lm loss PPL: %E | \n"
                 "-----------------------------------------------------------------------------------------\n",
                 static_cast<long long>(iteration), loss, std::exp(loss));
    std::fflush(out_);
  }
  if (json_) {
    std::fprintf(json_, "{\"validation_iteration\": %lld, \"lm_loss\": %s, \"lm_loss_ppl\": %s}\n",
                 static_cast<long long>(iteration), json_number(loss).c_str(), json_number(std::exp(loss)).c_str());
    std::fflush(json_);
  }
}

void MetricsSink::draw_plot() {
  if (!logger_ || args_.plot_file.empty()) return;
  write_training_plot({plot_}, "ptdp-train", args_.plot_file);
}

void MetricsSink::note(const char* format, ...) {
  if (out_ == nullptr) return;
  clear_progress();
  va_list ap;
  va_start(ap, format);
  std::vfprintf(out_, format, ap);
  va_end(ap);
  std::fflush(out_);
}

void MetricsSink::clear_progress() {
  if (progress_) std::fprintf(out_, "\r%*s\r", 60, "");
}

}  // namespace ptdp
