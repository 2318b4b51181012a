// A push's, pull's or forward's body on the data plane (dataplane/): which
// method, then the messages its gRPC call would stream, in one contiguous body.
//
//   [u8 method][3 zero bytes][u32 count] then per message [u32 bytes][bytes]
//
// little-endian. Read back, each message is a grpc::ByteBuffer over the
// body's own memory (no copy), so PushHandler, PullResponder and the
// client's pull scatter read them as they read a gRPC stream's.
#ifndef PSRT_PROTO_DATA_PLANE_CALL_H_
#define PSRT_PROTO_DATA_PLANE_CALL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"

namespace psrt {

// kReplicate: a primary's forward to a backup (PS to PS only, on a
// connection a PS opened: ps_server/rpc/data_planes.h).
enum class DataPlaneMethod : uint8_t { kPull = 1, kPush = 2, kReplicate = 3 };

// Bytes EncodeDataPlaneCall writes for `messages`.
size_t DataPlaneCallBytes(absl::Span<const grpc::ByteBuffer> messages);
// Writes the body into `out` (DataPlaneCallBytes of it).
void EncodeDataPlaneCall(DataPlaneMethod method,
                         absl::Span<const grpc::ByteBuffer> messages,
                         uint8_t* out);

// The same body as the pieces it is made of, for a gathered send: the
// preamble and size prefixes are written into `framing`, the messages'
// bytes are referenced where they are (their slices added to `slices`,
// which keeps them alive). Valid while `framing` and `slices` are, and
// `slices` is not added to (a small slice holds its bytes itself).
std::vector<absl::Span<const uint8_t>> DataPlaneCallSegments(
    DataPlaneMethod method, absl::Span<const grpc::ByteBuffer> messages,
    std::vector<uint8_t>* framing, std::vector<grpc::Slice>* slices);

struct DataPlaneCall {
  DataPlaneMethod method;
  // Over `body`'s memory.
  std::vector<grpc::ByteBuffer> messages;
};
// INVALID_ARGUMENT naming what is wrong (an unknown method, a count or a
// size past the body's end, bytes left over, more than `max_messages`).
// With `owner` (what keeps `body` alive), the messages hold a reference
// to it and may outlive the caller's (a push forwarded to backups keeps
// its messages); without, they must not outlive `body`.
absl::StatusOr<DataPlaneCall> DecodeDataPlaneCall(
    absl::Span<const uint8_t> body, size_t max_messages,
    std::shared_ptr<const void> owner = nullptr);

}  // namespace psrt

#endif  // PSRT_PROTO_DATA_PLANE_CALL_H_
