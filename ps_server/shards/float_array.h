// Parameter memory: float arrays backed, when large, by transparent huge
// pages. Embedding updates touch rows at random across gigabytes; with 4 KiB
// pages nearly every row costs a TLB miss as well as a cache miss, with
// 2 MiB pages the page walks mostly disappear (measured in
// ps_server/shard_benchmark). Kernels set to THP "madvise" mode (Debian's
// default) need the madvise call made here.
#ifndef PSRT_PS_SERVER_SHARDS_FLOAT_ARRAY_H_
#define PSRT_PS_SERVER_SHARDS_FLOAT_ARRAY_H_

#include <cstddef>
#include <memory>

namespace psrt {

struct FloatArrayDeleter {
  size_t bytes = 0;  // mapping size; 0 for a heap allocation
  void operator()(float* p) const;
};

using FloatArray = std::unique_ptr<float[], FloatArrayDeleter>;

// An uninitialized array of n floats; arrays of 2 MiB or more are mmap'ed,
// 2 MiB aligned and advised to use huge pages (unless the environment sets
// PSRT_DISABLE_HUGE_PAGES=1). Throws std::bad_alloc.
FloatArray AllocateFloats(size_t n);
// The same, every float 0 (mmap'ed arrays are zero pages, touched only when
// written: what a shard about to be restored wants).
FloatArray AllocateZeroFloats(size_t n);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_FLOAT_ARRAY_H_
