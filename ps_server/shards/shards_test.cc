#include <unistd.h>

#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/dense_shard.h"
#include "ps_server/shards/embedding_shard.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "ps_server/shards/shard_digest.h"
#include "tests/process_rss.h"

namespace psrt {
namespace {

ShardMap MapWith(VariableSpec spec) {
  EXPECT_TRUE(NormalizeVariableSpec(&spec).ok());
  ShardMap map(1);
  EXPECT_TRUE(map.Add(spec).ok());
  return map;
}

VariableSpec Spec(VariableKind kind, std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind opt,
                  PartitionSpec::Routing routing = PartitionSpec::DIV) {
  VariableSpec s;
  s.set_name("v");
  s.set_kind(kind);
  for (int64_t d : shape) s.add_shape(d);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_partition()->set_routing(routing);
  s.mutable_optimizer()->set_kind(opt);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  s.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  s.mutable_initializer()->set_min(-1);
  s.mutable_initializer()->set_max(1);
  s.mutable_initializer()->set_seed(3);
  return s;
}

PayloadView View(const std::vector<float>& v) {
  return PayloadView::Contiguous(v.data(), v.size() * sizeof(float));
}

TEST(DenseShardTest, InitializesFromGlobalRowsAndAppliesRanges) {
  ShardMap map = MapWith(Spec(DENSE, {10, 3}, 2, OptimizerSpec::SGD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  DenseShard shard1(layout, 1, opt.get(), init);  // rows 5..9
  ASSERT_EQ(shard1.size(), 15);
  std::vector<float> values(15);
  EXPECT_EQ(shard1.Read(0, 15, values.data()), 0);
  EXPECT_EQ(values[0], init.Value(5, 0));  // global row 5, column 0
  EXPECT_EQ(values[14], init.Value(9, 2));

  // One update made of two pieces: one version step.
  std::vector<float> g1 = {1, 1}, g2 = {2, 2, 2};
  shard1.Apply({{0, 2, View(g1)}, {12, 3, View(g2)}}, 0.5f);
  EXPECT_EQ(shard1.version(), 1);
  std::vector<float> after(15);
  shard1.Read(0, 15, after.data());
  EXPECT_FLOAT_EQ(after[0], values[0] - 0.5f);
  EXPECT_FLOAT_EQ(after[2], values[2]);
  EXPECT_FLOAT_EQ(after[14], values[14] - 1.0f);
  EXPECT_EQ(shard1.bytes(), 15 * 4);
}

TEST(EmbeddingShardTest, ModRoutedRowsKeepSlotsBesideValues) {
  ShardMap map = MapWith(
      Spec(EMBEDDING, {100, 4}, 3, OptimizerSpec::ADAGRAD, PartitionSpec::MOD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  EmbeddingShard shard(layout, 2, opt.get(), init);  // ids 2, 5, 8, ...
  EXPECT_EQ(shard.num_rows(), 33);
  EXPECT_EQ(shard.bytes(), 33 * 4 * 2 * 4);  // values + accumulator
  std::vector<int64_t> ids = {5, 98, 5};
  std::vector<float> rows(12);
  ASSERT_TRUE(shard.Gather(ids, rows.data()).ok());
  EXPECT_EQ(rows[0], init.Value(5, 0));
  EXPECT_EQ(rows[4], init.Value(98, 0));
  EXPECT_EQ(rows[8], rows[0]);

  std::vector<int64_t> unique = {98};
  std::vector<float> g = {3, 0, 0, 0};
  shard.Apply(unique, {View(g)}, 1.0f);
  std::vector<float> after(4);
  ASSERT_TRUE(shard.Gather(unique, after.data()).ok());
  // Adagrad from accumulator 0.1: 3 / sqrt(9.1).
  EXPECT_NEAR(after[0], rows[4] - 3.0f / std::sqrt(9.1f), 1e-6);
  EXPECT_EQ(after[1], rows[5]);
}

// An update that overflows one row is reported, and UndoRowsLocked puts every
// row (values and slots) and the version back exactly.
TEST(EmbeddingShardTest, OverflowingUpdateIsReportedAndUndoneExactly) {
  ShardMap map = MapWith(Spec(EMBEDDING, {100, 4}, 1, OptimizerSpec::ADAGRAD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  EmbeddingShard shard(layout, 0, opt.get(), init);
  std::vector<int64_t> ids = {7, 40, 99};
  int64_t version;
  std::vector<float> all_before(100 * shard.row_stride());
  shard.ExportRows(0, 100, nullptr, all_before.data(), &version);
  std::vector<float> g = {1, 1, 1, 1, 2e19f, 0, 0, 0, 1, 1, 1, 1};
  std::vector<float> undo(3 * shard.row_stride());
  {
    absl::MutexLock lock(shard.mutex());
    absl::Status s = shard.ApplyRowsLocked(ids, {View(g)}, 1.0f, undo.data());
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("row of id 40 inf at float 4"),
              std::string::npos)
        << s;
    shard.UndoRowsLocked(ids, undo.data());
  }
  std::vector<float> all_after(all_before.size());
  int64_t version_after;
  shard.ExportRows(0, 100, nullptr, all_after.data(), &version_after);
  EXPECT_EQ(all_after, all_before);
  EXPECT_EQ(version_after, version);
  // A finite update through the same path is applied.
  g[4] = 1;
  absl::MutexLock lock(shard.mutex());
  EXPECT_TRUE(shard.ApplyRowsLocked(ids, {View(g)}, 1.0f, undo.data()).ok());
}

TEST(HashEmbeddingShardTest, CapacityIsAHardLimitAndPullsStoreNothing) {
  ShardMap map = MapWith(Spec(HASH_EMBEDDING, {10, 2}, 1, OptimizerSpec::SGD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  HashEmbeddingShard shard(layout, 0, opt.get(), init);
  EXPECT_EQ(shard.capacity(), 10);
  std::vector<int64_t> ids(10);
  std::iota(ids.begin(), ids.end(), 1000);
  std::vector<float> out(20);
  ASSERT_TRUE(shard.Gather(ids, out.data()).ok());
  EXPECT_EQ(shard.num_rows(), 0);
  ASSERT_TRUE(shard.EnsureRows(ids).ok());
  EXPECT_EQ(shard.num_rows(), 10);
  // Existing ids need no room; a new one does not fit.
  EXPECT_TRUE(shard.EnsureRows(ids).ok());
  std::vector<int64_t> one_more = {5, 1000};
  absl::Status s = shard.EnsureRows(one_more);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("shard 0 is full: 10 rows + 1 new"),
            std::string::npos)
      << s;
  EXPECT_EQ(shard.num_rows(), 10);
  // Rows span blocks without moving: fill past one block on a bigger shard.
  ShardMap big = MapWith(Spec(HASH_EMBEDDING, {0, 2}, 1, OptimizerSpec::SGD));
  HashEmbeddingShard unbounded(*big.Find("v"), 0, opt.get(), init);
  std::vector<int64_t> many(3 * HashEmbeddingShard::kRowsPerBlock + 5);
  std::iota(many.begin(), many.end(), -77);
  ASSERT_TRUE(unbounded.EnsureRows(many).ok());
  std::vector<float> grads(many.size() * 2, 1.0f);
  unbounded.Apply(many, {View(grads)}, 1.0f);
  std::vector<float> values(many.size() * 2);
  ASSERT_TRUE(unbounded.Gather(many, values.data()).ok());
  for (size_t i = 0; i < many.size(); ++i) {
    ASSERT_FLOAT_EQ(values[i * 2 + 1], init.Value(many[i], 1) - 1.0f) << i;
  }
  EXPECT_GT(unbounded.bytes(), static_cast<int64_t>(many.size()) * 2 * 4);
}

// The push protocol on a hash shard: Prepare finds (and creates) the rows
// once and ApplyLocked updates them; repeated ids, new ones among them, are
// summed into one row; a refused update is undone exactly.
TEST(HashEmbeddingShardTest, PreparedRowsAreAppliedAndRepeatsSummed) {
  ShardMap map = MapWith(Spec(HASH_EMBEDDING, {0, 2}, 1, OptimizerSpec::SGD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  HashEmbeddingShard shard(layout, 0, opt.get(), init);
  std::vector<int64_t> old_ids(5000);
  std::iota(old_ids.begin(), old_ids.end(), 100);
  ASSERT_TRUE(shard.EnsureRows(old_ids).ok());

  // 7 appears three times (new), 150 twice (existing), 9 once (new).
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.ids = {7, 150, 7, 9, 150, 7};
  const std::vector<float> grads = {1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60};
  update.grads = {View(grads)};
  ASSERT_TRUE(shard.Prepare(&update, 1.0f).ok());
  ASSERT_EQ(update.ids, (std::vector<int64_t>{7, 150, 9}));
  ASSERT_EQ(update.rows.size(), 3u);
  EXPECT_EQ(shard.num_rows(), 5002);
  {
    absl::MutexLock lock(shard.mutex());
    std::vector<float> undo(3 * shard.row_stride());
    ASSERT_TRUE(shard.ApplyLocked(update, undo.data()).ok());
  }
  std::vector<float> values(6);
  ASSERT_TRUE(shard.Gather(update.ids, values.data()).ok());
  EXPECT_FLOAT_EQ(values[0], init.Value(7, 0) - (1 + 3 + 6));
  EXPECT_FLOAT_EQ(values[1], init.Value(7, 1) - (10 + 30 + 60));
  EXPECT_FLOAT_EQ(values[2], init.Value(150, 0) - (2 + 5));
  EXPECT_FLOAT_EQ(values[4], init.Value(9, 0) - 4);

  // An overflowing update is refused and leaves every row as it was.
  ShardUpdate bad;
  bad.learning_rate = 1.0f;
  bad.ids = {9, 151};
  const std::vector<float> huge = {1, 1, 3e38f, -3e38f};
  bad.grads = {View(huge)};
  ASSERT_TRUE(shard.Prepare(&bad, 1e38f).ok());
  std::vector<float> before(4), after(4);
  ASSERT_TRUE(shard.Gather(bad.ids, before.data()).ok());
  {
    absl::MutexLock lock(shard.mutex());
    std::vector<float> undo(2 * shard.row_stride());
    absl::Status s = shard.ApplyLocked(bad, undo.data());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("id 151"), std::string::npos) << s;
    shard.UndoLocked(bad, undo.data());
  }
  ASSERT_TRUE(shard.Gather(bad.ids, after.data()).ok());
  EXPECT_EQ(before, after);
}

// A push large enough to be applied and gathered on several threads, its
// gradient in three pieces whose wire slices cut rows at odd byte offsets
// (rows straddling slices are assembled in a buffer): every row gets
// exactly its own gradient.
TEST(HashEmbeddingShardTest, LargeSlicedPushesApplyEachRowItsOwnGradient) {
  ShardMap map = MapWith(Spec(HASH_EMBEDDING, {0, 3}, 1, OptimizerSpec::SGD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  HashEmbeddingShard shard(layout, 0, opt.get(), init);
  const size_t n = 5 * kParallelRows + 7;
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(i * 7919 + 3);
  std::vector<float> grads(n * 3);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * (i % 997);
  // Three pieces of about a third of the rows each; each piece cut into
  // slices every 4,099 bytes (not a multiple of a row or of a float).
  const char* bytes = reinterpret_cast<const char*>(grads.data());
  const size_t row_bytes = 3 * sizeof(float);
  const size_t piece_rows[3] = {n / 3, n / 3, n - 2 * (n / 3)};
  std::vector<std::vector<absl::string_view>> slices(3);
  std::vector<PayloadView> pieces;
  size_t offset = 0;
  for (int p = 0; p < 3; ++p) {
    const size_t size = piece_rows[p] * row_bytes;
    for (size_t at = 0; at < size; at += 4099) {
      slices[p].emplace_back(bytes + offset + at,
                             std::min<size_t>(4099, size - at));
    }
    pieces.emplace_back(slices[p].data(), slices[p].size(), size);
    offset += size;
  }
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.ids = ids;
  update.grads = pieces;
  ASSERT_TRUE(shard.Prepare(&update, 1.0f).ok());
  {
    absl::MutexLock lock(shard.mutex());
    std::vector<float> undo(n * shard.row_stride());
    ASSERT_TRUE(shard.ApplyLocked(update, undo.data()).ok());
  }
  std::vector<float> values(n * 3);
  ASSERT_TRUE(shard.Gather(ids, values.data()).ok());
  for (size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      ASSERT_FLOAT_EQ(values[i * 3 + d],
                      init.Value(ids[i], d) - grads[i * 3 + d])
          << "row " << i << " float " << d;
    }
  }
}

TEST(DenseShardTest, ConcurrentReadsNeverSeeHalfAnUpdate) {
  VariableSpec spec = Spec(DENSE, {4096}, 1, OptimizerSpec::SGD);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  ShardMap map = MapWith(spec);
  auto opt = CreateOptimizer(map.Find("v")->spec.optimizer());
  DenseShard shard(*map.Find("v"), 0, opt.get(),
                   Initializer(map.Find("v")->spec.initializer()));
  std::vector<float> ones(4096, 1.0f);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    std::vector<float> v(4096);
    while (!stop) {
      shard.Read(0, 4096, v.data());
      for (float x : v) torn += x != v[0];
    }
  });
  for (int i = 0; i < 2000; ++i) shard.Apply({{0, 4096, View(ones)}}, 1.0f);
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  std::vector<float> v(1);
  shard.Read(4095, 1, v.data());
  EXPECT_EQ(v[0], -2000.0f);
}

// psctl replicas digests every shard: a dense [2, 2e6] one (two rows of 8
// MB) once needed 4096 rows' worth of buffer (32 GB: the call failed), and
// a [2, 120000] one took 1.9 GB. The digest reads rows in chunks of at
// most 4 MiB (one row at least), so its peak is under 2x the shard.
TEST(ShardDigestTest, AWideDenseShardIsDigestedWithinTwiceItsSize) {
  ShardMap map = MapWith(Spec(DENSE, {2, 2000000}, 1, OptimizerSpec::SGD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  DenseShard shard(layout, 0, opt.get(), init);
  DenseShard copy(layout, 0, opt.get(), init);
  EXPECT_EQ(DigestChunkRows(shard), 1);
  const int64_t shard_bytes = 2 * 2000000 * sizeof(float);
  ResetPeakRss();
  const int64_t before = RssBytes(getpid());
  const uint64_t digest = ShardDigest(shard);
  const int64_t peak_growth = PeakRssBytes(getpid()) - before;
  std::printf("digest of a %lld-byte shard: peak RSS growth %lld bytes\n",
              static_cast<long long>(shard_bytes),
              static_cast<long long>(peak_growth));
  EXPECT_LT(peak_growth, 2 * shard_bytes);
  EXPECT_EQ(ShardDigest(copy), digest) << "equal copies digest equal";
  std::vector<float> grad(2000000, 0.0f);
  grad[1999999] = 1.0f;
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.ranges.push_back({2000000, 2000000, View(grad)});
  ASSERT_EQ(shard.Prepare(&update, 1.0f), absl::OkStatus());
  {
    absl::MutexLock lock(shard.mutex());
    std::vector<float> undo(shard.UndoFloats(update));
    ASSERT_EQ(shard.ApplyLocked(update, undo.data()), absl::OkStatus());
  }
  EXPECT_NE(ShardDigest(shard), digest) << "one changed float shows";
}

TEST(ShardDigestTest, ChunksHoldNoMoreRowsThanTheShard) {
  ShardMap map = MapWith(Spec(EMBEDDING, {10, 4}, 1, OptimizerSpec::ADAGRAD));
  const VariableLayout& layout = *map.Find("v");
  auto opt = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  EmbeddingShard shard(layout, 0, opt.get(), init);
  EXPECT_EQ(DigestChunkRows(shard), 10);
}

}  // namespace
}  // namespace psrt
