// Programs built against ptdp 0.2.0 keep working: the functions that fill a struct which grew
// after 0.2.0 without reading its struct_size (ptdp_gpt_options_init, ptdp_generate_options_init,
// ptdp_plan_options_init, ptdp_train_config_gpt_options, ptdp_checkpoint_read_options,
// ptdp_plan_parse_args, ptdp_parallel_options_init, ptdp_train_config_parallel_options, the
// cluster fillers, ptdp_runtime_options_init, ptdp_train_config_runtime_options) have 0.2.0
// versions (symbol version PTDP_0, capi/src/compat_0_2.cpp)
// that write no more than the struct's 0.2.0 size, while a program built now gets the current
// versions. This test calls the PTDP_0 versions, as an old program's references are bound,
// through `.symver` aliases, with a guard pattern after each struct's 0.2.0 size.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/single_process.h"

extern "C" {
ptdp_status old_gpt_options_init(void* options);
ptdp_status old_generate_options_init(void* options);
ptdp_status old_plan_options_init(void* options);
ptdp_status old_train_config_gpt_options(ptdp_train_config config, void* options);
ptdp_status old_checkpoint_read_options(const char* directory, void* options, int64_t* iteration);
ptdp_status old_plan_parse_args(int32_t argc, const char* const* argv, void* options, ptdp_cluster* cluster,
                                ptdp_plan_cli* cli);
ptdp_status old_parallel_options_init(void* options);
ptdp_status old_train_config_parallel_options(ptdp_train_config config, void* options);
ptdp_status old_cluster_init(void* cluster);
ptdp_status old_cluster_preset(const char* name, void* cluster);
ptdp_status old_cluster_load(const char* path, void* cluster);
ptdp_status old_runtime_options_init(void* options);
ptdp_status old_train_config_runtime_options(ptdp_train_config config, void* options);
}
__asm__(".symver old_gpt_options_init,ptdp_gpt_options_init@PTDP_0");
__asm__(".symver old_generate_options_init,ptdp_generate_options_init@PTDP_0");
__asm__(".symver old_plan_options_init,ptdp_plan_options_init@PTDP_0");
__asm__(".symver old_train_config_gpt_options,ptdp_train_config_gpt_options@PTDP_0");
__asm__(".symver old_checkpoint_read_options,ptdp_checkpoint_read_options@PTDP_0");
__asm__(".symver old_plan_parse_args,ptdp_plan_parse_args@PTDP_0");
__asm__(".symver old_parallel_options_init,ptdp_parallel_options_init@PTDP_0");
__asm__(".symver old_train_config_parallel_options,ptdp_train_config_parallel_options@PTDP_0");
__asm__(".symver old_cluster_init,ptdp_cluster_init@PTDP_0");
__asm__(".symver old_cluster_preset,ptdp_cluster_preset@PTDP_0");
__asm__(".symver old_cluster_load,ptdp_cluster_load@PTDP_0");
__asm__(".symver old_runtime_options_init,ptdp_runtime_options_init@PTDP_0");
__asm__(".symver old_train_config_runtime_options,ptdp_train_config_runtime_options@PTDP_0");

namespace {

// The sizes at 0.2.0 (ptdp.h of cef1dbc, the ABI baseline of packaging/abi).
constexpr std::size_t kGptOptions020 = 88, kGenerateOptions020 = 32, kPlanOptions020 = 104, kParallelOptions020 = 24;
constexpr std::size_t kCluster020 = 128, kRuntimeOptions020 = 32;
constexpr unsigned char kGuard = 0xA5;

/// An old program's struct of `size` bytes followed by guard bytes that must stay untouched.
struct OldStruct {
  std::vector<unsigned char> bytes;
  std::size_t size;
  explicit OldStruct(std::size_t n) : bytes(n + 64, kGuard), size(n) {}
  void* data() { return bytes.data(); }
  std::size_t struct_size() const {
    std::size_t s = 0;
    std::memcpy(&s, bytes.data(), sizeof s);
    return s;
  }
  bool guard_intact() const {
    for (std::size_t i = size; i < bytes.size(); ++i)
      if (bytes[i] != kGuard) return false;
    return true;
  }
  /// The old struct holds `full`'s first `size` bytes (struct_size aside).
  template <typename Options>
  bool is_prefix_of(const Options& full) const {
    return std::memcmp(bytes.data() + sizeof(std::size_t), reinterpret_cast<const unsigned char*>(&full) + sizeof(std::size_t),
                       size - sizeof(std::size_t)) == 0;
  }
};

struct Config {
  ptdp_train_config c = nullptr;
  explicit Config(std::vector<const char*> argv) {
    argv.insert(argv.begin(), "ptdp-train");
    REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &c) == PTDP_SUCCESS);
  }
  ~Config() { ptdp_train_config_destroy(c); }
};

std::string temp_dir(const char* tag) {
  char path[] = "/tmp/ptdp-compat-XXXXXX";
  REQUIRE(mkdtemp(path) != nullptr);
  return std::string(path) + "/" + tag;
}

}  // namespace

TEST_CASE("0.2.0 programs: the init functions write no more than the 0.2.0 struct", "[capi][abi][compat]") {
  ptdp_gpt_options g;
  ptdp_generate_options n;
  ptdp_plan_options p;
  REQUIRE(ptdp_gpt_options_init(&g) == PTDP_SUCCESS);
  REQUIRE(ptdp_generate_options_init(&n) == PTDP_SUCCESS);
  REQUIRE(ptdp_plan_options_init(&p) == PTDP_SUCCESS);
  CHECK(g.struct_size == sizeof g);  // a program built now gets today's versions
  CHECK(sizeof g > kGptOptions020);

  OldStruct og(kGptOptions020), on(kGenerateOptions020), op(kPlanOptions020);
  REQUIRE(old_gpt_options_init(og.data()) == PTDP_SUCCESS);
  REQUIRE(old_generate_options_init(on.data()) == PTDP_SUCCESS);
  REQUIRE(old_plan_options_init(op.data()) == PTDP_SUCCESS);
  CHECK(og.guard_intact());
  CHECK(on.guard_intact());
  CHECK(op.guard_intact());
  CHECK(og.struct_size() == kGptOptions020);
  CHECK(on.struct_size() == kGenerateOptions020);
  CHECK(op.struct_size() == kPlanOptions020);
  CHECK(og.is_prefix_of(g));
  CHECK(on.is_prefix_of(n));
  CHECK(op.is_prefix_of(p));

  // The struct an old program got is accepted and means the GPT of 0.2.0.
  sp::World w;
  auto* old = static_cast<ptdp_gpt_options*>(og.data());
  old->num_layers = 1;
  old->vocab_size = 50;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, old, &m) == PTDP_SUCCESS);
  ptdp_gpt_options back;
  REQUIRE(ptdp_gpt_options_init(&back) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_get_options(m, &back) == PTDP_SUCCESS);
  CHECK(back.num_layers == 1);
  CHECK(back.normalization == PTDP_NORMALIZATION_LAYERNORM);
  CHECK(back.swiglu == 0);
  CHECK(back.position_embedding_type == PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE);
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);

  CHECK(old_gpt_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
}

TEST_CASE("0.2.0 programs: getters hand out a GPT and refuse what the old struct cannot hold", "[capi][abi][compat]") {
  {
    Config gpt({"--num-layers", "3", "--hidden-size", "32"});
    OldStruct o(kGptOptions020);
    REQUIRE(old_train_config_gpt_options(gpt.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kGptOptions020);
    CHECK(static_cast<ptdp_gpt_options*>(o.data())->num_layers == 3);
  }
  {
    Config llama({"--hidden-size", "32", "--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "64"});
    OldStruct o(kGptOptions020);
    CHECK(old_train_config_gpt_options(llama.c, o.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("after ptdp 0.2.0") != std::string::npos);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == 0xA5A5A5A5A5A5A5A5ull);  // nothing written
  }
  {
    std::vector<const char*> argv = {"ptdp-plan", "--num-layers", "4", "--global-batch-size", "8", "--num-gpus", "2"};
    OldStruct o(kPlanOptions020);
    ptdp_cluster cluster;
    ptdp_plan_cli cli;
    REQUIRE(old_plan_parse_args(static_cast<int32_t>(argv.size()), argv.data(), o.data(), &cluster, &cli) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kPlanOptions020);
    CHECK(static_cast<ptdp_plan_options*>(o.data())->num_layers == 4);
    std::vector<const char*> llama = {"ptdp-plan", "--model-preset", "llama-3.2-1b", "--global-batch-size", "8"};
    OldStruct l(kPlanOptions020);
    CHECK(old_plan_parse_args(static_cast<int32_t>(llama.size()), llama.data(), l.data(), &cluster, &cli) ==
          PTDP_ERR_INVALID_ARGUMENT);
    CHECK(l.guard_intact());
  }
}

TEST_CASE("0.2.0 programs: the parallel options without the uneven pipeline stages", "[capi][abi][compat]") {
  ptdp_parallel_options full;
  REQUIRE(ptdp_parallel_options_init(&full) == PTDP_SUCCESS);
  CHECK(full.struct_size == sizeof full);
  CHECK(sizeof full > kParallelOptions020);
  OldStruct init(kParallelOptions020);
  REQUIRE(old_parallel_options_init(init.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(init.struct_size() == kParallelOptions020);
  CHECK(init.is_prefix_of(full));
  {
    Config even({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage",
                 "1"});
    OldStruct o(kParallelOptions020);
    REQUIRE(old_train_config_parallel_options(even.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kParallelOptions020);
    const auto* p = static_cast<const ptdp_parallel_options*>(o.data());
    CHECK(p->pipeline_model_parallel_size == 2);
    CHECK(p->virtual_pipeline_model_parallel_size == 2);
  }
  {
    Config uneven({"--num-layers", "5", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                   "3"});
    ptdp_parallel_options now;
    REQUIRE(ptdp_train_config_parallel_options(uneven.c, &now) == PTDP_SUCCESS);
    CHECK(now.decoder_first_pipeline_num_layers == 3);
    OldStruct o(kParallelOptions020);
    CHECK(old_train_config_parallel_options(uneven.c, o.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("ptdp_train_config_parallel_options: the configuration's pipeline "
                                              "layout uses options added after ptdp 0.2.0") == 0);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == 0xA5A5A5A5A5A5A5A5ull);  // nothing written
  }
}

TEST_CASE("0.2.0 programs: ptdp_checkpoint_read_options of a GPT checkpoint, and a Llama one refused",
          "[capi][abi][compat]") {
  sp::World w;
  for (int llama = 0; llama < 2; ++llama) {
    ptdp_gpt_options o;
    REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
    o.num_layers = 1;
    o.hidden_size = 16;
    o.num_attention_heads = 2;
    o.vocab_size = 40;
    if (llama) {
      o.normalization = PTDP_NORMALIZATION_RMSNORM;
      o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
    }
    ptdp_model m = nullptr;
    REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
    ptdp_checkpoint_state st;
    REQUIRE(ptdp_checkpoint_state_init(&st) == PTDP_SUCCESS);
    st.iteration = 3;
    const std::string dir = temp_dir(llama ? "llama" : "gpt");
    REQUIRE(ptdp_checkpoint_save(dir.c_str(), m, nullptr, nullptr, &st) == PTDP_SUCCESS);
    REQUIRE(ptdp_model_destroy(m) == PTDP_SUCCESS);
    OldStruct old(kGptOptions020);
    int64_t iteration = -1;
    const ptdp_status s = old_checkpoint_read_options(dir.c_str(), old.data(), &iteration);
    CHECK(old.guard_intact());
    if (llama) {
      CHECK(s == PTDP_ERR_INVALID_ARGUMENT);
      CHECK(iteration == -1);
    } else {
      INFO(ptdp_last_error());
      REQUIRE(s == PTDP_SUCCESS);
      CHECK(iteration == 3);
      CHECK(old.struct_size() == kGptOptions020);
      CHECK(static_cast<ptdp_gpt_options*>(old.data())->hidden_size == 16);
    }
  }
}

TEST_CASE("0.2.0 programs: the cluster fillers write no more than the 0.2.0 cluster, which plans as before",
          "[capi][abi][compat]") {
  ptdp_cluster now;
  REQUIRE(ptdp_cluster_preset("dgx-h100", &now) == PTDP_SUCCESS);
  CHECK(now.struct_size == sizeof now);
  CHECK(std::string(now.gemm_table_16bit) == "h100-16bit");
  OldStruct init(kCluster020), preset(kCluster020);
  REQUIRE(old_cluster_init(init.data()) == PTDP_SUCCESS);
  REQUIRE(old_cluster_preset("dgx-h100", preset.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(preset.guard_intact());
  CHECK(preset.struct_size() == kCluster020);
  CHECK(preset.is_prefix_of(now));
  CHECK(old_cluster_preset("dgx-z", preset.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(old_cluster_load("/nonexistent/cluster.json", preset.data()) == PTDP_ERR_IO);
  // The old cluster plans as today's: the fields after its 128 bytes come from the preset it
  // names (dgx-h100's GEMM tables, not dgx-a100's defaults).
  ptdp_plan_options o;
  REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 4;
  o.hidden_size = 1024;
  o.num_attention_heads = 16;
  o.seq_length = 1024;
  o.vocab_size = 32000;
  o.global_batch_size = 64;
  o.precision = PTDP_DTYPE_BF16;
  ptdp_plan old_plan = nullptr, new_plan = nullptr;
  REQUIRE(ptdp_plan_create(&o, static_cast<const ptdp_cluster*>(preset.data()), &old_plan) == PTDP_SUCCESS);
  REQUIRE(ptdp_plan_create(&o, &now, &new_plan) == PTDP_SUCCESS);
  std::vector<char> text(1 << 16);
  std::size_t n = 0;
  REQUIRE(ptdp_plan_report(old_plan, text.data(), text.size(), &n) == PTDP_SUCCESS);
  const std::string old_report(text.data());
  CHECK(old_report.find("from table h100-16bit") != std::string::npos);
  REQUIRE(ptdp_plan_report(new_plan, text.data(), text.size(), &n) == PTDP_SUCCESS);
  CHECK(old_report == std::string(text.data()));
  CHECK(ptdp_plan_destroy(old_plan) == PTDP_SUCCESS);
  CHECK(ptdp_plan_destroy(new_plan) == PTDP_SUCCESS);
}

TEST_CASE("0.2.0 programs: the runtime options without cpu_threads", "[capi][abi][compat]") {
  ptdp_runtime_options full;
  REQUIRE(ptdp_runtime_options_init(&full) == PTDP_SUCCESS);
  CHECK(full.struct_size == sizeof full);
  CHECK(sizeof full > kRuntimeOptions020);
  OldStruct init(kRuntimeOptions020);
  REQUIRE(old_runtime_options_init(init.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(init.struct_size() == kRuntimeOptions020);
  CHECK(init.is_prefix_of(full));
  CHECK(old_runtime_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_runtime_options_init: options is NULL");

  Config c({"--comm-timeout", "42"});
  ptdp_runtime_options now;
  REQUIRE(ptdp_train_config_runtime_options(c.c, &now) == PTDP_SUCCESS);
  CHECK(now.struct_size == sizeof now);
  OldStruct o(kRuntimeOptions020);
  REQUIRE(old_train_config_runtime_options(c.c, o.data()) == PTDP_SUCCESS);
  CHECK(o.guard_intact());
  CHECK(o.struct_size() == kRuntimeOptions020);
  CHECK(o.is_prefix_of(now));
  CHECK(static_cast<const ptdp_runtime_options*>(o.data())->comm_timeout_s == 42.0);
  // The struct an old program got back creates a runtime (cpu_threads read as its default).
  ptdp_runtime_options* old = static_cast<ptdp_runtime_options*>(o.data());
  old->use_mpi = 0;
  ptdp_runtime rt = nullptr;
  REQUIRE(ptdp_runtime_create(old, &rt) == PTDP_SUCCESS);
  int32_t threads = -7;
  CHECK(ptdp_runtime_cpu_threads(rt, &threads) == PTDP_SUCCESS);
  CHECK(threads >= 1);
  CHECK(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
  CHECK(old_train_config_runtime_options(c.c, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_train_config_runtime_options: options is NULL");
}
