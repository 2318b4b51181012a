// Save, restore, re-cut and corruption of checkpoints, in one process over
// in-memory storage (storage/memory_storage.h): the PS's own saver,
// manifest builder and restorer on real shard stores, without servers.
// tests/checkpoint_test.cc covers the same through ps_server processes.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/checkpoint_restorer.h"
#include "ps_server/checkpoint/checkpoint_saver.h"
#include "ps_server/shards/shard_store.h"
#include "storage/memory_storage.h"

namespace psrt {
namespace {

constexpr char kRoot[] = "mem://bucket/run";

VariableSpec Dense(int shards) {
  VariableSpec s;
  s.set_name("dense");
  s.set_kind(DENSE);
  s.add_shape(10);
  s.add_shape(3);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  s.mutable_optimizer()->set_learning_rate(0.01f);
  return s;
}

VariableSpec Embedding(int shards) {
  VariableSpec s;
  s.set_name("table");
  s.set_kind(EMBEDDING);
  s.add_shape(100);
  s.add_shape(4);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  s.mutable_optimizer()->set_learning_rate(0.1f);
  return s;
}

VariableSpec Hash(int shards) {
  VariableSpec s;
  s.set_name("hashed");
  s.set_kind(HASH_EMBEDDING);
  s.add_shape(0);
  s.add_shape(2);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  s.mutable_optimizer()->set_learning_rate(0.1f);
  return s;
}

// One "cluster": a ShardStore per PS, holding the same catalog.
struct Cluster {
  std::vector<std::unique_ptr<ShardStore>> ps;

  Cluster(int num_ps, std::vector<VariableSpec> specs,
          CheckpointRestorer* restorer = nullptr) {
    for (int t = 0; t < num_ps; ++t) {
      ps.push_back(std::make_unique<ShardStore>(t, num_ps));
      if (restorer != nullptr) {
        ps.back()->set_fill_hook(
            [restorer](const LocalVariable& v) { return restorer->Fill(v); });
      }
    }
    for (auto& store : ps) {
      created.push_back(store->CreateVariables(0, specs, num_ps).status());
    }
  }
  std::vector<absl::Status> created;

  // Every row of `name` on any PS by global id: values and slots.
  std::map<int64_t, std::vector<float>> Rows(const std::string& name) const {
    std::map<int64_t, std::vector<float>> rows;
    for (const auto& store : ps) {
      const LocalVariable* v = store->Find(name);
      if (v == nullptr) continue;
      for (int s = 0; s < v->layout->num_shards(); ++s) {
        if (!v->Holds(s)) continue;
        const Shard& shard = v->shard(s);
        const int64_t n = shard.num_rows();
        std::vector<int64_t> ids(n);
        std::vector<float> floats(n * shard.row_stride());
        int64_t version;
        EXPECT_EQ(shard.ExportRows(0, n, ids.data(), floats.data(), &version),
                  n);
        for (int64_t r = 0; r < n; ++r) {
          rows[ids[r]].assign(floats.begin() + r * shard.row_stride(),
                              floats.begin() + (r + 1) * shard.row_stride());
        }
      }
    }
    return rows;
  }

  // Pushes a gradient of `value` to every row in `ids` of each variable
  // (dense: every float), through the shard handle as a push does.
  void Train(const std::vector<int64_t>& ids, float value) {
    for (auto& store : ps) {
      for (const LocalVariable* v : store->Variables()) {
        for (int s = 0; s < v->layout->num_shards(); ++s) {
          if (!v->Holds(s)) continue;
          const ShardLayout& layout = v->layout->shards[s];
          ShardUpdate update;
          update.learning_rate = v->layout->spec.optimizer().learning_rate();
          std::vector<float>& grad = grads.emplace_back();
          if (v->layout->kind() == DENSE) {
            const int64_t n = layout.num_rows * v->layout->row_width;
            grad.assign(n, value);
            update.ranges.push_back(
                {0, n, PayloadView::Contiguous(grad.data(), n * 4)});
          } else {
            for (int64_t id : ids) {
              const bool known = v->layout->kind() == HASH_EMBEDDING ||
                                 (id >= 0 && id < v->layout->rows);
              if (known && v->layout->ShardOf(id) == s) {
                update.ids.push_back(id);
              }
            }
            grad.assign(update.ids.size() * v->layout->row_width, value);
            update.grads.push_back(
                PayloadView::Contiguous(grad.data(), grad.size() * 4));
          }
          ASSERT_TRUE(v->shard(s).ApplyUpdate(std::move(update)).ok());
        }
      }
      store->ObserveStep(41);
    }
  }
  std::vector<std::vector<float>> grads;
};

// Saves every PS of `cluster` as one checkpoint and publishes its manifest.
std::string Save(const Cluster& cluster, const StorageOpener& open) {
  const std::string name = CheckpointName(42, absl::Now());
  const std::string uri = JoinUri(kRoot, name);
  std::vector<absl::StatusOr<SaveShardsResponse>> saved;
  std::vector<std::string> addresses;
  for (const auto& store : cluster.ps) {
    saved.push_back(SaveLocalShards(*store, uri, open, 2));
    addresses.push_back(absl::StrCat("ps", store->ps_task()));
  }
  auto manifest = BuildManifest(uri, name, absl::Now(), saved,
                                cluster.ps[0]->Variables(), addresses);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  auto storage = open(uri);
  EXPECT_TRUE(storage.ok());
  EXPECT_TRUE((*storage)->Write(kManifestName, ManifestJson(*manifest)).ok());
  return uri;
}

class CheckpointRoundTripTest : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryObjects> objects_ = std::make_shared<MemoryObjects>();
  StorageOpener open_ = MemoryStorageOpener(objects_);
  const std::vector<int64_t> ids_ = {0, 3, 17, 42, 99, -5, 123456789};
};

TEST_F(CheckpointRoundTripTest, RestoresEveryKindBitForBit) {
  Cluster before(2, {Dense(3), Embedding(4), Hash(2)});
  before.Train(ids_, 0.5f);
  before.Train(ids_, -0.25f);
  const std::string uri = Save(before, open_);

  auto restorer = CheckpointRestorer::Open(uri, open_);
  ASSERT_TRUE(restorer.ok()) << restorer.status();
  EXPECT_EQ(restorer->get()->manifest().global_step(), 42);
  Cluster after(2, {Dense(3), Embedding(4), Hash(2)}, restorer->get());
  for (const absl::Status& s : after.created) ASSERT_TRUE(s.ok()) << s;
  for (const char* name : {"dense", "table", "hashed"}) {
    const auto saved = before.Rows(name);
    EXPECT_EQ(after.Rows(name), saved) << name;
    EXPECT_GT(saved.size(), 0u) << name;
  }
  // Hash rows: exactly the ids that were pushed.
  EXPECT_EQ(after.Rows("hashed").size(), ids_.size());
  // Versions (Adam's t) come back too: two updates per shard.
  EXPECT_EQ(after.ps[1]->Find("dense")->shard(1).version(), 2);
}

TEST_F(CheckpointRoundTripTest, ReCutsOntoAnotherClusterShape) {
  Cluster before(2, {Dense(3), Embedding(4), Hash(2)});
  before.Train(ids_, 1.0f);
  const std::string uri = Save(before, open_);

  auto restorer = CheckpointRestorer::Open(uri, open_);
  ASSERT_TRUE(restorer.ok()) << restorer.status();
  // 3 PS instead of 2, and other shard counts for every variable.
  Cluster after(3, {Dense(2), Embedding(5), Hash(3)}, restorer->get());
  for (const absl::Status& s : after.created) ASSERT_TRUE(s.ok()) << s;
  for (const char* name : {"dense", "table", "hashed"}) {
    EXPECT_EQ(after.Rows(name), before.Rows(name)) << name;
  }
}

TEST_F(CheckpointRoundTripTest, CorruptShardFileFailsCreationNamingIt) {
  Cluster before(2, {Dense(3), Embedding(4)});
  before.Train(ids_, 1.0f);
  const std::string uri = Save(before, open_);
  // Flip one bit in the middle of one shard file of the table.
  std::string victim;
  for (const auto& [path, data] : objects_->Snapshot()) {
    if (absl::StrContains(path, "table.shard-00002-of-00004")) {
      victim = path;
      std::string bad = data;
      bad[bad.size() / 2] ^= 0x10;
      objects_->Put(path, bad);
    }
  }
  ASSERT_FALSE(victim.empty());

  auto restorer = CheckpointRestorer::Open(uri, open_);
  ASSERT_TRUE(restorer.ok()) << restorer.status();
  Cluster after(2, {Dense(3), Embedding(4)}, restorer->get());
  // The PS that holds shard 2 fails the creation with the file named, and
  // creates nothing of it (not even the variables before it); the other
  // PS, which needs nothing from that file, restores.
  const int holder = before.ps[0]->Find("table")->layout->shards[2].ps_task;
  const int other = 1 - holder;
  EXPECT_EQ(after.created[holder].code(), absl::StatusCode::kDataLoss)
      << after.created[holder];
  EXPECT_TRUE(absl::StrContains(after.created[holder].message(),
                                "table.shard-00002-of-00004 is corrupt"))
      << after.created[holder];
  EXPECT_EQ(after.ps[holder]->Find("table"), nullptr);
  EXPECT_EQ(after.ps[holder]->Find("dense"), nullptr);
  EXPECT_TRUE(after.created[other].ok()) << after.created[other];
}

TEST_F(CheckpointRoundTripTest, ManifestRequiresEveryShardAndNamesTheFailure) {
  Cluster cluster(2, {Dense(3), Embedding(4)});
  const std::string name = CheckpointName(1, absl::Now());
  const std::string uri = JoinUri(kRoot, name);
  const std::vector<std::string> addresses = {"host-a:2222", "host-b:2222"};
  // PS 1 answered, but holds nothing (restarted without its variables).
  std::vector<absl::StatusOr<SaveShardsResponse>> saved = {
      SaveLocalShards(*cluster.ps[0], uri, open_, 1), SaveShardsResponse()};
  auto manifest = BuildManifest(uri, name, absl::Now(), saved,
                                cluster.ps[0]->Variables(), addresses);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(manifest.status().message(),
                                "PS 1 (host-b:2222) holds no shard 1 of"))
      << manifest.status();
  // PS 1 failed outright: its error, with its address.
  saved[1] = absl::UnavailableError("connection refused");
  manifest = BuildManifest(uri, name, absl::Now(), saved,
                           cluster.ps[0]->Variables(), addresses);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(manifest.status().message(),
                                "PS 1 (host-b:2222): connection refused"))
      << manifest.status();
}

TEST_F(CheckpointRoundTripTest, MissingManifestIsNotRestorable) {
  Cluster before(1, {Dense(1)});
  const std::string uri = Save(before, open_);
  ASSERT_TRUE((*open_(uri))->Delete(kManifestName).ok());
  auto restorer = CheckpointRestorer::Open(uri, open_);
  EXPECT_EQ(restorer.status().code(), absl::StatusCode::kNotFound)
      << restorer.status();
}

}  // namespace
}  // namespace psrt
