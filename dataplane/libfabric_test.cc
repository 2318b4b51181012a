#include "dataplane/libfabric.h"

#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace psrt::dataplane {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::atomic<int> interrupts{0};
void CountInterrupt(int) { interrupts.fetch_add(1); }

constexpr std::array<int, 7> kSignals = {SIGINT, SIGTERM, SIGSEGV, SIGBUS,
                                         SIGILL, SIGABRT, SIGFPE};

// A process stopped with SIGTERM dies of it, whether or not it loaded the
// data plane (before the lazy load, libinfinipath's handler made it
// exit(1) from inside the handler, or hang when that was inside malloc).
TEST(LibFabricTest, AProcessThatLoadedItDiesOfSigterm) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!LoadLibFabric().ok()) _exit(3);
    raise(SIGTERM);
    _exit(4);  // survived SIGTERM
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status))
      << "exit status " << WEXITSTATUS(status)
      << " (3: not loaded; 4: survived SIGTERM; 1: a library's handler)";
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(LibFabricTest, LoadsOnFirstUseAndKeepsEverySignalHandler) {
  // Nothing loaded it at start: a --data_plane=grpc process never maps it.
  EXPECT_EQ(Maps().find("/libfabric.so.1"), std::string::npos);
  EXPECT_EQ(Maps().find("libinfinipath"), std::string::npos);

  struct sigaction count = {};
  count.sa_handler = CountInterrupt;
  sigemptyset(&count.sa_mask);
  ASSERT_EQ(sigaction(SIGINT, &count, nullptr), 0);  // e.g. Python's Ctrl-C
  std::array<struct sigaction, kSignals.size()> before;
  for (size_t i = 0; i < kSignals.size(); ++i) {
    ASSERT_EQ(sigaction(kSignals[i], nullptr, &before[i]), 0);
  }

  absl::StatusOr<const LibFabric*> lib = LoadLibFabric();
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_NE(Maps().find("/libfabric.so.1"), std::string::npos);
  for (size_t i = 0; i < kSignals.size(); ++i) {
    struct sigaction after = {};
    ASSERT_EQ(sigaction(kSignals[i], nullptr, &after), 0);
    EXPECT_EQ(reinterpret_cast<void*>(after.sa_handler),
              reinterpret_cast<void*>(before[i].sa_handler))
        << "signal " << kSignals[i] << " taken by the load";
  }
  raise(SIGINT);
  EXPECT_EQ(interrupts.load(), 1);

  // The bound entry points answer, and a second load is the same table.
  EXPECT_STRNE((*lib)->strerror(FI_EAGAIN), "");
  fi_info* info = (*lib)->dupinfo(nullptr);
  ASSERT_NE(info, nullptr);
  (*lib)->freeinfo(info);
  absl::StatusOr<const LibFabric*> again = LoadLibFabric();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *lib);
}

}  // namespace
}  // namespace psrt::dataplane
