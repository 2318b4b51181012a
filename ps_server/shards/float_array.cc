#include "ps_server/shards/float_array.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace psrt {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

void FloatArrayDeleter::operator()(float* p) const {
  if (p == nullptr) return;
  if (bytes == 0) {
    delete[] p;
  } else {
    munmap(p, bytes);
  }
}

FloatArray AllocateZeroFloats(size_t n) {
  if (n * sizeof(float) < kHugePage)
    return FloatArray(new float[n > 0 ? n : 1]());
  return AllocateFloats(n);  // fresh anonymous pages read as zero
}

FloatArray AllocateFloats(size_t n) {
  const size_t bytes = n * sizeof(float);
  if (bytes < kHugePage) return FloatArray(new float[n > 0 ? n : 1]);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page to align the start, then trim.
  void* raw = mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  char* base = static_cast<char*>(raw);
  char* aligned = reinterpret_cast<char*>(
      (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) / kHugePage *
      kHugePage);
  if (aligned > base) munmap(base, aligned - base);
  char* end = base + rounded + kHugePage;
  if (end > aligned + rounded)
    munmap(aligned + rounded, end - (aligned + rounded));
  static const bool huge_pages = [] {
    const char* off = std::getenv("PSRT_DISABLE_HUGE_PAGES");
    return off == nullptr || std::strcmp(off, "1") != 0;
  }();
  if (huge_pages) madvise(aligned, rounded, MADV_HUGEPAGE);
  return FloatArray(reinterpret_cast<float*>(aligned),
                    FloatArrayDeleter{rounded});
}

}  // namespace psrt
