// bench_comm: time, algorithm bandwidth and bus bandwidth of ptdp's collectives for message
// sizes 1 KiB to 64 MiB, in the nccl-tests convention:
//   algbw = S / t, with S the size of the whole tensor (the gathered one for all_gather,
//           the scattered one for reduce_scatter);
//   busbw = algbw * 2(n-1)/n (all_reduce), * (n-1)/n (all_gather, reduce_scatter), * 1
//           (broadcast, sendrecv).
// Run under mpirun: mpirun -np 4 bench_comm [--device cpu|cuda] [--min-bytes 1K] ...
// The time of one size is the slowest rank's mean over --iters iterations after --warmup.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/comm/runtime.h"
#include "core/parallel/groups.h"
#include "io/json_number.h"

#ifdef PTDP_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace {

struct Options {
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 64 << 20;
  int iters = 20;
  int warmup = 3;
  bool verify = false;
  std::string device = "cpu";
  std::string json;
  std::string ops = "all_reduce,all_gather,reduce_scatter,broadcast,sendrecv";
};

int64_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s) throw std::runtime_error(std::string("not a size: ") + s);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<int64_t>(v);
}

void usage() {
  std::puts(
      "usage: mpirun -np N bench_comm [options]\n"
      "  --min-bytes SIZE   smallest message (default 1K; K, M, G suffixes)\n"
      "  --max-bytes SIZE   largest message (default 64M); sizes double in between\n"
      "  --iters N          timed iterations per size (default 20)\n"
      "  --warmup N         untimed iterations per size (default 3)\n"
      "  --ops LIST         comma-separated: all_reduce,all_gather,reduce_scatter,broadcast,sendrecv\n"
      "  --device cpu|cuda  tensors in host memory (MPI) or GPU memory (NCCL)\n"
      "  --verify           keep the per-collective consistency check on (off by default here)\n"
      "  --json PATH        also write the figures as JSON (rank 0)");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--min-bytes") o.min_bytes = parse_size(next());
    else if (a == "--max-bytes") o.max_bytes = parse_size(next());
    else if (a == "--iters") o.iters = std::atoi(next());
    else if (a == "--warmup") o.warmup = std::atoi(next());
    else if (a == "--ops") o.ops = next();
    else if (a == "--device") o.device = next();
    else if (a == "--verify") o.verify = true;
    else if (a == "--json") o.json = next();
    else if (a == "--help" || a == "-h") {
      usage();
      std::exit(0);
    } else {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    }
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.iters < 1 || o.warmup < 0)
    throw std::runtime_error("need 4 <= --min-bytes <= --max-bytes, --iters >= 1, --warmup >= 0");
  if (o.device != "cpu" && o.device != "cuda") throw std::runtime_error("--device must be cpu or cuda");
  return o;
}

// A buffer of `bytes` on the chosen device, wrapped as an f32 tensor.
class Buffer {
 public:
  Buffer(int64_t elems, const ptdp::Device& dev) : dev_(dev) {
    if (dev.type == ptdp::DeviceType::CPU) {
      t_ = ptdp::Tensor::empty({elems}, ptdp::DType::F32);
      t_.fill(1.0);
      return;
    }
#ifdef PTDP_HAVE_NCCL
    if (cudaMalloc(&dptr_, static_cast<size_t>(elems) * 4) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    cudaMemset(dptr_, 0, static_cast<size_t>(elems) * 4);
    t_ = ptdp::Tensor::borrow(dptr_, {elems}, ptdp::DType::F32, dev);
#else
    throw std::runtime_error("this build has no NCCL: --device cuda is unavailable");
#endif
  }
  ~Buffer() {
#ifdef PTDP_HAVE_NCCL
    if (dptr_) cudaFree(dptr_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const ptdp::Tensor& t() const { return t_; }

 private:
  ptdp::Device dev_;
  ptdp::Tensor t_;
  void* dptr_ = nullptr;
};

struct Row {
  std::string op;
  int64_t bytes;
  double us, algbw, busbw;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 0;
  try {
    const Options o = parse(argc, argv);
    ptdp::RuntimeOptions ro;
    ro.verify_collectives = o.verify;
    ro.use_nccl = o.device == "cuda";
    MPI_Comm world = MPI_COMM_WORLD;
    auto rt = ptdp::Runtime::create_from_mpi(ro, &world);
    ptdp::ProcessGroups groups(rt, ptdp::ParallelConfig{0, 1, 1, 1});
    ptdp::Device dev;
    if (o.device == "cuda") {
      if (rt->gpu() < 0) throw std::runtime_error("--device cuda: this rank has no GPU");
      dev = ptdp::Device{ptdp::DeviceType::CUDA, rt->gpu()};
    }
    ptdp::Communicator& comm = groups.comm_for(ptdp::GroupKind::World, dev);
    const int n = comm.size();
    if (rank == 0) {
      std::printf("# bench_comm: %d ranks, device %s, communicator %s, consistency check %s\n", n,
                  o.device.c_str(), comm.name().c_str(), o.verify ? "on" : "off");
      std::printf("# time: slowest rank's mean of %d iterations; busbw as nccl-tests\n", o.iters);
      std::printf("%-15s %12s %12s %12s %12s\n", "op", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
    }
    std::vector<Row> rows;
    std::vector<std::string> ops;
    for (std::size_t p = 0, q; p <= o.ops.size(); p = q + 1) {
      q = o.ops.find(',', p);
      if (q == std::string::npos) q = o.ops.size();
      ops.push_back(o.ops.substr(p, q - p));
    }
    for (const std::string& op : ops) {
      double factor = 1.0;
      if (op == "all_reduce") factor = 2.0 * (n - 1) / n;
      else if (op == "all_gather" || op == "reduce_scatter") factor = static_cast<double>(n - 1) / n;
      else if (op != "broadcast" && op != "sendrecv") throw std::runtime_error("unknown op " + op);
      for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
        int64_t elems = bytes / 4;
        if (op == "all_gather" || op == "reduce_scatter") elems = std::max<int64_t>(n, elems / n * n);
        Buffer big(elems, dev), chunk(elems / n, dev), peer(elems, dev);
        auto once = [&] {
          if (op == "all_reduce") comm.all_reduce(big.t(), ptdp::ReduceOp::Sum)->wait();
          else if (op == "all_gather") comm.all_gather(chunk.t(), big.t())->wait();
          else if (op == "reduce_scatter") comm.reduce_scatter(big.t(), chunk.t(), ptdp::ReduceOp::Sum)->wait();
          else if (op == "broadcast") comm.broadcast(big.t(), 0)->wait();
          else {
            // Ring exchange: send to the next rank and receive from the previous one at once.
            const int next = (comm.rank() + 1) % n, prev = (comm.rank() + n - 1) % n;
            comm.batch_p2p({{ptdp::P2POp::Kind::Send, big.t(), next, 0},
                            {ptdp::P2POp::Kind::Recv, peer.t(), prev, 0}})->wait();
          }
        };
        for (int i = 0; i < o.warmup; ++i) once();
        comm.barrier()->wait();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < o.iters; ++i) once();
        const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.iters;
        double slowest = mine;
        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        const double b = static_cast<double>(elems) * 4;
        Row r{op, static_cast<int64_t>(b), slowest * 1e6, b / slowest / 1e9, b / slowest / 1e9 * factor};
        rows.push_back(r);
        if (rank == 0) {
          std::printf("%-15s %12lld %12.1f %12.3f %12.3f\n", r.op.c_str(), static_cast<long long>(r.bytes), r.us,
                      r.algbw, r.busbw);
          std::fflush(stdout);
        }
      }
    }
    if (rank == 0 && !o.json.empty()) {
      FILE* f = std::fopen(o.json.c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + o.json);
      std::fprintf(f, "{\"ranks\": %d, \"device\": \"%s\", \"results\": [", n, o.device.c_str());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        // json_number: a time or bandwidth that is not finite is null, so the file stays JSON.
        std::fprintf(f, "%s\n {\"op\": \"%s\", \"bytes\": %lld, \"time_us\": %s, \"algbw_GBps\": %s, \"busbw_GBps\": %s}",
                     i ? "," : "", rows[i].op.c_str(), static_cast<long long>(rows[i].bytes),
                     ptdp::json_number(rows[i].us, "%.3f").c_str(), ptdp::json_number(rows[i].algbw, "%.6f").c_str(),
                     ptdp::json_number(rows[i].busbw, "%.6f").c_str());
      }
      std::fprintf(f, "\n]}\n");
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm (rank %d): %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
