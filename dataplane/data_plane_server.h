// A PS's side of the data plane: one fabric endpoint serving calls from
// clients that opened a connection with a challenge from this server's
// gRPC service (connection_gate.h).
//
// A progress thread reads the endpoint's completions: header messages
// (posted receives any client's frame may land in), bodies (received from
// the connection's own address into memory allocated for exactly the size
// its header announced, within the limits), and sends. A request whose
// header and body check is handed to `handler` on one of the handler
// threads; its Reply (or its error) goes back as one response frame.
//
// A separate body moves only once its receiver said it is ready
// (frame.h): the server sends a ready frame for a request's body once its
// receives are posted, and holds a reply's body until the client's ready
// frame for it comes (up to stuck_send_timeout; then it is dropped).
//
// What arrives is hostile until proven otherwise: a frame that does not
// parse, names a connection that was never opened, or comes from another
// address than the one its connection was opened from is counted and
// dropped, never handed on (and no body of it is asked for); a body that
// is not exactly its header's size is answered INVALID_ARGUMENT and never
// handed on. The server keeps serving throughout.
//
// Peers are timed on the time the server ran (util/awake_clock.h): one
// stopped for longer than its timeouts (SIGSTOP, a paused VM) loses no
// call of a live peer.
#ifndef PSRT_DATAPLANE_DATA_PLANE_SERVER_H_
#define PSRT_DATAPLANE_DATA_PLANE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "dataplane/body_buffer_pool.h"
#include "dataplane/body_pieces.h"
#include "dataplane/connection_gate.h"
#include "dataplane/fabric_endpoint.h"
#include "dataplane/frame.h"
#include "util/awake_clock.h"

namespace psrt::dataplane {

// A call's answer: the pieces of one body (body_pieces.h), sent from
// where they are; `owner` keeps them alive until they are sent.
struct Reply {
  Reply() = default;
  Reply(absl::Span<const uint8_t> bytes, std::shared_ptr<const void> owner)
      : segments{bytes}, owner(std::move(owner)) {}
  Reply(std::vector<Segment> segments, std::shared_ptr<const void> owner)
      : segments(std::move(segments)), owner(std::move(owner)) {}
  std::vector<Segment> segments;
  std::shared_ptr<const void> owner;
};

// Runs on a handler thread; `request` is valid for the call only.
using CallHandler = std::function<absl::StatusOr<Reply>(
    uint32_t connection_id, absl::Span<const uint8_t> request)>;

// A request as an AsyncCallHandler gets it: `bytes` stay valid while
// `owner` is held.
struct Request {
  uint32_t connection_id = 0;
  absl::Span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;
};
// Answers one call. Call it exactly once, from any thread; once the
// server is gone it sends nothing.
using Respond = std::function<void(absl::StatusOr<Reply>)>;
// Starts on a handler thread and may answer later from another (a push
// held for other workers' steps), so a wait holds no handler thread.
using AsyncCallHandler = std::function<void(Request request, Respond respond)>;

struct DataPlaneServerOptions {
  // With a doorbell (shm: clients ring it, and an idle server sleeps;
  // fabric_endpoint.h).
  DataPlaneServerOptions() { fabric.doorbell = true; }
  FabricOptions fabric;
  std::string token;  // the cluster's; empty: hellos carry no proof
  FrameLimits limits;
  int header_slots = 64;          // header messages received at once
  int handler_threads = 2;        // calls handled at once
  size_t max_connections = 1024;  // beyond: the least recently used closes
  // Request bodies being received or handled at once, in bytes; a request
  // beyond it is answered RESOURCE_EXHAUSTED.
  uint64_t max_inflight_body_bytes = uint64_t{2} << 30;
  // A reply that cannot be posted for this long goes to a peer that takes
  // nothing (dead, or hung): its connection is closed. rxm (libfabric
  // 1.17) keeps a send to a dead peer queued for good (giving up is left
  // to the application); a live peer drains its queue in milliseconds.
  // A reply body whose client sent no ready frame this long after its
  // header was sent is dropped (its client broke the call, or died).
  // These timeouts count only time the server ran: a server stopped
  // meanwhile (SIGSTOP, a paused VM) first reads what its peers sent.
  absl::Duration stuck_send_timeout = absl::Seconds(5);
  // A request body not whole this long after its header came is from a
  // sender that stopped (died mid-body): its receives are cancelled and
  // it is refused. A live sender sends it right after the header.
  absl::Duration body_receive_timeout = absl::Seconds(30);
};

struct DataPlaneServerStats {
  int64_t calls = 0;           // handed to the handler
  int64_t refused_hellos = 0;  // no challenge, or a proof that did not check
  int64_t refused_frames = 0;  // malformed, unknown connection, wrong sender
  int64_t refused_bodies = 0;  // not the size their header announced
  int64_t bytes_in = 0;        // request bodies handed on
  int64_t bytes_out = 0;       // reply bodies sent
  // Request bodies being received or handled now, in bytes.
  int64_t inflight_body_bytes = 0;
  // Completions of operations the server had already finished with (a
  // provider's second report of a receive from a peer that died).
  int64_t late_completions = 0;
  // Request bodies whose receives were posted, in all.
  int64_t bodies_posted = 0;
  // Reply bodies dropped because no ready frame came for them.
  int64_t unclaimed_replies = 0;
  // Ready frames that came for such a reply after it was dropped (their
  // client was stopped or starved meanwhile), answered with the drop
  // notice (frame.h) so that the client retries at once.
  int64_t late_readies = 0;
};

class DataPlaneServer {
 public:
  // UNAVAILABLE when the provider cannot be opened here.
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(
      DataPlaneServerOptions options, AsyncCallHandler handler);
  // The same with a handler that answers before it returns.
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(
      DataPlaneServerOptions options, CallHandler handler);
  ~DataPlaneServer();
  DataPlaneServer(const DataPlaneServer&) = delete;
  DataPlaneServer& operator=(const DataPlaneServer&) = delete;

  const std::string& address() const { return endpoint_->address(); }
  const std::string& provider() const { return endpoint_->provider(); }

  // For the gRPC handshake (whose caller gRPC authenticated).
  Challenge IssueChallenge() { return gate_.Issue(); }

  DataPlaneServerStats stats() const;
  size_t connections() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The progress loop's longest gap between polls when it runs: its wait
  // (100 ms) and one batch of work. Longer is a stop (util/awake_clock.h).
  static constexpr absl::Duration kLongestProgressGap = absl::Milliseconds(250);

  struct HeaderSlot;
  struct BodyReceive;
  struct PendingSend;
  struct Connection {
    fi_addr_t peer = FI_ADDR_NOTAVAIL;
    uint64_t key = 0;  // frame.h's connection key
    uint64_t last_used = 0;
    // The call whose reply body was dropped for want of a ready frame (0:
    // none): a ready for it that comes after gets the drop notice.
    uint32_t dropped_reply = 0;
  };
  // Where a call's answer goes.
  struct Caller {
    fi_addr_t peer;
    uint32_t connection_id;
    uint32_t sequence;
    uint64_t key;
  };

  // What a Respond reaches: the server, until it stops.
  struct Liveness {
    absl::Mutex mu;
    DataPlaneServer* server ABSL_GUARDED_BY(mu);
  };

  DataPlaneServer(DataPlaneServerOptions options, AsyncCallHandler handler,
                  std::unique_ptr<FabricEndpoint> endpoint);
  void Answer(const Caller& caller, absl::StatusOr<Reply> reply,
              uint64_t charged_bytes);
  // An operation's owner that the provider reported in error; kept
  // allocated (and its later reports dropped) for a while.
  struct Retired {
    absl::Time until;
    const void* user = nullptr;  // what its operations' Op::user names
    std::unique_ptr<HeaderSlot> slot;
    std::unique_ptr<BodyReceive> body;
    std::unique_ptr<PendingSend> send;
  };

  absl::StatusOr<std::unique_ptr<HeaderSlot>> NewHeaderSlot();
  absl::Status PostHeaderSlot(HeaderSlot* slot);
  // Retires `slot` and posts a fresh one in its place.
  void ReplaceHeaderSlot(HeaderSlot* slot);
  void Retire(Retired retired);
  void PruneRetired(absl::Time now);
  // Cancels the receives of bodies past options_.body_receive_timeout.
  void CancelOverdueBodies(absl::Time now);
  void ProgressLoop();
  void OnHeader(HeaderSlot* slot, const Completion& c);
  void OnHello(const FrameMessage& frame);
  void OnRequest(const FrameMessage& frame, fi_addr_t source);
  // A client's ready frame: its reply's body goes.
  void OnReady(const FrameMessage& frame, fi_addr_t source);
  // The address of the connection `header` names, if it carries that
  // connection's key and (where the provider says) comes from its address.
  fi_addr_t ConnectionPeer(const FrameHeader& header, fi_addr_t source)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnBody(BodyReceive* body, const Completion& c);
  void OnSent(PendingSend* send, const Completion& c);
  // Marks operation `index` reported; false (and counted late) if it was
  // before.
  bool FirstReport(std::vector<bool>* completed, size_t index);
  void Dispatch(const Caller& caller, std::shared_ptr<BodyBuffer> request,
                uint64_t charged_bytes);
  // Sends `header` and, for a reply, parks a separate body until its
  // client's ready frame comes.
  void SendFrame(fi_addr_t peer, const FrameHeader& header,
                 absl::Span<const Segment> body,
                 std::shared_ptr<const void> owner);
  // Posts `count` of `send`'s messages from `first` (0: its header; the
  // body's once its client said it is ready). Waits up to
  // stuck_send_timeout for room in the provider's queue if `may_wait`,
  // else returns at the first full queue. The messages posted; all of
  // them when it gave up on the rest (which it settles).
  size_t PostSends(PendingSend* send, size_t first, size_t count,
                   bool may_wait);
  // Takes `send` out of awaiting_ready_ (its body will not be asked for
  // again) and frees it if none of its operations is outstanding.
  void Unpark(PendingSend* send) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops parked reply bodies whose ready frame did not come in time.
  void DropUnclaimedReplies(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void SendError(const Caller& caller, const absl::Status& status);
  // The drop notice (frame.h) for call `sequence`, whose reply body was
  // dropped before its client's ready frame came. Progress thread only.
  void SendDropNotice(fi_addr_t peer, uint32_t connection_id, uint32_t sequence)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Retries `post` while the provider's queue is full, up to
  // `give_up_after` of real time, or with `peer_wait` (a handler thread
  // waiting for room in a peer's queue) of the time the server ran. The
  // progress thread's own waits are real time: it ticks the awake clock,
  // which does not pass its cap while that thread waits.
  absl::Status Post(const std::function<absl::Status()>& post,
                    absl::Duration give_up_after = absl::Seconds(30),
                    bool peer_wait = false);
  void HandlerLoop();

  const DataPlaneServerOptions options_;
  const AsyncCallHandler handler_;
  const std::shared_ptr<Liveness> liveness_;
  std::unique_ptr<FabricEndpoint> endpoint_;
  ConnectionGate gate_;
  std::shared_ptr<BodyBufferPool> body_pool_;
  std::atomic<bool> stopping_{false};
  // What the peer timeouts and the retired operations' lifetime are
  // measured on: the progress thread ticks it after each poll, so time this
  // server was stopped (SIGSTOP, a paused VM) does not count against peers
  // whose messages wait in its queues meanwhile.
  AwakeClock awake_{kLongestProgressGap};

  // The progress thread's own.
  std::vector<std::unique_ptr<HeaderSlot>> slots_;
  absl::flat_hash_map<BodyReceive*, std::unique_ptr<BodyReceive>> bodies_;
  uint64_t use_counter_ = 0;
  std::deque<Retired> retired_;  // oldest first
  absl::flat_hash_set<const void*> retired_users_;
  absl::Time next_sweep_;  // of overdue bodies and unclaimed replies (awake_)

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Connection> connections_ ABSL_GUARDED_BY(mu_);
  // Peers a reply could not be posted to for kStuckSendTimeout.
  absl::flat_hash_set<fi_addr_t> stuck_peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PendingSend*, std::unique_ptr<PendingSend>> sends_
      ABSL_GUARDED_BY(mu_);
  // Reply bodies waiting for their client's ready frame, by connection
  // (one call at a time on each).
  absl::flat_hash_map<uint32_t, PendingSend*> awaiting_ready_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  absl::CondVar work_ready_;
  uint64_t inflight_body_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<int64_t> calls_{0}, refused_hellos_{0}, refused_frames_{0},
      refused_bodies_{0}, bytes_in_{0}, bytes_out_{0}, late_completions_{0},
      bodies_posted_{0}, unclaimed_replies_{0}, late_readies_{0};

  std::thread progress_;
  std::atomic<std::thread::id> progress_thread_id_;
  std::vector<std::thread> handlers_;
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_DATA_PLANE_SERVER_H_
