#include "ps_worker/data/tfrecord_writer.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/tf_example.pb.h"
#include "util/crc32c.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<TfRecordWriter>> TfRecordWriter::Open(
    const std::string& path, bool gzip) {
  gzFile f = gzopen(path.c_str(), gzip ? "wb6" : "wbT");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<TfRecordWriter>(new TfRecordWriter(path, f));
}

TfRecordWriter::~TfRecordWriter() { Close().IgnoreError(); }

absl::Status TfRecordWriter::Flush() {
  if (gzflush(static_cast<gzFile>(file_), Z_SYNC_FLUSH) != Z_OK) {
    return absl::DataLossError(absl::StrCat("flushing '", path_, "' failed"));
  }
  return absl::OkStatus();
}

absl::Status TfRecordWriter::WriteRecord(const std::string& data) {
  char header[12];
  const uint64_t length = data.size();
  std::memcpy(header, &length, 8);
  const uint32_t length_crc = MaskCrc(Crc32c(header, 8));
  std::memcpy(header + 8, &length_crc, 4);
  const uint32_t data_crc = MaskCrc(Crc32c(data.data(), data.size()));
  gzFile f = static_cast<gzFile>(file_);
  if (gzwrite(f, header, 12) != 12 ||
      gzwrite(f, data.data(), data.size()) != static_cast<int>(data.size()) ||
      gzwrite(f, &data_crc, 4) != 4) {
    return absl::DataLossError(absl::StrCat("writing '", path_, "' failed"));
  }
  return absl::OkStatus();
}

absl::Status TfRecordWriter::WriteExample(const Example& e,
                                          const ReaderOptions& names) {
  tf::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  features[names.label_field].mutable_float_list()->add_value(e.label);
  if (!names.ids_field.empty()) {
    auto* ids = features[names.ids_field].mutable_int64_list();
    for (int64_t id : e.ids) ids->add_value(id);
    if (!names.values_field.empty()) {
      auto* values = features[names.values_field].mutable_float_list();
      for (float v : e.values) values->add_value(v);
    }
  }
  if (!names.dense_field.empty()) {
    auto* dense = features[names.dense_field].mutable_float_list();
    for (float v : e.dense) dense->add_value(v);
  }
  return WriteRecord(example.SerializeAsString());
}

absl::Status TfRecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = gzclose(static_cast<gzFile>(file_));
  file_ = nullptr;
  if (rc != Z_OK) {
    return absl::DataLossError(absl::StrCat("closing '", path_, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace psrt
