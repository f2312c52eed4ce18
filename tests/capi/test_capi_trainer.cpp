// The shared training loop through the C API on one process: a trainer built from ptdp-train's
// flags on the caller's runtime runs to --train-iters and reports every iteration to its
// callback (loss, learning-rate schedule, FLOPs and MFU consistent with ptdp_gpt_flops); a
// callback's stop and ptdp_trainer_request_stop end the run after the same iteration and save
// with --save; a second run of the same flags gives the same losses; ptdp_train_main returns the
// exit statuses; bad arguments are refused naming them, without side effects.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

#define OK(call)                              \
  do {                                        \
    const ptdp_status rc_ = (call);           \
    INFO(#call << ": " << ptdp_last_error()); \
    REQUIRE(rc_ == PTDP_SUCCESS);             \
  } while (0)

std::string err() { return ptdp_last_error(); }

const std::vector<std::string> kFlags = {
    "ptdp-train", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
    "--vocab-size", "64", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "6", "--lr",
    "1e-2", "--lr-warmup-iters", "2", "--lr-decay-style", "linear", "--mock-data", "--seed", "5", "--eval-interval",
    "3", "--eval-iters", "1", "--log-interval", "100"};

struct Config {
  ptdp_train_config handle = nullptr;
  explicit Config(std::vector<std::string> args) {
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    OK(ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &handle));
  }
  ~Config() { ptdp_train_config_destroy(handle); }
};

struct Seen {
  std::vector<ptdp_iteration_report> reports;
  int64_t stop_after = -1;
};

int32_t record(const ptdp_iteration_report* r, void* user) {
  auto* seen = static_cast<Seen*>(user);
  seen->reports.push_back(*r);
  return seen->stop_after >= 0 && r->iteration >= seen->stop_after ? 1 : 0;
}

std::vector<ptdp_iteration_report> train(const sp::World& w, const std::vector<std::string>& flags,
                                         int64_t stop_after = -1, ptdp_iteration_report* last_out = nullptr) {
  Config c(flags);
  Seen seen;
  seen.stop_after = stop_after;
  ptdp_trainer_options o;
  OK(ptdp_trainer_options_init(&o));
  o.runtime = w.runtime;
  o.on_iteration = record;
  o.user_data = &seen;
  o.print_log = 0;
  ptdp_trainer t = nullptr;
  OK(ptdp_trainer_create(c.handle, &o, &t));
  OK(ptdp_trainer_run(t));
  ptdp_iteration_report last;
  last.struct_size = sizeof last;
  OK(ptdp_trainer_last_report(t, &last));
  CHECK(last.struct_size == sizeof last);
  REQUIRE_FALSE(seen.reports.empty());
  CHECK(last.iteration == seen.reports.back().iteration);
  CHECK(last.lm_loss == seen.reports.back().lm_loss);
  if (last_out) *last_out = last;
  OK(ptdp_trainer_destroy(t));
  return seen.reports;
}

}  // namespace

TEST_CASE("C API trainer: every iteration reported with its loss, schedule, FLOPs and MFU", "[capi][train]") {
  sp::World w;
  const std::vector<ptdp_iteration_report> r = train(w, kFlags);
  REQUIRE(r.size() == 6);
  ptdp_gpt_options g;
  OK(ptdp_gpt_options_init(&g));
  g.num_layers = 2;
  g.hidden_size = 32;
  g.num_attention_heads = 4;
  g.seq_length = 16;
  g.vocab_size = 64;
  double model = 0, executed = 0;
  OK(ptdp_gpt_flops(&g, 4, &model, &executed));
  // 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) with B = 4, s = 16, l = 2, h = 32, V = 64.
  const double want = 72.0 * 4 * 16 * 2 * 32 * 32 * (1.0 + 16.0 / 192.0 + 64.0 / 768.0);
  CHECK(model == Approx(want).epsilon(1e-12));
  CHECK(executed == model);
  for (std::size_t i = 0; i < r.size(); ++i) {
    INFO("iteration " << i + 1);
    CHECK(r[i].iteration == static_cast<int64_t>(i) + 1);
    CHECK(r[i].train_iters == 6);
    CHECK(r[i].consumed_samples == 4 * r[i].iteration);
    CHECK(r[i].global_batch_size == 4);
    CHECK(std::isfinite(r[i].lm_loss));
    CHECK(r[i].model_flops == model);
    CHECK(r[i].elapsed_seconds > 0);
    CHECK(r[i].tokens_per_second == Approx(4 * 16 / r[i].elapsed_seconds).epsilon(1e-9));
    CHECK(r[i].tflops_per_device == Approx(executed / r[i].elapsed_seconds / 1e12).epsilon(1e-9));
    CHECK(r[i].peak_flops > 0);  // the CPU's sgemm peak, measured
    CHECK(r[i].mfu == Approx(model / r[i].elapsed_seconds / r[i].peak_flops).epsilon(1e-9));
    CHECK(r[i].validated == (r[i].iteration % 3 == 0 ? 1 : 0));
    if (r[i].validated) CHECK(std::isfinite(r[i].validation_loss));
    CHECK(r[i].saved == 0);  // no --save
  }
  // Warm-up over 2 iterations up to 1e-2, then linear decay.
  CHECK(r[0].learning_rate < r[1].learning_rate);
  CHECK(r[1].learning_rate <= 1e-2);
  CHECK(r[2].learning_rate <= r[1].learning_rate);
  for (std::size_t i = 3; i < r.size(); ++i) CHECK(r[i].learning_rate < r[i - 1].learning_rate);
  // The mock data is learnable: the loss falls from about ln 64.
  CHECK(r[0].lm_loss == Approx(std::log(64.0)).margin(0.5));
  CHECK(r[5].lm_loss < r[0].lm_loss);
  // The same flags train the same run.
  const std::vector<ptdp_iteration_report> again = train(w, kFlags);
  for (std::size_t i = 0; i < r.size(); ++i) CHECK(again[i].lm_loss == r[i].lm_loss);
}

namespace {

// What the callback of an MoE run saw: each iteration's figures through ptdp_trainer_moe_metrics.
struct MoeSeen {
  ptdp_trainer trainer = nullptr;
  std::vector<ptdp_moe_metrics> metrics;
  std::vector<std::vector<ptdp_moe_layer_load>> loads;
};

int32_t record_moe(const ptdp_iteration_report*, void* user) {
  auto* seen = static_cast<MoeSeen*>(user);
  ptdp_moe_metrics m;
  m.struct_size = sizeof m;
  std::vector<ptdp_moe_layer_load> loads(4);
  if (ptdp_trainer_moe_metrics(seen->trainer, &m, loads.data(), static_cast<int64_t>(loads.size())) != PTDP_SUCCESS)
    return 1;
  loads.resize(static_cast<std::size_t>(m.moe_layers));
  seen->metrics.push_back(m);
  seen->loads.push_back(loads);
  return 0;
}

// The JSON line text of a number as the log writes it (json_number's %.9g).
std::string g9(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

/// A trainer run of kFlags plus `extra` (no evaluation) writing --log-json to `log`, with
/// `callback` and `seen` (whose `trainer` member holds the trainer while it runs) as its user data.
template <typename Seen>
void run_logged(sp::World& w, std::vector<std::string> extra, const std::filesystem::path& log,
                ptdp_iteration_callback callback, Seen& seen, int32_t print_log) {
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), extra.begin(), extra.end());
  flags.insert(flags.end(), {"--eval-interval", "0", "--log-json", log.string()});
  Config c(flags);
  ptdp_trainer_options o;
  OK(ptdp_trainer_options_init(&o));
  o.runtime = w.runtime;
  o.on_iteration = callback;
  o.user_data = &seen;
  o.print_log = print_log;
  OK(ptdp_trainer_create(c.handle, &o, &seen.trainer));
  OK(ptdp_trainer_run(seen.trainer));
  OK(ptdp_trainer_destroy(seen.trainer));
}

TEST_CASE("C API trainer: the MoE figures of each iteration, in the callback and in the JSON lines",
          "[capi][train][moe]") {
  sp::World w;
  const std::filesystem::path log = std::filesystem::temp_directory_path() / "ptdp-capi-trainer-moe.jsonl";
  MoeSeen seen;
  // Nothing printed: the logging rank still writes --log-json.
  run_logged(w, {"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "16", "--moe-layer-freq",
                 "[0,1]", "--moe-aux-loss-coeff", "0.01", "--moe-z-loss-coeff", "0.001"},
             log, record_moe, seen, 0);
  REQUIRE(seen.metrics.size() == 6);
  std::ifstream in(log);
  std::string line;
  for (std::size_t i = 0; i < seen.metrics.size(); ++i) {
    INFO("iteration " << i + 1);
    REQUIRE(std::getline(in, line));
    const ptdp_moe_metrics& m = seen.metrics[i];
    REQUIRE(m.moe_layers == 1);  // layer 1 of the pattern [0,1]
    const ptdp_moe_layer_load& l = seen.loads[i][0];
    CHECK(l.layer == 1);
    CHECK(l.min_tokens * 4 <= 4 * 16 * 2);  // 64 tokens, 2 choices each, over 4 experts
    CHECK(l.max_tokens * 4 >= 4 * 16 * 2);
    // The callback's figures are this iteration's: the JSON line's.
    CHECK(line.find("\"load_balancing_loss\": " + g9(m.load_balancing_loss) + ",") != std::string::npos);
    CHECK(line.find("\"z_loss\": " + g9(m.z_loss) + ",") != std::string::npos);
    CHECK(line.find("\"moe_expert_load\": [{\"layer\": 1, \"min\": " + std::to_string(l.min_tokens) +
                    ", \"max\": " + std::to_string(l.max_tokens) + "}]}") != std::string::npos);
  }
  std::filesystem::remove(log);
}

namespace {

// What the callback of an MTP run saw: each iteration's losses through ptdp_trainer_mtp_losses.
struct MtpSeen {
  ptdp_trainer trainer = nullptr;
  std::vector<std::vector<float>> losses;
};

int32_t record_mtp(const ptdp_iteration_report*, void* user) {
  auto* seen = static_cast<MtpSeen*>(user);
  std::vector<float> losses(3, -1.0f);
  int32_t count = 0;
  if (ptdp_trainer_mtp_losses(seen->trainer, losses.data(), 3, &count) != PTDP_SUCCESS) return 1;
  losses.resize(static_cast<std::size_t>(count));
  seen->losses.push_back(losses);
  return 0;
}

}  // namespace

TEST_CASE("C API trainer: the MTP losses of each iteration, in the callback and in the JSON lines",
          "[capi][train][mtp]") {
  sp::World w;
  const std::filesystem::path log = std::filesystem::temp_directory_path() / "ptdp-capi-trainer-mtp.jsonl";
  MtpSeen seen;
  run_logged(w, {"--position-embedding-type", "rope", "--mtp-num-layers", "2"}, log, record_mtp, seen, 1);
  REQUIRE(seen.losses.size() == 6);
  std::ifstream in(log);
  std::string line;
  for (std::size_t i = 0; i < seen.losses.size(); ++i) {
    INFO("iteration " << i + 1);
    REQUIRE(std::getline(in, line));
    REQUIRE(seen.losses[i].size() == 2);
    CHECK(line.find("\"mtp_1_loss\": " + g9(seen.losses[i][0])) != std::string::npos);
    CHECK(line.find("\"mtp_2_loss\": " + g9(seen.losses[i][1]) + "}") != std::string::npos);
  }
  std::filesystem::remove(log);
}

TEST_CASE("C API trainer: a callback's stop ends the run after that iteration and saves", "[capi][train]") {
  sp::World w;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ptdp-capi-trainer-stop";
  std::filesystem::remove_all(dir);
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), {"--save", dir.string()});
  ptdp_iteration_report last{};
  const std::vector<ptdp_iteration_report> r = train(w, flags, 2, &last);
  REQUIRE(r.size() == 2);
  CHECK(r.back().saved == 0);  // the stop's save comes after the callback
  CHECK(last.saved == 1);
  CHECK(std::filesystem::exists(dir / "iter_0000002" / "metadata.json"));
  // Resuming goes on from there with the uninterrupted run's losses.
  flags.insert(flags.end(), {"--load", dir.string()});
  const std::vector<ptdp_iteration_report> rest = train(w, flags);
  const std::vector<ptdp_iteration_report> whole = train(w, kFlags);
  REQUIRE(rest.size() == 4);
  CHECK(rest.front().iteration == 3);
  for (std::size_t i = 0; i < rest.size(); ++i) CHECK(rest[i].lm_loss == whole[i + 2].lm_loss);
  std::filesystem::remove_all(dir);
}

TEST_CASE("C API trainer: request_stop before the run stops it after one iteration", "[capi][train]") {
  sp::World w;
  Config c(kFlags);
  ptdp_trainer_options o;
  OK(ptdp_trainer_options_init(&o));
  o.runtime = w.runtime;
  o.print_log = 0;
  ptdp_trainer t = nullptr;
  OK(ptdp_trainer_create(c.handle, &o, &t));
  OK(ptdp_trainer_request_stop(t));
  OK(ptdp_trainer_run(t));
  ptdp_iteration_report last;
  last.struct_size = sizeof last;
  OK(ptdp_trainer_last_report(t, &last));
  CHECK(last.iteration == 1);
  // The runtime is in use: destroying it first is refused, naming the trainer.
  CHECK(ptdp_runtime_destroy(w.runtime) == PTDP_ERR_INVALID_STATE);
  CHECK_THAT(err(), Catch::Contains("ptdp_trainer"));
  // An old caller's smaller report gets what fits, and says so in struct_size.
  ptdp_iteration_report small{};
  small.struct_size = sizeof small;
  OK(ptdp_trainer_last_report(t, &small));
  CHECK(small.iteration == 1);
  OK(ptdp_trainer_destroy(t));
}

TEST_CASE("C API trainer: bad arguments are refused naming them", "[capi][train]") {
  sp::World w;
  Config c(kFlags);
  ptdp_trainer t = nullptr;
  CHECK(ptdp_trainer_create(nullptr, nullptr, &t) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("config is NULL"));
  CHECK(ptdp_trainer_create(c.handle, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("out is NULL"));
  ptdp_trainer_options o;
  OK(ptdp_trainer_options_init(&o));
  CHECK(o.print_log == 1);
  CHECK(o.runtime == nullptr);
  o.runtime = w.runtime;
  o.print_log = 7;
  CHECK(ptdp_trainer_create(c.handle, &o, &t) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->print_log = 7"));
  o.print_log = 0;
  o.struct_size = 8;
  CHECK(ptdp_trainer_create(c.handle, &o, &t) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->struct_size = 8"));
  CHECK(t == nullptr);
  // A layout the world cannot hold, named by its flag.
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), {"--tensor-model-parallel-size", "2"});
  Config wide(flags);
  OK(ptdp_trainer_options_init(&o));
  o.runtime = w.runtime;
  CHECK(ptdp_trainer_create(wide.handle, &o, &t) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("--tensor-model-parallel-size 2"));
  CHECK(t == nullptr);
  CHECK(ptdp_trainer_run(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("trainer is NULL"));
  CHECK(ptdp_trainer_request_stop(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_trainer_last_report(nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_trainer_destroy(nullptr) == PTDP_SUCCESS);

  double flops = 0;
  CHECK(ptdp_gpt_flops(nullptr, 0, &flops, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("global_batch_size = 0"));
  OK(ptdp_gpt_flops(nullptr, 1, nullptr, nullptr));
  CHECK(ptdp_device_peak_flops(PTDP_DEVICE_CPU, 1, PTDP_DTYPE_F32, &flops) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("device_index = 1"));
  CHECK(ptdp_device_peak_flops(PTDP_DEVICE_CPU, 0, PTDP_DTYPE_I32, &flops) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("precision"));
  CHECK(ptdp_device_peak_flops(PTDP_DEVICE_CPU, 0, PTDP_DTYPE_F32, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("flops is NULL"));
  OK(ptdp_device_peak_flops(PTDP_DEVICE_CPU, 0, PTDP_DTYPE_F32, &flops));
  CHECK(flops > 1e8);  // any CPU does more than 0.1 GFLOP/s of f32 GEMM
}

TEST_CASE("C API ptdp_train_main: exit statuses for help, bad flags and a run", "[capi][train]") {
  int32_t code = -1;
  const char* help[] = {"ptdp-train", "--help"};
  OK(ptdp_train_main(2, help, &code));
  CHECK(code == 0);
  const char* bad[] = {"ptdp-train", "--hidden-size", "abc"};
  OK(ptdp_train_main(3, bad, &code));
  CHECK(code == 2);
  CHECK(ptdp_train_main(0, bad, &code) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("argc = 0"));
  CHECK(ptdp_train_main(3, bad, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("exit_code is NULL"));
  const char* null_arg[] = {"ptdp-train", nullptr};
  CHECK(ptdp_train_main(2, null_arg, &code) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("argv[1] is NULL"));
}
