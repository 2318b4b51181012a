// Catalogs stay equal across PS: a creation one PS refuses leaves nothing
// on any; a PS that lost its catalog (restarted empty) is reported by psctl
// and repaired by the next creation.
#include <csignal>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

VariableSpec Dense(const std::string& name, int64_t size) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(DENSE);
  s.add_shape(size);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  return s;
}

// PS 1 refuses a variable PS 0 would accept (its memory limit): nothing is
// created anywhere, and the catalogs stay equal.
TEST(CatalogTest, CreationRefusedByOnePsLeavesNothingOnAny) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.extra_flags = {"--memory_limit_bytes=1000000"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  // "a" (1 shard) lands on PS 0, then "big" (4 MB) on PS 1, over its limit.
  ASSERT_EQ((*client)->CreateVariables({Dense("a", 10)}), absl::OkStatus());
  ASSERT_EQ((*client)->Find("a")->shards[0].ps_task, 0);
  absl::Status s = (*client)->CreateVariables({Dense("big", 1000000)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "PS 1")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "nothing was created on any PS"))
      << s;
  auto lists = (*client)->ListVariables();
  ASSERT_TRUE(lists.ok());
  for (const auto& ps : *lists) EXPECT_EQ(ps.variables_size(), 1);
  // The next creation is not blocked by the aborted one.
  ASSERT_EQ((*client)->CreateVariables({Dense("b", 10)}), absl::OkStatus());
  auto psctl = RunPrograms(
      "tools/psctl/psctl",
      {absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec())),
       "variables"},
      {""}, absl::Seconds(30));
  EXPECT_EQ(psctl[0].exit_code, 0) << psctl[0].output;
}

// A PS restarted without a checkpoint comes back empty: psctl reports the
// drift (never indexing past the shorter list), and the next creation sends
// it the whole catalog.
TEST(CatalogTest, DriftIsReportedByPsctlAndRepairedByTheNextCreate) {
  auto cluster = LocalCluster::Start({.num_ps = 2});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables({Dense("a", 10), Dense("b", 1000)}),
            absl::OkStatus());
  (*cluster)->Kill(1, SIGKILL);
  ASSERT_TRUE((*cluster)->Restart(1).ok());

  const std::string cluster_flag =
      absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec()));
  auto psctl = RunPrograms("tools/psctl/psctl", {cluster_flag, "variables"},
                           {""}, absl::Seconds(30));
  EXPECT_EQ(psctl[0].exit_code, 1) << psctl[0].output;  // not a crash
  EXPECT_TRUE(absl::StrContains(psctl[0].output,
                                "catalog drift: PS 1 holds 0 variables, PS 0 "
                                "holds 2; they differ from #0 on"))
      << psctl[0].output;
  EXPECT_TRUE(absl::StrContains(psctl[0].output, "PS 1   does not hold it"))
      << psctl[0].output;

  // Creating again (here: nothing new) repairs PS 1.
  ASSERT_EQ((*client)->CreateVariables({Dense("a", 10)}), absl::OkStatus());
  psctl = RunPrograms("tools/psctl/psctl", {cluster_flag, "variables"}, {""},
                      absl::Seconds(30));
  EXPECT_EQ(psctl[0].exit_code, 0) << psctl[0].output;
  std::vector<float> grad(1000, 1.0f), out(1000);
  ASSERT_TRUE((*client)->PushDense("b", grad.data()).ok());
  ASSERT_TRUE((*client)->PullDense("b", out.data()).ok());
  EXPECT_EQ(out[999], -1.0f);
}

TEST(CatalogTest, PsctlWithoutAClusterSaysHowToNameOne) {
  // The default names "localhost", which gRPC resolves with c-ares; c-ares
  // leaks a few bytes on that lookup (LeakSanitizer, ASan builds). Not ours.
  const std::string suppressions = FreshTestDir("lsan") + "/suppressions";
  std::ofstream(suppressions) << "leak:libcares.so\n";
  setenv("LSAN_OPTIONS", ("suppressions=" + suppressions).c_str(), 1);
  auto run = RunPrograms("tools/psctl/psctl", {"--timeout_secs=1", "status"},
                         {""}, absl::Seconds(30));
  EXPECT_EQ(run[0].exit_code, 1) << run[0].output;
  EXPECT_TRUE(absl::StrContains(run[0].output,
                                "no --cluster and no TF_CONFIG, so psctl "
                                "looked for one PS on localhost:2223"))
      << run[0].output;
}

}  // namespace
}  // namespace psrt
