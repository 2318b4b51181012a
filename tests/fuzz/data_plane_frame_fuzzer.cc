// Data-plane messages from the wire: each input is one header message as a
// PS's data plane receives it (header, maybe an inline body). A frame that
// parses must be exactly what its header says; a hello's body must decode
// to fields that re-encode to the same bytes, and must not open a
// connection without the token's proof.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dataplane/connection_gate.h"
#include "dataplane/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psrt::dataplane;
  FrameLimits limits;
  limits.max_body_bytes = 1 << 20;
  absl::StatusOr<FrameMessage> frame =
      ParseFrameMessage(absl::MakeConstSpan(data, size), limits);
  if (!frame.ok()) return 0;
  const FrameHeader& header = frame->header;
  if (header.body_bytes > limits.max_body_bytes) std::abort();
  if (frame->body_follows != (header.body_bytes > kInlineBodyBytes)) {
    std::abort();
  }
  const size_t inline_bytes = frame->body_follows ? 0 : header.body_bytes;
  if (frame->inline_body.size() != inline_bytes ||
      size != kFrameHeaderBytes + inline_bytes) {
    std::abort();
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
