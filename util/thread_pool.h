// A process-wide pool of helper threads for splitting request-path work
// (applying or copying a large dense range) over the cores. Creating threads
// per request costs stack mappings and TLB shootdowns (measured here as
// several percent of a 4 MiB push); the pool's threads live for the process.
//
// Not for long-running work (that would delay requests queued behind it).
// PoolParallelFor called from a pool thread runs its ranges on that thread.
#ifndef PSRT_UTIL_THREAD_POOL_H_
#define PSRT_UTIL_THREAD_POOL_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"

namespace psrt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // hardware_concurrency() - 1 helpers (at least one) unless
  // SetDefaultSize chose otherwise; never destroyed. Its tasks must never
  // wait for a lock: callers wait for them while holding shard locks (a
  // push applying its shards), so a task blocked on such a lock, queued
  // ahead of theirs, would wait forever.
  static ThreadPool& Default();
  // As many helpers, for work that takes locks (a push preparing its
  // shards, each under that shard's lock); nothing waits for its tasks
  // while holding a lock.
  static ThreadPool& ForLockingWork();
  // Sets the default pool's size (0: the default). Only before its first use.
  static void SetDefaultSize(int threads);

  void Schedule(std::function<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }
  // Whether the calling thread is one of any pool's threads.
  static bool OnPoolThread();

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Calls fn(begin, end) over disjoint ranges covering [0, n): one range on
// the calling thread, the others on `pool`; returns when all are
// done. Ranges are at least `min_range` long. Called on a pool thread (work
// split at two levels: a push's shards, then one shard's rows), it runs
// fn(0, n) there: waiting on the pool from inside it could wait forever.
template <typename Fn>
void PoolParallelFor(ThreadPool& pool, int64_t n, int64_t min_range, Fn&& fn) {
  if (ThreadPool::OnPoolThread()) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int64_t parts = std::clamp<int64_t>(n / std::max<int64_t>(min_range, 1),
                                            1, pool.size() + 1);
  if (parts == 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int64_t step = (n + parts - 1) / parts;
  absl::BlockingCounter pending(static_cast<int>(parts - 1));
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t begin = p * step, end = std::min(n, begin + step);
    pool.Schedule([&fn, &pending, begin, end] {
      if (begin < end) fn(begin, end);
      pending.DecrementCount();
    });
  }
  fn(int64_t{0}, std::min(n, step));
  pending.Wait();
}

// On the default pool: fn must not wait for locks (see Default()).
template <typename Fn>
void PoolParallelFor(int64_t n, int64_t min_range, Fn&& fn) {
  PoolParallelFor(ThreadPool::Default(), n, min_range, std::forward<Fn>(fn));
}

}  // namespace psrt

#endif  // PSRT_UTIL_THREAD_POOL_H_
