#include "proto/data_plane_call.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

constexpr size_t kPreambleBytes = 8;  // method, 3 zero bytes, count

void PutU32(uint32_t v, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t GetU32(const uint8_t* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace

size_t DataPlaneCallBytes(absl::Span<const grpc::ByteBuffer> messages) {
  size_t bytes = kPreambleBytes;
  for (const grpc::ByteBuffer& m : messages) bytes += 4 + m.Length();
  return bytes;
}

void EncodeDataPlaneCall(DataPlaneMethod method,
                         absl::Span<const grpc::ByteBuffer> messages,
                         uint8_t* out) {
  std::vector<uint8_t> framing;
  std::vector<grpc::Slice> slices;
  for (absl::Span<const uint8_t> segment :
       DataPlaneCallSegments(method, messages, &framing, &slices)) {
    if (segment.empty()) continue;
    std::memcpy(out, segment.data(), segment.size());
    out += segment.size();
  }
}

std::vector<absl::Span<const uint8_t>> DataPlaneCallSegments(
    DataPlaneMethod method, absl::Span<const grpc::ByteBuffer> messages,
    std::vector<uint8_t>* framing, std::vector<grpc::Slice>* slices) {
  // Sized once: the segments point into it.
  framing->resize(kPreambleBytes + 4 * messages.size());
  uint8_t* out = framing->data();
  out[0] = static_cast<uint8_t>(method);
  out[1] = out[2] = out[3] = 0;
  PutU32(static_cast<uint32_t>(messages.size()), out + 4);
  // Every slice first, then the segments: a small slice keeps its bytes
  // inside itself, so its address is final only once `slices` is.
  const size_t first = slices->size();
  std::vector<size_t> parts(messages.size());
  std::vector<grpc::Slice> dumped;
  for (size_t i = 0; i < messages.size(); ++i) {
    dumped.clear();
    (void)messages[i].Dump(&dumped);
    parts[i] = dumped.size();
    for (grpc::Slice& part : dumped) slices->push_back(std::move(part));
  }
  std::vector<absl::Span<const uint8_t>> segments;
  segments.reserve(1 + messages.size() + slices->size() - first);
  segments.emplace_back(out, kPreambleBytes);
  out += kPreambleBytes;
  size_t slice = first;
  for (size_t i = 0; i < messages.size(); ++i) {
    PutU32(static_cast<uint32_t>(messages[i].Length()), out);
    segments.emplace_back(out, 4);
    out += 4;
    for (size_t j = 0; j < parts[i]; ++j, ++slice) {
      const grpc::Slice& part = (*slices)[slice];
      segments.emplace_back(part.begin(), part.size());
    }
  }
  return segments;
}

absl::StatusOr<DataPlaneCall> DecodeDataPlaneCall(
    absl::Span<const uint8_t> body, size_t max_messages,
    std::shared_ptr<const void> owner) {
  if (body.size() < kPreambleBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data-plane call of ", body.size(), " bytes: shorter than its ",
        kPreambleBytes, "-byte preamble"));
  }
  DataPlaneCall call;
  const uint8_t method = body[0];
  if (method != static_cast<uint8_t>(DataPlaneMethod::kPull) &&
      method != static_cast<uint8_t>(DataPlaneMethod::kPush) &&
      method != static_cast<uint8_t>(DataPlaneMethod::kReplicate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane call names unknown method ", method));
  }
  if (body[1] != 0 || body[2] != 0 || body[3] != 0) {
    return absl::InvalidArgumentError(
        "data-plane call's reserved preamble bytes are not zero");
  }
  call.method = static_cast<DataPlaneMethod>(method);
  const uint32_t count = GetU32(body.data() + 4);
  // Each message takes 4 bytes at least: a count the body cannot hold is
  // refused before anything is allocated for it.
  if (count > max_messages || count > (body.size() - kPreambleBytes) / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane call announces ", count, " messages in ",
                     body.size(), " bytes (at most ", max_messages, ")"));
  }
  call.messages.reserve(count);
  // The whole body as one slice; each message is a part of it sharing its
  // reference count, which holds `owner` (if any) until the last goes.
  grpc::Slice whole =
      owner == nullptr
          ? grpc::Slice(body.data(), body.size(), grpc::Slice::STATIC_SLICE)
          : grpc::Slice(
                const_cast<uint8_t*>(body.data()), body.size(),
                [](void* held) {
                  delete static_cast<std::shared_ptr<const void>*>(held);
                },
                new std::shared_ptr<const void>(std::move(owner)));
  size_t at = kPreambleBytes;
  for (uint32_t i = 0; i < count; ++i) {
    if (body.size() - at < 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data-plane call's message ", i, " has no size: body ends"));
    }
    const uint32_t bytes = GetU32(body.data() + at);
    at += 4;
    if (bytes > body.size() - at) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data-plane call's message ", i, " of ", bytes, " bytes runs past ",
          "the body's end (", body.size() - at, " left)"));
    }
    grpc::Slice slice = whole.sub(at, at + bytes);
    call.messages.emplace_back(&slice, 1);
    at += bytes;
  }
  if (at != body.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane call has ", body.size() - at,
                     " bytes after its last message"));
  }
  return call;
}

}  // namespace psrt
