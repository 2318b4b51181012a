// Pull and push handling against a ShardStore, without gRPC: validation,
// atomicity, duplicate handling and response packing.
#include <numeric>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "partitioner/id_hash.h"
#include "proto/frame_writer.h"
#include "proto/slice_lease.h"
#include "ps_server/rpc/pull_handler.h"
#include "ps_server/rpc/push_handler.h"
#include "ps_server/rpc/test_variable_spec.h"

namespace psrt {
namespace {

// Builds one push message; payloads are copied into owned slices.
class PushMessage {
 public:
  PushMessage& Dense(const std::string& name, int shard, int64_t offset,
                     std::vector<float> grad) {
    TensorItem* t = header_.add_items();
    t->set_variable(name);
    t->set_shard(shard);
    t->set_offset(offset);
    t->set_count(static_cast<int64_t>(grad.size()));
    t->set_grad_payload(Add(grad.data(), grad.size() * 4));
    return *this;
  }
  PushMessage& Rows(const std::string& name, int shard,
                    std::vector<int64_t> ids, std::vector<float> grad) {
    TensorItem* t = header_.add_items();
    t->set_variable(name);
    t->set_shard(shard);
    t->set_ids_payload(Add(ids.data(), ids.size() * 8));
    t->set_grad_payload(Add(grad.data(), grad.size() * 4));
    return *this;
  }
  // The last item's payload holds values to assign, not a gradient.
  PushMessage& Assign() {
    header_.mutable_items(header_.items_size() - 1)->set_assign(true);
    return *this;
  }
  PushMessage& Mode(Consistency::Mode mode) {
    header_.mutable_consistency()->set_mode(mode);
    header_.mutable_consistency()->set_workers(1);
    return *this;
  }
  PushMessage& Id(uint64_t request_id) {
    header_.set_client_id(9);
    header_.set_request_id(request_id);
    return *this;
  }
  grpc::ByteBuffer Build(bool last = true) {
    header_.set_last(last);
    FrameWriter writer(header_);
    for (auto& p : payloads_) writer.AddPayload(p);
    return writer.Finish();
  }

 private:
  int Add(const void* data, size_t bytes) {
    payloads_.emplace_back(data, bytes);  // copies
    return static_cast<int>(payloads_.size()) - 1;
  }
  PushRequestHeader header_;
  std::vector<grpc::Slice> payloads_;
};

class HandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        store_
            .CreateVariables(0,
                             {TestVariableSpec("w", DENSE, {6}),
                              TestVariableSpec("emb", EMBEDDING, {100, 16}, 2),
                              TestVariableSpec("h", HASH_EMBEDDING, {0, 2})},
                             1)
            .ok());
  }

  absl::StatusOr<PushResponse> Push(std::vector<grpc::ByteBuffer> messages) {
    PushHandler handler(&store_, &dedup_, 1 << 20);
    for (const auto& m : messages) {
      if (absl::Status s = handler.AddMessage(m); !s.ok()) return s;
    }
    return handler.Finish();
  }

  std::vector<float> Dense() {
    std::vector<float> v(6);
    ShardSlice all;
    all.count = 6;
    EXPECT_TRUE(store_.Find("w")->shard(0).Read(all, v.data()).ok());
    return v;
  }

  ShardStore store_{0, 1};
  PushDedup dedup_;
};

TEST_F(HandlersTest, RejectedPushChangesNothingAtAll) {
  // The first item is fine, the second carries a NaN: neither is applied.
  auto r = Push({PushMessage()
                     .Dense("w", 0, 0, {1, 1, 1, 1, 1, 1})
                     .Rows("emb", 0, {3}, std::vector<float>(16, NAN))
                     .Build()});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(
                "push to 'emb' shard 0: gradient element 0 is nan; the push "
                "was rejected and nothing was applied"),
            std::string::npos)
      << r.status();
  EXPECT_TRUE(r.status().GetPayload(kNonFiniteGradient).has_value());
  EXPECT_EQ(Dense(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(store_.Find("w")->shard(0).version(), 0);
}

// A row update that overflows is only found while applying (its gradient
// is finite): every shard of the push applied so far, in parallel with it,
// is put back, values and versions.
TEST_F(HandlersTest, OverflowInOneShardUndoesTheWholePush) {
  auto read = [&](const std::string& name, int shard, int64_t id, int width) {
    std::vector<float> v(width);
    std::vector<int64_t> ids = {id};
    ShardSlice rows;
    rows.ids = ids;
    EXPECT_TRUE(store_.Find(name)->shard(shard).Read(rows, v.data()).ok());
    return v;
  };
  // Row 60 of emb (shard 1) to -3e38 and a hash row to -1 (SGD, rate 1).
  ASSERT_TRUE(Push({PushMessage()
                        .Rows("emb", 1, {60}, std::vector<float>(16, 3e38f))
                        .Rows("h", 0, {5}, {1, 1})
                        .Build()})
                  .ok());
  const std::vector<float> row60 = read("emb", 1, 60, 16);
  ASSERT_EQ(row60[0], -3e38f);
  // The small update was proven finite by h's value bounds (applied last,
  // with no undo); the huge one was checked row by row.
  auto proven = [&](const std::string& name, int shard) {
    return store_.Find(name)->shard(shard).updates_proven_by_bounds();
  };
  ASSERT_EQ(proven("h", 0), 1);
  ASSERT_EQ(proven("emb", 1), 0);
  const int64_t versions[] = {store_.Find("w")->shard(0).version(),
                              store_.Find("emb")->shard(0).version(),
                              store_.Find("emb")->shard(1).version(),
                              store_.Find("h")->shard(0).version()};
  // Fine updates to w, emb shard 0 and h around one that takes row 60 past
  // float's range.
  auto r = Push({PushMessage()
                     .Dense("w", 0, 0, {1, 2, 3, 4, 5, 6})
                     .Rows("emb", 0, {3, 7}, std::vector<float>(32, 0.5f))
                     .Rows("h", 0, {5, 9}, {1, 1, 2, 2})
                     .Rows("emb", 1, {60, 61}, std::vector<float>(32, 3e38f))
                     .Build()});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
      << r.status();
  EXPECT_NE(r.status().message().find("push to 'emb' shard 1"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("nothing was applied"), std::string::npos)
      << r.status();
  EXPECT_EQ(Dense(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(read("emb", 0, 3, 16), std::vector<float>(16, 0.0f));
  EXPECT_EQ(read("emb", 1, 60, 16), row60);
  EXPECT_EQ(read("emb", 1, 61, 16), std::vector<float>(16, 0.0f));
  EXPECT_EQ(read("h", 0, 5, 2), (std::vector<float>{-1, -1}));
  EXPECT_EQ(store_.Find("w")->shard(0).version(), versions[0]);
  EXPECT_EQ(store_.Find("emb")->shard(0).version(), versions[1]);
  EXPECT_EQ(store_.Find("emb")->shard(1).version(), versions[2]);
  EXPECT_EQ(store_.Find("h")->shard(0).version(), versions[3]);
  // The same fine updates alone: proven by the bounds and applied.
  ASSERT_TRUE(Push({PushMessage()
                        .Rows("emb", 0, {3, 7}, std::vector<float>(32, 0.5f))
                        .Rows("h", 0, {5, 9}, {1, 1, 2, 2})
                        .Build()})
                  .ok());
  EXPECT_EQ(proven("emb", 0), 1);
  EXPECT_EQ(proven("h", 0), 2);
  EXPECT_EQ(read("h", 0, 5, 2), (std::vector<float>{-2, -2}));
}

TEST_F(HandlersTest, ErrorsNameVariableShardAndNumbers) {
  struct Case {
    grpc::ByteBuffer message;
    absl::StatusCode code;
    const char* text;
  } cases[] = {
      {PushMessage().Rows("emb", 0, {1}, std::vector<float>(17)).Build(),
       absl::StatusCode::kInvalidArgument,
       "push to 'emb' shard 0: grad has 17 floats, expected 16 (1 ids x 16 "
       "per row)"},
      {PushMessage().Rows("emb", 0, {100}, std::vector<float>(16)).Build(),
       absl::StatusCode::kOutOfRange,
       "id 100 is outside the vocabulary [0, 100)"},
      {PushMessage().Rows("emb", 0, {75}, std::vector<float>(16)).Build(),
       absl::StatusCode::kInvalidArgument,
       "id 75 belongs to shard 1 (DIV routing over 2 shards), not 0"},
      {PushMessage().Dense("nope", 0, 0, {1}).Build(),
       absl::StatusCode::kNotFound, "unknown variable 'nope'"},
      {PushMessage().Dense("w", 3, 0, {1}).Build(),
       absl::StatusCode::kInvalidArgument, "no such shard; the variable has 1"},
      {PushMessage().Dense("w", 0, 4, {1, 1, 1}).Build(),
       absl::StatusCode::kOutOfRange,
       "range [4, 7) is not inside the shard's 6 floats"},
      {PushMessage().Dense("w", 0, 0, {INFINITY}).Build(),
       absl::StatusCode::kInvalidArgument, "gradient element 0 is inf"},
  };
  for (auto& c : cases) {
    auto r = Push({c.message});
    EXPECT_EQ(r.status().code(), c.code) << c.text << " -> " << r.status();
    EXPECT_NE(r.status().message().find(c.text), std::string::npos)
        << c.text << " -> " << r.status();
  }
  EXPECT_EQ(Dense(), std::vector<float>(6, 0.0f));
}

// --dense_sync=allreduce writes dense values into the PS: the values
// replace the range exactly (no optimizer step: the version, Adam's t,
// stays), and an assignment anywhere it does not belong is refused whole.
TEST_F(HandlersTest, AssignedValuesReplaceADenseRangeAndNothingElse) {
  auto r = Push(
      {PushMessage().Dense("w", 0, 2, {0.25f, -3e38f, 7}).Assign().Build()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Dense(), (std::vector<float>{0, 0, 0.25f, -3e38f, 7, 0}));
  EXPECT_EQ(store_.Find("w")->shard(0).version(), 0);
  // A gradient applied after moves the values as ever (SGD at rate 1).
  ASSERT_TRUE(Push({PushMessage().Dense("w", 0, 4, {10}).Build()}).ok());
  EXPECT_EQ(Dense()[4], -3.0f);
  EXPECT_EQ(store_.Find("w")->shard(0).version(), 1);

  struct Case {
    grpc::ByteBuffer message;
    const char* text;
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  } cases[] = {
      {PushMessage()
           .Rows("emb", 0, {3}, std::vector<float>(16, 1))
           .Assign()
           .Build(),
       "assign: values replace a dense variable's in a push; this is a "
       "EMBEDDING"},
      {PushMessage()
           .Dense("w", 0, 0, {1, 2})
           .Assign()
           .Mode(Consistency::SYNC)
           .Build(),
       "assigned values are taken in ASYNC pushes only, not SYNC"},
      {PushMessage()
           .Dense("w", 0, 0, {1, 2})
           .Assign()
           .Dense("w", 0, 3, {1})
           .Build(),
       "some items assign values and others carry gradients"},
      {PushMessage().Dense("w", 0, 0, {NAN}).Assign().Build(),
       "gradient element 0 is nan"},
      {PushMessage().Dense("w", 0, 5, {1, 2}).Assign().Build(),
       "range [5, 7) is not inside the shard's 6 floats",
       absl::StatusCode::kOutOfRange},
  };
  const std::vector<float> before = Dense();
  for (auto& c : cases) {
    auto refused = Push({c.message});
    EXPECT_EQ(refused.status().code(), c.code)
        << c.text << " -> " << refused.status();
    EXPECT_NE(refused.status().message().find(c.text), std::string::npos)
        << c.text << " -> " << refused.status();
  }
  EXPECT_EQ(Dense(), before);
}

TEST_F(HandlersTest, StreamsApplyOnlyWhenCompleteAndRetriesApplyOnce) {
  // Two messages, one update: pieces of the same shard, one version step.
  auto r = Push({PushMessage().Id(5).Dense("w", 0, 0, {1, 2, 3}).Build(false),
                 PushMessage().Dense("w", 0, 3, {4, 5, 6}).Build(true)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Dense(), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(store_.Find("w")->shard(0).version(), 1);

  // The same request again (a client retry): acknowledged, not applied.
  auto again =
      Push({PushMessage().Id(5).Dense("w", 0, 0, {1, 2, 3}).Build(false),
            PushMessage().Dense("w", 0, 3, {4, 5, 6}).Build(true)});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate());
  EXPECT_EQ(Dense()[0], -1);

  // A stream cut short (no message marked last) applies nothing.
  auto cut =
      Push({PushMessage().Id(6).Dense("w", 0, 0, {1, 1, 1}).Build(false)});
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Dense()[0], -1);
  // ... and is not remembered, so its retry does apply.
  auto retry = Push({PushMessage().Id(6).Dense("w", 0, 0, {1, 1, 1}).Build()});
  ASSERT_TRUE(retry.ok());
  EXPECT_FALSE(retry->duplicate());
  EXPECT_EQ(Dense()[0], -2);
}

TEST_F(HandlersTest, RepeatedIdsInOnePushAreSummedFirst) {
  ASSERT_TRUE(
      Push({PushMessage().Rows("h", 0, {7, 7, -3}, {1, 1, 2, 2, 5, 5}).Build()})
          .ok());
  const Shard& h = store_.Find("h")->shard(0);
  EXPECT_EQ(h.num_rows(), 2);
  std::vector<float> v(4);
  std::vector<int64_t> ids = {7, -3};
  ShardSlice rows;
  rows.ids = ids;
  ASSERT_TRUE(h.Read(rows, v.data()).ok());
  EXPECT_EQ(v, (std::vector<float>{-3, -3, -5, -5}));
}

TEST_F(HandlersTest, OversizedPushIsRefused) {
  PushHandler handler(&store_, &dedup_, /*max_push_bytes=*/1000);
  absl::Status s =
      handler.AddMessage(PushMessage()
                             .Rows("emb", 0, std::vector<int64_t>(20, 1),
                                   std::vector<float>(20 * 16))
                             .Build());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max_push_bytes"), std::string::npos);
}

TEST_F(HandlersTest, PullResponsesAreCutAtRowsWithinTheLimit) {
  PullRequestHeader header;
  header.set_max_response_message_bytes(4096);  // 64 rows of 16 floats
  std::vector<int64_t> ids(100);  // shard 0 holds 0..49; pulled twice
  for (int i = 0; i < 100; ++i) ids[i] = i % 50;
  TensorItem* t = header.add_items();
  t->set_variable("emb");
  t->set_shard(0);
  t->set_ids_payload(0);
  TensorItem* d = header.add_items();
  d->set_variable("w");
  d->set_offset(1);
  d->set_count(4);
  FrameWriter writer(header);
  writer.AddPayload(grpc::Slice(ids.data(), ids.size() * 8));
  FrameReader request;
  ASSERT_TRUE(request.Parse(writer.Finish()).ok());
  auto responder = PullResponder::Create(store_, request, 1 << 20);
  ASSERT_TRUE(responder.ok()) << responder.status();
  EXPECT_EQ((*responder)->rows(), 101);
  EXPECT_EQ((*responder)->value_bytes(), 100 * 64 + 16);
  std::vector<grpc::ByteBuffer> messages;
  while (!(*responder)->done()) {
    messages.emplace_back();
    ASSERT_TRUE((*responder)->Next(&messages.back()).ok());
  }
  // 6400 + 16 bytes at 4096 per message, rows never split: 2 messages.
  ASSERT_EQ(messages.size(), 2u);
  int64_t floats = 0;
  for (const auto& m : messages) {
    EXPECT_LE(m.Length(), 4096u + 200);
    FrameReader response;
    ASSERT_TRUE(response.Parse(m).ok());
    PullResponseHeader h;
    ASSERT_TRUE(response.ParseHeader(&h).ok());
    for (const auto& piece : h.pieces()) {
      const size_t bytes = response.payload(piece.values_payload()).size();
      if (piece.item() == 0) {
        EXPECT_EQ(piece.first_float() % 16, 0);
        EXPECT_EQ(bytes % 64, 0u);
      }
      floats += bytes / 4;
    }
  }
  EXPECT_EQ(floats, 100 * 16 + 4);
}

// Handback: PS 2 served PS 1's shard after a failover and gives it back.
// A push whose items were resolved before the shard became a backup here
// (ShardStore::Demote) finds that out before any shard prepares its part
// (no hash row is created for it: the copy stays the stream's) and again
// under the shards' locks: refused, retryable, nothing applied; later
// pushes are refused when resolved.
TEST(HandbackTest, APushResolvedBeforeTheShardWasHandedBackAppliesNothing) {
  ShardStore store(2, 3, 0,
                   *ReplicaPlacement::Create({"a:1", "b:1", "c:1"}, 2));
  // "w", "h": 3 shards, shard 1 placed on PS 1 (backup: PS 2).
  ASSERT_TRUE(
      store
          .CreateVariables(0,
                           {TestVariableSpec("w", DENSE, {6}, 3),
                            TestVariableSpec("h", HASH_EMBEDDING, {0, 2}, 3)},
                           3)
          .ok());
  const LocalVariable* w = store.Find("w");
  const LocalVariable* h = store.Find("h");
  ASSERT_TRUE(w->IsBackup(1));
  EXPECT_EQ(store.Promote(1), 2);  // the failover
  ASSERT_TRUE(w->IsPrimary(1));
  int64_t id = 0;  // an id of h's shard 1
  while (MixId(id) % 3 != 1) ++id;
  DedupScopes scopes(3);
  PushHandler push(&store, scopes.For(2), 1 << 20);
  push.set_dedup_scopes(&scopes);
  ASSERT_TRUE(push.AddMessage(PushMessage()
                                  .Dense("w", 1, 0, {1, 1})
                                  .Rows("h", 1, {id}, {1, 1})
                                  .Id(3)
                                  .Build())
                  .ok());
  EXPECT_EQ(store.Demote(1), 2);  // the handback
  EXPECT_TRUE(w->IsBackup(1));
  auto refused = push.Finish();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "no longer serves it (handed back to PS 1)"))
      << refused.status();
  EXPECT_EQ(w->shard(1).version(), 0);
  EXPECT_EQ(h->shard(1).version(), 0);
  EXPECT_EQ(h->shard(1).num_rows(), 0);
  // Not remembered as applied: the retry at PS 1 applies it.
  EXPECT_EQ(scopes.For(1)->Begin(9, 3), PushDedup::Outcome::kNew);
  PushHandler later(&store, scopes.For(2), 1 << 20);
  absl::Status resolved =
      later.AddMessage(PushMessage().Dense("w", 1, 0, {1, 1}).Build());
  EXPECT_EQ(resolved.code(), absl::StatusCode::kUnavailable) << resolved;
  EXPECT_TRUE(
      absl::StrContains(resolved.message(), "keeps only a backup copy of it"))
      << resolved;
  // PS 1's side: replaced (every copy a backup), then its own shards back.
  ShardStore replaced(1, 3, 0,
                      *ReplicaPlacement::Create({"a:1", "b:1", "c:1"}, 2));
  ASSERT_TRUE(
      replaced.CreateVariables(0, {TestVariableSpec("w", DENSE, {6}, 3)}, 3)
          .ok());
  replaced.Retire();
  EXPECT_TRUE(replaced.Find("w")->IsBackup(1));
  EXPECT_EQ(replaced.Reinstate(), 1);
  EXPECT_TRUE(replaced.Find("w")->IsPrimary(1));
  EXPECT_TRUE(replaced.Find("w")->IsBackup(0));  // PS 0's stays a backup
}

}  // namespace
}  // namespace psrt
