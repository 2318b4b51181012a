#include "ps_server/checkpoint/checkpoint_saver.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "ps_server/checkpoint/shard_file.h"

namespace psrt {

absl::StatusOr<SaveShardsResponse> SaveLocalShards(
    const ShardStore& store, const std::string& checkpoint_uri,
    const S3Options& s3, int threads) {
  const absl::Time start = absl::Now();
  auto storage = OpenStorage(checkpoint_uri, s3);
  if (!storage.ok()) return storage.status();
  struct Job {
    const LocalVariable* variable;
    int shard;
  };
  std::vector<Job> jobs;
  for (const LocalVariable* v : store.Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->Holds(s)) jobs.push_back({v, s});
    }
  }
  SaveShardsResponse response;
  response.set_global_step(store.global_step());
  std::vector<CheckpointFile> files(jobs.size());
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status failure;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      {
        absl::MutexLock lock(&mu);
        if (!failure.ok()) return;
      }
      const Job& job = jobs[i];
      const VariableLayout& layout = *job.variable->layout;
      ShardFileHeader header;
      const std::string data =
          EncodeShardFile(*job.variable, job.shard, &header);
      CheckpointFile& f = files[i];
      f.set_variable(layout.spec.name());
      f.set_shard(job.shard);
      f.set_ps_task(store.ps_task());
      f.set_path(
          ShardFileName(layout.spec.name(), job.shard, layout.num_shards()));
      f.set_bytes(static_cast<int64_t>(data.size()));
      f.set_crc32c(ShardFileCrc(data));
      f.set_row_begin(layout.shards[job.shard].row_begin);
      f.set_num_rows(header.num_rows());
      f.set_version(header.version());
      if (absl::Status s = (*storage)->Write(f.path(), data); !s.ok()) {
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
            << " in " << response.seconds() << " s";
  return response;
}

}  // namespace psrt
