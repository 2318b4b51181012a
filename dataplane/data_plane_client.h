// A client's connection to one PS's data plane: opened with a challenge
// the PS's gRPC service handed out, then one call at a time (a caller
// wanting calls in parallel opens several).
//
// A call sends its request from the caller's memory and receives the
// response's body into memory the caller chooses once it knows the size
// (a pull's own buffers), so bytes cross no copy of ours beyond the
// fabric's. A call that fails on the fabric (deadline, a PS gone) breaks
// the connection: its endpoint is closed at once, and later calls fail
// UNAVAILABLE until the caller opens another; errors the PS answered
// (a refused request) leave it open.
#ifndef PSRT_DATAPLANE_DATA_PLANE_CLIENT_H_
#define PSRT_DATAPLANE_DATA_PLANE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/body_pieces.h"
#include "dataplane/connection_gate.h"
#include "dataplane/fabric_endpoint.h"
#include "dataplane/frame.h"

namespace psrt::dataplane {

class DataPlaneClient {
 public:
  // Asked every 50 ms while a call (the hello included) waits: an error
  // (the PS's process is gone, which the fabric may never report) breaks
  // the call with it at once instead of at its deadline.
  using PeerCheck = std::function<absl::Status()>;

  // Sends the hello for `challenge` to the PS at `server_address` and
  // waits for its welcome until `deadline`. PERMISSION_DENIED as the PS
  // answered (a wrong token); UNAVAILABLE when the provider cannot be
  // opened or no answer came; `peer_check`'s error when it gave one.
  static absl::StatusOr<std::unique_ptr<DataPlaneClient>> Connect(
      const FabricOptions& fabric, absl::string_view server_address,
      const Challenge& challenge, absl::string_view token, absl::Time deadline,
      FrameLimits limits = FrameLimits(), PeerCheck peer_check = nullptr);
  ~DataPlaneClient();

  // Where a response's body of `bytes` goes: memory of exactly that size,
  // or an error (the call then fails with it, and the connection breaks).
  using BodySink =
      std::function<absl::StatusOr<absl::Span<uint8_t>>(uint64_t bytes)>;

  // One call: `request` to the PS's handler, its reply into `sink`. The
  // PS's error comes back with its code and message.
  absl::Status Call(absl::Span<const uint8_t> request, const BodySink& sink,
                    absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // The same with the request as the pieces it is made of, sent from
  // where they are (body_pieces.h).
  absl::Status Call(absl::Span<const Segment> request, const BodySink& sink,
                    absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // The same, the reply in a string.
  absl::StatusOr<std::string> Call(absl::Span<const uint8_t> request,
                                   absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::string> Call(absl::Span<const Segment> request,
                                   absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The peer check's answer now (OK without one).
  absl::Status CheckPeer() const {
    return peer_check_ ? peer_check_() : absl::OkStatus();
  }

  const std::string& provider() const { return provider_; }
  uint32_t connection_id() const { return connection_id_; }
  bool broken() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  DataPlaneClient(std::unique_ptr<FabricEndpoint> endpoint, fi_addr_t server,
                  uint32_t connection_id, FrameLimits limits);
  // Posts a receive for the header of `sequence`'s answer, sends `header`
  // and, once the PS says it is ready for it, a separate `body`; waits for
  // every send and the answer's header message.
  absl::StatusOr<FrameMessage> Exchange(const FrameHeader& header,
                                        absl::Span<const Segment> body,
                                        absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the header message in message_ (its body's `sends`, when they
  // are given, once a ready frame came) with a receive for what the PS
  // answers it; waits for all and returns the PS's frame of this call.
  absl::StatusOr<FrameMessage> SendAndAwaitAnswer(uint32_t id,
                                                  uint32_t sequence,
                                                  const OutgoingBody* body,
                                                  absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the PS that the receives of `sequence`'s reply body are posted.
  absl::Status SendReady(uint32_t sequence, Op* op, int* pending,
                         absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `*pending` of this call's operations completed, or `stop`
  // says so. `idle`: the receive awaited is a new message, not a body
  // (FabricEndpoint::Poll).
  absl::Status Await(int* pending, absl::Time deadline, bool idle = false,
                     const std::function<bool()>& stop = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Posts with `post` until the provider takes it, making progress while
  // its queue is full (the operations completing meanwhile are this
  // call's own); counts it in `*pending`.
  absl::Status Post(const std::function<absl::Status()>& post, int* pending,
                    absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Break(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string provider_;
  const fi_addr_t server_;
  const uint32_t connection_id_;
  const FrameLimits limits_;
  uint64_t key_ = 0;  // the welcome's connection key (frame.h)
  PeerCheck peer_check_;
  mutable absl::Mutex mu_;
  std::unique_ptr<FabricEndpoint> endpoint_ ABSL_GUARDED_BY(mu_);
  uint32_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  uint8_t answer_[kHeaderMessageBytes] ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> message_ ABSL_GUARDED_BY(mu_);
  MemoryRegion answer_region_ ABSL_GUARDED_BY(mu_);
  uint8_t ready_[kFrameHeaderBytes] ABSL_GUARDED_BY(mu_);
  MemoryRegion ready_region_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_DATA_PLANE_CLIENT_H_
