// The data plane's framing: every message on a data-plane connection starts
// with one fixed 48-byte header, little-endian, checked before anything it
// names touches memory.
//
//   offset  size  field
//        0     4  magic "PSDP"
//        4     2  version (1)
//        6     2  kind (FrameKind)
//        8     4  connection id (the server's, from the gRPC handshake)
//       12     4  sequence (a request's number on its connection)
//       16     8  body bytes (the message that follows this header)
//       24     4  status code (absl::StatusCode; responses only)
//       28     4  flags (0; a set bit is refused)
//       32     4  reserved (0; anything else is refused)
//       36     8  connection key (the welcome's; 0 in a hello and welcome)
//       44     4  CRC-32C of bytes [0, 44) (masked)
//
// The connection key is 8 random bytes the server hands the client in its
// welcome (sent to the address the hello proved). Every later frame of
// the connection carries it, and a frame whose key is not its
// connection's is dropped: providers that cannot say who sent a message
// (shm reports a peer it never inserted as the first one it did) cannot
// be used to speak on another client's connection.
//
// A frame travels as tagged messages (fabric_endpoint.h). A body of up to
// kInlineBodyBytes rides in the header's message, right after it; a longer
// one follows as 1 to kMaxBodySends messages sent in order (body_pieces.h),
// whose sizes the header's message lists after the header (u32 each, in
// place of an inline body). They are received back to back into a buffer
// of exactly `body_bytes` where its reader wants it: a message longer
// than its listed size is truncated by the fabric and refused, a shorter
// one is refused by size. The header's message is tagged
// HeaderTag(connection, sequence), a separate body's messages
// BodyTag(...). Nothing is applied from a frame whose
// header or body fails a check.
//
// A separate body is sent only once its receiver said it is ready: a
// ready frame (no body, the connection's key, the call's sequence) that
// the receiver sends once it posted the body's receives. So a body is
// never an unexpected message at its receiver, which costs a round trip
// and keeps two things from happening: a sender that dies before its body
// is received cannot leave the receiver matching a message of a closed
// connection (rxm 1.17 crashed in fi_trecv on that: docs/architecture.md),
// and a body nobody will receive is never handed to the provider, which
// would keep it queued for good.
//
// A server drops a reply body whose ready frame does not come in time
// (its client broke the call, died, or was stopped). A ready that comes
// after all, on its connection and with its key, is answered with the
// drop notice: one body message of 0 bytes (a listed one never is), on
// which the client fails the call UNAVAILABLE, retried, rather than
// waiting out its deadline.
#ifndef PSRT_DATAPLANE_FRAME_H_
#define PSRT_DATAPLANE_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace psrt::dataplane {

inline constexpr uint32_t kFrameMagic = 0x50445350;  // "PSDP"
inline constexpr uint16_t kFrameVersion = 3;
inline constexpr size_t kFrameHeaderBytes = 48;
inline constexpr size_t kInlineBodyBytes = 4096;
// Messages a separate body travels in, at most.
inline constexpr size_t kMaxBodySends = 64;
// The largest message a header's receive buffer takes.
inline constexpr size_t kHeaderMessageBytes =
    kFrameHeaderBytes + kInlineBodyBytes;

inline uint64_t HeaderTag(uint32_t connection_id, uint32_t sequence) {
  return (uint64_t{connection_id} << 32) |
         (uint64_t{sequence & 0x7fffffffu} << 1);
}
inline uint64_t BodyTag(uint32_t connection_id, uint32_t sequence) {
  return HeaderTag(connection_id, sequence) | 1;
}
// A receive matching any header message: only the body bit is compared.
inline constexpr uint64_t kAnyHeaderIgnoreBits = ~uint64_t{1};

enum class FrameKind : uint16_t {
  kHello = 1,     // client -> server: its fabric address and proof
  kWelcome = 2,   // server -> client: the hello was accepted
  kRequest = 3,   // client -> server: a call's bytes
  kResponse = 4,  // server -> client: the call's answer or its error
  kReady = 5,     // either way: send the separate body of this call now
};

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint32_t connection_id = 0;
  uint32_t sequence = 0;
  uint64_t body_bytes = 0;
  // A response's status; the body then holds the error's message.
  absl::StatusCode status_code = absl::StatusCode::kOk;
  uint64_t connection_key = 0;
};

// The ready frame for call `sequence` of a connection (frame.h's top).
FrameHeader ReadyHeader(uint32_t connection_id, uint32_t sequence,
                        uint64_t connection_key);

// What a reader accepts: the largest body of each direction.
struct FrameLimits {
  uint64_t max_body_bytes = uint64_t{1} << 30;
  // A hello's body: a fabric address (a few dozen bytes) and a proof.
  uint64_t max_hello_bytes = 4096;
};

// The 48 header bytes of `header` (its header CRC filled in).
void EncodeFrameHeader(const FrameHeader& header,
                       uint8_t out[kFrameHeaderBytes]);

// The header in `bytes`, which must be exactly kFrameHeaderBytes long.
// INVALID_ARGUMENT naming the first thing wrong: the length, the magic, the
// version, an unknown kind, set flags or reserved bytes, a status code out
// of range, a header CRC mismatch, a body over `limits` (a hello's or
// welcome's over max_hello_bytes, a ready's over 0). The body is not
// checksummed: TCP and shared memory do not corrupt it, and a CRC would cost a
// fifth of the bandwidth.
absl::StatusOr<FrameHeader> ParseFrameHeader(absl::Span<const uint8_t> bytes,
                                             const FrameLimits& limits);

// Appends a separate body's message sizes to its header's message.
void AppendBodySends(absl::Span<const uint32_t> sizes,
                     std::vector<uint8_t>* message);

// OK if a body of `received` bytes is what `header` announced.
absl::Status CheckFrameBody(const FrameHeader& header, uint64_t received);

// A frame read off one header message of `message_bytes` bytes: the header
// and, when the body is inline, the body. INVALID_ARGUMENT when the
// message is not a header followed by exactly its inline body, or by a
// list of 1 to kMaxBodySends non-zero sizes adding up to its body when
// that is separate.
struct FrameMessage {
  FrameHeader header;
  absl::Span<const uint8_t> inline_body;  // empty when the body follows
  bool body_follows = false;
  // When it follows: the size of each message it comes in, in order (each
  // at least 1, adding up to the header's body_bytes).
  std::vector<uint32_t> body_sends;
};
absl::StatusOr<FrameMessage> ParseFrameMessage(
    absl::Span<const uint8_t> message, const FrameLimits& limits);

const char* FrameKindName(FrameKind kind);

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_FRAME_H_
