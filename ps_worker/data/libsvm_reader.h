#ifndef PSRT_PS_WORKER_DATA_LIBSVM_READER_H_
#define PSRT_PS_WORKER_DATA_LIBSVM_READER_H_

#include <memory>

#include "ps_worker/data/input_file.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

// "label id:value id:value ..." per line (whitespace-separated); LibFFM's
// "field:id:value" terms are read as id:value. Lines starting with '#' are
// comments. Label: a number (-1 is read as 0 for binary data).
std::unique_ptr<RecordReader> NewLibsvmReader(std::unique_ptr<InputFile> file,
                                              const ReaderOptions& options);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_LIBSVM_READER_H_
