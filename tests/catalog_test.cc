// Catalogs that drift apart: PS 1 refuses a variable PS 0 accepted. psctl
// reports the drift (and never indexes past a shorter list), and creating
// variables again repairs a PS that is behind once it can take them.
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

TEST(CatalogTest, DriftIsReportedByPsctlAndRepairedByTheNextCreate) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.extra_flags = {"--memory_limit_bytes=1000000"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  // "a" (1 shard) lands on PS 0, then "big" (4 MB) on PS 1, over its limit.
  ASSERT_TRUE((*client)->CreateVariables({Dense("a", 10)}).ok());
  ASSERT_EQ((*client)->Find("a")->shards[0].ps_task, 0);
  absl::Status s = (*client)->CreateVariables({Dense("big", 1000000)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "PS 1")) << s;

  const std::string cluster_flag =
      absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec()));
  auto psctl = RunPrograms("tools/psctl/psctl", {cluster_flag, "variables"},
                           {""}, absl::Seconds(30));
  EXPECT_EQ(psctl[0].exit_code, 1) << psctl[0].output;  // not a crash
  EXPECT_TRUE(absl::StrContains(psctl[0].output,
                                "catalog drift: PS 1 holds 1 variables, PS 0 "
                                "holds 2; they differ from #1 on"))
      << psctl[0].output;
  EXPECT_TRUE(absl::StrContains(psctl[0].output, "PS 1   does not hold it"))
      << psctl[0].output;

  // PS 1 gets room; the next create (here: nothing new) sends it the whole
  // catalog and it catches up.
  (*cluster)->Kill(1, SIGTERM);
  ASSERT_TRUE((*cluster)->Restart(1, {"--memory_limit_bytes=0"}).ok());
  ASSERT_TRUE((*client)->CreateVariables({Dense("a", 10)}).ok());
  psctl = RunPrograms("tools/psctl/psctl", {cluster_flag, "variables"}, {""},
                      absl::Seconds(30));
  EXPECT_EQ(psctl[0].exit_code, 0) << psctl[0].output;
  std::vector<float> grad(1000000, 1.0f), out(1000000);
  ASSERT_TRUE((*client)->PushDense("big", grad.data()).ok());
  ASSERT_TRUE((*client)->PullDense("big", out.data()).ok());
  EXPECT_EQ(out[999999], -1.0f);
}

TEST(CatalogTest, PsctlWithoutAClusterSaysHowToNameOne) {
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
