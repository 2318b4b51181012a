#include "ps_worker/batch_preparer.h"

#include <utility>

#include "clients/cpp/id_index.h"

namespace psrt {

void DeduplicateIds(const Batch& batch, std::vector<int32_t>* slots,
                    std::vector<int64_t>* unique_ids) {
  IdIndex index(batch.ids.size());
  slots->resize(batch.ids.size());
  const size_t n = batch.ids.size();
  for (size_t j = 0; j < n; ++j) {
    if (j + IdIndex::kPrefetchDistance < n) {
      index.Prefetch(batch.ids[j + IdIndex::kPrefetchDistance]);
    }
    bool inserted;
    (*slots)[j] = index.Insert(batch.ids[j], &inserted);
  }
  *unique_ids = index.TakeIds();
}

BatchPreparer::BatchPreparer(Dataset* dataset, Check check, int depth)
    : dataset_(dataset),
      check_(std::move(check)),
      depth_(depth < 1 ? 1 : static_cast<size_t>(depth)),
      thread_([this] { Prepare(); }) {}

BatchPreparer::~BatchPreparer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void BatchPreparer::Prepare() {
  absl::Status end;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BatchPreparer* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return p->stop_ || p->ready_.size() < p->depth_;
          },
          this));
      if (stop_) return;
    }
    PreparedBatch prepared;
    absl::StatusOr<bool> got = dataset_->Next(&prepared.batch);
    if (!got.ok()) {
      end = got.status();
      break;
    }
    if (!*got) break;
    if (absl::Status s = check_(prepared.batch); !s.ok()) {
      end = s;
      break;
    }
    DeduplicateIds(prepared.batch, &prepared.slots, &prepared.unique_ids);
    absl::MutexLock lock(&mu_);
    ready_.push_back(std::move(prepared));
  }
  absl::MutexLock lock(&mu_);
  finished_ = true;
  end_ = end;
}

absl::StatusOr<bool> BatchPreparer::Next(PreparedBatch* out) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](BatchPreparer* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !p->ready_.empty() || p->finished_;
      },
      this));
  if (ready_.empty()) {
    if (!end_.ok()) return end_;
    return false;
  }
  *out = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

}  // namespace psrt
