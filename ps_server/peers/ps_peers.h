// How one ps_server calls the other PS tasks of its cluster: the one place
// that makes those calls, over a PeerTransport (peer_transport.h: real
// gRPC channels with the cluster's TLS and token, or a test's in-process
// links), each with a deadline, its status converted to an
// absl::Status (util/grpc_status.h). Checkpoint
// coordination (SaveShards, CommitCheckpoint) and the shutdown wait for PS
// 0 go through it; so will anything else a PS asks of another. Clients
// reach servers through clients/cpp's PsConnection instead.
#ifndef PSRT_PS_SERVER_PEERS_PS_PEERS_H_
#define PSRT_PS_SERVER_PEERS_PS_PEERS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/peers/peer_data_plane.h"
#include "ps_server/peers/peer_transport.h"
#include "security/peer_identity.h"
#include "security/security.h"

namespace psrt {

// In the error of a call to a PS the cluster declared failed over while the
// call waited (PsPeers::CheckServing): the wait is over, the peer is not
// coming back as it was.
inline constexpr char kFailedOverMarker[] = "failed over while this call";

class PsPeers {
 public:
  // `addresses`: every PS task's host:port (index = task); `self` is this
  // PS's task (never called). INVALID_ARGUMENT if the credentials of
  // `security` cannot be made.
  static absl::StatusOr<std::unique_ptr<PsPeers>> Create(
      std::vector<std::string> addresses, int self,
      const SecurityOptions& security);
  // The same over `transport` (tests: in_process_links.h); `addresses`
  // only name the PS in messages. Every call carries the proof, made from
  // `peer_secret`, that it comes from PS `self` (security/peer_identity.h;
  // empty: none).
  static std::unique_ptr<PsPeers> Create(
      std::vector<std::string> addresses, int self,
      std::unique_ptr<PeerTransport> transport, std::string peer_secret = "");

  int size() const { return static_cast<int>(addresses_.size()); }
  int self() const { return self_; }
  const std::string& address(int task) const { return addresses_[task]; }
  // "PS 1 (host:2224)", for messages.
  std::string Describe(int task) const;

  // The RPCs, to PS `task` (not self), failing after `timeout`. Errors are
  // the peer's status (or the transport's); callers name the PS in their
  // messages with Describe(task).
  absl::StatusOr<SaveShardsResponse> SaveShards(
      int task, const SaveShardsRequest& request, absl::Duration timeout) const;
  absl::Status CommitCheckpoint(int task,
                                const CommitCheckpointRequest& request,
                                absl::Duration timeout) const;
  // A cheap call that answers while the peer serves (GetStats).
  absl::Status Ping(int task, absl::Duration timeout) const;
  absl::StatusOr<StatsResponse> Stats(int task, absl::Duration timeout) const;
  // Asks PS `task` whether it can reach PS `suspect`.
  absl::StatusOr<SuspectResponse> Suspect(int task, int suspect,
                                          absl::Duration timeout) const;
  // The same with a drop's or a takeover's fields (`request.task` is the
  // suspect; from_task is set here).
  absl::StatusOr<SuspectResponse> Suspect(int task, SuspectRequest request,
                                          absl::Duration timeout) const;
  // Asks PS `task` for a lease (lease_holder.h); `own_term`: this PS's
  // term as it knows it (membership.h).
  absl::StatusOr<LeaseResponse> RenewLease(
      int task, int64_t own_term, absl::Duration timeout,
      const StreamView& view = StreamView()) const;
  // Asks PS `task`, which serves this PS's shards since a failover, to
  // hand them back (HandbackRequest).
  absl::StatusOr<HandbackResponse> Handback(int task,
                                            const HandbackRequest& request,
                                            absl::Duration timeout) const;
  // OK unless PS `task`'s process is gone: UNAVAILABLE when its channel
  // failed, or when a Ping (GetStats, 1 s; at most one a second per peer)
  // is refused. The channel's state alone does not tell: a
  // channel whose socket no call reads (gRPC polls it every 5 s then)
  // stays READY after the peer died, and one that saw it go turns IDLE,
  // not TRANSIENT_FAILURE, until something connects. A peer too slow to
  // answer is not gone. For the data plane's waits (the fabric may never
  // report a peer killed mid-call).
  absl::Status CheckAlive(int task) const;
  // The same, and UNAVAILABLE (with kFailedOverMarker) once PS `task` was
  // declared failed over at a term other than `term_seen`: a majority of
  // the cluster could not reach it and its backup serves its shards. A
  // process paused, hung or cut off keeps its sockets open and answers
  // no ping, which CheckAlive takes for slow (gRPC's keepalive gives up
  // on it seconds later); a call waiting on it ends here as soon as this
  // PS learns of the failover. `term_seen`: FailoverTerm(task) when the
  // wait began (a peer already failed over then, e.g. one rejoining, is
  // waited for).
  absl::Status CheckServing(int task, int64_t term_seen) const;
  // PS `task`'s term as this PS knows it (membership.h: odd while it is
  // failed over); 0 until set_failover_terms.
  int64_t FailoverTerm(int task) const;
  // Where FailoverTerm reads the terms (the PS's Membership); null:
  // nowhere. Thread-safe; whatever `term_of` reads must outlive the calls
  // made before it is set to null again.
  void set_failover_terms(std::function<int64_t(int task)> term_of);

  // From now on, Replicate goes over the data plane to every peer that
  // serves one this PS can open (peer_data_plane.h); call before any
  // Replicate.
  void UseDataPlane(PeerDataPlane::Options options);
  // Closes those connections (after the calls on them); later calls go
  // over gRPC. For shutdown.
  void StopDataPlane() {
    if (data_plane_ != nullptr) data_plane_->Stop();
  }

  // Streams `messages` (raw Frames, sent as they are: no copy) as one
  // Replicate call: over the data plane (UseDataPlane) or gRPC.
  absl::StatusOr<ReplicateResponse> Replicate(
      int task, const std::vector<grpc::ByteBuffer>& messages,
      absl::Duration timeout) const;
  // Rejoin: asks PS `task` for copies of the shards this PS should hold;
  // it sends them with InstallSnapshot (raw Frames) before answering.
  // `context` (optional) lets the caller cancel it.
  absl::StatusOr<RejoinResponse> Rejoin(
      int task, absl::Duration timeout,
      grpc::ClientContext* context = nullptr) const;
  absl::StatusOr<InstallSnapshotResponse> InstallSnapshot(
      int task, const std::vector<grpc::ByteBuffer>& messages,
      absl::Duration timeout) const;
  // The catalog (specs in order) as PS `task` has it.
  absl::StatusOr<ListVariablesResponse> ListVariables(
      int task, absl::Duration timeout) const;

 private:
  // One client-streaming call of raw `messages`; the answer's bytes.
  absl::StatusOr<std::string> ClientStream(
      int task, const char* method_path,
      const std::vector<grpc::ByteBuffer>& messages, absl::Duration timeout,
      bool wait_for_ready = false) const;
  PsPeers(std::vector<std::string> addresses, int self,
          std::unique_ptr<PeerTransport> transport, std::string peer_secret)
      : addresses_(std::move(addresses)),
        self_(self),
        transport_(std::move(transport)),
        identity_(std::move(peer_secret)),
        last_probe_(addresses_.size(), absl::InfinitePast()) {}
  // A stub on the transport's channel to `task` now.
  std::unique_ptr<ParameterServer::Stub> StubTo(int task) const;

  const std::vector<std::string> addresses_;
  const int self_;
  const std::unique_ptr<PeerTransport> transport_;
  const PeerIdentity identity_;
  std::unique_ptr<PeerDataPlane> data_plane_;  // null: gRPC only
  mutable absl::Mutex probe_mu_;
  // CheckAlive's last Ping to each task.
  mutable std::vector<absl::Time> last_probe_ ABSL_GUARDED_BY(probe_mu_);
  std::function<int64_t(int task)> failover_terms_ ABSL_GUARDED_BY(probe_mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PEERS_PS_PEERS_H_
