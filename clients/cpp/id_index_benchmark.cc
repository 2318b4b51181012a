// The worker's de-duplication of a batch's ids (IdIndex, as DeduplicateIds
// and the client's step plans use it) on CTR-shaped batches: 8,192 examples
// x 26 fields of Zipf-distributed hashed ids (about half of them distinct),
// and the same size of uniformly random ids (all distinct).
//   bazel run -c opt //clients/cpp:id_index_benchmark
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "clients/cpp/id_index.h"
#include "partitioner/id_hash.h"

namespace psrt {
namespace {

// `n` ids: Zipf(1.1) ranks over a 10M vocabulary, hashed as CTR features
// are (or uniform 63-bit ids).
std::vector<int64_t> Batch(size_t n, bool zipf, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(n);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int64_t& id : ids) {
    if (!zipf) {
      id = static_cast<int64_t>(rng() >> 1);
      continue;
    }
    // Inverse CDF of a continuous power law on [1, 1e7], exponent 1.1.
    const double a = 0.1, max = 1e7;
    const double u = unit(rng);
    const double rank =
        std::pow(1 - u * (1 - std::pow(max, -a)), -1 / a);  // in [1, max]
    id = static_cast<int64_t>(MixId(static_cast<int64_t>(rank)) >> 1);
  }
  return ids;
}

void BM_Deduplicate(benchmark::State& state) {
  const bool zipf = state.range(0) != 0;
  std::vector<std::vector<int64_t>> batches;
  for (uint64_t s = 0; s < 4; ++s) batches.push_back(Batch(8192 * 26, zipf, s));
  std::vector<int32_t> slots(batches[0].size());
  size_t next = 0, distinct = 0;
  for (auto _ : state) {
    const std::vector<int64_t>& ids = batches[next++ % batches.size()];
    IdIndex index(ids.size());
    const size_t ahead = static_cast<size_t>(state.range(1));
    for (size_t j = 0; j < ids.size(); ++j) {
      if (ahead > 0 && j + ahead < ids.size()) index.Prefetch(ids[j + ahead]);
      bool inserted;
      slots[j] = index.Insert(ids[j], &inserted);
    }
    distinct = index.ids().size();
    benchmark::DoNotOptimize(slots.data());
  }
  state.SetItemsProcessed(state.iterations() * batches[0].size());
  state.counters["distinct"] = static_cast<double>(distinct);
  state.SetLabel(zipf ? "zipf" : "uniform");
}
BENCHMARK(BM_Deduplicate)
    ->ArgsProduct({{1, 0}, {0, 8, 16, 32}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace psrt

BENCHMARK_MAIN();
