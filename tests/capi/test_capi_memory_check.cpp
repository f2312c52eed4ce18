// A run that would not fit is refused before it allocates, with the planner's estimate, its
// biggest items and the memory available per rank: through ptdp_trainer_create and
// ptdp_train_main (ptdp-train). The refusal is quick and the process never grows (max RSS);
// a small run passes the check; PTDP_MEMORY_CHECK=0 turns it off.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

#if defined(__SANITIZE_ADDRESS__)
#define PTDP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PTDP_TEST_ASAN 1
#endif
#endif
#ifndef PTDP_TEST_ASAN
#define PTDP_TEST_ASAN 0
#endif

namespace {

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

struct Outcome {
  ptdp_status status = PTDP_SUCCESS;
  std::string message;
  double seconds = 0;
  long rss_growth_kib = 0;
};

Outcome create_trainer(const sp::World& w, std::vector<std::string> flags) {
  flags.insert(flags.begin(), "ptdp-train");
  std::vector<const char*> argv;
  for (const std::string& f : flags) argv.push_back(f.c_str());
  ptdp_train_config config = nullptr;
  REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &config) == PTDP_SUCCESS);
  ptdp_trainer_options o;
  REQUIRE(ptdp_trainer_options_init(&o) == PTDP_SUCCESS);
  o.runtime = w.runtime;
  o.print_log = 0;
  Outcome r;
  const long rss0 = max_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  ptdp_trainer trainer = reinterpret_cast<ptdp_trainer>(0x5e47);
  r.status = ptdp_trainer_create(config, &o, &trainer);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.message = ptdp_last_error();
  r.rss_growth_kib = max_rss_kib() - rss0;
  if (r.status == PTDP_SUCCESS) {
    CHECK(ptdp_trainer_destroy(trainer) == PTDP_SUCCESS);
  } else {
    CHECK(trainer == reinterpret_cast<ptdp_trainer>(0x5e47));
  }
  CHECK(ptdp_train_config_destroy(config) == PTDP_SUCCESS);
  return r;
}

const std::vector<std::string> kSmall = {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
                                         "--seq-length", "16", "--vocab-size", "64", "--micro-batch-size", "2",
                                         "--global-batch-size", "4", "--train-iters", "1", "--mock-data"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());  // later flags override earlier ones
  return base;
}

}  // namespace

TEST_CASE("memory check: a huge --num-layers is refused quickly with the estimate, before allocating",
          "[capi][train][memory_check]") {
  sp::World w;
  const Outcome r = create_trainer(w, with(kSmall, {"--num-layers", "200000", "--hidden-size", "4096",
                                                    "--num-attention-heads", "32"}));
  INFO(r.message);
  CHECK(r.status == PTDP_ERR_OUT_OF_MEMORY);
  CHECK(r.message.find("ptdp_trainer_create: ") == 0);
  CHECK(r.message.find("would not fit") != std::string::npos);
  CHECK(r.message.find("GiB per rank") != std::string::npos);
  CHECK(r.message.find("parameters") != std::string::npos);
  CHECK(r.message.find("optimizer state") != std::string::npos);
  CHECK(r.message.find("available per rank") != std::string::npos);
  CHECK(r.message.find("PTDP_MEMORY_CHECK=0") != std::string::npos);
  // The biggest item comes first: with 200000 layers of h = 4096 the optimizer state (fp32
  // moments and masters) outweighs the activations of a 16-token microbatch.
  CHECK(r.message.find("optimizer state") < r.message.find("activations"));
  CHECK(r.seconds < 20.0);
  CHECK(r.rss_growth_kib < 512 * 1024);  // nothing big was allocated
}

TEST_CASE("memory check: a huge --micro-batch-size is refused with activations the biggest item",
          "[capi][train][memory_check]") {
  sp::World w;
  const Outcome r = create_trainer(w, with(kSmall, {"--micro-batch-size", "4000000", "--global-batch-size", "4000000",
                                                    "--seq-length", "1024", "--max-position-embeddings", "1024"}));
  INFO(r.message);
  CHECK(r.status == PTDP_ERR_OUT_OF_MEMORY);
  CHECK(r.message.find("would not fit") != std::string::npos);
  CHECK(r.message.find("micro-batch 4000000") != std::string::npos);
  CHECK(r.message.find("(activations ") != std::string::npos);  // listed first: the biggest
  CHECK(r.seconds < 20.0);
  CHECK(r.rss_growth_kib < 512 * 1024);
}

TEST_CASE("memory check: the estimate follows --attention-backend (the CPU's auto is the fused kernel)",
          "[capi][train][memory_check]") {
  // s = 262144: the unfused path keeps [b, a, s, s] fp32 probabilities twice per layer (with
  // attention dropout), 2 layers x 2 x 4 heads x 262144^2 x 4 bytes = 4 TiB, more than any
  // machine has; the fused kernel keeps [b, a, s] row statistics instead, and the run (about
  // 1 GiB of activations) fits.
  sp::World w;
  const std::vector<std::string> long_seq =
      with(kSmall, {"--seq-length", "262144", "--max-position-embeddings", "262144", "--micro-batch-size", "1",
                    "--global-batch-size", "1"});
  const Outcome unfused = create_trainer(w, with(long_seq, {"--attention-backend", "unfused"}));
  INFO(unfused.message);
  CHECK(unfused.status == PTDP_ERR_OUT_OF_MEMORY);
  CHECK(unfused.message.find("(activations ") != std::string::npos);  // listed first: the biggest
  for (const char* kind : {"fused", "auto"}) {
    const Outcome fused = create_trainer(w, with(long_seq, {"--attention-backend", kind}));
    INFO(kind << ": " << fused.message);
    CHECK(fused.status == PTDP_SUCCESS);
  }
}

TEST_CASE("memory check: a small run passes the check", "[capi][train][memory_check]") {
  sp::World w;
  const Outcome r = create_trainer(w, kSmall);
  INFO(r.message);
  CHECK(r.status == PTDP_SUCCESS);
}

TEST_CASE("memory check: PTDP_MEMORY_CHECK=0 lets the run go on to allocate", "[capi][train][memory_check]") {
#if PTDP_TEST_ASAN
  // ASan maps terabytes of shadow memory up front, so the address-space cap below would make
  // its own allocator fail: reported as skipped (77); the release build runs this case.
  WARN("AddressSanitizer: the address-space cap this case needs cannot be set; skipping");
  std::exit(77);
#endif
  sp::World w;
  // Cap the address space so the allocation that follows fails at once instead of growing.
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
  rlimit cap = old;
  cap.rlim_cur = static_cast<rlim_t>(8) << 30;
  if (old.rlim_max != RLIM_INFINITY && cap.rlim_cur > old.rlim_max) cap.rlim_cur = old.rlim_max;
  REQUIRE(setrlimit(RLIMIT_AS, &cap) == 0);
  REQUIRE(setenv("PTDP_MEMORY_CHECK", "0", 1) == 0);
  const Outcome r = create_trainer(w, with(kSmall, {"--num-layers", "200000", "--hidden-size", "4096",
                                                    "--num-attention-heads", "32"}));
  unsetenv("PTDP_MEMORY_CHECK");
  REQUIRE(setrlimit(RLIMIT_AS, &old) == 0);
  INFO(r.message);
  CHECK(r.status == PTDP_ERR_OUT_OF_MEMORY);
  CHECK(r.message.find("would not fit") == std::string::npos);  // the allocator's own refusal
}

TEST_CASE("memory check: ptdp-train (ptdp_train_main) refuses a huge --num-layers before allocating",
          "[capi][train][memory_check]") {
  const char* argv[] = {"ptdp-train", "--num-layers", "200000", "--hidden-size", "4096", "--num-attention-heads", "32",
                        "--seq-length", "16", "--mock-data", "--train-iters", "1"};
  int32_t code = -1;
  const long rss0 = max_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(ptdp_train_main(12, argv, &code) == PTDP_SUCCESS);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(code == 1);
  CHECK(seconds < 20.0);
  CHECK(max_rss_kib() - rss0 < 512 * 1024);
}

TEST_CASE("memory check: ptdp_model_create refuses a model whose parameters do not fit, before allocating",
          "[capi][model][memory_check]") {
  sp::World w;
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 100000;
  o.hidden_size = 4096;
  o.num_attention_heads = 32;
  o.seq_length = 16;
  ptdp_model m = reinterpret_cast<ptdp_model>(0x5e47);
  const long rss0 = max_rss_kib();
  CHECK(ptdp_model_create(w.groups, &o, &m) == PTDP_ERR_OUT_OF_MEMORY);
  const std::string msg = ptdp_last_error();
  INFO(msg);
  CHECK(m == reinterpret_cast<ptdp_model>(0x5e47));
  CHECK(msg.find("ptdp_model_create: the model would not fit") == 0);
  CHECK(msg.find("100000 layers") != std::string::npos);
  CHECK(msg.find("GiB available") != std::string::npos);
  CHECK(max_rss_kib() - rss0 < 512 * 1024);
}
