#include "util/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

// A pool of one helper: a nested PoolParallelFor run by that helper would
// queue its range behind itself and wait forever; it must run inline.
TEST(ThreadPoolTest, NestedParallelForOnAPoolThreadRunsInline) {
  ThreadPool::SetDefaultSize(1);
  ASSERT_EQ(ThreadPool::Default().size(), 1);
  EXPECT_FALSE(ThreadPool::OnPoolThread());
  constexpr int64_t kOuter = 8, kInner = 1000;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  std::atomic<int> outer_on_pool{0};
  PoolParallelFor(kOuter, 1, [&](int64_t begin, int64_t end) {
    if (ThreadPool::OnPoolThread()) ++outer_on_pool;
    for (int64_t o = begin; o < end; ++o) {
      PoolParallelFor(kInner, 10, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[o * kInner + i];
      });
    }
  });
  EXPECT_EQ(outer_on_pool, 1);  // the helper's range; the caller ran one
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << i;
}

}  // namespace
}  // namespace psrt
