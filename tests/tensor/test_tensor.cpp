#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "base/env_switch.h"
#include "base/error.h"
#include "core/tensor/tensor.h"

using ptdp::DType;
using ptdp::Shape;
using ptdp::Tensor;

TEST_CASE("tensors are 64-byte aligned and counted by the allocator", "[tensor]") {
  auto& alloc = ptdp::cpu_allocator();
  const std::size_t before = alloc.bytes_in_use();
  {
    Tensor a = Tensor::empty({3, 5}, DType::F32);
    Tensor b = Tensor::empty({7}, DType::BF16);
    CHECK(reinterpret_cast<std::uintptr_t>(a.raw()) % 64 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(b.raw()) % 64 == 0);
    CHECK(alloc.bytes_in_use() == before + 60 + 14);
    CHECK(alloc.peak_bytes() >= before + 74);
    CHECK(a.owns_storage());
  }
  CHECK(alloc.bytes_in_use() == before);
}

TEST_CASE("zeros, fill, host round trip", "[tensor]") {
  Tensor z = Tensor::zeros({2, 3}, DType::F32);
  std::vector<float> out(6, -1.0f);
  z.copy_to_host(out.data(), out.size() * sizeof(float));
  CHECK(out == std::vector<float>(6, 0.0f));

  std::vector<float> in(6);
  std::iota(in.begin(), in.end(), 1.0f);
  Tensor t = Tensor::from_host(in.data(), {2, 3}, DType::F32);
  t.copy_to_host(out.data(), out.size() * sizeof(float));
  CHECK(out == in);
  t.fill(2.5);
  t.copy_to_host(out.data(), out.size() * sizeof(float));
  CHECK(out == std::vector<float>(6, 2.5f));

  Tensor i64 = Tensor::empty({4}, DType::I64);
  i64.fill(-3);
  CHECK(i64.data<int64_t>()[3] == -3);
  CHECK_THROWS_AS(i64.data<float>(), ptdp::Error);
}

TEST_CASE("views share storage, and narrow selects rows", "[tensor]") {
  std::vector<float> in(12);
  std::iota(in.begin(), in.end(), 0.0f);
  Tensor t = Tensor::from_host(in.data(), {4, 3}, DType::F32);
  Tensor rows = t.narrow(1, 2);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.data<float>()[0] == 3.0f);
  rows.fill(-1.0);
  CHECK(t.data<float>()[3] == -1.0f);
  CHECK(t.data<float>()[8] == -1.0f);
  CHECK(t.data<float>()[9] == 9.0f);
  Tensor flat = t.reshape({12});
  CHECK(flat.data<float>() == t.data<float>());
  CHECK_THROWS_AS(t.reshape({5}), ptdp::Error);
  CHECK_THROWS_AS(t.narrow(3, 2), ptdp::Error);
  CHECK_THROWS_AS(t.view(10, {3}), ptdp::Error);
  // A view keeps its storage alive after the parent is gone.
  Tensor v = t.view(6, {6});
  t = Tensor();
  CHECK(v.data<float>()[3] == 9.0f);
}

TEST_CASE("borrowed storage is never freed by the tensor", "[tensor]") {
  std::vector<float> mine = {1, 2, 3};
  const std::size_t before = ptdp::cpu_allocator().bytes_in_use();
  {
    Tensor b = Tensor::borrow(mine.data(), {3}, DType::F32);
    CHECK_FALSE(b.owns_storage());
    b.fill(7.0);
  }
  CHECK(ptdp::cpu_allocator().bytes_in_use() == before);
  CHECK(mine == std::vector<float>{7, 7, 7});
}

TEST_CASE("to() converts between floating dtypes", "[tensor]") {
  const std::vector<float> in = {1.0f, 1.0f / 3.0f, -2.0f, 65504.0f};
  Tensor t = Tensor::from_host(in.data(), {4}, DType::F32);
  Tensor h = t.to(DType::F16);
  CHECK(h.dtype() == DType::F16);
  CHECK(h.data<uint16_t>()[0] == 0x3c00);
  CHECK(h.data<uint16_t>()[1] == 0x3555);
  CHECK(h.data<uint16_t>()[3] == 0x7bff);
  Tensor b = t.to(DType::BF16);
  CHECK(b.data<uint16_t>()[0] == 0x3f80);
  CHECK(b.data<uint16_t>()[2] == 0xc000);
  Tensor back = b.to(DType::F32);
  CHECK(back.data<float>()[1] == Approx(1.0f / 3.0f).epsilon(1.0 / 128));
  CHECK_THROWS_AS(t.to(DType::I32), ptdp::Error);
}

TEST_CASE("devices this build or machine cannot drive are reported, naming the device", "[tensor]") {
  // Without CUDA in the build: Unsupported. With it but without a GPU (or past the last one):
  // a device error. The index 4096 is past any machine's GPUs.
  try {
    Tensor::empty({2}, DType::F32, ptdp::Device{ptdp::DeviceType::CUDA, 4096});
    FAIL("no error");
  } catch (const ptdp::Error& e) {
#ifdef PTDP_HAVE_CUDA
    CHECK(e.code() == ptdp::ErrorCode::Device);
#else
    CHECK(e.code() == ptdp::ErrorCode::Unsupported);
#endif
    CHECK(std::string(e.what()).find("cuda:4096") != std::string::npos);
  }
  CHECK_THROWS_AS(Tensor::empty({2}, DType::F32, ptdp::Device{ptdp::DeviceType::CPU, 1}), ptdp::Error);
}

TEST_CASE("the CPU allocator reuses freed large blocks of the same size and counts only tensors",
          "[tensor]") {
  ptdp::CpuAllocator alloc;  // its own cache, not the process-wide one
  const std::size_t big = std::size_t{3} << 20;  // above kCpuCacheMinBytes
  void* a = alloc.allocate(big);
  CHECK(alloc.bytes_in_use() == big);
  alloc.deallocate(a, big);
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(alloc.cached_bytes() == big);
  // The same size takes the cached block (no fresh, page-faulting memory); another size does not.
  void* b = alloc.allocate(big);
  CHECK(b == a);
  CHECK(alloc.cached_bytes() == 0);
  CHECK(alloc.bytes_in_use() == big);
  void* c = alloc.allocate(big + 4096);
  CHECK(c != a);
  alloc.deallocate(b, big);
  alloc.deallocate(c, big + 4096);
  CHECK(alloc.cached_bytes() == big + big + 4096);
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(alloc.peak_bytes() == big + big + 4096);
  // Small blocks go straight back to the system.
  void* s = alloc.allocate(1000);
  alloc.deallocate(s, 1000);
  CHECK(alloc.cached_bytes() == big + big + 4096);
  alloc.release_cached();
  CHECK(alloc.cached_bytes() == 0);
  // The cache holds no more than the high-water mark (at least kCpuCacheFloorBytes): 40 blocks
  // of 3 MiB, freed at once after a peak of 120 MiB, all fit; the peak bounds them.
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(alloc.allocate(big));
  for (void* p : blocks) alloc.deallocate(p, big);
  CHECK(alloc.cached_bytes() == 40 * big);
  CHECK(alloc.cached_bytes() <= std::max(alloc.peak_bytes(), ptdp::kCpuCacheFloorBytes));
}

namespace {

// The system's transparent-huge-page mode ("always", "madvise", "never"), or "" when the kernel
// has none.
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

// The THPeligible field of the mapping in /proc/self/smaps that holds address p: 1 when the
// kernel may back it with huge pages, 0 when not, -1 when the kernel does not report it.
int thp_eligible(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;  // a mapping's first line: "lo-hi perms offset ..."
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

}  // namespace

TEST_CASE("blocks of 2 MiB or more are 2 MiB-aligned and advised for transparent huge pages",
          "[tensor]") {
  ptdp::CpuAllocator alloc;  // its own counters and cache; the advice switch is the process's
  const std::size_t big = std::size_t{6} << 20;
  void* p = alloc.allocate(big);
  std::memset(p, 1, big);
  const std::string mode = thp_mode();
  const bool advised = !mode.empty() && ptdp::env_switch_on("PTDP_CPU_HUGEPAGES");
  INFO("transparent huge pages: '" << mode << "'");
  if (advised) {
    CHECK(reinterpret_cast<std::uintptr_t>(p) % ptdp::kCpuHugePageBytes == 0);
    CHECK(alloc.huge_page_bytes() == big);
    // The kernel took the advice: the mapping holding the block may get huge pages (in every
    // mode but "never", where nothing does).
    const int eligible = thp_eligible(p);
    if (eligible < 0) {
      WARN("this kernel's smaps has no THPeligible field; the advice is not checked there");
    } else {
      CHECK(eligible == (mode == "never" ? 0 : 1));
    }
  } else {
    CHECK(alloc.huge_page_bytes() == 0);
  }
  // Below 2 MiB nothing is advised; cached blocks stay counted until they go back to the system.
  const std::size_t held = alloc.huge_page_bytes();
  void* small = alloc.allocate(std::size_t{1} << 20);
  CHECK(alloc.huge_page_bytes() == held);
  alloc.deallocate(small, std::size_t{1} << 20);
  alloc.deallocate(p, big);
  CHECK(alloc.cached_bytes() == big + (std::size_t{1} << 20));
  CHECK(alloc.huge_page_bytes() == held);
  alloc.release_cached();
  CHECK(alloc.huge_page_bytes() == 0);
}
