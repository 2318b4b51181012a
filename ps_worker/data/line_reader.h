// Base for text formats with one record per line: empty lines are skipped,
// and so are lines starting with the comment character if it is set.
#ifndef PSRT_PS_WORKER_DATA_LINE_READER_H_
#define PSRT_PS_WORKER_DATA_LINE_READER_H_

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "ps_worker/data/input_file.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

class LineReader : public RecordReader {
 public:
  LineReader(std::unique_ptr<InputFile> file, bool skip_bad_records,
             char comment = '\0')
      : RecordReader(skip_bad_records),
        file_(std::move(file)),
        comment_(comment) {}

  absl::StatusOr<bool> ReadRaw(std::string* line) final {
    while (true) {
      absl::StatusOr<bool> got = file_->ReadLine(line);
      if (!got.ok()) {
        return absl::DataLossError(
            absl::StrCat(PositionOf(index_ + 1), ": ", got.status().message()));
      }
      if (!*got) return false;
      ++index_;
      if (line->empty() || (comment_ != '\0' && (*line)[0] == comment_)) {
        continue;
      }
      return true;
    }
  }
  std::string PositionOf(int64_t line) const override {
    return absl::StrCat(file_->path(), ":", line);
  }
  absl::Status Parse(const std::string& line, Example* example) const final {
    example->Clear();
    return ParseLine(line, example);
  }

 protected:
  // Parses one non-empty line into `example` (cleared); errors say what is
  // wrong. Thread-safe (const).
  virtual absl::Status ParseLine(const std::string& line,
                                 Example* example) const = 0;

 private:
  std::unique_ptr<InputFile> file_;
  const char comment_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_LINE_READER_H_
