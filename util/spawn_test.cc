#include "util/spawn.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

std::string TestFile(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/spawn_test_", name);
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The exit code of `pid`, or -1 if it did not exit within `timeout`.
int ExitCode(pid_t pid, absl::Duration timeout = absl::Seconds(30)) {
  return WaitForExit(pid, absl::Now() + timeout);
}

TEST(SpawnProcessTest, StdoutAndStderrGoToTheFileAppendedOrTruncated) {
  const std::string log = TestFile("log");
  std::ofstream(log) << "earlier\n";
  SpawnOptions options;
  options.output_file = log;
  auto pid = SpawnProcess({"/bin/sh", "-c", "echo out; echo err >&2; exit 7"},
                          options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(ExitCode(*pid), 7);
  EXPECT_EQ(Read(log), "earlier\nout\nerr\n");

  options.truncate_output = true;
  pid = SpawnProcess({"/bin/sh", "-c", "echo again"}, options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(ExitCode(*pid), 0);
  EXPECT_EQ(Read(log), "again\n");
}

TEST(SpawnProcessTest, StdoutIntoAPipeAndStderrIntoTheFile) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  SpawnOptions options;
  options.stdout_fd = pipe_fds[1];
  options.output_file = TestFile("stderr");
  options.truncate_output = true;
  auto pid = SpawnProcess({"/bin/sh", "-c", "echo to-pipe; echo to-file >&2"},
                          options);
  close(pipe_fds[1]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  std::string out;
  char buffer[256];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) {
    out.append(buffer, n);
  }
  close(pipe_fds[0]);  // read to its end: the child held no other copy
  EXPECT_EQ(ExitCode(*pid), 0);
  EXPECT_EQ(out, "to-pipe\n");
  EXPECT_EQ(Read(options.output_file), "to-file\n");
}

TEST(SpawnProcessTest, EnvironmentVariablesSetAndRemovedInTheChildOnly) {
  ASSERT_EQ(setenv("PSRT_SPAWN_TEST_KEPT", "kept", 1), 0);
  ASSERT_EQ(setenv("PSRT_SPAWN_TEST_REMOVED", "present", 1), 0);
  SpawnOptions options;
  options.output_file = TestFile("env");
  options.truncate_output = true;
  options.environment = {{"PSRT_SPAWN_TEST_SET", "a=b c"},
                         {"PSRT_SPAWN_TEST_REMOVED", std::nullopt}};
  auto pid = SpawnProcess({"/bin/sh", "-c",
                           "echo \"$PSRT_SPAWN_TEST_KEPT|$PSRT_SPAWN_TEST_SET|"
                           "${PSRT_SPAWN_TEST_REMOVED-unset}\""},
                          options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(ExitCode(*pid), 0);
  EXPECT_EQ(Read(options.output_file), "kept|a=b c|unset\n");
  EXPECT_STREQ(std::getenv("PSRT_SPAWN_TEST_REMOVED"), "present");
  EXPECT_EQ(std::getenv("PSRT_SPAWN_TEST_SET"), nullptr);
}

TEST(SpawnProcessTest, AProgramThatCannotStartIsAnErrorNamingIt) {
  auto pid = SpawnProcess({"/nonexistent/ps_server", "--help"});
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("/nonexistent/ps_server --help"),
            std::string::npos)
      << pid.status();
  EXPECT_NE(pid.status().message().find("No such file"), std::string::npos)
      << pid.status();

  SpawnOptions search;
  search.search_path = true;
  EXPECT_FALSE(SpawnProcess({"psrt-no-such-program"}, search).ok());
  search.output_file = "/dev/null";
  auto found = SpawnProcess({"true"}, search);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(ExitCode(*found), 0);

  EXPECT_FALSE(SpawnProcess({}).ok());
  SpawnOptions unwritable;
  unwritable.output_file = "/nonexistent/dir/log";
  EXPECT_FALSE(SpawnProcess({"/bin/true"}, unwritable).ok());
}

TEST(SpawnProcessTest, WaitForExitNamesTheSignalAndKillsAtTheDeadline) {
  auto killed = SpawnProcess({"/bin/sh", "-c", "kill -TERM $$"});
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(ExitCode(*killed), 128 + SIGTERM);
  auto sleeper = SpawnProcess({"/bin/sleep", "60"});
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  EXPECT_EQ(ExitCode(*sleeper, absl::Milliseconds(200)), -1);
  EXPECT_EQ(kill(*sleeper, 0), -1) << "killed and reaped at the deadline";
}

// What tests do while a cluster trains: start programs while other threads
// allocate and free without pause. Every child must reach exec and exit; a
// child that allocated between fork and exec could wait forever on an
// allocator lock another thread held at the fork.
TEST(SpawnProcessTest, EveryChildStartsWhileOtherThreadsAllocate) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> allocators;
  for (int t = 0; t < 3; ++t) {
    allocators.emplace_back([&stop, t] {
      std::vector<std::string> held;
      unsigned seed = t;
      while (!stop) {
        for (int i = 0; i < 500; ++i) {
          held.emplace_back(8 + rand_r(&seed) % 120, 'x');
        }
        held.clear();
      }
    });
  }
  constexpr int kChildren = 200;
  int exited = 0;
  for (int i = 0; i < kChildren; ++i) {
    SpawnOptions options;
    options.output_file = "/dev/null";
    options.environment = {{"PSRT_SPAWN_TEST_CHILD", absl::StrCat(i)}};
    auto pid = SpawnProcess({"/bin/true"}, options);
    ASSERT_TRUE(pid.ok()) << pid.status();
    exited += ExitCode(*pid, absl::Seconds(10)) == 0;
  }
  stop = true;
  for (std::thread& thread : allocators) thread.join();
  EXPECT_EQ(exited, kChildren);
}

}  // namespace
}  // namespace psrt
