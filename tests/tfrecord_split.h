// Splits a TFRecord file into two at a record boundary, bytes copied as
// they are (framing CRCs stay valid): training and held-out evaluation
// data from one real file.
#ifndef PSRT_TESTS_TFRECORD_SPLIT_H_
#define PSRT_TESTS_TFRECORD_SPLIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace psrt {

// Writes the first `head_records` records of `path` to `head_path` and the
// rest to `tail_path`. INVALID_ARGUMENT if the file ends mid-record or has
// fewer records.
absl::Status SplitTfRecords(const std::string& path, int64_t head_records,
                            const std::string& head_path,
                            const std::string& tail_path);

}  // namespace psrt

#endif  // PSRT_TESTS_TFRECORD_SPLIT_H_
