#include "ps_worker/data/idx_reader.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "ps_worker/data/input_file.h"

namespace psrt {
namespace {

absl::StatusOr<std::vector<uint32_t>> ReadHeader(InputFile* f, uint32_t magic,
                                                 int dims) {
  std::vector<uint32_t> v(1 + dims);
  for (uint32_t& x : v) {
    unsigned char b[4];
    absl::StatusOr<bool> got = f->ReadExactly(reinterpret_cast<char*>(b), 4);
    if (!got.ok()) return got.status();
    if (!*got) return absl::DataLossError(absl::StrCat(f->path(), ": empty"));
    x = (uint32_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
  }
  if (v[0] != magic) {
    return absl::InvalidArgumentError(absl::StrCat(f->path(), ": IDX magic 0x",
                                                   absl::Hex(v[0]), ", want 0x",
                                                   absl::Hex(magic)));
  }
  return v;
}

class IdxReader final : public RecordReader {
 public:
  IdxReader(std::unique_ptr<InputFile> images,
            std::unique_ptr<InputFile> labels, uint32_t count, uint32_t pixels,
            bool skip_bad_records)
      : RecordReader(skip_bad_records),
        images_(std::move(images)),
        labels_(std::move(labels)),
        count_(count),
        pixels_(pixels) {}

  std::string PositionOf(int64_t image) const override {
    return absl::StrCat(images_->path(), ": image ", image);
  }

  // The record's bytes: its label, then its pixels.
  absl::StatusOr<bool> ReadRaw(std::string* raw) override {
    if (index_ == count_) return false;
    ++index_;
    raw->resize(1 + pixels_);
    absl::StatusOr<bool> got = labels_->ReadExactly(raw->data(), 1);
    if (got.ok() && *got) got = images_->ReadExactly(raw->data() + 1, pixels_);
    if (!got.ok() || !*got) {
      return absl::DataLossError(absl::StrCat(Position(), ": truncated file"));
    }
    return true;
  }

  absl::Status Parse(const std::string& raw, Example* e) const override {
    e->Clear();
    if (raw.size() != 1 + pixels_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "record has ", raw.size(), " bytes, want ", 1 + pixels_));
    }
    e->label = static_cast<float>(static_cast<unsigned char>(raw[0]));
    e->dense.resize(pixels_);
    for (uint32_t i = 0; i < pixels_; ++i) {
      e->dense[i] = static_cast<unsigned char>(raw[1 + i]) / 255.0f;
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<InputFile> images_, labels_;
  const uint32_t count_, pixels_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RecordReader>> NewIdxReader(
    const std::string& images_path, const ReaderOptions& options) {
  const std::string labels_path =
      absl::StrReplaceAll(images_path, {{"images-idx3", "labels-idx1"}});
  if (labels_path == images_path) {
    return absl::InvalidArgumentError(absl::StrCat(
        "idx: '", images_path, "' does not name an images-idx3 file"));
  }
  auto images = InputFile::Open(images_path);
  if (!images.ok()) return images.status();
  auto labels = InputFile::Open(labels_path);
  if (!labels.ok()) return labels.status();
  auto ih = ReadHeader(images->get(), 0x803, 3);
  if (!ih.ok()) return ih.status();
  auto lh = ReadHeader(labels->get(), 0x801, 1);
  if (!lh.ok()) return lh.status();
  if ((*ih)[1] != (*lh)[1]) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, " holds ", (*ih)[1], " images but ",
                     labels_path, " holds ", (*lh)[1], " labels"));
  }
  return std::unique_ptr<RecordReader>(
      new IdxReader(std::move(*images), std::move(*labels), (*ih)[1],
                    (*ih)[2] * (*ih)[3], options.skip_bad_records));
}

}  // namespace psrt
