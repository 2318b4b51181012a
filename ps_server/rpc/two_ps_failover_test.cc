// Failover with 2 PS (--replicas=2), the layout most users run: the two
// workers vote beside the PS (worker_witness.h), 4 voters, a majority of
// 3. Real PS services and the workers' witnesses in one process
// (InProcessCluster), on a simulated clock; PS 0's shards are copied to
// PS 1 and PS 1's to PS 0. Node 2 is worker 0, node 3 worker 1 (links).
#include <memory>
#include <vector>

#include "clients/cpp/client.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/rpc/in_process_cluster.h"

namespace psrt {
namespace {

constexpr int kW0 = 2, kW1 = 3;  // the workers' nodes

std::unique_ptr<InProcessCluster> StartTwoPs(
    const std::function<void(InProcessCluster::Options*)>& tweak = nullptr) {
  InProcessCluster::Options options;
  options.num_ps = 2;
  options.client_ports = true;
  if (tweak) tweak(&options);
  auto cluster = InProcessCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return nullptr;
  (*cluster)->Advance(absl::Seconds(1));  // every lease granted
  return std::move(*cluster);
}

// Of PS `owner`'s shards: which PS acknowledge pushes now.
int Primaries(InProcessCluster* cluster, int owner) {
  return cluster->Serves(0, owner) + cluster->Serves(1, owner);
}

std::unique_ptr<Client> NewClient(InProcessCluster* cluster) {
  ClientOptions o;
  o.ps_addresses = cluster->client_addresses();
  o.call_timeout = absl::Seconds(20);
  o.initial_backoff = absl::Milliseconds(10);
  o.max_backoff = absl::Milliseconds(50);
  auto client = Client::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

VariableSpec OneShardOn0() {
  VariableSpec s;
  s.set_name("p0");  // one shard: on PS 0, copied to PS 1
  s.set_kind(DENSE);
  s.add_shape(2);
  s.mutable_partition()->set_num_shards(1);
  s.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  return s;
}

int64_t VersionAt(InProcessCluster* cluster, int task) {
  if (cluster->ps(task) == nullptr) return -1;
  const LocalVariable* v = cluster->ps(task)->store()->Find("p0");
  return v != nullptr && v->Holds(0) ? v->shard(0).version() : -1;
}

TEST(TwoPsFailoverTest, EachPsServesItsShardsOnTheWorkersGrants) {
  auto cluster = StartTwoPs();
  ASSERT_NE(cluster, nullptr);
  for (int owner = 0; owner < 2; ++owner) {
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(cluster->Serves(t, owner), t == owner)
          << "PS " << t << " for PS " << owner << "'s shards";
    }
  }
  EXPECT_EQ(cluster->ps(0)->membership()->voters(), 4);
  // The workers alone keep a PS's lease: PS 0 cut off from PS 1 serves on
  // (3 of 4 grant), and PS 1 does not take over (2 of 4 vote).
  cluster->links()->Partition({{0}, {1}});
  cluster->Advance(absl::Seconds(10), [&] {
    ASSERT_TRUE(cluster->Serves(0, 0));
    ASSERT_TRUE(cluster->Serves(1, 1));
    ASSERT_EQ(Primaries(cluster.get(), 0), 1);
  });
  EXPECT_FALSE(cluster->ps(1)->membership()->IsFailed(0));
}

TEST(TwoPsFailoverTest, AKilledPsIsTakenOverOnceItsLeaseCannotHold) {
  auto cluster = StartTwoPs();
  ASSERT_NE(cluster, nullptr);
  const absl::Time killed_at = cluster->clock()->Now();
  cluster->Kill(0);
  ASSERT_TRUE(cluster->AdvanceUntil([&] { return cluster->Serves(1, 0); },
                                    absl::Seconds(10)));
  const absl::Duration after = cluster->clock()->Now() - killed_at;
  // The silence is counted from the last answered probe, which came up to
  // a probe period before the kill (the in-process witnesses' start moves
  // the probes' phase against the kill's).
  const FailoverMonitor::Options monitor;
  EXPECT_GE(after, monitor.failover_after - monitor.probe_every);
  EXPECT_GE(after, Membership::kLeaseTerm);
  EXPECT_LE(after, absl::Seconds(5));
  EXPECT_TRUE(cluster->Serves(1, 1));
  EXPECT_TRUE(cluster->witness(0)->VotesOut(0));
  EXPECT_TRUE(cluster->witness(1)->VotesOut(0));
}

// Every way to split 2 PS and 2 workers: in no step do two PS acknowledge
// one PS's shards; a side with 3 of the 4 voters serves both PS's shards
// within seconds, a side with 2 serves nothing once its leases ran out.
TEST(TwoPsFailoverTest, NoPartitionGivesTwoPrimaries) {
  struct Split {
    std::vector<std::vector<int>> sides;
    int survivor;  // the PS that ends serving both PS's shards; -1: none
  };
  const std::vector<Split> splits = {
      {{{0}, {1, kW0, kW1}}, 1},    {{{1}, {0, kW0, kW1}}, 0},
      {{{0, kW0}, {1, kW1}}, -1},   {{{0, kW1}, {1, kW0}}, -1},
      {{{kW0, kW1}, {0}, {1}}, -1}, {{{0, 1}, {kW0, kW1}}, -1},
  };
  for (const Split& split : splits) {
    SCOPED_TRACE(::testing::Message() << "split " << &split - &splits[0]);
    auto cluster = StartTwoPs();
    ASSERT_NE(cluster, nullptr);
    cluster->links()->Partition(split.sides);
    auto never_two = [&] {
      for (int owner = 0; owner < 2; ++owner) {
        ASSERT_LE(Primaries(cluster.get(), owner), 1)
            << "two PS acknowledge PS " << owner << "'s shards at "
            << cluster->clock()->Now();
      }
    };
    cluster->Advance(absl::Seconds(8), never_two);
    for (int owner = 0; owner < 2; ++owner) {
      for (int t = 0; t < 2; ++t) {
        EXPECT_EQ(cluster->Serves(t, owner), t == split.survivor)
            << "PS " << t << " for PS " << owner << "'s shards";
      }
    }
    // Healed: each shard has one primary again, and the partition left at
    // most the one failover it decided.
    cluster->links()->HealAll();
    ASSERT_TRUE(cluster->AdvanceUntil(
        [&] {
          return Primaries(cluster.get(), 0) == 1 &&
                 Primaries(cluster.get(), 1) == 1;
        },
        absl::Seconds(30)));
    cluster->Advance(absl::Seconds(2), never_two);
  }
}

// One worker gone, or cut off: the other three voters keep both PS
// serving; neither PS is taken over. A worker back from a partition
// grants nothing for the vote hold (it voted both PS out): another
// voter lost within that time stops both PS.
TEST(TwoPsFailoverTest, OneWorkerGoneChangesNothing) {
  auto cluster = StartTwoPs();
  ASSERT_NE(cluster, nullptr);
  cluster->links()->Partition({{kW0}, {0, 1, kW1}});
  cluster->Advance(absl::Seconds(8), [&] {
    ASSERT_TRUE(cluster->Serves(0, 0));
    ASSERT_TRUE(cluster->Serves(1, 1));
  });
  EXPECT_TRUE(cluster->witness(0)->VotesOut(0));
  cluster->links()->HealAll();
  cluster->Advance(absl::Seconds(1));
  EXPECT_FALSE(cluster->witness(0)->VotesOut(0));
  cluster->Advance(Membership::kVoteHold);
  cluster->KillWorker(1);
  cluster->Advance(absl::Seconds(8), [&] {
    ASSERT_TRUE(cluster->Serves(0, 0));
    ASSERT_TRUE(cluster->Serves(1, 1));
  });
  EXPECT_EQ(cluster->ps(0)->membership()->failovers(), 0);
  EXPECT_EQ(cluster->ps(1)->membership()->failovers(), 0);
}

// PS 1 cut off from PS 0 and both workers while pushes go on: PS 0 drops
// it as a backup (the workers vote it out and report PS 0's new view) and
// acknowledges without it. Then PS 0 dies and PS 1 is back with the
// workers: its copy lacks acknowledged pushes, the workers tell it so, and
// it does not take PS 0's shards over.
TEST(TwoPsFailoverTest, ADroppedBackupDoesNotTakeOverBehindAckedPushes) {
  auto cluster = StartTwoPs([](InProcessCluster::Options* o) {
    // PS 1's own shards are not failed over while it is cut off (it would
    // then rejoin, which marks its copy stale by itself).
    o->failover.failover_after = absl::Seconds(30);
  });
  ASSERT_NE(cluster, nullptr);
  auto client = NewClient(cluster.get());
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(client->CreateVariables({OneShardOn0()}), absl::OkStatus());
  const std::vector<float> grad(2, 1.0f);
  ASSERT_EQ(client->PushDense("p0", grad.data()), absl::OkStatus());
  ASSERT_EQ(VersionAt(cluster.get(), 1), 1);
  cluster->links()->Partition({{1}, {0, kW0, kW1}});
  constexpr int kPushes = 3;
  for (int i = 0; i < kPushes; ++i) {
    ASSERT_EQ(cluster->AdvanceDuring(
                  [&] { return client->PushDense("p0", grad.data()); },
                  absl::Seconds(600)),
              absl::OkStatus())
        << "push " << i;
  }
  EXPECT_EQ(VersionAt(cluster.get(), 0), 1 + kPushes);
  EXPECT_EQ(VersionAt(cluster.get(), 1), 1)
      << "the dropped copy lacks the acked pushes";
  cluster->Kill(0);
  cluster->links()->HealAll();
  cluster->Advance(absl::Seconds(60), [&] {
    ASSERT_FALSE(cluster->Serves(1, 0))
        << "the stale copy took PS 0's shards over at "
        << cluster->clock()->Now();
  });
  EXPECT_FALSE(cluster->ps(1)->membership()->IsFailed(0));
  const StreamView learned = cluster->ps(1)->membership()->ViewOf(0);
  EXPECT_GT(learned.version(), 0);
  EXPECT_FALSE(Membership::Lists(learned, 1))
      << "the workers passed PS 0's view without PS 1 on";
}

// Pushes acknowledged before a kill are on the backup, which takes over
// with every one of them; the killed PS restarts, rejoins, takes its
// shards back whole, and forwards to PS 1 again.
TEST(TwoPsFailoverTest, AKilledPsLosesNoAckedPushAndComesBackWhole) {
  auto cluster = StartTwoPs();
  ASSERT_NE(cluster, nullptr);
  auto client = NewClient(cluster.get());
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(client->CreateVariables({OneShardOn0()}), absl::OkStatus());
  const std::vector<float> grad(2, 1.0f);
  auto push = [&] {
    return cluster->AdvanceDuring(
        [&] { return client->PushDense("p0", grad.data()); },
        absl::Seconds(600));
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(push(), absl::OkStatus());
  cluster->Kill(0);
  ASSERT_TRUE(cluster->AdvanceUntil([&] { return cluster->Serves(1, 0); },
                                    absl::Seconds(10)));
  for (int i = 0; i < 2; ++i) ASSERT_EQ(push(), absl::OkStatus());
  EXPECT_EQ(VersionAt(cluster.get(), 1), 5);

  ASSERT_EQ(cluster->Restart(0), absl::OkStatus());
  ASSERT_TRUE(cluster->AdvanceUntil(
      [&] { return cluster->Serves(0, 0) && !cluster->Serves(1, 0); },
      absl::Seconds(120)))
      << "PS 0 did not take its shards back";
  EXPECT_EQ(VersionAt(cluster.get(), 0), 5);
  ASSERT_EQ(push(), absl::OkStatus());
  EXPECT_EQ(VersionAt(cluster.get(), 0), 6);
  EXPECT_EQ(VersionAt(cluster.get(), 1), 6)
      << "PS 0 does not forward to PS 1 again";
  std::vector<float> values(2);
  ASSERT_EQ(client->PullDense("p0", values.data()), absl::OkStatus());
  EXPECT_EQ(values[0], -6.0f);
  EXPECT_EQ(values[1], -6.0f);
}

// A Witness call is input like any other: a worker the cluster spec does
// not list is refused naming it, a report repeating one PS a million times
// counts once, and a secured cluster (--peer_secret_file), whose workers
// cannot prove which they are, takes no votes from workers at all.
TEST(TwoPsFailoverTest, AWitnessCallIsCheckedAgainstTheCluster) {
  auto cluster = StartTwoPs();
  ASSERT_NE(cluster, nullptr);
  auto witness_call = [&](InProcessCluster* c, const WitnessRequest& r,
                          WitnessResponse* answer) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return ParameterServer::NewStub(
               c->links()
                   ->TransportFor(c->links()->worker_node(0))
                   ->ChannelTo(0))
        ->Witness(&context, r, answer);
  };
  WitnessRequest request;
  WitnessResponse answer;
  request.set_worker(2);  // the spec lists workers 0 and 1
  grpc::Status s = witness_call(cluster.get(), request, &answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("worker 2 is not a witness"),
            std::string::npos)
      << s.error_message();
  request.set_worker(-1);
  EXPECT_EQ(witness_call(cluster.get(), request, &answer).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Worker 1 votes PS 1 out a million times over, and PS 7 and -3: one
  // vote, PS 1 still serves.
  request.set_worker(1);
  for (int i = 0; i < 1000000; ++i) request.add_unreachable(1);
  request.add_unreachable(7);
  request.add_unreachable(-3);
  ASSERT_TRUE(witness_call(cluster.get(), request, &answer).ok());
  request.set_challenge(answer.challenge());
  ASSERT_TRUE(witness_call(cluster.get(), request, &answer).ok());
  cluster->Advance(absl::Seconds(5), [&] {
    ASSERT_TRUE(cluster->Serves(1, 1));
    ASSERT_FALSE(cluster->Serves(0, 1));
  });

  auto secured = StartTwoPs([](InProcessCluster::Options* o) {
    o->auth_token = "token";
    o->peer_secret = "secret";
  });
  ASSERT_NE(secured, nullptr);
  request.Clear();
  request.set_worker(0);
  s = witness_call(secured.get(), request, &answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("takes no votes from workers"),
            std::string::npos)
      << s.error_message();
  EXPECT_FALSE(secured->ps(0)->membership()->Enabled());
  EXPECT_EQ(secured->ps(0)->lease(), nullptr);
}

}  // namespace
}  // namespace psrt
