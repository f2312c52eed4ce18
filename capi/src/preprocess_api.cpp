// Preprocessing JSON lines into indexed data sets, and merging data sets, through the C API.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "capi/src/api_guard.h"
#include "core/args/preprocess_args.h"
#include "core/data/preprocess.h"

namespace {

using ptdp::capi::guard;
using ptdp::capi::require_non_null;

// argv[1..] as strings, every entry checked; the program name from argv[0] (or `fallback`).
std::vector<std::string> read_argv(int32_t argc, const char* const* argv, std::string& program,
                                   const char* fallback) {
  PTDP_CHECK_ARG(argc >= 1, "argc = " + std::to_string(argc) + " is not >= 1 (argv[0] is the program name)");
  require_non_null(argv, "argv");
  std::vector<std::string> args;
  for (int32_t i = 0; i < argc; ++i) {
    const std::string name = ptdp::str_cat("argv[", i, "]");
    require_non_null(argv[i], name.c_str());
    if (i > 0) args.emplace_back(argv[i]);
  }
  program = std::filesystem::path(argv[0]).filename().string();
  if (program.empty()) program = fallback;
  return args;
}

// `count` strings of a C array named `name`, each non-NULL and non-empty.
std::vector<std::string> read_strings(const char* const* items, int32_t count, const char* name) {
  require_non_null(items, name);
  std::vector<std::string> out;
  for (int32_t i = 0; i < count; ++i) {
    const std::string item = ptdp::str_cat(name, "[", i, "]");
    PTDP_CHECK_ARG(items[i] != nullptr, item + " is NULL");
    PTDP_CHECK_ARG(items[i][0] != '\0', item + " is empty");
    out.emplace_back(items[i]);
  }
  return out;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_preprocess_options_init(ptdp_preprocess_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->tokenizer_type = "ByteLevel";
    options->workers = 1;
  });
}

PTDP_API ptdp_status ptdp_preprocess(const ptdp_preprocess_options* options, ptdp_preprocess_result* result) {
  return guard(__func__, [&] {
    require_non_null(options, "options");
    ptdp_preprocess_options defaults;
    ptdp_preprocess_options_init(&defaults);
    const ptdp_preprocess_options o =
        ptdp::capi::read_options(options, defaults, "options", "ptdp_preprocess_options_init");
    if (result != nullptr) ptdp::capi::require_out_struct(result, "result");
    PTDP_CHECK_ARG(o.num_inputs >= 1, "options->num_inputs = " + std::to_string(o.num_inputs) + " is not >= 1");
    PTDP_CHECK_ARG(o.num_json_keys >= 0,
                   "options->num_json_keys = " + std::to_string(o.num_json_keys) + " is negative");
    PTDP_CHECK_ARG(o.output_prefix != nullptr, "options->output_prefix is NULL");
    PTDP_CHECK_ARG(o.output_prefix[0] != '\0', "options->output_prefix is empty");
    PTDP_CHECK_ARG(o.tokenizer_type != nullptr, "options->tokenizer_type is NULL");
    PTDP_CHECK_ARG(o.workers >= 1, "options->workers = " + std::to_string(o.workers) + " is not >= 1");
    PTDP_CHECK_ARG(o.log_interval >= 0,
                   "options->log_interval = " + std::to_string(o.log_interval) + " is negative");
    PTDP_CHECK_ARG(o.vocab_size >= 0, "options->vocab_size = " + std::to_string(o.vocab_size) + " is negative");
    ptdp::PreprocessOptions p;
    p.inputs = read_strings(o.inputs, o.num_inputs, "options->inputs");
    if (o.num_json_keys > 0) p.json_keys = read_strings(o.json_keys, o.num_json_keys, "options->json_keys");
    p.output_prefix = o.output_prefix;
    const std::optional<ptdp::TokenizerType> type = ptdp::tokenizer_type_from_name(o.tokenizer_type);
    PTDP_CHECK_ARG(type.has_value(), ptdp::str_cat("options->tokenizer_type = '", o.tokenizer_type,
                                                   "' is not one of ByteLevel, NullTokenizer, GPT2BPETokenizer, "
                                                   "HuggingFaceTokenizer, SentencePieceTokenizer"));
    p.tokenizer.type = *type;
    if (o.vocab_file) p.tokenizer.vocab_file = o.vocab_file;
    if (o.merge_file) p.tokenizer.merge_file = o.merge_file;
    if (o.tokenizer_model) p.tokenizer.tokenizer_model = o.tokenizer_model;
    p.tokenizer.vocab_size = o.vocab_size;
    p.append_eod = o.append_eod != 0;
    p.workers = o.workers;
    p.log_interval = o.log_interval;
    p.skip_bad_lines = o.skip_bad_lines != 0;
    const ptdp::PreprocessStats s = ptdp::preprocess_json_lines(p, o.log_interval > 0 ? stderr : nullptr);
    if (result != nullptr) {
      ptdp_preprocess_result r{};
      r.struct_size = sizeof r;
      r.documents = s.documents;
      r.bad_lines = s.bad_lines;
      r.bytes = s.bytes;
      r.tokens = s.tokens;
      r.seconds = s.seconds;
      r.dtype_code = static_cast<int32_t>(s.dtype);
      const std::size_t n = std::min(result->struct_size, sizeof r);
      std::memcpy(static_cast<void*>(result), &r, n);
      result->struct_size = n;
    }
  });
}

PTDP_API ptdp_status ptdp_preprocess_main(int32_t argc, const char* const* argv, int32_t* exit_code) {
  return guard(__func__, [&] {
    require_non_null(exit_code, "exit_code");
    std::string program;
    const std::vector<std::string> args = read_argv(argc, argv, program, "ptdp-preprocess-data");
    *exit_code = ptdp::preprocess_main(program, args, stdout, stderr);
  });
}

PTDP_API ptdp_status ptdp_merge_datasets(const char* const* prefixes, int32_t count, const char* output_prefix) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(count >= 1, "count = " + std::to_string(count) + " is not >= 1");
    const std::vector<std::string> p = read_strings(prefixes, count, "prefixes");
    ptdp::capi::require_path(output_prefix, "output_prefix");
    PTDP_CHECK_ARG(output_prefix[0] != '\0', "output_prefix is empty");
    ptdp::merge_datasets(p, output_prefix);
  });
}

PTDP_API ptdp_status ptdp_merge_datasets_main(int32_t argc, const char* const* argv, int32_t* exit_code) {
  return guard(__func__, [&] {
    require_non_null(exit_code, "exit_code");
    std::string program;
    const std::vector<std::string> args = read_argv(argc, argv, program, "ptdp-merge-datasets");
    *exit_code = ptdp::merge_datasets_main(program, args, stdout, stderr);
  });
}

}  // extern "C"
