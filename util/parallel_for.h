// Splits [0, n) into contiguous ranges processed on up to
// hardware_concurrency() threads; for one-off bulk work such as initializing
// a multi-gigabyte shard, not for request paths.
#ifndef PSRT_UTIL_PARALLEL_FOR_H_
#define PSRT_UTIL_PARALLEL_FOR_H_

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace psrt {

// Calls fn(begin, end) over disjoint ranges covering [0, n). Ranges smaller
// than `min_range` are not split further.
template <typename Fn>
void ParallelFor(int64_t n, int64_t min_range, Fn&& fn) {
  const int64_t threads = std::clamp<int64_t>(
      n / std::max<int64_t>(min_range, 1), 1,
      std::max<unsigned>(std::thread::hardware_concurrency(), 1u));
  if (threads == 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t step = (n + threads - 1) / threads;
  for (int64_t begin = 0; begin < n; begin += step) {
    pool.emplace_back(
        [&fn, begin, end = std::min(n, begin + step)] { fn(begin, end); });
  }
  for (auto& t : pool) t.join();
}

}  // namespace psrt

#endif  // PSRT_UTIL_PARALLEL_FOR_H_
