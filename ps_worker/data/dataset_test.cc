#include "ps_worker/data/dataset.h"

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

}  // namespace
}  // namespace psrt
