// Garbage, as a port scanner, a fuzzer or a broken client sends it, against
// a real ps_server, pass after pass: random bytes and crafted absurd
// requests on every method, hundreds of raw connections at once, junk on
// the metrics port. The server answers each with an error, keeps serving
// correct requests, and its memory stays within a stated bound however
// many passes come.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/process_rss.h"
#include "tests/raw_rpc.h"
#include "util/sanitizers.h"

namespace psrt {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

class GarbageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start({.num_ps = 1});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto client = Client::Connect(cluster_->MakeClientOptions());
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
    VariableSpec w, e, h;
    w.set_name("w");
    w.set_kind(DENSE);
    w.add_shape(1024);
    w.mutable_optimizer()->set_learning_rate(0.5f);
    e.set_name("e");
    e.set_kind(EMBEDDING);
    e.add_shape(10000);
    e.add_shape(16);
    e.mutable_partition()->set_num_shards(4);
    e.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    h.set_name("h");
    h.set_kind(HASH_EMBEDDING);
    h.add_shape(50000);
    h.add_shape(8);
    h.mutable_partition()->set_num_shards(2);
    e.mutable_optimizer()->set_learning_rate(0.1f);
    h.mutable_optimizer()->set_learning_rate(0.1f);
    absl::Status created = client_->CreateVariables({w, e, h});
    ASSERT_TRUE(created.ok()) << created;
    std::string host;
    ASSERT_TRUE(SplitHostPort(cluster_->ps_addresses()[0], &host, &port_).ok());
    channel_ = grpc::CreateChannel(cluster_->ps_addresses()[0],
                                   grpc::InsecureChannelCredentials());
  }

  grpc::Status Unary(const std::string& method, const std::string& bytes) {
    return RawUnary(channel_.get(), method, bytes);
  }
  grpc::Status Push(const std::vector<std::string>& messages) {
    return RawPush(channel_.get(), messages);
  }
  grpc::Status Pull(const std::string& bytes) {
    return RawPull(channel_.get(), bytes);
  }

  // A Frame: header bytes and payloads, as the wire has them.
  static std::string FrameBytes(const std::string& header,
                                const std::vector<std::string>& payloads) {
    Frame f;
    f.set_header(header);
    for (const std::string& p : payloads) f.add_payload(p);
    return f.SerializeAsString();
  }

  // Requests no server should accept: absurd counts, offsets, indices,
  // lengths past the end, workers, steps.
  std::vector<std::string> CraftedPushes() {
    std::vector<std::string> out;
    auto item = [](const std::string& v, int shard, int64_t offset,
                   int64_t count, int ids, int grad) {
      TensorItem t;
      t.set_variable(v);
      t.set_shard(shard);
      t.set_offset(offset);
      t.set_count(count);
      if (ids >= 0) t.set_ids_payload(ids);
      if (grad >= 0) t.set_grad_payload(grad);
      return t;
    };
    const std::string floats(64, '\0');
    for (const TensorItem& t :
         {item("w", 0, 0, int64_t{1} << 40, -1, 0), item("w", 0, -5, 4, -1, 0),
          item("w", 0, 1 << 30, 4, -1, 0), item("w", 0, 0, 16, -1, 7),
          item("w", 7, 0, 16, -1, 0), item("e", 0, 0, 0, 0, 1),
          item("e", 0, 0, 0, 9, 1), item("h", 1, 0, 0, 0, 1),
          item(std::string(5000, 'x'), 0, 0, 1, -1, 0),
          item("e", -3, 0, 0, 0, 1)}) {
      PushRequestHeader h;
      *h.add_items() = t;
      h.set_last(true);
      h.set_request_id(1);
      out.push_back(
          FrameBytes(h.SerializeAsString(),
                     {std::string("\x01\0\0\0\0\0\0\x80", 8), floats}));
    }
    PushRequestHeader absurd;
    absurd.set_last(true);
    absurd.mutable_consistency()->set_mode(Consistency::SSP);
    absurd.mutable_consistency()->set_workers(134217728);
    absurd.set_step(INT64_MAX);
    out.push_back(FrameBytes(absurd.SerializeAsString(), {}));
    // A payload whose length prefix runs far past the message's end.
    out.push_back(std::string("\x0a\x02\x30\x01\x12\xff\xff\xff\xff\x0f", 10));
    return out;
  }

  // One pass of everything; returns the errors counted.
  int Pass(std::mt19937& rng) {
    int errors = 0;
    for (const char* method :
         {"CreateVariables", "ListVariables", "GetStats", "Checkpoint",
          "SaveShards", "CommitCheckpoint"}) {
      for (int i = 0; i < 100; ++i) {
        std::string junk(1 + rng() % 4096, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        errors += !Unary(method, junk).ok();
      }
    }
    for (int i = 0; i < 200; ++i) {
      std::string junk(1 + rng() % 65536, '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      errors += !Pull(junk).ok();
      errors += !Push({junk, junk.substr(0, junk.size() / 2)}).ok();
    }
    for (const std::string& m : CraftedPushes()) {
      const grpc::Status s = Push({m});
      EXPECT_FALSE(s.ok()) << "a crafted push was accepted";
      errors += !s.ok();
    }
    // 500 raw connections at once, each sending junk, then all closed.
    std::vector<int> fds;
    for (int i = 0; i < 500; ++i) {
      const int fd = Connect(port_);
      if (fd < 0) continue;
      std::string junk(1 + rng() % 512, '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      (void)!write(fd, junk.data(), junk.size());
      fds.push_back(fd);
    }
    for (int fd : fds) close(fd);
    // Junk on the metrics port: not HTTP, and HTTP with absurd headers.
    for (int i = 0; i < 20; ++i) {
      const int fd = Connect(cluster_->metrics_port(0));
      if (fd < 0) continue;
      std::string junk =
          i % 2 ? absl::StrCat("GET /metrics HTTP/1.1\r\nX: ",
                               std::string(100000, 'a'), "\r\n\r\n")
                : std::string(2048, static_cast<char>(rng()));
      (void)!write(fd, junk.data(), junk.size());
      close(fd);
    }
    return errors;
  }

  // `passes` passes, each refused (nearly) whole and followed by a correct
  // client's round trip; the server's RSS before the first (front) and
  // after each.
  std::vector<int64_t> RunPasses(int passes, std::mt19937& rng) {
    std::vector<int64_t> rss = {RssBytes(cluster_->pid(0))};
    for (int pass = 0; pass < passes; ++pass) {
      const int errors = Pass(rng);
      EXPECT_GT(errors, 950) << "garbage was accepted in pass " << pass;
      ExpectServing();
      rss.push_back(RssBytes(cluster_->pid(0)));
      std::cout << "pass " << pass << ": " << errors << " errors, RSS "
                << rss.back() / (1 << 20) << " MiB (start "
                << rss.front() / (1 << 20) << " MiB)" << std::endl;
    }
    return rss;
  }

  // A correct client still gets correct answers.
  void ExpectServing() {
    std::vector<float> w(1024);
    ASSERT_TRUE(client_->PullDense("w", w.data()).ok());
    std::vector<float> g(1024, 1.0f);
    ASSERT_TRUE(client_->PushDense("w", g.data()).ok());
    std::vector<float> after(1024);
    ASSERT_TRUE(client_->PullDense("w", after.data()).ok());
    EXPECT_EQ(after[0], w[0] - 0.5f);
    auto metrics = FetchMetrics(cluster_->metrics_port(0));
    EXPECT_TRUE(metrics.ok()) << metrics.status();
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0;
};

// Under ASan and UBSan: a few passes, for what they catch on the server's
// error paths (the request fuzzers send far more garbage, in process).
TEST_F(GarbageTest, ServerSurvivesPassesOfGarbage) {
  std::mt19937 rng(11);
  RunPasses(6, rng);
}

// In the optimized pass (the target is tagged quality): the memory bound
// docs/operations.md states, within 64 MiB of the server's size at start
// whatever the number of passes, and no growth per pass once warm. Warm
// RSS still moves in allocator-sized steps (measured here: 24 MiB at
// start, 41-42 MiB by pass 3, 46-48 MiB from pass 9, one step of 5 MiB
// after pass 8 on a loaded machine), so the leak check is over the last 12
// passes: under 8 MiB in all, where a leak of 1 MiB a pass would add 12
// (the creep this test was written for was ~30 MiB a pass; before the step
// fields were bounded one pass grew a server by 1 GiB).
TEST_F(GarbageTest, QualityServerMemoryStaysWithinItsBoundOverPasses) {
  std::mt19937 rng(11);
  const std::vector<int64_t> rss = RunPasses(24, rng);
#if defined(PSRT_ADDRESS_SANITIZER)
  // ASan's quarantine keeps freed memory on purpose (./run.sh soak runs
  // this case under ASan): only survival is checked there.
  std::cout << "ASan build: RSS bound not checked" << std::endl;
#else
  for (size_t pass = 0; pass + 1 < rss.size(); ++pass) {
    EXPECT_LT(rss[pass + 1] - rss.front(), int64_t{64} << 20)
        << "pass " << pass;
  }
  // rss[12]: after pass 11.
  EXPECT_LT(rss.back() - rss[12], int64_t{8} << 20)
      << "memory still grows over passes 12-23";
#endif
}

}  // namespace
}  // namespace psrt
