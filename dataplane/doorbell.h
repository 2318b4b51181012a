// A wake-up for endpoints whose provider has nothing to wake a waiter
// (libfabric 1.17's shm: its completions can only be polled). The
// endpoint binds a Unix datagram socket in the abstract namespace, named
// after its fabric address; a peer that sends to it rings it (one empty
// datagram), and a caller with nothing in flight sleeps on it instead of
// polling. An idle PS's shm endpoint polled every 50 us held 18% of a core;
// sleeping on its doorbell, it wakes once per message (or per timeout).
//
// Abstract sockets belong to a network namespace, as shm's peers do here
// (host_key.h). A ring carries nothing: anyone may ring (a spurious wake
// costs one poll of the endpoint), and a bell that cannot be bound (its
// name taken) leaves the endpoint polling as before.
#ifndef PSRT_DATAPLANE_DOORBELL_H_
#define PSRT_DATAPLANE_DOORBELL_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psrt::dataplane {

// Where the doorbell of the endpoint at `fabric_address` is.
struct DoorbellAddress {
  sockaddr_un address = {};
  socklen_t length = 0;
};
DoorbellAddress DoorbellOf(absl::string_view fabric_address);

// The ringing side: one socket for every bell a process rings.
class DoorbellRinger {
 public:
  DoorbellRinger();
  ~DoorbellRinger();
  DoorbellRinger(const DoorbellRinger&) = delete;
  DoorbellRinger& operator=(const DoorbellRinger&) = delete;
  // Never blocks; false only when no bell is bound there (then ringing
  // it again is pointless). A full bell counts as rung.
  bool Ring(const DoorbellAddress& bell) const;

 private:
  int fd_ = -1;
};

// The bell an endpoint sleeps on.
class Doorbell {
 public:
  // Null when the name is taken or sockets fail (the caller polls).
  static std::unique_ptr<Doorbell> Bind(absl::string_view fabric_address);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  const DoorbellAddress& address() const { return address_; }
  // Waits until rung (or `timeout`), then takes every ring waiting.
  void Wait(absl::Duration timeout);

 private:
  Doorbell() = default;
  int fd_ = -1;
  DoorbellAddress address_;
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_DOORBELL_H_
