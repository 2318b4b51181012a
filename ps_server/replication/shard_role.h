// The role of this PS's copy of one shard (--replicas > 1), and the one
// question the service asks of it: may this copy serve the shard (pulls,
// pushes, checkpoints)? Without replicas every copy is a primary for good.
//
//   kPrimary ──(this PS learns it was replaced: Retire)──► kRetired
//   kRetired ──(a rejoin asks the serving PS for a copy)──► kRejoining
//   kRejoining ──(snapshot installed, stream followed)──► kBackup
//   kBackup ──(its primary fails: TakeOver)──► kTakenOver
//   kTakenOver ──(the primary took it back: HandBack)──► kBackup
//   own shard, not serving ──(its handback settled: Reinstate)──► kPrimary
//
// kPrimary and kTakenOver serve; the others follow a primary's stream
// (kRejoining: not yet; kRetired: nobody's, until the rejoin). Each
// transition names the state it leaves and does nothing from any other,
// so a late or repeated trigger cannot move a copy it does not apply to.
// A copy's role is read without locks (acquire) and changed with release;
// a push checks it again under the shard's lock (push_handler.cc), and
// HandBack is made under that lock (ShardStore::Demote).
#ifndef PSRT_PS_SERVER_REPLICATION_SHARD_ROLE_H_
#define PSRT_PS_SERVER_REPLICATION_SHARD_ROLE_H_

#include <atomic>
#include <cstdint>

namespace psrt {

class ShardRole {
 public:
  enum class Role : uint8_t {
    kPrimary,    // placed here, served here
    kBackup,     // a copy following its primary's stream
    kTakenOver,  // a backup serving its failed primary's shard
    kRetired,    // this PS was replaced: served by another, followed by none
    kRejoining,  // a copy being brought back (snapshot, then stream)
  };

  explicit ShardRole(Role initial = Role::kPrimary) : role_(initial) {}
  ShardRole(const ShardRole&) = delete;
  ShardRole& operator=(const ShardRole&) = delete;

  // At creation, before the copy is published.
  void Init(Role role) { role_.store(role, std::memory_order_release); }
  Role role() const { return role_.load(std::memory_order_acquire); }
  // The question: this copy serves the shard.
  bool MayServe() const {
    const Role r = role();
    return r == Role::kPrimary || r == Role::kTakenOver;
  }

  // The transitions of the diagram above; each returns whether it moved
  // the copy (false: it was not in the state the transition leaves).
  bool TakeOver() { return Move(Role::kBackup, Role::kTakenOver); }
  bool HandBack() { return Move(Role::kTakenOver, Role::kBackup); }
  bool BeginRejoin() { return Move(Role::kRetired, Role::kRejoining); }
  bool Rejoined() { return Move(Role::kRejoining, Role::kBackup); }
  // This PS's own shard, once its handback settled (this PS holds every
  // update of it): from any role that does not serve (a copy of a
  // variable created while this PS was retired was never rejoined).
  bool Reinstate() {
    Role from = role();
    while (from != Role::kPrimary && from != Role::kTakenOver) {
      if (role_.compare_exchange_weak(from, Role::kPrimary,
                                      std::memory_order_acq_rel)) {
        return true;
      }
    }
    return false;
  }
  // From any state: the cluster serves this PS's copies elsewhere now.
  void Retire() { role_.store(Role::kRetired, std::memory_order_release); }

  static const char* Name(Role role) {
    switch (role) {
      case Role::kPrimary:
        return "primary";
      case Role::kBackup:
        return "backup";
      case Role::kTakenOver:
        return "taken over";
      case Role::kRetired:
        return "retired";
      case Role::kRejoining:
        return "rejoining";
    }
    return "?";
  }

 private:
  bool Move(Role from, Role to) {
    return role_.compare_exchange_strong(from, to, std::memory_order_acq_rel);
  }

  std::atomic<Role> role_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_SHARD_ROLE_H_
