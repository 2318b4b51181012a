#ifndef PSRT_PS_WORKER_DATA_CSV_READER_H_
#define PSRT_PS_WORKER_DATA_CSV_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/data/input_file.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

// Delimited text described by a schema: a comma-separated list of column
// specs, one per column in order, then optional crosses:
//
//   name:label=<positive token>  the label: 1 if the cell (trailing '.'
//                                stripped) equals the token, else 0
//   name:cat                     categorical: id HashFeature(column, cell)
//   name:num[/scale][/log][/buckets=a|b|c]
//                                numeric: a dense feature, cell * scale or
//                                log(1 + cell); with buckets also a
//                                categorical id of its bucket
//   name:skip                    ignored
//   cross:a+b                    an id for the pair of columns a, b
//
// Cells are split on `delimiter` with surrounding spaces trimmed; lines
// starting with '|' are comments (adult.test has one). "adult" names the
// schema of the UCI Adult files.
std::unique_ptr<RecordReader> NewCsvReader(std::unique_ptr<InputFile> file,
                                           const ReaderOptions& options);

// Checks a schema (or preset name) and returns the number of dense
// features and sparse fields each example will have.
absl::Status DescribeCsvSchema(const std::string& schema, int* dense_features,
                               int* sparse_fields);

// The schema of the UCI Adult (census income) data.
extern const char kAdultCsvSchema[];

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_CSV_READER_H_
