#include "dataplane/frame.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/crc32c.h"

namespace psrt::dataplane {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr size_t kHeaderCrcOffset = 44;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed data-plane frame: ", what));
}

}  // namespace

const char* FrameKindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kHello:
      return "hello";
    case FrameKind::kWelcome:
      return "welcome";
    case FrameKind::kRequest:
      return "request";
    case FrameKind::kResponse:
      return "response";
    case FrameKind::kReady:
      return "ready";
  }
  return "unknown";
}

FrameHeader ReadyHeader(uint32_t connection_id, uint32_t sequence,
                        uint64_t connection_key) {
  FrameHeader ready;
  ready.kind = FrameKind::kReady;
  ready.connection_id = connection_id;
  ready.sequence = sequence;
  ready.connection_key = connection_key;
  return ready;
}

void EncodeFrameHeader(const FrameHeader& header,
                       uint8_t out[kFrameHeaderBytes]) {
  Put32(out, kFrameMagic);
  Put16(out + 4, kFrameVersion);
  Put16(out + 6, static_cast<uint16_t>(header.kind));
  Put32(out + 8, header.connection_id);
  Put32(out + 12, header.sequence);
  Put64(out + 16, header.body_bytes);
  Put32(out + 24, static_cast<uint32_t>(header.status_code));
  Put32(out + 28, 0);
  Put32(out + 32, 0);
  Put64(out + 36, header.connection_key);
  Put32(out + kHeaderCrcOffset, MaskCrc(Crc32c(out, kHeaderCrcOffset)));
}

absl::StatusOr<FrameHeader> ParseFrameHeader(absl::Span<const uint8_t> bytes,
                                             const FrameLimits& limits) {
  if (bytes.size() != kFrameHeaderBytes) {
    return Malformed(absl::StrCat("header of ", bytes.size(),
                                  " bytes, expected ", kFrameHeaderBytes));
  }
  const uint8_t* p = bytes.data();
  if (Get32(p) != kFrameMagic) return Malformed("bad magic");
  if (uint16_t version = Get16(p + 4); version != kFrameVersion) {
    return Malformed(absl::StrCat("version ", version, ", this side speaks ",
                                  kFrameVersion));
  }
  const uint16_t kind = Get16(p + 6);
  if (kind < static_cast<uint16_t>(FrameKind::kHello) ||
      kind > static_cast<uint16_t>(FrameKind::kReady)) {
    return Malformed(absl::StrCat("unknown kind ", kind));
  }
  if (uint32_t flags = Get32(p + 28); flags != 0) {
    return Malformed(absl::StrCat("unknown flags 0x", absl::Hex(flags)));
  }
  if (Get32(p + 32) != 0) return Malformed("reserved bytes set");
  const uint32_t code = Get32(p + 24);
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return Malformed(absl::StrCat("status code ", code, " out of range"));
  }
  if (MaskCrc(Crc32c(p, kHeaderCrcOffset)) != Get32(p + kHeaderCrcOffset)) {
    return Malformed("header CRC mismatch");
  }
  FrameHeader header;
  header.kind = static_cast<FrameKind>(kind);
  header.connection_id = Get32(p + 8);
  header.sequence = Get32(p + 12);
  header.body_bytes = Get64(p + 16);
  header.status_code = static_cast<absl::StatusCode>(code);
  header.connection_key = Get64(p + 36);
  const uint64_t limit =
      header.kind == FrameKind::kReady ? 0
      : header.kind == FrameKind::kHello || header.kind == FrameKind::kWelcome
          ? limits.max_hello_bytes
          : limits.max_body_bytes;
  if (header.body_bytes > limit) {
    return Malformed(absl::StrCat(FrameKindName(header.kind), " body of ",
                                  header.body_bytes, " bytes, over the limit ",
                                  limit));
  }
  return header;
}

void AppendBodySends(absl::Span<const uint32_t> sizes,
                     std::vector<uint8_t>* message) {
  size_t at = message->size();
  message->resize(at + 4 * sizes.size());
  for (uint32_t bytes : sizes) {
    Put32(message->data() + at, bytes);
    at += 4;
  }
}

absl::Status CheckFrameBody(const FrameHeader& header, uint64_t received) {
  if (received != header.body_bytes) {
    return Malformed(absl::StrCat(FrameKindName(header.kind), " body of ",
                                  received, " bytes, its header said ",
                                  header.body_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<FrameMessage> ParseFrameMessage(
    absl::Span<const uint8_t> message, const FrameLimits& limits) {
  if (message.size() < kFrameHeaderBytes) {
    return Malformed(absl::StrCat("message of ", message.size(),
                                  " bytes, shorter than a header"));
  }
  absl::StatusOr<FrameHeader> header =
      ParseFrameHeader(message.subspan(0, kFrameHeaderBytes), limits);
  if (!header.ok()) return header.status();
  FrameMessage frame;
  frame.header = *header;
  frame.body_follows = header->body_bytes > kInlineBodyBytes;
  if (frame.body_follows) {
    const size_t table = message.size() - kFrameHeaderBytes;
    if (table == 0 || table % 4 != 0 || table / 4 > kMaxBodySends) {
      return Malformed(absl::StrCat(
          FrameKindName(header->kind), " message lists ", table,
          " bytes of body sizes; expected 1 to ", kMaxBodySends, " u32s"));
    }
    uint64_t sum = 0;
    for (size_t at = kFrameHeaderBytes; at < message.size(); at += 4) {
      const uint32_t bytes = Get32(message.data() + at);
      if (bytes == 0) {
        return Malformed(absl::StrCat(FrameKindName(header->kind),
                                      " body lists a message of 0 bytes"));
      }
      frame.body_sends.push_back(bytes);
      sum += bytes;
    }
    if (sum != header->body_bytes) {
      return Malformed(absl::StrCat(
          FrameKindName(header->kind), " body's messages add up to ", sum,
          " bytes, its header said ", header->body_bytes));
    }
    return frame;
  }
  const uint64_t inline_bytes = header->body_bytes;
  if (message.size() - kFrameHeaderBytes != inline_bytes) {
    return Malformed(absl::StrCat(
        FrameKindName(header->kind), " message of ", message.size(),
        " bytes for an inline body of ", header->body_bytes));
  }
  frame.inline_body = message.subspan(kFrameHeaderBytes, inline_bytes);
  return frame;
}

}  // namespace psrt::dataplane
