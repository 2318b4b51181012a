#include "ps_server/checkpoint/checkpoint_saver.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "ps_server/checkpoint/shard_file.h"
#include "ps_server/checkpoint/transfer_progress.h"

namespace psrt {
namespace {
constexpr int kCheckpointNice = 19;

// Paces writers to a byte rate shared by all of them.
class RateLimiter {
 public:
  RateLimiter(int64_t bytes_per_sec, Clock* clock)
      : rate_(bytes_per_sec), clock_(clock) {}
  void Acquire(int64_t bytes) {
    if (rate_ <= 0) return;
    absl::Time wake;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = clock_->Now();
      if (next_ < now) next_ = now;
      wake = next_;
      next_ += absl::Seconds(static_cast<double>(bytes) / rate_);
    }
    clock_->SleepFor(wake - clock_->Now());
  }

 private:
  const int64_t rate_;
  Clock* const clock_;
  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// Paces a shard file's writes and counts them into the save's progress.
class MeteredWriter final : public StorageWriter {
 public:
  MeteredWriter(std::unique_ptr<StorageWriter> inner, RateLimiter* limiter,
                TransferProgress* progress)
      : inner_(std::move(inner)), limiter_(limiter), progress_(progress) {}

  absl::Status Append(absl::string_view data) override {
    limiter_->Acquire(static_cast<int64_t>(data.size()));
    absl::Status s = inner_->Append(data);
    progress_->Add(static_cast<int64_t>(data.size()));
    return s;
  }
  absl::Status Close() override { return inner_->Close(); }

 private:
  std::unique_ptr<StorageWriter> inner_;
  RateLimiter* limiter_;
  TransferProgress* progress_;
};

}  // namespace

absl::StatusOr<SaveShardsResponse> SaveLocalShards(
    const ShardStore& store, const std::string& checkpoint_uri,
    const StorageOpener& open_storage, int threads, int64_t max_bytes_per_sec,
    Clock* clock) {
  RateLimiter limiter(max_bytes_per_sec, clock);
  const absl::Time start = absl::Now();
  auto storage = open_storage(checkpoint_uri);
  if (!storage.ok()) return storage.status();
  struct Job {
    const LocalVariable* variable;
    int shard;
  };
  std::vector<Job> jobs;
  for (const LocalVariable* v : store.Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->IsPrimary(s)) jobs.push_back({v, s});
    }
  }
  int64_t expected_bytes = 0;  // of the rows; the files add headers and ids
  for (const Job& job : jobs) {
    expected_bytes += job.variable->shard(job.shard).bytes();
  }
  TransferProgress progress(
      absl::StrCat("checkpoint: PS ", store.ps_task(), " saving"),
      expected_bytes);
  SaveShardsResponse response;
  response.set_global_step(store.global_step());
  std::vector<CheckpointFile> files(jobs.size());
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status failure;
  auto work = [&] {
    // Below the threads that serve pulls and pushes: a checkpoint is
    // background work, and on a busy PS the scheduler should delay it, not
    // the training step (part uploads inherit this). Chunks copied under a
    // shard's lock are small, so a preempted copy holds a push up briefly.
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)),
                kCheckpointNice);
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      {
        absl::MutexLock lock(&mu);
        if (!failure.ok()) return;
      }
      const Job& job = jobs[i];
      const VariableLayout& layout = *job.variable->layout;
      CheckpointFile& f = files[i];
      f.set_variable(layout.spec.name());
      f.set_shard(job.shard);
      f.set_ps_task(store.ps_task());
      f.set_path(
          ShardFileName(layout.spec.name(), job.shard, layout.num_shards()));
      f.set_row_begin(layout.shards[job.shard].row_begin);
      ShardFileHeader header;
      uint32_t crc = 0;
      int64_t bytes = 0;
      absl::Status s;
      absl::StatusOr<std::unique_ptr<StorageWriter>> writer =
          (*storage)->NewWriter(f.path());
      if (!writer.ok()) {
        s = writer.status();
      } else {
        writer = std::unique_ptr<StorageWriter>(
            new MeteredWriter(*std::move(writer), &limiter, &progress));
      }
      if (s.ok()) {
        s = WriteShardFile(*job.variable, job.shard, writer->get(), &header,
                           &crc, &bytes);
      }
      if (s.ok()) s = (*writer)->Close();
      f.set_bytes(bytes);
      f.set_crc32c(crc);
      f.set_num_rows(header.num_rows());
      f.set_version(header.version());
      if (!s.ok()) {
        absl::MutexLock lock(&mu);
        if (failure.ok()) {
          failure = absl::Status(
              s.code(), absl::StrCat("PS ", store.ps_task(), " saving '",
                                     layout.spec.name(), "' shard ", job.shard,
                                     ": ", s.message()));
        }
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  const int n = std::max(1, std::min<int>(threads, jobs.size()));
  for (int t = 0; t < n; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  if (!failure.ok()) return failure;
  int64_t bytes = 0;
  for (CheckpointFile& f : files) {
    bytes += f.bytes();
    *response.add_files() = std::move(f);
  }
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  LOG(INFO) << "checkpoint: PS " << store.ps_task() << " wrote " << jobs.size()
            << " shard file(s), " << bytes << " bytes, to " << checkpoint_uri
            << " (" << progress.Summary() << ")";
  return response;
}

}  // namespace psrt
