#include "util/thread_pool.h"

namespace psrt {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

namespace {
int default_size = 0;
thread_local bool on_pool_thread = false;
}  // namespace

bool ThreadPool::OnPoolThread() { return on_pool_thread; }

void ThreadPool::SetDefaultSize(int threads) { default_size = threads; }

ThreadPool& ThreadPool::Default() {
  static ThreadPool* pool = new ThreadPool(
      default_size > 0 ? default_size
                       : static_cast<int>(std::max(
                             2u, std::thread::hardware_concurrency())) -
                             1);
  return *pool;
}

ThreadPool& ThreadPool::ForLockingWork() {
  static ThreadPool* pool = new ThreadPool(Default().size());
  return *pool;
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void ThreadPool::Loop() {
  on_pool_thread = true;
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return p->stopping_ || !p->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace psrt
