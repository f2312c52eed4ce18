// Programs built against a published release keep working: the functions that fill a struct
// which grew after a release that bound them, without reading its struct_size (the *_init
// functions and the getters whose struct the caller does not initialise), have old versions
// (symbol versions PTDP_0 and PTDP_0.3, capi/src/compat.cpp) that write no more than the struct
// of the oldest release bound to that version (capi/src/abi_sizes.h), while a program built now
// gets the current versions. This test calls the old versions, as an old program's references
// are bound, through `.symver` aliases, with a guard pattern after each old struct.
// tests/packaging runs the releases' own programs the same way.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
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
ptdp_status old_train_config_settings(ptdp_train_config config, void* settings);
ptdp_status old_train_config_data_options(ptdp_train_config config, void* options);
ptdp_status old_gpt_data_options_init(void* options);
ptdp_status old_train_config_optimizer_options(ptdp_train_config config, void* options);
ptdp_status old_optimizer_options_init(void* options);
ptdp_status old_schedule_costs_init(void* costs);
ptdp_status old_pipeline_options_init(void* options);
ptdp_status old_model_forward_backward(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                       int32_t micro_batch_size, int64_t iteration, int64_t microbatch,
                                       float grad_scale, float* loss);
ptdp_status old_model_forward(ptdp_model model, const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
                              int64_t iteration, int64_t microbatch, int32_t training, float* loss);
ptdp_status old_model_evaluate(ptdp_model model, const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
                               int32_t num_microbatches, float* loss);
ptdp_status v0_3_plan_options_init(void* options);
ptdp_status v0_3_plan_parse_args(int32_t argc, const char* const* argv, void* options, void* cluster,
                                 ptdp_plan_cli* cli);
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
__asm__(".symver old_train_config_settings,ptdp_train_config_settings@PTDP_0");
__asm__(".symver old_train_config_data_options,ptdp_train_config_data_options@PTDP_0");
__asm__(".symver old_gpt_data_options_init,ptdp_gpt_data_options_init@PTDP_0");
__asm__(".symver old_train_config_optimizer_options,ptdp_train_config_optimizer_options@PTDP_0");
__asm__(".symver old_optimizer_options_init,ptdp_optimizer_options_init@PTDP_0");
__asm__(".symver old_schedule_costs_init,ptdp_schedule_costs_init@PTDP_0");
__asm__(".symver old_pipeline_options_init,ptdp_pipeline_options_init@PTDP_0");
__asm__(".symver old_model_forward_backward,ptdp_model_forward_backward@PTDP_0");
__asm__(".symver old_model_forward,ptdp_model_forward@PTDP_0");
__asm__(".symver old_model_evaluate,ptdp_model_evaluate@PTDP_0");
__asm__(".symver v0_3_plan_options_init,ptdp_plan_options_init@PTDP_0.3");
__asm__(".symver v0_3_plan_parse_args,ptdp_plan_parse_args@PTDP_0.3");

namespace {

// The sizes of 0.1.0's structs (packaging/abi/releases/0.1.0), which the PTDP_0 versions write:
// 0.2.0 and 0.3.0 moved the functions filling the first three to PTDP_0.3, and had the others'
// structs at these sizes too.
constexpr std::size_t kGptOptions010 = 88, kGenerateOptions010 = 32, kPlanOptions010 = 104, kParallelOptions010 = 24;
constexpr std::size_t kCluster010 = 128, kRuntimeOptions010 = 32;
constexpr std::size_t kTrainSettings010 = 168, kDataOptions010 = 72, kOptimizerOptions010 = 112, kCosts010 = 48;
constexpr std::size_t kPipelineOptions030 = 24;  // every release's, before the masks
// The sizes of 0.2.0's and 0.3.0's structs that their PTDP_0.3 versions of the plan functions write.
constexpr std::size_t kPlanOptions030 = 176, kCluster030 = 128;
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

TEST_CASE("old programs: PTDP_0: the init functions write no more than the 0.1.0 struct", "[capi][abi][compat]") {
  ptdp_gpt_options g;
  ptdp_generate_options n;
  ptdp_plan_options p;
  REQUIRE(ptdp_gpt_options_init(&g) == PTDP_SUCCESS);
  REQUIRE(ptdp_generate_options_init(&n) == PTDP_SUCCESS);
  REQUIRE(ptdp_plan_options_init(&p) == PTDP_SUCCESS);
  CHECK(g.struct_size == sizeof g);  // a program built now gets today's versions
  CHECK(sizeof g > kGptOptions010);

  OldStruct og(kGptOptions010), on(kGenerateOptions010), op(kPlanOptions010);
  REQUIRE(old_gpt_options_init(og.data()) == PTDP_SUCCESS);
  REQUIRE(old_generate_options_init(on.data()) == PTDP_SUCCESS);
  REQUIRE(old_plan_options_init(op.data()) == PTDP_SUCCESS);
  CHECK(og.guard_intact());
  CHECK(on.guard_intact());
  CHECK(op.guard_intact());
  CHECK(og.struct_size() == kGptOptions010);
  CHECK(on.struct_size() == kGenerateOptions010);
  CHECK(op.struct_size() == kPlanOptions010);
  CHECK(og.is_prefix_of(g));
  CHECK(on.is_prefix_of(n));
  CHECK(op.is_prefix_of(p));

  // The struct an old program got is accepted and means the GPT of 0.1.0.
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

TEST_CASE("old programs: PTDP_0 getters hand out a GPT and refuse what the old struct cannot hold", "[capi][abi][compat]") {
  {
    Config gpt({"--num-layers", "3", "--hidden-size", "32"});
    OldStruct o(kGptOptions010);
    REQUIRE(old_train_config_gpt_options(gpt.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kGptOptions010);
    CHECK(static_cast<ptdp_gpt_options*>(o.data())->num_layers == 3);
  }
  {
    Config llama({"--hidden-size", "32", "--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "64"});
    OldStruct o(kGptOptions010);
    CHECK(old_train_config_gpt_options(llama.c, o.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("ptdp_gpt_options fields past the 88 bytes of a program built against "
                                              "ptdp 0.1.0 to 0.3.0") != std::string::npos);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == 0xA5A5A5A5A5A5A5A5ull);  // nothing written
  }
  {
    std::vector<const char*> argv = {"ptdp-plan", "--num-layers", "4", "--global-batch-size", "8", "--num-gpus", "2"};
    OldStruct o(kPlanOptions010);
    ptdp_cluster cluster;
    ptdp_plan_cli cli;
    REQUIRE(old_plan_parse_args(static_cast<int32_t>(argv.size()), argv.data(), o.data(), &cluster, &cli) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kPlanOptions010);
    CHECK(static_cast<ptdp_plan_options*>(o.data())->num_layers == 4);
    std::vector<const char*> llama = {"ptdp-plan", "--model-preset", "llama-3.2-1b", "--global-batch-size", "8"};
    OldStruct l(kPlanOptions010);
    CHECK(old_plan_parse_args(static_cast<int32_t>(llama.size()), llama.data(), l.data(), &cluster, &cli) ==
          PTDP_ERR_INVALID_ARGUMENT);
    CHECK(l.guard_intact());
  }
}

TEST_CASE("old programs: PTDP_0 parallel options without the uneven pipeline stages", "[capi][abi][compat]") {
  ptdp_parallel_options full;
  REQUIRE(ptdp_parallel_options_init(&full) == PTDP_SUCCESS);
  CHECK(full.struct_size == sizeof full);
  CHECK(sizeof full > kParallelOptions010);
  OldStruct init(kParallelOptions010);
  REQUIRE(old_parallel_options_init(init.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(init.struct_size() == kParallelOptions010);
  CHECK(init.is_prefix_of(full));
  {
    Config even({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage",
                 "1"});
    OldStruct o(kParallelOptions010);
    REQUIRE(old_train_config_parallel_options(even.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kParallelOptions010);
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
    OldStruct o(kParallelOptions010);
    CHECK(old_train_config_parallel_options(uneven.c, o.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("ptdp_train_config_parallel_options: the configuration's pipeline "
                                              "layout sets ptdp_parallel_options fields past the 24 bytes") == 0);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == 0xA5A5A5A5A5A5A5A5ull);  // nothing written
  }
}

TEST_CASE("old programs: PTDP_0 ptdp_checkpoint_read_options of a GPT checkpoint, and a Llama one refused",
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
    OldStruct old(kGptOptions010);
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
      CHECK(old.struct_size() == kGptOptions010);
      CHECK(static_cast<ptdp_gpt_options*>(old.data())->hidden_size == 16);
    }
  }
}

TEST_CASE("old programs: PTDP_0: the cluster fillers write no more than the 0.1.0 cluster, which plans as before",
          "[capi][abi][compat]") {
  ptdp_cluster now;
  REQUIRE(ptdp_cluster_preset("dgx-h100", &now) == PTDP_SUCCESS);
  CHECK(now.struct_size == sizeof now);
  CHECK(std::string(now.gemm_table_16bit) == "h100-16bit");
  OldStruct init(kCluster010), preset(kCluster010);
  REQUIRE(old_cluster_init(init.data()) == PTDP_SUCCESS);
  REQUIRE(old_cluster_preset("dgx-h100", preset.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(preset.guard_intact());
  CHECK(preset.struct_size() == kCluster010);
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

TEST_CASE("old programs: PTDP_0 runtime options without cpu_threads", "[capi][abi][compat]") {
  ptdp_runtime_options full;
  REQUIRE(ptdp_runtime_options_init(&full) == PTDP_SUCCESS);
  CHECK(full.struct_size == sizeof full);
  CHECK(sizeof full > kRuntimeOptions010);
  OldStruct init(kRuntimeOptions010);
  REQUIRE(old_runtime_options_init(init.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(init.struct_size() == kRuntimeOptions010);
  CHECK(init.is_prefix_of(full));
  CHECK(old_runtime_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_runtime_options_init: options is NULL");

  Config c({"--comm-timeout", "42"});
  ptdp_runtime_options now;
  REQUIRE(ptdp_train_config_runtime_options(c.c, &now) == PTDP_SUCCESS);
  CHECK(now.struct_size == sizeof now);
  OldStruct o(kRuntimeOptions010);
  REQUIRE(old_train_config_runtime_options(c.c, o.data()) == PTDP_SUCCESS);
  CHECK(o.guard_intact());
  CHECK(o.struct_size() == kRuntimeOptions010);
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

TEST_CASE("old programs: PTDP_0 settings, data and optimizer getters write 0.1.0's structs", "[capi][abi][compat]") {
  {
    Config plain({"--micro-batch-size", "3", "--train-iters", "7", "--exit-interval", "5"});
    ptdp_train_settings now;
    REQUIRE(ptdp_train_config_settings(plain.c, &now) == PTDP_SUCCESS);
    CHECK(now.struct_size == sizeof now);
    OldStruct o(kTrainSettings010);
    REQUIRE(old_train_config_settings(plain.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kTrainSettings010);
    CHECK(o.is_prefix_of(now));
    CHECK(static_cast<const ptdp_train_settings*>(o.data())->exit_interval == 5);
  }
  for (const char* flag : {"--check-for-nan-in-loss-and-grad", "--max-restarts", "--max-skipped-iterations"}) {
    INFO(flag);
    std::vector<const char*> argv = {flag};
    if (std::string(flag) != "--check-for-nan-in-loss-and-grad") argv.push_back("2");
    if (std::string(flag) == "--max-restarts") argv.insert(argv.end(), {"--save", "/tmp/ptdp-compat-unused"});
    Config c(argv);
    OldStruct o(kTrainSettings010);
    CHECK(old_train_config_settings(c.c, o.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("ptdp_train_config_settings: the configuration's settings sets "
                                              "ptdp_train_settings fields past the 168 bytes") == 0);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == 0xA5A5A5A5A5A5A5A5ull);  // nothing written
  }
  {
    Config mock({"--seq-length", "24", "--vocab-size", "96"});
    ptdp_gpt_data_options now;
    REQUIRE(ptdp_train_config_data_options(mock.c, &now) == PTDP_SUCCESS);
    OldStruct o(kDataOptions010);
    REQUIRE(old_train_config_data_options(mock.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kDataOptions010);
    CHECK(o.is_prefix_of(now));
    CHECK(static_cast<const ptdp_gpt_data_options*>(o.data())->seq_length == 24);
    Config split({"--train-data-path", "a", "--valid-data-path", "b", "--tokenizer-type", "ByteLevel"});
    OldStruct s(kDataOptions010);
    CHECK(old_train_config_data_options(split.c, s.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("ptdp_gpt_data_options fields past the 72 bytes") != std::string::npos);
    CHECK(s.guard_intact());
  }
  {
    Config adam({"--lr", "0.003", "--use-distributed-optimizer"});
    ptdp_optimizer_options now;
    REQUIRE(ptdp_train_config_optimizer_options(adam.c, &now) == PTDP_SUCCESS);
    OldStruct o(kOptimizerOptions010);
    REQUIRE(old_train_config_optimizer_options(adam.c, o.data()) == PTDP_SUCCESS);
    CHECK(o.guard_intact());
    CHECK(o.struct_size() == kOptimizerOptions010);
    CHECK(o.is_prefix_of(now));
    Config overlap({"--use-distributed-optimizer", "--overlap-grad-reduce"});
    OldStruct v(kOptimizerOptions010);
    CHECK(old_train_config_optimizer_options(overlap.c, v.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("the configuration's optimizer sets ptdp_optimizer_options fields past "
                                              "the 112 bytes") != std::string::npos);
    CHECK(v.guard_intact());
    // Muon's settings lie past 0.1.0's struct too: a changed one is refused, naming its byte.
    Config muon({"--optimizer", "muon", "--muon-num-ns-steps", "7"});
    OldStruct m(kOptimizerOptions010);
    CHECK(old_train_config_optimizer_options(muon.c, m.data()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("fields past the 112 bytes of a program built against ptdp 0.1.0 to "
                                              "0.3.0 (the first at byte " +
                                              std::to_string(offsetof(ptdp_optimizer_options, muon_num_ns_steps)) +
                                              ")") != std::string::npos);
    CHECK(m.guard_intact());
  }
}

TEST_CASE("old programs: PTDP_0 init functions of the data, optimizer and schedule-cost options",
          "[capi][abi][compat]") {
  ptdp_gpt_data_options data;
  ptdp_optimizer_options opt;
  ptdp_schedule_costs costs;
  REQUIRE(ptdp_gpt_data_options_init(&data) == PTDP_SUCCESS);
  REQUIRE(ptdp_optimizer_options_init(&opt) == PTDP_SUCCESS);
  REQUIRE(ptdp_schedule_costs_init(&costs) == PTDP_SUCCESS);
  CHECK(data.struct_size == sizeof data);
  CHECK(opt.struct_size == sizeof opt);
  CHECK(costs.struct_size == sizeof costs);
  OldStruct od(kDataOptions010), oo(kOptimizerOptions010), oc(kCosts010);
  REQUIRE(old_gpt_data_options_init(od.data()) == PTDP_SUCCESS);
  REQUIRE(old_optimizer_options_init(oo.data()) == PTDP_SUCCESS);
  REQUIRE(old_schedule_costs_init(oc.data()) == PTDP_SUCCESS);
  CHECK(od.guard_intact());
  CHECK(oo.guard_intact());
  CHECK(oc.guard_intact());
  CHECK(od.struct_size() == kDataOptions010);
  CHECK(oo.struct_size() == kOptimizerOptions010);
  CHECK(oc.struct_size() == kCosts010);
  CHECK(od.is_prefix_of(data));
  CHECK(oo.is_prefix_of(opt));
  CHECK(oc.is_prefix_of(costs));
  CHECK(old_schedule_costs_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_schedule_costs_init: costs is NULL");

  // What an old program got back creates an optimizer (the fields it lacks at their defaults).
  sp::World w;
  ptdp_gpt_options g;
  REQUIRE(ptdp_gpt_options_init(&g) == PTDP_SUCCESS);
  g.num_layers = 1;
  g.hidden_size = 16;
  g.num_attention_heads = 2;
  g.vocab_size = 40;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &g, &m) == PTDP_SUCCESS);
  ptdp_optimizer o = nullptr;
  REQUIRE(ptdp_optimizer_create(m, static_cast<const ptdp_optimizer_options*>(oo.data()), &o) == PTDP_SUCCESS);
  CHECK(ptdp_optimizer_destroy(o) == PTDP_SUCCESS);
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
}

TEST_CASE("old programs: PTDP_0.3 plan functions write 0.2.0's and 0.3.0's structs", "[capi][abi][compat]") {
  ptdp_plan_options now;
  REQUIRE(ptdp_plan_options_init(&now) == PTDP_SUCCESS);
  CHECK(now.struct_size == sizeof now);
  CHECK(sizeof now > kPlanOptions030);
  OldStruct init(kPlanOptions030);
  REQUIRE(v0_3_plan_options_init(init.data()) == PTDP_SUCCESS);
  CHECK(init.guard_intact());
  CHECK(init.struct_size() == kPlanOptions030);
  CHECK(init.is_prefix_of(now));

  // A Llama model fits 0.2.0's struct (the Llama options came before it); an attention backend
  // does not, nor a cluster with a bandwidth of its own.
  std::vector<const char*> llama = {"ptdp-plan", "--model-preset", "llama-3.2-1b", "--global-batch-size", "8"};
  OldStruct o(kPlanOptions030), k(kCluster030);
  ptdp_plan_cli cli;
  REQUIRE(v0_3_plan_parse_args(static_cast<int32_t>(llama.size()), llama.data(), o.data(), k.data(), &cli) ==
          PTDP_SUCCESS);
  CHECK(o.guard_intact());
  CHECK(k.guard_intact());
  CHECK(o.struct_size() == kPlanOptions030);
  CHECK(k.struct_size() == kCluster030);
  CHECK(static_cast<const ptdp_plan_options*>(o.data())->normalization == PTDP_NORMALIZATION_RMSNORM);
  for (std::vector<const char*> argv :
       {std::vector<const char*>{"ptdp-plan", "--global-batch-size", "8", "--attention-backend", "unfused"},
        std::vector<const char*>{"ptdp-plan", "--global-batch-size", "8", "--elementwise-bandwidth-gbs", "123"}}) {
    INFO(argv[3]);
    OldStruct u(kPlanOptions030), c(kCluster030);
    ptdp_plan_cli untouched;
    std::memset(&untouched, 0xA5, sizeof untouched);
    CHECK(v0_3_plan_parse_args(static_cast<int32_t>(argv.size()), argv.data(), u.data(), c.data(), &untouched) ==
          PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()).find("ptdp_plan_parse_args: the command line sets ptdp_") == 0);
    CHECK(u.guard_intact());
    CHECK(c.guard_intact());
    CHECK(u.struct_size() == 0xA5A5A5A5A5A5A5A5ull);  // nothing written, the switches included
    CHECK(c.struct_size() == 0xA5A5A5A5A5A5A5A5ull);
    CHECK(untouched.struct_size == 0xA5A5A5A5A5A5A5A5ull);
  }
}

TEST_CASE("old programs: PTDP_0 model calls keep their signatures without options, and the 24-byte pipeline options",
          "[capi][abi][compat]") {
  ptdp_pipeline_options now;
  REQUIRE(ptdp_pipeline_options_init(&now) == PTDP_SUCCESS);
  CHECK(now.struct_size == sizeof now);
  OldStruct old(kPipelineOptions030);
  REQUIRE(old_pipeline_options_init(old.data()) == PTDP_SUCCESS);
  CHECK(old.guard_intact());
  CHECK(old.struct_size() == kPipelineOptions030);
  CHECK(old.is_prefix_of(now));

  sp::World w;
  ptdp_gpt_options g;
  REQUIRE(ptdp_gpt_options_init(&g) == PTDP_SUCCESS);
  g.num_layers = 1;
  g.hidden_size = 16;
  g.num_attention_heads = 2;
  g.vocab_size = 40;
  g.seq_length = 8;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &g, &m) == PTDP_SUCCESS);
  std::vector<int32_t> tokens(16), labels(16);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(i * 7 % 40);
    labels[i] = static_cast<int32_t>((i * 7 + 3) % 40);
  }
  // The old versions are the new ones with no options: the same losses, bit for bit.
  float a = 0, b = 0;
  REQUIRE(old_model_forward_backward(m, tokens.data(), labels.data(), 2, 3, 1, 1.0f, &a) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_forward_backward(m, tokens.data(), labels.data(), 2, 3, 1, 1.0f, nullptr, &b) == PTDP_SUCCESS);
  CHECK(a == b);
  REQUIRE(old_model_forward(m, tokens.data(), labels.data(), 2, 3, 1, 1, &a) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_forward(m, tokens.data(), labels.data(), 2, 3, 1, 1, nullptr, &b) == PTDP_SUCCESS);
  CHECK(a == b);
  REQUIRE(old_model_evaluate(m, tokens.data(), labels.data(), 1, 2, &a) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_evaluate(m, tokens.data(), labels.data(), 1, 2, nullptr, &b) == PTDP_SUCCESS);
  CHECK(a == b);
  // Their errors are the new ones', under the same name.
  CHECK(old_model_evaluate(m, nullptr, labels.data(), 1, 2, &a) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_model_evaluate: tokens is NULL");
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
}
