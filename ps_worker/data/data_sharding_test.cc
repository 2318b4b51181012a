#include "ps_worker/data/data_sharding.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

DatasetOptions FilesNamed(const std::string& prefix, int files) {
  for (int f = 0; f < files; ++f) {
    std::ofstream(absl::StrCat(::testing::TempDir(), "/", prefix, f, ".txt"))
        << "1 1:1\n";
  }
  DatasetOptions o;
  o.patterns = {absl::StrCat(::testing::TempDir(), "/", prefix, "*.txt")};
  return o;
}

TEST(DataShardingTest, AutoShardsByFileWhenFilesDivideEvenly) {
  auto four = ShardData(FilesNamed("six", 6), "auto", 3, 2);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->options.shard_by, DatasetOptions::ShardBy::kFile);
  EXPECT_EQ(four->options.num_shards, 3);
  EXPECT_EQ(four->options.shard_index, 2);
  EXPECT_NE(four->description.find("file"), std::string::npos);
  EXPECT_NE(four->description.find("6 file(s) for 3 workers"),
            std::string::npos)
      << four->description;

  // Unequal shares (4 files for 3 workers) or a file short: by record.
  for (int files : {4, 2}) {
    auto uneven = ShardData(FilesNamed(absl::StrCat("n", files, "_"), files),
                            "auto", 3, 2);
    ASSERT_TRUE(uneven.ok());
    EXPECT_EQ(uneven->options.shard_by, DatasetOptions::ShardBy::kRecord)
        << uneven->description;
    EXPECT_EQ(uneven->options.num_shards, 3);
  }

  DatasetOptions fifo;
  fifo.patterns = {"/opt/ml/input/data/train_{epoch}"};
  auto pipe = ShardData(fifo, "auto", 3, 1);
  ASSERT_TRUE(pipe.ok());
  EXPECT_EQ(pipe->options.shard_by, DatasetOptions::ShardBy::kRecord);
}

TEST(DataShardingTest, ExplicitPoliciesAndOneWorker) {
  auto none = ShardData(FilesNamed("none", 4), "none", 3, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->options.num_shards, 1);
  EXPECT_EQ(none->options.shard_index, 0);
  auto record = ShardData(FilesNamed("rec", 4), "record", 3, 1);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->options.shard_by, DatasetOptions::ShardBy::kRecord);
  EXPECT_EQ(record->options.shard_index, 1);
  auto alone = ShardData(FilesNamed("alone", 4), "record", 1, 0);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->options.num_shards, 1);
  auto bad = ShardData(FilesNamed("bad", 1), "rows", 2, 0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--data_sharding=rows"),
            std::string::npos);
}

}  // namespace
}  // namespace psrt
