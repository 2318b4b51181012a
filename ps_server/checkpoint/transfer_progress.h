// Progress of a long transfer (a checkpoint being saved or restored): bytes
// done of the total, the rate and the time left, logged at intervals so an
// operator watching a 50 GiB restore sees it move.
#ifndef PSRT_PS_SERVER_CHECKPOINT_TRANSFER_PROGRESS_H_
#define PSRT_PS_SERVER_CHECKPOINT_TRANSFER_PROGRESS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt {

// What a running transfer has done, for status RPCs (psctl checkpoint).
struct TransferSnapshot {
  std::string what;
  int64_t done_bytes = 0;
  int64_t total_bytes = 0;
  double seconds = 0;
};

class TransferProgress {
 public:
  // `what` names the transfer in log lines ("restore of 'emb'"). It is
  // listed by ActiveTransfers() until destroyed.
  TransferProgress(std::string what, int64_t total_bytes,
                   absl::Duration interval = absl::Seconds(5));
  ~TransferProgress();
  TransferProgress(const TransferProgress&) = delete;
  TransferProgress& operator=(const TransferProgress&) = delete;

  // Counts `bytes` more; logs a line if `interval` passed since the last
  // one (none for a transfer shorter than that). Thread-safe.
  void Add(int64_t bytes);

  int64_t done_bytes() const { return done_.load(); }
  int64_t total_bytes() const { return total_; }
  // "<done> of <total> MB (<pct>%), <rate> MB/s, about <eta> left"
  std::string Describe() const;
  // "<done> MB in <seconds> s, <rate> MB/s", for the line at the end.
  std::string Summary() const;
  TransferSnapshot Snapshot() const;

 private:
  const std::string what_;
  const int64_t total_;
  const absl::Duration interval_;
  const absl::Time start_;
  std::atomic<int64_t> done_{0};
  absl::Mutex mu_;
  absl::Time next_log_ ABSL_GUARDED_BY(mu_);
};

// "<done> of <total> MB (<pct>%), <rate> MB/s, about <eta> left": how a
// transfer is shown in logs and by psctl.
std::string DescribeTransfer(const TransferSnapshot& transfer);

// Every TransferProgress of this process alive now, oldest first.
std::vector<TransferSnapshot> ActiveTransfers();

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_TRANSFER_PROGRESS_H_
