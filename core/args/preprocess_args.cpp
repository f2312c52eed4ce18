// ptdp-preprocess-data's and ptdp-merge-datasets' flags. The flags that take a list (Megatron's
// nargs='+') are taken out of the command line first, each with every word up to the next
// flag; the rest is read against a table by core/args/flag_table, as ptdp-train's flags are.
#include "core/args/preprocess_args.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "base/error.h"
#include "core/args/flag_table.h"

namespace ptdp {
namespace {

using cli::bad_value;
using cli::fail;

template <typename Args>
struct Flag : cli::FlagSpec {
  std::string default_text;
  std::function<void(Args&, const std::string&)> set;  // value flags
  std::function<void(Args&)> set_on;                   // boolean flags
};

template <typename Args>
Flag<Args> value_flag(std::string name, std::string metavar, std::string help, std::string default_text,
                      std::function<void(Args&, const std::string&)> set) {
  Flag<Args> f;
  f.name = std::move(name);
  f.metavar = std::move(metavar);
  f.help = std::move(help);
  f.default_text = std::move(default_text);
  f.set = std::move(set);
  return f;
}

template <typename Args>
Flag<Args> switch_flag(std::string name, std::string help, std::function<void(Args&)> set_on) {
  Flag<Args> f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.default_text = "off";
  f.set_on = std::move(set_on);
  return f;
}

// A flag that takes one or more words (argparse's nargs='+').
struct ListFlag {
  std::string name;
  std::string metavar;
  std::string help;
  std::string default_text;
};

bool is_flag(const std::string& a) { return (a.size() > 2 && a.compare(0, 2, "--") == 0) || a == "-h"; }

// Takes every `--name W1 W2 ...` (and `--name=W`) of the list flags out of `args`; the last
// occurrence of a flag wins, as argparse's.
std::vector<std::optional<std::vector<std::string>>> take_lists(std::vector<std::string>& args,
                                                                const std::vector<ListFlag>& lists) {
  std::vector<std::optional<std::vector<std::string>>> out(lists.size());
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::size_t which = lists.size();
    std::optional<std::string> inline_value;
    for (std::size_t k = 0; k < lists.size(); ++k) {
      const std::string flag = "--" + lists[k].name;
      if (a == flag) which = k;
      if (a.compare(0, flag.size() + 1, flag + "=") == 0) {
        which = k;
        inline_value = a.substr(flag.size() + 1);
      }
    }
    if (which == lists.size()) {
      rest.push_back(a);
      continue;
    }
    std::vector<std::string> words;
    if (inline_value) {
      words.push_back(*inline_value);
    } else {
      while (i + 1 < args.size() && !is_flag(args[i + 1])) words.push_back(args[++i]);
    }
    const std::string& name = lists[which].name;
    if (words.empty()) fail(str_cat("--", name, ": missing value (", lists[which].metavar, " ...)"));
    for (const std::string& w : words) {
      if (w.empty()) fail(str_cat("--", name, ": empty value; expected ", lists[which].metavar));
    }
    out[which] = std::move(words);
  }
  args = std::move(rest);
  return out;
}

int64_t to_count(const std::string& flag, const std::string& value, int64_t min) {
  const auto v = cli::to_integer<int64_t>(flag, value);
  if (v < min) bad_value(flag, value, str_cat("must be >= ", std::to_string(min)));
  return v;
}

// "  --name METAVAR ..." entries in the layout of ptdp-train's --help.
template <typename F>
std::string help_lines(const std::vector<ListFlag>& lists, const std::vector<F>& flags) {
  constexpr std::size_t kColumn = 30, kWidth = 100;
  std::string out;
  for (const ListFlag& l : lists) {
    cli::FlagSpec spec;
    spec.name = l.name;
    spec.metavar = str_cat(l.metavar, " [", l.metavar, " ...]");
    spec.help = l.help;
    out += cli::help_entry(spec, l.default_text, kColumn, kWidth);
  }
  for (const F& f : flags) out += cli::help_entry(f, f.default_text, kColumn, kWidth);
  return out;
}

// ---- ptdp-preprocess-data ---------------------------------------------------------------------

const std::vector<ListFlag>& preprocess_lists() {
  static const std::vector<ListFlag> lists = {
      {"input", "FILE", "JSON-lines files, one JSON object (one document) per line, plain or gzip; read in order.",
       "required"},
      {"json-keys", "KEY",
       "Keys whose text is tokenized (a string, or a list of strings: one sequence each); each key "
       "writes OUTPUT_PREFIX_KEY_document.bin/.idx.",
       "text"},
  };
  return lists;
}

using PFlag = Flag<PreprocessArgs>;

const std::vector<PFlag>& preprocess_flags() {
  static const std::vector<PFlag> flags = [] {
    std::vector<PFlag> v;
    v.push_back(value_flag<PreprocessArgs>(
        "output-prefix", "PREFIX", "Where to write: PREFIX_KEY_document.bin and .idx per --json-keys key.",
        "required", [](PreprocessArgs& a, const std::string& s) { a.options.output_prefix = s; }));
    v.push_back(value_flag<PreprocessArgs>(
        "tokenizer-type", "NAME",
        "ByteLevel, NullTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer or SentencePieceTokenizer.", "required",
        [](PreprocessArgs& a, const std::string& s) {
          const std::optional<TokenizerType> t = tokenizer_type_from_name(s);
          if (!t) {
            bad_value("tokenizer-type", s,
                      "is not one of ByteLevel, NullTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer, "
                      "SentencePieceTokenizer");
          }
          a.options.tokenizer.type = *t;
        }));
    v.push_back(value_flag<PreprocessArgs>("vocab-file", "PATH", "GPT2BPETokenizer's vocab.json.", "unset",
                                           [](PreprocessArgs& a, const std::string& s) { a.options.tokenizer.vocab_file = s; }));
    v.push_back(value_flag<PreprocessArgs>("merge-file", "PATH", "GPT2BPETokenizer's merges.txt.", "unset",
                                           [](PreprocessArgs& a, const std::string& s) { a.options.tokenizer.merge_file = s; }));
    v.push_back(value_flag<PreprocessArgs>(
        "tokenizer-model", "PATH", "HuggingFaceTokenizer's tokenizer.json, SentencePieceTokenizer's tokenizer.model.",
        "unset", [](PreprocessArgs& a, const std::string& s) { a.options.tokenizer.tokenizer_model = s; }));
    v.push_back(value_flag<PreprocessArgs>(
        "vocab-size", "N", "NullTokenizer's vocabulary: ids below N; its end-of-document id is N.", "unset",
        [](PreprocessArgs& a, const std::string& s) { a.options.tokenizer.vocab_size = to_count("vocab-size", s, 1); }));
    v.push_back(switch_flag<PreprocessArgs>("append-eod", "Append the end-of-document token to every document with tokens.",
                                            [](PreprocessArgs& a) { a.options.append_eod = true; }));
    v.push_back(value_flag<PreprocessArgs>(
        "workers", "N", "Threads that parse and tokenize (the documents are written in input order).", "1",
        [](PreprocessArgs& a, const std::string& s) { a.options.workers = static_cast<int>(to_count("workers", s, 1)); }));
    v.push_back(value_flag<PreprocessArgs>(
        "log-interval", "N", "Print 'Processed N documents (D docs/s, M MB/s).' every N documents; 0 never.", "1000",
        [](PreprocessArgs& a, const std::string& s) { a.options.log_interval = to_count("log-interval", s, 0); }));
    v.push_back(switch_flag<PreprocessArgs>(
        "skip-bad-lines",
        "[ptdp] Drop a line that is not a JSON object, lacks a key or holds no string under it, and count it, "
        "instead of stopping at it with its FILE:LINE.",
        [](PreprocessArgs& a) { a.options.skip_bad_lines = true; }));
    v.push_back(switch_flag<PreprocessArgs>(
        "split-sentences", "Megatron's sentence splitting with NLTK's punkt: not supported (refused).",
        [](PreprocessArgs&) {
          fail("--split-sentences is not supported: it needs NLTK's punkt models; preprocess whole documents, "
               "or split the sentences into a list of strings under the key beforehand");
        }));
    v.push_back(switch_flag<PreprocessArgs>("keep-newlines", "Only with --split-sentences; accepted, changes nothing.",
                                            [](PreprocessArgs&) {}));
    v.push_back(value_flag<PreprocessArgs>("lang", "NAME", "Only with --split-sentences; accepted, changes nothing.",
                                           "english", [](PreprocessArgs&, const std::string&) {}));
    v.push_back(value_flag<PreprocessArgs>(
        "partitions", "N", "Megatron's input partitions; only 1 (the --workers threads share one input stream).",
        "1", [](PreprocessArgs&, const std::string& s) {
          if (to_count("partitions", s, 1) != 1) {
            bad_value("partitions", s,
                      "is not supported: partitions reorder the documents; --workers tokenizes in parallel and keeps "
                      "the input order");
          }
        }));
    v.push_back(switch_flag<PreprocessArgs>("keep-sequential-samples",
                                            "Accepted, changes nothing: the input order is always kept.",
                                            [](PreprocessArgs&) {}));
    v.push_back(switch_flag<PreprocessArgs>("help", "Show this help (also -h).", [](PreprocessArgs& a) { a.help = true; }));
    return v;
  }();
  return flags;
}

const cli::FlagTable& preprocess_table() {
  static const cli::FlagTable t(preprocess_flags(), {"ptdp-preprocess-data", "flags start with --",
                                                     "flags start with -- (--input takes the file names)"});
  return t;
}

// ---- ptdp-merge-datasets ----------------------------------------------------------------------

const std::vector<ListFlag>& merge_lists() {
  static const std::vector<ListFlag> lists = {
      {"datasets", "PREFIX", "[ptdp] The data sets to merge, in this order (instead of --input).", "unset"},
  };
  return lists;
}

using MFlag = Flag<MergeArgs>;

const std::vector<MFlag>& merge_flags() {
  static const std::vector<MFlag> flags = [] {
    std::vector<MFlag> v;
    v.push_back(value_flag<MergeArgs>(
        "input", "DIR", "A directory of PREFIX.bin/PREFIX.idx pairs, merged in the order of their names.", "unset",
        [](MergeArgs& a, const std::string& s) { a.input_directory = s; }));
    v.push_back(value_flag<MergeArgs>("output-prefix", "PREFIX", "Write PREFIX.bin and PREFIX.idx.", "required",
                                      [](MergeArgs& a, const std::string& s) { a.output_prefix = s; }));
    v.push_back(switch_flag<MergeArgs>("multimodal", "Megatron's multimodal data sets: not supported (refused).",
                                       [](MergeArgs&) { fail("--multimodal data sets are not supported"); }));
    v.push_back(switch_flag<MergeArgs>("help", "Show this help (also -h).", [](MergeArgs& a) { a.help = true; }));
    return v;
  }();
  return flags;
}

const cli::FlagTable& merge_table() {
  static const cli::FlagTable t(merge_flags(), {"ptdp-merge-datasets", "flags start with --",
                                                "flags start with -- (--datasets takes the prefixes)"});
  return t;
}

template <typename Args, typename F>
void apply(Args& out, const std::vector<F>& table, const std::vector<std::optional<std::string>>& values) {
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (!values[i]) continue;
    if (table[i].is_boolean()) {
      table[i].set_on(out);
    } else {
      table[i].set(out, *values[i]);
    }
  }
}

}  // namespace

PreprocessArgs parse_preprocess_args(const std::vector<std::string>& args) {
  PreprocessArgs out;
  if (cli::asks_for_help(args)) {
    out.help = true;
    return out;
  }
  std::vector<std::string> rest = args;
  const auto lists = take_lists(rest, preprocess_lists());
  const std::vector<std::optional<std::string>> values = preprocess_table().read(rest);
  apply(out, preprocess_flags(), values);
  if (!lists[0]) fail("--input is required (one or more JSON-lines files)");
  out.options.inputs = *lists[0];
  if (lists[1]) out.options.json_keys = *lists[1];
  if (out.options.output_prefix.empty()) fail("--output-prefix is required");
  if (!values[*preprocess_table().index_of("tokenizer-type")]) {
    fail("--tokenizer-type is required (ByteLevel, NullTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer or "
         "SentencePieceTokenizer)");
  }
  std::vector<std::string> keys = out.options.json_keys;
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) fail("--json-keys: a key is given twice");
  return out;
}

std::string preprocess_args_help(const std::string& program) {
  std::string out = preprocess_table().usage(program);
  out +=
      "Tokenizes JSON lines into Megatron-LM's indexed data sets (tools/preprocess_data.py's flags; [ptdp]\n"
      "marks ptdp's own). Each line is one JSON object and one document; for every --json-keys KEY it\n"
      "writes OUTPUT_PREFIX_KEY_document.bin/.idx, tokens as uint16 below 65,500 ids, else int32.\n\n";
  out += help_lines(preprocess_lists(), preprocess_flags());
  return out;
}

MergeArgs parse_merge_args(const std::vector<std::string>& args) {
  MergeArgs out;
  if (cli::asks_for_help(args)) {
    out.help = true;
    return out;
  }
  std::vector<std::string> rest = args;
  const auto lists = take_lists(rest, merge_lists());
  apply(out, merge_flags(), merge_table().read(rest));
  if (lists[0]) out.datasets = *lists[0];
  if (out.input_directory.empty() == out.datasets.empty()) {
    fail("give either --input DIR or --datasets PREFIX [PREFIX ...] (exactly one of them)");
  }
  if (out.output_prefix.empty()) fail("--output-prefix is required");
  return out;
}

std::string merge_args_help(const std::string& program) {
  std::string out = merge_table().usage(program);
  out +=
      "Concatenates Megatron-LM indexed data sets into one (tools/merge_datasets.py's flags; [ptdp] marks\n"
      "ptdp's own): documents and sequences in order, the .bin bytes copied; every input has the same dtype.\n\n";
  out += help_lines(merge_lists(), merge_flags());
  return out;
}

namespace {

// Runs `body`, mapping a bad command line to 2 and any other failure to 1, with the message.
template <typename Body>
int run_main(const std::string& program, std::FILE* err, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(err, "%s: %s\n", program.c_str(), e.what());
    std::fflush(err);
    return 1;
  }
}

}  // namespace

int preprocess_main(const std::string& program, const std::vector<std::string>& args, std::FILE* out,
                    std::FILE* err) {
  PreprocessArgs parsed;
  try {
    parsed = parse_preprocess_args(args);
  } catch (const Error& e) {
    std::fprintf(err, "%s: %s\nrun '%s --help' for the flags\n", program.c_str(), e.what(), program.c_str());
    return 2;
  }
  if (parsed.help) {
    std::fputs(preprocess_args_help(program).c_str(), out);
    std::fflush(out);
    return 0;
  }
  return run_main(program, err, [&] {
    const PreprocessStats s = preprocess_json_lines(parsed.options, err);
    const double secs = std::max(s.seconds, 1e-9);
    std::fprintf(out, "%s: %lld documents, %lld tokens, %.2f MB in %.2f s (%.1f docs/s, %.2f MB/s)",
                 program.c_str(), static_cast<long long>(s.documents), static_cast<long long>(s.tokens),
                 static_cast<double>(s.bytes) / 1024 / 1024, s.seconds, static_cast<double>(s.documents) / secs,
                 static_cast<double>(s.bytes) / secs / 1024 / 1024);
    if (s.bad_lines > 0) std::fprintf(out, "; %lld bad lines skipped", static_cast<long long>(s.bad_lines));
    std::fprintf(out, "\n");
    for (const std::string& o : s.outputs) {
      std::fprintf(out, "  wrote %s.bin and %s.idx (%s)\n", o.c_str(), o.c_str(), indexed_dtype_name(s.dtype));
    }
    std::fflush(out);
    return 0;
  });
}

int merge_datasets_main(const std::string& program, const std::vector<std::string>& args, std::FILE* out,
                        std::FILE* err) {
  MergeArgs parsed;
  try {
    parsed = parse_merge_args(args);
  } catch (const Error& e) {
    std::fprintf(err, "%s: %s\nrun '%s --help' for the flags\n", program.c_str(), e.what(), program.c_str());
    return 2;
  }
  if (parsed.help) {
    std::fputs(merge_args_help(program).c_str(), out);
    std::fflush(out);
    return 0;
  }
  return run_main(program, err, [&] {
    const std::vector<std::string> prefixes =
        parsed.datasets.empty() ? dataset_prefixes_in(parsed.input_directory) : parsed.datasets;
    merge_datasets(prefixes, parsed.output_prefix);
    const IndexedDataset merged(parsed.output_prefix);
    std::fprintf(out, "%s: merged %zu data sets into %s.bin and %s.idx: %lld documents, %lld tokens (%s)\n",
                 program.c_str(), prefixes.size(), parsed.output_prefix.c_str(), parsed.output_prefix.c_str(),
                 static_cast<long long>(merged.num_documents()), static_cast<long long>(merged.num_tokens()),
                 indexed_dtype_name(merged.dtype()));
    std::fflush(out);
    return 0;
  });
}

}  // namespace ptdp
