// PTDP_FAULT's specs (core/train/fault_injection.h) and the supervisor's command lines
// (core/train/supervisor.h): what each spec means, which rank and attempt it applies to, every
// bad spec refused with its text named; the relaunched command drops the supervisor's flags and
// resumes from --save.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/error.h"
#include "core/train/fault_injection.h"
#include "core/train/supervisor.h"

namespace {

std::string refusal(const std::string& value) {
  try {
    ptdp::parse_fault_specs(value);
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("PTDP_FAULT specs parse into kinds, ranks, iterations, places and attempts", "[train][faults]") {
  const auto specs = ptdp::parse_fault_specs(
      "kill:rank=3:iter=5, hang:rank=1:iter=2:at=after-backward;"
      "nan:rank=2:iter=3:param=decoder.layers.0.mlp.linear_fc1.weight,slow:ms=20:at=save,io-error:rank=0:attempt=1");
  REQUIRE(specs.size() == 5);
  CHECK(specs[0].kind == ptdp::FaultKind::Kill);
  CHECK(specs[0].rank == 3);
  CHECK(specs[0].iteration == 5);
  CHECK(specs[0].at == ptdp::FaultPoint::BeforeForward);
  CHECK(specs[0].attempt == -1);
  CHECK(specs[0].text == "kill:rank=3:iter=5");
  CHECK(specs[1].kind == ptdp::FaultKind::Hang);
  CHECK(specs[1].at == ptdp::FaultPoint::AfterBackward);
  CHECK(specs[2].kind == ptdp::FaultKind::Nan);
  CHECK(specs[2].param == "decoder.layers.0.mlp.linear_fc1.weight");
  CHECK(specs[3].kind == ptdp::FaultKind::Slow);
  CHECK(specs[3].ms == 20.0);
  CHECK(specs[3].rank == -1);
  CHECK(specs[3].at == ptdp::FaultPoint::Save);
  CHECK(specs[4].kind == ptdp::FaultKind::IoError);
  CHECK(specs[4].attempt == 1);

  // Only this rank's and this attempt's specs stay.
  ptdp::FaultInjector rank2(specs, 2, 0);
  CHECK(rank2.specs().size() == 2);  // nan (rank 2) and slow (every rank)
  CHECK(rank2.nan_params(3) == std::vector<std::string>{"decoder.layers.0.mlp.linear_fc1.weight"});
  CHECK(rank2.nan_params(4).empty());
  CHECK_FALSE(rank2.nan_loss(3));
  ptdp::FaultInjector rank0_first(specs, 0, 0);
  CHECK(rank0_first.take_io_error(7) == nullptr);  // attempt 1 only
  ptdp::FaultInjector rank0_second(specs, 0, 1);
  const ptdp::FaultSpec* io = rank0_second.take_io_error(7);
  REQUIRE(io != nullptr);
  CHECK(io->text == "io-error:rank=0:attempt=1");
  CHECK(rank0_second.take_io_error(8) == nullptr);  // once
  const ptdp::FaultInjector loss(ptdp::parse_fault_specs("nan:iter=2"), 5, 0);
  CHECK(loss.nan_loss(2));
  CHECK_FALSE(loss.nan_loss(1));
  // io-error with iter: the first save at or after it.
  ptdp::FaultInjector later(ptdp::parse_fault_specs("io-error:iter=4"), 0, 0);
  CHECK(later.take_io_error(3) == nullptr);
  CHECK(later.take_io_error(6) != nullptr);
}

TEST_CASE("bad PTDP_FAULT specs are refused naming the spec", "[train][faults]") {
  CHECK_THAT(refusal("explode:rank=1"), Catch::Contains("'explode:rank=1'") && Catch::Contains("unknown kind"));
  CHECK_THAT(refusal("kill:rank=x"), Catch::Contains("'kill:rank=x'") && Catch::Contains("rank=x is not an integer"));
  CHECK_THAT(refusal("kill:rank=-1"), Catch::Contains("is not >= 0"));
  CHECK_THAT(refusal("kill:iter=0"), Catch::Contains("iter=0 is not >= 1"));
  CHECK_THAT(refusal("kill:when=3"), Catch::Contains("unknown key 'when'"));
  CHECK_THAT(refusal("kill:rank"), Catch::Contains("'rank' is not KEY=VALUE"));
  CHECK_THAT(refusal("kill:at=middle"), Catch::Contains("at=middle is not one of"));
  CHECK_THAT(refusal("slow:rank=1"), Catch::Contains("slow needs ms="));
  CHECK_THAT(refusal("kill:param=x"), Catch::Contains("param= applies to nan only"));
  CHECK_THAT(refusal("nan:at=save"), Catch::Contains("at= applies to kill, hang and slow"));
  CHECK_THAT(refusal("kill:ms=3"), Catch::Contains("ms= applies to slow only"));
  CHECK_THAT(refusal(" , ;"), Catch::Contains("no spec"));
  CHECK_THAT(refusal("kill:rank=1,bad"), Catch::Contains("'bad'"));
}

TEST_CASE("the supervisor relaunches the command without its flags and resumes from --save", "[train][faults]") {
  ptdp::SupervisorOptions o;
  o.command = {"/bin/ptdp-train", "--max-restarts", "3", "--save", "ck", "--launcher=mpiexec -n 2", "--load",
               "init", "--train-iters", "8"};
  o.launcher = "mpiexec  -n 4 --oversubscribe";
  o.max_restarts = 3;
  const std::vector<std::string> as_given = {"mpiexec", "-n", "4", "--oversubscribe", "/bin/ptdp-train", "--save",
                                             "ck", "--load", "init", "--finetune", "--train-iters", "8"};
  o.command.insert(o.command.begin() + 8, "--finetune");
  CHECK(ptdp::supervised_argv(o, 0, true) == as_given);
  // Without a checkpoint in --save yet, a relaunch starts over as given.
  CHECK(ptdp::supervised_argv(o, 1, false) == as_given);
  // With one, it goes on from it: --load ck, and no --finetune (that would restart at 0).
  CHECK(ptdp::supervised_argv(o, 2, true) == std::vector<std::string>{"mpiexec", "-n", "4", "--oversubscribe",
                                                                      "/bin/ptdp-train", "--save", "ck",
                                                                      "--train-iters", "8", "--load", "ck"});
  o.command = {"prog", "--train-iters", "8"};
  CHECK_THROWS_WITH(ptdp::check_supervisor_options(o), Catch::Contains("has no --save DIR"));
  o.max_restarts = 0;
  CHECK_NOTHROW(ptdp::check_supervisor_options(o));
  o.backoff_s = -1;
  CHECK_THROWS_WITH(ptdp::check_supervisor_options(o), Catch::Contains("backoff_seconds"));
}
