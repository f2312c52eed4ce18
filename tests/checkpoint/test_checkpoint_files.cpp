// The checkpoint file layer: SHA-256, the manifest, the atomic directory protocol (including
// interrupted and damaged saves) and the re-sharding block reader.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/checkpoint/checkpoint_files.h"
#include "core/checkpoint/safetensors.h"

namespace fs = std::filesystem;
using namespace ptdp;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "ptdp_ckpt_XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

void require_error(ErrorCode code, const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == code);
    for (const std::string& p : parts) CHECK(std::string(e.what()).find(p) != std::string::npos);
    return;
  }
  FAIL("no ptdp::Error thrown");
}

bool have_sha256sum() { return std::system("command -v sha256sum >/dev/null 2>&1") == 0; }

// Saves iteration `it` of a two-file checkpoint whose tensor "w" [4] holds `value`.
void save(const std::string& dir, int64_t it, float value) {
  CheckpointDirWriter writer;
  writer.begin(dir, it);
  const std::vector<float> w(4, value);
  SafetensorsWriter st;
  st.add("w", StDType::F32, {4}, w.data());
  st.write(writer.path_for("model.safetensors"));
  write_file_synced(writer.path_for("metadata.json"), nlohmann::json{{"iteration", it}, {"value", value}}.dump());
  writer.finalize({"model.safetensors", "metadata.json"});
}

float saved_value(CheckpointReader& r) {
  std::vector<float> w(4);
  r.file("model.safetensors").read_f32("w", w.data());
  CHECK(r.read_metadata()["value"].get<float>() == w[0]);
  return w[0];
}

}  // namespace

TEST_CASE("sha256 known-answer vectors", "[checkpoint][sha256]") {
  CHECK(sha256_bytes("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_bytes("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_bytes(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  TempDir dir;
  const std::string path = dir.str() + "/abc.txt";
  write_text(path, "abc");
  CHECK(sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // More than the 1 MiB read buffer: a million 'a's (FIPS 180-2's third vector).
  write_text(path, std::string(1000000, 'a'));
  CHECK(sha256_file(path) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  require_error(ErrorCode::Io, [&] { sha256_file(dir.str() + "/none"); }, {dir.str() + "/none", "missing"});
}

TEST_CASE("checkpoint names follow Megatron", "[checkpoint][dir]") {
  CHECK(checkpoint_iter_name(0) == "iter_0000000");
  CHECK(checkpoint_iter_name(250) == "iter_0000250");
  CHECK(checkpoint_iter_name(12345678) == "iter_12345678");
  CHECK(checkpoint_iter_dir("/ck", 7) == "/ck/iter_0000007");
  CHECK(checkpoint_tmp_dir("/ck", 7) == "/ck/iter_0000007.tmp");
  CHECK(checkpoint_tracker_path("/ck") == "/ck/latest_checkpointed_iteration.txt");
  require_error(ErrorCode::InvalidArgument, [] { checkpoint_iter_name(-1); }, {"-1"});
}

TEST_CASE("finalize writes the iteration directory, a sha256sum manifest and the tracker", "[checkpoint][dir]") {
  TempDir tmp;
  const std::string dir = tmp.str() + "/a/b";  // created by begin()
  save(dir, 10, 1.5f);

  const std::string iter = dir + "/iter_0000010";
  CHECK(fs::is_directory(iter));
  CHECK_FALSE(fs::exists(iter + ".tmp"));
  CHECK(read_text(dir + "/latest_checkpointed_iteration.txt") == "10");
  CHECK_FALSE(fs::exists(dir + "/latest_checkpointed_iteration.txt.tmp"));
  CHECK(read_latest_iteration(dir) == 10);

  // sha256sum format, sorted by file name.
  const std::string manifest = read_text(iter + "/manifest.sha256");
  CHECK(manifest == sha256_file(iter + "/metadata.json") + "  metadata.json\n" + sha256_file(iter + "/model.safetensors") +
                        "  model.safetensors\n");
  if (have_sha256sum()) {
    const std::string cmd = "cd '" + iter + "' && sha256sum -c --quiet manifest.sha256";
    CHECK(std::system(cmd.c_str()) == 0);
  } else {
    WARN("sha256sum is not installed; only the manifest's text was checked");
  }

  CheckpointReader r(dir);
  CHECK(r.iteration() == 10);
  CHECK(r.iter_dir() == iter);
  CHECK(r.manifest().size() == 2);
  r.verify_all();
  CHECK(saved_value(r) == 1.5f);
  CHECK(r.read_metadata()["iteration"].get<int64_t>() == 10);

  // A later save moves the tracker; both iterations stay loadable.
  save(dir, 20, 2.5f);
  CHECK(read_text(dir + "/latest_checkpointed_iteration.txt") == "20");
  CheckpointReader latest(dir);
  CHECK(latest.iteration() == 20);
  CHECK(saved_value(latest) == 2.5f);
  CheckpointReader older(dir, 10);
  CHECK(saved_value(older) == 1.5f);

  // Saving an iteration again replaces it wholly.
  {
    CheckpointDirWriter w;
    w.begin(dir, 10);
    write_file_synced(w.path_for("metadata.json"), "{\"value\": 9}");
    w.finalize({"metadata.json"});
    CHECK(w.iter_dir() == iter);
  }
  CHECK_FALSE(fs::exists(iter + "/model.safetensors"));
  CHECK(read_latest_iteration(dir) == 10);  // the tracker names the last save, as Megatron's does
}

TEST_CASE("an interrupted save leaves the previous checkpoint the latest", "[checkpoint][dir]") {
  TempDir tmp;
  const std::string dir = tmp.str();
  save(dir, 100, 1.0f);

  // Several writers (ranks) fill the tmp directory; the save dies before finalize.
  prepare_tmp_dir(dir, 200);
  const std::string stale = checkpoint_tmp_dir(dir, 200);
  CHECK(fs::is_directory(stale));
  write_file_synced(stale + "/model_tp00.safetensors", "partial");
  write_file_synced(stale + "/model_tp01.safetensors", "partial");

  CHECK(read_latest_iteration(dir) == 100);
  CheckpointReader r(dir);
  CHECK(r.iteration() == 100);
  r.verify_all();
  CHECK(saved_value(r) == 1.0f);

  // Saving 200 again clears the stale directory first.
  CheckpointDirWriter w;
  w.begin(dir, 200);
  CHECK(fs::is_empty(stale));
  const float x = 4.0f;
  SafetensorsWriter a, b;
  a.add("x", StDType::F32, {1}, &x);
  b.add("y", StDType::F32, {1}, &x);
  a.write(w.path_for("model_tp00.safetensors"));
  b.write(checkpoint_tmp_dir(dir, 200) + "/model_tp01.safetensors");  // another rank, by the free function
  finalize_checkpoint(dir, 200, {"model_tp01.safetensors", "model_tp00.safetensors"});
  CHECK_FALSE(fs::exists(stale));
  CHECK(read_latest_iteration(dir) == 200);
  CheckpointReader r2(dir);
  r2.verify_all();
  float y = 0;
  r2.file("model_tp01.safetensors").read_f32("y", &y);
  CHECK(y == 4.0f);
}

TEST_CASE("damaged checkpoints are refused naming the file", "[checkpoint][dir]") {
  TempDir tmp;
  const std::string dir = tmp.str();
  save(dir, 5, 3.0f);
  const std::string iter = dir + "/iter_0000005";
  const std::string shard = iter + "/model.safetensors";
  const std::string expected = sha256_file(shard);

  SECTION("one corrupted byte") {
    std::string bytes = read_text(shard);
    bytes[bytes.size() - 1] = static_cast<char>(bytes[bytes.size() - 1] ^ 0x01);
    write_text(shard, bytes);
    const std::string found = sha256_file(shard);
    REQUIRE(found != expected);
    CheckpointReader r(dir);
    require_error(ErrorCode::Io, [&] { r.verify("model.safetensors"); },
                  {shard, "SHA-256 mismatch: expected " + expected + ", found " + found});
    require_error(ErrorCode::Io, [&] { r.file("model.safetensors"); }, {shard, "SHA-256 mismatch"});
    r.verify("metadata.json");  // the other file is fine
  }
  SECTION("truncated shard") {
    fs::resize_file(shard, fs::file_size(shard) - 2);
    CheckpointReader r(dir);
    require_error(ErrorCode::Io, [&] { r.verify_all(); }, {shard, "SHA-256 mismatch"});
  }
  SECTION("empty shard") {
    fs::resize_file(shard, 0);
    CheckpointReader r(dir);
    require_error(ErrorCode::Io, [&] { r.verify("model.safetensors"); }, {shard, "empty"});
  }
  SECTION("deleted shard") {
    fs::remove(shard);
    CheckpointReader r(dir);
    require_error(ErrorCode::Io, [&] { r.verify("model.safetensors"); }, {shard, "missing"});
  }
  SECTION("file not in the manifest") {
    write_text(iter + "/extra.safetensors", "x");
    CheckpointReader r(dir);
    require_error(ErrorCode::Io, [&] { r.verify("extra.safetensors"); }, {iter + "/extra.safetensors", "not listed in"});
  }
  SECTION("deleted manifest") {
    fs::remove(iter + "/manifest.sha256");
    require_error(ErrorCode::Io, [&] { CheckpointReader r(dir); }, {iter + "/manifest.sha256", "missing"});
  }
  SECTION("malformed manifest") {
    write_text(iter + "/manifest.sha256", "not a hash  metadata.json\n");
    require_error(ErrorCode::Io, [&] { CheckpointReader r(dir); }, {iter + "/manifest.sha256", "line 1"});
  }
  SECTION("tracker naming a missing iteration") {
    write_text(dir + "/latest_checkpointed_iteration.txt", "6\n");
    require_error(ErrorCode::Io, [&] { CheckpointReader r(dir); },
                  {dir + "/iter_0000006", "missing", "latest_checkpointed_iteration.txt"});
  }
  SECTION("unparseable tracker") {
    write_text(dir + "/latest_checkpointed_iteration.txt", "release");
    require_error(ErrorCode::Io, [&] { read_latest_iteration(dir); }, {"latest_checkpointed_iteration.txt", "'release'"});
  }
  SECTION("no tracker") {
    fs::remove(dir + "/latest_checkpointed_iteration.txt");
    require_error(ErrorCode::Io, [&] { CheckpointReader r(dir); },
                  {"no checkpoint in " + dir + ": " + dir + "/latest_checkpointed_iteration.txt is missing"});
  }
  SECTION("invalid metadata JSON") {
    // Rewrite metadata.json and its manifest line so that only the JSON is wrong.
    write_text(iter + "/metadata.json", "{oops");
    write_text(iter + "/manifest.sha256", sha256_file(iter + "/metadata.json") + "  metadata.json\n" + expected +
                                              "  model.safetensors\n");
    CheckpointReader r(dir);
    require_error(ErrorCode::Io, [&] { r.read_metadata(); }, {iter + "/metadata.json", "invalid JSON"});
  }
}

TEST_CASE("the directory protocol refuses bad calls", "[checkpoint][dir]") {
  TempDir tmp;
  const std::string dir = tmp.str();
  CheckpointDirWriter w;
  require_error(ErrorCode::InvalidState, [&] { w.path_for("x"); }, {"before begin"});
  w.begin(dir, 1);
  require_error(ErrorCode::InvalidArgument, [&] { w.path_for("../x"); }, {"../x"});
  require_error(ErrorCode::InvalidArgument, [&] { w.finalize({"manifest.sha256"}); }, {"manifest.sha256"});
  require_error(ErrorCode::InvalidArgument, [&] { w.finalize({"a", "a"}); }, {"twice"});
  require_error(ErrorCode::Io, [&] { w.finalize({"absent.safetensors"}); },
                {checkpoint_tmp_dir(dir, 1) + "/absent.safetensors", "missing"});
  CHECK_FALSE(fs::exists(checkpoint_tracker_path(dir)));
  require_error(ErrorCode::Io, [&] { finalize_checkpoint(dir, 2, {}); }, {checkpoint_tmp_dir(dir, 2), "missing"});
}

namespace {

float original(int64_t r, int64_t c) { return static_cast<float>(r * 10 + c) + 0.5f; }  // of the [8, 6] tensor

// A block of original() as a row-major vector.
std::vector<float> slice(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  std::vector<float> v;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) v.push_back(original(r, c));
  return v;
}

// Writes a re-sharding checkpoint with several layouts of the [8, 6] tensor:
//   "by_rows"  rows [0, 4) in rows_0, rows [4, 8) in rows_1
//   "by_cols"  cols [0, 2), [2, 4), [4, 6) in cols_0, cols_1, cols_2 (cols_1 stored as BF16)
//   "mixed"    rows [0, 4) from rows_0, then the three column pieces again (overlapping rows [0, 4))
//   "partial"  rows [0, 4) only
//   "bias"     1-D [10]: [0, 3) in rows_0, [3, 10) in rows_1 (F16), and [0, 10) again in cols_0
void write_resharding_checkpoint(const std::string& dir, TensorMap& map) {
  CheckpointDirWriter w;
  w.begin(dir, 3);
  map.add_tensor("by_rows", {8, 6}, StDType::F32);
  map.add_tensor("by_cols", {8, 6}, StDType::F32);
  map.add_tensor("mixed", {8, 6}, StDType::F32);
  map.add_tensor("partial", {8, 6}, StDType::F32);
  map.add_tensor("bias", {10}, StDType::F32);
  std::vector<float> bias(10);
  for (int i = 0; i < 10; ++i) bias[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.25f;

  for (int k = 0; k < 2; ++k) {
    const std::string file = "rows_" + std::to_string(k) + ".safetensors";
    SafetensorsWriter st;
    st.add_owned("w", StDType::F32, {4, 6}, [&] {
      const std::vector<float> v = slice(4 * k, 4 * k + 4, 0, 6);
      const auto* b = reinterpret_cast<const unsigned char*>(v.data());
      return std::vector<unsigned char>(b, b + v.size() * 4);
    }());
    if (k == 0) st.add("b", StDType::F32, {3}, bias.data());
    else st.add_from_f32("b", StDType::F16, {7}, bias.data() + 3);
    st.write(w.path_for(file));
    map.add_piece("by_rows", {file, "w", 4 * k, 4 * k + 4, 0, 6});
    if (k == 0) map.add_piece("mixed", {file, "w", 0, 4, 0, 6});
    if (k == 0) map.add_piece("partial", {file, "w", 0, 4, 0, 6});
    map.add_piece("bias", {file, "b", k == 0 ? 0 : 3, k == 0 ? 3 : 10, 0, 1});
  }
  for (int k = 0; k < 3; ++k) {
    const std::string file = "cols_" + std::to_string(k) + ".safetensors";
    const std::vector<float> v = slice(0, 8, 2 * k, 2 * k + 2);
    SafetensorsWriter st;
    st.add_from_f32("w", k == 1 ? StDType::BF16 : StDType::F32, {8, 2}, v.data());
    if (k == 0) st.add("bias_copy", StDType::F32, {10}, bias.data());
    st.write(w.path_for(file));
    map.add_piece("by_cols", {file, "w", 0, 8, 2 * k, 2 * k + 2});
    map.add_piece("mixed", {file, "w", 0, 8, 2 * k, 2 * k + 2});
    if (k == 0) map.add_piece("bias", {file, "bias_copy", 0, 10, 0, 1});
  }
  write_file_synced(w.path_for("metadata.json"), nlohmann::json{{"tensors", map.to_json()}}.dump(2));
  w.finalize({"rows_0.safetensors", "rows_1.safetensors", "cols_0.safetensors", "cols_1.safetensors",
              "cols_2.safetensors", "metadata.json"});
}

}  // namespace

TEST_CASE("re-sharding reads any block of a tensor split by rows or by columns", "[checkpoint][reshard]") {
  TempDir tmp;
  TensorMap written;
  write_resharding_checkpoint(tmp.str(), written);

  CheckpointReader r(tmp.str());
  const std::string meta_path = r.path_for("metadata.json");
  r.set_tensor_map(TensorMap::from_json(r.read_metadata()["tensors"], meta_path));
  CHECK(r.tensor_map().to_json() == written.to_json());
  CHECK(r.has_tensor("by_rows"));
  CHECK_FALSE(r.has_tensor("nope"));
  CHECK(r.global_shape("by_cols") == std::vector<int64_t>{8, 6});
  CHECK(r.global_shape("bias") == std::vector<int64_t>{10});

  for (const char* name : {"by_rows", "by_cols", "mixed"}) {
    for (int64_t r0 = 0; r0 < 8; ++r0)
      for (int64_t r1 = r0 + 1; r1 <= 8; ++r1)
        for (int64_t c0 = 0; c0 < 6; ++c0)
          for (int64_t c1 = c0 + 1; c1 <= 6; ++c1) {
            std::vector<float> out(static_cast<std::size_t>((r1 - r0) * (c1 - c0)), -1.0f);
            r.read_block(name, r0, r1, c0, c1, out.data());
            INFO(name << " rows [" << r0 << ", " << r1 << ") cols [" << c0 << ", " << c1 << ")");
            REQUIRE(out == slice(r0, r1, c0, c1));
          }
  }
  std::vector<float> b(7);
  r.read_block("bias", 2, 9, 0, 1, b.data());
  CHECK(b == std::vector<float>{0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f});

  // Blocks inside the stored part of "partial" work; one reaching outside it does not.
  std::vector<float> out(48);
  r.read_block("partial", 1, 3, 2, 5, out.data());
  CHECK(std::vector<float>(out.begin(), out.begin() + 6) == slice(1, 3, 2, 5));
  require_error(ErrorCode::InvalidArgument, [&] { r.read_block("partial", 2, 6, 0, 6, out.data()); },
                {"'partial'", "rows [2, 6) x cols [0, 6)", "element [4, 0]"});
  require_error(ErrorCode::InvalidArgument, [&] { r.read_block("by_rows", 0, 9, 0, 6, out.data()); },
                {"'by_rows'", "outside"});
  require_error(ErrorCode::InvalidArgument, [&] { r.read_block("nope", 0, 1, 0, 1, out.data()); }, {"'nope'"});

  // Holding readers to the declared dtypes (as ptdp's checkpoint loads do): the BF16 piece of
  // "by_cols" is refused, F32 ones still read.
  r.require_declared_dtypes(true);
  r.read_block("by_cols", 0, 8, 0, 2, out.data());
  CHECK(std::vector<float>(out.begin(), out.begin() + 16) == slice(0, 8, 0, 2));
  require_error(ErrorCode::Io, [&] { r.read_block("by_cols", 0, 8, 1, 3, out.data()); },
                {"cols_1.safetensors", "tensor 'w' is stored as BF16, but the tensor map declares 'by_cols' as F32",
                 "piece rows [0, 8) x cols [2, 4)"});
}

TEST_CASE("re-sharding verifies each piece's file and its stored shape", "[checkpoint][reshard]") {
  TempDir tmp;
  TensorMap map;
  write_resharding_checkpoint(tmp.str(), map);
  const std::string iter = checkpoint_iter_dir(tmp.str(), 3);

  SECTION("a corrupted piece") {
    const std::string shard = iter + "/cols_2.safetensors";
    std::string bytes = read_text(shard);
    bytes[bytes.size() - 5] = static_cast<char>(bytes[bytes.size() - 5] ^ 0x40);
    write_text(shard, bytes);
    CheckpointReader r(tmp.str());
    r.set_tensor_map(map);
    std::vector<float> out(48);
    r.read_block("by_cols", 0, 8, 0, 4, out.data());  // does not touch cols_2
    CHECK(std::vector<float>(out.begin(), out.begin() + 32) == slice(0, 8, 0, 4));
    require_error(ErrorCode::Io, [&] { r.read_block("by_cols", 0, 8, 3, 5, out.data()); }, {shard, "SHA-256 mismatch"});
  }
  SECTION("a piece whose stored tensor has another shape") {
    TensorMap bad;
    bad.add_tensor("t", {8, 6}, StDType::F32);
    bad.add_piece("t", {"rows_0.safetensors", "w", 0, 8, 0, 3});  // the file holds [4, 6]
    CheckpointReader r(tmp.str());
    r.set_tensor_map(bad);
    std::vector<float> out(1);
    require_error(ErrorCode::Io, [&] { r.read_block("t", 0, 1, 0, 1, out.data()); }, {iter + "/rows_0.safetensors", "4 x 6"});
  }
  SECTION("a piece naming a tensor its file lacks") {
    TensorMap bad;
    bad.add_tensor("t", {4, 6}, StDType::F32);
    bad.add_piece("t", {"rows_0.safetensors", "missing_name", 0, 4, 0, 6});
    CheckpointReader r(tmp.str());
    r.set_tensor_map(bad);
    std::vector<float> out(1);
    require_error(ErrorCode::Io, [&] { r.read_block("t", 0, 1, 0, 1, out.data()); }, {"rows_0.safetensors", "missing_name"});
  }
}

TEST_CASE("tensor map checks its pieces and its JSON", "[checkpoint][reshard]") {
  TensorMap m;
  m.add_tensor("a", {4, 2}, StDType::BF16);
  m.add_tensor("a", {4, 2}, StDType::BF16);  // same declaration again is fine
  require_error(ErrorCode::InvalidArgument, [&] { m.add_tensor("a", {4, 3}, StDType::BF16); }, {"'a'"});
  require_error(ErrorCode::InvalidArgument, [&] { m.add_tensor("c", {2, 2, 2}, StDType::F32); }, {"3 dims"});
  require_error(ErrorCode::InvalidArgument, [&] { m.add_piece("b", {"f", "x", 0, 1, 0, 1}); }, {"'b'"});
  require_error(ErrorCode::InvalidArgument, [&] { m.add_piece("a", {"f", "x", 0, 5, 0, 1}); }, {"outside"});
  m.add_piece("a", {"f.safetensors", "x", 0, 4, 1, 2});

  const nlohmann::json j = m.to_json();
  CHECK(j == nlohmann::json::parse(R"({"a": {"shape": [4, 2], "dtype": "BF16",
      "pieces": [{"file": "f.safetensors", "name": "x", "rows": [0, 4], "cols": [1, 2]}]}})"));
  const TensorMap back = TensorMap::from_json(j, "meta.json");
  CHECK(back.at("a").pieces.size() == 1);
  CHECK(back.at("a").pieces[0].c0 == 1);
  CHECK(back.at("a").dtype == StDType::BF16);

  nlohmann::json bad = j;
  bad["a"]["pieces"][0]["rows"] = {0, 9};
  require_error(ErrorCode::Io, [&] { TensorMap::from_json(bad, "meta.json"); }, {"meta.json", "outside"});
  bad = j;
  bad["a"].erase("shape");
  require_error(ErrorCode::Io, [&] { TensorMap::from_json(bad, "meta.json"); }, {"meta.json", "'a'"});
  bad = j;
  bad["a"]["dtype"] = "Q4";
  require_error(ErrorCode::Io, [&] { TensorMap::from_json(bad, "meta.json"); }, {"meta.json", "'Q4'"});
}
