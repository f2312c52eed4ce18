// ptdp-plan's flag parser (core/plan/plan_args.h). Input: a command line, one argument per line.
#include "core/plan/plan_args.h"
#include "fuzz/fuzz_support.h"
#include "io/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> argv = fuzz::split_lines(data, size);
  fuzz::refused_cleanly_or_ok([&] {
    const plan::PlanArgs args = plan::parse_plan_args(argv);
    if (!args.help) (void)json_text(plan::cluster_to_json(args.cluster));
  });
  return 0;
}
