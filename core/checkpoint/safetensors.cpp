#include "core/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "base/half.h"
#include "io/file_read.h"
#include "io/json_text.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; this reader and writer assume a little-endian host");

namespace ptdp {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad_header(const std::string& path, const std::string& what) {
  throw_io_error(path, str_cat("bad safetensors header: ", what));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// The reference implementation's dtype order (its Dtype enum, compared in reverse): wider
// types first, so every tensor starts aligned to its element size.
int layout_rank(StDType d) {
  switch (d) {
    case StDType::I64: return 0;
    case StDType::F64: return 1;
    case StDType::F32: return 2;
    case StDType::I32: return 3;
    case StDType::BF16: return 4;
    case StDType::F16: return 5;
    case StDType::I16: return 6;
    case StDType::I8: return 7;
    case StDType::U8: return 8;
    case StDType::BOOL: return 9;
  }
  return 10;
}

// Element count times element size, or nullopt when it does not fit in uint64.
std::optional<uint64_t> byte_size(StDType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = st_dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto u = static_cast<uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<uint64_t>::max() / u) return std::nullopt;
    n *= u;
  }
  return n;
}

// Whether the product of the non-zero extents fits in int64: rows() and cols() multiply them,
// also when another extent is 0 ([0, 2^62, 4] holds no bytes, but its rows have 2^64 columns).
bool extents_multiply(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d == 0) continue;
    if (d < 0 || n > std::numeric_limits<int64_t>::max() / d) return false;
    n *= d;
  }
  return true;
}

void write_all(int fd, const std::string& path, const void* data, uint64_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; larger buffers take several.
    const std::size_t chunk = static_cast<std::size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_io_error(path, str_cat("write failed: ", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}

void to_f32(StDType dtype, const unsigned char* src, int64_t n, float* out) {
  switch (dtype) {
    case StDType::F32: std::memcpy(out, src, static_cast<std::size_t>(n) * 4); return;
    case StDType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      return;
    case StDType::F16:
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = dtype == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default: break;
  }
  throw_error(ErrorCode::InvalidArgument, str_cat("cannot convert dtype ", st_dtype_name(dtype), " to float"));
}

void check_block(const std::string& path, const SafetensorsTensorInfo& t, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1) {
  const int64_t rows = t.rows(), cols = t.cols();
  PTDP_CHECK_ARG(0 <= r0 && r0 <= r1 && r1 <= rows && 0 <= c0 && c0 <= c1 && c1 <= cols,
                 str_cat(path, ": block rows [", r0, ", ", r1, ") x cols [", c0, ", ", c1, ") lies outside tensor '",
                     t.name, "' of ", rows, " x ", cols));
}

}  // namespace

std::size_t st_dtype_size(StDType dtype) {
  switch (dtype) {
    case StDType::F64:
    case StDType::I64: return 8;
    case StDType::F32:
    case StDType::I32: return 4;
    case StDType::F16:
    case StDType::BF16:
    case StDType::I16: return 2;
    case StDType::I8:
    case StDType::U8:
    case StDType::BOOL: return 1;
  }
  throw_error(ErrorCode::InvalidArgument, str_cat("unknown safetensors dtype ", static_cast<int>(dtype)));
}

const char* st_dtype_name(StDType dtype) {
  switch (dtype) {
    case StDType::F64: return "F64";
    case StDType::F32: return "F32";
    case StDType::F16: return "F16";
    case StDType::BF16: return "BF16";
    case StDType::I64: return "I64";
    case StDType::I32: return "I32";
    case StDType::I16: return "I16";
    case StDType::I8: return "I8";
    case StDType::U8: return "U8";
    case StDType::BOOL: return "BOOL";
  }
  return "unknown";
}

std::optional<StDType> st_dtype_parse(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(StDType::BOOL); ++i) {
    const auto d = static_cast<StDType>(i);
    if (name == st_dtype_name(d)) return d;
  }
  return std::nullopt;
}

bool st_dtype_is_float(StDType dtype) {
  return dtype == StDType::F64 || dtype == StDType::F32 || dtype == StDType::F16 || dtype == StDType::BF16;
}

StDType st_dtype_from(DType dtype) {
  switch (dtype) {
    case DType::F32: return StDType::F32;
    case DType::BF16: return StDType::BF16;
    case DType::F16: return StDType::F16;
    case DType::I32: return StDType::I32;
    case DType::I64: return StDType::I64;
  }
  throw_error(ErrorCode::InvalidArgument, str_cat("unknown dtype ", static_cast<int>(dtype)));
}

int64_t st_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    PTDP_CHECK_ARG(d >= 0, str_cat("negative extent in shape ", shape_string(shape)));
    PTDP_CHECK_ARG(d == 0 || n <= std::numeric_limits<int64_t>::max() / d,
                   str_cat("shape ", shape_string(shape), " has more elements than int64 holds"));
    n *= d;
  }
  return n;
}

int64_t SafetensorsTensorInfo::rows() const { return shape.empty() ? 1 : shape[0]; }

int64_t SafetensorsTensorInfo::cols() const {
  int64_t c = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) c *= shape[i];
  return c;
}

// ---------------------------------------------------------------------------------------------
// Writer

SafetensorsWriter::Pending& SafetensorsWriter::push(const std::string& name, StDType dtype,
                                                    const std::vector<int64_t>& shape) {
  PTDP_CHECK_ARG(!name.empty(), std::string("safetensors tensor name is empty"));
  PTDP_CHECK_ARG(name != "__metadata__", std::string("'__metadata__' is reserved and cannot name a tensor"));
  for (const Pending& t : tensors_) PTDP_CHECK_ARG(t.name != name, str_cat("tensor '", name, "' added twice"));
  (void)st_dtype_size(dtype);
  const auto nbytes = byte_size(dtype, shape);
  PTDP_CHECK_ARG(nbytes.has_value(), str_cat("tensor '", name, "': bad shape ", shape_string(shape)));
  tensors_.push_back(Pending{name, dtype, shape, nullptr, {}, *nbytes});
  return tensors_.back();
}

void SafetensorsWriter::add(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                            const void* data) {
  const auto nbytes = byte_size(dtype, shape);
  PTDP_CHECK_ARG(data != nullptr || (nbytes && *nbytes == 0), str_cat("tensor '", name, "': data is NULL"));
  push(name, dtype, shape).data = data;
}

void SafetensorsWriter::add_owned(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                                  std::vector<unsigned char> bytes) {
  const auto nbytes = byte_size(dtype, shape);
  PTDP_CHECK_ARG(nbytes && *nbytes == bytes.size(),
                 str_cat("tensor '", name, "': ", bytes.size(), " bytes given, dtype ", st_dtype_name(dtype),
                     " and shape ", shape_string(shape), " need ", nbytes ? *nbytes : 0));
  Pending& t = push(name, dtype, shape);
  t.owned = std::move(bytes);
  t.data = t.owned.data();
}

void SafetensorsWriter::add_from_f32(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                                     const float* data) {
  PTDP_CHECK_ARG(st_dtype_is_float(dtype),
                 str_cat("tensor '", name, "': cannot store floats as ", st_dtype_name(dtype)));
  const int64_t n = st_numel(shape);
  PTDP_CHECK_ARG(data != nullptr || n == 0, str_cat("tensor '", name, "': data is NULL"));
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * st_dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    unsigned char* dst = bytes.data() + static_cast<std::size_t>(i) * st_dtype_size(dtype);
    if (dtype == StDType::F32) {
      std::memcpy(dst, data + i, 4);
    } else if (dtype == StDType::F64) {
      const double v = data[i];
      std::memcpy(dst, &v, 8);
    } else {
      const uint16_t h = dtype == StDType::F16 ? f32_to_f16(data[i]) : f32_to_bf16(data[i]);
      std::memcpy(dst, &h, 2);
    }
  }
  add_owned(name, dtype, shape, std::move(bytes));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

std::string safetensors_header_bytes(const std::vector<SafetensorsTensorInfo>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  for (const SafetensorsTensorInfo& t : tensors) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = st_dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {t.begin, t.end};
    header[t.name] = std::move(entry);
  }
  std::string json;
  try {
    // Not json_text: a tensor name is refused rather than renamed (names must be UTF-8).
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCode::InvalidArgument, str_cat("safetensors names and metadata must be UTF-8: ", e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

uint64_t SafetensorsWriter::write(const std::string& path) const {
  std::vector<const Pending*> order;
  for (const Pending& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    const int ra = layout_rank(a->dtype), rb = layout_rank(b->dtype);
    return ra != rb ? ra < rb : a->name < b->name;
  });
  std::vector<SafetensorsTensorInfo> infos;
  uint64_t offset = 0;
  for (const Pending* t : order) {
    infos.push_back(SafetensorsTensorInfo{t->name, t->dtype, t->shape, offset, offset + t->nbytes});
    offset += t->nbytes;
  }
  const std::string header = safetensors_header_bytes(infos, metadata_);

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io_error(path, str_cat("cannot create: ", std::strerror(errno)));
  try {
    write_all(fd, path, header.data(), header.size());
    for (const Pending* t : order) write_all(fd, path, t->data, t->nbytes);
    if (::fsync(fd) != 0) throw_io_error(path, str_cat("fsync failed: ", std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw_io_error(path, str_cat("close failed: ", std::strerror(err)));
  }
  return header.size() + offset;
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  {
    // Regular files only (opened non-blocking: a FIFO never hangs us); reads stay within the
    // size observed here, so a file that grows is read as it was.
    RegularFile f(path, "safetensors file", kNoSizeLimit);
    file_size_ = f.size();
    fd_ = f.release();
  }
  try {
    if (file_size_ < 8) throw_io_error(path, str_cat("truncated: ", file_size_, " bytes, expected at least 8"));

    uint64_t header_len = 0;
    pread_exact(0, &header_len, 8);
    if (header_len > kMaxHeaderBytes)
      bad_header(path, str_cat("header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
    if (8 + header_len > file_size_)
      throw_io_error(path, str_cat("truncated: ", file_size_, " bytes, expected at least ", 8 + header_len,
                         " (8 + header length ", header_len, ")"));
    data_start_ = 8 + header_len;
    std::string text(static_cast<std::size_t>(header_len), '\0');
    pread_exact(8, text.data(), text.size());

    const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) bad_header(path, "invalid JSON");
    if (!header.is_object()) bad_header(path, "the header is not a JSON object");

    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) bad_header(path, "__metadata__ is not an object");
        for (const auto& [k, v] : entry.items()) {
          if (!v.is_string()) bad_header(path, str_cat("__metadata__ value of '", k, "' is not a string"));
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      const std::string where = str_cat("tensor '", name, "'");
      if (!entry.is_object()) bad_header(path, str_cat(where, " is not an object"));
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field)) bad_header(path, str_cat(where, " has no ", field));
      SafetensorsTensorInfo info;
      info.name = name;
      const nlohmann::json& dtype = entry["dtype"];
      if (!dtype.is_string()) bad_header(path, str_cat(where, ": dtype is not a string"));
      const auto parsed = st_dtype_parse(dtype.get<std::string>());
      if (!parsed) bad_header(path, str_cat(where, ": unknown dtype '", dtype.get<std::string>(), "'"));
      info.dtype = *parsed;
      const nlohmann::json& shape = entry["shape"];
      if (!shape.is_array()) bad_header(path, str_cat(where, ": shape is not an array"));
      for (const nlohmann::json& d : shape) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          bad_header(path, str_cat(where, ": shape ", json_text(shape), " is not a list of non-negative integers"));
        info.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
      }
      const nlohmann::json& offsets = entry["data_offsets"];
      if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
          !offsets[1].is_number_unsigned())
        bad_header(path,
                   str_cat(where, ": data_offsets ", json_text(offsets), " is not a pair of non-negative integers"));
      info.begin = offsets[0].get<uint64_t>();
      info.end = offsets[1].get<uint64_t>();
      if (info.end < info.begin)
        bad_header(path, str_cat(where, ": data_offsets [", info.begin, ", ", info.end, "] end before they begin"));
      const auto need = byte_size(info.dtype, info.shape);
      if (!need || !extents_multiply(info.shape)) bad_header(path, str_cat(where, ": shape ", shape_string(info.shape), " is too large"));
      if (*need != info.end - info.begin)
        bad_header(path, str_cat(where, ": data_offsets [", info.begin, ", ", info.end, "] hold ", info.end - info.begin,
                             " bytes, but dtype ", st_dtype_name(info.dtype), " and shape ",
                             shape_string(info.shape), " need ", *need));
      tensors_.push_back(std::move(info));
    }

    // The tensors must tile [0, buffer end) exactly and the buffer must end with the file.
    const uint64_t buffer_size = file_size_ - data_start_;
    std::vector<const SafetensorsTensorInfo*> by_offset;
    for (const auto& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const SafetensorsTensorInfo* previous = nullptr;
    for (const SafetensorsTensorInfo* t : by_offset) {
      if (t->end > buffer_size)
        throw_io_error(path, str_cat("truncated: ", file_size_, " bytes, expected at least ", data_start_ + t->end, " (tensor '",
                           t->name, "' has data_offsets [", t->begin, ", ", t->end, "] in a buffer of ",
                           buffer_size, " bytes)"));
      if (t->begin < cursor)
        bad_header(path, str_cat("tensors '", previous->name, "' and '", t->name, "' overlap (data_offsets [",
                             previous->begin, ", ", previous->end, "] and [", t->begin, ", ", t->end, "])"));
      if (t->begin > cursor)
        bad_header(path, str_cat("buffer bytes [", cursor, ", ", t->begin, ") belong to no tensor"));
      cursor = t->end;
      previous = t;
    }
    if (cursor != buffer_size)
      bad_header(path, str_cat(buffer_size - cursor, " bytes after the last tensor (the buffer holds ", buffer_size,
                           " bytes, the tensors ", cursor, ")"));

    std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (...) {
    close_fd();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { close_fd(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_size_(other.file_size_),
      data_start_(other.data_start_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    close_fd();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    data_start_ = other.data_start_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void SafetensorsFile::pread_exact(uint64_t offset, void* out, std::size_t n) const {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_io_error(path_, str_cat("read failed at offset ", offset, ": ", std::strerror(errno)));
    }
    if (r == 0) throw_io_error(path_, str_cat("truncated: the file ended at offset ", offset, " while reading"));
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

bool SafetensorsFile::has(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = index_.find(name);
  PTDP_CHECK_ARG(it != index_.end(), str_cat(path_, ": no tensor '", name, "'"));
  return tensors_[it->second];
}

void SafetensorsFile::read_raw(const std::string& name, void* out, std::size_t out_bytes) const {
  const SafetensorsTensorInfo& t = info(name);
  PTDP_CHECK_ARG(out_bytes == t.end - t.begin, str_cat(path_, ": tensor '", name, "' has ", t.end - t.begin,
                                                   " bytes, the buffer ", out_bytes));
  PTDP_CHECK_ARG(out != nullptr || out_bytes == 0, str_cat(path_, ": NULL output for tensor '", name, "'"));
  if (out_bytes > 0) pread_exact(data_start_ + t.begin, out, out_bytes);
}

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  const SafetensorsTensorInfo& t = info(name);
  read_block_f32(name, 0, t.rows(), 0, t.cols(), out);
}

void SafetensorsFile::read_block_raw(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                     void* out) const {
  const SafetensorsTensorInfo& t = info(name);
  check_block(path_, t, r0, r1, c0, c1);
  const int64_t cols = t.cols();
  if (r0 == r1 || c0 == c1) return;
  PTDP_CHECK_ARG(out != nullptr, str_cat(path_, ": NULL output for tensor '", name, "'"));
  const uint64_t elem = st_dtype_size(t.dtype);
  const uint64_t row_bytes = static_cast<uint64_t>(c1 - c0) * elem;
  const uint64_t stride = static_cast<uint64_t>(cols) * elem;
  const uint64_t first = data_start_ + t.begin + static_cast<uint64_t>(r0) * stride + static_cast<uint64_t>(c0) * elem;
  auto* dst = static_cast<unsigned char*>(out);
  if (c0 == 0 && c1 == cols) {  // whole rows are one contiguous range
    pread_exact(first, dst, static_cast<std::size_t>(row_bytes * static_cast<uint64_t>(r1 - r0)));
    return;
  }
  for (int64_t r = 0; r < r1 - r0; ++r)
    pread_exact(first + static_cast<uint64_t>(r) * stride, dst + static_cast<uint64_t>(r) * row_bytes,
                static_cast<std::size_t>(row_bytes));
}

void SafetensorsFile::read_block_f32(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                     float* out) const {
  const SafetensorsTensorInfo& t = info(name);
  PTDP_CHECK_ARG(st_dtype_is_float(t.dtype), str_cat(path_, ": tensor '", name, "' has dtype ", st_dtype_name(t.dtype),
                                                 ", which does not convert to float"));
  if (t.dtype == StDType::F32) {
    read_block_raw(name, r0, r1, c0, c1, out);
    return;
  }
  check_block(path_, t, r0, r1, c0, c1);
  const int64_t n = (r1 - r0) * (c1 - c0);
  std::vector<unsigned char> raw(static_cast<std::size_t>(n) * st_dtype_size(t.dtype));
  read_block_raw(name, r0, r1, c0, c1, raw.data());
  to_f32(t.dtype, raw.data(), n, out);
}

}  // namespace ptdp
