#include "ps_worker/batch_preparer.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// `lines` LibSVM lines of `fields` ids each, Zipf-like: ids repeat within
// and across examples; example k has label k.
std::string WriteFile(const std::string& name, int lines, int fields) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream out(path);
  for (int k = 0; k < lines; ++k) {
    out << k;
    for (int f = 0; f < fields; ++f) {
      out << " " << (f * 1000 + (k * 7919 + f) % (1 + k % 97)) << ":1";
    }
    out << "\n";
  }
  return path;
}

std::unique_ptr<Dataset> Open(const std::string& path, int batch_size) {
  DatasetOptions o;
  o.patterns = {path};
  o.batch_size = batch_size;
  o.shuffle_buffer = 50;
  o.seed = 7;
  auto d = Dataset::Create(o);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

absl::Status NoCheck(const Batch&) { return absl::OkStatus(); }

TEST(BatchPreparerTest, SameBatchesAsTheDatasetWithTheirIdsDeduplicated) {
  const std::string path = WriteFile("prepared.txt", 1000, 5);
  auto direct = Open(path, 64);
  auto read = Open(path, 64);
  BatchPreparer preparer(read.get(), NoCheck, 3);
  int batches = 0;
  size_t all_ids = 0, all_unique = 0;
  while (true) {
    Batch expected;
    absl::StatusOr<bool> more_expected = direct->Next(&expected);
    PreparedBatch got;
    absl::StatusOr<bool> more = preparer.Next(&got);
    ASSERT_TRUE(more.ok() && more_expected.ok());
    ASSERT_EQ(*more, *more_expected) << "batch " << batches;
    if (!*more) break;
    ++batches;
    EXPECT_EQ(got.batch.labels, expected.labels);
    EXPECT_EQ(got.batch.ids, expected.ids);
    EXPECT_EQ(got.batch.values, expected.values);
    ASSERT_EQ(got.slots.size(), got.batch.ids.size());
    std::set<int64_t> seen;
    for (size_t j = 0; j < got.slots.size(); ++j) {
      ASSERT_GE(got.slots[j], 0);
      ASSERT_LT(got.slots[j], static_cast<int32_t>(got.unique_ids.size()));
      EXPECT_EQ(got.unique_ids[got.slots[j]], got.batch.ids[j]);
      // First appearance order: a new id takes the next index.
      if (seen.insert(got.batch.ids[j]).second) {
        EXPECT_EQ(got.slots[j], static_cast<int32_t>(seen.size() - 1));
      }
    }
    EXPECT_EQ(seen.size(), got.unique_ids.size());
    all_ids += got.batch.ids.size();
    all_unique += got.unique_ids.size();
  }
  EXPECT_EQ(batches, 16);  // 1000 / 64, rounded up
  EXPECT_EQ(all_ids, 5000u);
  EXPECT_LT(all_unique, all_ids);  // the data repeats ids within batches
  PreparedBatch after;
  absl::StatusOr<bool> again = preparer.Next(&after);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST(BatchPreparerTest, ReadsAtMostDepthBatchesAhead) {
  auto dataset = Open(WriteFile("ahead.txt", 2000, 3), 10);
  constexpr int kDepth = 4;
  std::atomic<int> checked{0};
  // Counted before each Next: the batch it takes frees a place only then.
  std::atomic<int> taken{0};
  BatchPreparer preparer(
      dataset.get(),
      [&](const Batch&) {
        // The bound at the moment each batch is read, not after a wait: the
        // c-th batch is read only while fewer than kDepth wait untaken.
        const int c = ++checked;
        EXPECT_LE(c, taken.load() + kDepth) << "read too far ahead";
        return absl::OkStatus();
      },
      kDepth);
  auto await_checked = [&](int n) {
    for (const absl::Time end = absl::Now() + absl::Seconds(10);
         checked < n && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  PreparedBatch b;
  for (int step = 1; step <= 20; ++step) {
    ++taken;
    ASSERT_TRUE(*preparer.Next(&b));
    // One more read ahead as each is taken, up to kDepth ahead.
    await_checked(step + kDepth);
    EXPECT_EQ(checked, step + kDepth);
  }
}

TEST(BatchPreparerTest, ACheckErrorComesAfterTheBatchesBeforeIt) {
  auto dataset = Open(WriteFile("failing.txt", 100, 2), 10);
  int calls = 0;
  BatchPreparer preparer(
      dataset.get(),
      [&](const Batch& batch) {
        if (++calls == 4) {
          return absl::InvalidArgumentError(
              absl::StrCat("batch of ", batch.size, " has a bad field"));
        }
        return absl::OkStatus();
      },
      8);
  PreparedBatch b;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<bool> more = preparer.Next(&b);
    ASSERT_TRUE(more.ok()) << "batch " << i << ": " << more.status();
    EXPECT_TRUE(*more);
    EXPECT_EQ(b.batch.size, 10);
  }
  for (int i = 0; i < 2; ++i) {  // the error, and the same again
    absl::StatusOr<bool> more = preparer.Next(&b);
    ASSERT_FALSE(more.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(more.status()));
    EXPECT_THAT(std::string(more.status().message()),
                ::testing::HasSubstr("batch of 10 has a bad field"));
  }
  EXPECT_EQ(calls, 4);  // nothing read after the failing batch
}

TEST(BatchPreparerTest, AReaderErrorNamesTheRecord) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/bad.txt");
  {
    std::ofstream out(path);
    for (int k = 0; k < 25; ++k) out << k << " " << k << ":1\n";
    out << "1 not-an-id:1\n";
  }
  auto dataset = Open(path, 10);
  BatchPreparer preparer(dataset.get(), NoCheck, 2);
  PreparedBatch b;
  absl::Status error;
  int batches = 0;
  while (true) {
    absl::StatusOr<bool> more = preparer.Next(&b);
    if (!more.ok()) {
      error = more.status();
      break;
    }
    ASSERT_TRUE(*more) << "the data ended without the error";
    ++batches;
  }
  EXPECT_THAT(std::string(error.message()), ::testing::HasSubstr("bad.txt"));
  EXPECT_LE(batches, 2);
}

TEST(BatchPreparerTest, StopsWithBatchesLeftUnread) {
  DatasetOptions o;
  o.patterns = {WriteFile("endless.txt", 500, 4)};
  o.batch_size = 16;
  o.epochs = 0;  // repeats forever
  auto dataset = Dataset::Create(o);
  ASSERT_TRUE(dataset.ok());
  {
    BatchPreparer preparer(dataset->get(), NoCheck, 2);
    PreparedBatch b;
    ASSERT_TRUE(*preparer.Next(&b));
  }  // must not wait for the end of the data (there is none)
  { BatchPreparer unread(dataset->get(), NoCheck, 2); }
}

}  // namespace
}  // namespace psrt
