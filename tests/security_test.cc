// TLS, mutual TLS and the shared auth token, with certificates made by the
// openssl CLI: authorized clients (C++ client, ps_worker) work, including
// PS-to-PS checkpoint calls; a client without the token gets
// UNAUTHENTICATED; a client trusting another CA, or speaking plaintext to a
// TLS server, cannot connect; under mutual TLS a client without a
// certificate is refused.
#include <signal.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/raw_rpc.h"
#include "tests/test_certificates.h"
#include "tests/worker_output.h"

namespace psrt {
namespace {

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = new std::string(absl::StrCat(tmp ? tmp : "/tmp", "/certs"));
    ASSERT_EQ(MakeTestCertificates(*dir_), absl::OkStatus());
    // The PS' own secret (workers never get it): 2 PS with a token need it.
    std::ofstream(File("peer_secret")) << "peer-secret-of-the-test-cluster\n";
  }

  static std::string File(const std::string& name) {
    return absl::StrCat(*dir_, "/", name);
  }
  static std::vector<std::string> ServerFlags(bool mutual) {
    std::vector<std::string> flags = {
        "--tls_cert_file=" + File("server.pem"),
        "--tls_key_file=" + File("server.key"),
        "--tls_ca_file=" + File("ca.pem"),
        "--auth_token_file=" + File("token"),
        "--peer_secret_file=" + File("peer_secret"),
        "--metrics_bind_address=127.0.0.1"};
    if (mutual) flags.push_back("--tls_require_client_cert");
    return flags;
  }
  static SecurityOptions Authorized(bool with_cert) {
    SecurityOptions s;
    s.tls_ca_file = File("ca.pem");
    s.auth_token = "s3cret-token-for-tests";
    if (with_cert) {
      s.tls_cert_file = File("client.pem");
      s.tls_key_file = File("client.key");
    }
    return s;
  }
  static std::unique_ptr<LocalCluster> Start(
      bool mutual, std::vector<std::string> extra = {}) {
    LocalCluster::Options o;
    o.extra_flags = ServerFlags(mutual);
    o.extra_flags.insert(o.extra_flags.end(), extra.begin(), extra.end());
    o.client_security = Authorized(/*with_cert=*/mutual);
    auto c = LocalCluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // A client of `cluster` with `security` and a short deadline.
  static std::unique_ptr<Client> ClientWith(const LocalCluster& cluster,
                                            const SecurityOptions& security) {
    ClientOptions o = cluster.MakeClientOptions();
    o.security = security;
    o.call_timeout = absl::Seconds(3);
    o.max_attempts = 1;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static std::string* dir_;
};
std::string* SecurityTest::dir_ = nullptr;

VariableSpec Dense(const std::string& name) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(DENSE);
  s.add_shape(1000);
  s.mutable_partition()->set_num_shards(2);
  s.mutable_optimizer()->set_learning_rate(0.5f);
  return s;
}

TEST_F(SecurityTest, AuthorizedClientsWorkOverTlsIncludingPsToPs) {
  const std::string ckpt = File("ckpt");
  auto cluster = Start(false, {"--checkpoint_uri=" + ckpt});
  ASSERT_NE(cluster, nullptr);
  auto client = ClientWith(*cluster, Authorized(false));
  ASSERT_EQ(client->CreateVariables({Dense("w")}), absl::OkStatus());
  std::vector<float> grad(1000, 2.0f), out(1000);
  ASSERT_TRUE(client->PushDense("w", grad.data()).ok());
  ASSERT_TRUE(client->PullDense("w", out.data()).ok());
  EXPECT_EQ(out[999], -1.0f);
  // PS 0 calls PS 1 (SaveShards) with its own credentials and token.
  auto saved = client->Checkpoint("", absl::Seconds(30));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->files(), 2);
  // The binaries take the same flags.
  auto runs = cluster->RunWorkers(
      "ps_worker/ps_worker",
      {"--model=lr",
       "--train_files=testdata/criteo_deepfm_sagemaker/val.tfrecords",
       "--vocab=117581", "--max_steps=5", "--batch_size=64",
       "--tls_ca_file=" + File("ca.pem"), "--auth_token_file=" + File("token")},
      {0}, absl::Minutes(2));
  EXPECT_EQ(runs[0].exit_code, 0) << runs[0].output;
  EXPECT_EQ(LastMetric(runs[0].output, "steps"), 5) << runs[0].output;
}

TEST_F(SecurityTest, MissingOrWrongTokenIsUnauthenticated) {
  auto cluster = Start(false);
  ASSERT_NE(cluster, nullptr);
  SecurityOptions no_token = Authorized(false);
  no_token.auth_token.clear();
  absl::Status s =
      ClientWith(*cluster, no_token)->CreateVariables({Dense("x")});
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "auth token")) << s;
  SecurityOptions wrong = Authorized(false);
  wrong.auth_token = "guess";
  auto client = ClientWith(*cluster, wrong);
  s = client->CreateVariables({Dense("x")});
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "wrong auth token")) << s;
  // Nothing was created by either.
  auto lists = ClientWith(*cluster, Authorized(false))->ListVariables();
  ASSERT_TRUE(lists.ok());
  EXPECT_EQ((*lists)[0].variables_size(), 0);
}

// Kubernetes' gRPC probes carry no token: the health service answers
// without one, and turns NOT_SERVING as soon as a PS is told to stop
// (SIGTERM), while the PS goes on serving its final checkpoint.
TEST_F(SecurityTest, HealthAnswersWithoutTheTokenAndDrainsOnSigterm) {
  auto cluster = Start(false, {"--checkpoint_uri=" + File("ckpt_health"),
                               "--final_checkpoint_wait_secs=60"});
  ASSERT_NE(cluster, nullptr);
  SecurityOptions no_token = Authorized(false);
  no_token.auth_token.clear();
  auto channel = MakeChannel(cluster->MakeClientOptions().ps_addresses[1],
                             no_token, grpc::ChannelArguments());
  ASSERT_TRUE(channel.ok()) << channel.status();
  int status = -1;
  grpc::Status s = HealthCheck(channel->get(), &status);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(status, 1) << "SERVING";
  // Without the token the service itself refuses: the probe is the only
  // way in.
  EXPECT_EQ(RawUnary(channel->get(), "GetStats", "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // PS 1 waits for PS 0's final checkpoint (up to 60 s) once told to stop.
  ASSERT_EQ(kill(cluster->pid(1), SIGTERM), 0);
  for (const absl::Time end = absl::Now() + absl::Seconds(10);
       status != 2 && absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(20))) {
    s = HealthCheck(channel->get(), &status);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(status, 2) << "NOT_SERVING after SIGTERM";
  // Still serving the cluster meanwhile.
  ClientOptions ps1 = cluster->MakeClientOptions();
  ps1.ps_addresses = {ps1.ps_addresses[1]};
  ps1.max_attempts = 1;
  auto client = Client::Connect(ps1);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Stats().ok());
}

TEST_F(SecurityTest, WrongCaAndPlaintextCannotConnect) {
  auto cluster = Start(false);
  ASSERT_NE(cluster, nullptr);
  SecurityOptions other_ca = Authorized(false);
  other_ca.tls_ca_file = File("other.pem");
  absl::Status s =
      ClientWith(*cluster, other_ca)->WaitForServers(absl::Seconds(3));
  EXPECT_FALSE(s.ok());
  SecurityOptions plaintext;
  plaintext.auth_token = "s3cret-token-for-tests";
  const absl::Time start = absl::Now();
  s = ClientWith(*cluster, plaintext)->CreateVariables({Dense("y")});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // no hang
  // A certificate file that does not exist is an error up front.
  ClientOptions bad = cluster->MakeClientOptions();
  bad.security.tls_ca_file = File("absent.pem");
  auto c = Client::Connect(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "absent.pem"));
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificate) {
  auto cluster = Start(/*mutual=*/true);
  ASSERT_NE(cluster, nullptr);
  EXPECT_FALSE(ClientWith(*cluster, Authorized(/*with_cert=*/false))
                   ->WaitForServers(absl::Seconds(3))
                   .ok());
  auto client = ClientWith(*cluster, Authorized(/*with_cert=*/true));
  ASSERT_EQ(client->CreateVariables({Dense("m")}), absl::OkStatus());
  std::vector<float> out(1000, 1.0f);
  EXPECT_TRUE(client->PullDense("m", out.data()).ok());
  EXPECT_EQ(out[0], 0.0f);
}

}  // namespace
}  // namespace psrt
