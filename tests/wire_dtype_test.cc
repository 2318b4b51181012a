// 16-bit values on the wire (ClientOptions::wire_dtype, ps_worker
// --wire_dtype) against real ps_server processes: the servers apply the
// widened gradient to their float32 parameters exactly as a float32 push of
// the same values, a 16-bit pull is the float32 value rounded once, and
// float16's clamping is what the documentation says. And tables looked up
// with the same ids (a model's linear weights and factors) send the ids
// once.
#include "util/wire_dtype.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

class WireDtypeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start({.num_ps = 2});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    for (WireDtype dtype : {FLOAT32, BFLOAT16, FLOAT16}) {
      ClientOptions o = cluster_->MakeClientOptions();
      o.wire_dtype = dtype;
      auto client = Client::Connect(o);
      ASSERT_TRUE(client.ok());
      clients_[dtype] = std::move(*client);
    }
    VariableSpec w, e;
    w.set_name("w");
    w.set_kind(DENSE);
    w.add_shape(1000);
    w.mutable_partition()->set_num_shards(2);
    w.mutable_optimizer()->set_learning_rate(1);
    w.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
    w.mutable_initializer()->set_value(0.5f);
    e.set_name("emb");
    e.set_kind(EMBEDDING);
    e.add_shape(5000);
    e.add_shape(8);
    e.mutable_partition()->set_num_shards(4);
    e.mutable_optimizer()->set_learning_rate(1);
    e.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
    e.mutable_initializer()->set_value(0.25f);
    ASSERT_EQ(clients_[FLOAT32]->CreateVariables({w, e}), absl::OkStatus());
    for (WireDtype dtype : {BFLOAT16, FLOAT16}) {
      ASSERT_EQ(clients_[dtype]->RefreshCatalog(), absl::OkStatus());
    }
  }

  // `v` as the wire carries it in `dtype`, widened again.
  static std::vector<float> Rounded(WireDtype dtype,
                                    const std::vector<float>& v) {
    std::vector<uint16_t> wire(v.size());
    std::vector<float> out(v.size());
    if (dtype == BFLOAT16) {
      EncodeBfloat16(v.data(), v.size(), wire.data());
      DecodeBfloat16(wire.data(), wire.size(), out.data());
    } else {
      EncodeFloat16(v.data(), v.size(), wire.data());
      DecodeFloat16(wire.data(), wire.size(), out.data());
    }
    return out;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> clients_[3];
};

TEST_F(WireDtypeTest, ServersApplyTheWidenedGradientToFloat32Parameters) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<int64_t> ids(3000);
  for (int i = 0; i < 3000; ++i) ids[i] = (i * 7919) % 5000;  // distinct
  for (WireDtype dtype : {BFLOAT16, FLOAT16}) {
    SCOPED_TRACE(WireDtype_Name(dtype));
    std::vector<float> w_before(1000), rows_before(ids.size() * 8);
    ASSERT_TRUE(clients_[FLOAT32]->PullDense("w", w_before.data()).ok());
    ASSERT_TRUE(
        clients_[FLOAT32]->PullRows("emb", ids, rows_before.data()).ok());
    std::vector<float> w_grad(1000), row_grads(ids.size() * 8);
    for (float& g : w_grad) g = normal(rng);
    for (float& g : row_grads) g = normal(rng);
    ASSERT_TRUE(clients_[dtype]
                    ->Push({PushOp::Dense("w", w_grad.data()),
                            PushOp::Rows("emb", ids, row_grads.data())})
                    .ok());
    // SGD at rate 1, in float32 on the servers: before - widened(grad),
    // bit for bit.
    std::vector<float> w(1000), rows(ids.size() * 8);
    ASSERT_TRUE(clients_[FLOAT32]->PullDense("w", w.data()).ok());
    ASSERT_TRUE(clients_[FLOAT32]->PullRows("emb", ids, rows.data()).ok());
    const std::vector<float> w_sent = Rounded(dtype, w_grad);
    const std::vector<float> rows_sent = Rounded(dtype, row_grads);
    int differ = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(w[i], w_before[i] - w_sent[i]) << i;
      differ += w_sent[i] != w_grad[i];
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(rows[i], rows_before[i] - rows_sent[i]) << i;
    }
    EXPECT_GT(differ, 900) << "the gradients were not narrowed";

    // A 16-bit pull is the float32 value rounded once.
    std::vector<float> w16(1000), rows16(ids.size() * 8);
    ASSERT_TRUE(clients_[dtype]->PullDense("w", w16.data()).ok());
    ASSERT_TRUE(clients_[dtype]->PullRows("emb", ids, rows16.data()).ok());
    EXPECT_EQ(w16, Rounded(dtype, w));
    EXPECT_EQ(rows16, Rounded(dtype, rows));
  }
}

TEST_F(WireDtypeTest, Float16ClampsWhatItCannotHold) {
  std::vector<float> w_before(1000);
  ASSERT_TRUE(clients_[FLOAT32]->PullDense("w", w_before.data()).ok());
  std::vector<float> grad(1000, 0.0f);
  grad[0] = 1e6f;
  grad[999] = -7e4f;
  grad[500] = 1e-9f;  // under float16's smallest: not applied
  ASSERT_TRUE(clients_[FLOAT16]->PushDense("w", grad.data()).ok());
  std::vector<float> w(1000);
  ASSERT_TRUE(clients_[FLOAT32]->PullDense("w", w.data()).ok());
  EXPECT_EQ(w[0], w_before[0] - 65504.0f);
  EXPECT_EQ(w[999], w_before[999] + 65504.0f);
  EXPECT_EQ(w[500], w_before[500]);
  // Pulled values beyond 65504 arrive clamped, not as Inf.
  std::vector<float> w16(1000);
  ASSERT_TRUE(clients_[FLOAT16]->PullDense("w", w16.data()).ok());
  EXPECT_EQ(w16[999], 65504.0f);
  EXPECT_EQ(w16[0], std::nearbyint(w[0]));  // -65503.5 -> half's -65504
  EXPECT_EQ(w16[0], -65504.0f);
}

TEST_F(WireDtypeTest, TablesLookedUpWithTheSameIdsSendThemOnce) {
  VariableSpec a, b;
  for (VariableSpec* v : {&a, &b}) {
    v->set_kind(EMBEDDING);
    v->add_shape(50000);
    v->mutable_partition()->set_num_shards(2);
    v->mutable_optimizer()->set_learning_rate(1);
  }
  a.set_name("linear");
  a.add_shape(1);
  b.set_name("factors");
  b.add_shape(8);
  Client& client = *clients_[FLOAT32];
  ASSERT_EQ(client.CreateVariables({a, b}), absl::OkStatus());
  std::vector<int64_t> ids(20000);
  for (int i = 0; i < 20000; ++i) ids[i] = (i * 7) % 50000;
  std::vector<float> ga(ids.size()), gb(ids.size() * 8);
  for (size_t i = 0; i < ga.size(); ++i) ga[i] = 0.001f * (i % 7);
  for (size_t i = 0; i < gb.size(); ++i) gb[i] = 0.002f * (i % 5);
  auto received = [&] {
    double total = 0;
    for (int ps = 0; ps < 2; ++ps) {
      auto metrics = FetchMetrics(cluster_->metrics_port(ps));
      EXPECT_TRUE(metrics.ok()) << metrics.status();
      total +=
          MetricValue(*metrics, "psrt_received_bytes_total{method=\"Push\"}");
    }
    return total;
  };
  const double before = received();
  ASSERT_TRUE(client
                  .Push({PushOp::Rows("linear", ids, ga.data()),
                         PushOp::Rows("factors", ids, gb.data())})
                  .ok());
  // 20,000 ids (8 bytes) once and 9 floats of gradient per id, plus
  // headers: 1 MiB messages, a few hundred bytes each.
  const double pushed = received() - before;
  const double payload = 20000.0 * 8 + 20000.0 * 9 * 4;
  EXPECT_GE(pushed, payload);
  EXPECT_LT(pushed, payload + 16 * 1024) << "ids sent more than once?";
  // Both tables got their own rows' gradients.
  std::vector<float> ra(ids.size()), rb(ids.size() * 8);
  ASSERT_TRUE(client
                  .Pull({PullOp::Rows("linear", ids, ra.data()),
                         PullOp::Rows("factors", ids, rb.data())})
                  .ok());
  for (size_t i = 0; i < ga.size(); ++i) ASSERT_EQ(ra[i], -ga[i]) << i;
  for (size_t i = 0; i < gb.size(); ++i) ASSERT_EQ(rb[i], -gb[i]) << i;
}

}  // namespace
}  // namespace psrt
