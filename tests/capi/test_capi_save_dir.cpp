// Save directories and checkpoints through the C API, on one process:
// - a run holds DIR/ptdp.lock for its life: a second trainer (or another process's lock, taken
//   here with flock) on the same --save is refused up front naming the holder; a stale lock (a
//   holder that died: the file names it but nobody holds it) is taken over; a save shares the
//   lock of the run it belongs to;
// - resuming with flags that change the trajectory is refused naming each flag and both values,
//   unless --override-resume-check;
// - a failed save (the file size limit standing in for a full disk) removes its .tmp directory
//   and leaves the previous checkpoint loadable;
// - metadata.json that makes no sense, re-signed so that its hash matches, is refused naming the
//   field, and nothing is loaded.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

namespace fs = std::filesystem;

#define OK(call)                              \
  do {                                        \
    const ptdp_status rc_ = (call);           \
    INFO(#call << ": " << ptdp_last_error()); \
    REQUIRE(rc_ == PTDP_SUCCESS);             \
  } while (0)

std::string err() { return ptdp_last_error(); }
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ptdp-save-dir-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str(const std::string& sub = "") const { return sub.empty() ? path.string() : (path / sub).string(); }
};

std::vector<std::string> flags(const std::string& save, const std::vector<std::string>& more = {}) {
  std::vector<std::string> f = {"ptdp-train", "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
                                "--seq-length", "8", "--vocab-size", "32", "--micro-batch-size", "1",
                                "--global-batch-size", "2", "--train-iters", "2", "--lr", "1e-2", "--mock-data",
                                "--seed", "5", "--eval-interval", "0", "--log-interval", "100"};
  if (!save.empty()) f.insert(f.end(), {"--save", save});
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

struct Trainer {
  ptdp_train_config config = nullptr;
  ptdp_trainer trainer = nullptr;
  ptdp_status rc = PTDP_SUCCESS;
  std::string message;
  Trainer(const sp::World& w, const std::vector<std::string>& args, int32_t print_log = 0) {
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &config) == PTDP_SUCCESS);
    ptdp_trainer_options o;
    REQUIRE(ptdp_trainer_options_init(&o) == PTDP_SUCCESS);
    o.runtime = w.runtime;
    o.print_log = print_log;  // the JSON lines are the logging rank's, printing or not
    rc = ptdp_trainer_create(config, &o, &trainer);
    message = err();
  }
  ~Trainer() {
    ptdp_trainer_destroy(trainer);
    ptdp_train_config_destroy(config);
  }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The SHA-256 of a file, by sha256sum (this test links the C API only).
std::string sha256_of(const std::string& path) {
  const std::string cmd = "sha256sum '" + path + "'";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[65] = {0};
  REQUIRE(std::fread(buf, 1, 64, p) == 64);
  ::pclose(p);
  return std::string(buf, 64);
}

// Rewrites metadata.json of DIR/iter_N with `edit` and re-signs the manifest, so that only the
// meaning checks can catch it.
void edit_metadata(const std::string& iter_dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string md_path = iter_dir + "/metadata.json";
  nlohmann::json md = nlohmann::json::parse(slurp(md_path));
  edit(md);
  std::ofstream(md_path, std::ios::trunc) << md.dump(1) << "\n";
  const std::string manifest_path = iter_dir + "/manifest.sha256";
  std::istringstream in(slurp(manifest_path));
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.size() > 66 && line.substr(66) == "metadata.json") line = sha256_of(md_path) + "  metadata.json";
    out += line + "\n";
  }
  std::ofstream(manifest_path, std::ios::trunc) << out;
}

ptdp_gpt_options tiny() {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 1;
  o.hidden_size = 16;
  o.num_attention_heads = 2;
  o.seq_length = 8;
  o.vocab_size = 32;
  o.seed = 3;
  return o;
}

std::vector<float> first_param(ptdp_model m) {
  char name[256];
  int32_t ndim = 0;
  int64_t shape[2] = {1, 1};
  OK(ptdp_model_param_info(m, 0, name, sizeof name, &ndim, shape, nullptr));
  std::vector<float> v(static_cast<std::size_t>(shape[0] * (ndim > 1 ? shape[1] : 1)));
  OK(ptdp_model_get_param(m, name, v.data(), v.size() * sizeof(float)));
  return v;
}

}  // namespace

TEST_CASE("save dir: a run locks --save, a second run is refused naming the holder", "[capi][files][lock]") {
  sp::World w;
  TempDir dir;
  const std::string save = dir.str("ckpt");
  {
    Trainer a(w, flags(save));
    REQUIRE(a.rc == PTDP_SUCCESS);
    const std::string lock = slurp(save + "/ptdp.lock");
    CHECK(has(lock, "pid " + std::to_string(::getpid())));
    CHECK(has(lock, "host "));
    CHECK(has(lock, "started "));
    // A second trainer on the same directory: refused before it builds anything.
    Trainer b(w, flags(save));
    CHECK(b.rc == PTDP_ERR_INVALID_STATE);
    CHECK(has(b.message, save + "/ptdp.lock"));
    CHECK(has(b.message, "in use by another run"));
    CHECK(has(b.message, "pid " + std::to_string(::getpid())));
    // The run saves through the lock it holds.
    REQUIRE(ptdp_trainer_run(a.trainer) == PTDP_SUCCESS);
    CHECK(fs::exists(save + "/iter_0000002/metadata.json"));
  }
  // Released when the run ends: empty, and the next run takes it.
  CHECK(slurp(save + "/ptdp.lock").empty());
  {
    Trainer c(w, flags(save, {"--load", save, "--train-iters", "3"}));
    CHECK(c.rc == PTDP_SUCCESS);
  }

  // Another process's lock (flock on its own open file): refused naming it, by a trainer and by
  // a plain ptdp_checkpoint_save alike.
  const int fd = ::open((save + "/ptdp.lock").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string other = "host elsewhere, pid 4242, started 2026-01-01T00:00:00Z\n";
  REQUIRE(::ftruncate(fd, 0) == 0);
  REQUIRE(::pwrite(fd, other.data(), other.size(), 0) == static_cast<ssize_t>(other.size()));
  {
    Trainer d(w, flags(save));
    CHECK(d.rc == PTDP_ERR_INVALID_STATE);
    CHECK(has(d.message, "host elsewhere, pid 4242"));
  }
  ptdp_gpt_options g = tiny();
  ptdp_model m = nullptr;
  OK(ptdp_model_create(w.groups, &g, &m));
  ptdp_checkpoint_state st;
  OK(ptdp_checkpoint_state_init(&st));
  st.iteration = 7;
  CHECK(ptdp_checkpoint_save(save.c_str(), m, nullptr, nullptr, &st) == PTDP_ERR_INVALID_STATE);
  CHECK(has(err(), "pid 4242"));
  CHECK_FALSE(fs::exists(save + "/iter_0000007"));
  CHECK_FALSE(fs::exists(save + "/iter_0000007.tmp"));
  // The holder dies (its descriptor closes): the lock is stale, and taken over.
  ::close(fd);
  CHECK(has(slurp(save + "/ptdp.lock"), "pid 4242"));
  {
    Trainer e(w, flags(save));
    CHECK(e.rc == PTDP_SUCCESS);
    CHECK(has(slurp(save + "/ptdp.lock"), "pid " + std::to_string(::getpid())));
  }
  OK(ptdp_checkpoint_save(save.c_str(), m, nullptr, nullptr, &st));
  CHECK(fs::exists(save + "/iter_0000007/metadata.json"));
  ptdp_model_destroy(m);
}

TEST_CASE("save dir: resuming with trajectory flags that differ is refused unless overridden", "[capi][files][lock]") {
  sp::World w;
  TempDir dir;
  const std::string save = dir.str("ckpt");
  {
    Trainer a(w, flags(save));
    REQUIRE(a.rc == PTDP_SUCCESS);
    REQUIRE(ptdp_trainer_run(a.trainer) == PTDP_SUCCESS);
  }
  // The seed and the global batch differ: both named with both values.
  {
    Trainer b(w, flags(save, {"--load", save, "--train-iters", "4", "--seed", "6", "--global-batch-size", "4"}));
    CHECK(b.rc == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(has(b.message, "--seed was 5, now 6"));
    CHECK(has(b.message, "--global-batch-size was 2, now 4"));
    CHECK(has(b.message, "--override-resume-check"));
  }
  // Flags that do not change the trajectory (more iterations, the log interval) resume.
  {
    Trainer c(w, flags(save, {"--load", save, "--train-iters", "4", "--log-interval", "1"}));
    CHECK(c.rc == PTDP_SUCCESS);
  }
  // Overridden: resumes.
  {
    Trainer d(w, flags(save, {"--load", save, "--train-iters", "4", "--seed", "6", "--override-resume-check"}));
    CHECK(d.rc == PTDP_SUCCESS);
    REQUIRE(ptdp_trainer_run(d.trainer) == PTDP_SUCCESS);
  }
  // --finetune starts a new run: no resume check (here on a checkpoint that recorded no flags).
  TempDir bare;
  ptdp_gpt_options g = tiny();
  g.num_layers = 1;
  ptdp_model m = nullptr;
  OK(ptdp_model_create(w.groups, &g, &m));
  ptdp_checkpoint_state st;
  OK(ptdp_checkpoint_state_init(&st));
  st.iteration = 1;
  OK(ptdp_checkpoint_save(bare.str().c_str(), m, nullptr, nullptr, &st));
  ptdp_model_destroy(m);
  {
    Trainer e(w, flags("", {"--load", bare.str(), "--finetune", "--seed", "3"}));
    CHECK(e.rc == PTDP_SUCCESS);
  }
}

TEST_CASE("save dir: a checkpoint names its optimizer, and loading its state into another is refused",
          "[capi][files][optimizer]") {
  sp::World w;
  TempDir dir;
  const auto kind_of = [](const std::string& save) {
    return nlohmann::json::parse(slurp(save + "/iter_0000002/metadata.json"))["optimizer"]["kind"];
  };
  for (const char* saved : {"sgd", "muon"}) {
    INFO(saved);
    const std::string save = dir.str(std::string("ckpt-") + saved);
    {
      Trainer a(w, flags(save, {"--optimizer", saved}));
      REQUIRE(a.rc == PTDP_SUCCESS);
      REQUIRE(ptdp_trainer_run(a.trainer) == PTDP_SUCCESS);
    }
    CHECK(kind_of(save) == saved);
    const char* other = std::string(saved) == "sgd" ? "muon" : "sgd";
    // The state of one optimizer does not load into another (SGD's and Muon's momentum buffers
    // would have the same name), with or without --override-resume-check (--optimizer is also
    // a trajectory flag; the load, which comes first, names the kinds).
    for (const char* now : {other, "adam"}) {
      for (const bool override_check : {false, true}) {
        std::vector<std::string> more = {"--load", save, "--train-iters", "4", "--optimizer", now};
        if (override_check) more.push_back("--override-resume-check");
        Trainer c(w, flags(save, more));
        INFO(c.message);
        CHECK(c.rc == PTDP_ERR_INVALID_ARGUMENT);
        CHECK(has(c.message, std::string("was saved by the ") + saved + " optimizer; this one is " + now));
      }
    }
    // The same optimizer resumes; --finetune loads the parameters alone into any.
    {
      Trainer d(w, flags(save, {"--load", save, "--train-iters", "4", "--optimizer", saved}));
      CHECK(d.rc == PTDP_SUCCESS);
    }
    {
      Trainer e(w, flags("", {"--load", save, "--finetune", "--optimizer", other}));
      CHECK(e.rc == PTDP_SUCCESS);
    }
  }
}

TEST_CASE("save dir: a YaRN run's settings are in its checkpoint, and a resume with others is refused",
          "[capi][files][yarn]") {
  sp::World w;
  TempDir dir;
  const std::string save = dir.str("ckpt");
  const std::vector<std::string> yarn = {"--position-embedding-type", "rope", "--rope-type", "yarn",
                                         "--rotary-scaling-factor", "4", "--original-max-position-embeddings", "4",
                                         "--mscale", "0.707", "--mscale-all-dim", "0.5", "--beta-fast", "8"};
  {
    Trainer a(w, flags(save, yarn));
    REQUIRE(a.rc == PTDP_SUCCESS);
    REQUIRE(ptdp_trainer_run(a.trainer) == PTDP_SUCCESS);
  }
  ptdp_gpt_options read;
  OK(ptdp_gpt_options_init(&read));
  OK(ptdp_checkpoint_read_options(save.c_str(), &read, nullptr));
  CHECK(read.rope_type == PTDP_ROPE_TYPE_YARN);
  CHECK(read.rotary_scaling_factor == 4.0f);
  CHECK(read.original_max_position_embeddings == 4);
  CHECK(read.mscale == 0.707f);
  CHECK(read.mscale_all_dim == 0.5f);
  CHECK(read.beta_fast == 8.0f);
  CHECK(read.beta_slow == 1.0f);
  CHECK(read.yarn_no_round_to_int == 0);
  std::vector<std::string> other = yarn;
  other.insert(other.end(), {"--load", save, "--train-iters", "4", "--rotary-scaling-factor", "8"});
  {
    Trainer b(w, flags(save, other));
    CHECK(b.rc == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(has(b.message, "--rotary-scaling-factor was 4.0, now 8.0"));
  }
  std::vector<std::string> plain = {"--position-embedding-type", "rope", "--load", save, "--train-iters", "4"};
  {
    Trainer c(w, flags(save, plain));
    CHECK(c.rc == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(has(c.message, "--rope-type was \"yarn\", now \"rope\""));
  }
}

TEST_CASE("save dir: a failed save removes its .tmp directory and keeps the previous checkpoint", "[capi][files]") {
  sp::World w;
  TempDir dir;
  ptdp_gpt_options g = tiny();
  ptdp_model m = nullptr;
  OK(ptdp_model_create(w.groups, &g, &m));
  ptdp_checkpoint_state st;
  OK(ptdp_checkpoint_state_init(&st));
  st.iteration = 1;
  OK(ptdp_checkpoint_save(dir.str().c_str(), m, nullptr, nullptr, &st));
  // A disk that fills up: writes past 4 KiB fail (EFBIG), as ENOSPC would.
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  st.iteration = 2;
  const ptdp_status rc = ptdp_checkpoint_save(dir.str().c_str(), m, nullptr, nullptr, &st);
  const std::string message = err();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
  std::signal(SIGXFSZ, old_handler);
  CHECK(rc == PTDP_ERR_IO);
  CHECK(has(message, "iter_0000002.tmp"));
  CHECK_FALSE(fs::exists(dir.path / "iter_0000002.tmp"));
  CHECK_FALSE(fs::exists(dir.path / "iter_0000002"));
  CHECK(slurp(dir.str("latest_checkpointed_iteration.txt")) == "1");
  int64_t iteration = -1;
  ptdp_gpt_options read;
  OK(ptdp_checkpoint_read_options(dir.str().c_str(), &read, &iteration));
  CHECK(iteration == 1);
  OK(ptdp_checkpoint_load(dir.str().c_str(), m, nullptr, nullptr));
  ptdp_model_destroy(m);
}

TEST_CASE("save dir: metadata that makes no sense is refused although its hash matches", "[capi][files]") {
  sp::World w;
  TempDir dir;
  ptdp_gpt_options g = tiny();
  ptdp_model a = nullptr;
  ptdp_optimizer oa = nullptr;
  ptdp_optimizer_options oo;
  OK(ptdp_optimizer_options_init(&oo));
  OK(ptdp_model_create(w.groups, &g, &a));
  OK(ptdp_optimizer_create(a, &oo, &oa));
  ptdp_checkpoint_state st;
  OK(ptdp_checkpoint_state_init(&st));
  st.iteration = 4;
  st.consumed_train_samples = 8;
  OK(ptdp_checkpoint_save(dir.str().c_str(), a, oa, nullptr, &st));
  const std::string iter = dir.str("iter_0000004");
  const std::string pristine = slurp(iter + "/metadata.json");
  const std::string pristine_manifest = slurp(iter + "/manifest.sha256");

  ptdp_gpt_options gb = g;
  gb.seed = 99;
  ptdp_model b = nullptr;
  ptdp_optimizer ob = nullptr;
  OK(ptdp_model_create(w.groups, &gb, &b));
  OK(ptdp_optimizer_create(b, &oo, &ob));
  const std::vector<float> before = first_param(b);

  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> words;
    ptdp_status status = PTDP_ERR_IO;
  };
  const std::string pos = "embedding.position_embeddings.weight";
  const std::vector<Case> cases = {
      {"iteration", [](nlohmann::json& m) { m["iteration"] = 3; },
       {"\"iteration\" = 3 differs from its directory's iteration 4 (iter_0000004)"}},
      {"negative consumed samples", [](nlohmann::json& m) { m["consumed_train_samples"] = -8; },
       {"\"consumed_train_samples\" = -8 is below 0"}},
      {"fractional counter", [](nlohmann::json& m) { m["consumed_valid_samples"] = 1.5; },
       {"\"consumed_valid_samples\" is 1.5, not an integer"}},
      {"unknown optimizer", [](nlohmann::json& m) { m["optimizer"]["kind"] = "lion"; },
       {"kind \"lion\" is not a known optimizer"}},
      {"optimizer state", [](nlohmann::json& m) { m["optimizer"]["state"] = {"exp_avg"}; },
       {"state [\"exp_avg\"] is not what a adam optimizer keeps"}},
      {"muon state that is no list of names", [](nlohmann::json& m) {
         m["optimizer"]["kind"] = "muon";
         m["optimizer"]["state"] = nlohmann::json::array();
       },
       {"state [] is not what a muon optimizer keeps"}},
      {"muon with AdamW's state", [](nlohmann::json& m) {
         m["optimizer"]["kind"] = "muon";
         m["optimizer"]["state"] = {"exp_avg", "exp_avg_sq"};
       },
       {"state [\"exp_avg\",\"exp_avg_sq\"] is not what a muon optimizer keeps"}},
      // State of the same names from another optimizer would load as this one's: refused by kind.
      {"optimizer of another kind", [](nlohmann::json& m) {
         m["optimizer"]["kind"] = "sgd";
         m["optimizer"]["state"] = {"momentum_buffer"};
       },
       {"was saved by the sgd optimizer; this one is adam (--optimizer adam)", "does not carry over"},
       PTDP_ERR_INVALID_ARGUMENT},
      {"a muon checkpoint", [](nlohmann::json& m) {
         m["optimizer"]["kind"] = "muon";
         m["optimizer"]["state"] = {"momentum_buffer", "exp_avg", "exp_avg_sq"};
       },
       {"was saved by the muon optimizer; this one is adam"},
       PTDP_ERR_INVALID_ARGUMENT},
      {"negative steps", [](nlohmann::json& m) { m["optimizer"]["steps"] = -1; }, {"\"steps\" = -1 is below 0"}},
      {"skipped beyond the iteration", [](nlohmann::json& m) { m["optimizer"]["skipped_iterations"] = 5; },
       {"\"skipped_iterations\" = 5 exceeds the iteration 4"}},
      {"loss scale", [](nlohmann::json& m) { m["optimizer"]["loss_scale"] = -2.0; },
       {"\"loss_scale\" = -2.0 is not a finite number > 0"}},
      {"layout of no world", [](nlohmann::json& m) { m["layout"]["tensor_model_parallel_size"] = 3; },
       {"world_size 1 is not a multiple of t 3"}},
      {"zero pipeline", [](nlohmann::json& m) { m["layout"]["pipeline_model_parallel_size"] = 0; },
       {"\"pipeline_model_parallel_size\" = 0 is below 1"}},
      {"files of another layout",
       [](nlohmann::json& m) {
         m["layout"]["tensor_model_parallel_size"] = 2;
         m["layout"]["world_size"] = 2;
       },
       {"are not the shards of the layout t 2 x p 1"}},
      {"a shape whose size overflows",
       [&](nlohmann::json& m) { m["tensors"][pos]["shape"] = {4611686018427387904LL, 4611686018427387904LL}; },
       {"tensor map entry '" + pos + "'", "more elements than int64 holds"}},
      {"a shape the model does not have",
       [&](nlohmann::json& m) {
         m["tensors"][pos]["shape"] = {8, 17};
         m["tensors"][pos]["pieces"][0]["cols"] = {0, 17};
       },
       {"checkpoint tensor '" + pos + "' has global shape [8,17]", "the model's is [8, 16]"},
       PTDP_ERR_INVALID_ARGUMENT},
      {"a piece the safetensors file does not hold",
       [&](nlohmann::json& m) {
         m["tensors"][pos]["shape"] = {9, 16};
         m["tensors"][pos]["pieces"][0]["rows"] = {0, 9};
       },
       {"model_tp00_pp00.safetensors", "tensor '" + pos + "' is 8 x 16, but it should hold piece rows [0, 9) x cols [0, 16)"}},
      {"a dtype ptdp does not write (nor the files hold)",
       [&](nlohmann::json& m) { m["tensors"][pos]["dtype"] = "BF16"; },
       {"tensor map entry '" + pos + "' has dtype BF16; a ptdp checkpoint holds F32 tensors"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::ofstream(iter + "/metadata.json", std::ios::trunc) << pristine;
    std::ofstream(iter + "/manifest.sha256", std::ios::trunc) << pristine_manifest;
    edit_metadata(iter, c.edit);
    ptdp_checkpoint_state got;
    OK(ptdp_checkpoint_state_init(&got));
    CHECK(ptdp_checkpoint_load(dir.str().c_str(), b, ob, &got) == c.status);
    const std::string message = err();
    INFO(message);
    if (c.status == PTDP_ERR_IO && std::string(c.what).rfind("a piece", 0) != 0) CHECK(has(message, iter + "/metadata.json"));
    for (const std::string& w : c.words) CHECK(has(message, w));
    CHECK(first_param(b) == before);  // nothing loaded
  }
  // Restored, it loads.
  std::ofstream(iter + "/metadata.json", std::ios::trunc) << pristine;
  std::ofstream(iter + "/manifest.sha256", std::ios::trunc) << pristine_manifest;
  ptdp_checkpoint_state got;
  OK(ptdp_checkpoint_state_init(&got));
  OK(ptdp_checkpoint_load(dir.str().c_str(), b, ob, &got));
  CHECK(got.iteration == 4);
  CHECK(first_param(b) == first_param(a));
  ptdp_optimizer_destroy(ob);
  ptdp_optimizer_destroy(oa);
  ptdp_model_destroy(b);
  ptdp_model_destroy(a);
}

TEST_CASE("save dir: a run whose loss is not finite writes JSON lines and metadata that parse", "[capi][json]") {
  sp::World w;
  TempDir dir;
  const std::string log = dir.str("log.jsonl"), save = dir.str("ckpt");
  // A learning rate of 1e30 makes the weights, then the loss and the grad norm, overflow.
  {
    Trainer a(w, flags(save, {"--lr", "1e30", "--train-iters", "4", "--log-json", log, "--clip-grad", "0"}), 1);
    REQUIRE(a.rc == PTDP_SUCCESS);
    (void)ptdp_trainer_run(a.trainer);
  }
  std::istringstream lines(slurp(log));
  std::string line;
  int parsed = 0, nulls = 0;
  while (std::getline(lines, line)) {
    INFO(line);
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(line));
    ++parsed;
    for (const auto& [k, v] : j.items()) {
      CHECK((v.is_number() || v.is_null()));
      if (v.is_null()) ++nulls;
    }
    CHECK(line.find("nan") == std::string::npos);
    CHECK(line.find("inf") == std::string::npos);
  }
  CHECK(parsed >= 4);
  CHECK(nulls > 0);  // the run did go non-finite
  if (fs::exists(save + "/iter_0000004/metadata.json")) {
    CHECK_NOTHROW(nlohmann::json::parse(slurp(save + "/iter_0000004/metadata.json")));
  }
}
