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

  absl::StatusOr<bool> Skip() override { return NextLine(); }
  std::string Position() const override {
    return absl::StrCat(file_->path(), ":", line_number_);
  }

 protected:
  // Parses one non-empty line into `example`; errors say what is wrong
  // (Position() is prepended).
  virtual absl::Status ParseLine(const std::string& line, Example* example) = 0;

  absl::StatusOr<bool> ReadRecord(Example* example) final {
    absl::StatusOr<bool> more = NextLine();
    if (!more.ok() || !*more) return more;
    example->Clear();
    absl::Status s = ParseLine(line_, example);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat(Position(), ": ", s.message()));
    }
    return true;
  }

 private:
  absl::StatusOr<bool> NextLine() {
    while (true) {
      absl::StatusOr<bool> got = file_->ReadLine(&line_);
      if (!got.ok()) {
        return absl::DataLossError(
            absl::StrCat(Position(), ": ", got.status().message()));
      }
      if (!*got) return false;
      ++line_number_;
      if (line_.empty() || (comment_ != '\0' && line_[0] == comment_)) continue;
      return true;
    }
  }

  std::unique_ptr<InputFile> file_;
  const char comment_;
  std::string line_;
  int64_t line_number_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_LINE_READER_H_
