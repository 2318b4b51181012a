#include "dataplane/body_pieces.h"

#include <algorithm>
#include <cstring>

namespace psrt::dataplane {

OutgoingBody::OutgoingBody(absl::Span<const Segment> segments,
                           size_t iov_limit) {
  for (const Segment& s : segments) bytes_ += s.size();
  Stage(segments, std::clamp<size_t>(iov_limit, 1, 4));
  if (sends_.size() > kMaxBodySends) Flatten(segments);
}

void OutgoingBody::Stage(absl::Span<const Segment> segments, size_t iov_limit) {
  size_t staged_total = 0;
  for (const Segment& s : segments) {
    if (s.size() <= kStagedSegmentBytes) staged_total += s.size();
  }
  // Sized once: the iovecs point into it.
  staged_.resize(staged_total);
  size_t staged_at = 0;
  Send send;
  auto add = [&](const uint8_t* data, size_t bytes, bool staged) {
    iovec* last = send.count > 0 ? &send.iov[send.count - 1] : nullptr;
    // A staged piece right after the last staged one joins it.
    const auto* last_base =
        last != nullptr ? static_cast<const uint8_t*>(last->iov_base) : nullptr;
    if (staged && last_base != nullptr && last_base >= staged_.data() &&
        last_base < staged_.data() + staged_.size() &&
        last_base + last->iov_len == data) {
      last->iov_len += bytes;
    } else {
      if (send.count == iov_limit) {
        sends_.push_back(send);
        send = Send();
      }
      send.iov[send.count++] = iovec{const_cast<uint8_t*>(data), bytes};
    }
    send.bytes += bytes;
  };
  for (const Segment& s : segments) {
    if (s.empty()) continue;
    if (s.size() <= kStagedSegmentBytes) {
      std::memcpy(staged_.data() + staged_at, s.data(), s.size());
      add(staged_.data() + staged_at, s.size(), /*staged=*/true);
      staged_at += s.size();
    } else {
      add(s.data(), s.size(), /*staged=*/false);
    }
  }
  if (send.count > 0) sends_.push_back(send);
}

void OutgoingBody::Flatten(absl::Span<const Segment> segments) {
  staged_.resize(bytes_);
  size_t at = 0;
  for (const Segment& s : segments) {
    if (!s.empty()) std::memcpy(staged_.data() + at, s.data(), s.size());
    at += s.size();
  }
  sends_.clear();
  Send send;
  send.iov[0] = iovec{staged_.data(), staged_.size()};
  send.count = 1;
  send.bytes = bytes_;
  sends_.push_back(send);
}

std::vector<uint32_t> OutgoingBody::send_bytes() const {
  std::vector<uint32_t> sizes;
  sizes.reserve(sends_.size());
  for (const Send& s : sends_) sizes.push_back(static_cast<uint32_t>(s.bytes));
  return sizes;
}

bool OutgoingBody::EncodeHeaderMessage(FrameHeader header,
                                       std::vector<uint8_t>* message) const {
  header.body_bytes = bytes_;
  const bool follows = bytes_ > kInlineBodyBytes;
  message->resize(kFrameHeaderBytes + (follows ? 0 : bytes_));
  EncodeFrameHeader(header, message->data());
  if (follows) {
    AppendBodySends(send_bytes(), message);
  } else {
    CopyTo(message->data() + kFrameHeaderBytes);
  }
  return follows;
}

void OutgoingBody::CopyTo(uint8_t* out) const {
  for (const Send& s : sends_) {
    for (size_t i = 0; i < s.count; ++i) {
      std::memcpy(out, s.iov[i].iov_base, s.iov[i].iov_len);
      out += s.iov[i].iov_len;
    }
  }
}

}  // namespace psrt::dataplane
