#include "ps_worker/data/example_cache_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// Examples of every shape a reader produces: ids with values, none, dense
// features of varying length.
std::vector<Example> MakeExamples(int n) {
  std::vector<Example> examples(n);
  for (int i = 0; i < n; ++i) {
    Example& e = examples[i];
    e.label = static_cast<float>(i % 3);
    for (int j = 0; j < i % 5; ++j) {
      e.ids.push_back(int64_t{1} << 40 | (i * 31 + j));
      e.values.push_back(0.25f * j - i);
    }
    e.dense.assign(i % 4, 1.5f * i);
  }
  return examples;
}

std::string Fresh(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string WriteCache(const std::string& dir,
                       const std::vector<Example>& examples) {
  const std::string path = ExampleCachePath(dir, "key");
  auto w = ExampleCacheWriter::Create(path, "key");
  EXPECT_TRUE(w.ok()) << w.status();
  for (const Example& e : examples) EXPECT_TRUE((*w)->Add(e).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return path;
}

TEST(ExampleCacheFileTest, ReadsBackEveryExampleInOrderAcrossChunks) {
  const std::string dir = Fresh("cache_roundtrip");
  const std::vector<Example> examples = MakeExamples(10000);  // 3 chunks
  const std::string path = WriteCache(dir, examples);
  // Only the finished file is left: no temporary beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
  auto r = ExampleCacheReader::Open(path, "key", true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->examples(), 10000);
  for (int pass = 0; pass < 2; ++pass) {
    Example e;
    for (const Example& want : examples) {
      absl::StatusOr<bool> more = (*r)->Next(&e);
      ASSERT_TRUE(more.ok() && *more) << more.status();
      ASSERT_EQ(e.label, want.label);
      ASSERT_EQ(e.ids, want.ids);
      ASSERT_EQ(e.values, want.values);
      ASSERT_EQ(e.dense, want.dense);
    }
    absl::StatusOr<bool> more = (*r)->Next(&e);
    ASSERT_TRUE(more.ok()) << more.status();
    EXPECT_FALSE(*more);
    ASSERT_TRUE((*r)->Rewind().ok());
  }
}

// Ids that fit 32 bits are stored in 4 bytes and values that are all 1.0
// not at all, chunk by chunk; every example still reads back exactly --
// also where one chunk needs 64-bit ids and the next does not.
TEST(ExampleCacheFileTest, CompactChunksReadBackExactly) {
  const std::string dir = Fresh("cache_compact");
  std::vector<Example> binary(8192);  // 2 chunks of 4,096
  for (int i = 0; i < 8192; ++i) {
    binary[i].label = i % 2;
    for (int j = 0; j < 39; ++j) {
      binary[i].ids.push_back(int64_t{0xffffffff} - i * 39 - j);
      binary[i].values.push_back(1.0f);
    }
  }
  binary[100].ids[3] = int64_t{1} << 32;  // the first chunk needs 64 bits
  binary[5000].values[7] = 0.5f;          // the second keeps its values
  const std::string path = WriteCache(dir, binary);
  // 12 bytes an example, then 4 (or 12: first chunk's ids and values) a
  // feature, not 12 for every feature.
  const int64_t full = 8192 * (12 + 39 * 12);
  const int64_t compact = 4096 * (12 + 39 * 8) + 4096 * (12 + 39 * 8);
  EXPECT_LT(std::filesystem::file_size(path), full);
  EXPECT_LE(std::filesystem::file_size(path), compact + 1000);
  auto r = ExampleCacheReader::Open(path, "key", true);
  ASSERT_TRUE(r.ok()) << r.status();
  Example e;
  for (const Example& want : binary) {
    absl::StatusOr<bool> more = (*r)->Next(&e);
    ASSERT_TRUE(more.ok() && *more) << more.status();
    ASSERT_EQ(e.ids, want.ids);
    ASSERT_EQ(e.values, want.values);
    ASSERT_EQ(e.label, want.label);
  }
}

TEST(ExampleCacheFileTest, AnotherKeyOrNoFileIsNotUsed) {
  const std::string dir = Fresh("cache_key");
  EXPECT_NE(ExampleCachePath(dir, "a"), ExampleCachePath(dir, "b"));
  const std::string path = WriteCache(dir, MakeExamples(10));
  EXPECT_EQ(ExampleCacheReader::Open(path, "other", true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      ExampleCacheReader::Open(dir + "/none", "key", true).status().code(),
      absl::StatusCode::kNotFound);
}

// A writer that never finishes (the epoch stopped, the disk filled) leaves
// no file: a partial cache is never read.
TEST(ExampleCacheFileTest, AnUnfinishedCacheLeavesNothing) {
  const std::string dir = Fresh("cache_unfinished");
  {
    auto w = ExampleCacheWriter::Create(ExampleCachePath(dir, "key"), "key");
    ASSERT_TRUE(w.ok()) << w.status();
    for (const Example& e : MakeExamples(5000)) ASSERT_TRUE((*w)->Add(e).ok());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

// Damage anywhere is found and named with the file and the byte offset;
// hostile sizes never size a buffer.
TEST(ExampleCacheFileTest, DamageIsNamedWithFileAndOffset) {
  const std::string dir = Fresh("cache_damage");
  const std::string path = WriteCache(dir, MakeExamples(5000));
  const std::string good = ReadAll(path);
  const size_t first_chunk = 8 + 4 + 3;  // magic, key length, "key"

  struct Case {
    std::string name;
    std::string bytes;
    bool found_by_open;  // without reading the chunks
    std::string message;
  };
  std::vector<Case> cases;
  std::string flipped = good;
  flipped[first_chunk + 20 + 100] ^= 0x40;  // in the first chunk's labels
  cases.push_back({"flipped payload byte", flipped, false,
                   absl::StrCat("damaged at byte ", first_chunk,
                                ": chunk checksum mismatch")});
  std::string huge = good;
  const uint32_t n = 0xffffffffu;
  huge.replace(first_chunk, 4, reinterpret_cast<const char*>(&n), 4);
  cases.push_back({"absurd example count", huge, false,
                   absl::StrCat("damaged at byte ", first_chunk,
                                ": a chunk of 4294967295 examples")});
  std::string flags = good;
  flags[first_chunk + 12] = 4;
  cases.push_back({"unknown flags", flags, false,
                   absl::StrCat("damaged at byte ", first_chunk,
                                ": unknown chunk flags 4")});
  cases.push_back({"truncated", good.substr(0, good.size() - 7), true,
                   "no PSRTEND1 footer (incomplete file)"});
  cases.push_back({"cut after a chunk", good.substr(0, good.size() / 2), true,
                   "no PSRTEND1 footer"});
  std::string footer = good;
  const uint64_t lie = 4999;
  footer.replace(good.size() - 16, 8, reinterpret_cast<const char*>(&lie), 8);
  cases.push_back({"footer count", footer, false,
                   "the footer counts 4999 examples in 2 chunks; the file "
                   "holds 5000 in 2"});
  cases.push_back({"not a cache", "hello world, this is not a cache file!",
                   true, "damaged at byte 0: not an example cache"});
  std::string key_length = good;
  const uint32_t big = 1u << 30;
  key_length.replace(8, 4, reinterpret_cast<const char*>(&big), 4);
  cases.push_back({"key length", key_length, true,
                   "damaged at byte 8: a key of 1073741824 bytes"});

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteAll(path, c.bytes);
    auto lazy = ExampleCacheReader::Open(path, "key", false);
    auto verified = ExampleCacheReader::Open(path, "key", true);
    ASSERT_FALSE(verified.ok());
    EXPECT_EQ(verified.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(verified.status().message().find(path), std::string::npos)
        << verified.status();
    EXPECT_NE(verified.status().message().find(c.message), std::string::npos)
        << verified.status();
    EXPECT_NE(verified.status().message().find("delete it"), std::string::npos);
    if (c.found_by_open) {
      EXPECT_FALSE(lazy.ok());
      continue;
    }
    // Opened without reading the chunks: reading finds it.
    ASSERT_TRUE(lazy.ok()) << lazy.status();
    Example e;
    absl::Status status;
    while (true) {
      absl::StatusOr<bool> more = (*lazy)->Next(&e);
      if (!more.ok() || !*more) {
        status = more.status();
        break;
      }
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace psrt
