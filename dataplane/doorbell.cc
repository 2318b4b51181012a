#include "dataplane/doorbell.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace psrt::dataplane {

DoorbellAddress DoorbellOf(absl::string_view fabric_address) {
  DoorbellAddress bell;
  bell.address.sun_family = AF_UNIX;
  // Abstract: a leading NUL, then a name that fits whatever the address
  // holds (an shm name is a short string; a hash keeps it within 107).
  const std::string name = absl::StrCat(
      "psrt-doorbell/", absl::BytesToHexString(fabric_address.substr(
                            0, (sizeof(bell.address.sun_path) - 1 - 14) / 2)));
  std::memcpy(bell.address.sun_path + 1, name.data(), name.size());
  bell.length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return bell;
}

DoorbellRinger::DoorbellRinger()
    : fd_(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) {}

DoorbellRinger::~DoorbellRinger() {
  if (fd_ >= 0) close(fd_);
}

bool DoorbellRinger::Ring(const DoorbellAddress& bell) const {
  if (fd_ < 0) return false;
  const char ring = 0;
  if (sendto(fd_, &ring, 0, MSG_DONTWAIT,
             reinterpret_cast<const sockaddr*>(&bell.address),
             bell.length) == 0) {
    return true;
  }
  // Only "nobody bound there" says no bell: a sender that took a
  // passing failure (EAGAIN: rings wait unread, so the sleeper wakes
  // anyway; ENOBUFS, EINTR) for that would never ring the peer again.
  return errno != ECONNREFUSED && errno != ENOENT;
}

std::unique_ptr<Doorbell> Doorbell::Bind(absl::string_view fabric_address) {
  std::unique_ptr<Doorbell> bell(new Doorbell());
  bell->address_ = DoorbellOf(fabric_address);
  bell->fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (bell->fd_ < 0 ||
      bind(bell->fd_,
           reinterpret_cast<const sockaddr*>(&bell->address_.address),
           bell->address_.length) != 0) {
    return nullptr;
  }
  return bell;
}

Doorbell::~Doorbell() {
  if (fd_ >= 0) close(fd_);
}

void Doorbell::Wait(absl::Duration timeout) {
  pollfd waiting = {fd_, POLLIN, 0};
  const int ms = static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))), 0,
      1000));
  if (poll(&waiting, 1, ms) <= 0) return;
  char rings[64];
  while (recv(fd_, rings, sizeof(rings), MSG_DONTWAIT) >= 0) {
  }
}

}  // namespace psrt::dataplane
