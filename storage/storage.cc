#include "storage/storage.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "storage/file_storage.h"
#include "storage/s3_storage.h"

namespace psrt {

absl::Status Storage::Write(absl::string_view key, absl::string_view data) {
  auto writer = NewWriter(key);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->Append(data); !s.ok()) return s;
  return (*writer)->Close();
}

namespace {

// Ranges of an object read whole (storages without ranged reads).
class WholeObjectReader final : public StorageReader {
 public:
  explicit WholeObjectReader(std::string data) : data_(std::move(data)) {}
  absl::Status ReadAt(int64_t offset, int64_t length,
                      std::string* out) override {
    const int64_t size = static_cast<int64_t>(data_.size());
    if (offset < 0 || length < 0) {
      return absl::InvalidArgumentError("negative read range");
    }
    const int64_t begin = std::min(offset, size);
    out->assign(data_, begin, std::min(length, size - begin));
    return absl::OkStatus();
  }

 private:
  const std::string data_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StorageReader>> Storage::NewReader(
    absl::string_view key) {
  auto data = Read(key);
  if (!data.ok()) return data.status();
  return std::unique_ptr<StorageReader>(
      new WholeObjectReader(*std::move(data)));
}

absl::Status CheckStorageKey(absl::string_view key, bool prefix) {
  if (key.empty() && prefix) return absl::OkStatus();
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage key '", absl::CHexEscape(key.substr(0, 200)), "' ", why));
  };
  if (key.size() > 1024) return bad("is longer than 1024 bytes");
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return bad("holds a control character");
    }
  }
  std::vector<absl::string_view> parts = absl::StrSplit(key, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (parts[i].empty() && !(prefix && last)) {
      return bad("has an empty path component (or starts with '/')");
    }
    if (parts[i] == "." || parts[i] == "..") {
      return bad("has a '.' or '..' component");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Storage>> OpenStorage(absl::string_view uri,
                                                     const S3Options& s3) {
  if (uri.empty()) return absl::InvalidArgumentError("empty storage URI");
  absl::string_view rest = uri;
  if (absl::ConsumePrefix(&rest, "s3://")) {
    const size_t slash = rest.find('/');
    const std::string bucket(rest.substr(0, slash));
    const std::string prefix(
        slash == absl::string_view::npos ? "" : rest.substr(slash + 1));
    if (bucket.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no bucket in '", uri, "' (want s3://bucket/prefix)"));
    }
    return NewS3Storage(bucket, prefix, s3);
  }
  if (absl::ConsumePrefix(&rest, "file://")) {
    if (rest.empty() || rest[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", uri, "': file:// URIs take an absolute path (file:///dir)"));
    }
    return NewFileStorage(std::string(rest));
  }
  if (absl::StrContains(uri, "://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported storage URI '", uri,
                     "': use a path, file:///path or s3://bucket/prefix"));
  }
  return NewFileStorage(std::string(uri));
}

StorageOpener StorageOpenerFor(const S3Options& s3_options) {
  return [s3_options](absl::string_view uri) {
    return OpenStorage(uri, s3_options);
  };
}

}  // namespace psrt
