// The bad-input table's fixture (one live and one destroyed handle of every type), its runner,
// and the test case that runs every section.
#include "bad_input_table.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace bad {

namespace {

#define FIX_OK(call)                              \
  do {                                            \
    const ptdp_status rc_ = (call);               \
    INFO(#call << ": " << ptdp_last_error());     \
    REQUIRE(rc_ == PTDP_SUCCESS);                 \
  } while (0)

constexpr unsigned char kPattern = 0xA5;

template <typename S>
void keep_size(S& s) {
  s.struct_size = sizeof s;
}

struct Handles {
  ptdp_runtime runtime = nullptr;
  ptdp_groups groups = nullptr;
  ptdp_tensor tensor = nullptr;
  ptdp_work work = nullptr;
  ptdp_model model = nullptr;
  ptdp_optimizer optimizer = nullptr;
  ptdp_layer layer = nullptr;
  ptdp_schedule schedule = nullptr;
  ptdp_tokenizer tokenizer = nullptr;
  ptdp_dataset dataset = nullptr;
  ptdp_gpt_data data = nullptr;
  ptdp_train_config config = nullptr;
  ptdp_trainer trainer = nullptr;
  ptdp_plan plan = nullptr;
};

const std::vector<const char*> kTrainFlags = {
    "ptdp-train", "--num-layers", "1", "--hidden-size", "8", "--num-attention-heads", "2", "--seq-length", "4",
    "--max-position-embeddings", "4", "--vocab-size", "16", "--micro-batch-size", "1", "--global-batch-size", "1",
    "--train-iters", "1", "--lr", "1e-3", "--mock-data", "--log-interval", "100"};

// One handle of every type on `runtime`/`groups` (made when NULL).
Handles make_all(const std::string& dataset_prefix, ptdp_runtime runtime_in, ptdp_groups groups_in) {
  Handles h;
  if (runtime_in == nullptr) {
    ptdp_runtime_options ro;
    FIX_OK(ptdp_runtime_options_init(&ro));
    ro.use_mpi = 0;
    ro.use_nccl = 0;
    FIX_OK(ptdp_runtime_create(&ro, &h.runtime));
    FIX_OK(ptdp_groups_create(h.runtime, nullptr, &h.groups));
  }
  ptdp_runtime rt = runtime_in ? runtime_in : h.runtime;
  ptdp_groups g = groups_in ? groups_in : h.groups;
  const int64_t s23[] = {2, 3};
  const std::vector<float> six = {1, 2, 3, 4, 5, 6};
  FIX_OK(ptdp_tensor_create(nullptr, 2, s23, six.data(), six.size() * sizeof(float), &h.tensor));
  ptdp_tensor scratch = nullptr;
  FIX_OK(ptdp_tensor_create(nullptr, 2, s23, six.data(), six.size() * sizeof(float), &scratch));
  FIX_OK(ptdp_all_reduce(g, PTDP_GROUP_WORLD, scratch, PTDP_REDUCE_SUM, &h.work));
  FIX_OK(ptdp_work_wait(h.work));
  FIX_OK(ptdp_tensor_destroy(scratch));
  ptdp_gpt_options go;
  FIX_OK(ptdp_gpt_options_init(&go));
  go.num_layers = 1;
  go.hidden_size = 8;
  go.num_attention_heads = 2;
  go.seq_length = 4;
  go.max_position_embeddings = 4;
  go.vocab_size = 16;
  go.make_vocab_size_divisible_by = 1;
  FIX_OK(ptdp_model_create(g, &go, &h.model));
  FIX_OK(ptdp_optimizer_create(h.model, nullptr, &h.optimizer));
  FIX_OK(ptdp_column_parallel_linear_create(g, 8, 8, 1, 0, 0.02f, 1, &h.layer));
  FIX_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &h.schedule));
  ptdp_tokenizer_options tko;
  FIX_OK(ptdp_tokenizer_options_init(&tko));
  FIX_OK(ptdp_tokenizer_create(&tko, &h.tokenizer));
  FIX_OK(ptdp_dataset_open(dataset_prefix.c_str(), &h.dataset));
  FIX_OK(ptdp_gpt_data_create(nullptr, &h.data));
  FIX_OK(ptdp_train_config_parse(static_cast<int32_t>(kTrainFlags.size()), kTrainFlags.data(), &h.config));
  ptdp_trainer_options to;
  FIX_OK(ptdp_trainer_options_init(&to));
  to.runtime = rt;
  to.print_log = 0;
  FIX_OK(ptdp_trainer_create(h.config, &to, &h.trainer));
  ptdp_plan_options po;
  FIX_OK(ptdp_plan_options_init(&po));
  po.num_layers = 2;
  po.hidden_size = 64;
  po.num_attention_heads = 4;
  po.seq_length = 32;
  po.max_position_embeddings = 32;
  po.vocab_size = 128;
  po.global_batch_size = 8;
  po.num_gpus = 1;
  ptdp_cluster cluster;
  FIX_OK(ptdp_cluster_init(&cluster));
  FIX_OK(ptdp_plan_create(&po, &cluster, &h.plan));
  return h;
}

void destroy_all(Handles& h) {
  CHECK(ptdp_trainer_destroy(h.trainer) == PTDP_SUCCESS);
  CHECK(ptdp_train_config_destroy(h.config) == PTDP_SUCCESS);
  CHECK(ptdp_plan_destroy(h.plan) == PTDP_SUCCESS);
  CHECK(ptdp_gpt_data_destroy(h.data) == PTDP_SUCCESS);
  CHECK(ptdp_dataset_destroy(h.dataset) == PTDP_SUCCESS);
  CHECK(ptdp_tokenizer_destroy(h.tokenizer) == PTDP_SUCCESS);
  CHECK(ptdp_schedule_destroy(h.schedule) == PTDP_SUCCESS);
  CHECK(ptdp_layer_destroy(h.layer) == PTDP_SUCCESS);
  CHECK(ptdp_optimizer_destroy(h.optimizer) == PTDP_SUCCESS);
  CHECK(ptdp_model_destroy(h.model) == PTDP_SUCCESS);
  CHECK(ptdp_work_destroy(h.work) == PTDP_SUCCESS);
  CHECK(ptdp_tensor_destroy(h.tensor) == PTDP_SUCCESS);
  CHECK(ptdp_groups_destroy(h.groups) == PTDP_SUCCESS);
  CHECK(ptdp_runtime_destroy(h.runtime) == PTDP_SUCCESS);
}

}  // namespace

void Out::reset() {
  std::memset(static_cast<void*>(this), kPattern, sizeof *this);
  keep_size(report);
  keep_size(gpt);
  keep_size(optimizer_options);
  keep_size(parallel);
  keep_size(runtime_options);
  keep_size(settings);
  keep_size(data_options);
  keep_size(layout);
  keep_size(plan_options);
  keep_size(cli);
  keep_size(cluster);
  keep_size(preprocess);
  keep_size(state);
}

std::vector<SectionEntry>& sections() {
  static std::vector<SectionEntry> s;
  return s;
}

int add_section(const char* name, Section rows) {
  sections().push_back({name, rows});
  return static_cast<int>(sections().size());
}

void* bogus() {
  alignas(64) static unsigned char zeros[4096] = {};
  return zeros;
}

Fixture::Fixture() {
  char tmpl[] = "/tmp/ptdp_bad_inputs_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  dir = tmpl;
  {
    std::ofstream(dir + "/in.jsonl") << "{\"text\": \"hello world\"}\n{\"text\": \"abc\"}\n";
    ptdp_preprocess_options po;
    FIX_OK(ptdp_preprocess_options_init(&po));
    const std::string input = dir + "/in.jsonl";
    const char* inputs[1] = {input.c_str()};
    const std::string output = dir + "/ds";
    po.inputs = inputs;
    po.num_inputs = 1;
    po.output_prefix = output.c_str();
    FIX_OK(ptdp_preprocess(&po, nullptr));
    dataset_prefix = output + "_text_document";
  }
  Handles live = make_all(dataset_prefix, nullptr, nullptr);
  runtime = live.runtime;
  groups = live.groups;
  tensor = live.tensor;
  work = live.work;
  model = live.model;
  optimizer = live.optimizer;
  layer = live.layer;
  schedule = live.schedule;
  tokenizer = live.tokenizer;
  dataset = live.dataset;
  data = live.data;
  config = live.config;
  trainer = live.trainer;
  plan = live.plan;
  const int64_t two = 2;
  ptdp_tensor_options io;
  FIX_OK(ptdp_tensor_options_init(&io));
  io.dtype = PTDP_DTYPE_I64;
  FIX_OK(ptdp_tensor_create(&io, 1, &two, nullptr, 0, &ints));
  const int64_t shp[] = {4, 2, 8};
  FIX_OK(ptdp_tensor_create(nullptr, 3, shp, nullptr, 0, &hidden));

  Handles dead = make_all(dataset_prefix, nullptr, nullptr);
  dead_runtime = dead.runtime;
  dead_groups = dead.groups;
  dead_tensor = dead.tensor;
  dead_work = dead.work;
  dead_model = dead.model;
  dead_optimizer = dead.optimizer;
  dead_layer = dead.layer;
  dead_schedule = dead.schedule;
  dead_tokenizer = dead.tokenizer;
  dead_dataset = dead.dataset;
  dead_data = dead.data;
  dead_config = dead.config;
  dead_trainer = dead.trainer;
  dead_plan = dead.plan;
  destroy_all(dead);

  tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  labels = {2, 3, 4, 5, 6, 7, 8, 9};
  char name[128] = {};
  int32_t ndim = 0;
  int64_t shape[8] = {};
  int32_t pdim = 0;
  FIX_OK(ptdp_model_param_info(model, 0, name, sizeof name, &ndim, shape, &pdim));
  param0_name_ = name;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  param0_.resize(static_cast<size_t>(n));
  FIX_OK(ptdp_model_get_param(model, name, param0_.data(), param0_.size() * sizeof(float)));
}

Fixture::~Fixture() {
  ptdp_tensor_destroy(ints);
  ptdp_tensor_destroy(hidden);
  Handles h{runtime, groups, tensor, work, model, optimizer, layer, schedule, tokenizer, dataset, data, config,
            trainer, plan};
  destroy_all(h);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

void Fixture::verify_unchanged() const {
  float buf[6] = {};
  REQUIRE(ptdp_tensor_copy_to_host(tensor, buf, sizeof buf) == PTDP_SUCCESS);
  CHECK(std::vector<float>(buf, buf + 6) == std::vector<float>{1, 2, 3, 4, 5, 6});
  std::vector<float> p(param0_.size());
  REQUIRE(ptdp_model_get_param(model, param0_name_.c_str(), p.data(), p.size() * sizeof(float)) == PTDP_SUCCESS);
  CHECK(p == param0_);
  ptdp_schedule_kind k = PTDP_SCHEDULE_GPIPE;
  int32_t pp = 0, m = 0, v = 0;
  REQUIRE(ptdp_schedule_info(schedule, &k, &pp, &m, &v) == PTDP_SUCCESS);
  CHECK(k == PTDP_SCHEDULE_1F1B);
  CHECK(m == 2);
  int32_t size = 0;
  REQUIRE(ptdp_groups_size(groups, PTDP_GROUP_WORLD, &size) == PTDP_SUCCESS);
  CHECK(size == 1);
  int64_t count = 0;
  REQUIRE(ptdp_dataset_num_documents(dataset, &count) == PTDP_SUCCESS);
  CHECK(count == 2);
}

void run(Fixture& f, const std::vector<Row>& rows) {
  REQUIRE_FALSE(rows.empty());
  for (const Row& r : rows) {
    INFO(r.function << ": " << r.what);
    f.out.reset();
    Out before;
    std::memcpy(static_cast<void*>(&before), &f.out, sizeof before);
    const ptdp_status st = r.call();
    const std::string msg = ptdp_last_error();
    INFO("status " << static_cast<int>(st) << ", message: " << msg);
    CHECK(st == r.expected);
    CHECK(msg.rfind(r.function + ": ", 0) == 0);
    for (const std::string& m : r.mentions) CHECK(msg.find(m) != std::string::npos);
    CHECK(std::memcmp(&before, &f.out, sizeof before) == 0);
    f.verify_unchanged();
  }
}

}  // namespace bad

TEST_CASE("every C entry point refuses its bad inputs by status and message, without side effects",
          "[capi][errors][bad_inputs]") {
  bad::Fixture f;
  for (const bad::SectionEntry& s : bad::sections()) {
    DYNAMIC_SECTION("section " << s.name) { bad::run(f, s.rows(f)); }
  }
}
