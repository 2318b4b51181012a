#include "ps_server/replication/failover_monitor.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "glog/logging.h"

namespace psrt {

FailoverMonitor::FailoverMonitor(const PsPeers* peers, Membership* membership,
                                 std::vector<int> primaries,
                                 std::function<bool(int)> promote,
                                 Options options)
    : peers_(peers),
      membership_(membership),
      primaries_(std::move(primaries)),
      promote_(std::move(promote)),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()) {
  if (!primaries_.empty() && membership_->Enabled()) {
    thread_ = std::thread([this] { Run(); });
  }
}

FailoverMonitor::~FailoverMonitor() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void FailoverMonitor::Run() {
  absl::flat_hash_map<int, absl::Time> last_answer;
  absl::flat_hash_set<int> given_up;
  // The term each primary had when last probed: a handback (a new even
  // term) makes it a primary to watch afresh.
  absl::flat_hash_map<int, int64_t> term_seen;
  for (int p : primaries_) last_answer[p] = clock_->Now();
  while (!clock_->WaitForNotification(stop_, options_.probe_every)) {
    for (int p : primaries_) {
      const int64_t term = membership_->term(p);
      if (term_seen[p] != term) {
        term_seen[p] = term;
        given_up.erase(p);
        last_answer[p] = clock_->Now();
      }
      if (membership_->IsFailed(p) || given_up.contains(p)) continue;
      if (peers_->Ping(p, options_.ping_timeout).ok()) {
        last_answer[p] = clock_->Now();
        continue;
      }
      const absl::Duration silent = clock_->Now() - last_answer[p];
      if (silent < options_.failover_after) continue;
      SuspectRequest vote;
      vote.set_task(p);
      vote.set_takeover(true);
      const Membership::Vote decided =
          membership_->Decide(std::move(vote), options_.ping_timeout);
      if (!decided.majority) continue;
      if (!Membership::Lists(decided.newest, peers_->self())) {
        // Dropped from p's stream (p acknowledged pushes without it): this
        // copy lacks them, so p's shards wait for p or a current copy.
        LOG_EVERY_N(ERROR, 20)
            << peers_->Describe(p) << " is unreachable, but it dropped this "
            << "PS as its backup (stream view " << decided.newest.version()
            << " lists " << decided.newest.in_sync_size()
            << " other backup(s)): this copy lacks pushes it acknowledged, "
               "so this PS does not take its shards over";
        continue;
      }
      LOG(ERROR) << peers_->Describe(p) << " has not answered for "
                 << absl::FormatDuration(silent)
                 << " and most of the cluster cannot reach it: this PS "
                    "takes over its shards";
      if (!promote_(p)) given_up.insert(p);
    }
  }
}

}  // namespace psrt
