// TensorBoard event files (ps_worker --summary_dir): scalars as TensorFlow's
// tf.summary writes them, one `Event` proto per record in TFRecord framing,
// in events.out.tfevents.<unix seconds>.<host>.<worker>, the first record
// the file version. TensorBoard (or any TFRecord + protobuf reader) plots
// them.
#ifndef PSRT_PS_WORKER_SUMMARY_WRITER_H_
#define PSRT_PS_WORKER_SUMMARY_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ps_worker/data/tfrecord_writer.h"

namespace psrt {

class SummaryWriter {
 public:
  // Creates `dir` and a new event file in it for worker `worker`.
  static absl::StatusOr<std::unique_ptr<SummaryWriter>> Open(
      const std::string& dir, int worker);

  // One event at `step` holding each (tag, value); flushed to the file at
  // once (a crashed run keeps its curves).
  absl::Status Scalars(
      int64_t step, const std::vector<std::pair<std::string, double>>& values);
  absl::Status Close();
  const std::string& path() const { return path_; }

 private:
  SummaryWriter(std::string path, std::unique_ptr<TfRecordWriter> file)
      : path_(std::move(path)), file_(std::move(file)) {}
  std::string path_;
  std::unique_ptr<TfRecordWriter> file_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_SUMMARY_WRITER_H_
