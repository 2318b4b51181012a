#include "ps_server/shards/count_min_sketch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "partitioner/id_hash.h"

namespace psrt {

CountMinSketch::CountMinSketch(int64_t width)
    : width_(width), counters_(static_cast<size_t>(kRows * width), 0) {
  CHECK_GE(width, 64);
  CHECK_EQ(width & (width - 1), 0) << "width must be a power of two";
}

void CountMinSketch::Positions(int64_t id, int64_t* positions) const {
  // A shard's ids share the low bits of MixId(id) (MixId(id) % num_shards
  // routed them here), so indices come from a differently seeded mix: its
  // two halves combined as h1 + r * h2 (Kirsch & Mitzenmacher) for row r.
  const uint64_t h = MixId(id ^ static_cast<int64_t>(0x9e3779b97f4a7c15ULL));
  const uint64_t h1 = h >> 32;
  const uint64_t h2 = (h & 0xffffffffULL) | 1;
  const uint64_t mask = static_cast<uint64_t>(width_ - 1);
  for (int r = 0; r < kRows; ++r) {
    positions[r] = r * width_ + static_cast<int64_t>((h1 + r * h2) & mask);
  }
}

int CountMinSketch::Estimate(int64_t id) const {
  int64_t at[kRows];
  Positions(id, at);
  int least = kMaxCount;
  for (int r = 0; r < kRows; ++r)
    least = std::min<int>(least, counters_[at[r]]);
  return least;
}

int CountMinSketch::Increment(int64_t id) {
  int64_t at[kRows];
  Positions(id, at);
  int least = kMaxCount;
  for (int r = 0; r < kRows; ++r)
    least = std::min<int>(least, counters_[at[r]]);
  const int next = std::min(least + 1, kMaxCount);
  // Conservative update: a counter already above the new estimate holds
  // other ids' counts and is left alone.
  for (int r = 0; r < kRows; ++r) {
    if (counters_[at[r]] < next) counters_[at[r]] = static_cast<uint8_t>(next);
  }
  if (++increments_ >= kHalvingPeriodPerCounter * width_) Halve();
  return next;
}

absl::Status CountMinSketch::Assign(absl::Span<const uint8_t> counters,
                                    int64_t increments) {
  if (counters.size() != counters_.size() || increments < 0 ||
      increments >= kHalvingPeriodPerCounter * width_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an admission sketch of ", counters.size(), " counters and ",
        increments, " increments does not fit this one of ", kRows, " x ",
        width_, " counters (a halving every ",
        kHalvingPeriodPerCounter * width_, " increments)"));
  }
  std::copy(counters.begin(), counters.end(), counters_.begin());
  increments_ = increments;
  return absl::OkStatus();
}

void CountMinSketch::Halve() {
  for (uint8_t& c : counters_) c >>= 1;
  increments_ = 0;
  ++halvings_;
}

}  // namespace psrt
