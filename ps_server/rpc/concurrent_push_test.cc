// Pushes applied by many gRPC threads at once, each spreading its shards'
// work over the helper pools while other pushes hold shard locks: they must
// all finish (no push may wait on a helper that waits on its locks) and sum
// exactly. The default pool has one helper here, as on a 2-core host, which
// makes a wait cycle certain to show if one exists.
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/frame_writer.h"
#include "ps_server/rpc/push_handler.h"
#include "ps_server/rpc/test_variable_spec.h"
#include "util/thread_pool.h"

namespace psrt {
namespace {

// One push message: every shard of "emb" (4 shards of 25 rows, DIV) and of
// "h" (3 hash shards, ids routed by the caller's choice of shard), plus "w".
grpc::ByteBuffer Message(const std::vector<int64_t>& hash_ids_per_shard) {
  PushRequestHeader header;
  std::vector<grpc::Slice> payloads;
  auto add = [&](const void* data, size_t bytes) {
    payloads.emplace_back(data, bytes);
    return static_cast<int>(payloads.size()) - 1;
  };
  std::vector<float> ones(64, 1.0f);
  TensorItem* w = header.add_items();
  w->set_variable("w");
  w->set_shard(0);
  w->set_count(8);
  w->set_grad_payload(add(ones.data(), 8 * 4));
  for (int shard = 0; shard < 4; ++shard) {
    const int64_t id = shard * 25 + 1;
    TensorItem* t = header.add_items();
    t->set_variable("emb");
    t->set_shard(shard);
    t->set_ids_payload(add(&id, 8));
    t->set_grad_payload(add(ones.data(), 4 * 4));
  }
  for (size_t shard = 0; shard < hash_ids_per_shard.size(); ++shard) {
    TensorItem* t = header.add_items();
    t->set_variable("h");
    t->set_shard(static_cast<int>(shard));
    t->set_ids_payload(add(&hash_ids_per_shard[shard], 8));
    t->set_grad_payload(add(ones.data(), 2 * 4));
  }
  header.set_last(true);
  FrameWriter writer(header);
  for (auto& p : payloads) writer.AddPayload(p);
  return writer.Finish();
}

TEST(ConcurrentPushTest, ManyPushesAtOnceAllApplyExactly) {
  ThreadPool::SetDefaultSize(1);
  ASSERT_EQ(ThreadPool::Default().size(), 1);
  ShardStore store(0, 1);
  ASSERT_TRUE(
      store
          .CreateVariables(0,
                           {TestVariableSpec("w", DENSE, {8}, 1),
                            TestVariableSpec("emb", EMBEDDING, {100, 4}, 4),
                            TestVariableSpec("h", HASH_EMBEDDING, {0, 2}, 3)},
                           1)
          .ok());
  // One hash id per shard, each the shard's own (routing is checked).
  const VariableLayout& h = *store.Find("h")->layout;
  std::vector<int64_t> hash_ids(3, -1);
  for (int64_t id = 1; std::count(hash_ids.begin(), hash_ids.end(), -1) > 0;
       ++id) {
    if (hash_ids[h.ShardOf(id)] < 0) hash_ids[h.ShardOf(id)] = id;
  }
  PushDedup dedup;
  constexpr int kThreads = 8, kPushes = 300;
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPushes; ++i) {
        PushHandler handler(&store, &dedup, 1 << 20);
        absl::Status s = handler.AddMessage(Message(hash_ids));
        if (s.ok()) s = handler.Finish().status();
        if (!s.ok()) {
          ADD_FAILURE() << s;
          ++failed;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failed, 0);
  const float expected = -static_cast<float>(kThreads * kPushes);
  std::vector<float> w(8);
  ShardSlice all;
  all.count = 8;
  ASSERT_TRUE(store.Find("w")->shard(0).Read(all, w.data()).ok());
  EXPECT_EQ(w, std::vector<float>(8, expected));
  for (int shard = 0; shard < 4; ++shard) {
    std::vector<float> row(4);
    std::vector<int64_t> ids = {shard * 25 + 1};
    ShardSlice rows;
    rows.ids = ids;
    ASSERT_TRUE(store.Find("emb")->shard(shard).Read(rows, row.data()).ok());
    EXPECT_EQ(row, std::vector<float>(4, expected)) << "emb shard " << shard;
    EXPECT_EQ(store.Find("emb")->shard(shard).version(), kThreads * kPushes);
  }
  for (int shard = 0; shard < 3; ++shard) {
    std::vector<float> row(2);
    std::vector<int64_t> ids = {hash_ids[shard]};
    ShardSlice rows;
    rows.ids = ids;
    ASSERT_TRUE(store.Find("h")->shard(shard).Read(rows, row.data()).ok());
    EXPECT_EQ(row, std::vector<float>(2, expected)) << "h shard " << shard;
  }
}

}  // namespace
}  // namespace psrt
