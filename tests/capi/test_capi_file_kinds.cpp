// Every reader of user files reachable through the C API reads regular files only: a directory,
// a FIFO (which would block an open() for reading), a character device (/dev/zero, which never
// ends) and a missing path are each refused quickly with PTDP_ERR_IO and a message naming the
// path and what it is. An alarm turns a hang into a failure instead of a stuck test.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ptdp-file-kinds-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str(const std::string& name) const { return (path / name).string(); }
};

struct Kind {
  const char* label;
  const char* words;  // what the message says the path is
};

// Makes `path` into each kind of non-regular file in turn, runs `read`, and checks the refusal.
void each_kind(const std::string& path, const std::function<ptdp_status()>& read, const char* reader) {
  const Kind kinds[] = {{"directory", "is a directory"},
                        {"fifo", "is a FIFO"},
                        {"dev-zero", "is a character device"},
                        {"missing", "missing"}};
  for (const Kind& k : kinds) {
    std::error_code ec;
    fs::remove_all(path, ec);
    const std::string label = k.label;
    if (label == "directory") fs::create_directories(path);
    if (label == "fifo") REQUIRE(mkfifo(path.c_str(), 0600) == 0);
    if (label == "dev-zero") fs::create_symlink("/dev/zero", path);
    alarm(30);  // a reader that blocks on the FIFO or reads /dev/zero forever fails here
    const ptdp_status rc = read();
    alarm(0);
    const std::string msg = ptdp_last_error();
    INFO(reader << " on a " << label << ": " << msg);
    CHECK(rc == PTDP_ERR_IO);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(k.words) != std::string::npos);
    fs::remove_all(path, ec);
  }
}

// A valid one-sequence uint8 .idx (Megatron's MMIDIDX, version 1).
void write_idx(const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  f.write(magic, 9);
  const uint64_t version = 1, seqs = 1, docs = 2;
  const uint8_t dtype = 1;
  const int32_t len = 4;
  const int64_t ptr = 0, d0 = 0, d1 = 1;
  f.write(reinterpret_cast<const char*>(&version), 8);
  f.write(reinterpret_cast<const char*>(&dtype), 1);
  f.write(reinterpret_cast<const char*>(&seqs), 8);
  f.write(reinterpret_cast<const char*>(&docs), 8);
  f.write(reinterpret_cast<const char*>(&len), 4);
  f.write(reinterpret_cast<const char*>(&ptr), 8);
  f.write(reinterpret_cast<const char*>(&d0), 8);
  f.write(reinterpret_cast<const char*>(&d1), 8);
}

}  // namespace

TEST_CASE("file kinds: an indexed data set's .idx and .bin are read only when regular files", "[capi][files]") {
  TempDir dir;
  const std::string prefix = dir.str("data");
  each_kind(prefix + ".idx", [&] {
    ptdp_dataset d = nullptr;
    return ptdp_dataset_open(prefix.c_str(), &d);
  }, "ptdp_dataset_open (.idx)");
  write_idx(prefix + ".idx");
  each_kind(prefix + ".bin", [&] {
    ptdp_dataset d = nullptr;
    return ptdp_dataset_open(prefix.c_str(), &d);
  }, "ptdp_dataset_open (.bin)");
  // And a regular pair still opens.
  std::ofstream(prefix + ".bin", std::ios::binary).write("abcd", 4);
  ptdp_dataset d = nullptr;
  REQUIRE(ptdp_dataset_open(prefix.c_str(), &d) == PTDP_SUCCESS);
  ptdp_dataset_destroy(d);
}

TEST_CASE("file kinds: a text data file", "[capi][files]") {
  TempDir dir;
  const std::string path = dir.str("corpus.txt");
  each_kind(path, [&] {
    ptdp_gpt_data_options o;
    ptdp_gpt_data_options_init(&o);
    o.source = PTDP_DATA_TEXT;
    o.path = path.c_str();
    ptdp_gpt_data g = nullptr;
    return ptdp_gpt_data_create(&o, &g);
  }, "ptdp_gpt_data_create (text)");
}

TEST_CASE("file kinds: tokenizer files of every type", "[capi][files]") {
  TempDir dir;
  const std::string path = dir.str("tok");
  std::ofstream(dir.str("merges.txt")) << "#version: 0.2\n";
  std::ofstream(dir.str("vocab.json")) << "{\"a\": 0}\n";
  const std::string merges = dir.str("merges.txt"), vocab = dir.str("vocab.json");
  auto make = [&](ptdp_tokenizer_type type, const char* v, const char* m, const char* model) {
    ptdp_tokenizer_options o;
    ptdp_tokenizer_options_init(&o);
    o.type = type;
    o.vocab_file = v;
    o.merge_file = m;
    o.tokenizer_model = model;
    ptdp_tokenizer t = nullptr;
    const ptdp_status rc = ptdp_tokenizer_create(&o, &t);
    if (rc == PTDP_SUCCESS) ptdp_tokenizer_destroy(t);
    return rc;
  };
  each_kind(path, [&] { return make(PTDP_TOKENIZER_GPT2_BPE, path.c_str(), merges.c_str(), nullptr); }, "GPT-2 vocab");
  each_kind(path, [&] { return make(PTDP_TOKENIZER_GPT2_BPE, vocab.c_str(), path.c_str(), nullptr); }, "GPT-2 merges");
  each_kind(path, [&] { return make(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, path.c_str()); }, "tokenizer.json");
  each_kind(path, [&] { return make(PTDP_TOKENIZER_SENTENCE_PIECE, nullptr, nullptr, path.c_str()); }, "SentencePiece");
}

TEST_CASE("file kinds: a checkpoint's tracker file and a Hugging Face config.json", "[capi][files]") {
  TempDir dir;
  each_kind(dir.str("latest_checkpointed_iteration.txt"), [&] {
    ptdp_gpt_options o;
    ptdp_gpt_options_init(&o);
    return ptdp_checkpoint_read_options(dir.path.c_str(), &o, nullptr);
  }, "ptdp_checkpoint_read_options");
  each_kind(dir.str("config.json"), [&] {
    ptdp_gpt_options o;
    ptdp_gpt_options_init(&o);
    return ptdp_hf_read_options(dir.path.c_str(), &o, nullptr);
  }, "ptdp_hf_read_options");
}

TEST_CASE("file kinds: cluster files, traces, training logs and preprocess inputs", "[capi][files]") {
  TempDir dir;
  const std::string path = dir.str("input");
  each_kind(path, [&] {
    ptdp_cluster c;
    ptdp_cluster_init(&c);
    return ptdp_cluster_load(path.c_str(), &c);
  }, "ptdp_cluster_load");
  each_kind(path, [&] {
    double f[1], b[1], bi[1], w[1], lat = 0;
    return ptdp_schedule_costs_from_trace(path.c_str(), 1, f, b, bi, w, &lat);
  }, "ptdp_schedule_costs_from_trace");
  const std::string svg = dir.str("plot.svg");
  each_kind(path, [&] {
    const char* logs[] = {path.c_str()};
    return ptdp_plot_training_logs(logs, nullptr, 1, nullptr, svg.c_str());
  }, "ptdp_plot_training_logs");
  const std::string out = dir.str("out");
  each_kind(path, [&] {
    ptdp_preprocess_options o;
    ptdp_preprocess_options_init(&o);
    const char* inputs[] = {path.c_str()};
    o.inputs = inputs;
    o.num_inputs = 1;
    o.output_prefix = out.c_str();
    return ptdp_preprocess(&o, nullptr);
  }, "ptdp_preprocess");
}

TEST_CASE("file kinds: a checkpoint's manifest, metadata and shard", "[capi][files]") {
  sp::World w;
  TempDir dir;
  ptdp_gpt_options g;
  ptdp_gpt_options_init(&g);
  g.num_layers = 1;
  g.hidden_size = 16;
  g.num_attention_heads = 2;
  g.seq_length = 8;
  g.vocab_size = 32;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &g, &m) == PTDP_SUCCESS);
  ptdp_checkpoint_state st;
  ptdp_checkpoint_state_init(&st);
  st.iteration = 1;
  REQUIRE(ptdp_checkpoint_save(dir.path.c_str(), m, nullptr, nullptr, &st) == PTDP_SUCCESS);
  const std::string iter = dir.str("iter_0000001");
  for (const char* name : {"manifest.sha256", "metadata.json", "model_tp00_pp00.safetensors"}) {
    const std::string path = iter + "/" + name;
    const std::string saved = path + ".saved";
    fs::rename(path, saved);
    each_kind(path, [&] { return ptdp_checkpoint_load(dir.path.c_str(), m, nullptr, nullptr); }, name);
    fs::rename(saved, path);
  }
  CHECK(ptdp_checkpoint_load(dir.path.c_str(), m, nullptr, nullptr) == PTDP_SUCCESS);
  // The tokenizer files beside a checkpoint that recorded no tokenizer: one that is there but
  // no regular file is refused, not passed over.
  const std::string tok = dir.str("tokenizer.json");
  for (const char* kind : {"directory", "fifo", "dev-zero"}) {
    std::error_code ec;
    fs::remove_all(tok, ec);
    const std::string k = kind;
    if (k == "directory") fs::create_directories(tok);
    if (k == "fifo") REQUIRE(mkfifo(tok.c_str(), 0600) == 0);
    if (k == "dev-zero") fs::create_symlink("/dev/zero", tok);
    alarm(30);
    ptdp_tokenizer t = nullptr;
    const ptdp_status rc = ptdp_tokenizer_create_from_checkpoint(dir.path.c_str(), &t);
    alarm(0);
    const std::string msg = ptdp_last_error();
    INFO(kind << ": " << msg);
    CHECK(rc == PTDP_ERR_IO);
    CHECK(msg.find(tok + ": is a") != std::string::npos);
    fs::remove_all(tok, ec);
  }
  ptdp_model_destroy(m);
}

TEST_CASE("file sizes: a token id far beyond the vocabulary is refused, not allocated", "[capi][files]") {
  TempDir dir;
  const std::string vocab = dir.str("vocab.json"), merges = dir.str("merges.txt");
  std::ofstream(vocab) << "{\"a\": 0, \"b\": 2147483647}\n";
  std::ofstream(merges) << "#version: 0.2\n";
  ptdp_tokenizer_options o;
  ptdp_tokenizer_options_init(&o);
  o.type = PTDP_TOKENIZER_GPT2_BPE;
  o.vocab_file = vocab.c_str();
  o.merge_file = merges.c_str();
  ptdp_tokenizer t = nullptr;
  CHECK(ptdp_tokenizer_create(&o, &t) == PTDP_ERR_IO);
  const std::string msg = ptdp_last_error();
  CHECK(msg.find(vocab) != std::string::npos);
  CHECK(msg.find("the largest token id 2147483647 lies more than 1048576 ids beyond the vocabulary's 2 tokens") !=
        std::string::npos);
}
