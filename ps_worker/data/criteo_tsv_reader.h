#ifndef PSRT_PS_WORKER_DATA_CRITEO_TSV_READER_H_
#define PSRT_PS_WORKER_DATA_CRITEO_TSV_READER_H_

#include <memory>

#include "ps_worker/data/input_file.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

// The Criteo display-ads layout: label, I1..I13 (integers, may be empty),
// C1..C26 (hex tokens, may be empty), TAB-separated. Produces 39 fields,
// the DeepFM-on-SageMaker shape: fields 0..12 have ids 1..13 and values
// log(1 + max(x, 0)) (0 when empty); fields 13..38 have id
// HashFeature(field, token) (or 14 + that % criteo_buckets) and value 1.
std::unique_ptr<RecordReader> NewCriteoTsvReader(
    std::unique_ptr<InputFile> file, const ReaderOptions& options);

inline constexpr int kCriteoIntegerFields = 13;
inline constexpr int kCriteoCategoricalFields = 26;

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_CRITEO_TSV_READER_H_
