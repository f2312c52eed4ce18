// Mixed precision through the C API: 16-bit model weights with fp32 master weights. Updates
// far below the 16-bit resolution accumulate in the masters and reach the model weights once
// they add up, which 16-bit weights updated in place would never do.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

namespace {

struct World {
  ptdp_runtime rt = nullptr;
  ptdp_groups g = nullptr;
  World() {
    ptdp_runtime_options ro;
    ptdp_runtime_options_init(&ro);
    ro.use_mpi = 0;
    REQUIRE(ptdp_runtime_create(&ro, &rt) == PTDP_SUCCESS);
    REQUIRE(ptdp_groups_create(rt, nullptr, &g) == PTDP_SUCCESS);
  }
  ~World() {
    ptdp_groups_destroy(g);
    ptdp_runtime_destroy(rt);
  }
};

ptdp_tensor make(ptdp_dtype dtype, const std::vector<uint16_t>& bits16, const std::vector<float>& f32) {
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  o.dtype = dtype;
  ptdp_tensor t = nullptr;
  const int64_t n = static_cast<int64_t>(dtype == PTDP_DTYPE_F32 ? f32.size() : bits16.size());
  const void* data = dtype == PTDP_DTYPE_F32 ? static_cast<const void*>(f32.data()) : bits16.data();
  REQUIRE(ptdp_tensor_create(&o, 1, &n, data, static_cast<size_t>(n) * (dtype == PTDP_DTYPE_F32 ? 4 : 2), &t) ==
          PTDP_SUCCESS);
  return t;
}

ptdp_optimizer_options sgd() {
  ptdp_optimizer_options o;
  ptdp_optimizer_options_init(&o);
  o.optimizer = PTDP_OPTIMIZER_SGD;
  o.lr = 1.0;
  o.sgd_momentum = 0.0f;
  o.weight_decay = 0.0f;
  o.clip_grad = 0.0f;
  return o;
}

}  // namespace

TEST_CASE("16-bit model weights follow fp32 master weights", "[capi][optimizer]") {
  // 1.0 in bf16 is 0x3f80 and in f16 0x3c00; steps of 1e-3 are below half the spacing of
  // either format at 1.0 (2^-8 and 2^-11 halves), so in-place 16-bit updates would stay at 1.
  for (ptdp_dtype dtype : {PTDP_DTYPE_BF16, PTDP_DTYPE_F16}) {
    INFO("dtype " << dtype);
    World w;
    const uint16_t one = dtype == PTDP_DTYPE_BF16 ? 0x3f80 : 0x3c00;
    ptdp_tensor p = make(dtype, {one, one, one}, {});
    ptdp_tensor g = make(PTDP_DTYPE_F32, {}, {0, 0, 0});
    const ptdp_optimizer_options o = sgd();
    ptdp_optimizer opt = nullptr;
    REQUIRE(ptdp_optimizer_create_for_tensors(w.g, &o, &p, &g, nullptr, 1, &opt) == PTDP_SUCCESS);
    ptdp_dtype kept = PTDP_DTYPE_F32;
    REQUIRE(ptdp_tensor_dtype(p, &kept) == PTDP_SUCCESS);
    CHECK(kept == dtype);  // the handle still holds 16-bit model weights
    const float step[3] = {1e-3f, -1e-3f, 0.0f};
    for (int it = 0; it < 10; ++it) {
      REQUIRE(ptdp_tensor_copy_from_host(g, step, sizeof step) == PTDP_SUCCESS);
      ptdp_iteration_result r;
      REQUIRE(ptdp_optimizer_step(opt, it, &r) == PTDP_SUCCESS);
      CHECK(r.skipped == 0);
    }
    // Round 0.99 and 1.01 (the fp32 masters) to the 16-bit format, through the library's cast.
    ptdp_tensor masters = make(PTDP_DTYPE_F32, {}, {1.0f - 10e-3f, 1.0f + 10e-3f, 1.0f});
    ptdp_tensor rounded = nullptr;
    REQUIRE(ptdp_tensor_cast(masters, dtype, &rounded) == PTDP_SUCCESS);
    uint16_t want[3], got[3];
    REQUIRE(ptdp_tensor_copy_to_host(rounded, want, sizeof want) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_copy_to_host(p, got, sizeof got) == PTDP_SUCCESS);
    CHECK(got[0] == want[0]);
    CHECK(got[1] == want[1]);
    CHECK(got[2] == one);
    CHECK(got[0] != one);  // the accumulated updates reached the model weights
    CHECK(got[1] != one);
    size_t bytes = 0;
    REQUIRE(ptdp_optimizer_state_bytes(opt, &bytes) == PTDP_SUCCESS);
    CHECK(bytes >= 3 * sizeof(float));  // the fp32 masters
    ptdp_tensor_destroy(rounded);
    ptdp_tensor_destroy(masters);
    REQUIRE(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
    ptdp_tensor_destroy(p);
    ptdp_tensor_destroy(g);
  }
}

TEST_CASE("16-bit parameters need one dtype and fp32 gradients", "[capi][optimizer][errors]") {
  World w;
  ptdp_tensor p[2] = {make(PTDP_DTYPE_BF16, {0x3f80}, {}), make(PTDP_DTYPE_F16, {0x3c00}, {})};
  ptdp_tensor g[2] = {make(PTDP_DTYPE_F32, {}, {0}), make(PTDP_DTYPE_F32, {}, {0})};
  const ptdp_optimizer_options o = sgd();
  ptdp_optimizer opt = nullptr;
  CHECK(ptdp_optimizer_create_for_tensors(w.g, &o, p, g, nullptr, 2, &opt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("params[1]") != std::string::npos);
  ptdp_tensor g16 = make(PTDP_DTYPE_BF16, {0}, {});
  CHECK(ptdp_optimizer_create_for_tensors(w.g, &o, p, &g16, nullptr, 1, &opt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("grads[0]") != std::string::npos);
  CHECK(opt == nullptr);
  for (ptdp_tensor t : {p[0], p[1], g[0], g[1], g16}) ptdp_tensor_destroy(t);
}

TEST_CASE("optimizer options: Muon's fields start at MuonConfig's defaults and reach the optimizer",
          "[capi][optimizer]") {
  ptdp_optimizer_options o;
  std::memset(static_cast<void*>(&o), 0xab, sizeof o);  // every field must be written
  REQUIRE(ptdp_optimizer_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.optimizer == PTDP_OPTIMIZER_ADAM);
  CHECK(o.muon_momentum == 0.95f);
  CHECK(o.muon_nesterov == 0);
  CHECK(o.muon_num_ns_steps == 5);
  CHECK(o.muon_coefficient_type == PTDP_NS_COEFFICIENTS_QUINTIC);
  CHECK(o.muon_fp32_matmul_prec == PTDP_NS_PRECISION_HIGHEST);
  CHECK(o.muon_scale_mode == PTDP_MUON_SCALE_SPECTRAL);
  CHECK(o.muon_extra_scale_factor == 1.0f);
  CHECK(o.muon_split_qkv == 1);
  CHECK(o.muon_tp_mode == PTDP_MUON_TP_DISTRIBUTED);
  CHECK(o.qk_clip == 0);
  CHECK(o.qk_clip_threshold == 100.0f);
  CHECK(o.qk_clip_alpha == 0.5f);
  // The enums' numbers are the ABI's.
  CHECK(PTDP_OPTIMIZER_MUON == 2);
  CHECK(PTDP_MUON_SCALE_SHAPE_SCALING == 2);
  CHECK(PTDP_MUON_TP_BLOCKWISE == 2);
  CHECK(PTDP_NS_COEFFICIENTS_AOL == 3);
  CHECK(PTDP_NS_PRECISION_MEDIUM == 2);

  // ptdp-train's Muon flags, through the configuration's options, build an optimizer, and the
  // options read back from the configuration are the ones given.
  const char* argv[] = {"ptdp-train", "--optimizer", "muon", "--muon-momentum", "0.8", "--muon-nesterov",
                        "--muon-num-ns-steps", "6", "--muon-coefficient-type", "simple", "--muon-fp32-matmul-prec",
                        "high", "--muon-scale-mode", "shape_scaling", "--muon-extra-scale-factor", "0.5",
                        "--muon-no-split-qkv", "--muon-tp-mode", "blockwise", "--qk-clip", "--qk-clip-threshold",
                        "20", "--qk-clip-alpha", "0.1", "--num-layers", "1", "--hidden-size", "16",
                        "--num-attention-heads", "2", "--seq-length", "8", "--vocab-size", "32"};
  ptdp_train_config config = nullptr;
  REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &config) == PTDP_SUCCESS);
  ptdp_optimizer_options m;
  REQUIRE(ptdp_train_config_optimizer_options(config, &m) == PTDP_SUCCESS);
  CHECK(m.optimizer == PTDP_OPTIMIZER_MUON);
  CHECK(m.muon_momentum == 0.8f);
  CHECK(m.muon_nesterov == 1);
  CHECK(m.muon_num_ns_steps == 6);
  CHECK(m.muon_coefficient_type == PTDP_NS_COEFFICIENTS_SIMPLE);
  CHECK(m.muon_fp32_matmul_prec == PTDP_NS_PRECISION_HIGH);
  CHECK(m.muon_scale_mode == PTDP_MUON_SCALE_SHAPE_SCALING);
  CHECK(m.muon_extra_scale_factor == 0.5f);
  CHECK(m.muon_split_qkv == 0);
  CHECK(m.muon_tp_mode == PTDP_MUON_TP_BLOCKWISE);
  CHECK(m.qk_clip == 1);
  CHECK(m.qk_clip_threshold == 20.0f);
  CHECK(m.qk_clip_alpha == 0.1f);
  World w;
  ptdp_gpt_options g;
  REQUIRE(ptdp_train_config_gpt_options(config, &g) == PTDP_SUCCESS);
  ptdp_model model = nullptr;
  REQUIRE(ptdp_model_create(w.g, &g, &model) == PTDP_SUCCESS);
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(model, &m, &opt) == PTDP_SUCCESS);
  REQUIRE(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
  // One field out of range is refused by name, and nothing is created.
  m.muon_num_ns_steps = 0;
  opt = nullptr;
  CHECK(ptdp_optimizer_create(model, &m, &opt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("options->muon_num_ns_steps = 0 must be in [1, 100]") !=
        std::string::npos);
  CHECK(opt == nullptr);
  ptdp_model_destroy(model);
  ptdp_train_config_destroy(config);
}
