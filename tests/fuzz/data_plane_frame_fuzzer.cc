// Data-plane messages from the wire: each input is one header message as a
// PS's data plane receives it (header, then an inline body or the sizes of
// the messages a separate body comes in). A frame that parses must be
// exactly what its header says; a hello's body must decode to fields that
// re-encode to the same bytes, and must not open a connection without the
// token's proof; a request's inline body, read as a push or pull
// (proto/data_plane_call.h), must be exactly its messages.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dataplane/connection_gate.h"
#include "dataplane/frame.h"
#include "proto/data_plane_call.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psrt::dataplane;
  FrameLimits limits;
  limits.max_body_bytes = 1 << 20;
  absl::StatusOr<FrameMessage> frame =
      ParseFrameMessage(absl::MakeConstSpan(data, size), limits);
  if (!frame.ok()) return 0;
  const FrameHeader& header = frame->header;
  if (header.body_bytes > limits.max_body_bytes) std::abort();
  if (header.kind == FrameKind::kReady && header.body_bytes != 0) std::abort();
  if (frame->body_follows != (header.body_bytes > kInlineBodyBytes)) {
    std::abort();
  }
  const size_t inline_bytes = frame->body_follows ? 0 : header.body_bytes;
  const size_t table_bytes = 4 * frame->body_sends.size();
  if (frame->inline_body.size() != inline_bytes ||
      size != kFrameHeaderBytes + inline_bytes + table_bytes) {
    std::abort();
  }
  if (frame->body_follows) {
    if (frame->body_sends.empty() || frame->body_sends.size() > kMaxBodySends) {
      std::abort();
    }
    uint64_t sum = 0;
    for (uint32_t bytes : frame->body_sends) {
      if (bytes == 0) std::abort();
      sum += bytes;
    }
    if (sum != header.body_bytes) std::abort();
  }
  if (header.kind == FrameKind::kRequest && !frame->body_follows) {
    absl::StatusOr<psrt::DataPlaneCall> call =
        psrt::DecodeDataPlaneCall(frame->inline_body, 1 << 20);
    if (call.ok()) {
      size_t bytes = 8;
      for (const grpc::ByteBuffer& m : call->messages) bytes += 4 + m.Length();
      if (bytes != frame->inline_body.size()) std::abort();
    }
  }
  if (!CheckFrameBody(header, header.body_bytes).ok()) std::abort();
  // The header re-encodes to the bytes it was read from.
  uint8_t again[kFrameHeaderBytes];
  EncodeFrameHeader(header, again);
  if (std::memcmp(again, data, kFrameHeaderBytes) != 0) std::abort();
  if (header.kind == FrameKind::kHello) {
    const absl::string_view body(
        reinterpret_cast<const char*>(frame->inline_body.data()),
        frame->inline_body.size());
    absl::StatusOr<Hello> hello = DecodeHello(body);
    if (!hello.ok()) return 0;
    if (EncodeHello(hello->client_address, hello->proof) != body) std::abort();
    ConnectionGate gate("fuzz-token", 4);
    const Challenge challenge = gate.Issue();
    // Only a proof made with the token opens it; the input cannot know the
    // challenge's nonce.
    if (gate.Redeem(challenge.connection_id, *hello).ok()) std::abort();
    if (gate.Redeem(header.connection_id, *hello).ok()) std::abort();
  }
  return 0;
}
