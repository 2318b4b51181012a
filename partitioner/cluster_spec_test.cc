#include "partitioner/cluster_spec.h"

#include <cstdlib>
#include <fstream>

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
      {R"({"cluster": {"ps": ["a:1"], "master": ["b:1"]}})",
       "unknown job \"master\""},
      {R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 3}})",
       "task ps:3 is outside the cluster (1 ps tasks)"},
      {R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "boss"}})",
       "is not ps, worker or chief"},
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
