// How often each id was seen, approximately, in bounded memory: a
// count-min sketch (Cormode & Muthukrishnan) of 4 rows of 1-byte
// saturating counters. Feature admission (AdmissionSpec) counts the ids a
// hash embedding shard has no row for here.
//
// An id's estimate is the least of its 4 counters, so it is never below
// the id's true count (since the last halving) and above it only by what
// other ids added to all 4 of its counters. Increments are conservative
// (only the counters at the minimum grow), which keeps that excess
// smaller. Every 8 x width increments all counters are halved (TinyLFU's
// reset), so the sketch describes recent history and does not fill up
// on an unbounded stream of ids.
#ifndef PSRT_PS_SERVER_SHARDS_COUNT_MIN_SKETCH_H_
#define PSRT_PS_SERVER_SHARDS_COUNT_MIN_SKETCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace psrt {

class CountMinSketch {
 public:
  static constexpr int kRows = 4;
  static constexpr int kMaxCount = 255;
  // Increments between two halvings, per counter of a row.
  static constexpr int64_t kHalvingPeriodPerCounter = 8;

  // `width`: counters per row, a power of two >= 64.
  explicit CountMinSketch(int64_t width);

  // Counts one more sighting of `id`; returns its new estimate (at most
  // kMaxCount).
  int Increment(int64_t id);
  // The estimate of `id`'s count, without counting.
  int Estimate(int64_t id) const;

  int64_t width() const { return width_; }
  int64_t bytes() const { return static_cast<int64_t>(counters_.size()); }
  // Halvings so far.
  int64_t halvings() const { return halvings_; }

  // Its state, as a copy of it needs it: the counters (kRows rows of
  // width) and the increments since the last halving.
  const std::vector<uint8_t>& counters() const { return counters_; }
  int64_t increments() const { return increments_; }
  // Takes another sketch's state (a rejoining copy of a shard takes its
  // source's). INVALID_ARGUMENT naming the sizes unless it has this
  // sketch's width and a count of increments below a halving's period;
  // nothing changes then.
  absl::Status Assign(absl::Span<const uint8_t> counters, int64_t increments);

 private:
  // The counter of `id` in each row.
  void Positions(int64_t id, int64_t* positions) const;
  void Halve();

  const int64_t width_;
  std::vector<uint8_t> counters_;  // kRows rows of width_
  int64_t increments_ = 0;         // since the last halving
  int64_t halvings_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_COUNT_MIN_SKETCH_H_
