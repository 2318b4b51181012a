// Pushes through a replicated cluster in one process (InProcessCluster: 3
// real PS services, --replicas=2, on a simulated clock, PS-to-PS links
// in-process; a psrt::Client on loopback ports): what a worker relies on
// -- an acknowledged push is on the backup before the acknowledgement, so
// a failover loses none, and the SYNC barrier applies a step once, when
// every worker's push is in, across a failover too.
#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "clients/cpp/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps_server/rpc/in_process_cluster.h"
#include "ps_server/shards/row_evictor.h"
#include "ps_server/shards/shard_digest.h"

namespace psrt {
namespace {

constexpr int kFloats = 6;  // 2 per shard, 3 shards

// A hash embedding of width 4 over 3 shards (Adagrad, normal init).
VariableSpec HashSpec(const std::string& name) {
  VariableSpec spec;
  spec.set_name(name);
  spec.set_kind(HASH_EMBEDDING);
  spec.add_shape(0);
  spec.add_shape(4);
  spec.mutable_partition()->set_num_shards(3);
  spec.mutable_initializer()->set_kind(InitializerSpec::NORMAL);
  spec.mutable_initializer()->set_stddev(0.5f);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  return spec;
}

VariableSpec DenseSpec(float learning_rate) {
  VariableSpec s;
  s.set_name("d");
  s.set_kind(DENSE);
  s.add_shape(kFloats);
  s.mutable_partition()->set_num_shards(3);
  s.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  s.mutable_optimizer()->set_learning_rate(learning_rate);
  return s;
}

class ReplicatedPushTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCluster(); }
  // (Again, with `tweak` applied to the options.)
  void StartCluster(
      const std::function<void(InProcessCluster::Options*)>& tweak = nullptr) {
    cluster_.reset();
    InProcessCluster::Options options;
    options.client_ports = true;
    if (tweak) tweak(&options);
    auto cluster = InProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    cluster_->Advance(absl::Seconds(1));  // leases granted
  }

  // `tweak`, if set, changes the options before the client connects.
  std::unique_ptr<Client> NewClient(
      int worker_index = -1,
      const std::function<void(ClientOptions*)>& tweak = nullptr) {
    ClientOptions o;
    o.ps_addresses = cluster_->client_addresses();
    o.worker_index = worker_index;
    o.call_timeout = absl::Seconds(20);
    // Retries after a kill wait on real time: keep them short.
    o.initial_backoff = absl::Milliseconds(10);
    o.max_backoff = absl::Milliseconds(50);
    if (tweak) tweak(&o);
    auto client = Client::Connect(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A client that created "d" (SGD, learning rate 1); null, the failure
  // recorded, if it could not.
  std::unique_ptr<Client> NewDenseClient() {
    auto client = NewClient();
    if (client == nullptr) return nullptr;
    const absl::Status created = client->CreateVariables({DenseSpec(1.0f)});
    if (!created.ok()) {
      ADD_FAILURE() << "creating d: " << created;
      return nullptr;
    }
    return client;
  }

  // `clients` clients push `pushes` pushes each of `ids_per_push` random
  // ids in [0, max_id] of "h" (width 4) concurrently, so pushes are
  // prepared in another order than they are applied and forwarded; with
  // `steps`, push p is at step p (the PS's global step rises).
  void PushConcurrently(int clients, int pushes, int64_t max_id, bool steps,
                        int ids_per_push = 64) {
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        auto client = NewClient();
        ASSERT_NE(client, nullptr);
        ASSERT_TRUE(client->RefreshCatalog().ok());
        std::mt19937 random(c);
        std::uniform_int_distribution<int64_t> id(0, max_id);
        std::vector<int64_t> ids(ids_per_push);
        std::vector<float> grads(ids.size() * 4);
        for (int p = 0; p < pushes; ++p) {
          for (int64_t& i : ids) i = id(random);
          for (float& g : grads) g = static_cast<float>(random() % 7) - 3;
          StepOptions at;
          at.step = steps ? p : 0;
          ASSERT_EQ(client->Push({PushOp::Rows("h", ids, grads.data())}, at),
                    absl::OkStatus())
              << "push " << p << " of client " << c;
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }

  // Every update the live PS logged is on their backups (evictions are
  // logged without a push waiting for them).
  void AwaitBackups() {
    for (int t = 0; t < cluster_->num_ps(); ++t) {
      if (cluster_->ps(t) == nullptr) continue;
      Replicator* log = cluster_->ps(t)->replicator();
      absl::Notification settled;
      log->WhenReplicated(log->last_sequence(),
                          [&](absl::Status) { settled.Notify(); });
      settled.WaitForNotification();
    }
  }

  // How a backup's row counts follow its primary's.
  enum class Counts {
    kAny,      // an SSD tier: a backup spills on its own at its budget
    kFollows,  // as the primary's, but for the rows it gave back (below)
  };
  // Each shard of `name` on its primary and on its backup (the next PS)
  // holds the same rows with the same bits, and counts them as `counts`
  // says. Returns the primaries' counts.
  HashRowCounts ExpectCopiesEqual(const std::string& name, Counts counts) {
    HashRowCounts total;
    for (int t = 0; t < cluster_->num_ps(); ++t) {
      const LocalVariable* primary = cluster_->ps(t)->store()->Find(name);
      EXPECT_NE(primary, nullptr);
      if (primary == nullptr) return total;
      for (int s = 0; s < primary->layout->num_shards(); ++s) {
        if (!primary->IsPrimary(s)) continue;
        const int backup = (t + 1) % cluster_->num_ps();
        const LocalVariable* copy = cluster_->ps(backup)->store()->Find(name);
        EXPECT_TRUE(copy != nullptr && copy->IsBackup(s));
        if (copy == nullptr || !copy->IsBackup(s)) return total;
        const HashRowCounts a = primary->shard(s).row_counts();
        const HashRowCounts b = copy->shard(s).row_counts();
        EXPECT_EQ(ShardDigest(primary->shard(s)), ShardDigest(copy->shard(s)))
            << "shard " << s << " on PS " << t << " and its backup PS "
            << backup;
        if (counts == Counts::kFollows) {
          // An eviction that takes a row from a push between its Prepare
          // and its apply is logged before the push, and the push gets
          // the row back (HashRowCounts::given_back_rows). If the push
          // created the row, the backup has none to evict yet: one
          // eviction fewer here. If the row was older, the backup evicts
          // it and the forwarded push admits it again: one admission
          // more. Nothing else may differ.
          const int64_t fewer_evictions = a.evicted_rows - b.evicted_rows;
          const int64_t more_admissions = b.admitted_rows - a.admitted_rows;
          EXPECT_GE(fewer_evictions, 0) << "shard " << s;
          EXPECT_GE(more_admissions, 0) << "shard " << s;
          EXPECT_EQ(fewer_evictions + more_admissions, a.given_back_rows)
              << "shard " << s << ": " << a.evicted_rows << " and "
              << b.evicted_rows << " rows evicted, " << a.admitted_rows
              << " and " << b.admitted_rows << " admitted, "
              << a.given_back_rows << " given back";
          EXPECT_EQ(b.given_back_rows, 0) << "shard " << s;
          EXPECT_EQ(a.unadmitted_gradients, b.unadmitted_gradients)
              << "shard " << s;
          EXPECT_EQ(primary->shard(s).num_rows(), copy->shard(s).num_rows())
              << "shard " << s;
        }
        total += a;
      }
    }
    return total;
  }

  // Pulls ids [0, n) of `name` before and after PS 0 is killed and PS 1
  // takes its shards over: the same values (row_width floats each).
  void ExpectFailoverServesTheSameRows(Client* client, const std::string& name,
                                       int64_t n, int row_width) {
    std::vector<int64_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    std::vector<float> before(all.size() * row_width);
    std::vector<float> after(all.size() * row_width);
    ASSERT_EQ(client->PullRows(name, all, before.data()), absl::OkStatus());
    cluster_->Kill(0);
    ASSERT_NO_FATAL_FAILURE(FailOverPs0());
    ASSERT_EQ(client->PullRows(name, all, after.data()), absl::OkStatus());
    EXPECT_EQ(before, after);
  }

  // The shard of "d" whose primary is PS `task`.
  int ShardOf(int task) {
    const LocalVariable* v = cluster_->ps(task)->store()->Find("d");
    for (int s = 0; v != nullptr && s < v->layout->num_shards(); ++s) {
      if (v->IsPrimary(s)) return s;
    }
    ADD_FAILURE() << "PS " << task << " is primary of no shard of d";
    return -1;
  }

  // Updates applied to shard `s` of "d" in PS `task`'s copy of it.
  int64_t VersionAt(int task, int s) {
    const LocalVariable* v = cluster_->ps(task)->store()->Find("d");
    return v != nullptr && v->Holds(s) ? v->shard(s).version() : -1;
  }

  // A bounded hash table on `num_ps` PS through a kill of PS 0, its
  // failover, restart, rejoin and handback, with pushes in each phase.
  void BoundedTableThroughRejoinAndHandback(int num_ps);

  // Moves the clock until PS 1 serves PS 0's shards.
  void FailOverPs0() {
    ASSERT_TRUE(cluster_->AdvanceUntil([&] { return cluster_->Serves(1, 0); },
                                       absl::Seconds(10)))
        << "PS 1 did not take PS 0's shards over";
  }

  // Starts PS 0 again and moves the clock until it rejoined and took its
  // shards back from PS 1 (handback).
  void RestartPs0UntilItTakesItsShardsBack() {
    ASSERT_EQ(cluster_->Restart(0), absl::OkStatus());
    ASSERT_TRUE(cluster_->AdvanceUntil(
        [&] { return cluster_->Serves(0, 0) && !cluster_->Serves(1, 0); },
        absl::Seconds(120)))
        << "PS 0 did not take its shards back";
  }

  // A client that creates "d" (SGD, learning rate 0.5) and two SYNC
  // workers, 0 and 1.
  void SyncWorkers() {
    setup_ = NewClient();
    ASSERT_NE(setup_, nullptr);
    ASSERT_EQ(setup_->CreateVariables({DenseSpec(0.5f)}), absl::OkStatus());
    for (int w = 0; w < 2; ++w) {
      workers_[w] = NewClient(w);
      ASSERT_NE(workers_[w], nullptr);
      ASSERT_TRUE(workers_[w]->RefreshCatalog().ok());
    }
  }
  static StepOptions SyncStep() {
    StepOptions step;
    step.consistency.set_mode(Consistency::SYNC);
    step.consistency.set_workers(2);
    step.consistency.set_timeout_seconds(20);
    return step;
  }
  // The two workers' gradients.
  const std::vector<float> g0 = {4, 8, 2, 0, -4, 1}, g1 = {0, 8, 6, 2, 4, 3};

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Client> setup_;
  std::unique_ptr<Client> workers_[2];
};

// A lagging backup (every forward from PS 0 to PS 1 held 100 ms on the
// link): each push is acknowledged only once PS 1's copy has it -- read
// from PS 1's store the moment the client has its answer -- so killing PS
// 0 after any acknowledged push loses nothing.
TEST_F(ReplicatedPushTest, AnAcknowledgedPushIsOnTheBackupAndSurvivesAKill) {
  auto client = NewDenseClient();
  ASSERT_NE(client, nullptr);
  const int s0 = ShardOf(0);
  ASSERT_GE(s0, 0);
  cluster_->links()->Delay(0, 1, absl::Milliseconds(100));
  const std::vector<float> grad(kFloats, 1.0f);
  constexpr int kPushes = 5;
  for (int i = 1; i <= kPushes; ++i) {
    ASSERT_EQ(client->PushDense("d", grad.data()), absl::OkStatus());
    EXPECT_EQ(VersionAt(1, s0), i)
        << "push " << i << " was acknowledged before the backup had it";
  }
  cluster_->Kill(0);
  ASSERT_NO_FATAL_FAILURE(FailOverPs0());
  std::vector<float> values(kFloats);
  ASSERT_EQ(client->PullDense("d", values.data()), absl::OkStatus());
  for (int i = 0; i < kFloats; ++i) {
    EXPECT_EQ(values[i], -1.0f * kPushes) << "element " << i;
  }
}

// PS 0 killed at each step of a push's forward to its backup, PS 1: (a)
// applied on PS 0, the forward refused on a cut link; (b) the forward held
// in flight on the link; (c) the backup applied it, the answer maybe not
// back. Each time the client's retry reaches PS 1 once it took over, and
// the push is applied there exactly once: the 4th push moves every value
// to exactly -4 (a lost push leaves -3, one applied twice -5).
TEST_F(ReplicatedPushTest, APrimaryKilledAtEachStepOfAForwardLosesNothing) {
  enum class KillWhen { kForwardRefused, kForwardInFlight, kBackupApplied };
  for (KillWhen when : {KillWhen::kForwardRefused, KillWhen::kForwardInFlight,
                        KillWhen::kBackupApplied}) {
    SCOPED_TRACE(::testing::Message()
                 << "kill point " << static_cast<int>(when));
    StartCluster();
    auto client = NewDenseClient();
    ASSERT_NE(client, nullptr);
    const int s0 = ShardOf(0);
    ASSERT_GE(s0, 0);
    const std::vector<float> grad(kFloats, 1.0f);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(client->PushDense("d", grad.data()), absl::OkStatus());
    }
    if (when == KillWhen::kForwardRefused) cluster_->links()->Cut(0, 1);
    if (when == KillWhen::kForwardInFlight) {
      cluster_->links()->Delay(0, 1, absl::Milliseconds(300));
    }
    absl::Notification pushed;
    absl::Status push_status;
    std::thread pusher([&] {
      push_status = client->PushDense("d", grad.data());
      pushed.Notify();
    });
    // The moment to kill, read on this thread (the one that kills).
    const int on = when == KillWhen::kBackupApplied ? 1 : 0;
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (VersionAt(on, s0) < 4 && absl::Now() < give_up) {
      absl::SleepFor(absl::Microseconds(100));
    }
    ASSERT_EQ(VersionAt(on, s0), 4) << "the push did not reach PS " << on;
    if (when != KillWhen::kBackupApplied) {
      EXPECT_LT(VersionAt(1, s0), 4) << "the backup had it already";
    }
    cluster_->Kill(0);
    FailOverPs0();  // (returning here would leave the pusher unjoined)
    // PS 2's part waits until PS 0, its backup, is given up on.
    ASSERT_TRUE(cluster_->AdvanceUntil([&] { return pushed.HasBeenNotified(); },
                                       absl::Seconds(60)));
    pusher.join();
    ASSERT_EQ(push_status, absl::OkStatus());
    EXPECT_EQ(VersionAt(1, s0), 4);
    std::vector<float> values(kFloats);
    ASSERT_EQ(client->PullDense("d", values.data()), absl::OkStatus());
    for (int i = 0; i < kFloats; ++i) {
      EXPECT_EQ(values[i], -4.0f) << "element " << i;
    }
  }
}

// The SYNC barrier counts every worker: worker 0's push is held (nothing
// applied), worker 1's completes the step, which applies the mean once.
TEST_F(ReplicatedPushTest, ASyncStepAppliesOnceEveryWorkerPushed) {
  SyncWorkers();
  std::unique_ptr<Client>& setup = setup_;
  std::unique_ptr<Client>* workers = workers_;
  StepOptions step = SyncStep();
  std::vector<float> out(kFloats);
  for (int64_t k = 0; k < 3; ++k) {
    step.step = k;
    ASSERT_EQ(workers[0]->Push({PushOp::Dense("d", g0.data())}, step),
              absl::OkStatus());
    ASSERT_EQ(setup->PullDense("d", out.data()), absl::OkStatus());
    for (int i = 0; i < kFloats; ++i) {
      ASSERT_EQ(out[i], -0.5f * k * (g0[i] + g1[i]) / 2)
          << "step " << k << " applied with one worker's push";
    }
    ASSERT_EQ(workers[1]->Push({PushOp::Dense("d", g1.data())}, step),
              absl::OkStatus());
    ASSERT_EQ(setup->PullDense("d", out.data()), absl::OkStatus());
    for (int i = 0; i < kFloats; ++i) {
      ASSERT_EQ(out[i], -0.5f * (k + 1) * (g0[i] + g1[i]) / 2)
          << "step " << k << " element " << i;
    }
  }
  for (int t = 0; t < 3; ++t) EXPECT_EQ(VersionAt(t, ShardOf(t)), 3);
}

// A SYNC step whose primary fails half-way: worker 0's push of step 0 is
// held on every PS (and forwarded as held to the backups); PS 0 is
// killed; once PS 1 serves PS 0's shards, worker 1's push completes the
// step there with the held push, and every shard applied the mean once.
TEST_F(ReplicatedPushTest, ASyncStepCompletesAcrossItsPrimarysFailover) {
  SyncWorkers();
  std::unique_ptr<Client>& setup = setup_;
  std::unique_ptr<Client>* workers = workers_;
  StepOptions step = SyncStep();
  step.step = 0;
  ASSERT_EQ(workers[0]->Push({PushOp::Dense("d", g0.data())}, step),
            absl::OkStatus());
  cluster_->Kill(0);
  ASSERT_NO_FATAL_FAILURE(FailOverPs0());
  // PS 2's step is forwarded to its backup, PS 0, which is gone: PS 2
  // acknowledges once it gave up on it (3 s on the clock, a majority
  // agreeing PS 0 is unreachable).
  ASSERT_EQ(cluster_->AdvanceDuring(
                [&] {
                  return workers[1]->Push({PushOp::Dense("d", g1.data())},
                                          step);
                },
                absl::Seconds(30)),
            absl::OkStatus());
  std::vector<float> out(kFloats);
  ASSERT_EQ(setup->PullDense("d", out.data()), absl::OkStatus());
  for (int i = 0; i < kFloats; ++i) {
    EXPECT_EQ(out[i], -0.5f * (g0[i] + g1[i]) / 2) << "element " << i;
  }
}

// PS 0 killed, its shards served by PS 1; pushes go on; a new PS 0
// process rejoins as a backup (copies of its shards from PS 1 and of PS
// 2's from PS 2) and takes its shards back (handback): then PS 0 alone
// serves them, with every acknowledged push, and forwards to PS 1 again.
TEST_F(ReplicatedPushTest, ARestartedPsRejoinsAndTakesItsShardsBackWhole) {
  auto client = NewDenseClient();
  ASSERT_NE(client, nullptr);
  const int s0 = ShardOf(0);
  ASSERT_GE(s0, 0);
  const std::vector<float> grad(kFloats, 1.0f);
  auto push = [&] {
    // PS 2's pushes wait while PS 0, its backup, is away (acknowledged
    // once PS 2 gives up on it, or once it is back).
    return cluster_->AdvanceDuring(
        [&] { return client->PushDense("d", grad.data()); }, absl::Seconds(30));
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(push(), absl::OkStatus());
  cluster_->Kill(0);
  ASSERT_NO_FATAL_FAILURE(FailOverPs0());
  for (int i = 0; i < 2; ++i) ASSERT_EQ(push(), absl::OkStatus());

  ASSERT_NO_FATAL_FAILURE(RestartPs0UntilItTakesItsShardsBack());
  EXPECT_EQ(VersionAt(0, s0), 5);
  EXPECT_EQ(VersionAt(1, s0), 5);
  ASSERT_EQ(push(), absl::OkStatus());
  EXPECT_EQ(VersionAt(0, s0), 6);
  EXPECT_EQ(VersionAt(1, s0), 6) << "PS 0 does not forward to PS 1 again";
  std::vector<float> values(kFloats);
  ASSERT_EQ(client->PullDense("d", values.data()), absl::OkStatus());
  for (int i = 0; i < kFloats; ++i) {
    EXPECT_EQ(values[i], -6.0f) << "element " << i;
  }
}

// A worker's push to PS 0, applied there and on its backup PS 1, whose
// answer the worker never saw (PS 0 was killed): the worker retries it
// with the same request id. If the retry reaches PS 0 only after PS 0
// restarted, rejoined and took its shards back (the worker's routing
// never learned of the failover), the new process must know the push
// from its rejoin and acknowledge it as a duplicate, not apply it again.
TEST_F(ReplicatedPushTest, APushRetriedAfterTheHandbackIsNotAppliedTwice) {
  auto client = NewDenseClient();
  ASSERT_NE(client, nullptr);
  const int s0 = ShardOf(0);
  ASSERT_GE(s0, 0);
  const ShardLayout layout =  // by value: PS 0 is killed below
      cluster_->ps(0)->store()->Find("d")->layout->shards[s0];
  const int64_t count = layout.num_rows;
  // The push as a worker sends it: client and request id set.
  auto push_to_ps0 = [&](uint64_t request_id, PushResponse* response) {
    PushRequestHeader header;
    header.set_last(true);
    header.set_client_id(4242);
    header.set_request_id(request_id);
    TensorItem* item = header.add_items();
    item->set_variable("d");
    item->set_shard(s0);
    item->set_count(count);
    item->set_grad_payload(0);
    Frame frame;
    const std::vector<float> grad(count, 1.0f);
    frame.add_payload(std::string(reinterpret_cast<const char*>(grad.data()),
                                  grad.size() * sizeof(float)));
    frame.set_header(header.SerializeAsString());
    auto stub = ParameterServer::NewStub(grpc::CreateChannel(
        cluster_->client_addresses()[0], grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
    auto writer = stub->Push(&context, response);
    writer->Write(frame);
    writer->WritesDone();
    return writer->Finish();
  };
  PushResponse first;
  ASSERT_TRUE(push_to_ps0(17, &first).ok());
  EXPECT_FALSE(first.duplicate());
  ASSERT_EQ(VersionAt(1, s0), 1) << "the push is not on the backup";
  cluster_->Kill(0);
  ASSERT_NO_FATAL_FAILURE(FailOverPs0());
  ASSERT_NO_FATAL_FAILURE(RestartPs0UntilItTakesItsShardsBack());
  ASSERT_EQ(VersionAt(0, s0), 1);
  PushResponse retry;
  ASSERT_TRUE(push_to_ps0(17, &retry).ok());
  EXPECT_TRUE(retry.duplicate());
  EXPECT_EQ(VersionAt(0, s0), 1) << "the retried push was applied again";
  // Another request of the same client is applied, and forwarded.
  PushResponse next;
  ASSERT_TRUE(push_to_ps0(18, &next).ok());
  EXPECT_FALSE(next.duplicate());
  EXPECT_EQ(VersionAt(0, s0), 2);
  EXPECT_EQ(VersionAt(1, s0), 2);
  std::vector<float> values(kFloats);
  ASSERT_EQ(client->PullDense("d", values.data()), absl::OkStatus());
  for (int64_t i = layout.row_begin; i < layout.row_begin + count; ++i) {
    EXPECT_EQ(values[i], -2.0f) << "element " << i;
  }
}

// The client's failover_wait runs on its clock (here the cluster's): with
// PS 1 and PS 2 killed, PS 0 alone holds no lease and nobody serves any
// shard; a push is retried, rerouting as it learns, for failover_wait of
// that clock and no longer, then fails UNAVAILABLE.
TEST_F(ReplicatedPushTest,
       AClientRetriesAFailedOverPsForFailoverWaitOfItsClock) {
  auto setup = NewClient();
  ASSERT_NE(setup, nullptr);
  ASSERT_EQ(setup->CreateVariables({DenseSpec(1.0f)}), absl::OkStatus());
  ClientOptions o;  // what the bounds below read
  auto client = NewClient(-1, [&](ClientOptions* options) {
    options->max_attempts = 2;
    options->initial_backoff = absl::Milliseconds(100);
    options->max_backoff = absl::Seconds(1);
    options->failover_wait = absl::Seconds(30);
    options->clock = cluster_->clock();
    o = *options;
  });
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->RefreshCatalog().ok());
  cluster_->Kill(1);
  cluster_->Kill(2);
  // PS 0's lease runs out: it acknowledges nothing from then on.
  ASSERT_TRUE(cluster_->AdvanceUntil([&] { return !cluster_->Serves(0, 0); },
                                     absl::Seconds(10)));
  const std::vector<float> grad(kFloats, 1.0f);
  const absl::Time start = cluster_->clock()->Now();
  const absl::Status pushed = cluster_->AdvanceDuring(
      [&] { return client->PushDense("d", grad.data()); }, absl::Seconds(90));
  const absl::Duration retried = cluster_->clock()->Now() - start;
  EXPECT_EQ(pushed.code(), absl::StatusCode::kUnavailable) << pushed;
  EXPECT_GE(retried, o.failover_wait);
  // The last backoff (at most max_backoff) and the steps of the advance.
  EXPECT_LE(retried, o.failover_wait + o.max_backoff + absl::Seconds(1));
}

// A push held by its primary for a backup that cannot be reached, with no
// majority to vote it out (PS 0 and PS 1 killed; PS 2's backup is PS 0),
// is answered UNAVAILABLE when that primary shuts down: gRPC's shutdown
// waits for every call in flight, and used to wait for this one for ever.
TEST_F(ReplicatedPushTest, AShutdownAnswersAPushWaitingForItsBackups) {
  auto client = NewDenseClient();
  ASSERT_NE(client, nullptr);
  const int s2 = ShardOf(2);
  ASSERT_GE(s2, 0);
  cluster_->Kill(0);
  cluster_->Kill(1);
  const std::vector<float> grad(kFloats, 1.0f);
  absl::Status pushed;
  absl::Notification answered;
  std::thread push([&] {
    pushed = client->PushDense("d", grad.data());
    answered.Notify();
  });
  // Applied on PS 2, then held for PS 0.
  for (int i = 0; i < 5000 && VersionAt(2, s2) < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(VersionAt(2, s2), 1);
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(50)))
      << pushed;
  cluster_->Kill(2);  // returns once its calls are answered
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  push.join();
  EXPECT_EQ(pushed.code(), absl::StatusCode::kUnavailable) << pushed;
}

// A backup its primary dropped (cut off from the majority while pushes
// went on) holds a stale copy: the drop's vote left the primary's stream
// view without it on the voters, so when the primary then dies the stale
// copy does not take over, and the shards wait instead of coming back
// without the pushes acknowledged since the drop.
TEST_F(ReplicatedPushTest, ADroppedBackupDoesNotTakeOverBehindAckedPushes) {
  // PS 1's own shards are not failed over while it is cut off (it would
  // then rejoin, which marks its copy stale by itself): only the drop can
  // tell it.
  StartCluster([](InProcessCluster::Options* o) {
    o->failover.failover_after = absl::Seconds(30);
  });
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  VariableSpec spec = DenseSpec(1.0f);
  spec.set_name("p0");  // one shard: on PS 0, copied to PS 1
  spec.set_shape(0, 2);
  spec.mutable_partition()->set_num_shards(1);
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  const LocalVariable* on_ps0 = cluster_->ps(0)->store()->Find("p0");
  ASSERT_TRUE(on_ps0 != nullptr && on_ps0->IsPrimary(0));
  const std::vector<float> grad(2, 1.0f);
  ASSERT_EQ(client->PushDense("p0", grad.data()), absl::OkStatus());
  auto version_at = [&](int task) {
    const LocalVariable* v = cluster_->ps(task)->store()->Find("p0");
    return v != nullptr && v->Holds(0) ? v->shard(0).version() : -1;
  };
  ASSERT_EQ(version_at(1), 1);
  // PS 1 alone: PS 0 and PS 2 vote it out and PS 0 drops it, then goes on
  // acknowledging.
  cluster_->links()->Partition({{1}, {0, 2}});
  constexpr int kPushes = 3;
  for (int i = 0; i < kPushes; ++i) {
    ASSERT_EQ(cluster_->AdvanceDuring(
                  [&] { return client->PushDense("p0", grad.data()); },
                  absl::Seconds(60)),
              absl::OkStatus())
        << "push " << i;
  }
  EXPECT_EQ(version_at(0), 1 + kPushes);
  EXPECT_EQ(version_at(1), 1) << "the dropped copy lacks the acked pushes";
  const StreamView recorded = cluster_->ps(2)->membership()->ViewOf(0);
  EXPECT_GT(recorded.version(), 0);
  EXPECT_FALSE(Membership::Lists(recorded, 1))
      << "PS 2 holds PS 0's view without PS 1";
  // PS 0 dies; PS 1 is back with the majority.
  cluster_->Kill(0);
  cluster_->links()->HealAll();
  cluster_->Advance(absl::Seconds(60), [&] {
    ASSERT_FALSE(cluster_->Serves(1, 0))
        << "the stale copy took PS 0's shards over at "
        << cluster_->clock()->Now();
  });
  EXPECT_FALSE(cluster_->ps(1)->membership()->IsFailed(0));
}

// Admission decided on the primary reaches the backups: 4 clients push
// concurrently (so pushes are prepared, and their ids sighted, in another
// order than they are applied and forwarded) ids of which some are seen
// once and dropped, some twice or more and admitted. Every shard's backup
// holds the same rows with the same bits as its primary (equal digests,
// equal admitted and dropped counts), whatever its own sketch counted;
// after a failover the new primary serves those rows.
TEST_F(ReplicatedPushTest, AdmissionIsReplicatedBitForBit) {
  auto setup = NewClient();
  ASSERT_NE(setup, nullptr);
  VariableSpec spec = HashSpec("h");
  spec.mutable_admission()->set_min_count(2);
  ASSERT_EQ(setup->CreateVariables({spec}), absl::OkStatus());
  PushConcurrently(4, 40, 3000, /*steps=*/false);
  const HashRowCounts counts = ExpectCopiesEqual("h", Counts::kFollows);
  // Of 10,240 sightings over 3,001 ids most ids come back: both kinds.
  EXPECT_GT(counts.admitted_rows, 1000);
  EXPECT_GT(counts.unadmitted_gradients, 1000);
  // PS 0 dies: PS 1 serves its shards with the rows PS 0 held.
  ExpectFailoverServesTheSameRows(setup.get(), "h", 3001, 4);
}

// Eviction decided on the primary reaches the backups in its stream, in
// the order it happened among the pushes: 4 clients push ids (admission
// min_count 2) at rising steps while every PS sweeps (ttl_steps 3, and
// max_rows below what is pushed), and pushes evict for room themselves.
// Every backup ends with its primary's rows and bits (its counts differ
// by exactly the rows an eviction took from a push in flight), though it
// never evicted on its own; after a failover the new primary serves them.
TEST_F(ReplicatedPushTest, EvictionIsReplicatedBitForBit) {
  auto setup = NewClient();
  ASSERT_NE(setup, nullptr);
  VariableSpec spec = HashSpec("h");
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_eviction()->set_ttl_steps(3);
  spec.mutable_eviction()->set_max_rows(1500);  // 500 a shard
  ASSERT_EQ(setup->CreateVariables({spec}), absl::OkStatus());
  std::vector<std::unique_ptr<RowEvictor>> sweepers;
  for (int t = 0; t < 3; ++t) {
    sweepers.push_back(
        std::make_unique<RowEvictor>(cluster_->ps(t)->store(), absl::Hours(1)));
  }
  std::atomic<bool> pushing{true};
  std::thread sweeping([&] {
    while (pushing.load()) {
      for (auto& sweeper : sweepers) sweeper->SweepOnce();
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  PushConcurrently(4, 60, 4000, /*steps=*/true);
  pushing = false;
  sweeping.join();
  for (auto& sweeper : sweepers) sweeper->SweepOnce();
  AwaitBackups();
  const HashRowCounts counts = ExpectCopiesEqual("h", Counts::kFollows);
  EXPECT_GT(counts.evicted_rows, 1000);
  EXPECT_GT(counts.admitted_rows, 1000);
  EXPECT_GT(counts.unadmitted_gradients, 1000);
  ExpectFailoverServesTheSameRows(setup.get(), "h", 4001, 4);
}

// The same with the PS's memory budget (--memory_budget_mb) making room
// and an SSD tier holding what leaves memory: the primary's spills reach
// the backups, which also spill on their own at their budget (their rows
// keep their values on disk). Every copy holds its primary's rows, in
// memory or on disk, with the same bits; after a failover the new primary
// serves them.
TEST_F(ReplicatedPushTest, BudgetAndSsdTierSpillsAreReplicatedBitForBit) {
  StartCluster([](InProcessCluster::Options* o) {
    o->memory_budget_bytes = int64_t{6} << 20;
    o->ssd_tier_dir = absl::StrCat(testing::TempDir(), "/tier");
  });
  auto setup = NewClient();
  ASSERT_NE(setup, nullptr);
  VariableSpec spec = HashSpec("h");
  spec.mutable_storage()->set_tier(StorageSpec::SSD);
  ASSERT_EQ(setup->CreateVariables({spec}), absl::OkStatus());
  // 60,000 ids over 3 shards at 96 bytes a row: twice what the budgets
  // hold with each PS keeping a shard and a backup copy.
  PushConcurrently(2, 150, 60000, /*steps=*/true, /*ids_per_push=*/1024);
  AwaitBackups();
  const HashRowCounts counts = ExpectCopiesEqual("h", Counts::kAny);
  EXPECT_GT(counts.evicted_rows, 10000);
  EXPECT_GT(counts.spilled_rows, 10000);
  ExpectFailoverServesTheSameRows(setup.get(), "h", 60000, 4);
}

// A bounded table (budget, SSD tier, admission min_count 2) through a
// kill, a failover, a restart, a rejoin and a handback, with pushes in
// each phase: every copy ends equal to its primary, both tiers. (With 3
// PS, PS 1's evictions of PS 0's shards it served reached PS 2, which
// holds no copy of them, and PS 2 dropped PS 1's stream.)
TEST_F(ReplicatedPushTest, BoundedTablesStayEqualThroughRejoinAndHandback) {
  BoundedTableThroughRejoinAndHandback(3);
}

// The same with 2 PS, the workers voting.
TEST_F(ReplicatedPushTest, BoundedTablesOnTwoPsStayEqualThroughHandback) {
  BoundedTableThroughRejoinAndHandback(2);
}

void ReplicatedPushTest::BoundedTableThroughRejoinAndHandback(int num_ps) {
  StartCluster([num_ps](InProcessCluster::Options* o) {
    o->num_ps = num_ps;
    // With 2 PS each holds every shard: a larger budget, twice the ids.
    o->memory_budget_bytes = int64_t{num_ps == 2 ? 8 : 6} << 20;
    o->ssd_tier_dir = absl::StrCat(testing::TempDir(), "/rejoin_tier");
  });
  auto setup = NewClient();
  ASSERT_NE(setup, nullptr);
  VariableSpec spec = HashSpec("h");
  spec.mutable_storage()->set_tier(StorageSpec::SSD);
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_admission()->set_sketch_width(1 << 14);  // 256 KiB a copy
  ASSERT_EQ(setup->CreateVariables({spec}), absl::OkStatus());
  // Two clients (connected while every PS is up) push 50 pushes each of
  // 1,024 random ids (of 60,000 or 120,000), concurrently; pushes to a primary
  // whose backup is away wait for it to be given up on, so the clock moves.
  std::unique_ptr<Client> clients[2] = {NewClient(), NewClient()};
  for (auto& client : clients) {
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->RefreshCatalog().ok());
  }
  const int64_t max_id = num_ps == 2 ? 119999 : 59999;
  int64_t step = 0;
  auto push_phase = [&] {
    const int64_t first_step = step;
    step += 50;
    return cluster_->AdvanceDuring(
        [&] {
          absl::Status failed[2];
          std::vector<std::thread> threads;
          for (int c = 0; c < 2; ++c) {
            threads.emplace_back([&, c] {
              std::mt19937 random(static_cast<uint32_t>(first_step + c));
              std::uniform_int_distribution<int64_t> id(0, max_id);
              std::vector<int64_t> ids(1024);
              std::vector<float> grads(ids.size() * 4);
              for (int p = 0; p < 50 && failed[c].ok(); ++p) {
                for (int64_t& i : ids) i = id(random);
                for (float& g : grads) g = static_cast<float>(random() % 7) - 3;
                StepOptions at;
                at.step = first_step + p;
                failed[c] = clients[c]->Push(
                    {PushOp::Rows("h", ids, grads.data())}, at);
              }
            });
          }
          for (std::thread& t : threads) t.join();
          return failed[0].ok() ? failed[1] : failed[0];
        },
        absl::Seconds(120));
  };
  ASSERT_EQ(push_phase(), absl::OkStatus());
  cluster_->Kill(0);
  ASSERT_NO_FATAL_FAILURE(FailOverPs0());
  ASSERT_EQ(push_phase(), absl::OkStatus());
  ASSERT_NO_FATAL_FAILURE(RestartPs0UntilItTakesItsShardsBack());
  ASSERT_EQ(push_phase(), absl::OkStatus());
  AwaitBackups();
  const HashRowCounts counts = ExpectCopiesEqual("h", Counts::kAny);
  EXPECT_GT(counts.spilled_rows, 10000);
}

}  // namespace
}  // namespace psrt
