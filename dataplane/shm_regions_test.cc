#include "dataplane/shm_regions.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dataplane/fabric_endpoint.h"
#include "gtest/gtest.h"

namespace psrt::dataplane {
namespace {

// The /dev/shm files named for `pid` and this user.
int RegionsOf(pid_t pid) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return -1;
  const std::string prefix = absl::StrCat(pid, ":", getuid(), ":");
  int n = 0;
  while (dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) ++n;
  }
  closedir(dir);
  return n;
}

// A region as a process killed with SIGKILL leaves it: a file nobody holds.
void LeaveRegion(pid_t pid, int index) {
  const std::string path =
      absl::StrCat("/dev/shm/", pid, ":", getuid(), ":", index);
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  close(fd);
}

FabricOptions Shm() {
  FabricOptions options;
  options.provider = "shm";
  return options;
}

TEST(ShmRegionsTest, StaleRegionsGoAndAnOpenEndpointsStays) {
  auto endpoint = FabricEndpoint::Open(Shm());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_EQ(RegionsOf(getpid()), 1);
  LeaveRegion(getpid(), 100000);
  LeaveRegion(getpid(), 100001);
  ASSERT_EQ(RegionsOf(getpid()), 3);
  EXPECT_EQ(RemoveStaleShmRegions(getpid()), 2);
  EXPECT_EQ(RegionsOf(getpid()), 1);  // the open endpoint's, held
  endpoint->reset();
  EXPECT_EQ(RegionsOf(getpid()), 0);  // unlinked by its close
}

// A process given the pid of one killed earlier: every region name its
// endpoints could take is left over, and shm still opens (without the
// clean-up, fi_enable fails with EBUSY and the data plane falls back).
TEST(ShmRegionsTest, AProcessOpensShmOverRegionsLeftUnderItsPid) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int index = 0; index < 256; ++index) LeaveRegion(getpid(), index);
    auto endpoint = FabricEndpoint::Open(Shm());
    // Ends without closing it, as a process killed would.
    _exit(endpoint.ok() && RegionsOf(getpid()) == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // What its parent removes once it reaped it (as tests' clusters do).
  EXPECT_EQ(RegionsOf(child), 1);
  EXPECT_EQ(RemoveStaleShmRegions(child), 1);
  EXPECT_EQ(RegionsOf(child), 0);
}

}  // namespace
}  // namespace psrt::dataplane
