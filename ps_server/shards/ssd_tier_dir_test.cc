#include "ps_server/shards/ssd_tier_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

namespace fs = std::filesystem;

std::string TestRoot(const char* name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ssd-tier-dir-", name);
  fs::remove_all(root);
  return root;
}

// A PS process that made its directory, spilled a row file and died
// without cleaning up (as SIGKILL leaves it). Returns the directory.
std::string DirOfAKilledPs(const std::string& root, int task) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto owned = OwnedSsdTierDir::Create(root, task);
    if (!owned.ok()) _exit(1);
    std::ofstream((*owned)->path() + "/000001.sst") << "spilled rows";
    const std::string path = (*owned)->path();
    (void)!write(fds[1], path.data(), path.size());
    _exit(0);  // no destructors: the directory stays, its lock is freed
  }
  close(fds[1]);
  char buffer[4096];
  const ssize_t n = read(fds[0], buffer, sizeof(buffer));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return n > 0 ? std::string(buffer, n) : "";
}

TEST(OwnedSsdTierDirTest, IsThisProcesssOwnAndRemovedWithIt) {
  const std::string root = TestRoot("own");
  std::string path;
  {
    auto owned = OwnedSsdTierDir::Create(root, 3);
    ASSERT_TRUE(owned.ok()) << owned.status();
    path = (*owned)->path();
    EXPECT_EQ(path, absl::StrCat(root, "/ps3-", getpid()));
    EXPECT_TRUE(fs::is_directory(path));
    // Live: another PS starting sweeps around it.
    EXPECT_EQ(RemoveDeadOwnersSsdTierDirs(root), 0);
    EXPECT_TRUE(fs::is_directory(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(OwnedSsdTierDirTest, ADirectoryLeftByAKilledPsIsRemovedByTheNextOne) {
  const std::string root = TestRoot("killed");
  const std::string left = DirOfAKilledPs(root, 0);
  ASSERT_FALSE(left.empty());
  ASSERT_TRUE(fs::exists(left + "/000001.sst"));
  // Not a PS's (no lock file): left alone, as are files.
  fs::create_directories(root + "/mine");
  std::ofstream(root + "/notes.txt") << "x";
  auto next = OwnedSsdTierDir::Create(root, 0);  // sweeps first
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(fs::exists(left));
  EXPECT_TRUE(fs::is_directory((*next)->path()));
  EXPECT_TRUE(fs::is_directory(root + "/mine"));
  EXPECT_TRUE(fs::exists(root + "/notes.txt"));
  // Each PS started sweeps: the second killed one removed the first's.
  const std::string one = DirOfAKilledPs(root, 1);
  const std::string two = DirOfAKilledPs(root, 2);
  EXPECT_FALSE(fs::exists(one));
  EXPECT_TRUE(fs::exists(two + "/000001.sst"));
  EXPECT_EQ(RemoveDeadOwnersSsdTierDirs(root), 1);
  EXPECT_FALSE(fs::exists(two));
  EXPECT_TRUE(fs::is_directory((*next)->path()));
}

TEST(OwnedSsdTierDirTest, AnUnwritableRootIsRefusedNamingIt) {
  const std::string root = TestRoot("unwritable");
  std::ofstream(root) << "a file, not a directory";
  auto owned = OwnedSsdTierDir::Create(root, 0);
  ASSERT_FALSE(owned.ok());
  EXPECT_NE(owned.status().message().find(root), std::string::npos)
      << owned.status();
  EXPECT_NE(owned.status().message().find("--ssd_tier_dir"), std::string::npos)
      << owned.status();
}

}  // namespace
}  // namespace psrt
