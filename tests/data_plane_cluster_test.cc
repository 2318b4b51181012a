// Pushes and pulls over the data plane (dataplane/, ps_server/rpc/
// data_planes.h) between real ps_server processes and a client: the same
// values and per-method metrics as over gRPC, a PS without the provider
// (and a client without it) falling back to gRPC in one cluster, and
// hostile calls on an authenticated connection refused with nothing
// applied (a worker's forged PS-to-PS forward among them); a PS killed
// mid-transfer at --replicas=2 losing no push, the forwards to the
// backups over the data plane too.
#include <atomic>
#include <csignal>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/data_plane_client.h"
#include "gtest/gtest.h"
#include "partitioner/test_variable_spec.h"
#include "proto/data_plane_call.h"
#include "security/security.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

constexpr char kToken[] = "data-plane-test-token";
constexpr int kFloats = 4096;  // a dense variable of 2 shards, one per PS

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << text;
  return path;
}

// A cluster whose calls need the token (the data plane's proof uses it).
std::unique_ptr<LocalCluster> StartSecured() {
  LocalCluster::Options o;
  o.extra_flags = {"--auth_token_file=" + WriteFile("token", kToken),
                   "--peer_secret_file=" +
                       WriteFile("peer", "peer-secret-of-the-data-plane-test"),
                   "--metrics_bind_address=127.0.0.1", "--data_plane=fabric",
                   "--data_plane_providers=shm,tcp"};
  o.client_security.auth_token = kToken;
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

ClientOptions FabricClient(const LocalCluster& cluster) {
  ClientOptions options = cluster.MakeClientOptions();
  options.data_plane = "fabric";
  options.data_plane_providers = {"shm", "tcp"};
  return options;
}

double Metric(const LocalCluster& cluster, int ps, const std::string& sample) {
  absl::StatusOr<std::string> text = FetchMetrics(cluster.metrics_port(ps));
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return -2;
  const double v = MetricValue(*text, sample);
  return v < 0 ? 0 : v;  // a series never incremented is absent
}

// Pushes gradients of 1/2 three times to "d" (SGD, learning rate 1) and
// pulls after each: every value must fall by exactly 1/2 per push.
void PushAndPullExactly(Client* client) {
  std::vector<float> before(kFloats), after(kFloats), grad(kFloats, 0.5f);
  ASSERT_EQ(client->PullDense("d", before.data()), absl::OkStatus());
  for (int step = 1; step <= 3; ++step) {
    ASSERT_EQ(client->PushDense("d", grad.data()), absl::OkStatus());
    ASSERT_EQ(client->PullDense("d", after.data()), absl::OkStatus());
    for (int i = 0; i < kFloats; ++i) {
      ASSERT_EQ(after[i], before[i] - 0.5f * step) << "float " << i;
    }
  }
}

TEST(DataPlaneClusterTest, MixedClusterServesTheSameValuesAndMetrics) {
  std::unique_ptr<LocalCluster> cluster = StartSecured();
  ASSERT_NE(cluster, nullptr);
  // PS 0 serves its data plane on the port it was given (for firewalls
  // that open named ports).
  const int data_plane_port = PickUnusedPort();
  cluster->Kill(0, SIGTERM);
  ASSERT_EQ(cluster->Restart(
                0, {absl::StrCat("--data_plane_port=", data_plane_port)}),
            absl::OkStatus());
  EXPECT_NE(cluster->log(0).find(absl::StrCat(
                "pushes and pulls over libfabric (shm, tcp at 127.0.0.1:",
                data_plane_port, ")")),
            std::string::npos);
  // PS 1 cannot open its provider: it serves gRPC only, and says so.
  cluster->Kill(1, SIGTERM);
  ASSERT_EQ(cluster->Restart(1, {"--data_plane_providers=nosuch"}),
            absl::OkStatus());
  auto client = Client::Connect(FabricClient(*cluster));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ((*client)->CreateVariables({TestVariableSpec(
                "d", DENSE, {kFloats}, 2, OptimizerSpec::SGD, 1.0f)}),
            absl::OkStatus());
  ASSERT_NE((*client)->Find("d")->shards[0].ps_task,
            (*client)->Find("d")->shards[1].ps_task);
  PushAndPullExactly(client->get());
  // PS 0: 3 pushes and 4 pulls, all over the data plane, counted in the
  // per-method series as over gRPC; none in gRPC's own Push series.
  EXPECT_EQ(Metric(*cluster, 0, "psrt_data_plane_calls_total{method=\"Push\"}"),
            3);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_data_plane_calls_total{method=\"Pull\"}"),
            4);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_requests_total{method=\"Push\"}"), 3);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_sent_bytes_total{method=\"Pull\"}"),
            4 * kFloats / 2 * 4);
  EXPECT_EQ(Metric(*cluster, 0,
                   "grpc_server_started_total{grpc_method=\"Push\","
                   "grpc_service=\"psrt.ParameterServer\","
                   "grpc_type=\"client_stream\"}"),
            0);
  // The data plane's own series: what it moved (each push's and pull's
  // request with its framing in, each pull's 8 KiB reply with its
  // framing out), over shared memory (this client runs on PS 0's host,
  // in another process), and nothing refused.
  const double in = Metric(
      *cluster, 0,
      "psrt_data_plane_body_bytes_total{direction=\"in\",provider=\"shm\"}");
  EXPECT_GE(in, 3 * kFloats / 2 * 4);
  EXPECT_LE(in, 3 * kFloats / 2 * 4 + 7 * 256);
  const double out = Metric(*cluster, 0,
                            "psrt_data_plane_body_bytes_total{direction="
                            "\"out\",provider=\"shm\"}");
  EXPECT_GE(out, 4 * kFloats / 2 * 4);
  EXPECT_LE(out, 4 * kFloats / 2 * 4 + 4 * 64);
  EXPECT_EQ(Metric(*cluster, 0,
                   "psrt_data_plane_refused_total{provider=\"shm\","
                   "what=\"frame\"}"),
            0);
  // Every data-plane series is served by PS 0, by provider, and none by
  // PS 1, whose data plane did not open.
  absl::StatusOr<std::string> served = FetchMetrics(cluster->metrics_port(0));
  ASSERT_TRUE(served.ok()) << served.status();
  for (const char* series :
       {"psrt_data_plane_inflight_body_bytes{provider=\"shm\"} 0",
        "psrt_data_plane_refused_total{provider=\"shm\",what=\"hello\"} 0",
        "psrt_data_plane_inflight_body_bytes{provider=\"tcp\"} 0",
        "psrt_data_plane_late_completions_total{provider=\"tcp\"} 0",
        "psrt_data_plane_unclaimed_replies_total{provider=\"tcp\"} 0",
        "psrt_data_plane_late_readies_total{provider=\"tcp\"} 0",
        "psrt_data_plane_refused_total{provider=\"tcp\",what=\"body\"} 0",
        "psrt_data_plane_refused_total{provider=\"tcp\",what=\"hello\"} 0"}) {
    EXPECT_NE(served->find(absl::StrCat("\n", series, "\n")), std::string::npos)
        << series << " in\n"
        << *served;
  }
  absl::StatusOr<std::string> unserved = FetchMetrics(cluster->metrics_port(1));
  ASSERT_TRUE(unserved.ok()) << unserved.status();
  EXPECT_EQ(unserved->find("psrt_data_plane_"), std::string::npos);
  // PS 1: the same calls, over gRPC.
  EXPECT_EQ(Metric(*cluster, 1, "psrt_data_plane_calls_total{method=\"Push\"}"),
            0);
  EXPECT_EQ(Metric(*cluster, 1, "psrt_requests_total{method=\"Push\"}"), 3);
  EXPECT_NE(cluster->log(1).find(
                "data plane: provider nosuch (at 127.0.0.1:0) not served"),
            std::string::npos);

  // A client that cannot open the PS's provider keeps to gRPC everywhere.
  ClientOptions grpc_only = FabricClient(*cluster);
  grpc_only.data_plane_providers = {"nosuch"};
  auto fallback = Client::Connect(grpc_only);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  ASSERT_EQ((*fallback)->RefreshCatalog(), absl::OkStatus());
  std::vector<float> values(kFloats), grad(kFloats, 0.25f), later(kFloats);
  ASSERT_EQ((*fallback)->PullDense("d", values.data()), absl::OkStatus());
  ASSERT_EQ((*fallback)->PushDense("d", grad.data()), absl::OkStatus());
  ASSERT_EQ((*fallback)->PullDense("d", later.data()), absl::OkStatus());
  for (int i = 0; i < kFloats; ++i) ASSERT_EQ(later[i], values[i] - 0.25f);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_data_plane_calls_total{method=\"Push\"}"),
            3);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_requests_total{method=\"Push\"}"), 4);

  // A client on PS 0's host that offers tcp only is served over tcp.
  ClientOptions tcp_only = FabricClient(*cluster);
  tcp_only.data_plane_providers = {"tcp"};
  auto over_tcp = Client::Connect(tcp_only);
  ASSERT_TRUE(over_tcp.ok()) << over_tcp.status();
  ASSERT_EQ((*over_tcp)->RefreshCatalog(), absl::OkStatus());
  ASSERT_EQ((*over_tcp)->PushDense("d", grad.data()), absl::OkStatus());
  EXPECT_GE(Metric(*cluster, 0,
                   "psrt_data_plane_body_bytes_total{direction=\"in\","
                   "provider=\"tcp\"}"),
            kFloats / 2 * 4);

  // PS 1 asked for PS 0's data-plane port, which is taken, and tcp only:
  // its data plane stays off (no data-plane series) and the warning
  // names the port.
  cluster->Kill(1, SIGTERM);
  ASSERT_EQ(
      cluster->Restart(1, {absl::StrCat("--data_plane_port=", data_plane_port),
                           "--data_plane_providers=tcp"}),
      absl::OkStatus());
  EXPECT_NE(cluster->log(1).find(absl::StrCat(
                "data plane: provider tcp (at 127.0.0.1:", data_plane_port,
                ") not served")),
            std::string::npos);
  absl::StatusOr<std::string> off = FetchMetrics(cluster->metrics_port(1));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->find("psrt_data_plane_"), std::string::npos);
}

// What an attacker holding the token could send on a connection it
// opened: every malformed call refused, naming what is wrong, and the
// variable unchanged; without the token no connection opens.
TEST(DataPlaneClusterTest, HostileCallsAreRefusedAndApplyNothing) {
  std::unique_ptr<LocalCluster> cluster = StartSecured();
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(FabricClient(*cluster));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ((*client)->CreateVariables({TestVariableSpec(
                "d", DENSE, {kFloats}, 2, OptimizerSpec::SGD, 1.0f)}),
            absl::OkStatus());
  std::vector<float> before(kFloats), after(kFloats);
  ASSERT_EQ((*client)->PullDense("d", before.data()), absl::OkStatus());

  SecurityOptions security;
  security.auth_token = kToken;
  auto channel = MakeChannel(cluster->ps_addresses()[0], security,
                             grpc::ChannelArguments());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = ParameterServer::NewStub(*channel);
  auto challenge = [&]() {
    grpc::ClientContext context;
    OpenDataPlaneRequest request;
    request.add_providers("tcp");
    OpenDataPlaneResponse response;
    grpc::Status s = stub->OpenDataPlane(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    dataplane::Challenge c{response.connection_id(), response.nonce()};
    return std::make_pair(c, response.address());
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  // The proof made with another token: refused.
  {
    auto [c, address] = challenge();
    auto refused = dataplane::DataPlaneClient::Connect(
        dataplane::FabricOptions(), address, c, "not-the-token", deadline);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
        << refused.status();
  }
  auto [c, address] = challenge();
  auto raw = dataplane::DataPlaneClient::Connect(dataplane::FabricOptions(),
                                                 address, c, kToken, deadline);
  ASSERT_TRUE(raw.ok()) << raw.status();
  auto call = [&](DataPlaneMethod method,
                  std::vector<std::string> messages) -> absl::Status {
    std::vector<grpc::ByteBuffer> buffers;
    for (const std::string& m : messages) {
      grpc::Slice slice(m);
      buffers.emplace_back(&slice, 1);
    }
    std::vector<uint8_t> body(DataPlaneCallBytes(buffers));
    EncodeDataPlaneCall(method, buffers, body.data());
    return (*raw)->Call(body, deadline).status();
  };
  auto refused = [](const absl::Status& s, const std::string& says) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(says), std::string::npos) << s;
  };
  const std::string garbage(100, '\x07');
  const uint8_t unknown_method[16] = {9};
  refused((*raw)->Call(unknown_method, deadline).status(), "unknown method 9");
  refused(call(DataPlaneMethod::kPush, {garbage}), "");
  refused(call(DataPlaneMethod::kPush, {}), "carries no message");
  refused(call(DataPlaneMethod::kPull, {garbage, garbage}), "a pull's request");
  refused(call(DataPlaneMethod::kPull, {garbage}), "");
  // A PS-to-PS forward on a worker's connection (it holds the token, not
  // the peer secret): refused before its messages are read, as Replicate
  // over gRPC without a PS's proof is.
  const absl::Status forged = call(DataPlaneMethod::kReplicate, {garbage});
  EXPECT_EQ(forged.code(), absl::StatusCode::kPermissionDenied) << forged;
  EXPECT_NE(forged.message().find("PS-to-PS calls only"), std::string::npos)
      << forged;
  // Nor does a connection for PS-to-PS calls open without that proof.
  {
    grpc::ClientContext context;
    OpenDataPlaneRequest request;
    request.add_providers("tcp");
    request.set_from_peer(true);
    OpenDataPlaneResponse response;
    const grpc::Status s = stub->OpenDataPlane(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << s.error_message();
  }
  // Each refused and counted as an error; nothing applied, and the PS
  // still serves this connection and others.
  EXPECT_EQ(
      Metric(*cluster, 0,
             "psrt_errors_total{code=\"INVALID_ARGUMENT\",method=\"Push\"}"),
      3);
  EXPECT_EQ(
      Metric(*cluster, 0,
             "psrt_errors_total{code=\"INVALID_ARGUMENT\",method=\"Pull\"}"),
      2);
  EXPECT_EQ(Metric(*cluster, 0,
                   "psrt_errors_total{code=\"PERMISSION_DENIED\","
                   "method=\"Replicate\"}"),
            1);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_rows_total{method=\"Push\"}"), 0);
  // The hello with the wrong token, in the data plane's own series.
  EXPECT_EQ(Metric(*cluster, 0,
                   "psrt_data_plane_refused_total{provider=\"tcp\","
                   "what=\"hello\"}"),
            1);
  ASSERT_EQ((*client)->PullDense("d", after.data()), absl::OkStatus());
  EXPECT_EQ(after, before);
  PushAndPullExactly(client->get());
}

// A PS killed and restarted on its address between data-plane calls,
// while the client's gRPC channels reconnect to it (CreateVariables):
// the next pushes and pulls reach the new process over a new data-plane
// connection, exactly, instead of waiting out the call deadline on the
// old one (what hash_rows_test's restore case hit with the data plane on).
TEST(DataPlaneClusterTest, APsRestartedBetweenCallsIsReachedAgain) {
  std::unique_ptr<LocalCluster> cluster = StartSecured();
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(FabricClient(*cluster));
  ASSERT_TRUE(client.ok()) << client.status();
  const VariableSpec spec =
      TestVariableSpec("d", DENSE, {kFloats}, 2, OptimizerSpec::SGD, 1.0f);
  ASSERT_EQ((*client)->CreateVariables({spec}), absl::OkStatus());
  PushAndPullExactly(client->get());
  cluster->Kill(0, SIGKILL);
  ASSERT_EQ(cluster->Restart(0), absl::OkStatus());
  ASSERT_EQ((*client)->CreateVariables({spec}), absl::OkStatus());
  PushAndPullExactly(client->get());
  // The new process served them over the data plane.
  EXPECT_EQ(Metric(*cluster, 0, "psrt_data_plane_calls_total{method=\"Push\"}"),
            3);
  EXPECT_EQ(Metric(*cluster, 0, "psrt_data_plane_calls_total{method=\"Pull\"}"),
            4);
}

// Two clients push 256 KiB over the data plane while the primary of a third
// of the variable is killed -9 mid-push: the failover (--replicas=2) loses
// no acknowledged push and applies none twice, as over gRPC.
TEST(DataPlaneClusterTest, APsKilledMidPushLosesNothingAtTwoReplicas) {
  LocalCluster::Options o;
  o.num_ps = 3;
  o.one_host_per_ps = true;
  o.extra_flags = {"--replicas=2", "--data_plane=fabric",
                   "--metrics_bind_address=127.0.0.1"};
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  constexpr int64_t kDense = 1 << 16;  // 256 KiB of float32 per push
  constexpr float kLr = 0.0625f;
  constexpr int kClients = 2, kSteps = 40;
  auto setup = Client::Connect(FabricClient(cluster));
  ASSERT_TRUE(setup.ok()) << setup.status();
  ASSERT_EQ((*setup)->CreateVariables({TestVariableSpec(
                "b", DENSE, {kDense}, 3, OptimizerSpec::SGD, kLr)}),
            absl::OkStatus());
  std::vector<float> b0(kDense);
  ASSERT_EQ((*setup)->PullDense("b", b0.data()), absl::OkStatus());
  std::vector<std::vector<double>> sums(kClients, std::vector<double>(kDense));
  std::atomic<int> pushed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Client::Connect(FabricClient(cluster));
      ASSERT_TRUE(client.ok()) << client.status();
      ASSERT_EQ((*client)->RefreshCatalog(), absl::OkStatus());
      std::mt19937 random(7 + c);
      std::uniform_int_distribution<int> small(-3, 3);
      std::vector<float> grad(kDense);
      for (int step = 0; step < kSteps; ++step) {
        for (float& g : grad) g = static_cast<float>(small(random));
        absl::Status s = (*client)->PushDense("b", grad.data());
        ASSERT_TRUE(s.ok()) << "client " << c << " step " << step << ": " << s;
        for (int64_t i = 0; i < kDense; ++i) sums[c][i] += grad[i];
        ++pushed;
      }
    });
  }
  while (pushed.load() < kClients * kSteps / 3) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  cluster.Kill(1, SIGKILL);
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(pushed.load(), kClients * kSteps);
  EXPECT_GT(Metric(cluster, 0, "psrt_data_plane_calls_total{method=\"Push\"}"),
            0);
  // The forwards went over the data plane too: PS 2's to PS 0 (its
  // backup), none over gRPC.
  EXPECT_GT(
      Metric(cluster, 0, "psrt_data_plane_calls_total{method=\"Replicate\"}"),
      0);
  EXPECT_EQ(Metric(cluster, 0,
                   "grpc_server_started_total{grpc_method=\"Replicate\","
                   "grpc_service=\"psrt.ParameterServer\","
                   "grpc_type=\"client_stream\"}"),
            0);
  auto fresh = Client::Connect(FabricClient(cluster));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_EQ(fresh.value()->RefreshCatalog(), absl::OkStatus());
  std::vector<float> b(kDense);
  ASSERT_EQ(fresh.value()->PullDense("b", b.data()), absl::OkStatus());
  int wrong = 0;
  for (int64_t i = 0; i < kDense; ++i) {
    const double sum = sums[0][i] + sums[1][i];
    const float expected = b0[i] - kLr * static_cast<float>(sum);
    if (b[i] != expected && ++wrong <= 5) {
      ADD_FAILURE() << "b[" << i << "] = " << b[i] << ", expected " << expected;
    }
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace psrt
