// The command lines of ptdp-preprocess-data (Megatron-LM's tools/preprocess_data.py) and
// ptdp-merge-datasets (tools/merge_datasets.py), and the mains every front end shares. Parsing
// throws Error(InvalidArgument) naming the flag; the mains print and return exit statuses.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/data/preprocess.h"

namespace ptdp {

/// ptdp-preprocess-data's flags, under Megatron's names: --input FILE [FILE ...] (one or more
/// JSON-lines files, plain or gzip), --json-keys KEY [KEY ...] (default text), --output-prefix,
/// --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model, --vocab-size, --append-eod,
/// --workers (default 1), --log-interval (default 1000), and ptdp's --skip-bad-lines.
/// Megatron's --keep-newlines, --lang, --keep-sequential-samples and --partitions 1 are accepted
/// and change nothing here; --split-sentences and --partitions > 1 are refused.
struct PreprocessArgs {
  bool help = false;
  PreprocessOptions options;
};

/// Parses a command line (without the program name). `--help` or `-h` anywhere returns help =
/// true and checks nothing else.
PreprocessArgs parse_preprocess_args(const std::vector<std::string>& args);
std::string preprocess_args_help(const std::string& program);

/// ptdp-merge-datasets' flags: --input DIR (every PREFIX.bin/PREFIX.idx pair in DIR, sorted by
/// name, as Megatron's script) or ptdp's --datasets PREFIX [PREFIX ...] (in that order), and
/// --output-prefix.
struct MergeArgs {
  bool help = false;
  std::string input_directory;
  std::vector<std::string> datasets;
  std::string output_prefix;
};
MergeArgs parse_merge_args(const std::vector<std::string>& args);
std::string merge_args_help(const std::string& program);

/// The whole of ptdp-preprocess-data: parse, preprocess with progress lines on `err` (Megatron
/// prints them to stderr) and a summary on `out`. Returns 0 done, 1 failed (the message on
/// `err` names the file and line or the flag), 2 bad flags.
int preprocess_main(const std::string& program, const std::vector<std::string>& args, std::FILE* out,
                    std::FILE* err);
/// The whole of ptdp-merge-datasets, with the same statuses.
int merge_datasets_main(const std::string& program, const std::vector<std::string>& args, std::FILE* out,
                        std::FILE* err);

}  // namespace ptdp
