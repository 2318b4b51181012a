#include "ps_worker/data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// Writes files with `per_file` LibSVM lines each; example k has label k
// (numbered across files) so tests can tell examples apart.
std::vector<std::string> WriteFiles(const std::string& prefix, int files,
                                    int per_file) {
  std::vector<std::string> paths;
  int k = 0;
  for (int f = 0; f < files; ++f) {
    paths.push_back(absl::StrCat(::testing::TempDir(), "/", prefix, f, ".txt"));
    std::ofstream out(paths.back());
    for (int i = 0; i < per_file; ++i, ++k) out << k << " " << k << ":1\n";
  }
  return paths;
}

std::vector<int> Drain(Dataset* d, std::vector<int>* sizes = nullptr) {
  std::vector<int> labels;
  Batch b;
  while (true) {
    absl::StatusOr<bool> more = d->Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    if (sizes) sizes->push_back(b.size);
    for (float l : b.labels) labels.push_back(static_cast<int>(l));
  }
  return labels;
}

TEST(DatasetTest, ShardsAreDisjointAndCoverEveryRecord) {
  WriteFiles("shard", 3, 10);
  std::multiset<int> all;
  for (int shard = 0; shard < 4; ++shard) {
    DatasetOptions o;
    o.patterns = {::testing::TempDir() + "/shard*.txt"};
    o.num_shards = 4;
    o.shard_index = shard;
    o.batch_size = 4;
    auto d = Dataset::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    for (int label : Drain(d->get())) {
      EXPECT_EQ(label % 4, shard);
      all.insert(label);
    }
  }
  EXPECT_EQ(all.size(), 30u);
  EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), 30u);
}

// Sharding by file: each shard reads whole files (file i to shard i % n)
// and every record of every epoch is read by exactly one shard, shuffled
// or not; a shard without a file is an error naming the counts.
TEST(DatasetTest, FileShardsReadWholeFilesAndCoverEveryRecordOncePerEpoch) {
  WriteFiles("fileshard", 5, 10);  // labels 10f .. 10f+9 in file f
  for (int shuffle : {0, 7}) {
    std::multiset<int> all;
    for (int shard = 0; shard < 3; ++shard) {
      DatasetOptions o;
      o.patterns = {::testing::TempDir() + "/fileshard*.txt"};
      o.shard_by = DatasetOptions::ShardBy::kFile;
      o.num_shards = 3;
      o.shard_index = shard;
      o.batch_size = 4;
      o.epochs = 2;
      o.shuffle_buffer = shuffle;
      o.seed = 11 + shard;  // as the trainer seeds each worker
      auto d = Dataset::Create(o);
      ASSERT_TRUE(d.ok()) << d.status();
      std::set<int> files;
      for (int label : Drain(d->get())) {
        files.insert(label / 10);
        all.insert(label);
      }
      // Files 0 and 3 to shard 0, 1 and 4 to shard 1, 2 to shard 2.
      std::set<int> expected;
      for (int f = shard; f < 5; f += 3) expected.insert(f);
      EXPECT_EQ(files, expected) << "shard " << shard;
    }
    ASSERT_EQ(all.size(), 100u);  // 2 epochs x 50 records
    for (int label = 0; label < 50; ++label) {
      EXPECT_EQ(all.count(label), 2u) << label;
    }
  }
  DatasetOptions too_many;
  too_many.patterns = {::testing::TempDir() + "/fileshard*.txt"};
  too_many.shard_by = DatasetOptions::ShardBy::kFile;
  too_many.num_shards = 6;
  too_many.shard_index = 5;
  auto d = Dataset::Create(too_many);
  ASSERT_TRUE(d.ok()) << d.status();
  Batch b;
  absl::StatusOr<bool> got = (*d)->Next(&b);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(
                "has 5 file(s) for 6 workers, none for worker 5"),
            std::string::npos)
      << got.status();
}

TEST(DatasetTest, ShufflesWithinEpochsAndRepeats) {
  WriteFiles("shuffle", 2, 50);
  DatasetOptions o;
  o.patterns = {::testing::TempDir() + "/shuffle*.txt"};
  o.batch_size = 32;
  o.shuffle_buffer = 40;
  o.epochs = 3;
  std::vector<int> sizes;
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok());
  std::vector<int> labels = Drain(d->get(), &sizes);
  ASSERT_EQ(labels.size(), 300u);
  // Each epoch holds every example once, in a different order.
  std::vector<int> first(labels.begin(), labels.begin() + 100);
  std::vector<int> second(labels.begin() + 100, labels.begin() + 200);
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(first[i], i);
  // Batches of 32; every epoch ends with its own remainder (100 % 32).
  EXPECT_EQ(sizes.front(), 32);
  EXPECT_EQ(sizes.back(), 100 % 32);
  EXPECT_EQ(sizes.size(), 3u * 4);
  EXPECT_EQ((*d)->stats().records, 300);
}

// shuffle_files = false: a stream in time-ordered files is trained in
// order, shuffled only within the buffer -- no example comes out more than
// the buffer's size early, and each file's examples come out, on average,
// after the previous file's, in every epoch and for any seed. With the
// default, the files' order changes with the seed.
TEST(DatasetTest, UnshuffledFilesAreReadInTheOrderTheirNamesSort) {
  constexpr int kFiles = 8, kPerFile = 100, kBuffer = 50, kEpochs = 3;
  WriteFiles("stream", kFiles, kPerFile);
  bool some_seed_reordered_files = false;
  for (const bool shuffle_files : {false, true}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      DatasetOptions o;
      o.patterns = {::testing::TempDir() + "/stream*.txt"};
      o.batch_size = 16;
      o.shuffle_buffer = kBuffer;
      o.shuffle_files = shuffle_files;
      o.seed = seed;
      o.epochs = kEpochs;
      auto d = Dataset::Create(o);
      ASSERT_TRUE(d.ok()) << d.status();
      const std::vector<int> labels = Drain(d->get());
      ASSERT_EQ(labels.size(), size_t{kFiles * kPerFile * kEpochs});
      for (int e = 0; e < kEpochs; ++e) {
        std::vector<double> mean_position(kFiles, 0);
        for (int p = 0; p < kFiles * kPerFile; ++p) {
          const int k = labels[e * kFiles * kPerFile + p];
          mean_position[k / kPerFile] += static_cast<double>(p) / kPerFile;
          if (!shuffle_files) {
            ASSERT_LE(k - p, kBuffer) << "seed " << seed << " epoch " << e;
          }
        }
        const bool in_order =
            std::is_sorted(mean_position.begin(), mean_position.end());
        if (!shuffle_files) {
          EXPECT_TRUE(in_order) << "seed " << seed << " epoch " << e;
        } else if (!in_order) {
          some_seed_reordered_files = true;
        }
      }
    }
  }
  EXPECT_TRUE(some_seed_reordered_files);
}

TEST(DatasetTest, EpochPlaceholderReadsOneFilePerEpoch) {
  const std::string dir = ::testing::TempDir();
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::ofstream(absl::StrCat(dir, "/train_", epoch))
        << epoch * 100 << " 1:1\n";
  }
  DatasetOptions o;
  o.patterns = {dir + "/train_{epoch}"};
  o.epochs = 2;
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(Drain(d->get()), (std::vector<int>{0, 100}));
}

TEST(DatasetTest, ReaderErrorsReachTheConsumer) {
  const std::string path = ::testing::TempDir() + "/broken.txt";
  std::ofstream(path) << "1 1:1\n1 nonsense\n";
  DatasetOptions o;
  o.patterns = {path};
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok());
  Batch b;
  absl::StatusOr<bool> r = (*d)->Next(&b);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ":2"), std::string::npos)
      << r.status();
  o.patterns = {"/nonexistent/*.txt"};
  EXPECT_EQ(Dataset::Create(o).status().code(), absl::StatusCode::kNotFound);
}

// Every batch, field by field, of a dataset, and its final status.
struct Drained {
  std::vector<Batch> batches;
  absl::Status status;
  Dataset::Stats stats;
};

Drained DrainAll(const DatasetOptions& o) {
  Drained out;
  auto d = Dataset::Create(o);
  if (!d.ok()) {
    out.status = d.status();
    return out;
  }
  while (true) {
    Batch b;
    absl::StatusOr<bool> more = (*d)->Next(&b);
    if (!more.ok()) {
      out.status = more.status();
      break;
    }
    if (!*more) break;
    out.batches.push_back(std::move(b));
  }
  out.stats = (*d)->stats();
  return out;
}

void ExpectSameBatchesButStats(const Drained& a, const Drained& b) {
  ASSERT_EQ(a.batches.size(), b.batches.size());
  for (size_t i = 0; i < a.batches.size(); ++i) {
    EXPECT_EQ(a.batches[i].labels, b.batches[i].labels) << "batch " << i;
    EXPECT_EQ(a.batches[i].ids, b.batches[i].ids) << "batch " << i;
    EXPECT_EQ(a.batches[i].values, b.batches[i].values) << "batch " << i;
    EXPECT_EQ(a.batches[i].offsets, b.batches[i].offsets) << "batch " << i;
  }
  EXPECT_EQ(a.status, b.status);
}

void ExpectSameBatches(const Drained& a, const Drained& b) {
  ExpectSameBatchesButStats(a, b);
  EXPECT_EQ(a.stats.records, b.stats.records);
  EXPECT_EQ(a.stats.bad_records, b.stats.bad_records);
}

// Parsing on several threads changes nothing a trainer sees: the same
// examples in the same batches in the same order, sharded and shuffled or
// not, with chunks that end mid-file and files that end mid-chunk.
TEST(DatasetTest, ReaderThreadsGiveTheSameBatchesInTheSameOrder) {
  // Lines with several features and values, so parsing has work to do.
  std::vector<std::string> paths;
  for (int f = 0; f < 3; ++f) {
    paths.push_back(absl::StrCat(::testing::TempDir(), "/threads", f, ".txt"));
    std::ofstream out(paths.back());
    for (int i = 0; i < 300 + 37 * f; ++i) {
      out << (i + f) % 2;
      for (int j = 0; j < 5; ++j) out << " " << (i * 7 + j * 13 + f) << ":0.5";
      out << "\n";
    }
  }
  for (int shuffle : {0, 50}) {
    for (int shards : {1, 3}) {
      DatasetOptions o;
      o.patterns = {::testing::TempDir() + "/threads*.txt"};
      o.batch_size = 16;
      o.shuffle_buffer = shuffle;
      o.num_shards = shards;
      o.shard_index = shards - 1;
      o.epochs = 2;
      o.parse_chunk_records = 7;
      const Drained one = DrainAll(o);
      ASSERT_TRUE(one.status.ok()) << one.status;
      ASSERT_GT(one.batches.size(), 20u);
      for (int threads : {2, 4}) {
        SCOPED_TRACE(absl::StrCat("shuffle ", shuffle, ", shards ", shards,
                                  ", threads ", threads));
        o.reader_threads = threads;
        ExpectSameBatches(one, DrainAll(o));
      }
      o.reader_threads = 1;
    }
  }
}

// Bad records are named and skipped, or end the data, exactly as with one
// thread: the error names the same file and line, the same examples come
// before it, the same count is skipped.
TEST(DatasetTest, ReaderThreadsReportAndSkipBadRecordsAsOneThreadDoes) {
  const std::string path = ::testing::TempDir() + "/bad_records.txt";
  {
    std::ofstream out(path);
    for (int i = 0; i < 100; ++i) {
      if (i == 40 || i == 77) {
        out << "1 nonsense\n";
      } else {
        out << i << " " << i << ":1\n";
      }
    }
  }
  DatasetOptions o;
  o.patterns = {path};
  o.batch_size = 8;
  o.parse_chunk_records = 5;
  const Drained failing = DrainAll(o);
  EXPECT_NE(failing.status.message().find(path + ":41: bad feature"),
            std::string::npos)
      << failing.status;
  EXPECT_EQ(failing.batches.size(), 5u);  // 40 good records came first
  o.reader_threads = 3;
  ExpectSameBatches(failing, DrainAll(o));

  o.reader.skip_bad_records = true;
  o.reader_threads = 1;
  const Drained skipping = DrainAll(o);
  ASSERT_TRUE(skipping.status.ok()) << skipping.status;
  EXPECT_EQ(skipping.stats.bad_records, 2);
  EXPECT_EQ(skipping.stats.records, 98);
  o.reader_threads = 3;
  ExpectSameBatches(skipping, DrainAll(o));
}

// With the cache, epochs after the first read no file and parse nothing,
// yet hold the same examples: the same batches as without it when nothing
// is shuffled, every example once per epoch when shuffled.
TEST(DatasetTest, MemoryCacheServesLaterEpochsWithoutReadingFiles) {
  WriteFiles("cache", 2, 60);
  DatasetOptions o;
  o.patterns = {::testing::TempDir() + "/cache*.txt"};
  o.batch_size = 16;
  o.epochs = 3;
  o.num_shards = 2;
  o.shard_index = 1;
  const Drained plain = DrainAll(o);
  o.cache_in_memory = true;
  const Drained cached = DrainAll(o);
  ExpectSameBatchesButStats(plain, cached);
  EXPECT_EQ(plain.stats.records, 180);
  EXPECT_EQ(cached.stats.records, 60);  // the first epoch only
  EXPECT_EQ(cached.stats.cached_examples, 60);
  EXPECT_EQ(cached.stats.examples_from_cache, 120);
  EXPECT_GT(cached.stats.cached_bytes, 60 * (4 + 8 + 4 + 4));

  o.shuffle_buffer = 25;
  o.reader_threads = 2;
  const Drained shuffled = DrainAll(o);
  ASSERT_TRUE(shuffled.status.ok()) << shuffled.status;
  std::vector<int> labels;
  for (const Batch& b : shuffled.batches) {
    for (float l : b.labels) labels.push_back(static_cast<int>(l));
  }
  ASSERT_EQ(labels.size(), 180u);
  std::vector<std::vector<int>> epochs;
  for (int e = 0; e < 3; ++e) {
    epochs.emplace_back(labels.begin() + 60 * e, labels.begin() + 60 * (e + 1));
  }
  EXPECT_NE(epochs[1], epochs[2]);  // reshuffled every epoch
  for (auto& epoch : epochs) {
    std::sort(epoch.begin(), epoch.end());
    for (int i = 0; i < 60; ++i) ASSERT_EQ(epoch[i], 2 * i + 1);
  }

  o.patterns = {::testing::TempDir() + "/cache{epoch}.txt"};
  EXPECT_EQ(Dataset::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

int FilesIn(const std::string& dir) {
  if (!std::filesystem::exists(dir)) return 0;
  return static_cast<int>(
      std::distance(std::filesystem::directory_iterator(dir),
                    std::filesystem::directory_iterator()));
}

// A cache directory: the first complete epoch writes this shard's examples
// to a file there; later epochs, and a later dataset over the same inputs,
// read that file instead of parsing -- batched exactly as the files were
// (epoch 0 of a later run included, shuffled or not). Changed inputs are
// not served from it, a damaged cache is rebuilt, an unfinished epoch or an
// unwritable directory leaves no cache and loses no example.
TEST(DatasetTest, DiskCacheServesLaterEpochsAndLaterRunsAsTheFilesWould) {
  const std::vector<std::string> files = WriteFiles("disk", 3, 40);
  for (int shuffle : {0, 25}) {
    SCOPED_TRACE(absl::StrCat("shuffle ", shuffle));
    const std::string dir =
        absl::StrCat(::testing::TempDir(), "/disk_cache_", shuffle);
    std::filesystem::remove_all(dir);
    DatasetOptions o;
    o.patterns = {::testing::TempDir() + "/disk*.txt"};
    o.batch_size = 16;
    o.epochs = 3;
    o.num_shards = 2;
    o.shard_index = 1;
    o.shuffle_buffer = shuffle;
    o.reader_threads = 2;
    const Drained plain = DrainAll(o);
    ASSERT_TRUE(plain.status.ok()) << plain.status;
    o.cache_dir = dir;
    const Drained first = DrainAll(o);
    ASSERT_TRUE(first.status.ok()) << first.status;
    EXPECT_EQ(first.stats.records, 60);  // the first epoch only
    EXPECT_EQ(first.stats.cached_examples, 60);
    EXPECT_EQ(first.stats.examples_from_cache, 120);
    EXPECT_GT(first.stats.cached_bytes, 60 * (4 + 8 + 4 + 4));
    EXPECT_EQ(FilesIn(dir), 1);
    if (shuffle == 0) {
      ExpectSameBatchesButStats(plain, first);
    } else {
      // Epoch 0 came from the files in both (4 batches of 16, 60 examples).
      for (int b = 0; b < 4; ++b) {
        EXPECT_EQ(plain.batches[b].labels, first.batches[b].labels);
      }
    }

    // A later run over the same inputs parses nothing.
    const Drained second = DrainAll(o);
    ExpectSameBatchesButStats(first, second);
    EXPECT_EQ(second.stats.records, 0);
    EXPECT_EQ(second.stats.examples_from_cache, 180);

    // Damage is found when the cache is opened: rebuilt from the files.
    const std::string cache = std::filesystem::directory_iterator(dir)->path();
    {
      std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(40);
      f.put('\x7f');
    }
    const Drained rebuilt = DrainAll(o);
    ExpectSameBatchesButStats(first, rebuilt);
    EXPECT_EQ(rebuilt.stats.records, 60);
    EXPECT_EQ(DrainAll(o).stats.records, 0);  // and whole again
    EXPECT_EQ(FilesIn(dir), 1);

    // An epoch left unfinished writes no cache (nor leaves a partial one).
    const std::string unfinished = dir + "_unfinished";
    std::filesystem::remove_all(unfinished);
    {
      DatasetOptions u = o;
      u.cache_dir = unfinished;
      u.batch_size = 1;  // the producer waits with most of the epoch unread
      u.prefetch_batches = 1;
      auto d = Dataset::Create(u);
      ASSERT_TRUE(d.ok()) << d.status();
      Batch b;
      ASSERT_TRUE(*(*d)->Next(&b));
    }
    EXPECT_EQ(FilesIn(unfinished), 0);

    // A directory that cannot be made: a warning, and every epoch reads
    // the files.
    DatasetOptions bad = o;
    bad.cache_dir = files[0] + "/cache";  // under a regular file
    const Drained unwritable = DrainAll(bad);
    ASSERT_TRUE(unwritable.status.ok()) << unwritable.status;
    EXPECT_EQ(unwritable.stats.records, 180);
    ExpectSameBatchesButStats(plain, unwritable);
  }

  // Changed input: a new cache, not the old one's examples.
  const std::string dir = ::testing::TempDir() + "/disk_cache_0";
  std::ofstream(files[2], std::ios::app) << "500 500:1\n";
  DatasetOptions o;
  o.patterns = {::testing::TempDir() + "/disk*.txt"};
  o.batch_size = 16;
  o.cache_dir = dir;
  const Drained changed = DrainAll(o);
  EXPECT_EQ(changed.stats.records, 121);
  EXPECT_EQ(changed.batches.back().labels.back(), 500);
  EXPECT_EQ(FilesIn(dir), 2);

  o.patterns = {::testing::TempDir() + "/disk{epoch}.txt"};
  EXPECT_EQ(Dataset::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.patterns = {files[0]};
  o.cache_in_memory = true;
  EXPECT_EQ(Dataset::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, ReaderThreadsOutOfRangeAreRefused) {
  DatasetOptions o;
  o.patterns = {::testing::TempDir() + "/*.txt"};
  o.reader_threads = 0;
  EXPECT_EQ(Dataset::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psrt
