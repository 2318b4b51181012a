#include "storage/file_storage.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

std::string TempRoot(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base ? base : "/tmp", "/", name);
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return dir;
}

TEST(FileStorageTest, WriteReadListDelete) {
  const std::string root = TempRoot("fs1");
  auto storage = OpenStorage(root);
  ASSERT_TRUE(storage.ok());
  Storage& s = **storage;
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  ASSERT_TRUE(s.Write("ckpt-1/a.shard", big).ok());
  ASSERT_TRUE(s.Write("ckpt-1/MANIFEST.json", "{}").ok());
  ASSERT_TRUE(s.Write("ckpt-2/b", "").ok());
  ASSERT_TRUE(s.Write("latest", "ckpt-1\n").ok());
  // Replacing keeps one object with the new content.
  ASSERT_TRUE(s.Write("latest", "ckpt-2\n").ok());
  auto read = s.Read("ckpt-1/a.shard");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, big);
  EXPECT_EQ(*s.Read("latest"), "ckpt-2\n");
  auto listed = s.List("ckpt-");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].key, "ckpt-1/MANIFEST.json");
  EXPECT_EQ((*listed)[1].key, "ckpt-1/a.shard");
  EXPECT_EQ((*listed)[1].bytes, 3 << 20);
  EXPECT_EQ((*listed)[2].key, "ckpt-2/b");
  EXPECT_EQ(s.List("ckpt-1/")->size(), 2u);
  EXPECT_EQ(s.List("nothing")->size(), 0u);
  ASSERT_TRUE(s.Delete("ckpt-2/b").ok());
  ASSERT_TRUE(s.Delete("ckpt-2/b").ok());  // absent: fine
  EXPECT_EQ(s.List("ckpt-2")->size(), 0u);
  // The emptied directory went with it.
  struct stat st;
  EXPECT_NE(stat(absl::StrCat(root, "/ckpt-2").c_str(), &st), 0);
  EXPECT_TRUE(absl::IsNotFound(s.Read("ckpt-2/b").status()));
  EXPECT_TRUE(
      absl::StrContains(s.Read("ckpt-2/b").status().message(), "ckpt-2/b"));
}

TEST(FileStorageTest, UriForms) {
  const std::string root = TempRoot("fs2");
  auto plain = OpenStorage(root);
  auto uri = OpenStorage("file://" + root);
  ASSERT_TRUE(plain.ok() && uri.ok());
  ASSERT_TRUE((*uri)->Write("k", "v").ok());
  EXPECT_EQ(*(*plain)->Read("k"), "v");
  EXPECT_FALSE(OpenStorage("file://relative/path").ok());
  EXPECT_FALSE(OpenStorage("gs://bucket/x").ok());
  EXPECT_FALSE(OpenStorage("s3:///nobucket").ok());
  EXPECT_FALSE(OpenStorage("").ok());
}

TEST(FileStorageTest, WriteErrorsNameThePathAndLeaveNoTemporaries) {
  const std::string root = TempRoot("fs3");
  auto storage = OpenStorage(root);
  ASSERT_TRUE((*storage)->Write("file", "x").ok());
  // A path through a regular file cannot be created (even as root).
  absl::Status s = (*storage)->Write("file/below", "data");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "file")) << s;
  EXPECT_EQ((*storage)->List("")->size(), 1u);
}

TEST(FileStorageTest, KeysCannotLeaveTheRoot) {
  const std::string root = TempRoot("fs4");
  auto storage = OpenStorage(root + "/inner");
  ASSERT_TRUE(storage.ok());
  for (const char* key : {"../outside", "a/../../outside", "/etc/x", "a//b",
                          "a/./b", "..", ".", "", "a\nb", "a/"}) {
    absl::Status s = (*storage)->Write(key, "data");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << "'" << key << "': " << s;
    EXPECT_TRUE(absl::IsInvalidArgument((*storage)->Read(key).status())) << key;
    EXPECT_TRUE(absl::IsInvalidArgument((*storage)->Delete(key))) << key;
  }
  EXPECT_TRUE(absl::IsInvalidArgument((*storage)->List("../").status()));
  auto outside = OpenStorage(root);
  EXPECT_TRUE((*outside)->List("")->empty()) << "something was written";
  // Prefixes may end in a partial or empty component.
  EXPECT_TRUE(CheckStorageKey("ckpt-", /*prefix=*/true).ok());
  EXPECT_TRUE(CheckStorageKey("ckpt-1/", /*prefix=*/true).ok());
  EXPECT_TRUE(CheckStorageKey("ckpt-1/w.shard-00000-of-00002").ok());
}

}  // namespace
}  // namespace psrt
