// Bad input against a real ps_server process: every request gets a clear
// status, no parameter changes, and the server keeps serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "grpcpp/create_channel.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/raw_rpc.h"

namespace psrt {
namespace {

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start({.num_ps = 1});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto client = Client::Connect(cluster_->MakeClientOptions());
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
    VariableSpec w, e;
    w.set_name("w");
    w.set_kind(DENSE);
    w.add_shape(8);
    w.mutable_optimizer()->set_learning_rate(1);
    w.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
    w.mutable_initializer()->set_value(2.0f);
    e.set_name("emb");
    e.set_kind(EMBEDDING);
    e.add_shape(100);
    e.add_shape(16);
    e.mutable_partition()->set_num_shards(4);
    e.mutable_optimizer()->set_learning_rate(1);
    ASSERT_EQ(client_->CreateVariables({w, e}), absl::OkStatus());
    channel_ = grpc::CreateChannel(cluster_->ps_addresses()[0],
                                   grpc::InsecureChannelCredentials());
    stub_ = ParameterServer::NewStub(channel_);
  }

  // Sends one Push call of the given Frames through the generated protobuf
  // stub: the bytes a hostile or buggy client could send.
  grpc::Status PushFrames(const std::vector<Frame>& frames) {
    grpc::ClientContext context;
    PushResponse response;
    auto writer = stub_->Push(&context, &response);
    for (const Frame& f : frames) {
      if (!writer->Write(f)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Raw bytes as one message of a method (tests/raw_rpc.h).
  grpc::Status RawPush(const std::string& bytes) {
    return psrt::RawPush(channel_.get(), {bytes});
  }
  grpc::Status RawUnary(const std::string& name, const std::string& bytes) {
    return psrt::RawUnary(channel_.get(), name, bytes);
  }
  grpc::Status RawPull(const std::string& bytes) {
    return psrt::RawPull(channel_.get(), bytes);
  }

  static Frame PushFrame(const std::string& variable, int shard,
                         std::vector<int64_t> ids, std::vector<float> grad,
                         int64_t count = 0) {
    PushRequestHeader header;
    header.set_last(true);
    TensorItem* t = header.add_items();
    t->set_variable(variable);
    t->set_shard(shard);
    Frame f;
    if (!ids.empty()) {
      t->set_ids_payload(f.payload_size());
      f.add_payload(
          std::string(reinterpret_cast<char*>(ids.data()), ids.size() * 8));
    } else {
      t->set_count(count > 0 ? count : static_cast<int64_t>(grad.size()));
    }
    t->set_grad_payload(f.payload_size());
    f.add_payload(
        std::string(reinterpret_cast<char*>(grad.data()), grad.size() * 4));
    f.set_header(header.SerializeAsString());
    return f;
  }

  // The parameters are untouched and the server still answers correctly.
  void ExpectUnchangedAndServing() {
    std::vector<float> w(8);
    ASSERT_TRUE(client_->PullDense("w", w.data()).ok());
    EXPECT_EQ(w, std::vector<float>(8, 2.0f));
    std::vector<int64_t> ids = {0, 99};
    std::vector<float> rows(32, -1);
    ASSERT_TRUE(client_->PullRows("emb", ids, rows.data()).ok());
    EXPECT_EQ(rows, std::vector<float>(32, 0.0f));
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

void ExpectStatus(const grpc::Status& s, grpc::StatusCode code,
                  const std::string& text) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(text), std::string::npos)
      << "'" << text << "' not in: " << s.error_message();
}

TEST_F(BadInputTest, MalformedItemsAreRejectedWithActionableMessages) {
  ExpectStatus(PushFrames({PushFrame("nope", 0, {}, {1})}),
               grpc::StatusCode::NOT_FOUND, "push to unknown variable 'nope'");
  ExpectStatus(PushFrames({PushFrame("emb", 0, {3}, std::vector<float>(17))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "push to 'emb' shard 0: grad has 17 floats, expected 16 (1 ids "
               "x 16 per row)");
  ExpectStatus(PushFrames({PushFrame("emb", 0, {-1}, std::vector<float>(16))}),
               grpc::StatusCode::OUT_OF_RANGE,
               "id -1 is outside the vocabulary [0, 100)");
  ExpectStatus(PushFrames({PushFrame("emb", 0, {60}, std::vector<float>(16))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "id 60 belongs to shard 2 (DIV routing over 4 shards), not 0");
  ExpectStatus(PushFrames({PushFrame("w", 0, {}, {1, 1, 1}, 8)}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "grad has 3 floats, expected 8");
  ExpectStatus(PushFrames({PushFrame("emb", 7, {3}, std::vector<float>(16))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "push to 'emb' shard 7: no such shard; the variable has 4");
  // A push whose stream ends without its final message is not applied.
  Frame unfinished = PushFrame("w", 0, {}, std::vector<float>(8, 1));
  PushRequestHeader h;
  h.ParseFromString(unfinished.header());
  h.set_last(false);
  unfinished.set_header(h.SerializeAsString());
  ExpectStatus(PushFrames({unfinished}), grpc::StatusCode::ABORTED,
               "nothing was applied");
  // Pulls are checked the same way.
  PullRequestHeader pull;
  TensorItem* t = pull.add_items();
  t->set_variable("emb");
  t->set_shard(1);
  ExpectStatus(RawPull(Frame().SerializeAsString() +
                       [&] {
                         Frame f;
                         f.set_header(pull.SerializeAsString());
                         return f.SerializeAsString();
                       }()),
               grpc::StatusCode::INVALID_ARGUMENT, "ids_payload (unset)");
  ExpectUnchangedAndServing();
}

TEST_F(BadInputTest, NonFiniteGradientsAreRejectedAndCounted) {
  // The client checks a whole push before sending any of it.
  std::vector<float> grad(8, 0.5f);
  grad[5] = NAN;
  absl::Status s = client_->PushDense("w", grad.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("push of 'w': gradient element 5 is nan; "
                             "nothing was sent to any PS"),
            std::string::npos)
      << s;
  std::vector<int64_t> ids = {1, 2};
  std::vector<float> rows(32, 1.0f);
  rows[31] = -INFINITY;
  // An embedding push carrying a dense gradient too: all or nothing.
  std::vector<float> fine(8, 1.0f);
  s = client_->Push(
      {PushOp::Dense("w", fine.data()), PushOp::Rows("emb", ids, rows.data())});
  EXPECT_NE(s.message().find("the row of id 2 (summed over its repeats) is "
                             "-inf"),
            std::string::npos)
      << s;
  // Finite rows whose repeats sum past float's range.
  std::vector<int64_t> repeated = {7, 7};
  std::vector<float> big(32, 3e38f);
  s = client_->PushRows("emb", repeated, big.data());
  EXPECT_NE(s.message().find("the row of id 7 (summed over its repeats) is "
                             "inf"),
            std::string::npos)
      << s;
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].push_requests(), 0) << "a bad push reached the PS";
  ExpectUnchangedAndServing();

  // The server checks too, whoever sends the bytes.
  ExpectStatus(PushFrames({PushFrame("w", 0, {}, grad)}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "push to 'w' shard 0: gradient element 5 is nan");
  ExpectStatus(PushFrames({PushFrame("emb", 0, {1, 2}, rows)}),
               grpc::StatusCode::INVALID_ARGUMENT, "is -inf");
  ExpectUnchangedAndServing();
  auto metrics = FetchMetrics(cluster_->metrics_port(0));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(MetricValue(*metrics, "psrt_rejected_nonfinite_pushes_total"), 2)
      << *metrics;
  EXPECT_EQ(MetricValue(
                *metrics,
                "psrt_errors_total{code=\"INVALID_ARGUMENT\",method=\"Push\"}"),
            2);
  EXPECT_EQ(
      MetricValue(*metrics,
                  "grpc_server_handled_total{grpc_code=\"INVALID_ARGUMENT\","
                  "grpc_method=\"Push\",grpc_service=\"psrt."
                  "ParameterServer\",grpc_type=\"client_stream\"}"),
      2)
      << *metrics;
  stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].rejected_nonfinite_pushes(), 2);
}

// 16-bit gradients (TensorItem.dtype) are checked as float32 ones are:
// their size in values of the named type, the type itself, and finiteness
// after widening.
TEST_F(BadInputTest, SixteenBitGradientsAreCheckedAsTheirType) {
  auto with_dtype = [](Frame f, int dtype, std::string grad) {
    PushRequestHeader h;
    h.ParseFromString(f.header());
    h.mutable_items(0)->set_dtype(static_cast<WireDtype>(dtype));
    f.set_header(h.SerializeAsString());
    *f.mutable_payload(h.items(0).grad_payload()) = std::move(grad);
    return f;
  };
  const Frame row = PushFrame("emb", 0, {3}, std::vector<float>(16));
  ExpectStatus(PushFrames({with_dtype(row, BFLOAT16, std::string(33, 0))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "push to 'emb' shard 0: grad has 16 BFLOAT16 values (and a "
               "partial one), expected 16 (1 ids x 16 per row)");
  ExpectStatus(PushFrames({with_dtype(row, FLOAT16, std::string(34, 0))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "grad has 17 FLOAT16 values, expected 16");
  // 64 bytes are 16 float32 values but 32 16-bit ones.
  ExpectStatus(PushFrames({with_dtype(row, BFLOAT16, std::string(64, 0))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "grad has 32 BFLOAT16 values, expected 16");
  ExpectStatus(PushFrames({with_dtype(row, 7, std::string(32, 0))}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "push to 'emb' shard 0: dtype 7 is not a WireDtype");
  // A bfloat16 NaN (0x7fc0) and a float16 -Inf (0xfc00) at element 4.
  std::string nan(32, 0), inf(32, 0);
  nan[9] = static_cast<char>(0x7f);
  nan[8] = static_cast<char>(0xc0);
  inf[9] = static_cast<char>(0xfc);
  ExpectStatus(PushFrames({with_dtype(row, BFLOAT16, nan)}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "gradient element 4 is nan; the push was rejected");
  ExpectStatus(PushFrames({with_dtype(row, FLOAT16, inf)}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "gradient element 4 is -inf");
  // Pulls name a bad dtype too.
  PullRequestHeader pull;
  TensorItem* t = pull.add_items();
  t->set_variable("w");
  t->set_count(8);
  t->set_dtype(static_cast<WireDtype>(-3));
  Frame f;
  f.set_header(pull.SerializeAsString());
  ExpectStatus(RawPull(f.SerializeAsString()),
               grpc::StatusCode::INVALID_ARGUMENT,
               "dtype -3 is not a WireDtype");
  ExpectUnchangedAndServing();
}

TEST_F(BadInputTest, OversizedAndGarbageMessagesLeaveTheServerServing) {
  // 40 MiB in one message: far over the server's 16 MiB message limit.
  std::vector<float> huge(10 << 20, 1.0f);
  grpc::Status s = PushFrames({PushFrame("w", 0, {}, huge, 8)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();

  // Random bytes as Pull and Push messages.
  std::mt19937 rng(3);
  int rejected = 0;
  for (int i = 0; i < 50; ++i) {
    std::string junk(1 + rng() % 300, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    const grpc::Status pull = RawPull(junk);
    const grpc::Status push = RawPush(junk);
    rejected += pull.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
    rejected += push.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
    EXPECT_NE(push.error_code(), grpc::StatusCode::OK);
  }
  EXPECT_GT(rejected, 90);
  ExpectStatus(RawPush("\x1a\x03xyz"), grpc::StatusCode::INVALID_ARGUMENT,
               "malformed psrt frame at byte 0: unexpected field 3");

  // Garbage that is not even HTTP/2, straight onto the TCP port.
  std::string host;
  int port;
  ASSERT_TRUE(SplitHostPort(cluster_->ps_addresses()[0], &host, &port).ok());
  for (int i = 0; i < 5; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string junk(4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    (void)!write(fd, junk.data(), junk.size());
    char buffer[256];
    (void)!read(fd, buffer, sizeof(buffer));
    close(fd);
  }
  ExpectUnchangedAndServing();
}

// Worker counts, indices, steps and timeouts from the wire are bounded by
// the cluster spec (one worker here) before they cost memory or time.
TEST_F(BadInputTest, StepFieldsAreBoundedByTheClusterSpec) {
  auto push_with = [&](Consistency::Mode mode, int workers, int worker,
                       int64_t step, int staleness = 0) {
    Frame f = PushFrame("w", 0, {}, std::vector<float>(8, 1.0f));
    PushRequestHeader header;
    header.ParseFromString(f.header());
    header.mutable_consistency()->set_mode(mode);
    header.mutable_consistency()->set_workers(workers);
    header.mutable_consistency()->set_staleness(staleness);
    header.set_worker_index(worker);
    header.set_step(step);
    f.set_header(header.SerializeAsString());
    return PushFrames({f});
  };
  auto pull_with = [&](Consistency::Mode mode, int workers, int worker,
                       int64_t step, float timeout = 1) {
    PullRequestHeader header;
    TensorItem* t = header.add_items();
    t->set_variable("w");
    t->set_count(8);
    header.mutable_consistency()->set_mode(mode);
    header.mutable_consistency()->set_workers(workers);
    header.mutable_consistency()->set_timeout_seconds(timeout);
    header.set_worker_index(worker);
    header.set_step(step);
    Frame f;
    f.set_header(header.SerializeAsString());
    return RawPull(f.SerializeAsString());
  };
  const absl::Time start = absl::Now();
  // The pushes that grew a PS by 1 GiB and more.
  ExpectStatus(push_with(Consistency::SSP, 134217728, 0, 1),
               grpc::StatusCode::INVALID_ARGUMENT,
               "the request says 134217728 workers; this cluster's spec "
               "lists 1");
  ExpectStatus(push_with(Consistency::SSP, 2147483647, 5, 1),
               grpc::StatusCode::INVALID_ARGUMENT, "2147483647 workers");
  ExpectStatus(push_with(Consistency::SYNC, 1, 3, 0),
               grpc::StatusCode::INVALID_ARGUMENT,
               "worker index must be in [0, workers)");
  ExpectStatus(push_with(Consistency::SSP, 1, 0, 1, -4),
               grpc::StatusCode::INVALID_ARGUMENT, "staleness -4");
  ExpectStatus(push_with(static_cast<Consistency::Mode>(7), 1, 0, 1),
               grpc::StatusCode::INVALID_ARGUMENT, "consistency mode 7");
  // Steps that overflowed the global step or named absurd checkpoints.
  ExpectStatus(push_with(Consistency::ASYNC, 0, -1, INT64_MAX),
               grpc::StatusCode::INVALID_ARGUMENT,
               "step 9223372036854775807 is outside [0, 1099511627776]");
  ExpectStatus(push_with(Consistency::ASYNC, 0, -1, int64_t{1} << 62),
               grpc::StatusCode::INVALID_ARGUMENT, "is outside");
  ExpectStatus(push_with(Consistency::ASYNC, 0, -1, -1),
               grpc::StatusCode::INVALID_ARGUMENT, "step -1 is outside");
  // The pull that took 35 s and 230 MiB: refused at once.
  ExpectStatus(pull_with(Consistency::SSP, 1000000, 0, 5),
               grpc::StatusCode::INVALID_ARGUMENT, "1000000 workers");
  ExpectStatus(pull_with(Consistency::SYNC, 1, 0, 5, 1e9f),
               grpc::StatusCode::INVALID_ARGUMENT, "timeout_seconds");
  ExpectStatus(pull_with(Consistency::SYNC, 1, 0, 5, NAN),
               grpc::StatusCode::INVALID_ARGUMENT, "timeout_seconds");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].global_step(), 0);
  ExpectUnchangedAndServing();
  // Within the bounds, a push is applied.
  EXPECT_TRUE(push_with(Consistency::SSP, 1, 0, 41).ok());
  stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].global_step(), 42);
}

// A request that is not the method's protobuf message is INVALID_ARGUMENT
// naming the method (gRPC's own parsing answered UNIMPLEMENTED, no detail).
TEST_F(BadInputTest,
       UnparseableUnaryRequestsAreInvalidArgumentNamingTheMethod) {
  // Field 1 as a length-delimited record running past the end.
  const std::string truncated = "\x0a\x7f\x01\x02";
  for (const std::string method :
       {"CreateVariables", "ListVariables", "GetStats", "Checkpoint",
        "SaveShards", "CommitCheckpoint"}) {
    const grpc::Status s = RawUnary(method, truncated);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << s.error_code() << " " << s.error_message();
    EXPECT_NE(s.error_message().find(method + ": the request (4 bytes) is "
                                              "not a valid psrt."),
              std::string::npos)
        << s.error_message();
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string junk(1 + rng() % 200, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    const grpc::Status s =
        RawUnary(i % 2 ? "CreateVariables" : "GetStats", junk);
    EXPECT_TRUE(s.ok() ||
                s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
        << s.error_code() << " " << s.error_message();
  }
  ExpectUnchangedAndServing();
}

// Finite gradients can still overflow a parameter or a slot. Such an
// update is refused whole: the other shards of the push keep their values.
TEST_F(BadInputTest, UpdatesWithNonFiniteResultsAreRejectedWhole) {
  VariableSpec big, acc;
  big.set_name("big");
  big.set_kind(DENSE);
  big.add_shape(4);
  big.mutable_optimizer()->set_learning_rate(1);
  acc.set_name("acc");
  acc.set_kind(EMBEDDING);
  acc.add_shape(10);
  acc.add_shape(2);
  acc.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  acc.mutable_optimizer()->set_learning_rate(1);
  ASSERT_EQ(client_->CreateVariables({big, acc}), absl::OkStatus());
  std::vector<float> huge(4, 3e38f), out(4);
  // 0 - 3e38 is finite: applied.
  ASSERT_TRUE(client_->PushDense("big", huge.data()).ok());
  ASSERT_TRUE(client_->PullDense("big", out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(4, -3e38f));
  // -3e38 - 3e38 overflows: refused, together with the good rows beside it.
  std::vector<int64_t> ids = {3};
  std::vector<float> row = {0.5f, 0.5f}, pulled(2);
  ASSERT_TRUE(client_->PullRows("acc", ids, pulled.data()).ok());
  const std::vector<float> before = pulled;
  absl::Status s = client_->Push({PushOp::Rows("acc", ids, row.data()),
                                  PushOp::Dense("big", huge.data())});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("push to 'big' shard 0: the update would make "
                             "element 0 of the shard -inf (from -3e+38); the "
                             "push was rejected and nothing was applied"),
            std::string::npos)
      << s;
  ASSERT_TRUE(client_->PullDense("big", out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(4, -3e38f));
  ASSERT_TRUE(client_->PullRows("acc", ids, pulled.data()).ok());
  EXPECT_EQ(pulled, before) << "the good part of a refused push was applied";
  // Adagrad's accumulator overflowing (grad^2 = 4e38) is refused too.
  std::vector<float> steep = {2e19f, 0.0f};
  s = client_->PushRows("acc", ids, steep.data());
  EXPECT_NE(s.message().find("push to 'acc' shard 0: the update would make "
                             "the row of id 3 inf at float 2 of its values "
                             "and slots (from 0.1)"),
            std::string::npos)
      << s;
  ASSERT_TRUE(client_->PullRows("acc", ids, pulled.data()).ok());
  EXPECT_EQ(pulled, before);
  // Rows that stay finite are applied as ever.
  ASSERT_TRUE(client_->PushRows("acc", ids, row.data()).ok());
  ASSERT_TRUE(client_->PullRows("acc", ids, pulled.data()).ok());
  EXPECT_LT(pulled[0], before[0]);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].rejected_nonfinite_pushes(), 2);
  ExpectUnchangedAndServing();
}

// A push retried with the same (client id, request id) -- what the client
// does after UNAVAILABLE or a deadline, when it cannot know whether the
// first attempt was applied -- is acknowledged as a duplicate and applied
// once; another request id is applied again.
TEST_F(BadInputTest, RetriedPushIsAppliedOnce) {
  auto push = [&](uint64_t request_id, PushResponse* response) {
    Frame f = PushFrame("w", 0, {}, std::vector<float>(8, 1.0f));
    PushRequestHeader header;
    header.ParseFromString(f.header());
    header.set_client_id(4242);
    header.set_request_id(request_id);
    f.set_header(header.SerializeAsString());
    grpc::ClientContext context;
    auto writer = stub_->Push(&context, response);
    writer->Write(f);
    writer->WritesDone();
    return writer->Finish();
  };
  std::vector<float> w(8);
  PushResponse first, retry, next;
  ASSERT_TRUE(push(17, &first).ok());
  EXPECT_FALSE(first.duplicate());
  ASSERT_TRUE(push(17, &retry).ok());
  EXPECT_TRUE(retry.duplicate());
  ASSERT_TRUE(client_->PullDense("w", w.data()).ok());
  EXPECT_EQ(w, std::vector<float>(8, 1.0f));  // 2 - 1 x lr 1, once
  ASSERT_TRUE(push(18, &next).ok());
  EXPECT_FALSE(next.duplicate());
  ASSERT_TRUE(client_->PullDense("w", w.data()).ok());
  EXPECT_EQ(w, std::vector<float>(8, 0.0f));
}

}  // namespace
}  // namespace psrt
