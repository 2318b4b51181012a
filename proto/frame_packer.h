// Packs items and their payload segments into a sequence of Frame messages
// of bounded size: the caller adds payloads and header entries for the
// current message, and flushes when the next piece would not fit.
#ifndef PSRT_PROTO_FRAME_PACKER_H_
#define PSRT_PROTO_FRAME_PACKER_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/frame_writer.h"

namespace psrt {

template <typename Header>
class FramePacker {
 public:
  explicit FramePacker(size_t message_bytes) : limit_(message_bytes) {}

  // Payload bytes the current message can still take (0 when full).
  size_t room() const { return limit_ > bytes_ ? limit_ - bytes_ : 0; }
  bool empty() const { return payloads_.empty() && !touched_; }

  // The current message's header, for adding entries.
  Header* header() {
    touched_ = true;
    return &header_;
  }

  // Adds a payload to the current message and returns its index there.
  int AddPayload(grpc::Slice bytes) {
    bytes_ += bytes.size();
    payloads_.push_back(std::move(bytes));
    return static_cast<int>(payloads_.size()) - 1;
  }

  // Ends the current message. `prepare` may adjust its header first.
  template <typename Prepare>
  void Flush(Prepare&& prepare) {
    prepare(&header_, messages_.size());
    FrameWriter writer(header_);
    for (auto& p : payloads_) writer.AddPayload(std::move(p));
    messages_.push_back(writer.Finish());
    header_.Clear();
    payloads_.clear();
    bytes_ = 0;
    touched_ = false;
  }
  void Flush() {
    Flush([](Header*, size_t) {});
  }

  std::vector<grpc::ByteBuffer>& messages() { return messages_; }

 private:
  const size_t limit_;
  Header header_;
  std::vector<grpc::Slice> payloads_;
  size_t bytes_ = 0;
  bool touched_ = false;
  std::vector<grpc::ByteBuffer> messages_;
};

}  // namespace psrt

#endif  // PSRT_PROTO_FRAME_PACKER_H_
