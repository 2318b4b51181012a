#include "ps_worker/data/dataset.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "glog/logging.h"

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
  if (options.reader_threads < 1 || options.reader_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reader threads must be in [1, 256], got ", options.reader_threads));
  }
  if (options.parse_chunk_records < 1) {
    return absl::InvalidArgumentError("parse chunk records must be >= 1");
  }
  if (options.cache_in_memory && !options.cache_dir.empty()) {
    return absl::InvalidArgumentError(
        "cache the examples in memory or in a directory, not both");
  }
  if (options.cache_in_memory || !options.cache_dir.empty()) {
    for (const std::string& p : options.patterns) {
      if (absl::StrContains(p, "{epoch}")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot cache '", p, "': each epoch reads its own files"));
      }
    }
  }
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
  std::unique_ptr<ParsePool> pool;
  if (options_.reader_threads > 1) {
    pool = std::make_unique<ParsePool>(options_.reader_threads);
  }
  absl::Status status;
  // Filled during the first epoch, used from the second on.
  Batch cache;
  bool cached = false;
  // cache_dir: the complete cache file (from an earlier dataset over the
  // same inputs, or written by the first epoch), read by every later epoch.
  std::unique_ptr<ExampleCacheReader> cache_file;
  std::string cache_key;
  if (!options_.cache_dir.empty()) {
    std::mt19937_64 unused;
    if (auto files = EpochFiles(0, &unused); files.ok()) {
      first_epoch_files_ = files->size();
    }
    absl::StatusOr<std::string> key = CacheKey();
    status = key.status();
    if (key.ok()) {
      cache_key = *std::move(key);
      const std::string path = ExampleCachePath(options_.cache_dir, cache_key);
      auto opened = ExampleCacheReader::Open(path, cache_key, true);
      if (opened.ok()) {
        cache_file = *std::move(opened);
        LOG(INFO) << "dataset: reading " << cache_file->examples()
                  << " examples from " << path
                  << ", cached by an earlier run over the same inputs";
        absl::MutexLock lock(&mu_);
        stats_.cached_examples = cache_file->examples();
        stats_.cached_bytes = cache_file->bytes();
      } else if (!absl::IsNotFound(opened.status())) {
        LOG(WARNING) << "dataset: not using the example cache: "
                     << opened.status().message()
                     << "; reading the input files (and caching them anew)";
      }
    }
  }
  for (int epoch = 0;
       status.ok() && (options_.epochs == 0 || epoch < options_.epochs);
       ++epoch) {
    {
      absl::MutexLock lock(&mu_);
      stats_.epoch = epoch;
      if (stopping_) break;
    }
    if (cached) {
      int i = 0;
      status = ProduceEpochFromCache(epoch, [&](Example* e) {
        if (i == cache.size) return absl::StatusOr<bool>(false);
        e->label = cache.labels[i];
        e->ids.assign(cache.ids.begin() + cache.offsets[i],
                      cache.ids.begin() + cache.offsets[i + 1]);
        e->values.assign(cache.values.begin() + cache.offsets[i],
                         cache.values.begin() + cache.offsets[i + 1]);
        const size_t d = static_cast<size_t>(cache.dense_dim);
        e->dense.assign(cache.dense.begin() + i * d,
                        cache.dense.begin() + (i + 1) * d);
        ++i;
        return absl::StatusOr<bool>(true);
      });
    } else if (cache_file != nullptr) {
      status = cache_file->Rewind();
      if (status.ok()) {
        status = ProduceEpochFromCache(
            epoch, [&](Example* e) { return cache_file->Next(e); });
      }
    } else {
      std::unique_ptr<ExampleCacheWriter> writer;
      if (!cache_key.empty() && !uncacheable_) {
        auto created = ExampleCacheWriter::Create(
            ExampleCachePath(options_.cache_dir, cache_key), cache_key);
        if (created.ok()) {
          writer = *std::move(created);
        } else {
          LOG(WARNING) << "dataset: not caching the examples: "
                       << created.status().message()
                       << "; every epoch reads the files";
          uncacheable_ = true;
        }
      }
      status = ProduceEpoch(epoch, pool.get(),
                            options_.cache_in_memory ? &cache : nullptr,
                            writer != nullptr ? &writer : nullptr);
      bool complete = false;
      {
        absl::MutexLock lock(&mu_);
        complete = status.ok() && !stopping_;
      }
      if (complete && writer != nullptr) {
        cache_file = FinishCacheFile(std::move(writer), cache_key);
      }
      if (complete && options_.cache_in_memory && !uncacheable_) {
        absl::MutexLock lock(&mu_);
        cached = true;
        stats_.cached_examples = cache.size;
        stats_.cached_bytes =
            static_cast<int64_t>(cache.labels.capacity() * sizeof(float) +
                                 cache.ids.capacity() * sizeof(int64_t) +
                                 cache.values.capacity() * sizeof(float) +
                                 cache.offsets.capacity() * sizeof(int32_t) +
                                 cache.dense.capacity() * sizeof(float));
        LOG(INFO) << "dataset: cached " << cache.size << " examples ("
                  << stats_.cached_bytes / (1 << 20)
                  << " MiB); later epochs read no file";
      }
    }
  }
  absl::MutexLock lock(&mu_);
  error_ = status;
  done_ = true;
}

std::unique_ptr<ExampleCacheReader> Dataset::FinishCacheFile(
    std::unique_ptr<ExampleCacheWriter> writer, const std::string& key) {
  const int64_t examples = writer->examples();
  absl::Status s = writer->Finish();
  const std::string path = writer->path();
  writer.reset();
  absl::StatusOr<std::unique_ptr<ExampleCacheReader>> opened =
      s.ok() ? ExampleCacheReader::Open(path, key, false)
             : absl::StatusOr<std::unique_ptr<ExampleCacheReader>>(s);
  if (!opened.ok()) {
    LOG(WARNING) << "dataset: not caching the examples: "
                 << opened.status().message()
                 << "; every epoch reads the files";
    uncacheable_ = true;
    return nullptr;
  }
  absl::MutexLock lock(&mu_);
  stats_.cached_examples = examples;
  stats_.cached_bytes = (*opened)->bytes();
  LOG(INFO) << "dataset: cached " << examples << " examples in " << path << " ("
            << stats_.cached_bytes / (1 << 20)
            << " MiB); later epochs read no input file";
  return *std::move(opened);
}

absl::StatusOr<std::string> Dataset::CacheKey() const {
  const ReaderOptions& r = options_.reader;
  std::string key = absl::StrCat(
      "psrt example cache 1\nformat=", r.format, " label=", r.label_field,
      " ids=", r.ids_field, " values=", r.values_field,
      " dense=", r.dense_field,
      " categorical=", absl::StrJoin(r.columns.categorical, ","),
      " dense_columns=", absl::StrJoin(r.columns.dense, ","),
      " csv_schema=", r.csv_schema, " criteo_buckets=", r.criteo_buckets,
      " skip_bad_records=", r.skip_bad_records, "\nshard_by=",
      options_.shard_by == DatasetOptions::ShardBy::kFile ? "file" : "record",
      " shards=", options_.num_shards, " shard=", options_.shard_index,
      // The first epoch's file order, which the cache keeps.
      " file_order_seed=", ShufflesFiles() ? options_.seed : 0, "\n");
  absl::StatusOr<std::vector<std::string>> files =
      ExpandPatterns(options_.patterns, 0);
  if (!files.ok()) return files.status();
  for (const std::string& path : *files) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
    }
    absl::StrAppend(&key, path, " ", st.st_size, " ", st.st_mtim.tv_sec, ".",
                    st.st_mtim.tv_nsec, "\n");
  }
  return key;
}

namespace {

// One epoch's examples, in order, through the shuffle buffer into batches
// of options.batch_size (the epoch's remainder last, unless dropped).
class EpochBatcher {
 public:
  // `emit` queues a full batch; false once the consumer went away.
  EpochBatcher(const DatasetOptions& options, std::mt19937_64* rng,
               std::function<bool(Batch)> emit)
      : options_(options), rng_(rng), emit_(std::move(emit)) {}

  // False once the consumer went away.
  bool Add(Example&& e) {
    if (options_.shuffle_buffer > 0) {
      if (static_cast<int>(buffer_.size()) < options_.shuffle_buffer) {
        buffer_.push_back(std::move(e));
        return true;
      }
      std::swap(buffer_[(*rng_)() % buffer_.size()], e);
    }
    return AddToBatch(e);
  }

  // The shuffle buffer, shuffled, then the last partial batch.
  bool Finish() {
    std::shuffle(buffer_.begin(), buffer_.end(), *rng_);
    for (const Example& e : buffer_) {
      if (!AddToBatch(e)) return false;
    }
    if (batch_.size > 0 && !options_.drop_remainder) {
      return emit_(std::move(batch_));
    }
    return true;
  }

 private:
  bool AddToBatch(const Example& e) {
    batch_.Add(e);
    if (batch_.size < options_.batch_size) return true;
    Batch full;
    std::swap(full, batch_);
    // The next batch's columns sized as this one's: growing them from empty
    // copied each column about twice over (10% of a --compute=none
    // worker's CPU at batch 8,192).
    batch_.ReserveLike(full);
    return emit_(std::move(full));
  }

  const DatasetOptions& options_;
  std::mt19937_64* const rng_;
  const std::function<bool(Batch)> emit_;
  std::vector<Example> buffer_;
  Batch batch_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> Dataset::EpochFiles(
    int epoch, std::mt19937_64* rng) {
  absl::StatusOr<std::vector<std::string>> files =
      ExpandPatterns(options_.patterns, epoch);
  if (!files.ok()) return files.status();
  if (options_.shard_by == DatasetOptions::ShardBy::kFile) {
    if (static_cast<int>(files->size()) <= options_.shard_index) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sharding by file: epoch ", epoch, " has ", files->size(),
          " file(s) for ", options_.num_shards, " workers, none for worker ",
          options_.shard_index, "; shard by record or use more files"));
    }
    std::vector<std::string> mine;
    for (size_t i = options_.shard_index; i < files->size();
         i += options_.num_shards) {
      mine.push_back((*files)[i]);
    }
    *files = std::move(mine);
  }
  if (ShufflesFiles()) std::shuffle(files->begin(), files->end(), *rng);
  return files;
}

absl::Status Dataset::ProduceEpoch(
    int epoch, ParsePool* pool, Batch* cache,
    std::unique_ptr<ExampleCacheWriter>* cache_file) {
  std::mt19937_64 rng(options_.seed * 1000003 + epoch);
  absl::StatusOr<std::vector<std::string>> files = EpochFiles(epoch, &rng);
  if (!files.ok()) return files.status();
  if (epoch == 0) first_epoch_files_ = files->size();

  EpochBatcher batcher(options_, &rng,
                       [this](Batch b) { return Emit(std::move(b)); });
  // One parsed example of this shard, in record order: into the cache (if
  // filling one) and the batcher. False once the consumer went away.
  auto consume = [&](Example&& e) -> bool {
    if (cache != nullptr) {
      const char* why_not = nullptr;
      if (cache->size > 0 &&
          static_cast<int>(e.dense.size()) != cache->dense_dim) {
        // Columns need one dense size (the model's check names the record).
        why_not = "examples with different dense sizes";
      } else if (cache->ids.size() + e.ids.size() >
                 static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        why_not = "more than 2^31 feature ids (the columns' offsets are int32)";
      }
      if (why_not != nullptr) {
        LOG(WARNING) << "dataset: not caching the examples in memory: "
                     << why_not << "; every epoch reads the files";
        cache->Clear();
        cache = nullptr;
        uncacheable_ = true;
      } else {
        cache->Add(e);
      }
    }
    if (cache_file != nullptr && *cache_file != nullptr) {
      if (absl::Status s = (*cache_file)->Add(e); !s.ok()) {
        LOG(WARNING) << "dataset: not caching the examples: " << s.message()
                     << "; every epoch reads the files";
        cache_file->reset();  // removes its partial file
        uncacheable_ = true;
      }
    }
    return batcher.Add(std::move(e));
  };
  bool stopped = false;
  // The oldest parsed chunk's examples, in order; its error ends the epoch.
  auto consume_oldest = [&]() -> absl::Status {
    std::unique_ptr<RawChunk> chunk = pool->TakeOldest();
    {
      absl::MutexLock lock(&mu_);
      stats_.records += std::count(chunk->kept.begin(),
                                   chunk->kept.begin() + chunk->parsed, 1);
      stats_.bad_records += static_cast<int64_t>(chunk->skipped.size());
      if (stopping_) stopped = true;
    }
    for (const absl::Status& bad : chunk->skipped) {
      if (++logged_bad_records_ <= 5) {
        LOG(WARNING) << "skipping bad record: " << bad.message();
      }
    }
    for (size_t i = 0; i < chunk->parsed && !stopped; ++i) {
      if (chunk->kept[i] && !consume(std::move(chunk->examples[i]))) {
        stopped = true;
      }
    }
    absl::Status error = chunk->error;
    pool->Recycle(std::move(chunk));
    return error;
  };
  const size_t max_pending =
      pool == nullptr ? 0 : 2 * static_cast<size_t>(pool->threads());

  int64_t record = 0;
  for (const std::string& path : *files) {
    if (stopped) break;
    absl::StatusOr<std::unique_ptr<RecordReader>> opened =
        OpenRecordReader(path, options_.reader);
    if (!opened.ok()) return opened.status();
    std::shared_ptr<RecordReader> reader = std::move(*opened);
    std::unique_ptr<RawChunk> chunk;
    while (!stopped) {
      // Counts records that exist: a file's end is not a record.
      if (options_.shard_by == DatasetOptions::ShardBy::kRecord &&
          record % options_.num_shards != options_.shard_index) {
        absl::StatusOr<bool> more = reader->Skip();
        if (!more.ok()) return more.status();
        if (!*more) break;
        ++record;
        continue;
      }
      if (pool != nullptr) {
        if (chunk == nullptr) chunk = pool->NewChunk(reader);
        absl::StatusOr<bool> more = reader->ReadRaw(chunk->Append(0));
        if (!more.ok()) return more.status();
        if (!*more) {
          --chunk->size;  // the slot taken for a record that was not there
          break;
        }
        chunk->index[chunk->size - 1] = reader->index();
        ++record;
        if (static_cast<int>(chunk->size) == options_.parse_chunk_records) {
          pool->Submit(std::move(chunk));
          while (pool->pending() > max_pending && !stopped) {
            if (absl::Status s = consume_oldest(); !s.ok()) return s;
          }
        }
        continue;
      }
      Example e;
      absl::StatusOr<bool> more = reader->Next(&e);
      if (!more.ok()) return more.status();
      if (!*more) break;
      ++record;
      {
        absl::MutexLock lock(&mu_);
        ++stats_.records;
        if (stopping_) return absl::OkStatus();
      }
      if (!consume(std::move(e))) return absl::OkStatus();
    }
    if (chunk != nullptr && chunk->size > 0) pool->Submit(std::move(chunk));
    if (pool == nullptr) {
      absl::MutexLock lock(&mu_);
      stats_.bad_records += reader->bad_records();
    }
  }
  while (pool != nullptr && pool->pending() > 0) {
    if (absl::Status s = consume_oldest(); !s.ok()) return s;
  }
  if (!stopped) batcher.Finish();
  return absl::OkStatus();
}

absl::Status Dataset::ProduceEpochFromCache(
    int epoch, const std::function<absl::StatusOr<bool>(Example*)>& next) {
  std::mt19937_64 rng(options_.seed * 1000003 + epoch);
  // The random numbers an epoch read from files spends on their order
  // first: a cached epoch 0 (an earlier run's cache) is then batched
  // exactly as the files' epoch 0 was.
  if (options_.shuffle_buffer > 0) {
    std::vector<size_t> files(first_epoch_files_);
    std::shuffle(files.begin(), files.end(), rng);
  }
  EpochBatcher batcher(options_, &rng,
                       [this](Batch b) { return Emit(std::move(b)); });
  Example e;
  int64_t produced = 0;
  while (true) {
    absl::StatusOr<bool> more = next(&e);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if ((produced++ & 1023) == 0) {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    if (!batcher.Add(std::move(e))) return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.examples_from_cache += produced;
  }
  batcher.Finish();
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
