// ptdp-train's Muon and QK-clip flags (Megatron's names, ptdp's defaults): each value reaches
// OptimizerConfig::muon, each range is refused naming the flag and the value, and the flags are
// read only with --optimizer muon (refused otherwise, as the MoE flags without --num-experts).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/args/train_args.h"

namespace {

using ptdp::MuonScaleMode;
using ptdp::MuonTpMode;
using ptdp::NsCoefficients;
using ptdp::NsPrecision;
using ptdp::TrainArgs;

std::string parse_error(const std::vector<std::string>& args) {
  try {
    ptdp::parse_train_args(args);
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

std::vector<std::string> muon(std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--optimizer", "muon"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

ptdp::MuonConfig muon_config(std::vector<std::string> more = {}) {
  return ptdp::to_optimizer_config(ptdp::parse_train_args(muon(std::move(more)))).muon;
}

}  // namespace

TEST_CASE("muon args: --optimizer muon with the defaults of MuonConfig", "[args]") {
  const TrainArgs a = ptdp::parse_train_args(muon());
  CHECK(a.optimizer == ptdp::OptimizerKind::Muon);
  const ptdp::OptimizerConfig o = ptdp::to_optimizer_config(a);
  CHECK(o.kind == ptdp::OptimizerKind::Muon);
  CHECK_NOTHROW(o.validate());
  const ptdp::MuonConfig d;  // the struct's own defaults
  const ptdp::MuonConfig& m = o.muon;
  CHECK(m.momentum == d.momentum);
  CHECK(m.momentum == 0.95f);
  CHECK(m.nesterov == false);
  CHECK(m.ns_steps == 5);
  CHECK(m.coefficients == NsCoefficients::Quintic);
  CHECK(m.precision == NsPrecision::Highest);
  CHECK(m.scale_mode == MuonScaleMode::Spectral);
  CHECK(m.extra_scale_factor == 1.0f);
  CHECK(m.split_qkv);
  CHECK(m.tp_mode == MuonTpMode::Distributed);
  CHECK_FALSE(m.qk_clip);
  CHECK(m.qk_clip_threshold == 100.0f);
  CHECK(m.qk_clip_alpha == 0.5f);
  CHECK(m.ns_eps == d.ns_eps);
  CHECK(a.muon_scalar_optimizer == "adam");
  // The JSON of the flags spells the choices as the command line does.
  const nlohmann::json j = ptdp::train_args_to_json(a);
  CHECK(j["optimizer"] == "muon");
  CHECK(j["muon-coefficient-type"] == "quintic");
  CHECK(j["muon-fp32-matmul-prec"] == "highest");
  CHECK(j["muon-scale-mode"] == "spectral");
  CHECK(j["muon-tp-mode"] == "distributed");
  CHECK(j["muon-scalar-optimizer"] == "adam");
  CHECK(j["muon-split-qkv"] == true);
  CHECK(j["muon-no-split-qkv"] == false);
}

TEST_CASE("muon args: every flag reaches OptimizerConfig::muon", "[args]") {
  const ptdp::MuonConfig m =
      muon_config({"--muon-momentum", "0.9", "--muon-nesterov", "--muon-num-ns-steps", "7", "--muon-coefficient-type",
                   "polar_express", "--muon-fp32-matmul-prec", "medium", "--muon-scale-mode", "shape_scaling",
                   "--muon-extra-scale-factor", "0.2", "--muon-no-split-qkv", "--muon-tp-mode", "blockwise",
                   "--muon-scalar-optimizer", "adam", "--qk-clip", "--qk-clip-threshold", "50", "--qk-clip-alpha",
                   "0.25"});
  CHECK(m.momentum == 0.9f);
  CHECK(m.nesterov);
  CHECK(m.ns_steps == 7);
  CHECK(m.coefficients == NsCoefficients::PolarExpress);
  CHECK(m.precision == NsPrecision::Medium);
  CHECK(m.scale_mode == MuonScaleMode::ShapeScaling);
  CHECK(m.extra_scale_factor == 0.2f);
  CHECK_FALSE(m.split_qkv);
  CHECK(m.tp_mode == MuonTpMode::Blockwise);
  CHECK(m.qk_clip);
  CHECK(m.qk_clip_threshold == 50.0f);
  CHECK(m.qk_clip_alpha == 0.25f);

  // Each choice of each enum.
  CHECK(muon_config({"--muon-coefficient-type", "simple"}).coefficients == NsCoefficients::Simple);
  CHECK(muon_config({"--muon-coefficient-type", "aol"}).coefficients == NsCoefficients::Aol);
  CHECK(muon_config({"--muon-coefficient-type", "quintic"}).coefficients == NsCoefficients::Quintic);
  CHECK(muon_config({"--muon-fp32-matmul-prec", "high"}).precision == NsPrecision::High);
  CHECK(muon_config({"--muon-fp32-matmul-prec", "highest"}).precision == NsPrecision::Highest);
  CHECK(muon_config({"--muon-scale-mode", "unit_rms_norm"}).scale_mode == MuonScaleMode::UnitRmsNorm);
  CHECK(muon_config({"--muon-scale-mode", "spectral"}).scale_mode == MuonScaleMode::Spectral);
  CHECK(muon_config({"--muon-tp-mode", "duplicated"}).tp_mode == MuonTpMode::Duplicated);
  CHECK(muon_config({"--muon-tp-mode", "distributed"}).tp_mode == MuonTpMode::Distributed);
  // Megatron's two spellings of Nesterov, and the explicit default of the split.
  CHECK(muon_config({"--muon-use-nesterov"}).nesterov);
  CHECK(muon_config({"--muon-split-qkv"}).split_qkv);
  // The edges of the ranges are accepted.
  CHECK(muon_config({"--muon-momentum", "0"}).momentum == 0.0f);
  CHECK(muon_config({"--muon-num-ns-steps", "1"}).ns_steps == 1);
  CHECK(muon_config({"--muon-num-ns-steps", "100"}).ns_steps == 100);
  CHECK(muon_config({"--qk-clip", "--qk-clip-alpha", "0"}).qk_clip_alpha == 0.0f);
  CHECK(muon_config({"--qk-clip", "--qk-clip-alpha", "1"}).qk_clip_alpha == 1.0f);
}

TEST_CASE("muon args: out-of-range and unknown values are refused naming the flag", "[args]") {
  CHECK(parse_error(muon({"--muon-momentum", "1"})) == "--muon-momentum: '1' must be in [0, 1) (as a float)");
  CHECK(parse_error(muon({"--muon-momentum", "-0.1"})) == "--muon-momentum: '-0.1' must be in [0, 1) (as a float)");
  // 0.99999999999 is 1 as a float.
  CHECK(parse_error(muon({"--muon-momentum", "0.99999999999"})) ==
        "--muon-momentum: '0.99999999999' must be in [0, 1) (as a float)");
  CHECK(parse_error(muon({"--muon-num-ns-steps", "0"})) == "--muon-num-ns-steps: '0' must be in [1, 100]");
  CHECK(parse_error(muon({"--muon-num-ns-steps", "101"})) == "--muon-num-ns-steps: '101' must be in [1, 100]");
  CHECK(parse_error(muon({"--muon-num-ns-steps", "2.5"})) == "--muon-num-ns-steps: '2.5' is not an integer");
  CHECK(parse_error(muon({"--muon-extra-scale-factor", "0"})) ==
        "--muon-extra-scale-factor: '0' must be > 0 (as a float)");
  CHECK(parse_error(muon({"--muon-extra-scale-factor", "nan"})) ==
        "--muon-extra-scale-factor: 'nan' is not a finite number");
  CHECK(parse_error(muon({"--qk-clip", "--qk-clip-threshold", "0"})) ==
        "--qk-clip-threshold: '0' must be > 0 (as a float)");
  CHECK(parse_error(muon({"--qk-clip", "--qk-clip-alpha", "1.5"})) ==
        "--qk-clip-alpha: '1.5' must be in [0, 1] (as a float)");
  CHECK(parse_error(muon({"--qk-clip", "--qk-clip-alpha", "-0.5"})) ==
        "--qk-clip-alpha: '-0.5' must be in [0, 1] (as a float)");
  CHECK(parse_error(muon({"--muon-coefficient-type", "cubic"})) ==
        "--muon-coefficient-type: 'cubic' is not one of quintic, simple, polar_express, aol");
  CHECK(parse_error(muon({"--muon-fp32-matmul-prec", "low"})) ==
        "--muon-fp32-matmul-prec: 'low' is not one of highest, high, medium");
  CHECK(parse_error(muon({"--muon-scale-mode", "rms"})) ==
        "--muon-scale-mode: 'rms' is not one of spectral, unit_rms_norm, shape_scaling");
  CHECK(parse_error(muon({"--muon-tp-mode", "sharded"})) ==
        "--muon-tp-mode: 'sharded' is not one of distributed, duplicated, blockwise");
  CHECK(parse_error({"--optimizer", "lamb"}) == "--optimizer: 'lamb' is not one of adam, sgd, muon");
  // Megatron's other scalar optimizer is named as not built.
  CHECK(parse_error(muon({"--muon-scalar-optimizer", "lion"})) ==
        "--muon-scalar-optimizer: 'lion' is not built into ptdp (Megatron's other choice); the scalar optimizer is "
        "adam");
  CHECK(parse_error(muon({"--muon-scalar-optimizer", "sgd"})) == "--muon-scalar-optimizer: 'sgd' is not one of adam");
  // The two spellings of the split contradict each other.
  CHECK(parse_error(muon({"--muon-split-qkv", "--muon-no-split-qkv"})) ==
        "--muon-split-qkv and --muon-no-split-qkv contradict each other; give one");
  CHECK(parse_error(muon({"--muon-nesterov=1"})) == "--muon-nesterov takes no value, got '1'");
}

TEST_CASE("muon args: the Muon flags are read only with --optimizer muon", "[args]") {
  CHECK(parse_error({"--muon-momentum", "0.9"}) ==
        "--muon-momentum 0.9 is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--optimizer", "sgd", "--muon-nesterov"}) ==
        "--muon-nesterov (or --muon-use-nesterov) is read only with --optimizer muon; got --optimizer sgd");
  CHECK(parse_error({"--muon-use-nesterov"}) ==
        "--muon-nesterov (or --muon-use-nesterov) is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-num-ns-steps", "3"}) ==
        "--muon-num-ns-steps 3 is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-coefficient-type", "aol"}) ==
        "--muon-coefficient-type aol is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-fp32-matmul-prec", "medium"}) ==
        "--muon-fp32-matmul-prec medium is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-scale-mode", "unit_rms_norm"}) ==
        "--muon-scale-mode unit_rms_norm is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-extra-scale-factor", "0.2"}) ==
        "--muon-extra-scale-factor 0.2 is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-no-split-qkv"}) ==
        "--muon-no-split-qkv is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--muon-tp-mode", "blockwise"}) ==
        "--muon-tp-mode blockwise is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--qk-clip"}) == "--qk-clip is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--qk-clip-threshold", "10"}) ==
        "--qk-clip-threshold 10.0 is read only with --optimizer muon; got --optimizer adam");
  CHECK(parse_error({"--qk-clip-alpha", "0.3"}) ==
        "--qk-clip-alpha 0.3 is read only with --optimizer muon; got --optimizer adam");
  // QK-clip's settings need --qk-clip.
  CHECK(parse_error(muon({"--qk-clip-threshold", "10"})) == "--qk-clip-threshold 10.0 is read only with --qk-clip");
  CHECK(parse_error(muon({"--qk-clip-alpha", "0.3"})) == "--qk-clip-alpha 0.3 is read only with --qk-clip");
  // A flag given at its default changes nothing and passes (as the MoE flags').
  CHECK_NOTHROW(ptdp::parse_train_args({"--muon-momentum", "0.95", "--muon-split-qkv", "--muon-scalar-optimizer",
                                        "adam"}));
}

TEST_CASE("muon args: OptimizerConfig::validate checks MuonConfig in its own words", "[args]") {
  ptdp::OptimizerConfig c;
  c.kind = ptdp::OptimizerKind::Muon;
  CHECK_NOTHROW(c.validate());
  const auto refused = [](ptdp::OptimizerConfig bad) {
    try {
      bad.validate();
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
      return std::string(e.what());
    }
    return std::string();
  };
  ptdp::OptimizerConfig b = c;
  b.muon.momentum = 1.0f;
  CHECK_THAT(refused(b), Catch::Contains("muon momentum must be in [0, 1)"));
  b = c;
  b.muon.ns_steps = 0;
  CHECK_THAT(refused(b), Catch::Contains("muon Newton-Schulz steps must be in [1, 100], got 0"));
  b = c;
  b.muon.ns_steps = 101;
  CHECK_THAT(refused(b), Catch::Contains("got 101"));
  b = c;
  b.muon.extra_scale_factor = 0.0f;
  CHECK_THAT(refused(b), Catch::Contains("muon extra scale factor must be > 0"));
  b = c;
  b.muon.ns_eps = 0.0f;
  CHECK_THAT(refused(b), Catch::Contains("muon Newton-Schulz eps must be > 0"));
  b = c;
  b.muon.qk_clip_threshold = -1.0f;
  CHECK_THAT(refused(b), Catch::Contains("qk-clip threshold must be > 0"));
  b = c;
  b.muon.qk_clip_alpha = 2.0f;
  CHECK_THAT(refused(b), Catch::Contains("qk-clip alpha must be in [0, 1]"));
  b = c;
  b.muon.scale_mode = static_cast<MuonScaleMode>(3);
  CHECK_THAT(refused(b),
             Catch::Contains("muon scale mode 3 is not spectral (0), unit_rms_norm (1) or shape_scaling (2)"));
  b = c;
  b.muon.tp_mode = static_cast<MuonTpMode>(-1);
  CHECK_THAT(refused(b), Catch::Contains("muon tp mode -1 is not"));
  b = c;
  b.muon.coefficients = static_cast<NsCoefficients>(4);
  CHECK_THAT(refused(b), Catch::Contains("muon coefficient type 4 is not"));
  b = c;
  b.muon.precision = static_cast<NsPrecision>(3);
  CHECK_THAT(refused(b), Catch::Contains("muon fp32 matmul precision 3 is not"));
  b = c;
  b.kind = static_cast<ptdp::OptimizerKind>(3);
  CHECK_THAT(refused(b), Catch::Contains("optimizer kind 3 is not adam, sgd or muon"));
}
