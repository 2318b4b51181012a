#include "ps_server/checkpoint/transfer_progress.h"

#include <algorithm>

#include "absl/base/const_init.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace psrt {
namespace {

double Megabytes(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// The transfers alive in this process.
absl::Mutex registry_mu(absl::kConstInit);
std::vector<const TransferProgress*>& Registry()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* transfers = new std::vector<const TransferProgress*>;
  return *transfers;
}

}  // namespace

TransferProgress::TransferProgress(std::string what, int64_t total_bytes,
                                   absl::Duration interval)
    : what_(std::move(what)),
      total_(total_bytes),
      interval_(interval),
      start_(absl::Now()),
      next_log_(start_ + interval) {
  absl::MutexLock lock(&registry_mu);
  Registry().push_back(this);
}

TransferProgress::~TransferProgress() {
  absl::MutexLock lock(&registry_mu);
  auto& transfers = Registry();
  transfers.erase(std::find(transfers.begin(), transfers.end(), this));
}

TransferSnapshot TransferProgress::Snapshot() const {
  return {what_, done_.load(), total_,
          absl::ToDoubleSeconds(absl::Now() - start_)};
}

std::vector<TransferSnapshot> ActiveTransfers() {
  absl::MutexLock lock(&registry_mu);
  std::vector<TransferSnapshot> out;
  for (const TransferProgress* t : Registry()) out.push_back(t->Snapshot());
  return out;
}

void TransferProgress::Add(int64_t bytes) {
  done_.fetch_add(bytes);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (now < next_log_) return;
    next_log_ = now + interval_;
  }
  LOG(INFO) << what_ << ": " << Describe();
}

std::string DescribeTransfer(const TransferSnapshot& t) {
  const double rate = Megabytes(t.done_bytes) / std::max(1e-3, t.seconds);
  std::string line = absl::StrFormat(
      "%.1f of %.1f MB (%.1f%%), %.1f MB/s", Megabytes(t.done_bytes),
      Megabytes(t.total_bytes),
      t.total_bytes > 0 ? 100.0 * t.done_bytes / t.total_bytes : 100.0, rate);
  if (rate > 0 && t.done_bytes < t.total_bytes) {
    absl::StrAppendFormat(&line, ", about %.0f s left",
                          Megabytes(t.total_bytes - t.done_bytes) / rate);
  }
  return line;
}

std::string TransferProgress::Describe() const {
  return DescribeTransfer(Snapshot());
}

std::string TransferProgress::Summary() const {
  const int64_t done = done_.load();
  const double seconds =
      std::max(1e-3, absl::ToDoubleSeconds(absl::Now() - start_));
  return absl::StrFormat("%.1f MB in %.2f s, %.1f MB/s", Megabytes(done),
                         seconds, Megabytes(done) / seconds);
}

}  // namespace psrt
