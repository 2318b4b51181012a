// Training batches made ready ahead of the step that trains on them, on a
// thread of their own: read from the dataset, checked against the model and
// with their ids de-duplicated (the ids to pull once, and where each of the
// batch's ids is among them). On a GPU worker this is most of the CPU work
// of a step (a 8,192-example DeepFM batch has 319k ids, ~42k distinct):
// done on the trainer's thread it was the "data" part of every step; here it
// overlaps the steps before.
#ifndef PSRT_PS_WORKER_BATCH_PREPARER_H_
#define PSRT_PS_WORKER_BATCH_PREPARER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps_worker/data/dataset.h"
#include "ps_worker/data/example.h"

namespace psrt {

struct PreparedBatch {
  Batch batch;
  // unique_ids[slots[j]] == batch.ids[j]; unique_ids in order of first
  // appearance.
  std::vector<int32_t> slots;
  std::vector<int64_t> unique_ids;
};

// `batch`'s ids de-duplicated into `slots` and `unique_ids` (as above).
void DeduplicateIds(const Batch& batch, std::vector<int32_t>* slots,
                    std::vector<int64_t>* unique_ids);

class BatchPreparer {
 public:
  // Checks a batch against the model (an error ends the training).
  using Check = std::function<absl::Status(const Batch&)>;

  // Reads `dataset` (which must outlive this, and which nothing else reads
  // meanwhile) up to `depth` batches ahead of Next. `check` runs on the
  // preparing thread.
  BatchPreparer(Dataset* dataset, Check check, int depth);
  // Stops reading (the batches prepared and not taken are dropped).
  ~BatchPreparer();
  BatchPreparer(const BatchPreparer&) = delete;
  BatchPreparer& operator=(const BatchPreparer&) = delete;

  // The next batch, in the dataset's order; false once the data is
  // exhausted; the dataset's or the check's error for the batch it was
  // about (batches before it are returned first), then the same again.
  absl::StatusOr<bool> Next(PreparedBatch* out);

 private:
  void Prepare();

  Dataset* const dataset_;
  const Check check_;
  const size_t depth_;
  absl::Mutex mu_;
  std::deque<PreparedBatch> ready_ ABSL_GUARDED_BY(mu_);
  // Set when the preparing thread stopped: OK at the end of the data.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_BATCH_PREPARER_H_
