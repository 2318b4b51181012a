// A received gRPC message's bytes in one contiguous string (for parsing a
// small protobuf: responses, control requests). Large payloads are read
// slice by slice instead (frame_reader.h).
#ifndef PSRT_PROTO_BYTE_BUFFER_BYTES_H_
#define PSRT_PROTO_BYTE_BUFFER_BYTES_H_

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace psrt {

// False if gRPC cannot hand out the buffer's slices.
inline bool ByteBufferBytes(const grpc::ByteBuffer& buffer, std::string* out) {
  std::vector<grpc::Slice> slices;
  out->clear();
  if (!buffer.Dump(&slices).ok()) return false;
  out->reserve(buffer.Length());
  for (const grpc::Slice& slice : slices) {
    out->append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return true;
}

}  // namespace psrt

#endif  // PSRT_PROTO_BYTE_BUFFER_BYTES_H_
