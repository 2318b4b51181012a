// A backup applying a primary's forwarded pushes, without gRPC: in order,
// once each, to the same bits as the primary's copy; and every malformed or
// out-of-place stream refused, naming why, with nothing applied.
#include "ps_server/replication/replica_applier.h"

#include <functional>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/frame_writer.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/replication/snapshot_installer.h"
#include "ps_server/rpc/test_variable_spec.h"
#include "ps_server/shards/count_min_sketch.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "ps_server/shards/shard_digest.h"

namespace psrt {
namespace {

// One dense push to "w" (shard 0, on PS 0) of `grad` everywhere.
grpc::ByteBuffer DensePush(float grad, const std::string& variable = "w",
                           int shard = 0) {
  PushRequestHeader header;
  TensorItem* item = header.add_items();
  item->set_variable(variable);
  item->set_shard(shard);
  item->set_offset(0);
  item->set_count(6);
  item->set_grad_payload(0);
  header.set_last(true);
  header.set_client_id(5);
  header.set_request_id(77);
  std::vector<float> values(6, grad);
  FrameWriter writer(header);
  writer.AddPayload(grpc::Slice(values.data(), values.size() * 4));
  return writer.Finish();
}

ReplicationHeader Header(int from, uint64_t incarnation, uint64_t first,
                         int updates, int frames_each = 1) {
  ReplicationHeader h;
  h.set_from_task(from);
  h.set_incarnation(incarnation);
  for (int i = 0; i < updates; ++i) {
    ReplicatedUpdate* u = h.add_updates();
    u->set_sequence(first + i);
    u->set_num_frames(frames_each);
    u->set_scale(1.0f);
    u->set_client_id(5);
    u->set_request_id(77 + i);
  }
  return h;
}

class ReplicaApplierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int task = 0; task < 3; ++task) {
      stores_.push_back(std::make_unique<ShardStore>(
          task, 3, 0, *ReplicaPlacement::Create({"a:1", "b:1", "c:1"}, 2)));
      // "w": one shard, on PS 0 (backup PS 1); "v": its shard 0 on PS 1.
      ASSERT_TRUE(stores_.back()
                      ->CreateVariables(0,
                                        {TestVariableSpec("w", DENSE, {6}),
                                         TestVariableSpec("v", DENSE, {6})},
                                        3)
                      .ok());
    }
  }

  // Runs one Replicate call (a header, then frames) on `applier`.
  static absl::StatusOr<ReplicateResponse> Run(
      ReplicaApplier& applier, const ReplicationHeader& header,
      const std::vector<grpc::ByteBuffer>& frames) {
    ReplicaApplier::Call call(&applier);
    absl::Status s = call.AddMessage(FrameWriter(header).Finish());
    for (const auto& f : frames) {
      if (s.ok()) s = call.AddMessage(f);
    }
    if (!s.ok()) return s;
    return call.Finish();
  }

  std::vector<std::unique_ptr<ShardStore>> stores_;
  DedupScopes dedup_{3};
};

TEST_F(ReplicaApplierTest, AppliesInOrderOnceToTheSameBitsAsThePrimary) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  ASSERT_TRUE(stores_[1]->Find("w")->IsBackup(0));
  ASSERT_TRUE(stores_[0]->Find("w")->IsPrimary(0));
  EXPECT_FALSE(applier.InSyncWith(0));
  auto call = [&](const ReplicationHeader& h,
                  std::vector<grpc::ByteBuffer> frames) {
    return Run(applier, h, frames);
  };
  // Hello, then two updates; the primary applies the same two.
  auto hello = call(Header(0, 42, 0, 0), {});
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_TRUE(applier.InSyncWith(0));
  auto applied = call(Header(0, 42, 1, 2), {DensePush(0.5f), DensePush(0.25f)});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->applied_through(), 2u);
  for (float g : {0.5f, 0.25f}) {
    ShardUpdate u;
    std::vector<float> grad(6, g);
    u.ranges.push_back({0, 6, PayloadView::Contiguous(grad.data(), 24)});
    u.learning_rate = 1.0f;
    ASSERT_TRUE(stores_[0]->Find("w")->shard(0).ApplyUpdate(u).ok());
  }
  EXPECT_EQ(ShardDigest(stores_[1]->Find("w")->shard(0)),
            ShardDigest(stores_[0]->Find("w")->shard(0)));
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 2);
  // A retried call (its answer was lost) applies nothing again.
  auto retried = call(Header(0, 42, 1, 2), {DensePush(0.5f), DensePush(0.25f)});
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ(retried->applied_through(), 2u);
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 2);
  // The forwarded push's id is kept under PS 0's scope, not PS 1's own.
  EXPECT_EQ(dedup_.For(0)->Begin(5, 77), PushDedup::Outcome::kApplied);
  EXPECT_EQ(dedup_.For(1)->Begin(5, 77), PushDedup::Outcome::kNew);
  // A gap, a new incarnation, and after a takeover the old primary: refused.
  auto gap = call(Header(0, 42, 5, 1), {DensePush(1)});
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kFailedPrecondition);
  auto reborn = call(Header(0, 43, 1, 1), {DensePush(1)});
  EXPECT_EQ(reborn.status().code(), absl::StatusCode::kFailedPrecondition);
  applier.Fence(0);
  EXPECT_FALSE(applier.InSyncWith(0));
  auto fenced = call(Header(0, 42, 3, 1), {DensePush(1)});
  EXPECT_TRUE(absl::StrContains(fenced.status().message(), kReplacedMarker))
      << fenced.status();
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 2);
}

// A restarted backup sent the middle of a primary's stream refuses it
// before resolving its items (it may not have created their variables) and
// asks for a rejoin; the primary's fresh hello (sequence 1 next) asks for
// nothing. While it installs a snapshot, it answers with kRejoiningMarker.
TEST_F(ReplicaApplierTest,
       AStreamItMissedTheStartOfIsRefusedAndAsksForARejoin) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  std::vector<int> asked;
  applier.set_on_out_of_sync([&](int primary) { asked.push_back(primary); });
  auto mid = Run(applier, Header(0, 42, 201, 1), {DensePush(1)});
  EXPECT_EQ(mid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(mid.status().message(),
                                "holds no update of PS 0's stream, which is at "
                                "sequence 201"))
      << mid.status();
  EXPECT_EQ(asked, std::vector<int>{0});
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 0);
  EXPECT_FALSE(applier.InSyncWith(0));
  // A hello of a new primary process: followed from sequence 1, no rejoin.
  ReplicaApplier fresh(stores_[1].get(), &dedup_, 1 << 20);
  fresh.set_on_out_of_sync([&](int primary) { asked.push_back(primary); });
  ASSERT_TRUE(Run(fresh, Header(0, 42, 0, 0), {}).ok());
  ASSERT_TRUE(Run(fresh, Header(0, 42, 1, 1), {DensePush(1)}).ok());
  EXPECT_EQ(asked, std::vector<int>{0});
  fresh.BeginRejoin(0);
  auto installing = Run(fresh, Header(0, 42, 0, 0), {});
  EXPECT_EQ(installing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StrContains(installing.status().message(), kRejoiningMarker))
      << installing.status();
}

// SYNC: a push the primary holds for its barrier is kept here, not
// applied, and handed over on a takeover (SyncBarriersOf) with the first
// step not applied; the step's combined update -- each worker's push a
// stream of its own -- applies all of them and drops what was held.
TEST_F(ReplicaApplierTest, HeldSyncPushesAreKeptUntilTheirStepIsApplied) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  ASSERT_TRUE(Run(applier, Header(0, 42, 0, 0), {}).ok());
  ReplicationHeader held = Header(0, 42, 1, 1);
  held.mutable_updates(0)->set_held(true);
  held.mutable_updates(0)->set_step(7);
  held.mutable_updates(0)->set_worker_index(1);
  ASSERT_TRUE(Run(applier, held, {DensePush(0.5f)}).ok());
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 0);  // not applied
  auto barriers = applier.SyncBarriersOf(0);
  ASSERT_EQ(barriers.size(), 1u);
  EXPECT_EQ(barriers[0].next_step, 7);
  ASSERT_EQ(barriers[0].held.size(), 1u);
  EXPECT_EQ(barriers[0].held[0].size(), 1u);
  // Its request id is not recorded as applied: the worker's retry must
  // still count in the barrier.
  EXPECT_EQ(dedup_.For(0)->Begin(5, 77), PushDedup::Outcome::kNew);
  // The combined update of step 7: two pushes of one frame each.
  ReplicationHeader step = Header(0, 42, 2, 1, 2);
  step.mutable_updates(0)->set_sync_step(true);
  step.mutable_updates(0)->set_step(7);
  step.mutable_updates(0)->set_scale(0.5f);
  step.mutable_updates(0)->add_push_frames(1);
  step.mutable_updates(0)->add_push_frames(1);
  auto applied = Run(applier, step, {DensePush(0.5f), DensePush(0.25f)});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 1);  // one update
  barriers = applier.SyncBarriersOf(0);
  EXPECT_EQ(barriers[0].next_step, 8);
  EXPECT_TRUE(barriers[0].held.empty());
  // Without push_frames two pushes cannot be told apart: refused.
  ReplicationHeader merged = Header(0, 42, 3, 1, 2);
  auto refused = Run(applier, merged, {DensePush(1), DensePush(1)});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
      << refused.status();
  // push_frames that do not add up: refused before anything is read.
  ReplicationHeader bad = Header(0, 42, 3, 1, 2);
  bad.mutable_updates(0)->add_push_frames(1);
  bad.mutable_updates(0)->add_push_frames(2);
  auto mismatch = Run(applier, bad, {DensePush(1), DensePush(1)});
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(mismatch.status().message(), "splits its 2"))
      << mismatch.status();
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 1);
}

// SSP: each forwarded push carries its worker and step, and the backup
// keeps every worker's clock per barrier for a takeover.
TEST_F(ReplicaApplierTest, SspClocksFollowTheForwardedPushes) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  ASSERT_TRUE(Run(applier, Header(0, 42, 0, 0), {}).ok());
  const std::pair<int, int64_t> pushes[] = {{2, 9}, {0, 4}, {2, 7}};
  uint64_t sequence = 1;
  for (const auto& [worker, step] : pushes) {
    ReplicationHeader h = Header(0, 42, sequence++, 1);
    h.mutable_updates(0)->set_ssp(true);
    h.mutable_updates(0)->set_worker_index(worker);
    h.mutable_updates(0)->set_step(step);
    h.mutable_updates(0)->set_request_id(0);
    ASSERT_TRUE(Run(applier, h, {DensePush(0.5f)}).ok());
  }
  auto barriers = applier.SyncBarriersOf(0);
  ASSERT_EQ(barriers.size(), 1u);
  EXPECT_EQ(barriers[0].clocks, (std::vector<int64_t>{5, 0, 10}));
}

// Handback: PS 1 took PS 0's shards over (fenced PS 0's stream), then gave
// them back; its copy follows PS 0's new stream from where PS 0 said, and
// nothing of the old one.
TEST_F(ReplicaApplierTest, AHandedBackPrimarysNewStreamIsFollowedFromItsStart) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  ASSERT_TRUE(Run(applier, Header(0, 42, 1, 1), {DensePush(0.5f)}).ok());
  applier.Fence(0);
  EXPECT_FALSE(applier.InSyncWith(0));
  EXPECT_FALSE(Run(applier, Header(0, 42, 2, 1), {DensePush(1)}).ok());
  applier.FollowHandedBack(0, 99, 5);
  EXPECT_TRUE(applier.Follows(0, 99));
  EXPECT_FALSE(applier.Follows(0, 42));
  EXPECT_TRUE(applier.InSyncWith(0));
  // The old incarnation is refused; the new one's hello and its first
  // update (sequence 5, not 1) are taken.
  auto old = Run(applier, Header(0, 42, 2, 1), {DensePush(1)});
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition)
      << old.status();
  ASSERT_TRUE(Run(applier, Header(0, 99, 0, 0), {}).ok());
  auto applied = Run(applier, Header(0, 99, 5, 1), {DensePush(0.25f)});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->applied_through(), 5u);
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 2);
  // A gap after it is refused.
  auto gap = Run(applier, Header(0, 99, 7, 1), {DensePush(1)});
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 2);
}

// Handback of a SYNC/SSP barrier: the PS taking its shards back takes the
// barrier as the serving PS's answer says it stands, with the pushes that
// stream held for that step, and no longer keeps it for that stream.
TEST_F(ReplicaApplierTest, ATakenBarrierHasTheHeldPushesOfItsStep) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  ASSERT_TRUE(Run(applier, Header(0, 42, 0, 0), {}).ok());
  const std::pair<int64_t, int> held[] = {{6, 0}, {7, 1}, {7, 2}};
  uint64_t sequence = 1;
  for (const auto& [step, worker] : held) {
    ReplicationHeader h = Header(0, 42, sequence++, 1);
    h.mutable_updates(0)->set_held(true);
    h.mutable_updates(0)->set_step(step);
    h.mutable_updates(0)->set_worker_index(worker);
    h.mutable_updates(0)->set_for_ps(1);
    ASSERT_TRUE(Run(applier, h, {DensePush(0.5f)}).ok());
  }
  ReplicaApplier::SyncBarrier barrier = applier.TakeBarrier(0, 1, 7, {3, 0, 5});
  EXPECT_EQ(barrier.next_step, 7);
  EXPECT_EQ(barrier.held.size(), 2u);  // step 7's, not step 6's
  EXPECT_EQ(barrier.clocks, (std::vector<int64_t>{3, 0, 5}));
  EXPECT_EQ(applier.SyncBarriersOf(0).count(1), 0u);
  // Never behind what this copy saw: a held push of step 8 moves it on.
  ReplicationHeader later = Header(0, 42, sequence++, 1);
  later.mutable_updates(0)->set_held(true);
  later.mutable_updates(0)->set_step(8);
  later.mutable_updates(0)->set_for_ps(2);
  ASSERT_TRUE(Run(applier, later, {DensePush(0.5f)}).ok());
  EXPECT_EQ(applier.TakeBarrier(0, 2, 7, {}).next_step, 8);
}

TEST_F(ReplicaApplierTest, HostileStreamsAreRefusedNamingWhyAndApplyNothing) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  auto call = [&](const ReplicationHeader& h,
                  std::vector<grpc::ByteBuffer> frames) {
    return Run(applier, h, frames);
  };
  struct Case {
    std::string what;
    ReplicationHeader header;
    std::vector<grpc::ByteBuffer> frames;
    std::string says;
  };
  ReplicationHeader gap = Header(0, 42, 1, 2);
  gap.mutable_updates(1)->set_sequence(7);
  ReplicationHeader nan_scale = Header(0, 42, 1, 1);
  nan_scale.mutable_updates(0)->set_scale(std::nanf(""));
  ReplicationHeader no_frames = Header(0, 42, 1, 1, 0);
  std::vector<Case> cases = {
      {"from itself", Header(1, 42, 1, 1), {DensePush(1)}, "not another PS"},
      {"from no PS", Header(9, 42, 1, 1), {DensePush(1)}, "not another PS"},
      {"from a PS it backs up nothing of",
       Header(2, 42, 1, 1),
       {DensePush(1)},
       "keeps no backup"},
      {"incarnation 0", Header(0, 0, 1, 1), {DensePush(1)}, "incarnation 0"},
      {"sequences not consecutive",
       gap,
       {DensePush(1), DensePush(1)},
       "consecutive"},
      {"NaN scale", nan_scale, {DensePush(1)}, "scale"},
      {"no frames", no_frames, {}, "frames at least 1"},
      {"more frames than declared",
       Header(0, 42, 1, 1),
       {DensePush(1), DensePush(1)},
       "more frames"},
      {"fewer frames than declared",
       Header(0, 42, 1, 2),
       {DensePush(1)},
       "ended before"},
      {"a shard PS 0 is not primary of",
       Header(0, 42, 1, 1),
       {DensePush(1, "v", 0)},
       "keeps no backup copy"},
      {"first sequence 5", Header(0, 42, 5, 1), {DensePush(1)}, "not in sync"},
  };
  for (const Case& c : cases) {
    auto result = call(c.header, c.frames);
    ASSERT_FALSE(result.ok()) << c.what;
    EXPECT_TRUE(absl::StrContains(result.status().message(), c.says))
        << c.what << ": " << result.status();
    EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 0) << c.what;
  }
  // None of them established a stream: a correct one still can.
  auto good = call(Header(0, 42, 1, 1), {DensePush(1)});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 1);
}

// A primary's evictions reach the backup as updates of their own (no
// frames) between its pushes, and are applied in that order; evictions
// naming what the primary does not own, or no hash shard, are refused.
TEST_F(ReplicaApplierTest,
       EvictionsAreFollowedInStreamOrderHostileOnesRefused) {
  // "h": a hash embedding of 3 shards over the 3 PS, rows 1..10 in every
  // copy of each shard.
  std::vector<int64_t> ids(10);
  for (int i = 0; i < 10; ++i) ids[i] = i + 1;
  for (auto& store : stores_) {
    ASSERT_TRUE(
        store
            ->CreateVariables(
                2, {TestVariableSpec("h", HASH_EMBEDDING, {0, 2}, 3)}, 3)
            .ok());
    const LocalVariable* h = store->Find("h");
    for (int s = 0; s < 3; ++s) {
      if (!h->Holds(s)) continue;
      std::vector<float> rows(10 * h->shard(s).row_stride(), 0.5f);
      ASSERT_TRUE(h->shard(s).ImportRows(ids, rows.data()).ok());
    }
  }
  const LocalVariable* on_primary = stores_[0]->Find("h");
  const LocalVariable* on_backup = stores_[1]->Find("h");
  int ps0_shard = -1, ps1_shard = -1;
  for (int s = 0; s < 3; ++s) {
    const int placed = on_primary->layout->shards[s].ps_task;
    if (placed == 0) ps0_shard = s;
    if (placed == 1) ps1_shard = s;
  }
  ASSERT_TRUE(ps0_shard >= 0 && ps1_shard >= 0);
  ASSERT_TRUE(on_backup->IsBackup(ps0_shard));
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  ASSERT_TRUE(Run(applier, Header(0, 42, 0, 0), {}).ok());
  auto evictions = [](ReplicatedUpdate* u, const std::string& variable,
                      int shard, std::vector<int64_t> evicted) {
    u->set_num_frames(0);
    u->set_request_id(0);
    ShardIds* e = u->add_evicted();
    e->set_variable(variable);
    e->set_shard(shard);
    for (int64_t id : evicted) e->add_ids(id);
  };
  // Hostile first: nothing is taken out.
  struct Case {
    std::string what;
    std::string variable;
    int shard;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"a dense variable", "w", 0, "not a shard of a hash embedding"},
      {"no such shard", "h", 7, "not a shard of a hash embedding"},
      {"no such variable", "nope", 0, "not a shard of a hash embedding"},
      {"a shard PS 1 is primary of", "h", ps1_shard, "whose primary is PS 1"},
  };
  for (const Case& c : cases) {
    ReplicationHeader h = Header(0, 42, 1, 1);
    evictions(h.mutable_updates(0), c.variable, c.shard, {1, 2});
    auto refused = Run(applier, h, {});
    ASSERT_FALSE(refused.ok()) << c.what;
    EXPECT_TRUE(absl::StrContains(refused.status().message(), c.says))
        << c.what << ": " << refused.status();
  }
  EXPECT_EQ(on_backup->shard(ps0_shard).num_rows(), 10);
  // Evictions, a push, evictions: one call, frames only for the push.
  ReplicationHeader h = Header(0, 42, 1, 3);
  evictions(h.mutable_updates(0), "h", ps0_shard, {1, 2, 99});
  evictions(h.mutable_updates(2), "h", ps0_shard, {3});
  auto applied = Run(applier, h, {DensePush(0.5f)});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->applied_through(), 3u);
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), 1);
  EXPECT_EQ(on_backup->shard(ps0_shard).num_rows(), 7);
  // The primary's copy after the same evictions: the same bits.
  ASSERT_TRUE(on_primary->shard(ps0_shard).FollowEvictions({1, 2, 3}).ok());
  EXPECT_EQ(ShardDigest(on_backup->shard(ps0_shard)),
            ShardDigest(on_primary->shard(ps0_shard)));
  // Evictions alone as the last update of a call.
  ReplicationHeader last = Header(0, 42, 4, 1);
  evictions(last.mutable_updates(0), "h", ps0_shard, {4});
  ASSERT_TRUE(Run(applier, last, {}).ok());
  EXPECT_EQ(on_backup->shard(ps0_shard).num_rows(), 6);
}

// Rows [0, n) of `source`'s shard 0 of `variable` as InstallSnapshot
// messages from PS `from`, the last one carrying `sequence` (and the
// counters of `sketch`, if set); `edit`, if set, changes the header of
// each (numbered from 0).
std::vector<grpc::ByteBuffer> Snapshot(
    const ShardStore& source, const std::string& variable, int from,
    uint64_t sequence,
    const std::function<void(int, SnapshotChunk&)>& edit = nullptr,
    const CountMinSketch* sketch = nullptr) {
  const Shard& shard = source.Find(variable)->shard(0);
  const int64_t n = shard.num_rows();
  std::vector<int64_t> ids(n);
  std::vector<float> rows(n * shard.row_stride());
  int64_t version = 0;
  shard.ExportRows(0, n, ids.data(), rows.data(), &version);
  std::vector<grpc::ByteBuffer> messages;
  for (int64_t first = 0; first < n; first += 4) {  // 4 rows a chunk
    const int64_t count = std::min<int64_t>(4, n - first);
    SnapshotChunk chunk;
    chunk.set_from_task(from);
    chunk.set_variable(variable);
    chunk.set_first_row(first);
    chunk.set_num_rows(count);
    chunk.set_last(first + count == n);
    chunk.set_version(version);
    chunk.set_sequence(sequence);
    if (sketch != nullptr && chunk.last()) {
      chunk.set_admission_increments(sketch->increments());
    }
    if (edit) edit(static_cast<int>(messages.size()), chunk);
    FrameWriter writer(chunk);
    writer.AddPayload(grpc::Slice(ids.data() + first, count * 8));
    writer.AddPayload(grpc::Slice(rows.data() + first * shard.row_stride(),
                                  count * shard.row_stride() * 4));
    if (sketch != nullptr && chunk.last()) {
      writer.AddPayload(
          grpc::Slice(sketch->counters().data(), sketch->counters().size()));
    }
    messages.push_back(writer.Finish());
  }
  return messages;
}

absl::StatusOr<InstallSnapshotResponse> Install(
    ShardStore* store, ReplicaApplier* applier,
    const std::vector<grpc::ByteBuffer>& messages) {
  SnapshotInstaller installer(store, applier);
  for (const grpc::ByteBuffer& m : messages) {
    if (absl::Status s = installer.AddMessage(m); !s.ok()) return s;
  }
  return installer.Finish();
}

// A rejoin: PS 1 gets PS 0's copy of "w" taken at sequence 5 while PS 0's
// stream to it starts at 3. Updates 3 and 4 are in the copy (skipped when
// the stream brings them again), 5 and 6 are not (applied): PS 1 ends with
// PS 0's bits, which it would not if it applied 3 and 4 twice.
TEST_F(ReplicaApplierTest, ARejoinSnapshotThenTheStreamGiveThePrimarysBits) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  Shard& primary = stores_[0]->Find("w")->shard(0);
  auto apply = [&](float g) {
    ShardUpdate u;
    std::vector<float> grad(6, g);
    u.ranges.push_back({0, 6, PayloadView::Contiguous(grad.data(), 24)});
    u.learning_rate = 1.0f;
    ASSERT_TRUE(primary.ApplyUpdate(u).ok());
  };
  apply(1);  // sequences 1..4 at the primary before the copy
  apply(2);
  apply(3);
  apply(4);
  applier.BeginRejoin(0);
  // Replicate calls wait (UNAVAILABLE: the primary retries) until the copy
  // is in.
  auto early = Run(applier, Header(0, 9, 0, 0), {});
  EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable)
      << early.status();
  auto installed = Install(stores_[1].get(), &applier,
                           Snapshot(*stores_[0], "w", 0, /*sequence=*/5));
  ASSERT_TRUE(installed.ok()) << installed.status();
  EXPECT_EQ(installed->rows(), 6);
  EXPECT_EQ(ShardDigest(stores_[1]->Find("w")->shard(0)), ShardDigest(primary));
  RejoinResponse answer;
  answer.set_incarnation(9);
  answer.set_stream_from(3);
  answer.add_serves_for(0);
  ASSERT_EQ(applier.FinishRejoin(0, answer), absl::OkStatus());
  EXPECT_TRUE(applier.InSyncWith(0));
  ASSERT_TRUE(Run(applier, Header(0, 9, 0, 0), {}).ok());  // hello
  auto applied =
      Run(applier, Header(0, 9, 3, 4),
          {DensePush(3), DensePush(4), DensePush(0.5f), DensePush(0.25f)});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->applied_through(), 6u);
  apply(0.5f);
  apply(0.25f);
  EXPECT_EQ(ShardDigest(stores_[1]->Find("w")->shard(0)), ShardDigest(primary));
  EXPECT_EQ(stores_[1]->Find("w")->shard(0).version(), primary.version());
}

// The pushes a rejoin answer says the copies hold are remembered as
// applied under their scope, so a worker's retry of one is acknowledged,
// not applied again. An answer naming a scope its sender does not serve,
// unpaired ids, or more pushes than an answer carries is refused, naming
// why, and records nothing.
TEST_F(ReplicaApplierTest, ARejoinAnswerPassesOnTheAppliedPushesOfItsCopies) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  applier.BeginRejoin(0);
  ASSERT_TRUE(Install(stores_[1].get(), &applier,
                      Snapshot(*stores_[0], "w", 0, /*sequence=*/1))
                  .ok());
  RejoinResponse answer;
  answer.set_incarnation(9);
  answer.set_stream_from(1);
  answer.add_serves_for(0);
  auto refused = [&](const RejoinResponse& hostile) {
    const absl::Status s = applier.FinishRejoin(0, hostile);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  RejoinResponse other_scope = answer;
  AppliedPushes* applied = other_scope.add_applied_pushes();
  applied->set_scope(2);
  applied->add_client_ids(5);
  applied->add_request_ids(50);
  EXPECT_NE(refused(other_scope).find("scope 2"), std::string::npos);
  RejoinResponse unpaired = answer;
  unpaired.add_applied_pushes()->add_client_ids(5);
  EXPECT_NE(refused(unpaired).find("unpaired"), std::string::npos);
  RejoinResponse too_many = answer;
  applied = too_many.add_applied_pushes();
  for (size_t i = 0; i <= PushDedup::kMostSentOnRejoin; ++i) {
    applied->add_client_ids(5);
    applied->add_request_ids(i + 1);
  }
  EXPECT_NE(refused(too_many).find("past the"), std::string::npos);
  EXPECT_EQ(dedup_.For(0)->entries(), 0u);
  EXPECT_EQ(dedup_.For(2)->entries(), 0u);

  applied = answer.add_applied_pushes();
  applied->set_scope(0);
  applied->add_client_ids(5);
  applied->add_request_ids(50);
  ASSERT_EQ(applier.FinishRejoin(0, answer), absl::OkStatus());
  EXPECT_EQ(dedup_.For(0)->Begin(5, 50), PushDedup::Outcome::kApplied);
  EXPECT_EQ(dedup_.For(0)->Begin(5, 51), PushDedup::Outcome::kNew);
  EXPECT_EQ(dedup_.For(1)->entries(), 0u);
}

// A rejoin copies feature admission's sightings with the rows: ids the
// source saw once are admitted on the copy by their next sighting, as on
// the source. A sketch of another width is refused, naming the sizes.
TEST_F(ReplicaApplierTest, ARejoinCopiesAdmissionSightingsWithTheRows) {
  VariableSpec spec = TestVariableSpec("a", HASH_EMBEDDING, {0, 2});
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_admission()->set_sketch_width(1024);
  for (auto& store : stores_) {
    ASSERT_TRUE(store->CreateVariables(2, {spec}, 3).ok());
  }
  const int primary = stores_[0]->Find("a")->layout->shards[0].ps_task;
  const int backup = (primary + 1) % 3;
  auto& source =
      static_cast<HashEmbeddingShard&>(stores_[primary]->Find("a")->shard(0));
  std::vector<int64_t> once, twice;
  for (int64_t id = 1; id <= 100; ++id) (id <= 50 ? twice : once).push_back(id);
  ASSERT_TRUE(source.EnsureRows(once).ok());
  ASSERT_TRUE(source.EnsureRows(twice).ok());
  ASSERT_TRUE(source.EnsureRows(twice).ok());
  ASSERT_EQ(source.num_rows(), 50);
  const CountMinSketch* sketch;
  {
    absl::ReaderMutexLock lock(source.mutex());
    sketch = source.AdmissionSketchLocked();
  }
  ASSERT_NE(sketch, nullptr);

  ReplicaApplier applier(stores_[backup].get(), &dedup_, 1 << 20);
  applier.BeginRejoin(primary);
  CountMinSketch other_width(2048);
  auto refused = Install(
      stores_[backup].get(), &applier,
      Snapshot(*stores_[primary], "a", primary, 5, nullptr, &other_width));
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "does not fit"))
      << refused.status();
  auto installed =
      Install(stores_[backup].get(), &applier,
              Snapshot(*stores_[primary], "a", primary, 5, nullptr, sketch));
  ASSERT_TRUE(installed.ok()) << installed.status();
  auto& copy =
      static_cast<HashEmbeddingShard&>(stores_[backup]->Find("a")->shard(0));
  EXPECT_EQ(copy.num_rows(), 50);
  ASSERT_TRUE(copy.EnsureRows(once).ok());
  EXPECT_EQ(copy.num_rows(), 100) << "the sightings before the rejoin count";
}

TEST_F(ReplicaApplierTest, HostileSnapshotsAreRefusedNamingWhy) {
  ReplicaApplier applier(stores_[1].get(), &dedup_, 1 << 20);
  const std::vector<grpc::ByteBuffer> good = Snapshot(*stores_[0], "w", 0, 5);
  // Not rejoining from PS 0: nothing is expected.
  auto unasked = Install(stores_[1].get(), &applier, good);
  EXPECT_TRUE(
      absl::StrContains(unasked.status().message(), "is not rejoining from it"))
      << unasked.status();
  applier.BeginRejoin(0);
  auto chunk = [&](auto edit) {
    SnapshotChunk c;
    c.set_from_task(0);
    c.set_variable("w");
    c.set_num_rows(1);
    c.set_last(true);
    c.set_sequence(5);
    std::vector<int64_t> ids = {0};
    std::vector<float> row(1, 9.0f);
    edit(c, ids, row);
    FrameWriter writer(c);
    writer.AddPayload(grpc::Slice(ids.data(), ids.size() * 8));
    writer.AddPayload(grpc::Slice(row.data(), row.size() * 4));
    return std::vector<grpc::ByteBuffer>{writer.Finish()};
  };
  struct Case {
    std::string what;
    std::vector<grpc::ByteBuffer> messages;
    std::string expected;
  };
  using Ids = std::vector<int64_t>;
  using Row = std::vector<float>;
  std::vector<Case> cases = {
      {"from itself",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_from_task(1); }),
       "is not another PS"},
      {"from PS 7",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_from_task(7); }),
       "is not another PS"},
      {"its own primary copy",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_variable("v"); }),
       "holds no backup copy"},
      {"unknown variable",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_variable("nope"); }),
       "holds no backup copy"},
      {"rows out of order",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_first_row(3); }),
       "does not continue"},
      {"negative count",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_num_rows(-1); }),
       "does not continue"},
      {"short rows payload",
       chunk([](SnapshotChunk& c, Ids&, Row& r) { r.clear(); }),
       "1 rows need 8 bytes of ids and 4 of rows, got 8 and 0"},
      {"id outside the variable",
       chunk([](SnapshotChunk& c, Ids& ids, Row&) { ids[0] = 6; }),
       "id 6 does not belong to it"},
      {"last without sequence",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_sequence(0); }),
       "without a sequence"},
      {"ends before its last chunk",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_last(false); }),
       "ended before the chunk marked last"},
      {"negative cold rows",
       chunk([](SnapshotChunk& c, Ids&, Row&) { c.set_cold_rows(-1); }),
       "got -1)"},
      {"cold rows that change",
       Snapshot(
           *stores_[0], "w", 0, 5,
           [](int i, SnapshotChunk& c) { c.set_cold_rows(i == 1 ? 3 : 0); }),
       "the first chunk's cold_rows 0, got 3"},
      {"garbage", {grpc::ByteBuffer()}, ""},
  };
  // A chunk after the last one.
  std::vector<grpc::ByteBuffer> twice = good;
  twice.push_back(good.back());
  cases.push_back({"past the last chunk", twice, "continued after the chunk"});
  for (const Case& c : cases) {
    auto result = Install(stores_[1].get(), &applier, c.messages);
    EXPECT_FALSE(result.ok()) << c.what;
    EXPECT_TRUE(absl::StrContains(result.status().message(), c.expected))
        << c.what << ": " << result.status();
  }
  // A copy is trusted only once its rejoin finished: after failed
  // installs it is not in sync (it may not take over, and the rejoiner
  // starts again).
  EXPECT_FALSE(applier.InSyncWith(0));
}

}  // namespace
}  // namespace psrt
