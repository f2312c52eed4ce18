#include "core/checkpoint/checkpoint_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "core/checkpoint/checkpoint_files.h"
#include "io/file_read.h"

namespace ptdp {

namespace {

// The Hugging Face tokenizer files ptdp-convert --from-hf copies beside the checkpoint it writes:
// tokenizer.json, else a SentencePiece tokenizer.model, else GPT-2's vocab.json + merges.txt.
std::optional<TokenizerConfig> tokenizer_files_in(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Absent: the next kind is tried; present but no regular file (a directory, a FIFO): refused,
  // naming what it is, rather than silently passed over.
  const auto file = [&](const char* name) {
    const fs::path path = fs::path(directory) / name;
    if (!fs::exists(fs::symlink_status(path, ec)) && !fs::exists(path, ec)) return std::optional<std::string>();
    check_regular_file(path.string(), "tokenizer file", kMaxTokenizerFileBytes);
    return std::optional<std::string>(path.string());
  };
  TokenizerConfig c;
  if (const auto json = file("tokenizer.json")) {
    c.type = TokenizerType::HuggingFace;
    c.tokenizer_model = *json;
  } else if (const auto model = file("tokenizer.model")) {
    c.type = TokenizerType::SentencePiece;
    c.tokenizer_model = *model;
  } else if (const auto vocab = file("vocab.json"), merges = file("merges.txt"); vocab && merges) {
    c.type = TokenizerType::Gpt2Bpe;
    c.vocab_file = *vocab;
    c.merge_file = *merges;
  } else {
    return std::nullopt;
  }
  return c;
}

}  // namespace

// The tokenizer flags ptdp-train recorded (train_args_to_json: flag names without dashes), else
// the tokenizer files kept in the checkpoint directory.
TokenizerConfig checkpoint_tokenizer(const std::string& directory) {
  CheckpointReader reader(directory);
  const nlohmann::json md = reader.read_metadata();
  const std::string source = reader.path_for("metadata.json");
  const bool has_flags = md.contains("train_config") && md.at("train_config").is_object();
  const nlohmann::json flags = has_flags ? md.at("train_config") : nlohmann::json::object();
  const auto text = [&](const char* key) {
    return flags.contains(key) && flags.at(key).is_string() ? flags.at(key).get<std::string>() : std::string();
  };
  TokenizerConfig c;
  const std::string type = text("tokenizer-type");
  if (type.empty()) {
    if (const auto beside = tokenizer_files_in(directory)) return *beside;
    PTDP_CHECK_ARG(!text("text-file").empty(),
                   str_cat(source, has_flags ? " records no --tokenizer-type and no --text-file (trained on mock or "
                                               "pre-tokenized data)"
                                             : " records no training flags",
                           " and ", directory, " holds no tokenizer.json, tokenizer.model or vocab.json + merges.txt: "
                           "nothing says how text becomes ids; give the tokenizer yourself"));
    c.type = TokenizerType::ByteLevel;
    return c;
  }
  const auto t = tokenizer_type_from_name(type);
  if (!t) throw_io_error(source, str_cat("--tokenizer-type '", type, "' is not a tokenizer ptdp knows"));
  c.type = *t;
  c.vocab_file = text("vocab-file");
  c.merge_file = text("merge-file");
  c.tokenizer_model = text("tokenizer-model");
  if (c.type == TokenizerType::Null && flags.contains("vocab-size") && flags.at("vocab-size").is_number_integer()) {
    c.vocab_size = flags.at("vocab-size").get<int64_t>();
  }
  return c;
}

}  // namespace ptdp
