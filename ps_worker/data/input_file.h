// Sequential reading of a file that may be gzip-compressed (detected from
// its header), plain, or a FIFO (SageMaker Pipe mode): no seeking, ever.
#ifndef PSRT_PS_WORKER_DATA_INPUT_FILE_H_
#define PSRT_PS_WORKER_DATA_INPUT_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace psrt {

class InputFile {
 public:
  // Bytes read from the file (decompressed) at a time, and zlib's buffer.
  static constexpr size_t kDefaultBufferBytes = size_t{1} << 20;
  // `buffer_bytes` (at least 8): smaller makes records and lines cross
  // reads (the fuzzer's and the tests' way to reach those paths).
  static absl::StatusOr<std::unique_ptr<InputFile>> Open(
      const std::string& path, size_t buffer_bytes = kDefaultBufferBytes);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Reads up to n bytes; returns how many (0 at end of file).
  absl::StatusOr<size_t> Read(char* out, size_t n);

  // Reads exactly n bytes. Returns false (not an error) if the file ends
  // before any byte was read, OUT_OF_RANGE ("truncated") if it ends midway.
  absl::StatusOr<bool> ReadExactly(char* out, size_t n);

  // Reads the next line without its '\n' (and '\r'); false at end of file.
  absl::StatusOr<bool> ReadLine(std::string* line);

  const std::string& path() const { return path_; }

 private:
  InputFile(std::string path, void* file, size_t buffer_bytes)
      : path_(std::move(path)), file_(file), buffer_bytes_(buffer_bytes) {}
  absl::Status Fill();

  const std::string path_;
  void* file_;  // gzFile
  const size_t buffer_bytes_;
  std::string buffer_;
  size_t pos_ = 0;
  bool eof_ = false;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_INPUT_FILE_H_
