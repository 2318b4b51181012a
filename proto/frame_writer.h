// Builds a ps.proto `Frame` message as a list of gRPC slices: the serialized
// header and the small tag/length prefixes are copied, payload slices are
// passed through untouched (zero copy).
//
//   PushRequestHeader header = ...;
//   SliceLease lease;
//   FrameWriter writer(header);
//   writer.AddPayload(lease.Lend(ids, n * sizeof(int64_t)));
//   grpc::ByteBuffer message = writer.Finish();
#ifndef PSRT_PROTO_FRAME_WRITER_H_
#define PSRT_PROTO_FRAME_WRITER_H_

#include <string>
#include <vector>

#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace psrt {

// Field numbers of ps.proto's Frame, written by hand here and in FrameReader.
inline constexpr int kFrameHeaderField = 1;
inline constexpr int kFramePayloadField = 2;

class FrameWriter {
 public:
  explicit FrameWriter(const google::protobuf::MessageLite& header);

  // Appends the next payload segment and returns its index.
  int AddPayload(grpc::Slice bytes);

  int num_payloads() const { return num_payloads_; }

  // The complete message. The writer must not be used afterwards.
  grpc::ByteBuffer Finish();

 private:
  void AppendTag(int field, size_t length);

  std::vector<grpc::Slice> slices_;
  std::string pending_;  // bytes not yet turned into a slice
  int num_payloads_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PROTO_FRAME_WRITER_H_
