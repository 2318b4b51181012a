// Micro-benchmarks of the shard hot paths: embedding gather and optimizer
// apply over random rows of a table larger than the caches.
//   bazel run -c opt //ps_server:shard_benchmark
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/embedding_shard.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "ps_server/shards/row_spill_store.h"

namespace psrt {
namespace {

struct Table {
  explicit Table(OptimizerSpec::Kind kind, int64_t rows, int64_t dim) : map(1) {
    VariableSpec s;
    s.set_name("t");
    s.set_kind(EMBEDDING);
    s.add_shape(rows);
    s.add_shape(dim);
    s.mutable_optimizer()->set_kind(kind);
    s.mutable_optimizer()->set_learning_rate(0.01f);
    NormalizeVariableSpec(&s).IgnoreError();
    map.Add(s).IgnoreError();
    optimizer = CreateOptimizer(map.Find("t")->spec.optimizer());
    shard = std::make_unique<EmbeddingShard>(*map.Find("t"), 0, optimizer.get(),
                                             Initializer(s.initializer()));
  }
  ShardMap map;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<EmbeddingShard> shard;
};

// 16 batches of n unique random ids: cycling through them keeps the rows
// out of the caches, as in training (a fixed batch would stay cache-warm).
std::vector<std::vector<int64_t>> RandomBatches(int64_t vocab, int64_t n) {
  std::vector<int64_t> all(vocab);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(1);
  std::vector<std::vector<int64_t>> batches(16);
  for (auto& batch : batches) {
    std::shuffle(all.begin(), all.end(), rng);
    batch.assign(all.begin(), all.begin() + n);
  }
  return batches;
}

// Rows of a truncated normal initializer (the models' embeddings: what a
// hash-embedding row costs at its first touch), per row of state.range(0)
// floats.
void BM_InitializeNormalRows(benchmark::State& state) {
  InitializerSpec spec;
  spec.set_kind(InitializerSpec::TRUNCATED_NORMAL);
  spec.set_stddev(0.01f);
  spec.set_seed(3);
  const Initializer init(spec);
  const int64_t width = state.range(0);
  std::vector<float> row(width);
  int64_t id = 1;
  for (auto _ : state) {
    for (int i = 0; i < 1000; ++i) init.FillRow(id++ * 7919, width, row.data());
    benchmark::DoNotOptimize(row.data());
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_InitializeNormalRows)->Arg(1)->Arg(8)->Arg(16);

void BM_Apply(benchmark::State& state) {
  const auto kind = static_cast<OptimizerSpec::Kind>(state.range(0));
  const int64_t vocab = state.range(1);
  Table table(kind, vocab, 16);
  const auto batches = RandomBatches(vocab, 100000);
  std::vector<float> grads(100000 * 16, 0.01f);
  const PayloadView view =
      PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float));
  size_t next = 0;
  for (auto _ : state) table.shard->Apply(batches[next++ % 16], {view}, 0.01f);
  state.SetItemsProcessed(state.iterations() * 100000);
  state.SetLabel(OptimizerSpec::Kind_Name(kind));
}
BENCHMARK(BM_Apply)
    ->ArgsProduct({{OptimizerSpec::SGD, OptimizerSpec::ADAGRAD,
                    OptimizerSpec::ADAM, OptimizerSpec::FTRL},
                   {100000, 1000000}})
    ->Unit(benchmark::kMillisecond);

// One shard's part of a push as the push handler applies it (shard.h):
// Prepare, then under the lock CheckLocked and ApplyLocked, with the undo
// space only where the shard still needs it. `bounds`: the gradient's
// largest magnitude is known, so the value bounds may prove the update
// finite (shard_bounds.h); else every row is saved for undo and checked.
void ApplyAsPushed(Shard& shard, ShardUpdate& update, float max_abs_grad,
                   bool bounds, float* undo) {
  update.max_abs_grad =
      bounds ? max_abs_grad : std::numeric_limits<float>::infinity();
  shard.Prepare(&update, 1.0f).IgnoreError();
  absl::MutexLock lock(shard.mutex());
  shard.CheckLocked(&update).IgnoreError();
  shard.ApplyLocked(update, shard.NeedsUndoLocked(update) ? undo : nullptr)
      .IgnoreError();
}

// Pushes of 100k rows of width `dim` (gradients 0.01, rate 0.01) from
// `batches` in turn, as ApplyAsPushed applies them; `rewrite_ids` (if set)
// changes each push's ids first.
void RunPushes(
    benchmark::State& state, Shard& shard,
    const std::vector<std::vector<int64_t>>& batches, int64_t dim, bool bounds,
    const std::function<void(std::vector<int64_t>&)>& rewrite_ids = nullptr) {
  std::vector<float> grads(100000 * dim, 0.01f);
  std::vector<float> undo(100000 * shard.row_stride());
  const PayloadView view =
      PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float));
  size_t next = 0;
  for (auto _ : state) {
    ShardUpdate update;
    update.learning_rate = 0.01f;
    update.ids = batches[next++ % batches.size()];
    if (rewrite_ids) rewrite_ids(update.ids);
    update.grads = {view};
    ApplyAsPushed(shard, update, 0.01f, bounds, undo.data());
  }
  state.SetItemsProcessed(state.iterations() * 100000);
}

// The push path's apply of 100k random rows of a known-vocabulary table,
// dim 16, optimizer and vocabulary as the first two arguments, the third
// 1 where the value bounds may prove updates finite, 0 where every row is
// saved for undo and checked.
void BM_ApplyChecked(benchmark::State& state) {
  const auto kind = static_cast<OptimizerSpec::Kind>(state.range(0));
  const int64_t vocab = state.range(1);
  Table table(kind, vocab, 16);
  RunPushes(state, *table.shard, RandomBatches(vocab, 100000), 16,
            state.range(2) != 0);
  state.SetLabel(OptimizerSpec::Kind_Name(kind) +
                 (state.range(2) ? " bounds" : " undo"));
}
BENCHMARK(BM_ApplyChecked)
    ->ArgsProduct({{OptimizerSpec::SGD, OptimizerSpec::ADAGRAD},
                   {100000, 1000000},
                   {0, 1}})
    ->Unit(benchmark::kMillisecond);

void BM_Gather(benchmark::State& state) {
  Table table(OptimizerSpec::ADAGRAD, 1000000, 16);
  const auto batches = RandomBatches(1000000, 100000);
  std::vector<float> out(100000 * 16);
  size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        table.shard->Gather(batches[next++ % 16], out.data()).ok());
  }
  state.SetItemsProcessed(state.iterations() * 100000);
}
BENCHMARK(BM_Gather)->Unit(benchmark::kMillisecond);

// A HASH_EMBEDDING shard (the kind DeepFM's tables are) holding `rows`
// rows of `dim` floats, every id pushed once so every row exists.
// With `admission_min_count` > 1 the rows are imported (as from a
// checkpoint: admitted), since pushes would not create them.
struct HashTable {
  HashTable(int64_t rows, int64_t dim, int admission_min_count = 0,
            int64_t ttl_steps = 0, int64_t max_rows = 0,
            const std::string& tier_dir = "")
      : map(1) {
    VariableSpec s;
    s.set_name("h");
    s.set_kind(HASH_EMBEDDING);
    s.add_shape(0);
    s.add_shape(dim);
    s.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    s.mutable_optimizer()->set_learning_rate(0.01f);
    s.mutable_admission()->set_min_count(admission_min_count);
    s.mutable_eviction()->set_ttl_steps(ttl_steps);
    s.mutable_eviction()->set_max_rows(max_rows);
    if (!tier_dir.empty()) s.mutable_storage()->set_tier(StorageSpec::SSD);
    NormalizeVariableSpec(&s).IgnoreError();
    map.Add(s).IgnoreError();
    optimizer = CreateOptimizer(map.Find("h")->spec.optimizer());
    std::unique_ptr<RowSpillStore> store;
    if (!tier_dir.empty()) {
      store =
          *RowSpillStore::Open(tier_dir, dim * (1 + optimizer->num_slots()));
    }
    shard = std::make_unique<HashEmbeddingShard>(
        *map.Find("h"), 0, optimizer.get(), Initializer(s.initializer()),
        nullptr, false, std::move(store));
    std::vector<int64_t> ids(rows);
    // Ids as a CTR hash spreads them, not 0..rows-1 in order.
    std::mt19937_64 rng(7);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng());
    if (admission_min_count > 1) {
      std::vector<float> values(rows * shard->row_stride(), 0.1f);
      shard->ImportRows(ids, values.data()).IgnoreError();
    } else {
      // With max_rows, in pieces a push could bring.
      const int64_t piece = max_rows > 0 ? max_rows / 2 : rows;
      for (int64_t first = 0; first < rows; first += piece) {
        shard->EnsureRows(absl::MakeConstSpan(ids).subspan(first, piece))
            .IgnoreError();
      }
    }
    all_ids = std::move(ids);
  }
  // 16 batches of n distinct ids of the table.
  std::vector<std::vector<int64_t>> Batches(int64_t n) const {
    std::vector<int64_t> all = all_ids;
    std::mt19937_64 rng(1);
    std::vector<std::vector<int64_t>> batches(16);
    for (auto& batch : batches) {
      std::shuffle(all.begin(), all.end(), rng);
      batch.assign(all.begin(), all.begin() + n);
    }
    return batches;
  }
  ShardMap map;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<HashEmbeddingShard> shard;
  std::vector<int64_t> all_ids;
};

// The push path of a hash embedding as the push handler drives it
// (ApplyAsPushed: repeats checked, rows ensured, value bounds or undo as
// the second argument says); 100k ids of a 1M-row table; dim 8 and 16.
void BM_HashApplyChecked(benchmark::State& state) {
  const int64_t dim = state.range(0);
  HashTable table(1000000, dim);
  RunPushes(state, *table.shard, table.Batches(100000), dim,
            state.range(1) != 0);
  state.SetLabel(state.range(1) ? "bounds" : "undo");
}
BENCHMARK(BM_HashApplyChecked)
    ->ArgsProduct({{8, 16}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// Feature admission's cost on the push path: 100k ids of a 1M-row table
// (dim 16, all rows admitted), of which state.range(0) percent are replaced
// by ids the table has never seen (fresh in every push: counted in the
// sketch and dropped); state.range(1) = 1 with admission (min_count 3), 0
// without (the fresh ids then get rows: the table grows).
void BM_HashAdmissionPush(benchmark::State& state) {
  const int64_t unseen_percent = state.range(0);
  const bool admission = state.range(1) != 0;
  HashTable table(1000000, 16, admission ? 3 : 0);
  std::mt19937_64 rng(11);
  RunPushes(state, *table.shard, table.Batches(100000), 16, true,
            [&](std::vector<int64_t>& ids) {
              for (int64_t i = 0; i < 100000 * unseen_percent / 100; ++i) {
                ids[i] = static_cast<int64_t>(rng());  // never seen before
              }
            });
  state.SetLabel(admission ? "admission min_count 3" : "no admission");
}
BENCHMARK(BM_HashAdmissionPush)
    ->ArgsProduct({{0, 50}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// Eviction's cost to pushes: pushes of 100k ids (90k of a 1M-row dim-16
// table, 10k never seen before: created by the push and never pushed
// again), each at the next global step, on a table with eviction (ttl 32
// steps: the table's ids come back about every 11 pushes and stay) while
// (state.range(0) = 1) another thread sweeps every 100 ms (EvictIdleRows:
// 8,192 rows per hold of the shard's lock; the server's default is every
// second), or (0) nothing sweeps and the table grows; (2) the table has
// max_rows 1M instead, full from the start: pushes make room for their
// fresh ids themselves and the sweep trims to 90%. Reports each push's
// latency: the mean and p99 as counters (ms).
void BM_HashPushDuringEviction(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const bool sweeping = mode != 0;
  HashTable table(1000000, 16, 0, /*ttl_steps=*/mode == 2 ? 0 : 32,
                  /*max_rows=*/mode == 2 ? 1000000 : 0);
  auto batches = table.Batches(100000);
  std::vector<float> grads(100000 * 16, 0.01f);
  std::vector<float> undo(100000 * table.shard->row_stride());
  const PayloadView view =
      PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float));
  std::atomic<int64_t> step{0};
  absl::Notification done;
  std::thread sweeper([&] {
    if (!sweeping) return;
    while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      table.shard->EvictIdleRows(step.load());
    }
  });
  std::vector<double> ms;
  size_t next = 0;
  int64_t fresh = int64_t{1} << 50;
  for (auto _ : state) {
    ShardUpdate update;
    update.learning_rate = 0.01f;
    update.global_step = step.load();
    update.ids = batches[next++ % batches.size()];
    for (int i = 0; i < 10000; ++i) update.ids[i] = fresh++;
    update.grads = {view};
    const auto start = std::chrono::steady_clock::now();
    ApplyAsPushed(*table.shard, update, 0.01f, true, undo.data());
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
    ++step;
  }
  done.Notify();
  sweeper.join();
  std::sort(ms.begin(), ms.end());
  state.counters["p99_ms"] = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  state.counters["mean_ms"] =
      std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  state.counters["evicted"] =
      static_cast<double>(table.shard->row_counts().evicted_rows);
  state.counters["rows_after"] = static_cast<double>(table.shard->num_rows());
  state.SetLabel(mode == 2  ? "max_rows, full"
                 : sweeping ? "ttl, sweeping"
                            : "ttl, no sweep");
}
BENCHMARK(BM_HashPushDuringEviction)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(300)
    ->Unit(benchmark::kMillisecond);

// The SSD tier on the row path: each iteration pulls, then pushes
// (Adagrad), 4,096 ids drawn Zipf(1.05) from a table of 1M rows of 16
// floats -- (0) all in memory, or (1) with max_rows at a quarter of the
// table and an SSD tier (a row file in $TMPDIR) holding the rest, the hot
// rows in memory. Rows per second of pull + push; the tier's promotions
// per iteration as a counter.
void BM_HashTierZipf(benchmark::State& state) {
  const bool tier = state.range(0) == 1;
  constexpr int64_t kRows = 1 << 20;
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/psrt-bench-tier");
  HashTable table(kRows, 16, 0, 0, tier ? kRows / 4 : 0, tier ? dir : "");
  std::vector<double> cdf(kRows);
  double sum = 0;
  for (int64_t i = 0; i < kRows; ++i) cdf[i] = (sum += std::pow(i + 1, -1.05));
  std::mt19937_64 rng(3);
  // Fresh draws every iteration (drawn with the timer paused): the tail of
  // the distribution keeps arriving, as a stream's would.
  auto draw = [&](std::vector<int64_t>* batch) {
    batch->clear();
    for (int i = 0; i < 4096; ++i) {
      const double u = std::uniform_real_distribution<double>(0, sum)(rng);
      batch->push_back(
          table.all_ids[std::lower_bound(cdf.begin(), cdf.end(), u) -
                        cdf.begin()]);
    }
    std::sort(batch->begin(), batch->end());
    batch->erase(std::unique(batch->begin(), batch->end()), batch->end());
  };
  // Warm up: memory holds the hot rows the draws found.
  std::vector<int64_t> ids;
  std::vector<float> warm(4096 * 16);
  for (int i = 0; i < 200; ++i) {
    draw(&ids);
    benchmark::DoNotOptimize(table.shard->Gather(ids, warm.data()).ok());
    table.shard->EnsureRows(ids).IgnoreError();
  }
  std::vector<float> grads(4096 * 16, 0.01f);
  std::vector<float> out(4096 * 16);
  std::vector<float> undo(4096 * table.shard->row_stride());
  const int64_t promoted_before = table.shard->row_counts().promoted_rows;
  int64_t rows = 0, step = 0;
  for (auto _ : state) {
    state.PauseTiming();
    draw(&ids);
    state.ResumeTiming();
    benchmark::DoNotOptimize(table.shard->Gather(ids, out.data()).ok());
    ShardUpdate update;
    update.learning_rate = 0.01f;
    update.global_step = step++;
    update.ids = ids;
    update.grads = {
        PayloadView::Contiguous(grads.data(), ids.size() * 16 * sizeof(float))};
    ApplyAsPushed(*table.shard, update, 0.01f, true, undo.data());
    rows += static_cast<int64_t>(ids.size());
  }
  state.SetItemsProcessed(rows);
  const HashRowCounts counts = table.shard->row_counts();
  state.counters["promoted_per_iter"] =
      static_cast<double>(counts.promoted_rows - promoted_before) /
      state.iterations();
  state.counters["on_disk"] = static_cast<double>(counts.spilled_rows);
  state.SetLabel(tier ? "max_rows 1/4 + SSD tier" : "all in memory");
}
BENCHMARK(BM_HashTierZipf)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_HashGather(benchmark::State& state) {
  const int64_t dim = state.range(0);
  HashTable table(1000000, dim);
  const auto batches = table.Batches(100000);
  std::vector<float> out(100000 * dim);
  size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        table.shard->Gather(batches[next++ % 16], out.data()).ok());
  }
  state.SetItemsProcessed(state.iterations() * 100000);
}
BENCHMARK(BM_HashGather)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace psrt

BENCHMARK_MAIN();
