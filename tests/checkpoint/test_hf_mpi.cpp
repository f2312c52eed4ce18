// Hugging Face checkpoints at every layout, under mpiexec with 4 ranks and without Python: a
// Llama with GQA (untied), a Qwen2 (tied, qkv bias) and a GPT-2 written by the test are imported
// at (t, p) = (2, 1), (1, 2) and (2, 2) (d = 4 / (t p)) and exported again: the files hold the
// original tensors bit for bit, so the gathers and the per-rank slices of every conversion
// (whole query groups per tensor rank, each rank's share of gate and up, the padded vocabulary
// split over ranks) are right. At p = 1 the logits equal the reference forward pass on the
// Hugging Face tensors. A ptdp checkpoint saved at (2, 2) from an import, loaded at (1, 1) and
// exported equals the original too. Rank 0 prints "N passed, M failed"; any failure fails the
// run (exit 1).
//
//   mpiexec -n 4 test_hf_mpi WORKDIR
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/checkpoint/test_hf_fixtures.h"

namespace {

namespace fs = std::filesystem;

int passed = 0, failed = 0;
int world_rank = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", world_rank, what.c_str());
  }
}

bool ok(ptdp_status s, const char* call) {
  if (s == PTDP_SUCCESS) return true;
  check(false, std::string(call) + ": " + ptdp_status_string(s) + ": " + ptdp_last_error());
  return false;
}
#define OK(call) ok((call), #call)

// The same tensors, byte for byte (names of `in` may lack GPT2LMHeadModel's prefix).
void same_tensors(const std::string& in, const std::string& out, const std::string& what) {
  const auto a = hf::read_model(in), b = hf::read_model(out);
  check(a.size() == b.size(),
        what + ": " + std::to_string(b.size()) + " tensors written, " + std::to_string(a.size()) + " read");
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    check(it != b.end() && it->second.shape == t.shape && it->second.bytes == t.bytes,
          what + ": tensor " + name + " differs");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mpiexec -n 4 test_hf_mpi WORKDIR\n");
    return 2;
  }
  const std::string work = argv[1];
  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.comm_timeout_s = 60;
  ptdp_runtime rt = nullptr;
  if (ptdp_runtime_create(&ro, &rt) != PTDP_SUCCESS) {
    std::fprintf(stderr, "runtime: %s\n", ptdp_last_error());
    return 1;
  }
  int32_t size = 1;
  ptdp_runtime_world(rt, &world_rank, &size);
  ptdp_groups world = nullptr;
  ptdp_groups_create(rt, nullptr, &world);

  struct Case {
    std::string name;
    hf::Model model;
    bool gpt2;
  };
  std::vector<Case> cases;
  cases.push_back({"llama", hf::llama("llama", false), false});
  cases.push_back({"qwen2", hf::llama("qwen2", true), false});
  cases.push_back({"gpt2", hf::gpt2(), true});
  if (world_rank == 0) {
    fs::remove_all(work);
    for (const Case& c : cases) hf::write_model(work + "/" + c.name, c.model, c.name == "qwen2" ? "BF16" : "F32", 2);
  }
  OK(ptdp_barrier(world, PTDP_GROUP_WORLD, nullptr));

  const int layouts[][2] = {{2, 1}, {1, 2}, {2, 2}};
  for (const Case& c : cases) {
    const std::string in = work + "/" + c.name;
    for (const auto& lt : layouts) {
      const int t = lt[0], p = lt[1];
      const std::string what = c.name + " at t " + std::to_string(t) + ", p " + std::to_string(p);
      ptdp_parallel_options po;
      ptdp_parallel_options_init(&po);
      po.tensor_model_parallel_size = t;
      po.pipeline_model_parallel_size = p;
      ptdp_groups g = nullptr;
      ptdp_model m = nullptr;
      ptdp_gpt_options o;
      ptdp_gpt_options_init(&o);
      if (!OK(ptdp_groups_create(rt, &po, &g)) || !OK(ptdp_hf_read_options(in.c_str(), &o, nullptr))) break;
      o.hidden_dropout = o.attention_dropout = 0.0f;
      if (OK(ptdp_model_create(g, &o, &m)) && OK(ptdp_hf_load(in.c_str(), m))) {
        const std::string out = work + "/" + c.name + "-out-" + std::to_string(t) + std::to_string(p);
        ptdp_hf_save_options so;
        ptdp_hf_save_options_init(&so);
        so.dtype = c.name == "qwen2" ? PTDP_DTYPE_BF16 : PTDP_DTYPE_F32;
        so.max_shard_size = 3000;
        OK(ptdp_hf_save(out.c_str(), m, &so));
        OK(ptdp_barrier(world, PTDP_GROUP_WORLD, nullptr));
        if (world_rank == 0) same_tensors(in, out, what + " exported");
        if (p == 1) {
          const std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
          const std::size_t V = static_cast<std::size_t>(o.vocab_size);
          std::vector<float> logits(tokens.size() * V);
          o.seq_length = static_cast<int32_t>(tokens.size());
          ptdp_model m8 = nullptr;  // the same weights at the tokens' length
          if (OK(ptdp_model_create(g, &o, &m8)) && OK(ptdp_hf_load(in.c_str(), m8)) &&
              OK(ptdp_model_logits(m8, tokens.data(), 1, logits.data(), logits.size() * sizeof(float)))) {
            const hf::Mat ref = c.gpt2 ? hf::gpt2_logits(c.model, tokens) : hf::llama_logits(c.model, tokens);
            double diff = 0, scale = 0;
            for (std::size_t s = 0; s < tokens.size(); ++s)
              for (std::size_t v = 0; v < V; ++v) {
                diff = std::max(diff, std::abs(logits[s * V + v] - ref[s][v]));
                scale = std::max(scale, std::abs(ref[s][v]));
              }
            check(diff < 2e-5 * scale, what + ": logits differ from the reference by " + std::to_string(diff));
          }
          ptdp_model_destroy(m8);
        }
        if (t == 2 && p == 2) {
          // Through a ptdp checkpoint saved at (2, 2): loaded on one rank's (1, 1) model and exported.
          const std::string ckpt = work + "/" + c.name + "-ckpt";
          ptdp_checkpoint_state st;
          ptdp_checkpoint_state_init(&st);
          OK(ptdp_checkpoint_save(ckpt.c_str(), m, nullptr, nullptr, &st));
          ptdp_groups one = nullptr;
          ptdp_model serial = nullptr;
          ptdp_gpt_options so1;
          ptdp_gpt_options_init(&so1);
          if (OK(ptdp_groups_create(rt, nullptr, &one)) &&
              OK(ptdp_checkpoint_read_options(ckpt.c_str(), &so1, nullptr)) &&
              OK(ptdp_model_create(one, &so1, &serial)) &&
              OK(ptdp_checkpoint_load(ckpt.c_str(), serial, nullptr, nullptr))) {
            const std::string out = work + "/" + c.name + "-via-ckpt";
            ptdp_hf_save_options so2;
            ptdp_hf_save_options_init(&so2);
            so2.dtype = c.name == "qwen2" ? PTDP_DTYPE_BF16 : PTDP_DTYPE_F32;
            OK(ptdp_hf_save(out.c_str(), serial, &so2));
            OK(ptdp_barrier(world, PTDP_GROUP_WORLD, nullptr));
            if (world_rank == 0) same_tensors(in, out, what + " through a ptdp checkpoint");
          }
          ptdp_model_destroy(serial);
          ptdp_groups_destroy(one);
        }
      }
      ptdp_model_destroy(m);
      ptdp_groups_destroy(g);
    }
  }
  OK(ptdp_barrier(world, PTDP_GROUP_WORLD, nullptr));
  if (world_rank == 0) {
    fs::remove_all(work);
    std::printf("%d passed, %d failed\n", passed, failed);
  }
  ptdp_groups_destroy(world);
  ptdp_runtime_destroy(rt);
  return failed > 0 ? 1 : 0;
}
