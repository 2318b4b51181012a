// Writes TFRecord files of tf.Example records (as TensorFlow's
// TFRecordWriter does), optionally GZIP-compressed.
#ifndef PSRT_PS_WORKER_DATA_TFRECORD_WRITER_H_
#define PSRT_PS_WORKER_DATA_TFRECORD_WRITER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/data/example.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

class TfRecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TfRecordWriter>> Open(
      const std::string& path, bool gzip);
  ~TfRecordWriter();
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  // Appends one framed record.
  absl::Status WriteRecord(const std::string& data);
  // Appends `example` as a tf.Example with the feature names of `names`.
  absl::Status WriteExample(const Example& example, const ReaderOptions& names);
  // Pushes what was written to the file (a reader sees whole records).
  absl::Status Flush();
  // Flushes and closes; errors from the file system surface here.
  absl::Status Close();

 private:
  TfRecordWriter(std::string path, void* file)
      : path_(std::move(path)), file_(file) {}
  const std::string path_;
  void* file_;  // gzFile
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_TFRECORD_WRITER_H_
