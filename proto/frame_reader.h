// Reads a ps.proto `Frame` message out of received gRPC slices without
// copying payload bytes, validating its structure as untrusted input.
//
//   FrameReader frame;
//   absl::Status s = frame.Parse(request);
//   PushRequestHeader header;
//   if (s.ok()) s = frame.ParseHeader(&header);
//   ForEachFloatRun(frame.payload(0), [&](const float* v, size_t n,
//                                          size_t first) { ... });
#ifndef PSRT_PROTO_FRAME_READER_H_
#define PSRT_PROTO_FRAME_READER_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace psrt {

// One payload segment: bytes that may be spread over several slices.
// Valid while the FrameReader it came from is alive.
class PayloadView {
 public:
  PayloadView() = default;
  PayloadView(const absl::string_view* chunks, size_t num_chunks, size_t size)
      : chunks_(chunks), num_chunks_(num_chunks), size_(size) {}

  // A view of one contiguous buffer (for data that did not come off the
  // wire, or was merged).
  static PayloadView Contiguous(const void* data, size_t size) {
    PayloadView view;
    view.single_ = absl::string_view(static_cast<const char*>(data), size);
    view.size_ = size;
    return view;
  }

  size_t size() const { return size_; }

  // Calls fn(const char* data, size_t n) for each contiguous piece, in order.
  template <typename Fn>
  void ForEachChunk(Fn&& fn) const {
    if (chunks_ == nullptr) {
      if (!single_.empty()) fn(single_.data(), single_.size());
      return;
    }
    for (size_t i = 0; i < num_chunks_; ++i) {
      if (!chunks_[i].empty()) fn(chunks_[i].data(), chunks_[i].size());
    }
  }

  // Copies all size() bytes to dst.
  void CopyTo(void* dst) const;

 private:
  const absl::string_view* chunks_ = nullptr;  // nullptr: single_ is the data
  size_t num_chunks_ = 0;
  absl::string_view single_;
  size_t size_ = 0;
};

class FrameReader {
 public:
  FrameReader() = default;
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;

  // Takes references to the message's slices and checks the framing: the
  // header field first, then payload fields, each length within the message.
  // INVALID_ARGUMENT names what is wrong and at which byte.
  absl::Status Parse(const grpc::ByteBuffer& message);

  // Parses the header into `header`.
  absl::Status ParseHeader(google::protobuf::MessageLite* header) const;

  int num_payloads() const { return static_cast<int>(payloads_.size()); }
  PayloadView payload(int i) const {
    const Range& r = payloads_[i];
    return PayloadView(chunks_.data() + r.first_chunk, r.num_chunks, r.size);
  }
  size_t message_bytes() const { return message_bytes_; }

 private:
  struct Range {
    size_t first_chunk;
    size_t num_chunks;
    size_t size;
  };

  std::vector<grpc::Slice> slices_;
  std::vector<absl::string_view> chunks_;
  std::vector<Range> payloads_;
  std::string header_;
  size_t message_bytes_ = 0;
};

// Visits a payload as runs of float32 values in place: fn(const char*
// bytes, size_t n, size_t index_of_first), `bytes` holding n values at
// any alignment (read them with memcpy). Only a value that straddles two
// slices is assembled (a run of 1). REQUIRES: payload.size() % 4 == 0.
template <typename Fn>
void ForEachFloatBytes(const PayloadView& payload, Fn&& fn) {
  alignas(float) char carry[sizeof(float)];
  size_t carried = 0;
  size_t index = 0;
  payload.ForEachChunk([&](const char* p, size_t n) {
    if (carried > 0) {
      const size_t take = std::min(sizeof(float) - carried, n);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      n -= take;
      if (carried < sizeof(float)) return;
      fn(static_cast<const char*>(carry), size_t{1}, index);
      ++index;
      carried = 0;
    }
    const size_t whole = n / sizeof(float);
    if (whole > 0) fn(p, whole, index);
    index += whole;
    carried = n - whole * sizeof(float);
    std::memcpy(carry, p + whole * sizeof(float), carried);
  });
}

// Visits a payload as float32 values in order: fn(const float* values,
// size_t n, size_t index_of_first). The pointers are float-aligned; values
// that straddle slices or sit at misaligned addresses are passed through a
// small aligned copy. REQUIRES: payload.size() % 4 == 0.
template <typename Fn>
void ForEachFloatRun(const PayloadView& payload, Fn&& fn) {
  constexpr size_t kScratchFloats = 4096;
  alignas(64) float scratch[kScratchFloats];
  ForEachFloatBytes(payload, [&](const char* p, size_t whole, size_t index) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {
      fn(reinterpret_cast<const float*>(p), whole, index);
      return;
    }
    for (size_t done = 0; done < whole;) {
      const size_t k = std::min(whole - done, kScratchFloats);
      std::memcpy(scratch, p + done * sizeof(float), k * sizeof(float));
      fn(static_cast<const float*>(scratch), k, index + done);
      done += k;
    }
  });
}

// Visits a payload of rows of `width` floats: fn(size_t row, const float*
// values). Rows split across slices are assembled in a small buffer.
// REQUIRES: payload.size() == rows * width * 4 for some rows.
template <typename Fn>
void ForEachRow(const PayloadView& payload, size_t width, Fn&& fn) {
  std::vector<float> partial(width);
  size_t filled = 0;
  size_t row = 0;
  ForEachFloatRun(payload, [&](const float* v, size_t n, size_t) {
    if (filled > 0) {
      const size_t take = std::min(width - filled, n);
      std::memcpy(partial.data() + filled, v, take * sizeof(float));
      filled += take;
      v += take;
      n -= take;
      if (filled < width) return;
      fn(row++, static_cast<const float*>(partial.data()));
      filled = 0;
    }
    for (; n >= width; n -= width, v += width) fn(row++, v);
    if (n > 0) {
      std::memcpy(partial.data(), v, n * sizeof(float));
      filled = n;
    }
  });
}

}  // namespace psrt

#endif  // PSRT_PROTO_FRAME_READER_H_
