// What a dense shard knows of its values without reading them: an upper
// bound on the magnitude of its parameters and of each optimizer slot, and
// a lower bound on each. An optimizer that can tell from these bounds and a
// gradient's largest magnitude that an update leaves every value finite
// (Optimizer::BoundsAfter) spares the shard the dry run that would
// otherwise prove it before anything is changed (all or nothing).
#ifndef PSRT_PS_SERVER_OPTIMIZERS_VALUE_BOUNDS_H_
#define PSRT_PS_SERVER_OPTIMIZERS_VALUE_BOUNDS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace psrt {

struct ValueBounds {
  // Bounds at or beyond this are not trusted to keep float arithmetic
  // finite: FLT_MAX (3.4e38) / 34 leaves room for the few roundings of an
  // update and for sums of two bounded terms.
  static constexpr double kLimit = 1e37;
  // Relative slack an optimizer adds for the rounding of a few float
  // operations (float's epsilon is 6e-8).
  static constexpr double kRounding = 1 + 1e-5;

  // [0] the parameters, [1 + k] slot k: every value v has
  // min[i] <= v and |v| <= max_abs[i].
  double max_abs[3] = {0, 0, 0};
  double min[3] = {0, 0, 0};

  // Bounds of no values yet, for Cover to widen.
  static ValueBounds Empty() {
    ValueBounds b;
    for (double& m : b.min) m = HUGE_VAL;
    return b;
  }

  // Widens the bounds to cover values[0, n) of array i (0 params, 1 + k
  // slot k).
  void Cover(int i, const float* values, size_t n) {
    for (size_t j = 0; j < n; ++j) {
      const double v = values[j];
      max_abs[i] = std::max(max_abs[i], std::fabs(v));
      min[i] = std::min(min[i], v);
    }
  }
  // Widens the bounds to a row laid out [values | slot 0 | slot 1], `width`
  // floats each.
  void CoverRow(const float* row, int64_t width, int num_slots) {
    for (int i = 0; i <= num_slots; ++i) {
      Cover(i, row + i * width, static_cast<size_t>(width));
    }
  }
  // Every bound of arrays [0, arrays) is finite and below kLimit.
  bool WithinLimit(int arrays) const {
    for (int i = 0; i < arrays; ++i) {
      if (!(max_abs[i] < kLimit)) return false;
    }
    return true;
  }
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_VALUE_BOUNDS_H_
