#include "core/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "io/file_read.h"
#include "io/json_text.h"

namespace ptdp {
namespace {

namespace fs = std::filesystem;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

std::string block_string(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  return str_cat("rows [", r0, ", ", r1, ") x cols [", c0, ", ", c1, ")");
}

std::string to_hex(const unsigned char* digest, unsigned n) {
  static const char* kHex = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = kHex[digest[i] >> 4];
    s[2 * i + 1] = kHex[digest[i] & 15];
  }
  return s;
}

// Owns an EVP_MD_CTX for one SHA-256 computation.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
      throw_error(ErrorCode::Internal, "OpenSSL could not start a SHA-256 digest");
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t n) {
    if (n > 0 && EVP_DigestUpdate(ctx_, data, n) != 1) throw_error(ErrorCode::Internal, "OpenSSL SHA-256 update failed");
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (EVP_DigestFinal_ex(ctx_, digest, &n) != 1) throw_error(ErrorCode::Internal, "OpenSSL SHA-256 final failed");
    return to_hex(digest, n);
  }

 private:
  EVP_MD_CTX* ctx_;
};

void check_file_name(const std::string& name) {
  PTDP_CHECK_ARG(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                     name.find('\n') == std::string::npos && name.find('\r') == std::string::npos,
                 str_cat("bad checkpoint file name '", name, "': it must be a plain file name"));
}

bool is_lower_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Parses "<64 hex>  <name>" (or "<64 hex> *<name>", sha256sum's binary mode) lines.
std::map<std::string, std::string> parse_manifest(const std::string& path, const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    if (line.size() < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*'))
      throw_io_error(path, str_cat("bad manifest line ", line_no, ": '", line, "' is not '<sha256>  <file name>'"));
    std::string hash = line.substr(0, 64);
    std::transform(hash.begin(), hash.end(), hash.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
    if (!is_lower_hex64(hash)) throw_io_error(path, str_cat("bad manifest line ", line_no, ": '", line.substr(0, 64), "' is not a SHA-256"));
    const std::string name = line.substr(66);
    if (!out.emplace(name, hash).second) throw_io_error(path, str_cat("manifest lists '", name, "' twice"));
  }
  return out;
}

std::string read_text(const std::string& path) {
  return read_regular_file(path, "checkpoint file", kMaxJsonFileBytes);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SHA-256

std::string sha256_bytes(const void* data, std::size_t n) {
  PTDP_CHECK_ARG(data != nullptr || n == 0, std::string("sha256_bytes: data is NULL"));
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  // Exactly the bytes the file had when opened: a file that grows is hashed as it was.
  const RegularFile f(path, "checkpoint file", kNoSizeLimit);
  // A buffer no larger than the file: a manifest's many small files cost no 1 MiB allocation each.
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::clamp<uint64_t>(f.size(), 1, uint64_t{1} << 20)));
  Sha256 h;
  for (uint64_t at = 0; at < f.size();) {
    const uint64_t n = std::min<uint64_t>(buf.size(), f.size() - at);
    f.read_at(at, buf.data(), n);
    h.update(buf.data(), static_cast<std::size_t>(n));
    at += n;
  }
  return h.hex();
}

// ---------------------------------------------------------------------------------------------
// Names and the directory protocol

std::string checkpoint_iter_name(int64_t iteration) {
  PTDP_CHECK_ARG(iteration >= 0, str_cat("checkpoint iteration must be >= 0, got ", iteration));
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::string checkpoint_iter_dir(const std::string& dir, int64_t iteration) {
  return join(dir, checkpoint_iter_name(iteration));
}

std::string checkpoint_tmp_dir(const std::string& dir, int64_t iteration) {
  return checkpoint_iter_dir(dir, iteration) + ".tmp";
}

std::string checkpoint_tracker_path(const std::string& dir) { return join(dir, kTrackerFile); }

void prepare_tmp_dir(const std::string& dir, int64_t iteration) {
  const std::string tmp = checkpoint_tmp_dir(dir, iteration);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io_error(dir, str_cat("cannot create the checkpoint directory: ", ec.message()));
  fs::remove_all(tmp, ec);
  if (ec) throw_io_error(tmp, str_cat("cannot remove the stale directory of an interrupted save: ", ec.message()));
  if (!fs::create_directory(tmp, ec) || ec)
    throw_io_error(tmp, str_cat("cannot create: ", ec ? ec.message() : std::string("it already exists")));
}

void finalize_checkpoint(const std::string& dir, int64_t iteration, const std::vector<std::string>& files) {
  const std::string tmp = checkpoint_tmp_dir(dir, iteration);
  const std::string final_dir = checkpoint_iter_dir(dir, iteration);
  std::vector<std::string> sorted = files;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    check_file_name(sorted[i]);
    PTDP_CHECK_ARG(sorted[i] != kManifestFile, str_cat("'", kManifestFile, "' is written by finalize_checkpoint itself"));
    PTDP_CHECK_ARG(i == 0 || sorted[i] != sorted[i - 1], str_cat("checkpoint file '", sorted[i], "' listed twice"));
  }
  std::error_code ec;
  if (!fs::is_directory(tmp, ec)) throw_io_error(tmp, "missing (prepare_tmp_dir was not called, or the directory was removed)");

  std::string manifest;
  for (const std::string& name : sorted) {
    const std::string path = join(tmp, name);
    if (!fs::is_regular_file(path, ec)) throw_io_error(path, "missing");
    fsync_path(path);
    manifest += sha256_file(path);
    manifest += "  ";
    manifest += name;
    manifest += '\n';
  }
  write_file_synced(join(tmp, kManifestFile), manifest);
  fsync_path(tmp);

  if (fs::exists(final_dir, ec)) {
    fs::remove_all(final_dir, ec);
    if (ec) throw_io_error(final_dir, str_cat("cannot remove the older checkpoint of the same iteration: ", ec.message()));
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0)
    throw_io_error(final_dir, str_cat("cannot rename ", tmp, " to it: ", std::strerror(errno)));
  fsync_path(dir);
  write_file_atomic(checkpoint_tracker_path(dir), std::to_string(iteration));
}

int64_t read_latest_iteration(const std::string& dir) {
  const std::string tracker = checkpoint_tracker_path(dir);
  std::error_code ec;
  if (!fs::exists(tracker, ec)) throw_io_error(str_cat("no checkpoint in ", dir), str_cat(tracker, " is missing"));
  const std::string text = read_text(tracker);
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  const std::string trimmed = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  int64_t it = -1;
  const auto [end, err] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), it);
  if (trimmed.empty() || err != std::errc() || end != trimmed.data() + trimmed.size() || it < 0)
    throw_io_error(tracker, str_cat("cannot parse an iteration number from '", trimmed, "'"));
  return it;
}

void CheckpointDirWriter::begin(const std::string& dir, int64_t iteration) {
  (void)checkpoint_iter_name(iteration);  // rejects a negative iteration before touching disk
  prepare_tmp_dir(dir, iteration);
  dir_ = dir;
  iteration_ = iteration;
  finalized_ = false;
}

void CheckpointDirWriter::check_begun(const char* what) const {
  if (iteration_ < 0) throw_error(ErrorCode::InvalidState, str_cat("CheckpointDirWriter::", what, " before begin()"));
  if (finalized_) throw_error(ErrorCode::InvalidState, str_cat("CheckpointDirWriter::", what, " after finalize()"));
}

std::string CheckpointDirWriter::path_for(const std::string& filename) const {
  check_begun("path_for");
  check_file_name(filename);
  return join(checkpoint_tmp_dir(dir_, iteration_), filename);
}

void CheckpointDirWriter::finalize(const std::vector<std::string>& files) {
  check_begun("finalize");
  finalize_checkpoint(dir_, iteration_, files);
  finalized_ = true;
}

std::string CheckpointDirWriter::iter_dir() const {
  if (iteration_ < 0) throw_error(ErrorCode::InvalidState, "CheckpointDirWriter::iter_dir before begin()");
  return checkpoint_iter_dir(dir_, iteration_);
}

// ---------------------------------------------------------------------------------------------
// Tensor map

void TensorMap::add_tensor(const std::string& name, const std::vector<int64_t>& shape, StDType dtype) {
  PTDP_CHECK_ARG(!name.empty(), std::string("tensor map: empty tensor name"));
  PTDP_CHECK_ARG(shape.size() <= 2, str_cat("tensor map: '", name, "' has ", shape.size(), " dims; at most 2 are supported"));
  (void)st_numel(shape);
  (void)st_dtype_size(dtype);
  const auto it = entries_.find(name);
  if (it != entries_.end()) {
    PTDP_CHECK_ARG(it->second.shape == shape && it->second.dtype == dtype,
                   str_cat("tensor map: '", name, "' declared again with another shape or dtype"));
    return;
  }
  TensorEntry e;
  e.shape = shape;
  e.dtype = dtype;
  entries_.emplace(name, std::move(e));
}

void TensorMap::add_piece(const std::string& global_name, const TensorPiece& piece) {
  const auto it = entries_.find(global_name);
  PTDP_CHECK_ARG(it != entries_.end(), str_cat("tensor map: piece of undeclared tensor '", global_name, "'"));
  TensorEntry& e = it->second;
  PTDP_CHECK_ARG(!piece.file.empty() && !piece.name.empty(),
                 str_cat("tensor map: piece of '", global_name, "' without a file or tensor name"));
  PTDP_CHECK_ARG(0 <= piece.r0 && piece.r0 <= piece.r1 && piece.r1 <= e.rows() && 0 <= piece.c0 &&
                     piece.c0 <= piece.c1 && piece.c1 <= e.cols(),
                 str_cat("tensor map: piece ", block_string(piece.r0, piece.r1, piece.c0, piece.c1), " of '", global_name,
                     "' lies outside its ", e.rows(), " x ", e.cols()));
  e.pieces.push_back(piece);
}

const TensorEntry& TensorMap::at(const std::string& name) const {
  const auto it = entries_.find(name);
  PTDP_CHECK_ARG(it != entries_.end(), str_cat("tensor '", name, "' is not in the checkpoint"));
  return it->second;
}

nlohmann::json TensorMap::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, e] : entries_) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const TensorPiece& p : e.pieces) {
      nlohmann::json piece = {{"file", p.file}, {"name", p.name}, {"rows", {p.r0, p.r1}}, {"cols", {p.c0, p.c1}}};
      if (p.stored_row0 >= 0) piece["stored_row0"] = p.stored_row0;
      pieces.push_back(std::move(piece));
    }
    j[name] = {{"shape", e.shape}, {"dtype", st_dtype_name(e.dtype)}, {"pieces", std::move(pieces)}};
  }
  return j;
}

TensorMap TensorMap::from_json(const nlohmann::json& j, const std::string& source) {
  TensorMap map;
  if (!j.is_object()) throw_io_error(source, "the tensor map is not a JSON object");
  for (const auto& [name, e] : j.items()) {
    const std::string where = str_cat("tensor map entry '", name, "'");
    try {
      const auto range = [&](const nlohmann::json& r, const char* what) {
        if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer())
          throw_io_error(source, str_cat(where, ": ", what, " is not a pair of integers"));
        return std::pair<int64_t, int64_t>(r[0].get<int64_t>(), r[1].get<int64_t>());
      };
      if (!e.is_object() || !e.contains("shape") || !e.contains("dtype") || !e.contains("pieces"))
        throw_io_error(source, str_cat(where, " needs shape, dtype and pieces"));
      if (!e["shape"].is_array() || !e["dtype"].is_string() || !e["pieces"].is_array())
        throw_io_error(source, str_cat(where, ": shape must be an array, dtype a string, pieces an array"));
      std::vector<int64_t> shape;
      for (const nlohmann::json& d : e["shape"]) {
        if (!d.is_number_integer()) {
          throw_io_error(source, str_cat(where, ": shape ", json_text(e["shape"]), " is not integers"));
        }
        shape.push_back(d.get<int64_t>());
      }
      const auto dtype = st_dtype_parse(e["dtype"].get<std::string>());
      if (!dtype) throw_io_error(source, str_cat(where, ": unknown dtype '", e["dtype"].get<std::string>(), "'"));
      map.add_tensor(name, shape, *dtype);
      for (const nlohmann::json& p : e["pieces"]) {
        if (!p.is_object() || !p.contains("file") || !p.contains("name") || !p.contains("rows") || !p.contains("cols") ||
            !p["file"].is_string() || !p["name"].is_string())
          throw_io_error(source, str_cat(where, ": a piece needs file and name strings, rows and cols"));
        TensorPiece piece;
        piece.file = p["file"].get<std::string>();
        piece.name = p["name"].get<std::string>();
        std::tie(piece.r0, piece.r1) = range(p["rows"], "rows");
        std::tie(piece.c0, piece.c1) = range(p["cols"], "cols");
        if (p.contains("stored_row0")) {
          if (!p["stored_row0"].is_number_integer() || p["stored_row0"].get<int64_t>() < 0)
            throw_io_error(source,
                           str_cat(where, ": stored_row0 ", json_text(p["stored_row0"]), " is not an integer >= 0"));
          piece.stored_row0 = p["stored_row0"].get<int64_t>();
        }
        map.add_piece(name, piece);
      }
    } catch (const Error& err) {
      if (err.code() != ErrorCode::InvalidArgument) throw;
      throw_io_error(source, str_cat(where, ": ", err.what()));
    } catch (const nlohmann::json::exception& err) {
      throw_io_error(source, str_cat(where, ": ", err.what()));
    }
  }
  return map;
}

// ---------------------------------------------------------------------------------------------
// Reader

CheckpointReader::CheckpointReader(const std::string& dir) {
  open(dir, read_latest_iteration(dir), str_cat("named by ", checkpoint_tracker_path(dir)));
}

CheckpointReader::CheckpointReader(const std::string& dir, int64_t iteration) { open(dir, iteration, "requested"); }

void CheckpointReader::open(const std::string& dir, int64_t iteration, const std::string& named_by) {
  dir_ = dir;
  iteration_ = iteration;
  iter_dir_ = checkpoint_iter_dir(dir, iteration);
  std::error_code ec;
  if (!fs::is_directory(iter_dir_, ec)) throw_io_error(iter_dir_, str_cat("missing: no checkpoint of iteration ", iteration, " (", named_by, ")"));
  const std::string manifest_path = join(iter_dir_, kManifestFile);
  if (!fs::exists(manifest_path, ec)) throw_io_error(manifest_path, "missing; the checkpoint cannot be verified");
  manifest_ = parse_manifest(manifest_path, read_text(manifest_path));
}

std::string CheckpointReader::path_for(const std::string& filename) const {
  check_file_name(filename);
  return join(iter_dir_, filename);
}

void CheckpointReader::verify_locked(const std::string& filename) {
  if (verified_.count(filename)) return;
  const std::string path = path_for(filename);
  const auto it = manifest_.find(filename);
  if (it == manifest_.end()) throw_io_error(path, str_cat("not listed in ", join(iter_dir_, kManifestFile)));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) throw_io_error(path, str_cat("missing (listed in ", join(iter_dir_, kManifestFile), ")"));
    throw_io_error(path, str_cat("cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    throw_io_error(path, str_cat("is ", describe_path_kind(path), ", not a regular file: only regular files are read as "
                                 "checkpoint file"));
  if (st.st_size == 0) throw_io_error(path, "empty (0 bytes)");
  const std::string found = sha256_file(path);
  if (found != it->second)
    throw_io_error(path, str_cat("SHA-256 mismatch: expected ", it->second, ", found ", found, " (", st.st_size, " bytes)"));
  verified_[filename] = true;
}

void CheckpointReader::verify(const std::string& filename) {
  std::lock_guard<std::mutex> lock(mutex_);
  verify_locked(filename);
}

void CheckpointReader::verify_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : manifest_) verify_locked(entry.first);
}

nlohmann::json CheckpointReader::read_metadata() {
  verify("metadata.json");
  const std::string path = path_for("metadata.json");
  // The bytes parsed are the bytes whose hash matched: a file replaced between the check and
  // the read is refused, not believed.
  const std::string text = read_text(path);
  const std::string found = sha256_bytes(text.data(), text.size());
  if (found != manifest_.at("metadata.json"))
    throw_io_error(path, str_cat("SHA-256 mismatch: expected ", manifest_.at("metadata.json"), ", found ", found,
                                 " (the file changed while it was read)"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw_io_error(path, "invalid JSON");
  return j;
}

const SafetensorsFile& CheckpointReader::file(const std::string& filename) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(filename);
  if (it != files_.end()) return *it->second;
  verify_locked(filename);
  auto f = std::make_unique<SafetensorsFile>(path_for(filename));
  return *files_.emplace(filename, std::move(f)).first->second;
}

void CheckpointReader::set_tensor_map(TensorMap map) { map_ = std::move(map); }

void CheckpointReader::read_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* out) {
  const TensorEntry& e = map_.at(name);
  PTDP_CHECK_ARG(0 <= r0 && r0 <= r1 && r1 <= e.rows() && 0 <= c0 && c0 <= c1 && c1 <= e.cols(),
                 str_cat("tensor '", name, "': block ", block_string(r0, r1, c0, c1), " lies outside its ", e.rows(), " x ",
                     e.cols()));
  if (r0 == r1 || c0 == c1) return;
  PTDP_CHECK_ARG(out != nullptr, str_cat("tensor '", name, "': output is NULL"));
  const int64_t h = r1 - r0, w = c1 - c0;

  // Choose pieces by geometry alone first, so an uncovered block fails before any I/O.
  std::vector<char> covered(static_cast<std::size_t>(h * w), 0);
  std::vector<const TensorPiece*> chosen;
  for (const TensorPiece& p : e.pieces) {
    const int64_t ir0 = std::max(r0, p.r0), ir1 = std::min(r1, p.r1);
    const int64_t ic0 = std::max(c0, p.c0), ic1 = std::min(c1, p.c1);
    if (ir0 >= ir1 || ic0 >= ic1) continue;
    bool useful = false;
    for (int64_t r = ir0; r < ir1; ++r)
      for (int64_t c = ic0; c < ic1; ++c) {
        char& cell = covered[static_cast<std::size_t>((r - r0) * w + (c - c0))];
        useful = useful || cell == 0;
        cell = 1;
      }
    if (useful) chosen.push_back(&p);
  }
  const auto hole = std::find(covered.begin(), covered.end(), 0);
  if (hole != covered.end()) {
    const int64_t at = hole - covered.begin();
    throw_error(ErrorCode::InvalidArgument,
                str_cat("tensor '", name, "': block ", block_string(r0, r1, c0, c1), " is not covered by the checkpoint (",
                    "element [", r0 + at / w, ", ", c0 + at % w, "] is in no stored piece)"));
  }

  std::vector<float> staging;
  for (const TensorPiece* p : chosen) {
    const SafetensorsFile& f = file(p->file);
    const std::string piece_desc = str_cat("piece ", block_string(p->r0, p->r1, p->c0, p->c1), " of '", name, "'");
    if (!f.has(p->name)) throw_io_error(f.path(), str_cat("no tensor '", p->name, "' (", piece_desc, ")"));
    const SafetensorsTensorInfo& t = f.info(p->name);
    if (declared_dtypes_ && t.dtype != e.dtype)
      throw_io_error(f.path(), str_cat("tensor '", p->name, "' is stored as ", st_dtype_name(t.dtype), ", but the tensor map declares '",
                                       name, "' as ", st_dtype_name(e.dtype), " (", piece_desc, ")"));
    const int64_t row0 = std::max<int64_t>(p->stored_row0, 0);  // first row of the piece in the stored tensor
    const bool fits = p->stored_row0 < 0 ? t.rows() == p->r1 - p->r0 : t.rows() >= row0 + (p->r1 - p->r0);
    if (!fits || t.cols() != p->c1 - p->c0)
      throw_io_error(f.path(), str_cat("tensor '", p->name, "' is ", t.rows(), " x ", t.cols(), ", but it should hold ", piece_desc,
                                       p->stored_row0 >= 0 ? str_cat(" from its row ", p->stored_row0) : std::string()));
    const int64_t ir0 = std::max(r0, p->r0), ir1 = std::min(r1, p->r1);
    const int64_t ic0 = std::max(c0, p->c0), ic1 = std::min(c1, p->c1);
    const int64_t sr0 = ir0 - p->r0 + row0, sr1 = ir1 - p->r0 + row0;  // rows of the stored tensor
    if (ic0 == c0 && ic1 == c1) {  // full rows of the output block: read in place
      f.read_block_f32(p->name, sr0, sr1, ic0 - p->c0, ic1 - p->c0, out + (ir0 - r0) * w);
      continue;
    }
    const int64_t iw = ic1 - ic0;
    staging.resize(static_cast<std::size_t>((ir1 - ir0) * iw));
    f.read_block_f32(p->name, sr0, sr1, ic0 - p->c0, ic1 - p->c0, staging.data());
    for (int64_t r = ir0; r < ir1; ++r)
      std::copy_n(staging.data() + (r - ir0) * iw, iw, out + (r - r0) * w + (ic0 - c0));
  }
}

}  // namespace ptdp
