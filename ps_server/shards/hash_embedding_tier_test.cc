// A hash embedding with an SSD tier (StorageSpec.tier = SSD) against the
// same table all in memory: rows evicted to disk and brought back keep
// every bit of their values and optimizer slots, pulls read spilled rows
// (promoting them when memory has room), and a checkpoint (pinned export) holds
// every row once, as it was pinned. The disk's faults (full, failing reads,
// changed records) are made on the in-memory cold tier (memory_cold_tier.h);
// the rest runs on the SSD tier's file.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "ps_server/shards/memory_cold_tier.h"
#include "ps_server/shards/row_spill_store.h"

namespace psrt {
namespace {

constexpr int kDim = 4;

struct Table {
  // max_rows 0 and no `budget`: all in memory (the reference); else a
  // cold tier: the SSD tier's file in `dir`, or with `dir` empty the
  // in-memory tier whose disk the test can fill, fail or corrupt
  // (`memory`). `budget`: the PS's memory, as --memory_budget_mb gives it
  // (a refused block makes room by eviction).
  Table(int64_t max_rows, const std::string& dir,
        HashEmbeddingShard::Reserve budget = nullptr)
      : map(1) {
    const bool tier = max_rows > 0 || budget != nullptr;
    VariableSpec spec;
    spec.set_name("ids");
    spec.set_kind(HASH_EMBEDDING);
    spec.add_shape(0);
    spec.add_shape(kDim);
    spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    spec.mutable_optimizer()->set_learning_rate(0.1f);
    spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
    spec.mutable_initializer()->set_min(-1);
    spec.mutable_initializer()->set_max(1);
    if (max_rows > 0) spec.mutable_eviction()->set_max_rows(max_rows);
    if (tier) spec.mutable_storage()->set_tier(StorageSpec::SSD);
    EXPECT_TRUE(NormalizeVariableSpec(&spec).ok());
    EXPECT_TRUE(map.Add(spec).ok());
    layout = map.Find("ids");
    optimizer = CreateOptimizer(layout->spec.optimizer());
    init = std::make_unique<Initializer>(layout->spec.initializer());
    std::unique_ptr<ColdTier> store;
    if (tier && dir.empty()) {
      auto in_memory = std::make_unique<MemoryColdTier>(2 * kDim);
      memory = in_memory.get();
      store = std::move(in_memory);
    } else if (tier) {
      auto opened = RowSpillStore::Open(dir, 2 * kDim);
      EXPECT_TRUE(opened.ok()) << opened.status();
      store = *std::move(opened);
    }
    shard = std::make_unique<HashEmbeddingShard>(
        *layout, 0, optimizer.get(), *init, std::move(budget),
        /*evict_at_memory_limit=*/budget != nullptr, std::move(store));
  }

  // `as_backup`: as a backup applies its primary's push (every id gets a
  // row, none dropped).
  absl::Status Push(const std::vector<int64_t>& ids,
                    const std::vector<float>& grads, int64_t step,
                    bool as_backup = false) {
    ShardUpdate update;
    update.learning_rate = 0.1f;
    update.global_step = step;
    update.ids = ids;
    if (as_backup) update.primary_dropped.emplace();
    update.grads = {
        PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float))};
    return shard->ApplyUpdate(std::move(update));
  }

  std::vector<float> Pull(const std::vector<int64_t>& ids) {
    std::vector<float> out(ids.size() * kDim);
    absl::StatusOr<int64_t> version = shard->Gather(ids, out.data());
    EXPECT_TRUE(version.ok()) << version.status();
    return out;
  }

  // Every row (values and slots) by id, read as a checkpoint reads it:
  // pinned, ids in one pass and rows in another.
  std::map<int64_t, std::vector<float>> Export(
      const std::function<void()>& between_passes = nullptr) {
    shard->PinRows(true);
    const int64_t n = shard->num_rows();
    std::vector<int64_t> ids(n);
    std::vector<float> rows(n * 2 * kDim);
    int64_t version;
    for (int64_t first = 0; first < n; first += 37) {
      const int64_t want = std::min<int64_t>(37, n - first);
      EXPECT_EQ(
          shard->ExportRows(first, want, ids.data() + first, nullptr, &version),
          want);
    }
    if (between_passes) between_passes();
    for (int64_t first = 0; first < n; first += 53) {
      const int64_t want = std::min<int64_t>(53, n - first);
      EXPECT_EQ(shard->ExportRows(first, want, nullptr,
                                  rows.data() + first * 2 * kDim, &version),
                want);
    }
    shard->PinRows(false);
    std::map<int64_t, std::vector<float>> by_id;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(by_id
                      .emplace(ids[i], std::vector<float>(
                                           rows.begin() + i * 2 * kDim,
                                           rows.begin() + (i + 1) * 2 * kDim))
                      .second)
          << "id " << ids[i] << " exported twice";
    }
    return by_id;
  }

  // The ids of the rows in the cold tier: an export lists them first.
  std::vector<int64_t> SpilledIds() {
    std::vector<int64_t> ids(shard->row_counts().spilled_rows);
    int64_t version;
    shard->PinRows(true);
    ids.resize(shard->ExportRows(0, static_cast<int64_t>(ids.size()),
                                 ids.data(), nullptr, &version));
    shard->PinRows(false);
    return ids;
  }

  ShardMap map;
  const VariableLayout* layout;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Initializer> init;
  std::unique_ptr<HashEmbeddingShard> shard;
  MemoryColdTier* memory = nullptr;  // the in-memory tier, if it has one
};

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

// Pushes of 40 Zipf-drawn ids of 2,000 (repeats summed) with random
// gradients, the same to both tables.
void TrainBoth(Table* tiered, Table* reference, int steps, int64_t first_step,
               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> weights(2000);
  for (int i = 0; i < 2000; ++i) weights[i] = 1.0 / (i + 1);
  std::discrete_distribution<int64_t> zipf(weights.begin(), weights.end());
  std::normal_distribution<float> gradient(0.0f, 1.0f);
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> ids(40);
    for (int64_t& id : ids) id = zipf(rng) * 7919 - 5000;
    std::vector<float> grads(ids.size() * kDim);
    for (float& g : grads) g = gradient(rng);
    ASSERT_TRUE(tiered->Push(ids, grads, first_step + step).ok());
    ASSERT_TRUE(reference->Push(ids, grads, first_step + step).ok());
  }
}

// A PS's memory, as --memory_budget_mb gives it: `limit` bytes shared by
// every shard that reserves through it.
HashEmbeddingShard::Reserve SharedBudget(int64_t* reserved, int64_t limit) {
  return [reserved, limit](int64_t bytes) {
    if (*reserved + bytes > limit) {
      return absl::ResourceExhaustedError("over the test's budget");
    }
    *reserved += bytes;
    return absl::OkStatus();
  };
}

TEST(HashEmbeddingTierTest, SpilledAndPromotedRowsMatchAllInMemoryBitForBit) {
  Table tiered(/*max_rows=*/100, TestDir("bits"));
  Table reference(0, "");
  TrainBoth(&tiered, &reference, 400, 0, 1);
  const HashRowCounts counts = tiered.shard->row_counts();
  EXPECT_GT(counts.spilled_rows, 300);  // most rows live on disk
  EXPECT_GT(counts.promoted_rows, 100);
  EXPECT_GT(counts.spilled_bytes, 0);
  // Both tiers together hold every row once: the reference's count.
  EXPECT_EQ(tiered.shard->num_rows(), reference.shard->num_rows());
  EXPECT_LE(tiered.shard->num_rows() - counts.spilled_rows, 101);
  // A pull of more rows than memory holds (max_rows 100) reads the
  // spilled ones from disk (and ids never pushed from the initializer):
  // none is promoted, none lost.
  std::vector<int64_t> ids;
  for (int i = 0; i < 2100; ++i) ids.push_back(i * 7919 - 5000);
  EXPECT_EQ(tiered.Pull(ids), reference.Pull(ids));
  EXPECT_EQ(tiered.shard->row_counts().promoted_rows, counts.promoted_rows);
  EXPECT_EQ(tiered.shard->row_counts().spilled_rows, counts.spilled_rows);
  // Slots too: every row of the export, values and Adagrad accumulators.
  EXPECT_EQ(tiered.Export(), reference.Export());
}

// Promotion on access: a pull brings the spilled rows it reads back to
// memory (evicting the least recently used others), with their slots, so
// the next pull and the push that follows it find them there -- except
// while a checkpoint pins the rows, when it reads them from disk.
TEST(HashEmbeddingTierTest, APullPromotesTheSpilledRowsItReads) {
  Table tiered(/*max_rows=*/100, TestDir("pull_promotes"));
  Table reference(0, "");
  TrainBoth(&tiered, &reference, 400, 0, 5);
  // The 30 ids of ranks 1000-1029: drawn, and long since spilled.
  std::vector<int64_t> cold;
  for (int i = 1000; i < 1030; ++i) cold.push_back(i * 7919 - 5000);
  const HashRowCounts before = tiered.shard->row_counts();
  ASSERT_GT(before.spilled_rows, 300);

  tiered.shard->PinRows(true);
  EXPECT_EQ(tiered.Pull(cold), reference.Pull(cold));
  EXPECT_EQ(tiered.shard->row_counts().promoted_rows, before.promoted_rows);
  tiered.shard->PinRows(false);

  EXPECT_EQ(tiered.Pull(cold), reference.Pull(cold));
  const HashRowCounts after = tiered.shard->row_counts();
  const int64_t promoted = after.promoted_rows - before.promoted_rows;
  EXPECT_GE(promoted, 20);  // the drawn ones among them: all of them
  EXPECT_EQ(after.spilled_rows, before.spilled_rows - promoted +
                                    (after.evicted_rows - before.evicted_rows));
  EXPECT_EQ(tiered.shard->num_rows(), reference.shard->num_rows());
  // In memory now: pulled again, nothing moves.
  EXPECT_EQ(tiered.Pull(cold), reference.Pull(cold));
  EXPECT_EQ(tiered.shard->row_counts().promoted_rows, after.promoted_rows);
  // Training goes on from the promoted rows' slots: bit for bit.
  TrainBoth(&tiered, &reference, 100, 400, 6);
  EXPECT_EQ(tiered.Export(), reference.Export());
}

TEST(HashEmbeddingTierTest, ACheckpointReadsRowsAsPinnedWhilePushesPromote) {
  Table tiered(/*max_rows=*/100, TestDir("pinned"));
  Table reference(0, "");
  TrainBoth(&tiered, &reference, 200, 0, 2);
  const auto at_pin = reference.Export();
  // Between the ids pass and the rows pass, pushes promote spilled rows,
  // create new ones, and change rows in memory.
  const auto exported = tiered.Export([&] {
    TrainBoth(&tiered, &reference, 50, 200, 3);
    EXPECT_GT(tiered.shard->row_counts().promoted_rows, 0);
  });
  EXPECT_EQ(exported.size(), at_pin.size());
  int64_t changed_since = 0;
  for (const auto& [id, row] : exported) {
    auto it = at_pin.find(id);
    ASSERT_NE(it, at_pin.end()) << "id " << id << " did not exist at the pin";
    // Rows on disk are read as pinned; rows in memory may carry the
    // pushes made since (as in a table without a tier).
    if (row != it->second) ++changed_since;
  }
  EXPECT_LT(changed_since, 101);  // at most the rows that were in memory
  // Afterwards the tiered table still equals the reference.
  EXPECT_EQ(tiered.Export(), reference.Export());
}

TEST(HashEmbeddingTierTest, AnImportFillsBothTiers) {
  Table source(/*max_rows=*/100, TestDir("source"));
  Table reference(0, "");
  TrainBoth(&source, &reference, 300, 0, 4);
  const auto saved = source.Export();
  Table restored(/*max_rows=*/100, TestDir("restored"));
  std::vector<int64_t> ids;
  std::vector<float> rows;
  for (const auto& [id, row] : saved) {
    ids.push_back(id);
    rows.insert(rows.end(), row.begin(), row.end());
    if (ids.size() == 50) {  // in chunks, as the checkpoint restorer does
      ASSERT_TRUE(restored.shard->ImportRows(ids, rows.data()).ok());
      ids.clear();
      rows.clear();
    }
  }
  ASSERT_TRUE(restored.shard->ImportRows(ids, rows.data()).ok());
  EXPECT_GT(restored.shard->row_counts().spilled_rows, 200);
  EXPECT_EQ(restored.Export(), saved);
  // And trains on as the reference does.
  TrainBoth(&restored, &reference, 100, 300, 5);
  EXPECT_EQ(restored.Export(), reference.Export());
}

// At --memory_budget_mb the SSD tier's index (which grows with the rows
// spilled) is reserved from the PS's memory like the rows' blocks: the
// shard gives back blocks for it, so its memory stays within the budget,
// and the rows those blocks held go to the tier, not away.
TEST(HashEmbeddingTierTest, TheTierIndexIsHeldWithinTheMemoryBudget) {
  const int64_t block_bytes = HashEmbeddingShard::BlockBytes(2 * kDim);
  // 40 blocks of rows, and the store's buffers (reserved by whoever
  // creates the store, as the PS does).
  const int64_t limit = 40 * block_bytes + RowSpillStore::kMemoryBytes;
  int64_t reserved = RowSpillStore::kMemoryBytes;
  int64_t most_reserved = reserved;
  Table tiered(0, TestDir("budget"), [&](int64_t bytes) {
    if (reserved + bytes > limit) {
      return absl::ResourceExhaustedError("over the test's budget");
    }
    reserved += bytes;
    most_reserved = std::max(most_reserved, reserved);
    return absl::OkStatus();
  });
  Table reference(0, "");
  constexpr int64_t kIds = 300'000;
  std::vector<float> grads(4096 * kDim, 0.5f);
  int64_t step = 0;
  for (int64_t first = 0; first < kIds; first += 4096, ++step) {
    std::vector<int64_t> ids(std::min<int64_t>(4096, kIds - first));
    for (size_t k = 0; k < ids.size(); ++k) ids[k] = (first + k) * 7919;
    grads.resize(ids.size() * kDim);
    ASSERT_EQ(tiered.Push(ids, grads, step), absl::OkStatus()) << first;
    ASSERT_EQ(reference.Push(ids, grads, step), absl::OkStatus());
    if (step % 8 == 7) tiered.shard->EvictIdleRows(step);  // the evictor
  }
  tiered.shard->EvictIdleRows(step);
  const HashRowCounts counts = tiered.shard->row_counts();
  const int64_t in_memory = tiered.shard->num_rows() - counts.spilled_rows;
  std::printf(
      "budget %lld bytes: %lld rows in memory, %lld spilled; shard holds %lld "
      "bytes, reserved %lld\n",
      static_cast<long long>(limit), static_cast<long long>(in_memory),
      static_cast<long long>(counts.spilled_rows),
      static_cast<long long>(tiered.shard->bytes()),
      static_cast<long long>(tiered.shard->reserved_bytes()));
  EXPECT_EQ(tiered.shard->num_rows(), kIds);
  EXPECT_LE(most_reserved, limit);
  // What the shard says it reserved is what the PS counts (given back when
  // the variable is dropped).
  EXPECT_EQ(tiered.shard->reserved_bytes(), reserved);
  // Its memory (blocks, index, store) within the budget: blocks were
  // given back for the tier's index (~4.5 MB for 270k spilled rows).
  EXPECT_LE(tiered.shard->bytes(), limit + limit / 20);
  EXPECT_LT(in_memory, 36 * HashEmbeddingShard::kRowsPerBlock);
  // No row lost: every id reads what the all-in-memory table holds.
  for (int64_t first = 0; first < kIds; first += 50'000) {
    std::vector<int64_t> ids(50'000);
    for (int64_t k = 0; k < 50'000; ++k) ids[k] = (first + k) * 7919;
    ASSERT_EQ(tiered.Pull(ids), reference.Pull(ids)) << first;
  }
}

// A full or failing disk under the SSD tier loses no row: the rows an
// eviction could not write stay in memory (values and slots), a push that
// needed their room is refused with nothing applied, a pull reads spilled
// rows on disk rather than take them, and once the disk takes writes
// again training goes on bit for bit.
// A backup at its memory budget with an SSD tier makes room on its own
// (it spills rows, which keep their values) while it gives rows as its
// primary did: pushes of rows it holds and new ids, 10 blocks' worth
// through a budget of 3. Spilling moves rows; each gradient still lands
// on its id's row: the copy holds what an all-in-memory table holds.
TEST(HashEmbeddingTierTest, ABackupAtItsBudgetSpillsAndUpdatesTheRightRows) {
  const int64_t block_bytes = HashEmbeddingShard::BlockBytes(2 * kDim);
  int64_t reserved = 0;
  Table backup(0, "", SharedBudget(&reserved, 3 * block_bytes));
  Table reference(0, "");
  std::mt19937_64 random(7);
  std::vector<int64_t> seen;
  int64_t next_id = 1;
  for (int64_t step = 0; seen.size() < 10 * 4096; ++step) {
    std::vector<int64_t> ids;
    for (int k = 0; k < 256 && !seen.empty(); ++k) {
      ids.push_back(seen[random() % seen.size()]);
    }
    for (int k = 0; k < 512; ++k) {
      ids.push_back(next_id * 7919);
      seen.push_back(next_id++ * 7919);
    }
    std::vector<float> grads(ids.size() * kDim);
    for (float& g : grads) g = static_cast<float>(random() % 5) - 2;
    ASSERT_EQ(backup.Push(ids, grads, step, /*as_backup=*/true),
              absl::OkStatus())
        << "step " << step;
    ASSERT_EQ(reference.Push(ids, grads, step), absl::OkStatus());
  }
  EXPECT_GT(backup.shard->row_counts().spilled_rows, 5 * 4096);
  EXPECT_EQ(backup.Export(), reference.Export());
}

// A shard's rows as a rejoin sends them: ids and rows in export order,
// and how many of them came from the cold tier.
struct ShardRows {
  std::vector<int64_t> ids;
  std::vector<float> rows;
  int64_t cold = 0;
};

ShardRows Snapshot(const HashEmbeddingShard& shard) {
  ShardRows out;
  const int64_t n = shard.num_rows();  // (nothing changes it meanwhile)
  absl::ReaderMutexLock lock(shard.mutex());
  out.ids.resize(n);
  out.rows.resize(n * 2 * kDim);
  int64_t version;
  EXPECT_EQ(
      shard.ExportRowsLocked(0, n, out.ids.data(), out.rows.data(), &version),
      n);
  out.cold = shard.ColdRowsLocked();
  return out;
}

// Imports `from` into `to` in chunks of 1,000 rows, the cold rows to the
// cold tier when `by_tier`, else every row to memory.
absl::Status Import(const ShardRows& from, HashEmbeddingShard* to,
                    bool by_tier) {
  const int64_t n = static_cast<int64_t>(from.ids.size());
  for (int64_t first = 0; first < n;) {
    const bool cold = by_tier && first < from.cold;
    const int64_t end = std::min<int64_t>(first + 1000, cold ? from.cold : n);
    auto ids = absl::MakeConstSpan(from.ids).subspan(first, end - first);
    const float* rows = from.rows.data() + first * 2 * kDim;
    absl::Status s =
        cold ? to->ImportColdRows(ids, rows) : to->ImportRows(ids, rows);
    if (!s.ok()) return s;
    first = end;
  }
  return absl::OkStatus();
}

// A rejoin copies a PS's shards one after another into a PS with the same
// memory budget. The rows the source holds on disk go to the copy's disk,
// so the copy's memory holds what the source's held and every shard fits.
// Imported all to memory, the first shard takes the whole budget and the
// next cannot get a block: the rejoin failed so (netns bounded-tables
// test, 2 of 6 runs).
TEST(HashEmbeddingTierTest, ACopyImportedTierByTierFitsItsSourcesBudget) {
  const int64_t block_bytes = HashEmbeddingShard::BlockBytes(2 * kDim);
  const int64_t limit = 10 * block_bytes;
  int64_t source_memory = 0;
  Table first(0, "", SharedBudget(&source_memory, limit));
  Table second(0, "", SharedBudget(&source_memory, limit));
  std::mt19937_64 random(11);
  int64_t next_id = 1;
  for (int64_t step = 0; step < 120; ++step) {
    for (Table* table : {&first, &second}) {
      std::vector<int64_t> ids;
      for (int k = 0; k < 512; ++k) ids.push_back(next_id++ * 7919);
      std::vector<float> grads(ids.size() * kDim);
      for (float& g : grads) g = static_cast<float>(random() % 5) - 2;
      ASSERT_EQ(table->Push(ids, grads, step), absl::OkStatus());
    }
  }
  const ShardRows first_rows = Snapshot(*first.shard);
  const ShardRows second_rows = Snapshot(*second.shard);
  for (const ShardRows* rows : {&first_rows, &second_rows}) {
    ASSERT_GT(rows->cold, 20000);  // most rows on disk, some in memory
    ASSERT_GT(static_cast<int64_t>(rows->ids.size()) - rows->cold, 4096);
  }

  int64_t copy_memory = 0;
  Table first_copy(0, "", SharedBudget(&copy_memory, limit));
  Table second_copy(0, "", SharedBudget(&copy_memory, limit));
  ASSERT_EQ(Import(first_rows, first_copy.shard.get(), true), absl::OkStatus());
  ASSERT_EQ(Import(second_rows, second_copy.shard.get(), true),
            absl::OkStatus());
  EXPECT_EQ(first_copy.Export(), first.Export());
  EXPECT_EQ(second_copy.Export(), second.Export());
  EXPECT_EQ(first_copy.shard->row_counts().spilled_rows, first_rows.cold);
  EXPECT_EQ(second_copy.shard->row_counts().spilled_rows, second_rows.cold);
  EXPECT_LE(copy_memory, limit);
  // Imported again (a retried rejoin): the same rows, counted once.
  ASSERT_EQ(Import(first_rows, first_copy.shard.get(), true), absl::OkStatus());
  EXPECT_EQ(first_copy.Export(), first.Export());
  EXPECT_EQ(first_copy.shard->row_counts().spilled_rows, first_rows.cold);
  EXPECT_EQ(first_copy.shard->num_rows(), first.shard->num_rows());

  int64_t all_in_memory = 0;
  Table first_to_memory(0, "", SharedBudget(&all_in_memory, limit));
  Table second_to_memory(0, "", SharedBudget(&all_in_memory, limit));
  ASSERT_EQ(Import(first_rows, first_to_memory.shard.get(), false),
            absl::OkStatus());
  const absl::Status starved =
      Import(second_rows, second_to_memory.shard.get(), false);
  EXPECT_TRUE(absl::IsResourceExhausted(starved)) << starved;
}

TEST(HashEmbeddingTierTest, RowsTheTierCannotWriteStayInMemory) {
  Table tiered(/*max_rows=*/100, /*dir=*/"");
  Table reference(0, "");
  TrainBoth(&tiered, &reference, 200, 0, 11);
  const HashRowCounts before = tiered.shard->row_counts();
  ASSERT_GT(before.spilled_rows, 100);
  const int64_t in_memory = tiered.shard->num_rows() - before.spilled_rows;
  {
    tiered.memory->SetFull(true);
    // 40 ids never seen: their rows need room, the eviction cannot write.
    std::vector<int64_t> fresh(40);
    for (int k = 0; k < 40; ++k) fresh[k] = 1'000'000 + k;
    const absl::Status refused =
        tiered.Push(fresh, std::vector<float>(40 * kDim, 1.0f), 200);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(),
                                  "could not be written to the SSD tier"))
        << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "nothing was applied"))
        << refused;
    // A pull of long-spilled rows: promoting them would evict, which
    // cannot write: they are read where they are, none taken.
    std::vector<int64_t> cold;
    for (int i = 1000; i < 1030; ++i) cold.push_back(i * 7919 - 5000);
    EXPECT_EQ(tiered.Pull(cold), reference.Pull(cold));
    EXPECT_EQ(tiered.shard->row_counts().spilled_rows, before.spilled_rows);
    // A sweep of the rows above 90% of the share: written nowhere, kept.
    tiered.shard->EvictIdleRows(200);
    const HashRowCounts during = tiered.shard->row_counts();
    EXPECT_EQ(during.spilled_rows, before.spilled_rows);
    EXPECT_EQ(tiered.shard->num_rows() - during.spilled_rows, in_memory);
    EXPECT_EQ(tiered.shard->num_rows(), reference.shard->num_rows());
    EXPECT_EQ(tiered.Export(), reference.Export());
    tiered.memory->SetFull(false);
  }
  // The disk takes writes again: evictions spill, training goes on.
  TrainBoth(&tiered, &reference, 100, 201, 12);
  EXPECT_GT(tiered.shard->row_counts().spilled_rows, before.spilled_rows);
  EXPECT_EQ(tiered.Export(), reference.Export());
}

// A disk that cannot give spilled rows back loses none of them either: a
// push or a pull that needs such a row is refused, naming why, with
// nothing applied -- the row neither starts again from its initial value
// nor ends up in both tiers -- while the rest of the table trains on; once
// the disk reads right again, training goes on bit for bit.
TEST(HashEmbeddingTierTest, RowsTheTierCannotReadStayOnDisk) {
  Table tiered(/*max_rows=*/100, /*dir=*/"");
  Table reference(0, "");
  TrainBoth(&tiered, &reference, 200, 0, 21);
  const HashRowCounts before = tiered.shard->row_counts();
  ASSERT_GT(before.spilled_rows, 100);
  // Ten spilled ids.
  const std::vector<int64_t> spilled = tiered.SpilledIds();
  ASSERT_EQ(static_cast<int64_t>(spilled.size()), before.spilled_rows);
  const std::vector<int64_t> unreadable(spilled.begin(), spilled.begin() + 10);
  // Their records hold other ids now, as a disk giving back wrong bytes.
  for (int64_t id : unreadable)
    ASSERT_TRUE(tiered.memory->SetStoredId(id, ~id));

  // A push of an unreadable row, a new id and one in memory: refused.
  const std::vector<int64_t> ids = {unreadable[3], 3'000'000, -5000};
  const absl::Status refused =
      tiered.Push(ids, std::vector<float>(ids.size() * kDim, 1.0f), 200);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "could not read back the rows of this update"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "nothing applied"))
      << refused;
  // A pull of one: refused, not answered with initial values.
  std::vector<float> out(2 * kDim);
  const absl::StatusOr<int64_t> pulled =
      tiered.shard->Gather({-5000, unreadable[5]}, out.data());
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kDataLoss)
      << pulled.status();
  EXPECT_TRUE(absl::StrContains(pulled.status().message(), "this pull"))
      << pulled.status();
  // Pushes and pulls of other rows go on (spilled ones included).
  std::vector<int64_t> others;
  for (int i = 0; i < 400 && others.size() < 60; ++i) {
    const int64_t id = spilled[before.spilled_rows - 1 - i];
    if (std::find(unreadable.begin(), unreadable.end(), id) ==
        unreadable.end()) {
      others.push_back(id);
    }
  }
  for (int k = 0; k < 3; ++k) {
    const std::vector<int64_t> batch(others.begin() + 20 * k,
                                     others.begin() + 20 * (k + 1));
    const std::vector<float> grads(batch.size() * kDim, 0.5f - k);
    ASSERT_TRUE(tiered.Push(batch, grads, 201 + k).ok());
    ASSERT_TRUE(reference.Push(batch, grads, 201 + k).ok());
    EXPECT_EQ(tiered.Pull(batch), reference.Pull(batch));
  }

  // The disk reads right again: the refused rows are there, as trained.
  for (int64_t id : unreadable) ASSERT_TRUE(tiered.memory->SetStoredId(id, id));
  EXPECT_EQ(tiered.Pull(unreadable), reference.Pull(unreadable));
  EXPECT_EQ(tiered.shard->num_rows(), reference.shard->num_rows());
  EXPECT_EQ(tiered.Export(), reference.Export());  // each id once
  TrainBoth(&tiered, &reference, 100, 204, 22);
  EXPECT_EQ(tiered.Export(), reference.Export());
}

// A disk whose reads fail (an I/O error) loses no row either: a push or
// a pull that needs a spilled row is refused with that error, nothing
// applied, while the rows in memory train on; once reads work again, the
// table is the all-in-memory one bit for bit.
TEST(HashEmbeddingTierTest, RowsATierFailsToReadStayOnDisk) {
  Table tiered(/*max_rows=*/100, /*dir=*/"");
  Table reference(0, "");
  TrainBoth(&tiered, &reference, 200, 0, 31);
  const HashRowCounts before = tiered.shard->row_counts();
  ASSERT_GT(before.spilled_rows, 100);
  const std::vector<int64_t> spilled = tiered.SpilledIds();
  ASSERT_EQ(static_cast<int64_t>(spilled.size()), before.spilled_rows);
  std::vector<int64_t> in_memory;
  for (const auto& [id, row] : reference.Export()) {
    if (std::find(spilled.begin(), spilled.end(), id) == spilled.end()) {
      in_memory.push_back(id);
    }
  }
  ASSERT_GE(in_memory.size(), 60u);
  tiered.memory->FailReads(absl::InternalError(
      "in-memory cold tier: reading rows failed: Input/output error"));

  const std::vector<int64_t> ids = {in_memory[0], spilled[7]};
  const absl::Status refused =
      tiered.Push(ids, std::vector<float>(ids.size() * kDim, 1.0f), 200);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInternal) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "Input/output error"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "nothing applied"))
      << refused;
  std::vector<float> out(kDim);
  const absl::StatusOr<int64_t> pulled =
      tiered.shard->Gather({spilled[8]}, out.data());
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kInternal)
      << pulled.status();
  // The rows in memory train on.
  for (int k = 0; k < 3; ++k) {
    const std::vector<int64_t> batch(in_memory.begin() + 20 * k,
                                     in_memory.begin() + 20 * (k + 1));
    const std::vector<float> grads(batch.size() * kDim, 0.25f * (k + 1));
    ASSERT_TRUE(tiered.Push(batch, grads, 201 + k).ok());
    ASSERT_TRUE(reference.Push(batch, grads, 201 + k).ok());
    EXPECT_EQ(tiered.Pull(batch), reference.Pull(batch));
  }
  EXPECT_EQ(tiered.shard->row_counts().spilled_rows, before.spilled_rows);

  tiered.memory->FailReads(absl::OkStatus());
  EXPECT_EQ(tiered.Pull(spilled), reference.Pull(spilled));
  EXPECT_EQ(tiered.shard->num_rows(), reference.shard->num_rows());
  EXPECT_EQ(tiered.Export(), reference.Export());
  TrainBoth(&tiered, &reference, 100, 204, 32);
  EXPECT_EQ(tiered.Export(), reference.Export());
}

// All of a push's row work is Prepare's: an eviction between Prepare and
// the locks (here another push making room at max_rows) spills a row the
// prepared update carries; the check step under the lock takes it back
// from the tier, and the update lands on its values and slots. With the
// tier failing its reads at that moment the push is refused, nothing
// applied, and the row stays on disk.
TEST(HashEmbeddingTierTest, ARowSpilledAfterPrepareComesBackBeforeApply) {
  Table reference(0, "");
  Table tiered(/*max_rows=*/4, /*dir=*/"");
  auto grads = [](size_t ids, float g) {
    return std::vector<float>(ids * kDim, g);
  };
  for (Table* t : {&tiered, &reference}) {
    ASSERT_TRUE(t->Push({1, 2, 3, 4}, grads(4, 0.5f), 0).ok());
  }
  const std::vector<float> late = grads(1, 0.25f);
  auto prepare = [&](ShardUpdate* update) {
    update->learning_rate = 0.1f;
    update->global_step = 10;
    update->ids = {1};
    update->grads = {
        PayloadView::Contiguous(late.data(), late.size() * sizeof(float))};
    ASSERT_TRUE(tiered.shard->Prepare(update, 1.0f).ok());
    ASSERT_EQ(update->rows.size(), 1u);
    ASSERT_NE(update->rows[0], RowTable::kNoRow);
  };
  auto check_and_apply = [&](ShardUpdate* update) {
    absl::MutexLock lock(tiered.shard->mutex());
    if (absl::Status s = tiered.shard->CheckLocked(update); !s.ok()) return s;
    std::vector<float> undo(tiered.shard->UndoFloats(*update));
    return tiered.shard->ApplyLocked(*update, undo.data());
  };

  // Refused: the tier cannot read the row back.
  ShardUpdate refused;
  prepare(&refused);
  for (Table* t : {&tiered, &reference}) {
    ASSERT_TRUE(t->Push({5, 6, 7, 8}, grads(4, 0.75f), 5).ok());
  }
  ASSERT_EQ(tiered.shard->row_counts().spilled_rows, 4);  // 1..4 on disk
  tiered.memory->FailReads(absl::InternalError(
      "in-memory cold tier: reading rows failed: Input/output error"));
  const absl::Status s = check_and_apply(&refused);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "nothing applied")) << s;
  tiered.memory->FailReads(absl::OkStatus());
  auto on_disk = [&](int64_t id) {
    const std::vector<int64_t> spilled = tiered.SpilledIds();
    return std::find(spilled.begin(), spilled.end(), id) != spilled.end();
  };
  EXPECT_TRUE(on_disk(1));
  EXPECT_EQ(tiered.Export(), reference.Export());

  // Applied: prepared while 1 was in memory, spilled again before the
  // locks, and taken back by the check step (counted as promoted there,
  // before the apply step runs).
  ShardUpdate update;
  prepare(&update);  // promotes 1 (evicting one of 5..8)
  for (Table* t : {&tiered, &reference}) {
    ASSERT_TRUE(t->Push({9, 10, 11, 12}, grads(4, 1.0f), 6).ok());
  }
  const HashRowCounts before = tiered.shard->row_counts();
  ASSERT_TRUE(on_disk(1));
  {
    absl::MutexLock lock(tiered.shard->mutex());
    ASSERT_TRUE(tiered.shard->CheckLocked(&update).ok());
  }
  EXPECT_EQ(tiered.shard->row_counts().promoted_rows, before.promoted_rows + 1);
  {
    absl::MutexLock lock(tiered.shard->mutex());
    std::vector<float> undo(tiered.shard->UndoFloats(update));
    ASSERT_TRUE(tiered.shard->ApplyLocked(update, undo.data()).ok());
  }
  ASSERT_TRUE(reference.Push({1}, late, 10).ok());
  EXPECT_EQ(tiered.shard->num_rows(), reference.shard->num_rows());
  EXPECT_EQ(tiered.Export(), reference.Export());  // values and slots
}

}  // namespace
}  // namespace psrt
