// Per-column tf.Example features (--tfrecord_features), as Criteo
// pipelines for TensorFlow write them: one feature per column (C1..C26
// categorical int64 or bytes, I1..I13 numeric) instead of one ids/values
// list. The spec names the columns by kind:
//
//   categorical:C1..C26,dense:I1..I13
//   categorical:site_id,app_id,device_type,dense:hour
//
// "kind:" starts a group; names follow, comma-separated, and "P<a>..P<b>"
// stands for P<a>, P<a+1>, ..., P<b>. A categorical column's values become
// ids: HashFeature(column number, value as text) (the column number counts
// categorical columns in spec order, so C1's 7 and C2's 7 differ); an
// absent or empty column gives its "missing" id (HashFeature(column, "")),
// so every example has one id per single-valued column. A dense column
// gives one float (int64 converted); absent: 0.
#ifndef PSRT_PS_WORKER_DATA_TFRECORD_FEATURES_H_
#define PSRT_PS_WORKER_DATA_TFRECORD_FEATURES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {

struct TfRecordColumns {
  std::vector<std::string> categorical;
  std::vector<std::string> dense;
  bool empty() const { return categorical.empty() && dense.empty(); }
};

// INVALID_ARGUMENT naming the part of `spec` that is wrong.
absl::StatusOr<TfRecordColumns> ParseTfRecordFeatures(const std::string& spec);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_TFRECORD_FEATURES_H_
