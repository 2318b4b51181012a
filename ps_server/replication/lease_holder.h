// A PS's lease to serve (--replicas > 1, 3 PS or more): without one it
// refuses pulls and pushes, so a primary cut off from most of the cluster
// (a partition, a long pause) stops answering for shards that its backup
// may be taking over.
//
// How it works: every `renew_every` this PS asks each other PS, on its own,
// for a lease (RenewLease). A PS grants unless it knows this one failed
// over or voted it unreachable lately (membership.h). The lease holds
// until `term` after the moment the renewal was *sent*, counting the
// majority-th most recent grant (this PS counts itself): a primary that
// reaches no majority for `term` serves nothing. A backup takes over only
// after a majority votes the primary unreachable, and no PS votes so while
// the lease it granted runs: the two majorities share a PS, so the takeover
// comes after the old primary's lease ended.
//
// With 2 PS the workers grant leases too (witnesses, membership.h): their
// calls reach the service, which hands the grant here (Witnessed), and the
// majority is of the PS and the workers together.
//
// Answers carry the granter's terms (membership.h): a PS learns of a
// failover or handback within one renewal, and one that learns it was
// replaced (or is refused a lease for that reason) calls `on_replaced`.
// Requests carry the holder's own term, so a PS that took its shards back
// teaches every granter so with its next renewal.
#ifndef PSRT_PS_SERVER_REPLICATION_LEASE_HOLDER_H_
#define PSRT_PS_SERVER_REPLICATION_LEASE_HOLDER_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/membership.h"
#include "util/clock.h"

namespace psrt {

class LeaseHolder {
 public:
  struct Options {
    absl::Duration renew_every = absl::Milliseconds(250);
    absl::Duration term = Membership::kLeaseTerm;
    absl::Duration call_timeout = absl::Seconds(1);
    // Times the lease and the renewals (the real clock when null).
    Clock* clock = nullptr;
    // This PS's stream view, sent with every renewal (membership.h);
    // unset: none.
    std::function<StreamView()> view;
  };

  // Renews with every other PS from construction on (membership must be
  // Enabled). `on_replaced(why)` runs once, on a renewal thread. All
  // pointers must outlive this.
  LeaseHolder(const PsPeers* peers, Membership* membership,
              std::function<void(const std::string&)> on_replaced,
              Options options);
  LeaseHolder(const PsPeers* peers, Membership* membership,
              std::function<void(const std::string&)> on_replaced)
      : LeaseHolder(peers, membership, std::move(on_replaced), Options()) {}
  ~LeaseHolder();
  LeaseHolder(const LeaseHolder&) = delete;
  LeaseHolder& operator=(const LeaseHolder&) = delete;

  // Witness `worker` granted this PS a lease with a challenge issued at
  // `since` (InfinitePast: no grant). Its call taught this PS the terms it
  // knows: one saying this PS failed over calls `on_replaced`.
  void Witnessed(int worker, absl::Time since) ABSL_LOCKS_EXCLUDED(mu_);
  // This PS's stream view (Options::view; version 0 without one).
  StreamView View() const {
    return options_.view ? options_.view() : StreamView();
  }
  // OK while this PS holds a lease; else UNAVAILABLE saying how many
  // voters granted one within the term.
  absl::Status Check() const ABSL_LOCKS_EXCLUDED(mu_);
  // Times this PS found its lease ended (it had one before).
  int64_t lapses() const ABSL_LOCKS_EXCLUDED(mu_);
  // This PS took its shards back (handback): it may hold a lease again,
  // and a later failover of it calls `on_replaced` again. PS `granted_by`
  // granted a lease with its answer to the request sent at `asked`.
  void Reinstate(int granted_by, absl::Time asked) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Renew(int peer);
  // When the lease ends: `term` after the majority-th latest grant.
  absl::Time EndLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Replaced(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the lease holds at `now`; logs when that changes.
  bool HeldLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // " PS", or " voters (PS and workers)" with witnesses (messages).
  const char* VoterKind() const;
  // Voters (this PS included) whose grant is within the term at `now`.
  int GrantingLocked(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const PsPeers* const peers_;
  Membership* const membership_;
  const std::function<void(const std::string&)> on_replaced_;
  const Options options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  // Per voter (PS tasks, then witnesses): when the last granted renewal
  // was sent (InfinitePast: never).
  std::vector<absl::Time> granted_at_ ABSL_GUARDED_BY(mu_);
  mutable bool held_ ABSL_GUARDED_BY(mu_) = false;
  mutable int64_t lapses_ ABSL_GUARDED_BY(mu_) = 0;
  bool replaced_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification stop_;
  std::vector<std::thread> threads_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_LEASE_HOLDER_H_
