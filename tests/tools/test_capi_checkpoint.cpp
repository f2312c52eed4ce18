// Evaluation, logits, generation and checkpoints through the C API, on one process: logits
// agree with the loss, evaluation with the forward, greedy generation with the logits' argmax,
// and a save / load round trip restores parameters and optimizer state exactly (the next
// iteration's loss is bit-identical). Bad arguments and bad checkpoints are refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

namespace fs = std::filesystem;

#define OK(call) REQUIRE((call) == PTDP_SUCCESS)

std::string last_error() { return ptdp_last_error(); }

using sp::World;
using sp::ids;

ptdp_gpt_options tiny(uint64_t seed, float dropout = 0.0f) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 2;
  o.hidden_size = 32;
  o.num_attention_heads = 4;
  o.seq_length = 8;
  o.vocab_size = 50;
  o.make_vocab_size_divisible_by = 16;
  o.hidden_dropout = dropout;
  o.attention_dropout = dropout;
  o.seed = seed;
  return o;
}


struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ptdp-capi-ckpt-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
};

std::vector<float> param(ptdp_model m, int32_t index) {
  char name[256];
  int32_t ndim = 0;
  int64_t shape[2] = {1, 1};
  OK(ptdp_model_param_info(m, index, name, sizeof name, &ndim, shape, nullptr));
  std::vector<float> v(static_cast<std::size_t>(shape[0] * (ndim > 1 ? shape[1] : 1)));
  OK(ptdp_model_get_param(m, name, v.data(), v.size() * sizeof(float)));
  return v;
}

float train_once(ptdp_model m, ptdp_optimizer o, ptdp_schedule s, int64_t it, const ptdp_gpt_options& g) {
  const std::size_t n = 2 * 2 * static_cast<std::size_t>(g.seq_length);  // m = 2 microbatches of 2
  const std::vector<int32_t> tok = ids(n, g.vocab_size, static_cast<uint32_t>(100 + it));
  const std::vector<int32_t> lab = ids(n, g.vocab_size, static_cast<uint32_t>(200 + it));
  ptdp_iteration_result r;
  OK(ptdp_train_iteration(m, o, s, tok.data(), lab.data(), 2, it, nullptr, &r));
  return r.loss;
}

}  // namespace

TEST_CASE("logits agree with the loss and evaluation with the forward", "[capi][tools]") {
  World w;
  const ptdp_gpt_options g = tiny(7);
  ptdp_model m = nullptr;
  OK(ptdp_model_create(w.groups, &g, &m));
  const int b = 3, s = g.seq_length, V = g.vocab_size;
  const std::vector<int32_t> tok = ids(static_cast<std::size_t>(b * s), V, 1);
  const std::vector<int32_t> lab = ids(static_cast<std::size_t>(b * s), V, 2);
  std::vector<float> logits(static_cast<std::size_t>(b * s * V));
  OK(ptdp_model_logits(m, tok.data(), b, logits.data(), logits.size() * sizeof(float)));
  double ce = 0.0;
  for (int i = 0; i < b * s; ++i) {
    const float* row = logits.data() + static_cast<std::size_t>(i) * V;
    double mx = row[0], sum = 0.0;
    for (int v = 1; v < V; ++v) mx = std::max<double>(mx, row[v]);
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    ce += std::log(sum) + mx - row[lab[static_cast<std::size_t>(i)]];
  }
  ce /= b * s;
  float loss = 0.0f;
  OK(ptdp_model_forward(m, tok.data(), lab.data(), b, 0, 0, 0, nullptr, &loss));
  CHECK(std::fabs(ce - loss) < 1e-5 * std::max(1.0, std::fabs(ce)));

  // Causality: changing the last token leaves every earlier position's logits unchanged.
  std::vector<int32_t> tok2 = tok;
  tok2[static_cast<std::size_t>(s - 1)] = (tok2[static_cast<std::size_t>(s - 1)] + 1) % V;
  std::vector<float> logits2(logits.size());
  OK(ptdp_model_logits(m, tok2.data(), b, logits2.data(), logits2.size() * sizeof(float)));
  for (int p = 0; p < s - 1; ++p)
    for (int v = 0; v < V; ++v)
      REQUIRE(logits2[static_cast<std::size_t>(p * V + v)] == logits[static_cast<std::size_t>(p * V + v)]);

  // Evaluation of 3 microbatches of 1 = the mean of the three forward losses.
  double mean = 0.0;
  for (int i = 0; i < b; ++i) {
    float l = 0.0f;
    OK(ptdp_model_forward(m, tok.data() + i * s, lab.data() + i * s, 1, 0, 0, 0, nullptr, &l));
    mean += l / b;
  }
  float eval = 0.0f;
  OK(ptdp_model_evaluate(m, tok.data(), lab.data(), 1, b, nullptr, &eval));
  CHECK(std::fabs(eval - mean) < 1e-6);

  // Bad arguments name what is wrong and change nothing.
  CHECK(ptdp_model_logits(m, tok.data(), b, logits.data(), 4) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("bytes") != std::string::npos);
  CHECK(ptdp_model_logits(m, tok.data(), 0, logits.data(), logits.size() * 4) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("batch") != std::string::npos);
  CHECK(ptdp_model_evaluate(m, tok.data(), lab.data(), 1, 0, nullptr, &eval) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("num_microbatches") != std::string::npos);
  CHECK(ptdp_model_evaluate(m, tok.data(), nullptr, 1, 1, nullptr, &eval) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("labels") != std::string::npos);
  std::vector<int32_t> bad = tok;
  bad[5] = V;
  CHECK(ptdp_model_logits(m, bad.data(), b, logits.data(), logits.size() * 4) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("vocabulary") != std::string::npos);
  ptdp_model_destroy(m);
}

TEST_CASE("greedy generation follows the argmax of the logits", "[capi][tools]") {
  World w;
  const ptdp_gpt_options g = tiny(11);
  ptdp_model m = nullptr;
  OK(ptdp_model_create(w.groups, &g, &m));
  const std::vector<int32_t> prompt{3, 1, 4, 1, 5};
  ptdp_generate_options o;
  OK(ptdp_generate_options_init(&o));
  o.max_new_tokens = 12;  // runs past the context of 8: the window slides
  o.top_k = 1;
  std::vector<int32_t> out(12, -1), again(12, -1);
  int32_t count = 0;
  OK(ptdp_model_generate(m, prompt.data(), 5, &o, out.data(), 12, &count));
  CHECK(count == 12);
  // Replay: each token is the argmax at the last position of the last 8 tokens.
  std::vector<int32_t> text = prompt;
  for (int n = 0; n < 12; ++n) {
    const std::size_t len = std::min<std::size_t>(text.size(), 8);
    std::vector<int32_t> window(8, 0);
    std::copy(text.end() - static_cast<std::ptrdiff_t>(len), text.end(), window.begin());
    std::vector<float> logits(static_cast<std::size_t>(8 * g.vocab_size));
    OK(ptdp_model_logits(m, window.data(), 1, logits.data(), logits.size() * 4));
    const float* row = logits.data() + (len - 1) * static_cast<std::size_t>(g.vocab_size);
    int best = 0;
    for (int v = 1; v < g.vocab_size; ++v)
      if (row[v] > row[best]) best = v;
    CHECK(out[static_cast<std::size_t>(n)] == best);
    text.push_back(out[static_cast<std::size_t>(n)]);
  }
  // Sampling is a pure function of the seed.
  o.top_k = 5;
  o.temperature = 0.7f;
  o.seed = 99;
  OK(ptdp_model_generate(m, prompt.data(), 5, &o, out.data(), 12, &count));
  OK(ptdp_model_generate(m, prompt.data(), 5, &o, again.data(), 12, &count));
  CHECK(out == again);
  for (int32_t t : out) CHECK((t >= 0 && t < g.vocab_size));

  CHECK(ptdp_model_generate(m, prompt.data(), 5, &o, out.data(), 11, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("capacity") != std::string::npos);
  o.temperature = 0.0f;
  CHECK(ptdp_model_generate(m, prompt.data(), 5, &o, out.data(), 12, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("temperature") != std::string::npos);
  o.temperature = 1.0f;
  const std::vector<int32_t> bad{1, 2, 50};
  CHECK(ptdp_model_generate(m, bad.data(), 3, &o, out.data(), 12, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("prompt[2]") != std::string::npos);
  CHECK(ptdp_model_generate(m, prompt.data(), 0, &o, out.data(), 12, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("prompt_length") != std::string::npos);
  ptdp_model_destroy(m);
}

TEST_CASE("greedy generation with YaRN (the key/value cache's rotated keys) follows the argmax of the logits",
          "[capi][tools][yarn]") {
  World w;
  ptdp_gpt_options g = tiny(12);
  g.normalization = PTDP_NORMALIZATION_RMSNORM;
  g.swiglu = 1;
  g.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  g.rotary_base = 100.0;
  g.rope_type = PTDP_ROPE_TYPE_YARN;
  g.rotary_scaling_factor = 4.0f;
  g.original_max_position_embeddings = 64;
  g.mscale = 1.8f;
  g.mscale_all_dim = 0.5f;
  ptdp_model m = nullptr;
  OK(ptdp_model_create(w.groups, &g, &m));
  const std::vector<int32_t> prompt{3, 1, 4};
  ptdp_generate_options o;
  OK(ptdp_generate_options_init(&o));
  o.max_new_tokens = 5;  // fills the context of 8: every token decoded from the cache
  o.top_k = 1;
  std::vector<int32_t> out(5, -1);
  int32_t count = 0;
  OK(ptdp_model_generate(m, prompt.data(), 3, &o, out.data(), 5, &count));
  CHECK(count == 5);
  std::vector<int32_t> text = prompt;
  for (int n = 0; n < 5; ++n) {
    std::vector<int32_t> window(8, 0);
    std::copy(text.begin(), text.end(), window.begin());
    std::vector<float> logits(static_cast<std::size_t>(8 * g.vocab_size));
    OK(ptdp_model_logits(m, window.data(), 1, logits.data(), logits.size() * 4));
    const float* row = logits.data() + (text.size() - 1) * static_cast<std::size_t>(g.vocab_size);
    int best = 0;
    for (int v = 1; v < g.vocab_size; ++v)
      if (row[v] > row[best]) best = v;
    CHECK(out[static_cast<std::size_t>(n)] == best);
    text.push_back(out[static_cast<std::size_t>(n)]);
  }
  ptdp_model_destroy(m);
}

TEST_CASE("a checkpoint restores parameters and optimizer state exactly", "[capi][tools]") {
  World w;
  TempDir dir;
  const ptdp_gpt_options ga = tiny(1, 0.1f);
  ptdp_optimizer_options oo;
  OK(ptdp_optimizer_options_init(&oo));
  oo.lr = 1e-2;
  ptdp_schedule s = nullptr;
  OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &s));

  ptdp_model a = nullptr;
  ptdp_optimizer oa = nullptr;
  OK(ptdp_model_create(w.groups, &ga, &a));
  OK(ptdp_optimizer_create(a, &oo, &oa));
  for (int64_t it = 0; it < 3; ++it) train_once(a, oa, s, it, ga);
  ptdp_checkpoint_state st;
  OK(ptdp_checkpoint_state_init(&st));
  st.iteration = 3;
  st.consumed_train_samples = 12;
  st.consumed_valid_samples = 5;
  OK(ptdp_checkpoint_save(dir.str().c_str(), a, oa, nullptr, &st));
  CHECK(fs::exists(dir.path / "iter_0000003" / "model_tp00_pp00.safetensors"));
  CHECK(fs::exists(dir.path / "iter_0000003" / "metadata.json"));
  CHECK(fs::exists(dir.path / "iter_0000003" / "manifest.sha256"));
  std::ifstream tracker(dir.path / "latest_checkpointed_iteration.txt");
  int64_t latest = -1;
  tracker >> latest;
  CHECK(latest == 3);

  ptdp_gpt_options read;
  int64_t iteration = -1;
  OK(ptdp_checkpoint_read_options(dir.str().c_str(), &read, &iteration));
  CHECK(iteration == 3);
  CHECK(read.hidden_size == ga.hidden_size);
  CHECK(read.num_layers == ga.num_layers);
  CHECK(read.vocab_size == ga.vocab_size);
  CHECK(read.seed == ga.seed);

  // Another model, initialised differently, loads it: equal parameters, and the next
  // iteration equals the uninterrupted one bit for bit (Adam's moments and step count came back).
  ptdp_gpt_options gb = ga;
  gb.seed = 1;  // dropout keys follow the seed; the weights come from the checkpoint
  ptdp_model bm = nullptr;
  ptdp_optimizer ob = nullptr;
  ptdp_gpt_options gc = ga;
  gc.seed = 77;
  OK(ptdp_model_create(w.groups, &gc, &bm));
  CHECK(param(bm, 0) != param(a, 0));
  ptdp_model_destroy(bm);
  OK(ptdp_model_create(w.groups, &gb, &bm));
  OK(ptdp_optimizer_create(bm, &oo, &ob));
  ptdp_checkpoint_state got;
  OK(ptdp_checkpoint_load(dir.str().c_str(), bm, ob, &got));
  CHECK(got.iteration == 3);
  CHECK(got.consumed_train_samples == 12);
  CHECK(got.consumed_valid_samples == 5);
  int32_t n = 0;
  OK(ptdp_model_num_params(a, &n));
  for (int32_t i = 0; i < n; ++i) REQUIRE(param(bm, i) == param(a, i));
  const float la = train_once(a, oa, s, 3, ga);
  const float lb = train_once(bm, ob, s, 3, gb);
  CHECK(la == lb);
  const float la2 = train_once(a, oa, s, 4, ga);
  const float lb2 = train_once(bm, ob, s, 4, gb);
  CHECK(la2 == lb2);
  for (int32_t i = 0; i < n; ++i) REQUIRE(param(bm, i) == param(a, i));

  // Refusals.
  TempDir empty;
  CHECK(ptdp_checkpoint_load(empty.str().c_str(), bm, ob, &got) == PTDP_ERR_IO);
  CHECK(last_error().find("latest_checkpointed_iteration.txt") != std::string::npos);
  CHECK(ptdp_checkpoint_load(nullptr, bm, ob, &got) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("directory") != std::string::npos);
  CHECK(ptdp_checkpoint_save(dir.str().c_str(), a, ob, nullptr, &st) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("optimizer") != std::string::npos);
  CHECK(ptdp_checkpoint_save(dir.str().c_str(), a, oa, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("state") != std::string::npos);
  st.iteration = -1;
  CHECK(ptdp_checkpoint_save(dir.str().c_str(), a, oa, nullptr, &st) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("iteration") != std::string::npos);

  ptdp_gpt_options wide = ga;
  wide.hidden_size = 64;
  ptdp_model c = nullptr;
  OK(ptdp_model_create(w.groups, &wide, &c));
  const std::vector<float> before = param(c, 0);
  CHECK(ptdp_checkpoint_load(dir.str().c_str(), c, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("hidden_size") != std::string::npos);
  CHECK(param(c, 0) == before);
  ptdp_model_destroy(c);

  // Saved without an optimizer: the parameters load, an optimizer's state does not exist.
  TempDir bare;
  st.iteration = 9;
  OK(ptdp_checkpoint_save(bare.str().c_str(), a, nullptr, nullptr, &st));
  OK(ptdp_checkpoint_load(bare.str().c_str(), bm, nullptr, nullptr));
  CHECK(ptdp_checkpoint_load(bare.str().c_str(), bm, ob, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(last_error().find("optimizer") != std::string::npos);

  ptdp_optimizer_destroy(ob);
  ptdp_optimizer_destroy(oa);
  ptdp_model_destroy(bm);
  ptdp_model_destroy(a);
  ptdp_schedule_destroy(s);
}
