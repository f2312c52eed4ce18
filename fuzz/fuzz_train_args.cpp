// ptdp-train's flag parser (core/args/train_args.h) and what the drivers derive from its result.
// Input: a command line, one argument per line.
#include "core/args/train_args.h"
#include "fuzz/fuzz_support.h"
#include "io/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::vector<std::string> argv = fuzz::split_lines(data, size);
  fuzz::refused_cleanly_or_ok([&] {
    const TrainArgs args = parse_train_args(argv);
    if (args.help) return;
    (void)json_text(train_args_to_json(args));
    fuzz::refused_cleanly_or_ok([&] { (void)to_gpt_config(args); });
    fuzz::refused_cleanly_or_ok([&] { (void)to_parallel_config(args, 8); });
    fuzz::refused_cleanly_or_ok([&] { (void)to_optimizer_config(args); });
    fuzz::refused_cleanly_or_ok([&] { (void)to_loss_scaler_config(args); });
    fuzz::refused_cleanly_or_ok([&] { (void)train_num_samples(args); });
    fuzz::refused_cleanly_or_ok([&] { (void)gpt_data_spec(args); });
    fuzz::refused_cleanly_or_ok([&] { (void)schedule_kind(args); });
    fuzz::refused_cleanly_or_ok([&] { (void)virtual_pipeline_size(args); });
  });
  return 0;
}
