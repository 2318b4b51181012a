// Readers that turn input files into Examples, one record at a time.
//
//   libsvm      "label id:value id:value ..." (LibFFM "field:id:value" too)
//   tfrecord    TFRecord files of tf.Example (plain or GZIP); framing CRCs
//               verified; feature names configurable
//   criteo_tsv  label, 13 integer and 26 hex-categorical TAB-separated
//               columns (Criteo display-ads layout)
//   csv         delimited text described by a column schema (e.g. the UCI
//               Adult data, preset "adult")
//   idx         IDX image/label file pairs (MNIST, Fashion-MNIST)
//
// Errors name the file and the line or record. With skip_bad_records, bad
// records are skipped and counted instead.
#ifndef PSRT_PS_WORKER_DATA_RECORD_READER_H_
#define PSRT_PS_WORKER_DATA_RECORD_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/data/example.h"

namespace psrt {

struct ReaderOptions {
  std::string format = "libsvm";
  // tfrecord: feature names in each tf.Example.
  std::string label_field = "label";
  std::string ids_field = "ids";
  std::string values_field = "values";  // optional; 1.0 per id if absent
  std::string dense_field;              // optional float list
  // csv: the column schema (see csv_reader.h) or a preset name ("adult").
  std::string csv_schema = "adult";
  // criteo_tsv: 0 keeps 63-bit hashed ids (for HASH_EMBEDDING); N > 0 maps
  // categorical ids into [14, 14 + N) (for an EMBEDDING of vocab N + 14).
  int64_t criteo_buckets = 0;
  bool skip_bad_records = false;
};

class RecordReader {
 public:
  virtual ~RecordReader() = default;

  // Reads the next example; false at the end of the input.
  absl::StatusOr<bool> Next(Example* example);
  // Skips the next record without parsing it (sharding); false at the end.
  virtual absl::StatusOr<bool> Skip() = 0;
  // "file:line 12" or "file: record 7", for messages.
  virtual std::string Position() const = 0;

  int64_t bad_records() const { return bad_records_; }

 protected:
  explicit RecordReader(bool skip_bad_records)
      : skip_bad_records_(skip_bad_records) {}
  // Reads one record: OK(true) with the example, OK(false) at the end,
  // DATA_LOSS for damage that ends the file (a bad frame), any other error
  // for a bad record that may be skipped.
  virtual absl::StatusOr<bool> ReadRecord(Example* example) = 0;

 private:
  const bool skip_bad_records_;
  int64_t bad_records_ = 0;
};

absl::StatusOr<std::unique_ptr<RecordReader>> OpenRecordReader(
    const std::string& path, const ReaderOptions& options);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_RECORD_READER_H_
