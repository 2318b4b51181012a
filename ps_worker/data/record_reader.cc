#include "ps_worker/data/record_reader.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "ps_worker/data/criteo_tsv_reader.h"
#include "ps_worker/data/csv_reader.h"
#include "ps_worker/data/idx_reader.h"
#include "ps_worker/data/input_file.h"
#include "ps_worker/data/libsvm_reader.h"
#include "ps_worker/data/tfrecord_reader.h"

namespace psrt {

absl::Status RecordReader::AtPosition(int64_t index,
                                      const absl::Status& parse_error) const {
  return absl::Status(parse_error.code(), absl::StrCat(PositionOf(index), ": ",
                                                       parse_error.message()));
}

absl::StatusOr<bool> RecordReader::Next(Example* example) {
  while (true) {
    absl::StatusOr<bool> got = ReadRaw(&raw_);
    if (!got.ok() || !*got) return got;
    const absl::Status parsed = Parse(raw_, example);
    if (parsed.ok()) return true;
    if (!skip_bad_records_) return AtPosition(index_, parsed);
    ++bad_records_;
    if (bad_records_ <= 5) {
      LOG(WARNING) << "skipping bad record: "
                   << AtPosition(index_, parsed).message();
    }
  }
}

absl::StatusOr<std::unique_ptr<RecordReader>> OpenRecordReader(
    const std::string& path, const ReaderOptions& options) {
  if (options.format == "idx") return NewIdxReader(path, options);
  if (options.format == "csv") {
    int dense, sparse;
    if (absl::Status s = DescribeCsvSchema(options.csv_schema, &dense, &sparse);
        !s.ok()) {
      return s;
    }
  } else if (options.format != "libsvm" && options.format != "tfrecord" &&
             options.format != "criteo_tsv") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown data format '", options.format,
                     "' (libsvm, tfrecord, criteo_tsv, csv, idx)"));
  }
  auto file = InputFile::Open(path, options.read_buffer_bytes);
  if (!file.ok()) return file.status();
  if (options.format == "libsvm")
    return NewLibsvmReader(std::move(*file), options);
  if (options.format == "tfrecord") {
    return NewTfRecordReader(std::move(*file), options);
  }
  if (options.format == "criteo_tsv") {
    return NewCriteoTsvReader(std::move(*file), options);
  }
  return NewCsvReader(std::move(*file), options);
}

}  // namespace psrt
