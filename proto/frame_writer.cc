#include "proto/frame_writer.h"

#include <utility>

namespace psrt {
namespace {

constexpr int kWireTypeLengthDelimited = 2;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

FrameWriter::FrameWriter(const google::protobuf::MessageLite& header) {
  std::string bytes = header.SerializeAsString();
  AppendTag(kFrameHeaderField, bytes.size());
  pending_ += bytes;
}

void FrameWriter::AppendTag(int field, size_t length) {
  AppendVarint((field << 3) | kWireTypeLengthDelimited, &pending_);
  AppendVarint(length, &pending_);
}

int FrameWriter::AddPayload(grpc::Slice bytes) {
  AppendTag(kFramePayloadField, bytes.size());
  // Small payloads (ids of a few rows) are cheaper copied than referenced.
  if (bytes.size() <= 256) {
    pending_.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  } else {
    slices_.emplace_back(pending_);
    pending_.clear();
    slices_.push_back(std::move(bytes));
  }
  return num_payloads_++;
}

grpc::ByteBuffer FrameWriter::Finish() {
  if (!pending_.empty()) {
    slices_.emplace_back(pending_);
    pending_.clear();
  }
  return grpc::ByteBuffer(slices_.data(), slices_.size());
}

}  // namespace psrt
