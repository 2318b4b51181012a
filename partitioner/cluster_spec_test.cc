#include "partitioner/cluster_spec.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(ClusterSpecTest, ParsesTfConfig) {
  auto spec = ParseClusterSpec(R"({"cluster": {"ps": ["h1:2223", "h2:2223"],
      "worker": ["h1:2222", "h2:2222"]}, "task": {"type": "ps", "index": 1}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ps, (std::vector<std::string>{"h1:2223", "h2:2223"}));
  EXPECT_EQ(spec->num_workers(), 2);
  EXPECT_TRUE(spec->has_task);
  EXPECT_EQ(spec->task.type, "ps");
  EXPECT_EQ(spec->task.index, 1);
}

TEST(ClusterSpecTest, ChiefBecomesWorkerZero) {
  auto spec = ParseClusterSpec(R"({"cluster": {"ps": ["p:1"],
      "chief": ["c:2"], "worker": ["w:3", "w:4"]},
      "task": {"type": "worker", "index": 1}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->workers, (std::vector<std::string>{"c:2", "w:3", "w:4"}));
  EXPECT_EQ(spec->task.type, "worker");
  EXPECT_EQ(spec->task.index, 2);
}

// TF_CONFIG exactly as SageMaker's TensorFlow training toolkit writes it
// for a 3-host parameter_server job (its _build_tf_config): the chief is a
// "master" job on port 2222, every host runs a PS on 2223, and a top-level
// "environment": "cloud".
TEST(ClusterSpecTest, AcceptsSageMakersTensorFlowToolkitConfigUnchanged) {
  constexpr char kCluster[] =
      R"("cluster": {"master": ["algo-1:2222"],
      "ps": ["algo-1:2223", "algo-2:2223", "algo-3:2223"],
      "worker": ["algo-2:2222", "algo-3:2222"]}, "environment": "cloud")";
  auto master = ParseClusterSpec(absl::StrCat(
      "{", kCluster, R"(, "task": {"index": 0, "type": "master"}})"));
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_EQ(master->workers, (std::vector<std::string>{
                                 "algo-1:2222", "algo-2:2222", "algo-3:2222"}));
  EXPECT_EQ(master->num_ps(), 3);
  EXPECT_EQ(master->task.type, "worker");
  EXPECT_EQ(master->task.index, 0);
  ASSERT_EQ(master->notes.size(), 1u);
  EXPECT_NE(master->notes[0].find("master is taken as the chief"),
            std::string::npos);

  auto worker = ParseClusterSpec(absl::StrCat(
      "{", kCluster, R"(, "task": {"index": 1, "type": "worker"}})"));
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->task.type, "worker");
  EXPECT_EQ(worker->task.index, 2);  // algo-3: after the master and algo-2
  auto ps = ParseClusterSpec(
      absl::StrCat("{", kCluster, R"(, "task": {"index": 2, "type": "ps"}})"));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->task.type, "ps");
  EXPECT_EQ(ps->task.index, 2);

  auto both = ParseClusterSpec(R"({"cluster": {"ps": ["p:1"],
      "master": ["m:2"], "chief": ["c:3"]}})");
  EXPECT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("both cluster.chief and "
                                         "cluster.master"),
            std::string::npos)
      << both.status();
}

TEST(ClusterSpecTest, ErrorsNameTheProblem) {
  struct Case {
    const char* json;
    const char* message;
  } cases[] = {
      {"{", "not valid JSON"},
      {R"({"task": {}})", "missing the \"cluster\" object"},
      {R"({"cluster": {"worker": ["a:1"]}})", "at least one PS"},
      {R"({"cluster": {"ps": "a:1"}})", "must be a list"},
      {R"({"cluster": {"ps": ["a"]}})",
       "cluster.ps[0]: address 'a' is not host:port"},
      {R"({"cluster": {"ps": ["a:99999"]}})", "no valid port"},
      {R"({"cluster": {"ps": ["a:1", "a:1"]}})", "appears twice"},
      {R"({"cluster": {"ps": ["a:1"], "boss": ["b:1"]}})",
       "unknown job \"boss\""},
      {R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 3}})",
       "task ps:3 is outside the cluster (1 ps tasks)"},
      {R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "boss"}})",
       "is not ps, worker, chief (or master) or evaluator"},
      {R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0.5}})",
       "must be an integer"},
  };
  for (const auto& c : cases) {
    auto spec = ParseClusterSpec(c.json);
    ASSERT_FALSE(spec.ok()) << c.json;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.message), std::string::npos)
        << c.json << " -> " << spec.status();
  }
}

TEST(ClusterSpecTest, LoadsFromFlagFileEnvironmentOrDefault) {
  const std::string path = ::testing::TempDir() + "/cluster.json";
  std::ofstream(path) << R"({"cluster": {"ps": ["f:1"]}})";
  auto from_file = LoadClusterSpec(path, 2223);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->ps[0], "f:1");

  auto missing = LoadClusterSpec("/nonexistent/cluster.json", 2223);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  setenv("TF_CONFIG", R"({"cluster": {"ps": ["e:1", "e:2"]}})", 1);
  auto from_env = LoadClusterSpec("", 2223);
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->num_ps(), 2);
  setenv("TF_CONFIG", "{oops", 1);
  auto bad_env = LoadClusterSpec("", 2223);
  EXPECT_NE(bad_env.status().message().find("TF_CONFIG: "), std::string::npos);
  unsetenv("TF_CONFIG");

  auto local = LoadClusterSpec("", 2223);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->ps, std::vector<std::string>{"localhost:2223"});
  EXPECT_FALSE(local->has_task);
}

TEST(ClusterSpecTest, JsonRoundTrips) {
  ClusterSpec c;
  c.ps = {"a:1", "b:2"};
  c.workers = {"c:3"};
  c.has_task = true;
  c.task = {"worker", 0};
  auto back = ParseClusterSpec(ClusterSpecToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ps, c.ps);
  EXPECT_EQ(back->workers, c.workers);
  EXPECT_EQ(back->task.type, "worker");
}

}  // namespace
}  // namespace psrt
