// Save, restore, re-cut and corruption of checkpoints, in one process over
// in-memory storage (storage/memory_storage.h): the PS's own saver,
// manifest builder and restorer on real shard stores, without servers.
// tests/checkpoint_test.cc covers the same through ps_server processes.
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/checkpoint_restorer.h"
#include "ps_server/checkpoint/checkpoint_saver.h"
#include "ps_server/checkpoint/shard_file.h"
#include "ps_server/shards/shard_store.h"
#include "storage/memory_storage.h"
#include "util/crc32c.h"
#include "util/simulated_clock.h"

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
            [restorer](const LocalVariable& v,
                       const std::atomic<bool>& cancelled) {
              return restorer->Fill(v, cancelled);
            },
            [restorer](const VariableLayout& layout) {
              return restorer->FillsEveryRow(layout);
            });
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

  // A checkpoint of a cluster, opened: its storage and manifest.
  struct Saved {
    std::string uri;
    std::unique_ptr<Storage> storage;
    CheckpointManifest manifest;
  };
  // Trains `cluster` a step, saves it, and opens the checkpoint (storage
  // null after a failure, which is reported).
  Saved TrainSaveAndOpen(Cluster& cluster) {
    cluster.Train(ids_, 1.0f);
    Saved saved;
    saved.uri = Save(cluster, open_);
    auto opened = open_(saved.uri);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return saved;
    auto read = ReadManifest(**opened, "");
    EXPECT_TRUE(read.ok()) << read.status();
    if (!read.ok()) return saved;
    saved.storage = *std::move(opened);
    saved.manifest = *std::move(read);
    return saved;
  }
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

// A hash table no push reached yet (or one shard of it) is saved as
// files of no rows; they restore (they used to be refused as corrupt,
// which made such a checkpoint unrestorable).
TEST_F(CheckpointRoundTripTest, AHashTableWithNoRowsRestores) {
  Cluster before(2, {Dense(3), Hash(2)});
  const std::string uri = Save(before, open_);
  auto restorer = CheckpointRestorer::Open(uri, open_);
  ASSERT_TRUE(restorer.ok()) << restorer.status();
  Cluster after(2, {Dense(3), Hash(2)}, restorer->get());
  ASSERT_EQ(after.created.size(), 2u);
  for (const absl::Status& s : after.created) ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(after.Rows("hashed").empty());
  EXPECT_EQ(after.Rows("dense"), before.Rows("dense"));
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

// A streamed file, tiny chunks: the same ids and rows as the file read
// whole, and every kind of damage found (DATA_LOSS naming the file), in
// the stored ids, the rows, the header, or the file's length.
TEST_F(CheckpointRoundTripTest, StreamedFilesEqualWholeReadsAndFindDamage) {
  Cluster before(2, {Dense(3), Embedding(4), Hash(2)});
  Saved saved = TrainSaveAndOpen(before);
  ASSERT_NE(saved.storage, nullptr);
  Storage& storage = *saved.storage;
  CheckpointManifest& manifest = saved.manifest;
  int checked = 0;
  for (const CheckpointFile& file : manifest.files()) {
    auto whole = ReadShardFile(storage, file, manifest.format_version());
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::vector<int64_t> ids;
    std::vector<float> rows;
    int chunks = 0;
    const int64_t stride = whole->row_stride();
    absl::Status streamed = StreamShardFile(
        storage, file, manifest.format_version(), /*chunk_bytes=*/40,
        [&](const ShardFileHeader& h) {
          EXPECT_EQ(h.num_rows(), whole->num_rows());
          return absl::OkStatus();
        },
        [&](const ShardFileChunk& c) {
          EXPECT_EQ(c.first, static_cast<int64_t>(ids.size()));
          ids.insert(ids.end(), c.ids, c.ids + c.num_rows);
          rows.insert(rows.end(), c.rows, c.rows + c.num_rows * stride);
          ++chunks;
          return absl::OkStatus();
        });
    ASSERT_TRUE(streamed.ok()) << streamed;
    ASSERT_EQ(static_cast<int64_t>(ids.size()), whole->num_rows());
    for (int64_t i = 0; i < whole->num_rows(); ++i) {
      ASSERT_EQ(ids[i], whole->Id(i)) << file.path() << " row " << i;
    }
    ASSERT_EQ(rows, std::vector<float>(
                        whole->rows, whole->rows + whole->num_rows() * stride))
        << file.path();
    if (whole->num_rows() > 1) EXPECT_GT(chunks, 1) << file.path();
    ++checked;
  }
  EXPECT_EQ(checked, 3 + 4 + 2);

  // Damage each region of the hash table's first file in turn.
  const CheckpointFile* hashed = nullptr;
  for (const CheckpointFile& f : manifest.files()) {
    if (f.variable() == "hashed" && f.num_rows() > 1) hashed = &f;
  }
  ASSERT_NE(hashed, nullptr);
  std::string key, original;
  for (const auto& [path, data] : objects_->Snapshot()) {
    if (absl::EndsWith(path, "/" + hashed->path())) {
      key = path;
      original = data;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(original.size()), hashed->bytes());
  const size_t ids_at = 8, rows_at = 8 + 8 * hashed->num_rows();
  std::vector<std::pair<std::string, std::string>> damaged = {
      {"id", original},
      {"row", original},
      {"header", original},
      {"short", original.substr(0, original.size() - 1)},
      {"long", original + "x"}};
  damaged[0].second[ids_at + 3] ^= 0x01;
  damaged[1].second[rows_at + 5] ^= 0x40;
  damaged[2].second[original.size() - 10] ^= 0x02;
  for (const auto& [what, data] : damaged) {
    objects_->Put(key, data);
    absl::Status s = StreamShardFile(
        storage, *hashed, manifest.format_version(), 40,
        [](const ShardFileHeader&) { return absl::OkStatus(); },
        [](const ShardFileChunk&) { return absl::OkStatus(); });
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << what << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), hashed->path()))
        << what << ": " << s;
  }
  objects_->Put(key, original);
}

// Restored dense and embedding shards are not initialized first (the
// restore writes every row); a checkpoint whose files, each intact and
// recorded, still leave rows out is refused instead of leaving zeros.
TEST_F(CheckpointRoundTripTest, FilesThatLeaveRowsOutAreRefused) {
  Cluster before(1, {Dense(3)});
  Saved saved = TrainSaveAndOpen(before);
  ASSERT_NE(saved.storage, nullptr);
  const std::string& uri = saved.uri;
  Storage& storage = *saved.storage;
  CheckpointManifest& manifest = saved.manifest;
  CheckpointFile& file = *manifest.mutable_files(1);
  auto contents = ReadShardFile(storage, file, manifest.format_version());
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_GT(contents->num_rows(), 1);
  // The same file less its last row, with its own CRC, and the manifest
  // recording it.
  ShardFileHeader header = contents->header;
  header.set_num_rows(header.num_rows() - 1);
  std::string data(kShardFileMagic, 8);
  data.append(reinterpret_cast<const char*>(contents->rows),
              header.num_rows() * contents->row_stride() * sizeof(float));
  std::string trailer = header.SerializeAsString();
  const uint32_t header_bytes = trailer.size();
  trailer.append(reinterpret_cast<const char*>(&header_bytes), 4);
  data += trailer;
  const uint32_t crc = Crc32c(data.data(), data.size());
  data.append(reinterpret_cast<const char*>(&crc), 4);
  ASSERT_TRUE(storage.Write(file.path(), data).ok());
  file.set_bytes(data.size());
  file.set_crc32c(Crc32c(data.data(), data.size()));
  file.set_num_rows(header.num_rows());
  ASSERT_TRUE(storage.Write(kManifestName, ManifestJson(manifest)).ok());

  auto restorer = CheckpointRestorer::Open(uri, open_);
  ASSERT_TRUE(restorer.ok()) << restorer.status();
  Cluster after(1, {Dense(3)}, restorer->get());
  EXPECT_EQ(after.created[0].code(), absl::StatusCode::kDataLoss)
      << after.created[0];
  EXPECT_TRUE(absl::StrContains(after.created[0].message(),
                                "do not cover the variable"))
      << after.created[0];
  EXPECT_EQ(after.ps[0]->Find("dense"), nullptr);
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

// --checkpoint_max_mbps: the writers are paced on the coordinator's clock.
// 4 MiB of floats at 1 MiB/s takes 4 s of that clock (less the first 256
// KiB chunk, which goes at once), whatever real time it took.
TEST(CheckpointRateTest, ASaveWritesAtMostItsRateOnTheClock) {
  VariableSpec big;
  big.set_name("big");
  big.set_kind(DENSE);
  big.add_shape(1 << 20);
  big.mutable_partition()->set_num_shards(1);
  big.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  big.mutable_optimizer()->set_learning_rate(0.1f);
  Cluster cluster(1, {big});
  ASSERT_TRUE(cluster.created[0].ok()) << cluster.created[0];
  auto objects = std::make_shared<MemoryObjects>();
  SimulatedClock clock;
  constexpr int64_t kRate = 1 << 20;
  absl::StatusOr<SaveShardsResponse> saved;
  absl::Notification done;
  const absl::Time start = clock.Now();
  std::thread save([&] {
    saved = SaveLocalShards(*cluster.ps[0], JoinUri(kRoot, "rate"),
                            MemoryStorageOpener(objects), 1, kRate, &clock);
    done.Notify();
  });
  // Time moves only while the writer waits for it.
  while (!done.HasBeenNotified()) {
    if (clock.AwaitWaiters(1, absl::Milliseconds(10))) {
      clock.Advance(absl::Milliseconds(10));
    }
  }
  save.join();
  ASSERT_TRUE(saved.ok()) << saved.status();
  int64_t bytes = 0;
  for (const CheckpointFile& f : saved->files()) bytes += f.bytes();
  ASSERT_GE(bytes, int64_t{4} << 20);
  const absl::Duration took = clock.Now() - start;
  const absl::Duration at_rate =
      absl::Seconds(static_cast<double>(bytes) / kRate);
  EXPECT_GE(took, at_rate - absl::Milliseconds(260)) << took;
  EXPECT_LE(took, at_rate + absl::Milliseconds(20)) << took;
}

}  // namespace
}  // namespace psrt
