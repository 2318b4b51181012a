#ifndef PSRT_PS_WORKER_DATA_TFRECORD_READER_H_
#define PSRT_PS_WORKER_DATA_TFRECORD_READER_H_

#include <memory>

#include "ps_worker/data/input_file.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

// TFRecord framing: uint64 length | uint32 masked CRC32C(length) | data |
// uint32 masked CRC32C(data), little-endian. Both CRCs are verified; a bad
// CRC or a truncated record is DATA_LOSS naming the file and record (the
// rest of the file cannot be trusted, so it is not skipped past). Each
// record's data is a tf.Example; the features named in `options` become
// the label, ids, values and dense floats. GZIP files are read transparently.
std::unique_ptr<RecordReader> NewTfRecordReader(std::unique_ptr<InputFile> file,
                                                const ReaderOptions& options);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_TFRECORD_READER_H_
