// Every function that reads a struct with a struct_size takes it the way programs built
// against other headers pass it: (a) truncated to the size the struct was first published with
// (what a program built against that header passes: the call works, and the fields added since
// take their defaults, whatever lies beyond), (b) larger than this library's struct with a zero
// tail (a newer header's fields left unset: the call works), and refuses (c) a larger size
// whose tail is not zero, or a size below the first published one, with
// PTDP_ERR_INVALID_ARGUMENT and a message naming the argument's struct_size.
//
// The first published sizes are written here again on purpose: capi/src/abi_sizes.h is the
// library's copy, and a change to either shows up as a failure here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

#ifdef PTDP_TEST_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include "ptdp/ptdp_mpi.h"
#endif

namespace {

// LP64 sizes of each struct in the header that first published it (git history of ptdp.h).
constexpr std::size_t kTensorOptionsV1 = 24;
constexpr std::size_t kRuntimeOptionsV1 = 24;  // before use_nccl
constexpr std::size_t kRuntimeOptions_0_2 = 32;  // at 0.2.0: through use_nccl (28), 4 bytes of padding
constexpr std::size_t kParallelOptionsV1 = 24;
constexpr std::size_t kGptOptionsV1 = 72;  // before device, precision, attention
constexpr std::size_t kGptOptions_0_2 = 88;  // at 0.2.0: through attention (84), 4 bytes of padding
constexpr std::size_t kPipelineOptionsV1 = 24;
constexpr std::size_t kStageCallbacksV1 = 112;
constexpr std::size_t kScheduleCostsV1 = 48;
constexpr std::size_t kOptimizerOptionsV1 = 112;
constexpr std::size_t kGptDataOptionsV1 = 72;
constexpr std::size_t kGenerateOptionsV1 = 32;
constexpr std::size_t kCheckpointStateV1 = 32;
constexpr std::size_t kClusterV1 = 128;
constexpr std::size_t kPlanOptionsV1 = 104;
constexpr std::size_t kPlanLayoutV1 = 208;
static_assert(kRuntimeOptionsV1 == offsetof(ptdp_runtime_options, use_nccl));
static_assert(kRuntimeOptions_0_2 == offsetof(ptdp_runtime_options, cpu_threads));
static_assert(kGptOptionsV1 == offsetof(ptdp_gpt_options, device));
static_assert(kGptOptions_0_2 == offsetof(ptdp_gpt_options, rotary_base));
static_assert(kPlanOptionsV1 == offsetof(ptdp_plan_options, rotary_base));

// Bytes a newer header's struct has beyond this library's in the (b) and (c) cases.
constexpr std::size_t kNewerTail = 24;

std::string err() { return ptdp_last_error(); }

/// A struct as a caller built against another header hands it over: the bytes of `value`
/// (fields beyond `size` included, as an older program's memory past its struct holds
/// anything), struct_size = `size`, and, beyond this library's struct, `kNewerTail` bytes
/// that are zero unless `tail_byte` is not.
template <typename T>
struct Caller {
  alignas(std::max_align_t) unsigned char raw[sizeof(T) + kNewerTail];
  Caller(const T& value, std::size_t size, unsigned char tail_byte = 0) {
    std::memset(raw, 0, sizeof raw);
    std::memcpy(raw, &value, sizeof(T));
    raw[sizeof raw - 1] = tail_byte;
    const std::size_t s = size;
    std::memcpy(raw, &s, sizeof s);  // struct_size is the first field of every such struct
  }
  T* get() { return reinterpret_cast<T*>(raw); }
};

template <typename T>
Caller<T> first_published(const T& value, std::size_t first) {
  return Caller<T>(value, first);
}

template <typename T>
Caller<T> newer_zero_tail(const T& value) {
  return Caller<T>(value, sizeof(T) + kNewerTail);
}

/// (c): a newer caller's tail with a field set, and a size below the first published one,
/// are refused with a message naming `arg`->struct_size and the size passed.
template <typename T, typename Call>
void refuses_bad_sizes(const T& value, std::size_t first, const std::string& arg, Call call) {
  INFO(arg);
  {
    Caller<T> c(value, sizeof(T) + kNewerTail, 1);
    CHECK(call(c.get()) == PTDP_ERR_INVALID_ARGUMENT);
    const std::string m = err();
    CHECK_THAT(m, Catch::Contains(arg + "->struct_size = " + std::to_string(sizeof(T) + kNewerTail)));
    CHECK_THAT(m, Catch::Contains("byte " + std::to_string(sizeof(T) + kNewerTail - 1) + " is not zero"));
  }
  {
    Caller<T> c(value, first - 1);
    CHECK(call(c.get()) == PTDP_ERR_INVALID_ARGUMENT);
    const std::string m = err();
    CHECK_THAT(m, Catch::Contains(arg + "->struct_size = " + std::to_string(first - 1)));
    CHECK_THAT(m, Catch::Contains("smaller than any published"));
  }
  {
    Caller<T> c(value, 0);
    CHECK(call(c.get()) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains(arg + "->struct_size is 0"));
  }
}

// A small GPT: one layer, h = 16, V = 64 (padded to 64), s = 8.
ptdp_gpt_options tiny_gpt() {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 1;
  o.hidden_size = 16;
  o.num_attention_heads = 2;
  o.vocab_size = 64;
  o.make_vocab_size_divisible_by = 32;
  o.seq_length = 8;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  return o;
}

struct Model {
  ptdp_model m = nullptr;
  Model(ptdp_groups g, const ptdp_gpt_options* o) { REQUIRE(ptdp_model_create(g, o, &m) == PTDP_SUCCESS); }
  ~Model() { ptdp_model_destroy(m); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
};

struct Schedule {
  ptdp_schedule s = nullptr;
  Schedule(ptdp_schedule_kind kind, int32_t p, int32_t m) {
    REQUIRE(ptdp_schedule_create(kind, p, m, 1, &s) == PTDP_SUCCESS);
  }
  ~Schedule() { ptdp_schedule_destroy(s); }
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;
};

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string str(const char* leaf = nullptr) const { return leaf ? (path / leaf).string() : path.string(); }
};

size_t state_bytes(ptdp_model m, ptdp_optimizer_kind kind) {
  ptdp_optimizer_options oo;
  REQUIRE(ptdp_optimizer_options_init(&oo) == PTDP_SUCCESS);
  oo.optimizer = kind;
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(m, &oo, &opt) == PTDP_SUCCESS);
  size_t bytes = 0;
  REQUIRE(ptdp_optimizer_state_bytes(opt, &bytes) == PTDP_SUCCESS);
  ptdp_optimizer_destroy(opt);
  return bytes;
}

std::vector<float> param(ptdp_model m, const char* name, std::size_t n) {
  std::vector<float> v(n);
  REQUIRE(ptdp_model_get_param(m, name, v.data(), n * sizeof(float)) == PTDP_SUCCESS);
  return v;
}

}  // namespace

TEST_CASE("ABI sizes: every init sets this header's struct_size", "[capi][abi]") {
  ptdp_tensor_options a;
  ptdp_runtime_options b;
  ptdp_parallel_options c;
  ptdp_gpt_options d;
  ptdp_pipeline_options e;
  ptdp_stage_callbacks f;
  ptdp_schedule_costs g;
  ptdp_optimizer_options h;
  ptdp_gpt_data_options i;
  ptdp_generate_options j;
  ptdp_checkpoint_state k;
  ptdp_cluster l;
  ptdp_plan_options m;
  REQUIRE(ptdp_tensor_options_init(&a) == PTDP_SUCCESS);
  REQUIRE(ptdp_runtime_options_init(&b) == PTDP_SUCCESS);
  REQUIRE(ptdp_parallel_options_init(&c) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_options_init(&d) == PTDP_SUCCESS);
  REQUIRE(ptdp_pipeline_options_init(&e) == PTDP_SUCCESS);
  REQUIRE(ptdp_stage_callbacks_init(&f) == PTDP_SUCCESS);
  REQUIRE(ptdp_schedule_costs_init(&g) == PTDP_SUCCESS);
  REQUIRE(ptdp_optimizer_options_init(&h) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_data_options_init(&i) == PTDP_SUCCESS);
  REQUIRE(ptdp_generate_options_init(&j) == PTDP_SUCCESS);
  REQUIRE(ptdp_checkpoint_state_init(&k) == PTDP_SUCCESS);
  REQUIRE(ptdp_cluster_init(&l) == PTDP_SUCCESS);
  REQUIRE(ptdp_plan_options_init(&m) == PTDP_SUCCESS);
  CHECK(a.struct_size == sizeof a);
  CHECK(b.struct_size == sizeof b);
  CHECK(c.struct_size == sizeof c);
  CHECK(d.struct_size == sizeof d);
  CHECK(e.struct_size == sizeof e);
  CHECK(f.struct_size == sizeof f);
  CHECK(g.struct_size == sizeof g);
  CHECK(h.struct_size == sizeof h);
  CHECK(i.struct_size == sizeof i);
  CHECK(j.struct_size == sizeof j);
  CHECK(k.struct_size == sizeof k);
  CHECK(l.struct_size == sizeof l);
  CHECK(m.struct_size == sizeof m);
  // Structs only grow: each first published size is within this header's struct.
  CHECK(kTensorOptionsV1 <= sizeof a);
  CHECK(kRuntimeOptionsV1 < sizeof b);
  CHECK(kParallelOptionsV1 <= sizeof c);
  CHECK(kGptOptionsV1 < sizeof d);
  CHECK(kPipelineOptionsV1 <= sizeof e);
  CHECK(kStageCallbacksV1 <= sizeof f);
  CHECK(kScheduleCostsV1 <= sizeof g);
  CHECK(kOptimizerOptionsV1 <= sizeof h);
  CHECK(kGptDataOptionsV1 <= sizeof i);
  CHECK(kGenerateOptionsV1 <= sizeof j);
  CHECK(kCheckpointStateV1 <= sizeof k);
  CHECK(kClusterV1 <= sizeof l);
  CHECK(kPlanOptionsV1 <= sizeof m);
  CHECK(kPlanLayoutV1 <= sizeof(ptdp_plan_layout));
}

TEST_CASE("ABI sizes: ptdp_tensor_options", "[capi][abi]") {
  ptdp_tensor_options o;
  REQUIRE(ptdp_tensor_options_init(&o) == PTDP_SUCCESS);
  o.dtype = PTDP_DTYPE_BF16;
  const int64_t n = 3;
  auto create = [&](const ptdp_tensor_options* opts, ptdp_dtype* dtype, size_t* bytes) {
    ptdp_tensor t = nullptr;
    const ptdp_status s = ptdp_tensor_create(opts, 1, &n, nullptr, 0, &t);
    if (s == PTDP_SUCCESS) {
      REQUIRE(ptdp_tensor_dtype(t, dtype) == PTDP_SUCCESS);
      REQUIRE(ptdp_tensor_nbytes(t, bytes) == PTDP_SUCCESS);
      ptdp_tensor_destroy(t);
    }
    return s;
  };
  ptdp_dtype dtype = PTDP_DTYPE_F32;
  size_t bytes = 0;
  auto a = first_published(o, kTensorOptionsV1);
  REQUIRE(create(a.get(), &dtype, &bytes) == PTDP_SUCCESS);
  CHECK(dtype == PTDP_DTYPE_BF16);
  CHECK(bytes == 6);
  auto b = newer_zero_tail(o);
  dtype = PTDP_DTYPE_F32;
  REQUIRE(create(b.get(), &dtype, &bytes) == PTDP_SUCCESS);
  CHECK(dtype == PTDP_DTYPE_BF16);
  refuses_bad_sizes(o, kTensorOptionsV1, "options", [&](const ptdp_tensor_options* p) {
    ptdp_tensor t = nullptr;
    const ptdp_status s = ptdp_tensor_create(p, 1, &n, nullptr, 0, &t);
    CHECK(t == nullptr);
    return s;
  });
}

TEST_CASE("ABI sizes: ptdp_runtime_options", "[capi][abi]") {
  ptdp_runtime_options o;
  REQUIRE(ptdp_runtime_options_init(&o) == PTDP_SUCCESS);
  o.use_mpi = 0;
  o.comm_timeout_s = 30;
  o.use_nccl = 7;  // not 0 or 1: refused wherever it is read
  ptdp_runtime rt = nullptr;
  REQUIRE(ptdp_runtime_create(&o, &rt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->use_nccl = 7"));

  // (a) A program built before use_nccl: that field is not read; the default applies.
  auto a = first_published(o, kRuntimeOptionsV1);
  REQUIRE(ptdp_runtime_create(a.get(), &rt) == PTDP_SUCCESS);
  int32_t rank = -1, size = -1;
  REQUIRE(ptdp_runtime_world(rt, &rank, &size) == PTDP_SUCCESS);
  CHECK(rank == 0);
  CHECK(size == 1);  // use_mpi = 0 was read
  REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);

  o.use_nccl = 0;
  auto b = newer_zero_tail(o);
  rt = nullptr;
  REQUIRE(ptdp_runtime_create(b.get(), &rt) == PTDP_SUCCESS);
  REQUIRE(ptdp_runtime_world(rt, &rank, &size) == PTDP_SUCCESS);
  CHECK(size == 1);
  REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);

  refuses_bad_sizes(o, kRuntimeOptionsV1, "options", [](const ptdp_runtime_options* p) {
    ptdp_runtime r = nullptr;
    const ptdp_status s = ptdp_runtime_create(p, &r);
    CHECK(r == nullptr);
    return s;
  });

  // cpu_threads (after 0.2.0) starts past 0.2.0's 32 bytes, tail padding included: a 0.2.0
  // struct, whatever its padding (reserved0) and the bytes after it hold, gets the default; a
  // full one has it read (and refused when negative).
  {
    ptdp_runtime_options t = o;
    t.reserved0 = 0x5a5a5a5a;  // uninitialised padding of a 0.2.0 program: never read
    t.cpu_threads = -1;
    REQUIRE(ptdp_runtime_create(&t, &rt) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("options->cpu_threads = -1 is negative"));
    for (std::size_t size : {kRuntimeOptionsV1, kRuntimeOptions_0_2}) {
      INFO(size);
      auto old = first_published(t, size);
      rt = nullptr;
      REQUIRE(ptdp_runtime_create(old.get(), &rt) == PTDP_SUCCESS);
      int32_t threads = -7;
      REQUIRE(ptdp_runtime_cpu_threads(rt, &threads) == PTDP_SUCCESS);
      CHECK(threads >= 1);
      REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
    }
    t.cpu_threads = 3;
    rt = nullptr;
    REQUIRE(ptdp_runtime_create(&t, &rt) == PTDP_SUCCESS);
    int32_t threads = -7;
    REQUIRE(ptdp_runtime_cpu_threads(rt, &threads) == PTDP_SUCCESS);
    CHECK(threads == 3);
    REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
    t.cpu_threads = 0;  // leave the process at its default thread count
    rt = nullptr;
    REQUIRE(ptdp_runtime_create(&t, &rt) == PTDP_SUCCESS);
    REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
  }

  // The Fortran (and MPI_Comm) constructors read the options before the communicator: with
  // MPI not initialised in this process, good sizes get as far as the communicator.
  auto past_options = [](ptdp_status s) {
    CHECK((s == PTDP_ERR_INVALID_STATE || s == PTDP_ERR_UNSUPPORTED));
    CHECK_THAT(err(), !Catch::Contains("struct_size"));
  };
  o.use_nccl = 7;
  auto fa = first_published(o, kRuntimeOptionsV1);
  past_options(ptdp_runtime_create_from_fortran(fa.get(), 0, &rt));
  past_options(ptdp_runtime_create_from_fortran(b.get(), 0, &rt));
  refuses_bad_sizes(o, kRuntimeOptionsV1, "options", [](const ptdp_runtime_options* p) {
    ptdp_runtime r = nullptr;
    return ptdp_runtime_create_from_fortran(p, 0, &r);
  });
#ifdef PTDP_TEST_MPI
  past_options(ptdp_runtime_create_from_mpi(fa.get(), MPI_COMM_WORLD, &rt));
  past_options(ptdp_runtime_create_from_mpi(b.get(), MPI_COMM_WORLD, &rt));
  refuses_bad_sizes(o, kRuntimeOptionsV1, "options", [](const ptdp_runtime_options* p) {
    ptdp_runtime r = nullptr;
    return ptdp_runtime_create_from_mpi(p, MPI_COMM_WORLD, &r);
  });
#endif
}

TEST_CASE("ABI sizes: ptdp_parallel_options", "[capi][abi]") {
  ptdp_parallel_options o;
  REQUIRE(ptdp_parallel_options_init(&o) == PTDP_SUCCESS);
  o.tensor_model_parallel_size = 2;
  o.pipeline_model_parallel_size = 2;
  // W = 8, t = 2, p = 2, d = 2: rank 5's tensor group is {4, 5}, its pipeline group {1, 5}.
  auto members = [](const ptdp_parallel_options* p, ptdp_group_kind kind, std::vector<int32_t>* out) {
    int32_t ranks[8] = {};
    int32_t count = 0;
    const ptdp_status s = ptdp_layout_members(p, 8, 5, kind, ranks, 8, &count);
    out->assign(ranks, ranks + (s == PTDP_SUCCESS ? count : 0));
    return s;
  };
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kParallelOptionsV1) : newer_zero_tail(o);
    std::vector<int32_t> got;
    REQUIRE(members(c.get(), PTDP_GROUP_TENSOR, &got) == PTDP_SUCCESS);
    CHECK(got == std::vector<int32_t>{4, 5});
    REQUIRE(members(c.get(), PTDP_GROUP_PIPELINE, &got) == PTDP_SUCCESS);
    CHECK(got == std::vector<int32_t>{1, 5});
  }
  refuses_bad_sizes(o, kParallelOptionsV1, "options", [&](const ptdp_parallel_options* p) {
    std::vector<int32_t> got;
    return members(p, PTDP_GROUP_TENSOR, &got);
  });
  // The uneven-stage fields (after 0.2.0) start past the first version's 24 bytes, tail padding
  // included: a first-version struct never has them read, a full one does.
  CHECK(offsetof(ptdp_parallel_options, decoder_first_pipeline_num_layers) == kParallelOptionsV1);
  CHECK(o.decoder_first_pipeline_num_layers == 0);
  CHECK(o.decoder_last_pipeline_num_layers == 0);
  {
    ptdp_parallel_options bad = o;
    bad.decoder_first_pipeline_num_layers = -1;
    std::vector<int32_t> got;
    CHECK(members(&bad, PTDP_GROUP_TENSOR, &got) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ptdp_last_error()) ==
          "ptdp_layout_members: options->decoder_first_pipeline_num_layers = -1 is not a layer count (>= 0; 0: an "
          "even split)");
    auto v1 = first_published(bad, kParallelOptionsV1);
    CHECK(members(v1.get(), PTDP_GROUP_TENSOR, &got) == PTDP_SUCCESS);
  }
  {
    // The struct before context parallelism (56 bytes, its tail padding left uninitialised):
    // context_parallel_size lies past its end and reads as the default, 1.
    CHECK(offsetof(ptdp_parallel_options, context_parallel_size) == 56);
    ptdp_parallel_options before = o;
    before.struct_size = offsetof(ptdp_parallel_options, context_parallel_size);
    before.context_parallel_size = 0;  // not read
    std::vector<int32_t> got;
    REQUIRE(members(&before, PTDP_GROUP_CONTEXT, &got) == PTDP_SUCCESS);
    CHECK(got == std::vector<int32_t>{5});
    REQUIRE(members(&before, PTDP_GROUP_DATA_CONTEXT, &got) == PTDP_SUCCESS);
    CHECK(got == std::vector<int32_t>{5, 7});
  }

  sp::World w;
  ptdp_parallel_options one;
  REQUIRE(ptdp_parallel_options_init(&one) == PTDP_SUCCESS);
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(one, kParallelOptionsV1) : newer_zero_tail(one);
    ptdp_groups g = nullptr;
    REQUIRE(ptdp_groups_create(w.runtime, c.get(), &g) == PTDP_SUCCESS);
    int32_t size = 0;
    REQUIRE(ptdp_groups_size(g, PTDP_GROUP_TENSOR, &size) == PTDP_SUCCESS);
    CHECK(size == 1);
    REQUIRE(ptdp_groups_destroy(g) == PTDP_SUCCESS);
  }
  refuses_bad_sizes(one, kParallelOptionsV1, "options", [&](const ptdp_parallel_options* p) {
    ptdp_groups g = nullptr;
    const ptdp_status s = ptdp_groups_create(w.runtime, p, &g);
    CHECK(g == nullptr);
    return s;
  });
}

TEST_CASE("ABI sizes: ptdp_gpt_options", "[capi][abi]") {
  sp::World w;
  const ptdp_gpt_options o = tiny_gpt();
  Model reference(w.groups, &o);
  int32_t n_params = 0;
  REQUIRE(ptdp_model_num_params(reference.m, &n_params) == PTDP_SUCCESS);
  const size_t f32_adam = state_bytes(reference.m, PTDP_OPTIMIZER_ADAM);
  const auto wpe = param(reference.m, "embedding.position_embeddings.weight", 8 * 16);

  // (a) A program built before device, precision and attention: whatever its memory holds
  // there (here a bf16 request, which would add fp32 masters to the optimizer state) is not
  // read; the model is the f32 CPU default, built from the fields it did pass.
  ptdp_gpt_options newer = o;
  newer.precision = PTDP_DTYPE_BF16;
  newer.attention = PTDP_ATTENTION_UNFUSED;
  {
    Model bf16(w.groups, &newer);
    CHECK(state_bytes(bf16.m, PTDP_OPTIMIZER_ADAM) > f32_adam);  // what reading it would do
  }
  auto a = first_published(newer, kGptOptionsV1);
  {
    Model old(w.groups, a.get());
    int32_t n = 0;
    REQUIRE(ptdp_model_num_params(old.m, &n) == PTDP_SUCCESS);
    CHECK(n == n_params);
    CHECK(state_bytes(old.m, PTDP_OPTIMIZER_ADAM) == f32_adam);
    CHECK(param(old.m, "embedding.position_embeddings.weight", 8 * 16) == wpe);  // same seed, same shape
  }
  ptdp_gpt_options junk = o;
  std::memset(reinterpret_cast<unsigned char*>(&junk) + kGptOptionsV1, 0xA5, sizeof junk - kGptOptionsV1);
  auto a2 = first_published(junk, kGptOptionsV1);
  {
    Model old(w.groups, a2.get());
    CHECK(state_bytes(old.m, PTDP_OPTIMIZER_ADAM) == f32_adam);
  }

  // A program built against 0.2.0: 88 bytes, whose last 4 (padding) and everything after hold
  // anything; here bytes that read as RMSNorm, RoPE, no biases, ... if they were read. The model
  // is the GPT it described.
  ptdp_gpt_options llama = o;
  llama.normalization = PTDP_NORMALIZATION_RMSNORM;
  llama.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  llama.disable_bias_linear = 1;
  llama.num_query_groups = 1;
  std::memset(reinterpret_cast<unsigned char*>(&llama) + offsetof(ptdp_gpt_options, attention) + sizeof(ptdp_attention),
              0xA5, kGptOptions_0_2 - offsetof(ptdp_gpt_options, attention) - sizeof(ptdp_attention));
  {
    Model m(w.groups, &llama);  // what reading the new fields builds: another parameter set
    int32_t n = 0;
    REQUIRE(ptdp_model_num_params(m.m, &n) == PTDP_SUCCESS);
    CHECK(n != n_params);
  }
  auto v02 = first_published(llama, kGptOptions_0_2);
  {
    Model old(w.groups, v02.get());
    int32_t n = 0;
    REQUIRE(ptdp_model_num_params(old.m, &n) == PTDP_SUCCESS);
    CHECK(n == n_params);
    CHECK(state_bytes(old.m, PTDP_OPTIMIZER_ADAM) == f32_adam);
    CHECK(param(old.m, "embedding.position_embeddings.weight", 8 * 16) == wpe);
  }

  auto b = newer_zero_tail(o);
  {
    Model m(w.groups, b.get());
    CHECK(param(m.m, "embedding.position_embeddings.weight", 8 * 16) == wpe);
  }
  refuses_bad_sizes(o, kGptOptionsV1, "options", [&](const ptdp_gpt_options* p) {
    ptdp_model m = nullptr;
    const ptdp_status s = ptdp_model_create(w.groups, p, &m);
    CHECK(m == nullptr);
    return s;
  });
}

TEST_CASE("ABI sizes: ptdp_pipeline_options", "[capi][abi]") {
  sp::World w;
  const ptdp_gpt_options go = tiny_gpt();
  Model model(w.groups, &go);
  Schedule sched(PTDP_SCHEDULE_1F1B, 1, 1);
  const auto tokens = sp::ids(2 * 8, 64, 1);
  const auto labels = sp::ids(2 * 8, 64, 2);
  float reference = 0;
  REQUIRE(ptdp_model_pipeline_forward_backward(model.m, sched.s, tokens.data(), labels.data(), 2, 0, nullptr,
                                               &reference) == PTDP_SUCCESS);
  REQUIRE(std::isfinite(reference));
  TempDir dir("ptdp-abi-pipeline");
  const std::string trace = dir.str("trace.json");
  ptdp_pipeline_options o;
  REQUIRE(ptdp_pipeline_options_init(&o) == PTDP_SUCCESS);
  o.trace_path = trace.c_str();

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  auto forward_backward = [&](const ptdp_pipeline_options* p, float* loss) {
    return ptdp_model_pipeline_forward_backward(model.m, sched.s, tokens.data(), labels.data(), 2, 0, p, loss);
  };
  auto train_step = [&](const ptdp_pipeline_options* p, float* loss) {
    return ptdp_model_train_step(model.m, sched.s, tokens.data(), labels.data(), 2, 0, p, loss);
  };
#pragma GCC diagnostic pop
  const std::pair<const char*, std::function<ptdp_status(const ptdp_pipeline_options*, float*)>> entries[] = {
      {"ptdp_model_pipeline_forward_backward", forward_backward}, {"ptdp_model_train_step", train_step}};
  for (const auto& entry : entries) {
    // Not a structured binding: clang before 16 cannot capture one in a lambda.
    const char* name = entry.first;
    const auto& call = entry.second;
    INFO(name);
    for (int way = 0; way < 2; ++way) {
      std::filesystem::remove(trace);
      auto c = way == 0 ? first_published(o, kPipelineOptionsV1) : newer_zero_tail(o);
      float loss = 0;
      REQUIRE(call(c.get(), &loss) == PTDP_SUCCESS);
      CHECK(loss == Approx(reference).epsilon(1e-6));
      CHECK(std::filesystem::file_size(trace) > 0);  // trace_path was read
    }
    refuses_bad_sizes(o, kPipelineOptionsV1, "options", [&](const ptdp_pipeline_options* p) {
      float loss = -1;
      const ptdp_status s = call(p, &loss);
      CHECK(loss == -1);
      return s;
    });
  }

  // ptdp_train_iteration takes the same options.
  ptdp_optimizer_options oo;
  REQUIRE(ptdp_optimizer_options_init(&oo) == PTDP_SUCCESS);
  oo.optimizer = PTDP_OPTIMIZER_SGD;
  oo.lr = 0.0;  // the weights stay, so every iteration has the reference loss
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(model.m, &oo, &opt) == PTDP_SUCCESS);
  for (int way = 0; way < 2; ++way) {
    std::filesystem::remove(trace);
    auto c = way == 0 ? first_published(o, kPipelineOptionsV1) : newer_zero_tail(o);
    ptdp_iteration_result r{};
    REQUIRE(ptdp_train_iteration(model.m, opt, sched.s, tokens.data(), labels.data(), 2, way, c.get(), &r) ==
            PTDP_SUCCESS);
    CHECK(r.loss == Approx(reference).epsilon(1e-6));
    CHECK(std::filesystem::file_size(trace) > 0);
  }
  refuses_bad_sizes(o, kPipelineOptionsV1, "options", [&](const ptdp_pipeline_options* p) {
    return ptdp_train_iteration(model.m, opt, sched.s, tokens.data(), labels.data(), 2, 5, p, nullptr);
  });
  REQUIRE(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
}

namespace {

struct Calls {
  int forward = 0, backward = 0;
};

ptdp_status count_forward(void* user, int32_t, int32_t, ptdp_tensor, ptdp_tensor* output) {
  ++static_cast<Calls*>(user)->forward;
  *output = nullptr;  // the only chunk is the last
  return PTDP_SUCCESS;
}

ptdp_status count_backward(void* user, int32_t, int32_t, ptdp_tensor, ptdp_tensor* grad_input) {
  ++static_cast<Calls*>(user)->backward;
  *grad_input = nullptr;  // and the first
  return PTDP_SUCCESS;
}

}  // namespace

TEST_CASE("ABI sizes: ptdp_stage_callbacks", "[capi][abi]") {
  sp::World w;
  Schedule sched(PTDP_SCHEDULE_GPIPE, 1, 3);
  Calls calls;
  ptdp_stage_callbacks cb;
  REQUIRE(ptdp_stage_callbacks_init(&cb) == PTDP_SUCCESS);
  cb.forward = count_forward;
  cb.backward_input = count_backward;
  cb.user_data = &calls;
  cb.activation_ndim = 1;
  cb.activation_shape[0] = 4;
  for (int way = 0; way < 2; ++way) {
    calls = Calls{};
    auto c = way == 0 ? first_published(cb, kStageCallbacksV1) : newer_zero_tail(cb);
    REQUIRE(ptdp_pipeline_run(w.groups, sched.s, c.get(), nullptr) == PTDP_SUCCESS);
    CHECK(calls.forward == 3);
    CHECK(calls.backward == 3);
  }
  calls = Calls{};
  refuses_bad_sizes(cb, kStageCallbacksV1, "callbacks", [&](const ptdp_stage_callbacks* p) {
    return ptdp_pipeline_run(w.groups, sched.s, p, nullptr);
  });
  CHECK(calls.forward == 0);  // refused before anything ran

  ptdp_pipeline_options po;
  REQUIRE(ptdp_pipeline_options_init(&po) == PTDP_SUCCESS);
  for (int way = 0; way < 2; ++way) {
    calls = Calls{};
    auto c = way == 0 ? first_published(po, kPipelineOptionsV1) : newer_zero_tail(po);
    REQUIRE(ptdp_pipeline_run(w.groups, sched.s, &cb, c.get()) == PTDP_SUCCESS);
    CHECK(calls.forward == 3);
  }
  refuses_bad_sizes(po, kPipelineOptionsV1, "options", [&](const ptdp_pipeline_options* p) {
    return ptdp_pipeline_run(w.groups, sched.s, &cb, p);
  });
}

TEST_CASE("ABI sizes: ptdp_schedule_costs", "[capi][abi]") {
  Schedule sched(PTDP_SCHEDULE_GPIPE, 2, 4);
  ptdp_schedule_costs o;
  REQUIRE(ptdp_schedule_costs_init(&o) == PTDP_SUCCESS);
  o.forward = 1;
  o.backward = 3;
  // GPipe, p = 2, m = 4: (m + p - 1) (f + b) = 20; bubble (p - 1) / m.
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kScheduleCostsV1) : newer_zero_tail(o);
    double makespan = 0, bubble = 0;
    REQUIRE(ptdp_schedule_simulate(sched.s, c.get(), &makespan, &bubble, nullptr, 0) == PTDP_SUCCESS);
    CHECK(makespan == Approx(20.0));
    CHECK(bubble == Approx(0.25));
  }
  refuses_bad_sizes(o, kScheduleCostsV1, "costs", [&](const ptdp_schedule_costs* p) {
    double makespan = -1;
    const ptdp_status s = ptdp_schedule_simulate(sched.s, p, &makespan, nullptr, nullptr, 0);
    CHECK(makespan == -1);
    return s;
  });
  TempDir dir("ptdp-abi-svg");
  const std::string svg = dir.str("s.svg");
  for (int way = 0; way < 2; ++way) {
    std::filesystem::remove(svg);
    auto c = way == 0 ? first_published(o, kScheduleCostsV1) : newer_zero_tail(o);
    REQUIRE(ptdp_schedule_write_svg(sched.s, c.get(), svg.c_str()) == PTDP_SUCCESS);
    CHECK(std::filesystem::file_size(svg) > 0);
  }
  std::filesystem::remove(svg);
  refuses_bad_sizes(o, kScheduleCostsV1, "costs",
                    [&](const ptdp_schedule_costs* p) { return ptdp_schedule_write_svg(sched.s, p, svg.c_str()); });
  CHECK_FALSE(std::filesystem::exists(svg));
}

TEST_CASE("ABI sizes: ptdp_optimizer_options", "[capi][abi]") {
  sp::World w;
  ptdp_optimizer_options o;
  REQUIRE(ptdp_optimizer_options_init(&o) == PTDP_SUCCESS);
  o.optimizer = PTDP_OPTIMIZER_SGD;
  o.lr = 0.5;
  o.sgd_momentum = 0.0f;
  o.weight_decay = 0.0f;
  o.clip_grad = 0.0f;
  const int64_t n = 3;
  const float start[3] = {1, 2, 3};
  const float grad[3] = {2, 2, 2};
  // One SGD step of lr 0.5 on gradient 2: p - 1.
  auto step = [&](const ptdp_optimizer_options* p, std::vector<float>* after) {
    ptdp_tensor param = nullptr, g = nullptr;
    REQUIRE(ptdp_tensor_create(nullptr, 1, &n, start, sizeof start, &param) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_create(nullptr, 1, &n, grad, sizeof grad, &g) == PTDP_SUCCESS);
    ptdp_optimizer opt = nullptr;
    const ptdp_status s = ptdp_optimizer_create_for_tensors(w.groups, p, &param, &g, nullptr, 1, &opt);
    if (s == PTDP_SUCCESS) {
      REQUIRE(ptdp_optimizer_step(opt, 0, nullptr) == PTDP_SUCCESS);
      after->resize(3);
      REQUIRE(ptdp_tensor_copy_to_host(param, after->data(), 3 * sizeof(float)) == PTDP_SUCCESS);
      ptdp_optimizer_destroy(opt);
    }
    ptdp_tensor_destroy(param);
    ptdp_tensor_destroy(g);
    return s;
  };
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kOptimizerOptionsV1) : newer_zero_tail(o);
    std::vector<float> after;
    REQUIRE(step(c.get(), &after) == PTDP_SUCCESS);
    CHECK(after == std::vector<float>{0, 1, 2});
  }
  {
    ptdp_tensor param = nullptr, g = nullptr;
    REQUIRE(ptdp_tensor_create(nullptr, 1, &n, start, sizeof start, &param) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_create(nullptr, 1, &n, grad, sizeof grad, &g) == PTDP_SUCCESS);
    refuses_bad_sizes(o, kOptimizerOptionsV1, "options", [&](const ptdp_optimizer_options* p) {
      ptdp_optimizer opt = nullptr;
      const ptdp_status s = ptdp_optimizer_create_for_tensors(w.groups, p, &param, &g, nullptr, 1, &opt);
      CHECK(opt == nullptr);
      return s;
    });
    ptdp_tensor_destroy(param);
    ptdp_tensor_destroy(g);
  }

  const ptdp_gpt_options go = tiny_gpt();
  Model model(w.groups, &go);
  // SGD with momentum keeps one fp32 value per parameter, Adam two.
  const size_t adam = state_bytes(model.m, PTDP_OPTIMIZER_ADAM);
  o.sgd_momentum = 0.9f;
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kOptimizerOptionsV1) : newer_zero_tail(o);
    ptdp_optimizer opt = nullptr;
    REQUIRE(ptdp_optimizer_create(model.m, c.get(), &opt) == PTDP_SUCCESS);
    size_t bytes = 0;
    REQUIRE(ptdp_optimizer_state_bytes(opt, &bytes) == PTDP_SUCCESS);
    CHECK(2 * bytes == adam);
    REQUIRE(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
  }
  refuses_bad_sizes(o, kOptimizerOptionsV1, "options", [&](const ptdp_optimizer_options* p) {
    ptdp_optimizer opt = nullptr;
    const ptdp_status s = ptdp_optimizer_create(model.m, p, &opt);
    CHECK(opt == nullptr);
    return s;
  });
}

TEST_CASE("ABI sizes: ptdp_gpt_data_options", "[capi][abi]") {
  ptdp_gpt_data_options o;
  REQUIRE(ptdp_gpt_data_options_init(&o) == PTDP_SUCCESS);
  o.seq_length = 8;
  o.vocab_size = 64;
  o.num_samples[0] = 10;
  o.num_samples[1] = 2;
  o.num_samples[2] = 1;
  auto open = [&](const ptdp_gpt_data_options* p, int64_t* train, std::vector<int32_t>* tokens) {
    ptdp_gpt_data d = nullptr;
    const ptdp_status s = ptdp_gpt_data_create(p, &d);
    if (s != PTDP_SUCCESS) {
      CHECK(d == nullptr);
      return s;
    }
    REQUIRE(ptdp_gpt_data_num_samples(d, PTDP_SPLIT_TRAIN, train) == PTDP_SUCCESS);
    tokens->assign(2 * 8, -1);
    std::vector<int32_t> labels(2 * 8);
    REQUIRE(ptdp_gpt_data_batch(d, PTDP_SPLIT_TRAIN, 0, 2, tokens->data(), labels.data()) == PTDP_SUCCESS);
    ptdp_gpt_data_destroy(d);
    return s;
  };
  int64_t reference_count = 0;
  std::vector<int32_t> reference;
  REQUIRE(open(&o, &reference_count, &reference) == PTDP_SUCCESS);
  CHECK(reference_count >= 10);
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kGptDataOptionsV1) : newer_zero_tail(o);
    int64_t count = 0;
    std::vector<int32_t> tokens;
    REQUIRE(open(c.get(), &count, &tokens) == PTDP_SUCCESS);
    CHECK(count == reference_count);
    CHECK(tokens == reference);
  }
  refuses_bad_sizes(o, kGptDataOptionsV1, "options", [&](const ptdp_gpt_data_options* p) {
    int64_t count = 0;
    std::vector<int32_t> tokens;
    return open(p, &count, &tokens);
  });
}

TEST_CASE("ABI sizes: ptdp_generate_options", "[capi][abi]") {
  sp::World w;
  const ptdp_gpt_options go = tiny_gpt();
  Model model(w.groups, &go);
  ptdp_generate_options o;
  REQUIRE(ptdp_generate_options_init(&o) == PTDP_SUCCESS);
  o.max_new_tokens = 4;
  o.top_k = 1;  // greedy: the same tokens every time
  const int32_t prompt[3] = {1, 2, 3};
  std::vector<int32_t> reference(4, -1);
  int32_t count = 0;
  REQUIRE(ptdp_model_generate(model.m, prompt, 3, &o, reference.data(), 4, &count) == PTDP_SUCCESS);
  REQUIRE(count == 4);
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kGenerateOptionsV1) : newer_zero_tail(o);
    std::vector<int32_t> out(4, -1);
    count = 0;
    REQUIRE(ptdp_model_generate(model.m, prompt, 3, c.get(), out.data(), 4, &count) == PTDP_SUCCESS);
    CHECK(count == 4);  // max_new_tokens was read
    CHECK(out == reference);
  }
  refuses_bad_sizes(o, kGenerateOptionsV1, "options", [&](const ptdp_generate_options* p) {
    std::vector<int32_t> out(4, -1);
    count = -1;
    return ptdp_model_generate(model.m, prompt, 3, p, out.data(), 4, &count);
  });
}

TEST_CASE("ABI sizes: ptdp_checkpoint_state", "[capi][abi]") {
  sp::World w;
  const ptdp_gpt_options go = tiny_gpt();
  Model model(w.groups, &go);
  TempDir dir("ptdp-abi-checkpoint");
  ptdp_checkpoint_state st;
  REQUIRE(ptdp_checkpoint_state_init(&st) == PTDP_SUCCESS);
  for (int way = 0; way < 2; ++way) {
    st.iteration = 7 + way;
    st.consumed_train_samples = 70;
    auto c = way == 0 ? first_published(st, kCheckpointStateV1) : newer_zero_tail(st);
    REQUIRE(ptdp_checkpoint_save(dir.str().c_str(), model.m, nullptr, nullptr, c.get()) == PTDP_SUCCESS);
    ptdp_gpt_options read;
    int64_t iteration = -1;
    REQUIRE(ptdp_checkpoint_read_options(dir.str().c_str(), &read, &iteration) == PTDP_SUCCESS);
    CHECK(iteration == 7 + way);
    CHECK(read.hidden_size == 16);
  }
  st.iteration = 20;
  refuses_bad_sizes(st, kCheckpointStateV1, "state", [&](const ptdp_checkpoint_state* p) {
    return ptdp_checkpoint_save(dir.str().c_str(), model.m, nullptr, nullptr, p);
  });
  int64_t iteration = -1;
  ptdp_gpt_options read;
  REQUIRE(ptdp_checkpoint_read_options(dir.str().c_str(), &read, &iteration) == PTDP_SUCCESS);
  CHECK(iteration == 8);  // nothing saved by the refused calls
}

TEST_CASE("ABI sizes: ptdp_plan_options, ptdp_cluster and ptdp_plan_layout", "[capi][abi]") {
  ptdp_plan_options o;
  REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
  o.global_batch_size = 16;
  o.num_gpus = 8;
  ptdp_cluster k;
  REQUIRE(ptdp_cluster_init(&k) == PTDP_SUCCESS);

  double formula = 0;
  int64_t exact = 0;
  REQUIRE(ptdp_plan_parameters(&o, 1, &formula, &exact) == PTDP_SUCCESS);
  REQUIRE(exact > 0);
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kPlanOptionsV1) : newer_zero_tail(o);
    double f = 0;
    int64_t e = 0;
    REQUIRE(ptdp_plan_parameters(c.get(), 1, &f, &e) == PTDP_SUCCESS);
    CHECK(e == exact);
    CHECK(f == formula);
  }
  refuses_bad_sizes(o, kPlanOptionsV1, "options", [&](const ptdp_plan_options* p) {
    int64_t e = -1;
    const ptdp_status s = ptdp_plan_parameters(p, 1, nullptr, &e);
    CHECK(e == -1);
    return s;
  });

  auto plan = [](const ptdp_plan_options* po, const ptdp_cluster* pk, ptdp_plan_layout* best) {
    ptdp_plan p = nullptr;
    const ptdp_status s = ptdp_plan_create(po, pk, &p);
    if (s != PTDP_SUCCESS) {
      CHECK(p == nullptr);
      return s;
    }
    int32_t n = 0;
    REQUIRE(ptdp_plan_num_layouts(p, &n) == PTDP_SUCCESS);
    REQUIRE(n > 0);
    best->struct_size = sizeof *best;
    REQUIRE(ptdp_plan_get_layout(p, 0, best) == PTDP_SUCCESS);
    ptdp_plan_destroy(p);
    return s;
  };
  ptdp_plan_layout reference;
  REQUIRE(plan(&o, &k, &reference) == PTDP_SUCCESS);
  CHECK(reference.t * reference.p * reference.d == 8);
  for (int way = 0; way < 2; ++way) {
    auto c = way == 0 ? first_published(o, kPlanOptionsV1) : newer_zero_tail(o);
    auto ck = way == 0 ? first_published(k, kClusterV1) : newer_zero_tail(k);
    ptdp_plan_layout best;
    REQUIRE(plan(c.get(), ck.get(), &best) == PTDP_SUCCESS);
    CHECK(best.t == reference.t);
    CHECK(best.p == reference.p);
    CHECK(best.seconds_iteration == reference.seconds_iteration);
  }
  refuses_bad_sizes(o, kPlanOptionsV1, "options", [&](const ptdp_plan_options* p) {
    ptdp_plan_layout best;
    return plan(p, &k, &best);
  });
  refuses_bad_sizes(k, kClusterV1, "cluster", [&](const ptdp_cluster* p) {
    ptdp_plan_layout best;
    return plan(&o, p, &best);
  });

  // A layout is written, not read: the library fills what the caller's struct_size covers
  // and says how much it wrote.
  ptdp_plan p = nullptr;
  REQUIRE(ptdp_plan_create(&o, &k, &p) == PTDP_SUCCESS);
  {
    alignas(std::max_align_t) unsigned char raw[sizeof(ptdp_plan_layout) + kNewerTail];
    std::memset(raw, 0xA5, sizeof raw);
    const std::size_t first = kPlanLayoutV1;
    std::memcpy(raw, &first, sizeof first);
    REQUIRE(ptdp_plan_get_layout(p, 0, reinterpret_cast<ptdp_plan_layout*>(raw)) == PTDP_SUCCESS);
    std::size_t written = 0;
    std::memcpy(&written, raw, sizeof written);
    CHECK(written == kPlanLayoutV1);
    int32_t t = 0;
    std::memcpy(&t, raw + offsetof(ptdp_plan_layout, t), sizeof t);
    CHECK(t == reference.t);
    for (std::size_t i = kPlanLayoutV1; i < sizeof raw; ++i) CHECK(raw[i] == 0xA5);  // nothing past it

    const std::size_t larger = sizeof raw;
    std::memcpy(raw, &larger, sizeof larger);
    REQUIRE(ptdp_plan_get_layout(p, 0, reinterpret_cast<ptdp_plan_layout*>(raw)) == PTDP_SUCCESS);
    std::memcpy(&written, raw, sizeof written);
    CHECK(written == sizeof(ptdp_plan_layout));
    for (std::size_t i = sizeof(ptdp_plan_layout); i < sizeof raw; ++i) CHECK(raw[i] == 0xA5);

    const std::size_t small = kPlanLayoutV1 - 1;
    std::memcpy(raw, &small, sizeof small);
    CHECK(ptdp_plan_get_layout(p, 0, reinterpret_cast<ptdp_plan_layout*>(raw)) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("layout->struct_size = " + std::to_string(small)));
  }
  ptdp_plan_destroy(p);
}
