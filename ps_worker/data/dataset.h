// The input pipeline of one worker: files -> records -> this worker's shard
// -> shuffle buffer -> batches, produced by a background thread a few
// batches ahead so the trainer never waits on parsing when it could compute.
//
//   DatasetOptions options;
//   options.patterns = {"/data/train-*.tfrecords"};
//   options.reader.format = "tfrecord";
//   options.num_shards = num_workers;   // as tf.data's dataset.shard(n, i)
//   options.shard_index = worker_index;
//   auto dataset = Dataset::Create(options);
//   Batch batch;
//   while (*(*dataset)->Next(&batch)) { ... }
#ifndef PSRT_PS_WORKER_DATA_DATASET_H_
#define PSRT_PS_WORKER_DATA_DATASET_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps_worker/data/example.h"
#include "ps_worker/data/example_cache_file.h"
#include "ps_worker/data/parse_pool.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

struct DatasetOptions {
  // Files or glob patterns, read in order. "{epoch}" in a pattern is replaced
  // by the epoch number, for SageMaker Pipe mode's per-epoch FIFOs
  // (/opt/ml/input/data/train_{epoch}).
  std::vector<std::string> patterns;
  ReaderOptions reader;
  // How the data is split over num_shards workers (1: no split).
  // kRecord: record i (counted from 0 in every epoch over all files)
  // belongs to shard i % num_shards; every shard reads every file.
  // kFile: file i of each epoch's list (patterns in order, each glob's
  // matches sorted) belongs to shard i % num_shards, as tf.data's FILE
  // auto-shard policy; each shard opens only its own files.
  enum class ShardBy { kRecord, kFile };
  ShardBy shard_by = ShardBy::kRecord;
  int num_shards = 1;
  int shard_index = 0;
  // Batches do not span epochs: each epoch ends with its remainder (unless
  // drop_remainder), so an epoch is always exactly its records.
  int batch_size = 256;
  bool drop_remainder = false;
  // Examples held for shuffling (0: file order). Files are shuffled too,
  // unless !shuffle_files: then each epoch reads them in the order their
  // names sort (time-partitioned data trained as the stream it is, e.g.
  // hourly files, shuffled only within the buffer).
  int shuffle_buffer = 0;
  bool shuffle_files = true;
  uint64_t seed = 1;
  int epochs = 1;  // 0: repeat forever
  int prefetch_batches = 4;
  // Threads parsing records (parse_pool.h) while the dataset's own thread
  // reads, shards and batches them; 1: that thread parses too. The examples
  // and their order are the same for any count.
  int reader_threads = 1;
  // Records per chunk handed to a parsing thread.
  int parse_chunk_records = 256;
  // Keeps this shard's parsed examples in memory after the first complete
  // epoch (as tf.data's cache()): later epochs shuffle and batch them again
  // without opening a file, in the first epoch's file order. Not with
  // "{epoch}" patterns (each epoch has files of its own).
  bool cache_in_memory = false;
  // Keeps them in a file in this directory instead (example_cache_file.h;
  // as tf.data's cache(filename)): written during the first complete epoch,
  // read by later epochs and by later datasets over the same inputs (files
  // with their sizes and times, reader, sharding and, when shuffling, the
  // seed: the file is named by a hash of them). A cache that cannot be
  // written (disk full) is dropped with a warning and the files are read;
  // a damaged one from an earlier run is rebuilt. Not with cache_in_memory
  // or "{epoch}" patterns.
  std::string cache_dir;
};

class Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Create(
      DatasetOptions options);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // The next batch; false once the data is exhausted. A reader error is
  // returned here (naming file and record) and ends the dataset.
  absl::StatusOr<bool> Next(Batch* batch);

  struct Stats {
    int64_t records = 0;      // records of this shard read from files
    int64_t bad_records = 0;  // skipped with skip_bad_records
    int epoch = 0;
    int64_t cached_examples = 0;      // held by the cache
    int64_t cached_bytes = 0;         // their columns' (or file's) size
    int64_t examples_from_cache = 0;  // produced from the cache
  };
  Stats stats() const;

  // The files matching `patterns` for `epoch`, in order.
  static absl::StatusOr<std::vector<std::string>> ExpandPatterns(
      const std::vector<std::string>& patterns, int epoch);

 private:
  explicit Dataset(DatasetOptions options) : options_(std::move(options)) {}
  void Produce();
  // `pool`: where records are parsed (null: on this thread). `cache`,
  // `cache_file`: where the epoch's examples are also appended (null:
  // nowhere; a writer that fails is reset, with a warning).
  absl::Status ProduceEpoch(int epoch, ParsePool* pool, Batch* cache,
                            std::unique_ptr<ExampleCacheWriter>* cache_file);
  // Shuffles and batches the cached examples (`next` yields them in the
  // first epoch's order) as an epoch read from the files in that order.
  absl::Status ProduceEpochFromCache(
      int epoch, const std::function<absl::StatusOr<bool>(Example*)>& next);
  // What the examples of the cache_dir file are parsed from (its key).
  absl::StatusOr<std::string> CacheKey() const;
  // Whether each epoch reads its files in a shuffled order.
  bool ShufflesFiles() const {
    return options_.shuffle_buffer > 0 && options_.shuffle_files;
  }
  // This shard's files of `epoch`, in the order it reads them (`rng` as
  // that epoch's: shuffled when ShufflesFiles()).
  absl::StatusOr<std::vector<std::string>> EpochFiles(int epoch,
                                                      std::mt19937_64* rng);
  // After a complete first epoch: the cache file `writer` filled for `key`,
  // finished and opened for the later epochs (null, with a warning, if it
  // failed).
  std::unique_ptr<ExampleCacheReader> FinishCacheFile(
      std::unique_ptr<ExampleCacheWriter> writer, const std::string& key);
  // Queues a batch; false if the consumer went away.
  bool Emit(Batch batch);

  const DatasetOptions options_;
  std::thread producer_;
  mutable absl::Mutex mu_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  int64_t logged_bad_records_ = 0;  // producer thread only
  bool uncacheable_ = false;        // producer thread only
  size_t first_epoch_files_ = 0;    // producer thread only
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_DATASET_H_
