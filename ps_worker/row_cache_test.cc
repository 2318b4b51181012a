#include "ps_worker/row_cache.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace psrt {
namespace {

// A step's distinct ids, Zipf-like over `vocab` ids (id r drawn with
// probability ~ 1/(r+1)), as CTR batches are.
std::vector<int64_t> ZipfIds(std::mt19937_64* rng, int draws, int vocab) {
  std::uniform_real_distribution<double> u(0, 1);
  std::set<int64_t> ids;
  const double h = std::log(vocab + 1.0);
  for (int i = 0; i < draws; ++i) {
    ids.insert(static_cast<int64_t>(std::exp(u(*rng) * h)) - 1);
  }
  std::vector<int64_t> out(ids.begin(), ids.end());
  std::shuffle(out.begin(), out.end(), *rng);
  return out;
}

// Drives a cache in the trainer's call order (Lookup(k+1), Accumulate(k),
// Store(k+1)) with the servers' side played by plain arrays: a pulled row
// holds the step it was pulled for, and each step's gradient of a row is
// 1 in every float, so a flushed sum counts the steps it carries.
class TrainerOrder {
 public:
  TrainerOrder(RowCache* cache, std::vector<int> dims)
      : cache_(cache), dims_(std::move(dims)) {}

  // Step `step` reads `ids`: checks each served row's age, then "pulls"
  // the misses (value = step) and stores them.
  void Read(int64_t step, const std::vector<int64_t>& ids) {
    std::vector<std::vector<float>> tables(dims_.size());
    for (size_t t = 0; t < dims_.size(); ++t) {
      tables[t].assign(ids.size() * dims_[t], -1.0f);
    }
    RowCache::StepRows rows;
    cache_->Lookup(step, ids, &tables, &rows);
    std::set<int32_t> missed(rows.misses.begin(), rows.misses.end());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (missed.count(i)) continue;
      for (size_t t = 0; t < dims_.size(); ++t) {
        for (int d = 0; d < dims_[t]; ++d) {
          const float pulled_at = tables[t][i * dims_[t] + d];
          ASSERT_LE(pulled_at, step) << "id " << ids[i];
          ASSERT_GT(pulled_at, step - cache_->staleness())
              << "id " << ids[i] << " at step " << step;
          oldest_served_ = std::max<int64_t>(oldest_served_, step - pulled_at);
        }
      }
    }
    for (int32_t i : rows.misses) {
      for (size_t t = 0; t < dims_.size(); ++t) {
        std::fill_n(tables[t].begin() + i * dims_[t], dims_[t],
                    static_cast<float>(step));
      }
    }
    pending_ = {ids, rows, tables};
  }
  void PullArrived() {
    cache_->Store(pending_.ids, pending_.tables, &pending_.rows);
    read_[pending_.rows.step] = pending_;
  }

  // Step `step` computed gradient 1 for every row of `ids`; checks what the
  // push carries against the gradients still owed.
  void Push(int64_t step, const std::vector<int64_t>& ids) {
    std::vector<std::vector<float>> grads(dims_.size());
    for (size_t t = 0; t < dims_.size(); ++t) {
      grads[t].assign(ids.size() * dims_[t], 1.0f);
    }
    for (int64_t id : ids) owed_[id].push_back(step);
    ASSERT_EQ(read_[step].ids, ids);
    RowCache::Push push;
    cache_->Accumulate(ids, grads, read_[step].rows, &push);
    read_.erase(step);
    Check(step, push);
  }
  void PushRest(int64_t step) {
    RowCache::Push push;
    cache_->TakeAll(&push);
    Check(step, push);
  }

  int64_t rows_pushed() const { return rows_pushed_; }
  int64_t latest_push() const { return latest_push_; }
  int64_t oldest_served() const { return oldest_served_; }
  size_t owed() const {
    size_t n = 0;
    for (const auto& [id, steps] : owed_) n += steps.size();
    return n;
  }

 private:
  void Check(int64_t step, const RowCache::Push& push) {
    ASSERT_EQ(push.grads.size(), dims_.size());
    ASSERT_EQ(static_cast<int64_t>(push.ids.size()),
              push.flushed + push.uncached);
    std::set<int64_t> distinct(push.ids.begin(), push.ids.end());
    ASSERT_EQ(distinct.size(), push.ids.size()) << "an id pushed twice";
    for (size_t t = 0; t < dims_.size(); ++t) {
      ASSERT_EQ(push.grads[t].size(), push.ids.size() * dims_[t]);
    }
    for (size_t i = 0; i < push.ids.size(); ++i) {
      const float count = push.grads[0][i * dims_[0]];
      for (size_t t = 0; t < dims_.size(); ++t) {
        for (int d = 0; d < dims_[t]; ++d) {
          ASSERT_EQ(push.grads[t][i * dims_[t] + d], count);
        }
      }
      std::deque<int64_t>& owed = owed_[push.ids[i]];
      ASSERT_GE(owed.size(), count) << "pushed more than computed";
      for (int c = 0; c < count; ++c) {
        latest_push_ = std::max(latest_push_, step - owed.front());
        owed.pop_front();
      }
      ++rows_pushed_;
    }
  }

  struct PendingRead {
    std::vector<int64_t> ids;
    RowCache::StepRows rows;
    std::vector<std::vector<float>> tables;
  };
  RowCache* cache_;
  std::vector<int> dims_;
  PendingRead pending_;                  // read, pull not yet arrived
  std::map<int64_t, PendingRead> read_;  // pulled, not yet pushed
  std::map<int64_t, std::deque<int64_t>> owed_;
  int64_t rows_pushed_ = 0;
  int64_t latest_push_ = 0;
  int64_t oldest_served_ = 0;
};

// Runs `steps` steps of Zipf batches; returns the driver for its figures.
void Train(RowCache* cache, TrainerOrder* order, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> batches;
  for (int k = 0; k <= steps; ++k) batches.push_back(ZipfIds(&rng, 300, 5000));
  order->Read(0, batches[0]);
  order->PullArrived();
  for (int k = 0; k < steps; ++k) {
    if (k + 1 < steps) order->Read(k + 1, batches[k + 1]);
    order->Push(k, batches[k]);
    if (k + 1 < steps) order->PullArrived();
  }
  order->PushRest(steps - 1);
}

TEST(RowCacheTest, ServesRowsAtMostSMinusOneStepsOldAndPushesEveryGradient) {
  for (int staleness : {1, 2, 3, 8}) {
    SCOPED_TRACE(staleness);
    auto cache = RowCache::Create({1, 8}, staleness, 64 << 20);
    ASSERT_TRUE(cache.ok()) << cache.status();
    TrainerOrder order(&*cache, {1, 8});
    Train(&*cache, &order, 200, 7);
    EXPECT_EQ(order.owed(), 0u) << "gradients never pushed";
    EXPECT_EQ(cache->rows(), 0);
    // The bounds are reached, not only respected.
    EXPECT_EQ(order.oldest_served(), staleness - 1);
    EXPECT_EQ(order.latest_push(), std::max(staleness - 2, 0));
    if (staleness == 1) {
      EXPECT_EQ(cache->hits(), 0);
    }
  }
}

TEST(RowCacheTest, HotRowsArePushedOncePerStalenessWindow) {
  // The traffic the cache saves: rows pushed with S = 8 against S = 1 (a
  // push per row per step, as without a cache).
  int64_t pushed[2];
  double hit_rate = 0;
  for (int s : {0, 1}) {
    auto cache = RowCache::Create({1, 8}, s == 0 ? 1 : 8, 64 << 20);
    ASSERT_TRUE(cache.ok());
    TrainerOrder order(&*cache, {1, 8});
    Train(&*cache, &order, 200, 11);
    pushed[s] = order.rows_pushed();
    hit_rate = static_cast<double>(cache->hits()) / cache->lookups();
  }
  EXPECT_LT(pushed[1], pushed[0] * 0.7) << pushed[1] << " vs " << pushed[0];
  EXPECT_GT(hit_rate, 0.3);
}

TEST(RowCacheTest, AFullCacheLeavesTheRestUncached) {
  // Room for 16 slots of 2 x 9 floats and 17 bytes of id, step and flag
  // (and not for 32): 25 ids cannot all be cached.
  auto cache = RowCache::Create({1, 8}, 4, 31 * (2 * 9 * 4 + 17));
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(cache->capacity_rows(), 16);
  std::vector<int64_t> ids(25);
  for (int i = 0; i < 25; ++i) ids[i] = 100 + i;
  std::vector<std::vector<float>> tables = {std::vector<float>(25, 0.5f),
                                            std::vector<float>(200, 0.25f)};
  RowCache::StepRows step0, step1;
  cache->Lookup(0, ids, &tables, &step0);
  EXPECT_EQ(step0.misses.size(), 25u);
  cache->Store(ids, tables, &step0);
  const int64_t cached = cache->rows();
  EXPECT_GE(cached, 8);
  EXPECT_LE(cached, 16);
  cache->Lookup(1, ids, &tables, &step1);
  EXPECT_EQ(static_cast<int64_t>(step1.misses.size()), 25 - cached);
  std::vector<std::vector<float>> grads = {std::vector<float>(25, 1.0f),
                                           std::vector<float>(200, 1.0f)};
  RowCache::Push push;
  cache->Accumulate(ids, grads, step0, &push);
  EXPECT_EQ(push.uncached, 25 - cached);
  EXPECT_EQ(push.flushed, 0);
  cache->TakeAll(&push);
  EXPECT_EQ(push.flushed, cached);
  EXPECT_EQ(static_cast<int64_t>(push.ids.size()), cached);
  EXPECT_EQ(cache->rows(), 0);
}

TEST(RowCacheTest, RefusesWhatCannotWork) {
  EXPECT_EQ(RowCache::Create({8}, 0, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowCache::Create({}, 2, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowCache::Create({0}, 2, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto tiny = RowCache::Create({8}, 2, 10);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("holds no row"), std::string::npos);
}

}  // namespace
}  // namespace psrt
