// Feature admission (VariableSpec.admission, hash embeddings): which ids
// get a row. An id the shard has no row for is admitted by the push that
// brings its count of sightings to min_count (a push is one sighting,
// however often it repeats the id); the gradients of its earlier pushes
// are dropped, and pulls of it read its initial value, or zeros. Counts
// live in a CountMinSketch (count_min_sketch.h), so an id is never
// admitted late, and may be admitted early when other ids share all its
// counters.
//
// Not thread-safe: the shard calls it under its lock, in the order it
// applies updates.
#ifndef PSRT_PS_SERVER_SHARDS_ADMISSION_POLICY_H_
#define PSRT_PS_SERVER_SHARDS_ADMISSION_POLICY_H_

#include <cstdint>
#include <memory>

#include "proto/ps.pb.h"
#include "ps_server/shards/count_min_sketch.h"

namespace psrt {

class AdmissionPolicy {
 public:
  // Null where `spec` admits every id at once (min_count 0 or 1).
  // REQUIRES: spec normalized (sketch_width a power of two >= 64).
  static std::unique_ptr<AdmissionPolicy> For(const AdmissionSpec& spec);

  // Whether the next sighting of `id` may admit it (its count is at
  // min_count - 1 or more): the shard reserves room for such ids before
  // it decides.
  bool MayAdmitNext(int64_t id) const;
  // Counts one sighting of `id`, which has no row; true if this one
  // admits it.
  bool Sight(int64_t id);

  // What a pull of an id not admitted reads: zeros (true) or the row's
  // initial value.
  bool zeros_for_unadmitted() const { return zeros_for_unadmitted_; }
  int min_count() const { return min_count_; }
  // The sketch's memory.
  int64_t bytes() const { return sketch_.bytes(); }
  // The sightings counted (a rejoin copies them with the rows).
  const CountMinSketch& sketch() const { return sketch_; }
  CountMinSketch* mutable_sketch() { return &sketch_; }

 private:
  AdmissionPolicy(int min_count, int64_t sketch_width, bool zeros);

  const int min_count_;
  const bool zeros_for_unadmitted_;
  CountMinSketch sketch_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_ADMISSION_POLICY_H_
