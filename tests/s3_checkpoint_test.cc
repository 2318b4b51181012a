// Checkpoints on S3, against s3rver (the npm S3 server) behind a proxy that
// verifies AWS SigV4 signatures the way S3 does (tests/s3/sigv4_proxy.py):
// save from 2 PS with multipart uploads, restore onto 3 PS, retries through
// injected 503s, wrong credentials and missing buckets as clear errors, and
// the AWS CLI reading back what the servers wrote.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "storage/aws_credentials.h"
#include "storage/http_client.h"
#include "tests/checkpoint_test_util.h"
#include "tests/ci.h"
#include "tests/local_cluster.h"
#include "tests/test_certificates.h"
#include "util/crc32c.h"
#include "util/spawn.h"

namespace psrt {
namespace {

// Starts `argv` with its output in `log` (or the reason it could not
// start); -1 if it could not.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  SpawnOptions options;
  options.output_file = log;
  options.truncate_output = true;
  auto pid = SpawnProcess(argv, options);
  if (!pid.ok()) {
    std::ofstream(log) << pid.status().message() << "\n";
    return -1;
  }
  return *pid;
}

// Until an HTTP server answers on `port` (https trusting `ca_file`, if
// given).
bool WaitForPort(int port, absl::Duration timeout,
                 const std::string& ca_file = "") {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    HttpRequest r;
    r.url = absl::StrCat(ca_file.empty() ? "http" : "https",
                         "://127.0.0.1:", port, "/");
    r.ca_file = ca_file;
    r.timeout_secs = 2;
    if (PerformHttp(r).ok()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

std::string S3rverPath() {
  const char* env = std::getenv("PSRT_S3RVER");
  return env != nullptr ? env : "/opt/psrt-node/node_modules/.bin/s3rver";
}

// s3rver and the verifying proxy in front of it, for one test suite.
class S3CheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(access(S3rverPath().c_str(), X_OK), 0)
        << S3rverPath()
        << " is missing: tools/install_deps.sh installs s3rver (or set "
           "PSRT_S3RVER)";
    dir_ = new std::string(FreshTestDir("s3"));
    s3rver_port_ = PickUnusedPort();
    s3rver_ = Spawn({"/usr/bin/node", S3rverPath(), "-d", *dir_ + "/data", "-a",
                     "127.0.0.1", "-p", absl::StrCat(s3rver_port_),
                     "--configure-bucket", "psrt", "--silent"},
                    *dir_ + "/s3rver.log");
    proxy_port_ = StartProxy(0);
    ASSERT_TRUE(WaitForPort(s3rver_port_, absl::Seconds(30)))
        << "s3rver did not start; see " << *dir_ << "/s3rver.log";
    ASSERT_TRUE(WaitForPort(proxy_port_, absl::Seconds(30)));
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
  }
  static void TearDownTestSuite() {
    for (pid_t pid : {s3rver_, proxies_[0], proxies_[1], proxies_[2]}) {
      if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, nullptr, 0);
      }
    }
  }

  // Starts a proxy answering every `fail_every`th request 503 (0: never),
  // or one requiring `session_token` (temporary credentials).
  static int StartProxy(int fail_every, const std::string& session_token = "") {
    const int port = PickUnusedPort();
    const int slot = !session_token.empty() ? 2 : fail_every > 0;
    proxies_[slot] = Spawn({"/usr/bin/python3", "tests/s3/sigv4_proxy.py",
                            absl::StrCat("--port=", port),
                            absl::StrCat("--upstream=127.0.0.1:", s3rver_port_),
                            absl::StrCat("--fail_every=", fail_every),
                            absl::StrCat("--session_token=", session_token)},
                           absl::StrCat(*dir_, "/proxy", slot, ".log"));
    return port;
  }

  static std::string Endpoint(int port) {
    return absl::StrCat("http://127.0.0.1:", port);
  }
  static S3Options Options(int port) {
    S3Options s3;
    s3.endpoint = Endpoint(port);
    s3.part_bytes = 5 << 20;
    s3.retry_base_ms = 20;
    return s3;
  }
  // The proxy's counters.
  static std::map<std::string, int> ProxyStats(int port) {
    HttpRequest r;
    r.url = Endpoint(port) + "/__sigv4_stats";
    auto response = PerformHttp(r);
    std::map<std::string, int> out;
    if (!response.ok()) return out;
    for (const char* key : {"accepted", "rejected", "parts", "injected_503",
                            "aborts", "ranged_gets", "whole_get_bytes"}) {
      const std::string needle = absl::StrCat("\"", key, "\": ");
      const size_t at = response->body.find(needle);
      if (at != std::string::npos) {
        out[key] = std::atoi(response->body.c_str() + at + needle.size());
      }
    }
    return out;
  }

  static std::unique_ptr<LocalCluster> Cluster(int num_ps,
                                               std::vector<std::string> flags) {
    LocalCluster::Options o;
    o.num_ps = num_ps;
    o.extra_flags = std::move(flags);
    o.extra_flags.push_back("--s3_part_mib=5");
    auto c = LocalCluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static std::string SaveFromTwoPs(const std::string& root, bool train);

  static std::string* dir_;
  static int s3rver_port_;
  static pid_t s3rver_;
  static pid_t proxies_[3];
  static int proxy_port_;
};
std::string* S3CheckpointTest::dir_ = nullptr;
int S3CheckpointTest::s3rver_port_ = 0;
pid_t S3CheckpointTest::s3rver_ = 0;
pid_t S3CheckpointTest::proxies_[3] = {0, 0, 0};
int S3CheckpointTest::proxy_port_ = 0;

std::vector<VariableSpec> SpecsWithBigDense(int shards) {
  std::vector<VariableSpec> specs = CheckpointTestSpecs(shards);
  // 3M floats with Momentum: a 24 MiB file, uploaded in 5 MiB parts.
  VariableSpec big;
  big.set_name("big");
  big.set_kind(DENSE);
  big.add_shape(3 << 20);
  big.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  big.mutable_optimizer()->set_learning_rate(0.1f);
  big.mutable_initializer()->set_kind(InitializerSpec::NORMAL);
  big.mutable_initializer()->set_stddev(1);
  specs.push_back(big);
  return specs;
}

// Creates SpecsWithBigDense(2) on a fresh 2-PS cluster checkpointing
// under `root` through the verifying proxy, optionally pushes a little, and
// saves; returns the checkpoint's URI ("" after a failure).
std::string S3CheckpointTest::SaveFromTwoPs(const std::string& root,
                                            bool train) {
  auto cluster =
      Cluster(2, {absl::StrCat("--checkpoint_uri=", root),
                  absl::StrCat("--s3_endpoint=", Endpoint(proxy_port_)),
                  "--checkpoint_on_shutdown=false"});
  if (cluster == nullptr) return "";
  auto client = *Client::Connect(cluster->MakeClientOptions());
  absl::Status created = client->CreateVariables(SpecsWithBigDense(2));
  EXPECT_TRUE(created.ok()) << created;
  if (train) {
    std::atomic<bool> stop{true};
    TrainUntil(cluster->MakeClientOptions(), 2, stop, 10);
  }
  auto saved = client->Checkpoint();
  EXPECT_TRUE(saved.ok()) << saved.status();
  return saved.ok() ? saved->uri() : "";
}

TEST_F(S3CheckpointTest, SaveOnTwoRestoreOnThreeWithVerifiedSignatures) {
  const std::string root = "s3://psrt/run1";
  const auto before = ProxyStats(proxy_port_);
  const std::string uri = SaveFromTwoPs(root, /*train=*/true);
  ASSERT_FALSE(uri.empty());
  EXPECT_TRUE(absl::StartsWith(uri, root + "/ckpt-")) << uri;
  const auto after = ProxyStats(proxy_port_);
  EXPECT_EQ(after.at("rejected"), before.at("rejected"));
  EXPECT_GT(after.at("accepted"), before.at("accepted"));
  EXPECT_GE(after.at("parts") - before.at("parts"), 5);  // multipart happened

  auto saved = ReadCheckpoint(uri, Options(proxy_port_));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->rows.at("big").size(), size_t{3} << 20);

  auto cluster =
      Cluster(3, {absl::StrCat("--restore=", uri),
                  absl::StrCat("--s3_endpoint=", Endpoint(proxy_port_)),
                  absl::StrCat("--checkpoint_uri=", root, "-again")});
  ASSERT_NE(cluster, nullptr);
  auto client = *Client::Connect(cluster->MakeClientOptions());
  const auto before_restore = ProxyStats(proxy_port_);
  ASSERT_EQ(client->CreateVariables(SpecsWithBigDense(3)), absl::OkStatus());
  const auto after_restore = ProxyStats(proxy_port_);
  // Shard files are streamed with ranged GETs (the 24 MiB file in several
  // ranges), never fetched whole: only manifests come in one GET.
  EXPECT_GE(after_restore.at("ranged_gets") - before_restore.at("ranged_gets"),
            6);
  EXPECT_LT(after_restore.at("whole_get_bytes") -
                before_restore.at("whole_get_bytes"),
            256 << 10);
  EXPECT_EQ(ComparePulledValues(client.get(), *saved), "");
  auto again = client->Checkpoint();
  ASSERT_TRUE(again.ok()) << again.status();
  auto resaved = ReadCheckpoint(again->uri(), Options(proxy_port_));
  ASSERT_TRUE(resaved.ok());
  EXPECT_EQ(CompareRows(*saved, *resaved), "");
  EXPECT_EQ(ProxyStats(proxy_port_).at("rejected"), before.at("rejected"));

  // psctl-style listing through the same storage.
  auto storage = OpenStorage(root, Options(proxy_port_));
  auto listing = ListCheckpoints(**storage);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->size(), 1u);
  EXPECT_TRUE((*listing)[0].complete);
  EXPECT_EQ(JoinUri(root, *ReadLatest(**storage)), uri);
}

// An https endpoint whose certificate a private CA signed (MinIO or a
// proxy inside a company network): refused, naming AWS_CA_BUNDLE, until the
// CA is given; then the servers save and restore through it with the CA in
// AWS_CA_BUNDLE, and psctl-style readers with --s3_ca_bundle's option.
TEST_F(S3CheckpointTest, HttpsEndpointSignedByAPrivateCa) {
  const std::string certs = *dir_ + "/tls";
  ASSERT_EQ(MakeTestCertificates(certs), absl::OkStatus());
  const int port = PickUnusedPort();
  const pid_t tls_s3rver =
      Spawn({"/usr/bin/node", S3rverPath(), "-d", *dir_ + "/tls_data", "-a",
             "127.0.0.1", "-p", absl::StrCat(port), "--key",
             certs + "/server.key", "--cert", certs + "/server.pem",
             "--configure-bucket", "psrt", "--silent"},
            *dir_ + "/s3rver_tls.log");
  ASSERT_TRUE(WaitForPort(port, absl::Seconds(30), certs + "/ca.pem"));
  const std::string endpoint = absl::StrCat("https://127.0.0.1:", port);
  S3Options s3;
  s3.endpoint = endpoint;
  unsetenv("AWS_CA_BUNDLE");

  // Without the CA: a clear error naming what to set.
  auto storage = OpenStorage("s3://psrt/tls", s3);
  ASSERT_TRUE(storage.ok());
  absl::Status refused = (*storage)->Write("probe", "x");
  // Not a network error: refused at once, not retried 6 times.
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_FALSE(absl::StrContains(refused.message(), "attempts")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "AWS_CA_BUNDLE")) << refused;
  // Another CA: the error names the bundle that does not hold it.
  s3.ca_bundle = certs + "/other.pem";
  refused = (*OpenStorage("s3://psrt/tls", s3))->Write("probe", "x");
  EXPECT_TRUE(absl::StrContains(
      refused.message(), "not signed by a CA in '" + certs + "/other.pem'"))
      << refused;
  // A bundle that cannot be read is named as such.
  s3.ca_bundle = certs + "/missing.pem";
  refused = (*OpenStorage("s3://psrt/tls", s3))->Write("probe", "x");
  EXPECT_TRUE(absl::StrContains(refused.message(), "cannot read the CA bundle"))
      << refused;

  // With AWS_CA_BUNDLE, as the AWS CLI reads it: servers save and restore.
  setenv("AWS_CA_BUNDLE", (certs + "/ca.pem").c_str(), 1);
  std::string uri;
  {
    auto cluster = Cluster(2, {"--checkpoint_uri=s3://psrt/tls",
                               absl::StrCat("--s3_endpoint=", endpoint),
                               "--checkpoint_on_shutdown=false"});
    ASSERT_NE(cluster, nullptr);
    auto client = *Client::Connect(cluster->MakeClientOptions());
    ASSERT_EQ(client->CreateVariables(SpecsWithBigDense(2)), absl::OkStatus());
    std::atomic<bool> stop{true};
    TrainUntil(cluster->MakeClientOptions(), 2, stop, 5);
    auto saved = client->Checkpoint();
    ASSERT_TRUE(saved.ok()) << saved.status();
    uri = saved->uri();
  }
  s3.ca_bundle = "";  // from AWS_CA_BUNDLE
  auto saved = ReadCheckpoint(uri, s3);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->rows.at("big").size(), size_t{3} << 20);
  {
    auto cluster = Cluster(1, {absl::StrCat("--restore=", uri),
                               absl::StrCat("--s3_endpoint=", endpoint)});
    ASSERT_NE(cluster, nullptr);
    auto client = *Client::Connect(cluster->MakeClientOptions());
    ASSERT_EQ(client->CreateVariables(SpecsWithBigDense(1)), absl::OkStatus());
    EXPECT_EQ(ComparePulledValues(client.get(), *saved), "");
  }
  unsetenv("AWS_CA_BUNDLE");
  // The option alone does as well (psctl --s3_ca_bundle).
  s3.ca_bundle = certs + "/ca.pem";
  auto again = ReadCheckpoint(uri, s3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CompareRows(*saved, *again), "");
  kill(tls_s3rver, SIGTERM);
  waitpid(tls_s3rver, nullptr, 0);
}

// Ranged reads into one reused buffer (how restores stream shard files):
// exact ranges, a range past the end, and S3's error for a missing object
// (whose XML must not land in the caller's buffer).
TEST_F(S3CheckpointTest, RangedReadsIntoAReusedBuffer) {
  auto storage = OpenStorage("s3://psrt/ranges", Options(proxy_port_));
  ASSERT_TRUE(storage.ok());
  ASSERT_EQ((*storage)->Write("obj", "0123456789"), absl::OkStatus());
  auto reader = (*storage)->NewReader("obj");
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string buffer;
  ASSERT_EQ((*reader)->ReadAt(2, 5, &buffer), absl::OkStatus());
  EXPECT_EQ(buffer, "23456");
  ASSERT_EQ((*reader)->ReadAt(8, 100, &buffer), absl::OkStatus());
  EXPECT_EQ(buffer, "89");
  ASSERT_EQ((*reader)->ReadAt(20, 5, &buffer), absl::OkStatus());
  EXPECT_EQ(buffer, "");
  auto missing = (*storage)->NewReader("no-such-object");
  absl::Status s =
      missing.ok() ? (*missing)->ReadAt(0, 4, &buffer) : missing.status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no-such-object")) << s;
  EXPECT_EQ(buffer, "");
}

TEST_F(S3CheckpointTest, ServerErrorsAreRetried) {
  const int flaky = StartProxy(/*fail_every=*/4);
  ASSERT_TRUE(WaitForPort(flaky, absl::Seconds(30)));
  auto storage = OpenStorage("s3://psrt/retry", Options(flaky));
  ASSERT_TRUE(storage.ok());
  std::string big(12 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*storage)->Write(absl::StrCat("obj", i), big).ok());
    auto back = (*storage)->Read(absl::StrCat("obj", i));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == big);
  }
  EXPECT_GE(ProxyStats(flaky).at("injected_503"), 5);
}

// Temporary credentials (SageMaker's role, IMDS): the session token goes in
// x-amz-security-token, signed; the proxy refuses requests without it.
TEST_F(S3CheckpointTest, SessionTokenIsSentAndSigned) {
  const int port = StartProxy(0, "temporary-session-token");
  ASSERT_TRUE(WaitForPort(port, absl::Seconds(30)));
  setenv("AWS_SESSION_TOKEN", "temporary-session-token", 1);
  auto storage = OpenStorage("s3://psrt/session", Options(port));
  ASSERT_TRUE(storage.ok());
  std::string big(7 << 20, 'x');  // multipart too
  absl::Status s = (*storage)->Write("ckpt-1/file", big);
  EXPECT_TRUE(s.ok()) << s;
  auto back = (*storage)->Read("ckpt-1/file");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), big.size());
  unsetenv("AWS_SESSION_TOKEN");
  auto without = OpenStorage("s3://psrt/session", Options(port));
  s = (*without)->Write("ckpt-1/other", "data");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("InvalidToken"), std::string::npos) << s;
  EXPECT_GE(ProxyStats(port)["accepted"], 3);
}

// A multipart upload abandoned midway (a failed save, a PS stopping) is
// aborted, so S3 does not keep (and bill) its parts, and no object appears.
TEST_F(S3CheckpointTest, AbandonedMultipartUploadIsAborted) {
  auto storage = OpenStorage("s3://psrt/abandoned", Options(proxy_port_));
  ASSERT_TRUE(storage.ok());
  const int aborts_before = ProxyStats(proxy_port_)["aborts"];
  const int parts_before = ProxyStats(proxy_port_)["parts"];
  {
    auto writer = (*storage)->NewWriter("ckpt-1/big");
    ASSERT_TRUE(writer.ok()) << writer.status();
    const std::string part(6 << 20, 'p');  // past one 5 MiB part
    ASSERT_TRUE((*writer)->Append(part).ok());
    ASSERT_TRUE((*writer)->Append(part).ok());
  }  // destroyed without Close()
  EXPECT_GT(ProxyStats(proxy_port_)["parts"], parts_before)
      << "no part was uploaded: the test did not start a multipart upload";
  EXPECT_EQ(ProxyStats(proxy_port_)["aborts"], aborts_before + 1);
  auto listing = (*storage)->List("ckpt-1/");
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_TRUE(listing->empty());
}

TEST_F(S3CheckpointTest, WrongSecretAndMissingBucketAreClearErrors) {
  setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  auto storage = OpenStorage("s3://psrt/denied", Options(proxy_port_));
  absl::Status s = (*storage)->Write("x", "data");
  setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "SignatureDoesNotMatch")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "s3://psrt/denied/x")) << s;

  storage = OpenStorage("s3://no-such-bucket/run", Options(proxy_port_));
  s = (*storage)->Write("x", "data");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(
      absl::StrContains(s.message(), "bucket 'no-such-bucket' does not exist"))
      << s;
  // A server pointed at a missing bucket starts (it writes only when it
  // saves); the checkpoint reports the bucket and the server keeps serving.
  auto cluster =
      Cluster(1, {"--checkpoint_uri=s3://no-such-bucket/run",
                  absl::StrCat("--s3_endpoint=", Endpoint(proxy_port_))});
  ASSERT_NE(cluster, nullptr);
  auto client = *Client::Connect(cluster->MakeClientOptions());
  ASSERT_EQ(client->CreateVariables(CheckpointTestSpecs(1)), absl::OkStatus());
  auto r = client->Checkpoint();
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "no-such-bucket"))
      << r.status();
  EXPECT_TRUE(client->Stats().ok());  // still serving
}

std::string RunCommand(const std::string& command, int* exit_code) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), p)) > 0) out.append(buffer, n);
  *exit_code = WEXITSTATUS(pclose(p));
  return out;
}

TEST_F(S3CheckpointTest, AwsCliReadsWhatTheServersWrote) {
  const char* candidates[] = {"/usr/bin/aws", "/usr/local/bin/aws"};
  std::string aws;
  for (const char* c : candidates) {
    if (access(c, X_OK) == 0) aws = c;
  }
  if (aws.empty()) {
    PSRT_SKIP_UNLESS_CI(
        "the AWS CLI is not installed (apt install awscli); skipping the "
        "cross-check against it");
  }
  const std::string root = "s3://psrt/cli";
  const std::string uri = SaveFromTwoPs(root, /*train=*/false);
  ASSERT_FALSE(uri.empty());
  auto storage = OpenStorage(uri, Options(proxy_port_));
  auto manifest = ReadManifest(**storage, "");
  ASSERT_TRUE(manifest.ok());
  // Through the verifying proxy: the CLI's own signer must pass it too.
  const std::string cli =
      absl::StrCat("HOME=", *dir_,
                   " AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "
                   "AWS_DEFAULT_REGION=us-east-1 ",
                   aws, " --endpoint-url ", Endpoint(proxy_port_), " s3 ");
  int code = 0;
  const std::string listing =
      RunCommand(cli + "ls --recursive " + uri + "/", &code);
  ASSERT_EQ(code, 0) << listing;
  for (const CheckpointFile& f : manifest->files()) {
    EXPECT_TRUE(absl::StrContains(listing, absl::StrCat(f.bytes(), " ")))
        << f.path() << " (" << f.bytes() << " bytes) not in\n"
        << listing;
  }
  EXPECT_TRUE(absl::StrContains(listing, "MANIFEST.json")) << listing;
  // Download the biggest file (a multipart upload) and check it.
  const CheckpointFile* biggest = &manifest->files(0);
  for (const CheckpointFile& f : manifest->files()) {
    if (f.bytes() > biggest->bytes()) biggest = &f;
  }
  const std::string local = *dir_ + "/downloaded";
  const std::string cp = RunCommand(
      absl::StrCat(cli, "cp '", uri, "/", biggest->path(), "' ", local), &code);
  ASSERT_EQ(code, 0) << cp;
  std::ifstream in(local, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string data = bytes.str();
  ASSERT_EQ(static_cast<int64_t>(data.size()), biggest->bytes());
  uint32_t stored;  // the file's trailing CRC32C (unaligned in the buffer)
  std::memcpy(&stored, data.data() + data.size() - 4, 4);
  EXPECT_EQ(Crc32c(data.data(), data.size() - 4), stored);
  // The manifest's CRC32C is the whole file's, as a standard tool computes
  // it (docs/checkpoints.md): what a user checks a download with.
  EXPECT_EQ(Crc32c(data.data(), data.size()), biggest->crc32c());
  const std::string rhash =
      RunCommand(absl::StrCat("rhash --crc32c --simple '", local, "'"), &code);
  ASSERT_EQ(code, 0) << rhash;
  EXPECT_EQ(rhash.substr(0, 8), absl::StrFormat("%08x", biggest->crc32c()))
      << rhash;
}

}  // namespace
}  // namespace psrt
