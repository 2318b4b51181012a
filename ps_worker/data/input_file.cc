#include "ps_worker/data/input_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<InputFile>> InputFile::Open(
    const std::string& path, size_t buffer_bytes) {
  if (buffer_bytes < 8 || buffer_bytes > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading '", path, "': a buffer of ", buffer_bytes,
                     " bytes (8 bytes to 1 GiB)"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  gzbuffer(f, static_cast<unsigned>(buffer_bytes));
  return std::unique_ptr<InputFile>(new InputFile(path, f, buffer_bytes));
}

InputFile::~InputFile() { gzclose(static_cast<gzFile>(file_)); }

absl::Status InputFile::Fill() {
  buffer_.erase(0, pos_);
  pos_ = 0;
  const size_t had = buffer_.size();
  buffer_.resize(had + buffer_bytes_);
  const int n = gzread(static_cast<gzFile>(file_), buffer_.data() + had,
                       static_cast<unsigned>(buffer_bytes_));
  if (n < 0) {
    int code;
    const char* message = gzerror(static_cast<gzFile>(file_), &code);
    buffer_.resize(had);
    return absl::DataLossError(absl::StrCat("reading '", path_, "': ", message,
                                            " (corrupt or truncated gzip?)"));
  }
  buffer_.resize(had + static_cast<size_t>(n));
  if (n == 0) eof_ = true;
  return absl::OkStatus();
}

absl::StatusOr<size_t> InputFile::Read(char* out, size_t n) {
  if (pos_ == buffer_.size() && !eof_) {
    if (absl::Status s = Fill(); !s.ok()) return s;
  }
  const size_t k = std::min(n, buffer_.size() - pos_);
  std::memcpy(out, buffer_.data() + pos_, k);
  pos_ += k;
  return k;
}

absl::StatusOr<bool> InputFile::ReadExactly(char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    absl::StatusOr<size_t> k = Read(out + got, n - got);
    if (!k.ok()) return k.status();
    if (*k == 0) {
      if (got == 0) return false;
      return absl::OutOfRangeError(absl::StrCat(
          "'", path_, "' is truncated: wanted ", n, " bytes, got ", got));
    }
    got += *k;
  }
  return true;
}

absl::StatusOr<bool> InputFile::ReadLine(std::string* line) {
  line->clear();
  while (true) {
    const char* start = buffer_.data() + pos_;
    const char* nl = static_cast<const char*>(
        std::memchr(start, '\n', buffer_.size() - pos_));
    if (nl != nullptr) {
      line->append(start, nl - start);
      pos_ += nl - start + 1;
      break;
    }
    line->append(start, buffer_.size() - pos_);
    pos_ = buffer_.size();
    if (eof_) {
      if (line->empty()) return false;
      break;
    }
    if (absl::Status s = Fill(); !s.ok()) return s;
  }
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return true;
}

}  // namespace psrt
