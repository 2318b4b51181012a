// --replicas=2 with real ps_server processes, each PS on its own loopback
// address (a host of its own): every push reaches the backup copies before
// it is acknowledged, so after concurrent training every backup holds the
// same bits as its primary; checkpoints hold each shard once; a cluster on
// too few hosts refuses to start; a backup killed with -9 does not stop
// training.
#include <atomic>
#include <csignal>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, VariableKind kind,
                  std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind optimizer) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(kind);
  for (int64_t d : shape) s.add_shape(d);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_optimizer()->set_kind(optimizer);
  s.mutable_optimizer()->set_learning_rate(0.01f);
  return s;
}

std::vector<VariableSpec> Model() {
  return {Spec("dense", DENSE, {1000, 4}, 3, OptimizerSpec::ADAM),
          Spec("emb", EMBEDDING, {5000, 8}, 3, OptimizerSpec::ADAGRAD),
          Spec("hash", HASH_EMBEDDING, {0, 8}, 3, OptimizerSpec::ADAM)};
}

std::unique_ptr<LocalCluster> StartReplicated(int replicas) {
  LocalCluster::Options o;
  o.num_ps = 3;
  o.num_workers = 4;
  o.one_host_per_ps = true;
  const char* tmp = std::getenv("TEST_TMPDIR");
  o.extra_flags = {absl::StrCat("--replicas=", replicas),
                   absl::StrCat("--checkpoint_uri=", tmp ? tmp : "/tmp",
                                "/replicated_ckpt_", replicas),
                   "--checkpoint_on_shutdown=false"};
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// `clients` threads push random gradients to every variable for `steps`
// steps each (async, no coordination), every push acknowledged.
void Train(const LocalCluster& cluster, int clients, int steps,
           std::atomic<int>* failures, uint32_t seed) {
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Client::Connect(cluster.MakeClientOptions());
      if (!client.ok() || !(*client)->CreateVariables(Model()).ok()) {
        ++*failures;
        return;
      }
      std::mt19937 random(seed + c);
      std::normal_distribution<float> grad(0, 1);
      std::uniform_int_distribution<int64_t> row(0, 4999);
      std::uniform_int_distribution<int64_t> hashed(-1000000, 1000000);
      std::vector<float> dense(4000);
      std::vector<int64_t> ids(64), hash_ids(64);
      std::vector<float> rows(64 * 8);
      for (int step = 0; step < steps; ++step) {
        for (float& g : dense) g = grad(random);
        for (int64_t& id : ids) id = row(random);
        for (int64_t& id : hash_ids) id = hashed(random) % 500;
        for (float& g : rows) g = grad(random);
        absl::Status s =
            (*client)->Push({PushOp::Dense("dense", dense.data()),
                             PushOp::Rows("emb", ids, rows.data()),
                             PushOp::Rows("hash", hash_ids, rows.data())});
        if (!s.ok()) {
          ++*failures;
          ADD_FAILURE() << s;
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

struct Copy {
  int ps = 0;
  bool backup = false;
  int64_t version = 0;
  int64_t rows = 0;
  uint64_t digest = 0;
};

// (variable, shard) -> every copy the cluster holds.
absl::flat_hash_map<std::string, std::vector<Copy>> Copies(Client* client) {
  ListVariablesRequest request;
  request.set_with_digests(true);
  auto lists = client->ListVariables(request);
  EXPECT_TRUE(lists.ok()) << lists.status();
  absl::flat_hash_map<std::string, std::vector<Copy>> copies;
  if (!lists.ok()) return copies;
  for (size_t ps = 0; ps < lists->size(); ++ps) {
    for (const VariableInfo& v : (*lists)[ps].variables()) {
      for (const ShardInfo& s : v.shards()) {
        copies[absl::StrCat(v.spec().name(), "/", s.shard())].push_back(
            {static_cast<int>(ps), s.backup(), s.version(), s.num_rows(),
             s.digest()});
      }
    }
  }
  return copies;
}

TEST(ReplicationTest, EveryBackupHoldsThePrimarysBitsAfterConcurrentPushes) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  const auto before = Copies(client->get());
  std::atomic<int> failures{0};
  Train(*cluster, 4, 60, &failures, 7);
  ASSERT_EQ(failures.load(), 0);
  const auto after = Copies(client->get());
  ASSERT_EQ(after.size(), 9u);  // 3 variables x 3 shards
  for (const auto& [name, copies] : after) {
    ASSERT_EQ(copies.size(), 2u) << name;
    const Copy& a = copies[0];
    const Copy& b = copies[1];
    EXPECT_NE(a.backup, b.backup) << name << ": one primary, one backup";
    const Copy& primary = a.backup ? b : a;
    const Copy& backup = a.backup ? a : b;
    // The ring: the backup is the next PS.
    EXPECT_EQ(backup.ps, (primary.ps + 1) % 3) << name;
    EXPECT_EQ(backup.version, primary.version) << name;
    EXPECT_EQ(backup.rows, primary.rows) << name;
    EXPECT_EQ(backup.digest, primary.digest) << name;
    // Training changed every shard (so equal digests are not vacuous).
    EXPECT_EQ(primary.version, 4 * 60) << name << " rows " << primary.rows;
    EXPECT_NE(before.at(name)[0].digest, primary.digest) << name;
  }
  // A checkpoint holds each shard once (from its primary).
  auto saved = (*client)->Checkpoint();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->files(), 9) << saved->DebugString();
}

TEST(ReplicationTest, BackupsCatchEveryPushAndTheDigestSeesOneMissing) {
  // The digest can tell copies apart: the same training on R=1 and one push
  // more on one shard changes that shard's digest.
  auto cluster = StartReplicated(1);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  const auto before = Copies(client->get());
  for (const auto& [name, copies] : before) {
    ASSERT_EQ(copies.size(), 1u) << name << ": --replicas=1 keeps no backup";
  }
  std::vector<int64_t> id = {3};
  std::vector<float> grad(8, 1e-3f);
  ASSERT_EQ((*client)->PushRows("emb", id, grad.data()), absl::OkStatus());
  const auto after = Copies(client->get());
  int changed = 0;
  for (const auto& [name, copies] : after) {
    changed += copies[0].digest != before.at(name)[0].digest;
  }
  EXPECT_EQ(changed, 1);
}

TEST(ReplicationTest, TooFewHostsIsRefusedAtStartNamingThem) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.extra_flags = {"--replicas=2"};  // both PS on 127.0.0.1
  auto cluster = LocalCluster::Start(o);
  ASSERT_FALSE(cluster.ok());
  EXPECT_TRUE(absl::StrContains(cluster.status().message(),
                                "needs PS on at least 2 different hosts"))
      << cluster.status();
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "127.0.0.1"))
      << cluster.status();
}

TEST(ReplicationTest, ABackupKilledDoesNotStopTraining) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  std::atomic<int> failures{0};
  Train(*cluster, 2, 10, &failures, 11);
  ASSERT_EQ(failures.load(), 0);
  // PS 1 keeps PS 0's backups. Only PS 0's shards are pushed from now on.
  cluster->Kill(1, SIGKILL);
  const VariableLayout* emb = (*client)->Find("emb");
  ASSERT_NE(emb, nullptr);
  int pushed = 0;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 5; ++i) {
    // A dense push touches every shard, PS 1's too: push rows of PS 0's
    // shards of the embedding instead (DIV: shard 0 holds rows 0..1666).
    std::vector<int64_t> ids = {1, 2, 3};
    std::vector<float> rows(3 * 8, 0.25f);
    ASSERT_EQ(emb->shards[0].ps_task, 0);
    absl::Status s = (*client)->PushRows("emb", ids, rows.data());
    ASSERT_TRUE(s.ok()) << s;
    ++pushed;
  }
  EXPECT_EQ(pushed, 5);
  // The first push waits for the primary to give the backup up (10 s of
  // retries), the rest go straight through.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  std::ifstream log(cluster->log_path(0));
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "replication to PS 1"))
      << text.str().substr(0, 4000);
}

}  // namespace
}  // namespace psrt
