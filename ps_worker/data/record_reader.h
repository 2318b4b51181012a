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
#include "ps_worker/data/input_file.h"
#include "ps_worker/data/tfrecord_features.h"

namespace psrt {

struct ReaderOptions {
  std::string format = "libsvm";
  // tfrecord: feature names in each tf.Example.
  std::string label_field = "label";
  std::string ids_field = "ids";
  std::string values_field = "values";  // optional; 1.0 per id if absent
  std::string dense_field;              // optional float list
  // Per-column features instead of ids/values/dense lists
  // (tfrecord_features.h); empty: the list fields above.
  TfRecordColumns columns;
  // csv: the column schema (see csv_reader.h) or a preset name ("adult").
  std::string csv_schema = "adult";
  // criteo_tsv: 0 keeps 63-bit hashed ids (for HASH_EMBEDDING); N > 0 maps
  // categorical ids into [14, 14 + N) (for an EMBEDDING of vocab N + 14).
  int64_t criteo_buckets = 0;
  bool skip_bad_records = false;
  // Bytes read from the file at a time (InputFile::Open).
  size_t read_buffer_bytes = InputFile::kDefaultBufferBytes;
};

// Reading is two phases so that parsing can run on other threads while one
// thread reads on (dataset.h, --reader_threads): ReadRaw frames the next
// record (cheap, sequential, checks the file's framing), Parse turns its
// bytes into an Example (the costly part; const and thread-safe).
class RecordReader {
 public:
  virtual ~RecordReader() = default;

  // Reads and parses the next example; false at the end of the input. With
  // skip_bad_records, records that do not parse are skipped and counted.
  absl::StatusOr<bool> Next(Example* example);
  // Skips the next record without parsing it (sharding); false at the end.
  absl::StatusOr<bool> Skip() { return ReadRaw(&skip_buffer_); }

  // Reads the next record's bytes into *raw; false at the end. DATA_LOSS for
  // damage that ends the file (a bad frame, truncation, I/O).
  virtual absl::StatusOr<bool> ReadRaw(std::string* raw) = 0;
  // Parses bytes ReadRaw returned into *example (cleared first). Errors say
  // what is wrong without the position (PositionOf adds it). Thread-safe:
  // may run on any thread, concurrently, while this reader reads on.
  virtual absl::Status Parse(const std::string& raw,
                             Example* example) const = 0;

  // The number of the record ReadRaw returned last (its line, record or
  // image number, as PositionOf counts).
  int64_t index() const { return index_; }
  // "file:line 12" or "file: record 7", for messages; thread-safe.
  virtual std::string PositionOf(int64_t index) const = 0;
  std::string Position() const { return PositionOf(index_); }
  // `parse_error` (from Parse) with the record's position prepended.
  absl::Status AtPosition(int64_t index, const absl::Status& parse_error) const;

  bool skip_bad_records() const { return skip_bad_records_; }
  int64_t bad_records() const { return bad_records_; }

 protected:
  explicit RecordReader(bool skip_bad_records)
      : skip_bad_records_(skip_bad_records) {}

  int64_t index_ = 0;  // set by ReadRaw implementations

 private:
  const bool skip_bad_records_;
  int64_t bad_records_ = 0;
  std::string raw_, skip_buffer_;
};

absl::StatusOr<std::unique_ptr<RecordReader>> OpenRecordReader(
    const std::string& path, const ReaderOptions& options);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_RECORD_READER_H_
