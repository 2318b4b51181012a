#include "ps_worker/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace psrt {

absl::StatusOr<std::vector<std::string>> Dataset::ExpandPatterns(
    const std::vector<std::string>& patterns, int epoch) {
  std::vector<std::string> files;
  for (const std::string& raw : patterns) {
    const std::string pattern =
        absl::StrReplaceAll(raw, {{"{epoch}", absl::StrCat(epoch)}});
    glob_t g;
    const int rc = glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      globfree(&g);
      return absl::NotFoundError(
          absl::StrCat("no file matches '", pattern, "'"));
    }
    std::vector<std::string> matched(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    std::sort(matched.begin(), matched.end());
    files.insert(files.end(), matched.begin(), matched.end());
  }
  if (files.empty()) return absl::InvalidArgumentError("no input files given");
  return files;
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Create(
    DatasetOptions options) {
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError("batch size must be >= 1");
  }
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", options.shard_index, " of ", options.num_shards,
                     " is not a valid shard"));
  }
  if (options.epochs < 0)
    return absl::InvalidArgumentError("epochs must be >= 0");
  // Fail now, not in the background, if the first epoch's files are missing.
  if (auto files = ExpandPatterns(options.patterns, 0); !files.ok()) {
    return files.status();
  }
  std::unique_ptr<Dataset> d(new Dataset(std::move(options)));
  d->producer_ = std::thread([p = d.get()] { p->Produce(); });
  return d;
}

Dataset::~Dataset() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  producer_.join();
}

bool Dataset::Emit(Batch batch) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Dataset* d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return d->stopping_ || static_cast<int>(d->queue_.size()) <
                                   d->options_.prefetch_batches;
      },
      this));
  if (stopping_) return false;
  queue_.push_back(std::move(batch));
  return true;
}

void Dataset::Produce() {
  absl::Status status;
  for (int epoch = 0; options_.epochs == 0 || epoch < options_.epochs;
       ++epoch) {
    {
      absl::MutexLock lock(&mu_);
      stats_.epoch = epoch;
      if (stopping_) break;
    }
    status = ProduceEpoch(epoch);
    if (!status.ok()) break;
  }
  absl::MutexLock lock(&mu_);
  error_ = status;
  done_ = true;
}

absl::Status Dataset::ProduceEpoch(int epoch) {
  absl::StatusOr<std::vector<std::string>> files =
      ExpandPatterns(options_.patterns, epoch);
  if (!files.ok()) return files.status();
  std::mt19937_64 rng(options_.seed * 1000003 + epoch);
  if (options_.shuffle_buffer > 0)
    std::shuffle(files->begin(), files->end(), rng);

  std::vector<Example> buffer;
  Batch batch;
  auto emit_example = [&](Example&& e) -> bool {
    batch.Add(e);
    if (batch.size == options_.batch_size) {
      Batch full;
      std::swap(full, batch);
      return Emit(std::move(full));
    }
    return true;
  };
  int64_t record = 0;
  for (const std::string& path : *files) {
    auto reader = OpenRecordReader(path, options_.reader);
    if (!reader.ok()) return reader.status();
    while (true) {
      // Counts records that exist: a file's end is not a record.
      if (record % options_.num_shards != options_.shard_index) {
        absl::StatusOr<bool> more = (*reader)->Skip();
        if (!more.ok()) return more.status();
        if (!*more) break;
        ++record;
        continue;
      }
      Example e;
      absl::StatusOr<bool> more = (*reader)->Next(&e);
      if (!more.ok()) return more.status();
      if (!*more) break;
      ++record;
      {
        absl::MutexLock lock(&mu_);
        ++stats_.records;
        if (stopping_) return absl::OkStatus();
      }
      if (options_.shuffle_buffer > 0) {
        if (static_cast<int>(buffer.size()) < options_.shuffle_buffer) {
          buffer.push_back(std::move(e));
          continue;
        }
        const size_t pick = rng() % buffer.size();
        std::swap(buffer[pick], e);
      }
      if (!emit_example(std::move(e))) return absl::OkStatus();
    }
    absl::MutexLock lock(&mu_);
    stats_.bad_records += (*reader)->bad_records();
  }
  std::shuffle(buffer.begin(), buffer.end(), rng);
  for (Example& e : buffer) {
    if (!emit_example(std::move(e))) return absl::OkStatus();
  }
  if (batch.size > 0 && !options_.drop_remainder) {
    if (!Emit(std::move(batch))) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Dataset::Next(Batch* batch) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Dataset* d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !d->queue_.empty() || d->done_;
      },
      this));
  if (!queue_.empty()) {
    *batch = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  if (!error_.ok()) return error_;
  return false;
}

Dataset::Stats Dataset::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace psrt
