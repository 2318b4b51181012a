#include "ps_worker/data/tfrecord_reader.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/tf_example.pb.h"
#include "ps_worker/data/feature_hash.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

// Records larger than this are taken for corrupt framing.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

class TfRecordReader final : public RecordReader {
 public:
  TfRecordReader(std::unique_ptr<InputFile> file, const ReaderOptions& options)
      : RecordReader(options.skip_bad_records),
        file_(std::move(file)),
        options_(options) {}

  std::string PositionOf(int64_t record) const override {
    return absl::StrCat(file_->path(), ": record ", record);
  }

  absl::StatusOr<bool> ReadRaw(std::string* raw) override {
    return ReadFrame(raw);
  }

  absl::Status Parse(const std::string& raw, Example* e) const override {
    e->Clear();
    // One message per thread, reused (parsing runs on several at once).
    thread_local tf::Example example;
    if (!example.ParseFromString(raw)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data (", raw.size(), " bytes) is not a tf.Example"));
    }
    const auto& features = example.features().feature();
    auto get = [&](const std::string& name) -> const tf::Feature* {
      auto it = features.find(name);
      return it == features.end() ? nullptr : &it->second;
    };
    const tf::Feature* label = get(options_.label_field);
    if (label == nullptr) return Missing(options_.label_field);
    if (label->has_float_list() && label->float_list().value_size() == 1) {
      e->label = label->float_list().value(0);
    } else if (label->has_int64_list() &&
               label->int64_list().value_size() == 1) {
      e->label = static_cast<float>(label->int64_list().value(0));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("feature '", options_.label_field,
                       "' must hold exactly one float or int64"));
    }
    if (!options_.columns.empty()) return ParseColumns(get, e);
    if (!options_.ids_field.empty()) {
      const tf::Feature* ids = get(options_.ids_field);
      if (ids == nullptr) return Missing(options_.ids_field);
      if (!ids->has_int64_list()) return WrongType(options_.ids_field, "int64");
      e->ids.assign(ids->int64_list().value().begin(),
                    ids->int64_list().value().end());
      const tf::Feature* values =
          options_.values_field.empty() ? nullptr : get(options_.values_field);
      if (values == nullptr) {
        e->values.assign(e->ids.size(), 1.0f);
      } else {
        if (!values->has_float_list()) {
          return WrongType(options_.values_field, "float");
        }
        if (values->float_list().value_size() !=
            static_cast<int>(e->ids.size())) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", options_.ids_field, "' has ", e->ids.size(),
                           " ids but '", options_.values_field, "' has ",
                           values->float_list().value_size(), " values"));
        }
        e->values.assign(values->float_list().value().begin(),
                         values->float_list().value().end());
      }
    }
    if (!options_.dense_field.empty()) {
      const tf::Feature* dense = get(options_.dense_field);
      if (dense == nullptr) return Missing(options_.dense_field);
      if (!dense->has_float_list())
        return WrongType(options_.dense_field, "float");
      e->dense.assign(dense->float_list().value().begin(),
                      dense->float_list().value().end());
    }
    return absl::OkStatus();
  }

 private:
  // --tfrecord_features: one id per categorical column value (its
  // "missing" id when absent), one float per dense column (0 when absent).
  template <typename Get>
  absl::Status ParseColumns(const Get& get, Example* e) const {
    const TfRecordColumns& columns = options_.columns;
    for (size_t c = 0; c < columns.categorical.size(); ++c) {
      const int64_t column = static_cast<int64_t>(c);
      const tf::Feature* f = get(columns.categorical[c]);
      size_t before = e->ids.size();
      if (f != nullptr && f->has_int64_list()) {
        for (int64_t v : f->int64_list().value()) {
          e->ids.push_back(HashFeature(column, absl::StrCat(v)));
        }
      } else if (f != nullptr && f->has_bytes_list()) {
        for (const std::string& v : f->bytes_list().value()) {
          e->ids.push_back(HashFeature(column, v));
        }
      } else if (f != nullptr && f->has_float_list()) {
        return WrongType(columns.categorical[c], "int64 or bytes");
      }
      if (e->ids.size() == before) e->ids.push_back(HashFeature(column, ""));
    }
    e->values.assign(e->ids.size(), 1.0f);
    for (const std::string& name : columns.dense) {
      const tf::Feature* f = get(name);
      const int n = f == nullptr          ? 0
                    : f->has_float_list() ? f->float_list().value_size()
                    : f->has_int64_list() ? f->int64_list().value_size()
                                          : -1;
      if (n < 0) return WrongType(name, "float or int64");
      if (n > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dense feature '", name, "' has ", n, " values, not one"));
      }
      e->dense.push_back(n == 0 ? 0.0f
                         : f->has_float_list()
                             ? f->float_list().value(0)
                             : static_cast<float>(f->int64_list().value(0)));
    }
    return absl::OkStatus();
  }

  static absl::Status Missing(const std::string& name) {
    return absl::InvalidArgumentError(absl::StrCat("no feature '", name, "'"));
  }
  static absl::Status WrongType(const std::string& name, const char* type) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature '", name, "' is not a ", type, " list"));
  }

  // Reads and checks the next frame into *data.
  absl::StatusOr<bool> ReadFrame(std::string* data) {
    char header[12];
    absl::StatusOr<bool> got = file_->ReadExactly(header, sizeof(header));
    if (!got.ok()) return Damaged(got.status().message());
    if (!*got) return false;
    ++index_;
    uint64_t length;
    std::memcpy(&length, header, 8);
    if (MaskCrc(Crc32c(header, 8)) != LoadU32(header + 8)) {
      return Damaged("length CRC mismatch (corrupt file?)");
    }
    if (length > kMaxRecordBytes) {
      return Damaged(absl::StrCat("record length ", length, " is implausible"));
    }
    data->resize(length);
    char footer[4];
    got = file_->ReadExactly(data->data(), length);
    if (got.ok() && *got) got = file_->ReadExactly(footer, 4);
    if (!got.ok() || !*got) {
      return Damaged(absl::StrCat("truncated: the record's ", length,
                                  " bytes and CRC are not all there"));
    }
    if (MaskCrc(Crc32c(data->data(), length)) != LoadU32(footer)) {
      return Damaged("data CRC mismatch (corrupt record)");
    }
    return true;
  }

  absl::Status Damaged(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(Position(), ": ", what));
  }

  std::unique_ptr<InputFile> file_;
  const ReaderOptions options_;
};

}  // namespace

std::unique_ptr<RecordReader> NewTfRecordReader(std::unique_ptr<InputFile> file,
                                                const ReaderOptions& options) {
  return std::make_unique<TfRecordReader>(std::move(file), options);
}

}  // namespace psrt
