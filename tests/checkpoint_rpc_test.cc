// The checkpoint RPCs as an attacker sends them, against real ps_server
// processes: no request makes a PS write outside its own --checkpoint_uri,
// names and manifests are checked before a byte is written, and a secured
// cluster serves these RPCs only to its own hosts.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Every regular file under `dir` (find's output), for "nothing was written".
std::string FilesUnder(const std::string& dir) {
  const std::string list = absl::StrCat(dir, ".files");
  std::system(
      absl::StrCat("find '", dir, "' -type f 2>/dev/null | sort > '", list, "'")
          .c_str());
  std::ifstream in(list);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

VariableSpec Dense(const std::string& name) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(DENSE);
  s.add_shape(64);
  s.mutable_optimizer()->set_learning_rate(0.5f);
  return s;
}

class CheckpointRpcTest : public ::testing::Test {
 protected:
  // One PS with --checkpoint_uri=<tmp>/root (+ `flags`), a variable in it,
  // and a raw stub: the bytes any caller can send.
  void StartPs(std::vector<std::string> flags) {
    base_ = FreshTestDir("checkpoint_rpc");
    root_ = absl::StrCat(base_, "/root");
    victim_ = absl::StrCat(base_, "/victim");
    flags.push_back(absl::StrCat("--checkpoint_uri=", root_));
    flags.push_back("--checkpoint_on_shutdown=false");
    auto cluster = LocalCluster::Start({.num_ps = 1, .extra_flags = flags});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto client = Client::Connect(cluster_->MakeClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_EQ((*client)->CreateVariables({Dense("w")}), absl::OkStatus());
    stub_ = ParameterServer::NewStub(grpc::CreateChannel(
        cluster_->ps_addresses()[0], grpc::InsecureChannelCredentials()));
  }

  grpc::Status Commit(const std::string& root, const std::string& name,
                      const std::string& manifest) {
    grpc::ClientContext context;
    CommitCheckpointRequest request;
    request.set_root_uri(root);
    request.set_name(name);
    request.set_manifest_json(manifest);
    CommitCheckpointResponse response;
    return stub_->CommitCheckpoint(&context, request, &response);
  }
  grpc::Status Save(const std::string& uri) {
    grpc::ClientContext context;
    SaveShardsRequest request;
    request.set_checkpoint_uri(uri);
    SaveShardsResponse response;
    return stub_->SaveShards(&context, request, &response);
  }
  grpc::Status Checkpoint(const std::string& uri,
                          CheckpointResponse* response) {
    grpc::ClientContext context;
    CheckpointRequest request;
    request.set_checkpoint_uri(uri);
    return stub_->Checkpoint(&context, request, response);
  }
  // A manifest PS 0 could have written for checkpoint `name`.
  static std::string ValidManifest(const std::string& name) {
    return absl::StrCat(
        "{\"format_version\": 1, \"name\": \"", name,
        "\", \"global_step\": \"3\", \"num_ps\": 1, \"variables\": "
        "[{\"name\": \"w\", \"kind\": \"DENSE\", \"shape\": [\"64\"]}], "
        "\"files\": [{\"variable\": \"w\", \"path\": "
        "\"w.shard-00000-of-00001\", \"bytes\": \"300\"}]}");
  }

  std::string base_, root_, victim_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(CheckpointRpcTest, CommitCheckpointIsRefusedWithoutPerHostStorage) {
  StartPs({});
  // The request that wrote /MANIFEST.json and /nonexistent/x/latest.
  grpc::Status s = Commit(victim_, "../../..", "{{{");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();
  EXPECT_TRUE(
      absl::StrContains(s.error_message(), "--checkpoint_storage_per_host"))
      << s.error_message();
  // Even a well-formed one: PS 0 writes manifests on shared storage.
  s = Commit(root_, "ckpt-0000000003-0000000000001",
             ValidManifest("ckpt-0000000003-0000000000001"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(FilesUnder(base_), "");
  EXPECT_FALSE(Exists(absl::StrCat(base_, "/MANIFEST.json")));
}

TEST_F(CheckpointRpcTest, CommitCheckpointWritesOnlyCheckedManifestsUnderRoot) {
  StartPs({"--checkpoint_storage_per_host"});
  const std::string name = "ckpt-0000000003-0000000000001";
  // Another root: refused, naming both.
  grpc::Status s = Commit(victim_, name, ValidManifest(name));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), victim_));
  EXPECT_TRUE(absl::StrContains(s.error_message(), root_));
  // Names that would leave the root, or are not checkpoint names.
  for (const std::string bad :
       {"../../..", "..", "ckpt-1/../../x", "ckpt-1-2/..", "a\nb", "",
        "ckpt-1-2-3", "ckpt--1", "ckpt-x-1", "latest"}) {
    s = Commit(root_, bad, ValidManifest(bad));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "name '" << bad << "': " << s.error_message();
  }
  // Manifests that do not parse, or do not check out.
  for (const std::string& bad :
       {std::string("{{{"), std::string(""),
        absl::StrCat("{\"format_version\": 3, \"name\": \"", name,
                     "\", \"num_ps\": 1}"),
        // Written for another checkpoint or cluster size.
        ValidManifest("ckpt-0000000009-0000000000001"),
        absl::StrCat("{\"format_version\": 1, \"name\": \"", name,
                     "\", \"num_ps\": 3}"),
        // A file path that leaves the checkpoint's directory.
        absl::StrCat("{\"format_version\": 1, \"name\": \"", name,
                     "\", \"num_ps\": 1, \"variables\": [{\"name\": \"w\"}],"
                     " \"files\": [{\"variable\": \"w\", \"path\": "
                     "\"../../../etc/passwd\"}]}")}) {
    s = Commit(root_, name, bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "manifest '" << bad << "': " << s.error_message();
  }
  EXPECT_EQ(FilesUnder(base_), "") << "a refused request wrote something";
  // The real thing works and writes the parsed manifest and `latest`.
  s = Commit(root_, name, ValidManifest(name));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(
      FilesUnder(base_),
      absl::StrCat(root_, "/", name, "/MANIFEST.json\n", root_, "/latest\n"));
}

TEST_F(CheckpointRpcTest, SaveShardsAndCheckpointStayUnderTheConfiguredRoot) {
  StartPs({});
  for (const std::string& bad :
       {victim_ + "/ckpt-1-1", root_ + "/../victim/ckpt-1-1",
        root_ + "/ckpt-1-1/../../../victim", root_ + "-other/ckpt-1-1",
        std::string("/"), std::string("")}) {
    grpc::Status s = Save(bad);
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
                s.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
        << "'" << bad << "': " << s.error_code() << " " << s.error_message();
  }
  CheckpointResponse response;
  grpc::Status s = Checkpoint(victim_, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), victim_));
  EXPECT_TRUE(absl::StrContains(s.error_message(), root_));
  EXPECT_EQ(FilesUnder(base_), "") << "a refused request wrote something";

  // The server's own root, named or not, works; SaveShards into a proper
  // checkpoint directory under it too.
  s = Checkpoint(root_ + "/", &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.files(), 1);
  s = Save(root_ + "/ckpt-0000000001-0000000000001");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(
      Exists(root_ + "/ckpt-0000000001-0000000000001/w.shard-00000-of-00001"));
  EXPECT_FALSE(Exists(victim_));
}

TEST(CheckpointRpcNoRootTest, NothingIsWrittenWithoutCheckpointUri) {
  const std::string dir = FreshTestDir("checkpoint_rpc_no_root");
  auto cluster = LocalCluster::Start({.num_ps = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(
      (*cluster)->ps_addresses()[0], grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    CheckpointRequest request;
    request.set_checkpoint_uri(dir);
    CheckpointResponse response;
    grpc::Status s = stub->Checkpoint(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << s.error_message();
  }
  {
    grpc::ClientContext context;
    SaveShardsRequest request;
    request.set_checkpoint_uri(dir + "/ckpt-1-1");
    SaveShardsResponse response;
    grpc::Status s = stub->SaveShards(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << s.error_message();
  }
  EXPECT_EQ(FilesUnder(dir), "");
}

// With a token, the checkpoint RPCs need a caller among the cluster's
// hosts. The cluster here lives on 127.0.0.2; this test's calls arrive
// from 127.0.0.1, like a stranger holding a leaked worker token.
TEST(CheckpointRpcMembersTest, SecuredClusterServesCheckpointsOnlyToMembers) {
  const std::string dir = FreshTestDir("checkpoint_rpc_members");
  {
    std::ofstream token(dir + "/token");
    token << "members-only-token\n";
  }
  LocalCluster::Options o;
  o.num_ps = 1;
  o.host = "127.0.0.2";
  o.extra_flags = {"--auth_token_file=" + dir + "/token",
                   "--checkpoint_uri=" + dir + "/root",
                   "--checkpoint_on_shutdown=false"};
  o.client_security.auth_token = "members-only-token";
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  // Training RPCs are served to anyone with the token ...
  ASSERT_EQ((*client)->CreateVariables({Dense("w")}), absl::OkStatus());
  std::vector<float> grad(64, 1.0f);
  ASSERT_TRUE((*client)->PushDense("w", grad.data()).ok());
  // ... checkpoints only to members.
  auto saved = (*client)->Checkpoint("", absl::Seconds(30));
  EXPECT_TRUE(absl::IsPermissionDenied(saved.status())) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "127.0.0.1"))
      << saved.status();
  EXPECT_EQ(FilesUnder(dir + "/root"), "");
}

}  // namespace
}  // namespace psrt
