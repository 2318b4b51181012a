#ifndef PSRT_PS_WORKER_DATA_IDX_READER_H_
#define PSRT_PS_WORKER_DATA_IDX_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

// IDX files as MNIST and Fashion-MNIST ship them (optionally gzipped): the
// path names the images file (magic 0x803: uint8 [n, rows, cols]); the
// labels file (magic 0x801: uint8 [n]) is the same path with "images-idx3"
// replaced by "labels-idx1". Pixels become dense features in [0, 1].
absl::StatusOr<std::unique_ptr<RecordReader>> NewIdxReader(
    const std::string& images_path, const ReaderOptions& options);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_IDX_READER_H_
