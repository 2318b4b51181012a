#include "util/memory_headroom.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kGiB = int64_t{1} << 30;

// A tree of the files the kernel shows, as a container would see them.
class MemoryHeadroomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) /
        absl::StrCat(
            "memory_headroom_", getpid(), "_",
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    files_.proc = (root_ / "proc").string();
    files_.cgroup = (root_ / "cgroup").string();
    Write("proc/meminfo",
          absl::StrCat("MemTotal: 33554432 kB\n", "MemFree: 1000 kB\n",
                       "MemAvailable: 20971520 kB\n"));
  }

  void Write(const std::string& relative, const std::string& text) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

  fs::path root_;
  MemoryFiles files_;
};

TEST_F(MemoryHeadroomTest, WithoutCgroupsItIsTheHostsMemAvailable) {
  const MemoryHeadroom h = AvailableMemory(files_);
  EXPECT_EQ(h.bytes, 20 * kGiB);
  EXPECT_EQ(h.total, 32 * kGiB);
  EXPECT_EQ(h.source, "MemAvailable of the host");
}

TEST_F(MemoryHeadroomTest, CgroupV2LimitMinusWorkingSet) {
  Write("proc/self/cgroup", "0::/kubepods/pod1/ps\n");
  Write("cgroup/cgroup.controllers", "cpu memory pids\n");
  Write("cgroup/kubepods/pod1/ps/memory.max", "4294967296\n");
  Write("cgroup/kubepods/pod1/ps/memory.current", "1610612736\n");
  // Inactive page cache is reclaimed before the OOM killer acts.
  Write("cgroup/kubepods/pod1/ps/memory.stat",
        "anon 1073741824\nfile 536870912\ninactive_file 536870912\n");
  const MemoryHeadroom h = AvailableMemory(files_);
  EXPECT_EQ(h.bytes, 4 * kGiB - 1 * kGiB);
  EXPECT_EQ(h.total, 4 * kGiB);
  EXPECT_NE(h.source.find("v2 memory.max=4294967296"), std::string::npos)
      << h.source;
  EXPECT_NE(h.source.find("/kubepods/pod1/ps"), std::string::npos) << h.source;
}

TEST_F(MemoryHeadroomTest, AnAncestorsTighterLimitWins) {
  Write("proc/self/cgroup", "0::/kubepods/pod1/ps\n");
  Write("cgroup/cgroup.controllers", "memory\n");
  Write("cgroup/kubepods/pod1/ps/memory.max", "max\n");
  Write("cgroup/kubepods/pod1/ps/memory.current", "1073741824\n");
  Write("cgroup/kubepods/pod1/memory.max", "2147483648\n");
  Write("cgroup/kubepods/pod1/memory.current", "1610612736\n");
  Write("cgroup/kubepods/memory.max", "8589934592\n");
  Write("cgroup/kubepods/memory.current", "1610612736\n");
  const MemoryHeadroom h = AvailableMemory(files_);
  EXPECT_EQ(h.bytes, 2 * kGiB - 1610612736);
  EXPECT_EQ(h.total, 2 * kGiB);
  EXPECT_NE(h.source.find("cgroup /kubepods/pod1 "), std::string::npos)
      << h.source;
}

TEST_F(MemoryHeadroomTest, CgroupV1LimitOfTheMemoryController) {
  Write("proc/self/cgroup",
        "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
  Write("cgroup/memory/docker/abc/memory.limit_in_bytes", "3221225472\n");
  Write("cgroup/memory/docker/abc/memory.usage_in_bytes", "1073741824\n");
  Write("cgroup/memory/docker/abc/memory.stat",
        "cache 0\ninactive_file 7\ntotal_inactive_file 536870912\n");
  // The unlimited root above it changes nothing.
  Write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("cgroup/memory/memory.usage_in_bytes", "9000000000\n");
  const MemoryHeadroom h = AvailableMemory(files_);
  EXPECT_EQ(h.bytes, 3 * kGiB - (kGiB - kGiB / 2));
  EXPECT_NE(h.source.find("v1 memory.limit_in_bytes=3221225472"),
            std::string::npos)
      << h.source;
}

TEST_F(MemoryHeadroomTest, ANamespacedContainerReadsItsCgroupAtTheMountRoot) {
  // With a cgroup namespace the process sees a path that does not exist
  // under the mount: its own cgroup is the mount's root.
  Write("proc/self/cgroup", "0::/../../pod-outside\n");
  Write("cgroup/cgroup.controllers", "memory\n");
  Write("cgroup/memory.max", "1073741824\n");
  Write("cgroup/memory.current", "268435456\n");
  const MemoryHeadroom h = AvailableMemory(files_);
  EXPECT_EQ(h.bytes, kGiB - kGiB / 4);
}

TEST_F(MemoryHeadroomTest, ALimitLooserThanTheHostKeepsMemAvailable) {
  Write("proc/self/cgroup", "0::/big\n");
  Write("cgroup/cgroup.controllers", "memory\n");
  Write("cgroup/big/memory.max", "107374182400\n");
  Write("cgroup/big/memory.current", "0\n");
  const MemoryHeadroom h = AvailableMemory(files_);
  EXPECT_EQ(h.bytes, 20 * kGiB);
  EXPECT_EQ(h.source, "MemAvailable of the host");
}

TEST_F(MemoryHeadroomTest, AFullCgroupHasNoRoomNotAnUnknownAmount) {
  Write("proc/self/cgroup", "0::/full\n");
  Write("cgroup/cgroup.controllers", "memory\n");
  Write("cgroup/full/memory.max", "1073741824\n");
  Write("cgroup/full/memory.current", "1073741824\n");
  EXPECT_EQ(AvailableMemory(files_).bytes, 0);
}

TEST(MemoryHeadroomOfThisMachine, IsKnownAndAtMostMemAvailable) {
  const MemoryHeadroom h = AvailableMemory();
  ASSERT_GT(h.bytes, 0) << h.source;
  EXPECT_FALSE(h.source.empty());
}

}  // namespace
}  // namespace psrt
