// The AWS credential chain against real sources: environment, a shared
// credentials file, and loopback HTTP servers speaking the container
// credential and IMDSv2 protocols.
#include "storage/aws_credentials.h"

#include <civetweb.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr char kTemporary[] = R"({
  "AccessKeyId": "ASIATEMPORARY",
  "SecretAccessKey": "temp\/secret",
  "Token": "session-token-1",
  "Expiration": "2099-01-01T00:00:00Z"
})";

// A loopback HTTP server for both credential protocols.
class FakeCredentialServer {
 public:
  FakeCredentialServer() {
    mg_init_library(0);
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads",
                             "2", nullptr};
    mg_callbacks callbacks{};
    context_ = mg_start(&callbacks, this, options);
    mg_set_request_handler(context_, "/", &FakeCredentialServer::Handle, this);
    mg_server_port ports[2];
    mg_get_server_ports(context_, 2, ports);
    port_ = ports[0].port;
  }
  ~FakeCredentialServer() { mg_stop(context_); }
  std::string base() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int token_requests() {
    absl::MutexLock l(&mu_);
    return token_requests_;
  }
  int expiring_requests() {
    absl::MutexLock l(&mu_);
    return expiring_requests_;
  }
  std::vector<std::string> sts_bodies() {
    absl::MutexLock l(&mu_);
    return sts_bodies_;
  }

 private:
  static void Reply(mg_connection* conn, int status, const std::string& body) {
    mg_printf(
        conn,
        "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
        status, body.size());
    mg_write(conn, body.data(), body.size());
  }
  static int Handle(mg_connection* conn, void* self_ptr) {
    auto* self = static_cast<FakeCredentialServer*>(self_ptr);
    const mg_request_info* info = mg_get_request_info(conn);
    const std::string uri = info->local_uri;
    const std::string method = info->request_method;
    // Container credentials expiring `minutes` from now, a new key each
    // time they are fetched ("ASIA1", "ASIA2", ...).
    for (int minutes : {4, 60}) {
      if (uri == absl::StrCat("/v2/credentials/expires-in-", minutes)) {
        int n;
        {
          absl::MutexLock l(&self->mu_);
          n = ++self->expiring_requests_;
        }
        const std::string expiration = absl::FormatTime(
            "%Y-%m-%dT%H:%M:%SZ", absl::Now() + absl::Minutes(minutes),
            absl::UTCTimeZone());
        Reply(conn, 200,
              absl::StrCat(R"({"AccessKeyId": "ASIA)", n,
                           R"(", "SecretAccessKey": "s", "Token": "t)", n,
                           R"(", "Expiration": ")", expiration, R"("})"));
        return 1;
      }
    }
    // STS AssumeRoleWithWebIdentity: a form POST; the role and the token
    // (the token file's contents) must be the ones configured.
    if (uri == "/" && method == "POST") {
      std::string body(4096, '\0');
      body.resize(std::max(0, mg_read(conn, body.data(), body.size())));
      {
        absl::MutexLock l(&self->mu_);
        self->sts_bodies_.push_back(body);
      }
      const bool ok =
          absl::StrContains(body, "Action=AssumeRoleWithWebIdentity") &&
          absl::StrContains(
              body, "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fps") &&
          absl::StrContains(body, "WebIdentityToken=eyJ.projected.token") &&
          absl::StrContains(body, "RoleSessionName=");
      if (!ok) {
        Reply(conn, 400,
              "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
              "<Message>bad token</Message></Error></ErrorResponse>");
        return 1;
      }
      Reply(conn, 200,
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentity"
            "Result><Credentials><AccessKeyId>ASIAWEBID</AccessKeyId>"
            "<SecretAccessKey>web/secret</SecretAccessKey><SessionToken>"
            "web-session</SessionToken><Expiration>2099-01-01T00:00:00Z"
            "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
            "</AssumeRoleWithWebIdentityResponse>");
      return 1;
    }
    // EKS Pod Identity: the full URI, the token from the token file.
    if (uri == "/v1/credentials") {
      const char* auth = mg_get_header(conn, "Authorization");
      Reply(conn,
            auth != nullptr && std::string(auth) == "pod-identity-jwt" ? 200
                                                                       : 401,
            kTemporary);
      return 1;
    }
    // Answers that hold no credentials but something secret.
    if (uri == "/v2/leaky") {
      Reply(conn, 200, "{\"Note\": \"LEAKED-SECRET aws_secret=abc\"}");
      return 1;
    }
    if (uri == "/v2/leaky-error") {
      Reply(conn, 500, "debug dump: LEAKED-SECRET");
      return 1;
    }
    // Container endpoint: the relative URI, with the authorization token.
    if (uri == "/v2/credentials/abc") {
      const char* auth = mg_get_header(conn, "Authorization");
      if (auth == nullptr || std::string(auth) != "container-token") {
        Reply(conn, 401, "missing authorization");
      } else {
        Reply(conn, 200, kTemporary);
      }
      return 1;
    }
    // IMDSv2: a session token first (PUT), required on every GET.
    if (uri == "/latest/api/token" && method == "PUT") {
      absl::MutexLock l(&self->mu_);
      ++self->token_requests_;
      Reply(conn, 200, "imds-session");
      return 1;
    }
    const char* token = mg_get_header(conn, "X-aws-ec2-metadata-token");
    if (token == nullptr || std::string(token) != "imds-session") {
      Reply(conn, 401, "IMDSv2 token required");
      return 1;
    }
    if (uri == "/latest/meta-data/iam/security-credentials/") {
      Reply(conn, 200, "training-role\n");
    } else if (uri ==
               "/latest/meta-data/iam/security-credentials/training-role") {
      Reply(conn, 200, kTemporary);
    } else {
      Reply(conn, 404, "not found");
    }
    return 1;
  }

  mg_context* context_ = nullptr;
  int port_ = 0;
  absl::Mutex mu_;
  int token_requests_ = 0;
  int expiring_requests_ = 0;
  std::vector<std::string> sts_bodies_;
};

class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"AWS_ACCESS_KEY_ID",
                          "AWS_SECRET_ACCESS_KEY",
                          "AWS_SESSION_TOKEN",
                          "AWS_SHARED_CREDENTIALS_FILE",
                          "AWS_PROFILE",
                          "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                          "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                          "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                          "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                          "AWS_WEB_IDENTITY_TOKEN_FILE",
                          "AWS_ROLE_ARN",
                          "AWS_ROLE_SESSION_NAME",
                          "AWS_ENDPOINT_URL_STS",
                          "AWS_REGION",
                          "AWS_DEFAULT_REGION",
                          "AWS_CONFIG_FILE",
                          "AWS_CA_BUNDLE",
                          "PSRT_AWS_CONTAINER_CREDENTIALS_HOST",
                          "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                          "AWS_EC2_METADATA_DISABLED"}) {
      unsetenv(v);
    }
    const char* tmp = std::getenv("TEST_TMPDIR");
    setenv("HOME", tmp ? tmp : "/tmp", 1);
  }
};

TEST_F(AwsCredentialsTest, EnvironmentComesFirst) {
  setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
  setenv("AWS_SESSION_TOKEN", "envtoken", 1);
  AwsCredentialsProvider provider;
  auto c = provider.Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKIAENV");
  EXPECT_EQ(c->secret_access_key, "envsecret");
  EXPECT_EQ(c->session_token, "envtoken");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_FALSE(CredentialsFromEnvironment().ok());  // half-set: an error
}

TEST_F(AwsCredentialsTest, SharedCredentialsFileWithProfile) {
  const std::string path = absl::StrCat(std::getenv("HOME"), "/creds");
  std::ofstream(path) << "[default]\naws_access_key_id = AKIADEFAULT\n"
                         "aws_secret_access_key = defsecret\n\n"
                         "# comment\n[training]\naws_access_key_id=AKIATRAIN\n"
                         "aws_secret_access_key=trainsecret\n"
                         "aws_session_token=traintoken\n";
  setenv("AWS_SHARED_CREDENTIALS_FILE", path.c_str(), 1);
  auto c = CredentialsFromSharedFile();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKIADEFAULT");
  setenv("AWS_PROFILE", "training", 1);
  AwsCredentialsProvider provider;
  c = provider.Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKIATRAIN");
  EXPECT_EQ(c->session_token, "traintoken");
  setenv("AWS_PROFILE", "absent", 1);
  EXPECT_FALSE(CredentialsFromSharedFile().ok());
}

// EKS IAM roles for service accounts: the projected token exchanged at STS.
TEST_F(AwsCredentialsTest, WebIdentityAsEksProvidesIt) {
  FakeCredentialServer server;
  const std::string token = absl::StrCat(std::getenv("HOME"), "/token");
  std::ofstream(token) << "eyJ.projected.token\n";
  setenv("AWS_WEB_IDENTITY_TOKEN_FILE", token.c_str(), 1);
  setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ps", 1);
  setenv("AWS_ROLE_SESSION_NAME", "trainer-7", 1);
  setenv("AWS_ENDPOINT_URL_STS", server.base().c_str(), 1);
  AwsCredentialsProvider provider;
  auto c = provider.Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "ASIAWEBID");
  EXPECT_EQ(c->secret_access_key, "web/secret");
  EXPECT_EQ(c->session_token, "web-session");
  EXPECT_EQ(c->expiration, absl::FromCivil(absl::CivilSecond(2099, 1, 1),
                                           absl::UTCTimeZone()));
  ASSERT_EQ(server.sts_bodies().size(), 1u);
  EXPECT_TRUE(
      absl::StrContains(server.sts_bodies()[0], "RoleSessionName=trainer-7"))
      << server.sts_bodies()[0];
  // The token file is read at each fetch (EKS rotates it): a bad token is
  // STS's error, named, not a fall-through to other sources.
  std::ofstream(token) << "expired";
  auto bad = CredentialsFromWebIdentity();
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "InvalidIdentityToken"))
      << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(),
                                "arn:aws:iam::123456789012:role/ps"))
      << bad.status();
  // Half configured: says which variable is missing.
  unsetenv("AWS_ROLE_ARN");
  auto half = CredentialsFromWebIdentity();
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(half.status().message(), "AWS_ROLE_ARN"));
  // The regional STS endpoint follows AWS_REGION when not overridden.
  unsetenv("AWS_ENDPOINT_URL_STS");
  setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ps", 1);
  setenv("AWS_REGION", "eu-west-1", 1);
  setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token", 1);
  auto unreadable = CredentialsFromWebIdentity();
  EXPECT_TRUE(
      absl::StrContains(unreadable.status().message(), "/nonexistent/token"))
      << unreadable.status();
}

// EKS Pod Identity: the full URI and a token file instead of a token.
TEST_F(AwsCredentialsTest, PodIdentityTokenFile) {
  FakeCredentialServer server;
  const std::string token = absl::StrCat(std::getenv("HOME"), "/pod-token");
  std::ofstream(token) << "pod-identity-jwt\n";
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI",
         (server.base() + "/v1/credentials").c_str(), 1);
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token.c_str(), 1);
  AwsCredentialsProvider provider;
  auto c = provider.Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "ASIATEMPORARY");
  std::ofstream(token) << "stale";
  auto bad = CredentialsFromContainer();
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "401"));
}

// ~/.aws/config: keys and region of "[profile NAME]" (or "[default]").
TEST_F(AwsCredentialsTest, ConfigFileProfilesAndRegion) {
  const std::string config = absl::StrCat(std::getenv("HOME"), "/config");
  std::ofstream(config) << "[default]\nregion = us-west-2\n\n"
                           "[profile training]\nregion=eu-central-1\n"
                           "aws_access_key_id = AKIACONFIG\n"
                           "aws_secret_access_key = configsecret\n";
  setenv("AWS_CONFIG_FILE", config.c_str(), 1);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  EXPECT_EQ(AwsRegionFromEnvironmentOrConfig(), "us-west-2");
  setenv("AWS_PROFILE", "training", 1);
  EXPECT_EQ(AwsRegionFromEnvironmentOrConfig(), "eu-central-1");
  auto c = CredentialsFromSharedFile();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKIACONFIG");
  setenv("AWS_REGION", "ap-south-1", 1);  // the environment wins
  EXPECT_EQ(AwsRegionFromEnvironmentOrConfig(), "ap-south-1");
}

// The CA bundle as the AWS CLI takes it: AWS_CA_BUNDLE, else the profile's
// ca_bundle, else none (the system's CAs).
TEST_F(AwsCredentialsTest, CaBundleFromEnvironmentOrProfile) {
  EXPECT_EQ(AwsCaBundleFromEnvironmentOrConfig(), "");
  const std::string config = absl::StrCat(std::getenv("HOME"), "/config");
  std::ofstream(config) << "[default]\nregion = us-west-2\n\n"
                           "[profile minio]\nca_bundle = /etc/minio/ca.pem\n";
  setenv("AWS_CONFIG_FILE", config.c_str(), 1);
  EXPECT_EQ(AwsCaBundleFromEnvironmentOrConfig(), "");  // default: none
  setenv("AWS_PROFILE", "minio", 1);
  EXPECT_EQ(AwsCaBundleFromEnvironmentOrConfig(), "/etc/minio/ca.pem");
  setenv("AWS_CA_BUNDLE", "/etc/ssl/company-ca.pem", 1);  // the env wins
  EXPECT_EQ(AwsCaBundleFromEnvironmentOrConfig(), "/etc/ssl/company-ca.pem");
}

TEST_F(AwsCredentialsTest, ContainerEndpointAsSageMakerProvidesIt) {
  FakeCredentialServer server;
  setenv("PSRT_AWS_CONTAINER_CREDENTIALS_HOST", server.base().c_str(), 1);
  setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc", 1);
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-token", 1);
  AwsCredentialsProvider provider;
  auto c = provider.Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "ASIATEMPORARY");
  EXPECT_EQ(c->secret_access_key, "temp/secret");  // JSON escape undone
  EXPECT_EQ(c->session_token, "session-token-1");
  EXPECT_EQ(c->expiration, absl::FromCivil(absl::CivilSecond(2099, 1, 1),
                                           absl::UTCTimeZone()));
  // A wrong token is an error naming the endpoint, not a silent fallback.
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong", 1);
  AwsCredentialsProvider provider2;
  auto bad = provider2.Get();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("401"), std::string::npos)
      << bad.status();
}

// An endpoint's answer is not echoed into the error (which goes to logs):
// a body without credentials may still hold secrets.
TEST_F(AwsCredentialsTest, ErrorsDoNotEchoTheEndpointsAnswer) {
  FakeCredentialServer server;
  setenv("PSRT_AWS_CONTAINER_CREDENTIALS_HOST", server.base().c_str(), 1);
  setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/leaky", 1);
  AwsCredentialsProvider provider;
  auto bad = provider.Get();
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(absl::StrContains(bad.status().message(), "LEAKED-SECRET"))
      << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "bytes, not shown"))
      << bad.status();
  setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/leaky-error", 1);
  AwsCredentialsProvider provider2;
  bad = provider2.Get();
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(absl::StrContains(bad.status().message(), "LEAKED-SECRET"))
      << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "HTTP 500"))
      << bad.status();
}

// Temporary credentials are cached while they have more than 5 minutes
// left, and fetched again (with their new session token) once they do not.
TEST_F(AwsCredentialsTest, TemporaryCredentialsAreRefreshedBeforeExpiry) {
  FakeCredentialServer server;
  setenv("PSRT_AWS_CONTAINER_CREDENTIALS_HOST", server.base().c_str(), 1);
  setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
         "/v2/credentials/expires-in-60", 1);
  AwsCredentialsProvider lasting;
  for (int i = 0; i < 3; ++i) {
    auto c = lasting.Get();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->access_key_id, "ASIA1");  // cached: an hour left
  }
  EXPECT_EQ(server.expiring_requests(), 1);
  setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
         "/v2/credentials/expires-in-4", 1);
  AwsCredentialsProvider expiring;
  auto first = expiring.Get();
  auto second = expiring.Get();
  ASSERT_TRUE(first.ok() && second.ok());
  // 4 minutes left is inside the 5-minute margin: fetched again.
  EXPECT_EQ(first->access_key_id, "ASIA2");
  EXPECT_EQ(second->access_key_id, "ASIA3");
  EXPECT_EQ(second->session_token, "t3");
  EXPECT_EQ(server.expiring_requests(), 3);
}

TEST_F(AwsCredentialsTest, InstanceMetadataV2) {
  FakeCredentialServer server;
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.base().c_str(), 1);
  AwsCredentialsProvider provider;
  auto c = provider.Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "ASIATEMPORARY");
  EXPECT_EQ(c->session_token, "session-token-1");
  EXPECT_EQ(server.token_requests(), 1);
  // Cached until close to expiry: no second round trip.
  ASSERT_TRUE(provider.Get().ok());
  EXPECT_EQ(server.token_requests(), 1);
}

TEST_F(AwsCredentialsTest, NothingConfiguredSaysWhatWasTried) {
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
  AwsCredentialsProvider provider;
  auto c = provider.Get();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(c.status()));
  for (const char* tried : {"AWS_ACCESS_KEY_ID", "credentials",
                            "AWS_CONTAINER_CREDENTIALS", "IMDSv2"}) {
    EXPECT_NE(c.status().message().find(tried), std::string::npos)
        << tried << " in " << c.status();
  }
}

}  // namespace
}  // namespace psrt
