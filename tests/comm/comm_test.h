// Shared helpers of the multi-rank tests: failure counting with messages, the closed-form
// PTD-P layout (Megatron's order), and tensors built from and read back into host vectors.
//
// Only the public C API (ptdp.h, ptdp_mpi.h) and MPI are used. Every rank runs every check;
// finish() sums the failures over MPI_COMM_WORLD, rank 0 prints "N passed, M failed", and the
// returned exit code is non-zero on every rank when any rank failed.
#pragma once

// Only MPI's C interface is used: keep the deprecated C++ bindings (and their warnings) out.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <ptdp/ptdp.h>
#include <ptdp/ptdp_mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace ct {

// ---- failure counting ----------------------------------------------------------------------

inline int g_rank = 0;          // world rank, for messages
inline long g_passed = 0;
inline long g_failed = 0;
inline std::string g_context;   // e.g. "W=8 t=2 p=2 v=1 kind=tensor"

/// Sets the prefix every failure message carries until the next call.
inline void context(const std::string& c) { g_context = c; }

inline void fail(const std::string& check, const std::string& expected, const std::string& got,
                 const char* last_error) {
  ++g_failed;
  std::fprintf(stderr, "[rank %d] FAIL %s%s%s: expected %s, got %s (ptdp_last_error: \"%s\")\n", g_rank,
               g_context.c_str(), g_context.empty() ? "" : ": ", check.c_str(), expected.c_str(),
               got.c_str(), last_error);
  std::fflush(stderr);
}

/// A boolean check; `got` describes what was seen when it fails.
inline bool expect(bool ok, const std::string& check, const std::string& expected = "true",
                   const std::string& got = "false") {
  if (ok) {
    ++g_passed;
    return true;
  }
  fail(check, expected, got, ptdp_last_error());
  return false;
}

inline std::string status_str(ptdp_status s) {
  return std::to_string(static_cast<int>(s)) + " (" + ptdp_status_string(s) + ")";
}

/// Checks a status. Reads ptdp_last_error() before anything else can clear it and returns it,
/// so callers can check the message too; after a success it must be empty, so callers test
/// `CT_OK(call).empty()` to go on only when the call succeeded.
inline std::string expect_status(ptdp_status got, ptdp_status want, const std::string& check) {
  const std::string msg = ptdp_last_error();
  if (got == want && got == PTDP_SUCCESS && !msg.empty()) {
    // The API clears the message on success; callers use an empty message to mean success.
    fail(check + " (the last-error message after success)", "\"\"", "\"" + msg + "\"", msg.c_str());
    return msg;
  }
  if (got == want) {
    ++g_passed;
  } else {
    fail(check, status_str(want), status_str(got), msg.c_str());
  }
  return msg;
}

#define CT_OK(call) ::ct::expect_status((call), PTDP_SUCCESS, #call)
#define CT_STATUS(call, want) ::ct::expect_status((call), (want), #call)

/// Checks that `message` (from expect_status) contains every one of `parts`.
inline void expect_message(const std::string& message, std::initializer_list<std::string> parts,
                           const std::string& check) {
  for (const std::string& p : parts) {
    if (message.find(p) != std::string::npos) {
      ++g_passed;
    } else {
      ++g_failed;
      std::fprintf(stderr, "[rank %d] FAIL %s%s%s: expected the message to contain \"%s\", got \"%s\"\n",
                   g_rank, g_context.c_str(), g_context.empty() ? "" : ": ", check.c_str(), p.c_str(),
                   message.c_str());
      std::fflush(stderr);
    }
  }
}

template <typename T>
std::string str(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
    return b;
  } else {
    return std::to_string(v);
  }
}

template <typename T>
std::string str(const std::vector<T>& v) {
  std::string s = "[";
  const std::size_t n = v.size() > 16 ? 16 : v.size();
  for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + str(v[i]);
  if (v.size() > n) s += ", ... (" + std::to_string(v.size()) + " elements)";
  return s + "]";
}

template <typename T>
bool expect_eq(const T& got, const T& want, const std::string& check) {
  return expect(got == want, check, str(want), str(got));
}

/// Element-wise comparison; floats within a relative tolerance (0 means exact).
template <typename T>
bool expect_vec(const std::vector<T>& got, const std::vector<T>& want, const std::string& check,
                double rel_tol = 0) {
  bool ok = got.size() == want.size();
  std::size_t bad = 0;
  for (std::size_t i = 0; ok && i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool same = rel_tol == 0 ? got[i] == want[i] : std::fabs(g - w) <= rel_tol * std::fmax(1.0, std::fabs(w));
    if (!same) {
      ok = false;
      bad = i;
    }
  }
  if (ok) return expect(true, check);
  std::string got_s = str(got);
  if (got.size() == want.size()) {
    got_s += " (first difference at [" + std::to_string(bad) + "]: " + str(got[bad]) + " vs " + str(want[bad]) + ")";
  }
  return expect(false, check, str(want), got_s);
}

/// MPI_Init, then this process's rank and the world size (the rank also labels failures).
inline void start(int* argc, char*** argv, int* rank, int* size) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  g_rank = *rank;
}

/// MPI_Bcast over MPI_COMM_WORLD whose waiting ranks sleep (0.2 ms between polls) instead of
/// spinning: when a job oversubscribes its cores (8 ranks on 2 in CI), the ranks still computing
/// what is broadcast keep the cores.
inline void bcast_sleeping(void* buf, int count, MPI_Datatype type, int root) {
  MPI_Request req;
  MPI_Ibcast(buf, count, type, root, MPI_COMM_WORLD, &req);
  for (int done = 0;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// `bytes` of rank `root` on every rank (the size first), through bcast_sleeping.
inline void bcast_bytes(std::vector<char>& bytes, int root) {
  long long n = static_cast<long long>(bytes.size());
  bcast_sleeping(&n, 1, MPI_LONG_LONG, root);
  bytes.resize(static_cast<std::size_t>(n));
  if (n > 0) bcast_sleeping(bytes.data(), static_cast<int>(n), MPI_CHAR, root);
}

/// Sums the failures over MPI_COMM_WORLD; rank 0 prints the summary. Returns the exit code.
inline int finish(const char* program) {
  long local[2] = {g_passed, g_failed};
  long total[2] = {0, 0};
  MPI_Allreduce(local, total, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("%s: %ld passed, %ld failed\n", program, total[0], total[1]);
    std::fflush(stdout);
  }
  return total[1] == 0 ? 0 : 1;
}

// ---- the closed-form layout ------------------------------------------------------------------

inline const char* kind_name(ptdp_group_kind k) {
  switch (k) {
    case PTDP_GROUP_WORLD: return "world";
    case PTDP_GROUP_TENSOR: return "tensor";
    case PTDP_GROUP_PIPELINE: return "pipeline";
    case PTDP_GROUP_DATA: return "data";
    case PTDP_GROUP_MODEL: return "model";
    case PTDP_GROUP_EMBEDDING: return "embedding";
    case PTDP_GROUP_CONTEXT: return "context";
    case PTDP_GROUP_DATA_CONTEXT: return "data+context";
    case PTDP_GROUP_EXPERT_TENSOR: return "expert-tensor";
    case PTDP_GROUP_EXPERT_MODEL: return "expert-model";
    case PTDP_GROUP_EXPERT_DATA: return "expert-data";
    case PTDP_GROUP_EXPERT_TENSOR_AND_MODEL: return "expert-tensor+model";
    case PTDP_GROUP_TENSOR_CONTEXT: return "tensor+context";
  }
  return "?";
}

inline constexpr ptdp_group_kind kAllKinds[] = {PTDP_GROUP_WORLD, PTDP_GROUP_TENSOR, PTDP_GROUP_PIPELINE,
                                                PTDP_GROUP_DATA,  PTDP_GROUP_MODEL,  PTDP_GROUP_EMBEDDING};

struct Layout {
  int W = 1, t = 1, p = 1, v = 1;
  int d() const { return W / (t * p); }
  int pp(int r) const { return r / (d() * t); }
  int dp(int r) const { return (r / t) % d(); }
  int tp(int r) const { return r % t; }
  int rank_of(int pp_, int dp_, int tp_) const { return pp_ * (d() * t) + dp_ * t + tp_; }

  /// World ranks of `r`'s group of `kind`, in group-rank order (empty: no such group).
  std::vector<int32_t> members(ptdp_group_kind kind, int r) const {
    std::vector<int32_t> m;
    switch (kind) {
      case PTDP_GROUP_WORLD:
        for (int i = 0; i < W; ++i) m.push_back(i);
        break;
      case PTDP_GROUP_TENSOR:
      // c = 1 and one expert-parallel rank with etp = t here: these are the tensor group.
      case PTDP_GROUP_TENSOR_CONTEXT:
      case PTDP_GROUP_EXPERT_TENSOR:
      case PTDP_GROUP_EXPERT_TENSOR_AND_MODEL:
        for (int i = 0; i < t; ++i) m.push_back(rank_of(pp(r), dp(r), i));
        break;
      case PTDP_GROUP_PIPELINE:
        for (int k = 0; k < p; ++k) m.push_back(rank_of(k, dp(r), tp(r)));
        break;
      case PTDP_GROUP_DATA:
      case PTDP_GROUP_DATA_CONTEXT:  // c = 1 here: the data group
      case PTDP_GROUP_EXPERT_DATA:   // e = 1, etp = t: the data group
        for (int j = 0; j < d(); ++j) m.push_back(rank_of(pp(r), j, tp(r)));
        break;
      case PTDP_GROUP_CONTEXT:       // c = 1 here: r alone
      case PTDP_GROUP_EXPERT_MODEL:  // e = 1 here: r alone
        m.push_back(r);
        break;
      case PTDP_GROUP_MODEL:  // the t*p ranks sharing r's data-parallel index, ascending
        for (int k = 0; k < p; ++k)
          for (int i = 0; i < t; ++i) m.push_back(rank_of(k, dp(r), i));
        break;
      case PTDP_GROUP_EMBEDDING:
        if (pp(r) == 0 || pp(r) == p - 1) {
          m.push_back(rank_of(0, dp(r), tp(r)));
          if (p > 1) m.push_back(rank_of(p - 1, dp(r), tp(r)));
        }
        break;
    }
    return m;
  }

  std::string str() const {
    return "W=" + std::to_string(W) + " t=" + std::to_string(t) + " p=" + std::to_string(p) +
           " v=" + std::to_string(v) + " (d=" + std::to_string(d()) + ")";
  }

  ptdp_parallel_options options() const {
    ptdp_parallel_options o;
    ptdp_parallel_options_init(&o);
    o.tensor_model_parallel_size = t;
    o.pipeline_model_parallel_size = p;
    o.virtual_pipeline_model_parallel_size = v;
    return o;
  }
};

/// Parses "t,p" or "t,p,v".
inline bool parse_layout(const char* s, int world, Layout* out) {
  Layout l;
  l.W = world;
  const int n = std::sscanf(s, "%d,%d,%d", &l.t, &l.p, &l.v);
  if (n < 2) return false;
  if (l.t <= 0 || l.p <= 0 || l.v <= 0 || world % (l.t * l.p) != 0) return false;
  *out = l;
  return true;
}

// ---- tensors ---------------------------------------------------------------------------------

inline const char* dtype_name(ptdp_dtype d) {
  switch (d) {
    case PTDP_DTYPE_F32: return "f32";
    case PTDP_DTYPE_BF16: return "bf16";
    case PTDP_DTYPE_F16: return "f16";
    case PTDP_DTYPE_I32: return "i32";
    case PTDP_DTYPE_I64: return "i64";
  }
  return "?";
}

/// A tensor handle released at scope exit.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(ptdp_tensor h) : h_(h) {}
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  Tensor& operator=(Tensor&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Tensor() { ptdp_tensor_destroy(h_); }
  ptdp_tensor get() const { return h_; }
  operator ptdp_tensor() const { return h_; }  // NOLINT: handy in API calls

 private:
  ptdp_tensor h_ = nullptr;
};

/// A 1-d tensor of `dtype` holding `values` (floating dtypes other than f32 go through a cast
/// from f32, so the values must be exactly representable).
inline Tensor make(ptdp_dtype dtype, const std::vector<double>& values) {
  const int64_t shape[1] = {static_cast<int64_t>(values.size())};
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  ptdp_tensor h = nullptr;
  ptdp_status s = PTDP_SUCCESS;
  if (dtype == PTDP_DTYPE_I32) {
    std::vector<int32_t> v(values.begin(), values.end());
    o.dtype = dtype;
    s = ptdp_tensor_create(&o, 1, shape, v.data(), v.size() * sizeof(int32_t), &h);
  } else if (dtype == PTDP_DTYPE_I64) {
    std::vector<int64_t> v(values.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(values[i]);
    o.dtype = dtype;
    s = ptdp_tensor_create(&o, 1, shape, v.data(), v.size() * sizeof(int64_t), &h);
  } else {
    std::vector<float> v(values.begin(), values.end());
    o.dtype = PTDP_DTYPE_F32;
    s = ptdp_tensor_create(&o, 1, shape, v.data(), v.size() * sizeof(float), &h);
    if (s == PTDP_SUCCESS && dtype != PTDP_DTYPE_F32) {
      ptdp_tensor c = nullptr;
      s = ptdp_tensor_cast(h, dtype, &c);
      ptdp_tensor_destroy(h);
      h = c;
    }
  }
  expect_status(s, PTDP_SUCCESS, std::string("create a ") + dtype_name(dtype) + " tensor");
  return Tensor(h);
}

/// A zero-filled 1-d tensor of n elements.
inline Tensor zeros(ptdp_dtype dtype, int64_t n) { return make(dtype, std::vector<double>(static_cast<std::size_t>(n), 0.0)); }

/// The elements of `t` as doubles (i64 values beyond 2^53 are not used by these tests).
inline std::vector<double> read(ptdp_tensor t) {
  int64_t n = 0;
  ptdp_dtype dtype = PTDP_DTYPE_F32;
  if (ptdp_tensor_numel(t, &n) != PTDP_SUCCESS || ptdp_tensor_dtype(t, &dtype) != PTDP_SUCCESS) {
    expect(false, "read a tensor back", "a live tensor", "an error");
    return {};
  }
  std::vector<double> out(static_cast<std::size_t>(n));
  if (dtype == PTDP_DTYPE_I32) {
    std::vector<int32_t> v(out.size());
    expect_status(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(int32_t)), PTDP_SUCCESS, "copy_to_host");
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  } else if (dtype == PTDP_DTYPE_I64) {
    std::vector<int64_t> v(out.size());
    expect_status(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(int64_t)), PTDP_SUCCESS, "copy_to_host");
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(v[i]);
  } else {
    ptdp_tensor f = t;
    ptdp_tensor cast = nullptr;
    if (dtype != PTDP_DTYPE_F32) {
      expect_status(ptdp_tensor_cast(t, PTDP_DTYPE_F32, &cast), PTDP_SUCCESS, "cast to f32 for reading");
      f = cast;
    }
    std::vector<float> v(out.size());
    expect_status(ptdp_tensor_copy_to_host(f, v.data(), v.size() * sizeof(float)), PTDP_SUCCESS, "copy_to_host");
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i];
    ptdp_tensor_destroy(cast);
  }
  return out;
}

/// The exact i64 elements of `t`.
inline std::vector<int64_t> read_i64(ptdp_tensor t) {
  int64_t n = 0;
  ptdp_tensor_numel(t, &n);
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  expect_status(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(int64_t)), PTDP_SUCCESS, "copy_to_host i64");
  return v;
}

// ---- misc ------------------------------------------------------------------------------------

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Runtime options with a generous deadline, so a deadlock shows up as PTDP_ERR_TIMEOUT naming
/// the operation rather than as a ctest timeout.
inline ptdp_runtime_options runtime_options(double timeout_s = 30.0) {
  ptdp_runtime_options o;
  ptdp_runtime_options_init(&o);
  o.comm_timeout_s = timeout_s;
  return o;
}

/// Polls `work` with ptdp_work_test until it reports done or `limit_s` passes.
inline bool poll_until_done(ptdp_work work, const std::string& what, double limit_s = 30.0) {
  const double start = now_s();
  int32_t done = 0;
  while (true) {
    const ptdp_status s = ptdp_work_test(work, &done);
    if (s != PTDP_SUCCESS) {
      expect_status(s, PTDP_SUCCESS, "ptdp_work_test(" + what + ")");
      return false;
    }
    if (done == 1) return expect(true, "ptdp_work_test(" + what + ") reports done");
    if (done != 0) return expect(false, "ptdp_work_test(" + what + ") sets done to 0 or 1", "0 or 1", str(done));
    if (now_s() - start > limit_s) {
      return expect(false, "ptdp_work_test(" + what + ") reports done within " + str(limit_s) + " s", "done", "still pending");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// A model's parameters through the C API, in ptdp_model_param_info()'s order: names and
/// global-shape values, the word embedding and output layer cut to their first `vocab_rows`
/// rows (the vocabulary without its padding) when vocab_rows > 0.
struct ModelParams {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
};

inline ModelParams read_model_params(ptdp_model m, int64_t vocab_rows = 0) {
  ModelParams out;
  int32_t n = 0;
  CT_OK(ptdp_model_num_params(m, &n));
  for (int32_t i = 0; i < n; ++i) {
    char name[160];
    int32_t nd = 0;
    int64_t shape[2] = {0, 1};
    CT_OK(ptdp_model_param_info(m, i, name, sizeof name, &nd, shape, nullptr));
    const int64_t cols = nd == 2 ? shape[1] : 1;
    std::vector<float> x(static_cast<std::size_t>(shape[0] * cols));
    CT_OK(ptdp_model_get_param(m, name, x.data(), x.size() * sizeof(float)));
    const std::string nm = name;
    if (vocab_rows > 0 && (nm == "embedding.word_embeddings.weight" || nm == "output_layer.weight")) {
      x.resize(static_cast<std::size_t>(vocab_rows * cols));
    }
    out.names.push_back(nm);
    out.values.push_back(std::move(x));
  }
  return out;
}

// ---- results and parameters as bytes (to broadcast them with bcast_bytes) ------------------

template <class T>
void put_value(std::vector<char>& b, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const char* p = reinterpret_cast<const char*>(&v);
  b.insert(b.end(), p, p + sizeof v);
}

/// The value at `at` (advanced past it); zero when the bytes end first.
template <class T>
T take_value(const std::vector<char>& b, std::size_t& at) {
  T v{};
  if (at + sizeof v <= b.size()) std::memcpy(&v, b.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

/// Iteration results (plain data) appended to `b`.
inline void put_results(std::vector<char>& b, const std::vector<ptdp_iteration_result>& r) {
  put_value(b, r.size());
  for (const ptdp_iteration_result& x : r) put_value(b, x);
}

inline std::vector<ptdp_iteration_result> take_results(const std::vector<char>& b, std::size_t& at) {
  std::vector<ptdp_iteration_result> r;
  const std::size_t n = take_value<std::size_t>(b, at);
  for (std::size_t i = 0; i < n && at < b.size(); ++i) r.push_back(take_value<ptdp_iteration_result>(b, at));
  return r;
}

/// Parameter names and values appended to `b`.
inline void put_params(std::vector<char>& b, const ModelParams& p) {
  put_value(b, p.names.size());
  for (std::size_t i = 0; i < p.names.size(); ++i) {
    put_value(b, p.names[i].size());
    b.insert(b.end(), p.names[i].begin(), p.names[i].end());
    put_value(b, p.values[i].size());
    const char* v = reinterpret_cast<const char*>(p.values[i].data());
    b.insert(b.end(), v, v + p.values[i].size() * sizeof(float));
  }
}

inline ModelParams take_params(const std::vector<char>& b, std::size_t& at) {
  ModelParams p;
  const std::size_t n = take_value<std::size_t>(b, at);
  for (std::size_t i = 0; i < n && at <= b.size(); ++i) {
    const std::size_t declared = take_value<std::size_t>(b, at);
    const std::size_t len = std::min(declared, b.size() - std::min(at, b.size()));
    p.names.emplace_back(b.data() + std::min(at, b.size()), len);
    at += len;
    const std::size_t count = std::min(take_value<std::size_t>(b, at), (b.size() - std::min(at, b.size())) / sizeof(float));
    std::vector<float> v(count);
    if (count > 0) std::memcpy(v.data(), b.data() + at, count * sizeof(float));
    at += count * sizeof(float);
    p.values.push_back(std::move(v));
  }
  return p;
}

}  // namespace ct
