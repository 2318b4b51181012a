#include "proto/frame_reader.h"

#include "absl/strings/str_cat.h"
#include "proto/frame_writer.h"

namespace psrt {
namespace {

// A read position over a list of slices.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    SkipEmpty();
  }

  size_t offset() const { return offset_; }
  bool done() const { return slice_ == slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[slice_].begin()[pos_];
    Advance(1);
    return true;
  }

  // Reads a base-128 varint of at most 10 bytes.
  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Appends views of the next n bytes to out. REQUIRES: n bytes remain.
  void Take(size_t n, std::vector<absl::string_view>* out) {
    while (n > 0) {
      const grpc::Slice& s = slices_[slice_];
      const size_t k = std::min(n, s.size() - pos_);
      out->emplace_back(reinterpret_cast<const char*>(s.begin()) + pos_, k);
      Advance(k);
      n -= k;
    }
  }

 private:
  void Advance(size_t n) {
    pos_ += n;
    offset_ += n;
    if (pos_ == slices_[slice_].size()) {
      ++slice_;
      pos_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (slice_ < slices_.size() && slices_[slice_].size() == 0) ++slice_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t pos_ = 0;
  size_t offset_ = 0;
};

absl::Status Malformed(size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed psrt frame at byte ", offset, ": ", what));
}

}  // namespace

void PayloadView::CopyTo(void* dst) const {
  char* out = static_cast<char*>(dst);
  ForEachChunk([&](const char* p, size_t n) {
    std::memcpy(out, p, n);
    out += n;
  });
}

absl::Status FrameReader::Parse(const grpc::ByteBuffer& message) {
  slices_.clear();
  chunks_.clear();
  payloads_.clear();
  header_.clear();
  message_bytes_ = message.Length();
  if (!message.Dump(&slices_).ok()) {
    return absl::InvalidArgumentError("psrt frame: unreadable message buffer");
  }
  const size_t total = message_bytes_;
  Cursor cursor(slices_);
  bool have_header = false;  // at most one header field, before payloads
  while (!cursor.done()) {
    const size_t field_offset = cursor.offset();
    uint64_t tag;
    if (!cursor.ReadVarint(&tag)) return Malformed(field_offset, "bad tag");
    const int field = static_cast<int>(tag >> 3);
    if ((tag & 7) != 2 ||
        (field != kFrameHeaderField && field != kFramePayloadField)) {
      return Malformed(
          field_offset,
          absl::StrCat("unexpected field ", tag >> 3, " (wire type ", tag & 7,
                       "); a Frame holds only header (1) and "
                       "payload (2) bytes"));
    }
    uint64_t length;
    if (!cursor.ReadVarint(&length)) {
      return Malformed(field_offset, "truncated length");
    }
    if (length > total - cursor.offset()) {
      return Malformed(
          field_offset,
          absl::StrCat("field ", field, " claims ", length, " bytes but only ",
                       total - cursor.offset(), " remain"));
    }
    if (field == kFrameHeaderField) {
      if (have_header || !payloads_.empty()) {
        return Malformed(field_offset,
                         "header must appear once, before any payload");
      }
      std::vector<absl::string_view> parts;
      cursor.Take(length, &parts);
      for (absl::string_view part : parts) {
        header_.append(part.data(), part.size());
      }
      have_header = true;
    } else {
      const size_t first = chunks_.size();
      cursor.Take(length, &chunks_);
      payloads_.push_back({first, chunks_.size() - first, length});
    }
  }
  // A generic protobuf encoder omits an empty header; that is an empty header.
  return absl::OkStatus();
}

absl::Status FrameReader::ParseHeader(
    google::protobuf::MessageLite* header) const {
  if (!header->ParseFromString(header_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("psrt frame: header (", header_.size(),
                     " bytes) is not a valid ", header->GetTypeName()));
  }
  return absl::OkStatus();
}

}  // namespace psrt
