// A request's or reply's body as the sender holds it: pieces of memory
// (length prefixes, protobuf headers, tensors) that are one body only
// when read back to back. It travels as a few tagged sends of up to
// iov_limit pieces each (fi_tsendv), so the tensors leave from where they
// are; only pieces up to kStagedSegmentBytes (framing) are copied, into
// staging bytes of the body's own, which also joins neighbours into one
// piece. The receiver posts one receive per send at consecutive offsets
// of one buffer (its frame lists their sizes, frame.h), so it reads one
// contiguous body as before. A body that would need more than
// kMaxBodySends sends is copied whole and sent as one.
#ifndef PSRT_DATAPLANE_BODY_PIECES_H_
#define PSRT_DATAPLANE_BODY_PIECES_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "dataplane/frame.h"

namespace psrt::dataplane {

// Segments this small are copied rather than sent from where they are.
inline constexpr size_t kStagedSegmentBytes = 4096;

using Segment = absl::Span<const uint8_t>;

class OutgoingBody {
 public:
  struct Send {
    struct iovec iov[4];
    size_t count = 0;
    uint64_t bytes = 0;
  };

  OutgoingBody() = default;
  // `segments`' memory must stay put until the sends completed; the body
  // keeps only its staging bytes. `iov_limit`: the endpoint's (1 to 4).
  OutgoingBody(absl::Span<const Segment> segments, size_t iov_limit);
  OutgoingBody(const OutgoingBody&) = delete;
  OutgoingBody& operator=(const OutgoingBody&) = delete;
  OutgoingBody(OutgoingBody&&) = default;
  OutgoingBody& operator=(OutgoingBody&&) = default;

  uint64_t bytes() const { return bytes_; }
  const std::vector<Send>& sends() const { return sends_; }
  // Each send's size, in order: the frame's piece table.
  std::vector<uint32_t> send_bytes() const;
  // The whole body into `out` (bytes() long): for a body small enough to
  // ride in its header's message.
  void CopyTo(uint8_t* out) const;
  // The frame's header message for this body (frame.h): `header` with its
  // body_bytes set, then the body inline, or its sends' sizes when it
  // follows. True when it follows (then every send is to be posted).
  bool EncodeHeaderMessage(FrameHeader header,
                           std::vector<uint8_t>* message) const;
  // Bytes this body copied to send (framing, or all of it when its
  // pieces were too many).
  size_t staged_bytes() const { return staged_.size(); }

 private:
  void Stage(absl::Span<const Segment> segments, size_t iov_limit);
  void Flatten(absl::Span<const Segment> segments);

  uint64_t bytes_ = 0;
  std::vector<uint8_t> staged_;
  std::vector<Send> sends_;
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_BODY_PIECES_H_
