// The PS's memory guard inside a real memory-limited cgroup, as in a
// container with a memory limit: a table that grows toward the limit is
// refused with an error naming the cgroup, before the kernel's OOM killer
// kills the PS, and the PS keeps serving what it holds.
//
// Needs root and a writable cgroup memory controller (v1 or v2). Skips
// without them, except in CI (CI=true), where it fails.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "util/sanitizers.h"

namespace psrt {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kLimit = 768 * kMiB;

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A child cgroup of this process's own, with a memory limit, that this
// process (and so every PS it starts) moves into; moved back and removed
// at the end.
class LimitedCgroup {
 public:
  // Empty on success, else why it could not be made.
  std::string Create(int64_t limit) {
    for (absl::string_view line :
         absl::StrSplit(ReadText("/proc/self/cgroup"), '\n')) {
      std::vector<std::string> parts =
          absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (parts.size() != 3) continue;
      if (parts[1] == "memory" ||
          absl::StrContains(absl::StrCat(",", parts[1], ","), ",memory,")) {
        parent_ = "/sys/fs/cgroup/memory" + parts[2];
        limit_file_ = "memory.limit_in_bytes";
      } else if (parts[0] == "0" && parts[1].empty() && parent_.empty() &&
                 absl::StrContains(
                     ReadText("/sys/fs/cgroup/cgroup.controllers"), "memory")) {
        parent_ = "/sys/fs/cgroup" + parts[2];
        limit_file_ = "memory.max";
      }
    }
    if (parent_.empty()) return "no cgroup memory controller found";
    dir_ = absl::StrCat(parent_, "/psrt_memory_guard_", getpid());
    if (mkdir(dir_.c_str(), 0755) != 0) {
      return absl::StrCat("cannot create ", dir_, ": ", strerror(errno));
    }
    if (!WriteText(absl::StrCat(dir_, "/", limit_file_),
                   std::to_string(limit))) {
      return absl::StrCat("cannot set ", dir_, "/", limit_file_);
    }
    if (!WriteText(dir_ + "/cgroup.procs", std::to_string(getpid()))) {
      return absl::StrCat("cannot move this process into ", dir_);
    }
    return "";
  }

  std::string oom_kills() const {
    // v1 memory.oom_control and v2 memory.events both count "oom_kill".
    for (const char* file : {"/memory.oom_control", "/memory.events"}) {
      for (absl::string_view line :
           absl::StrSplit(ReadText(dir_ + file), '\n')) {
        if (absl::StartsWith(line, "oom_kill ")) {
          return std::string(line.substr(9));
        }
      }
    }
    return "?";
  }

  ~LimitedCgroup() {
    if (dir_.empty()) return;
    WriteText(parent_ + "/cgroup.procs", std::to_string(getpid()));
    rmdir(dir_.c_str());
  }

 private:
  std::string parent_, limit_file_, dir_;
};

TEST(MemoryGuardTest, AGrowingTableIsRefusedInsideTheCgroupLimitNotKilled) {
  LimitedCgroup cgroup;
  if (const std::string why = cgroup.Create(kLimit); !why.empty()) {
    if (std::getenv("CI") != nullptr) FAIL() << why;
    GTEST_SKIP() << why;
  }
  LocalCluster::Options options;
  options.num_ps = 1;
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();

  // A table the limit cannot hold is refused when it is created...
  VariableSpec dense;
  dense.set_name("too_big");
  dense.set_kind(DENSE);
  dense.add_shape(kLimit / 4);  // as many floats as the limit has bytes
  dense.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  dense.mutable_optimizer()->set_learning_rate(0.1f);
  absl::Status refused = (*client)->CreateVariables({dense});
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("the memory limit of cgroup"),
            std::string::npos)
      << refused;

  // ...and an unbounded hash table (dim 64, Adagrad: 512 bytes a row)
  // grows push by push until the guard refuses a push.
  VariableSpec table;
  table.set_name("ids");
  table.set_kind(HASH_EMBEDDING);
  table.add_shape(0);
  table.add_shape(64);
  table.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  table.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_EQ((*client)->CreateVariables({table}), absl::OkStatus());
  constexpr int kIdsPerPush = 50000;
  std::vector<int64_t> ids(kIdsPerPush);
  std::vector<float> grads(ids.size() * 64, 0.5f);
  absl::Status push;
  int pushes = 0;
  for (; pushes < 100; ++pushes) {
    std::iota(ids.begin(), ids.end(), int64_t{pushes} * kIdsPerPush);
    push = (*client)->PushRows("ids", ids, grads.data());
    if (!push.ok()) break;
  }
  ASSERT_EQ(push.code(), absl::StatusCode::kResourceExhausted)
      << push << " after " << pushes << " pushes";
  EXPECT_NE(push.message().find("the memory limit of cgroup"),
            std::string::npos)
      << push;
  const bool names_limit =
      push.message().find("memory.limit_in_bytes=805306368") !=
          std::string::npos ||
      push.message().find("memory.max=805306368") != std::string::npos;
  EXPECT_TRUE(names_limit) << push;
  std::cout << "refused after " << pushes << " pushes ("
            << int64_t{pushes} * kIdsPerPush << " rows): " << push.message()
            << "\n";
  // It filled most of the limit first: at least half of it in rows.
  // (Under ASan, its shadow memory and quarantine take part of the
  // cgroup's limit: `./run.sh soak` checks the refusal, the optimized
  // pass how much the rows filled.)
#if !defined(PSRT_ADDRESS_SANITIZER)
  EXPECT_GT(int64_t{pushes} * kIdsPerPush * 512, kLimit / 2) << pushes;
#endif

  // The PS was not killed, and what it holds is intact: the first push's
  // rows carry one Adagrad step.
  EXPECT_TRUE((*cluster)->Running(0));
  EXPECT_EQ(kill((*cluster)->pid(0), 0), 0) << "PS 0 is gone";
  EXPECT_EQ(cgroup.oom_kills(), "0");
  std::vector<int64_t> first = {0, 1, kIdsPerPush - 1};
  std::vector<float> rows(first.size() * 64);
  ASSERT_TRUE((*client)->PullRows("ids", first, rows.data()).ok());
  for (float x : rows) {
    ASSERT_LT(x, 0.0f);  // zeros, less one step against a positive gradient
    ASSERT_EQ(x, rows[0]);
  }
  // A known id can still be trained after the refusal.
  ASSERT_TRUE((*client)->PushRows("ids", first, grads.data()).ok());
  std::vector<float> after(rows.size());
  ASSERT_TRUE((*client)->PullRows("ids", first, after.data()).ok());
  EXPECT_LT(after[0], rows[0]);
}

}  // namespace
}  // namespace psrt
