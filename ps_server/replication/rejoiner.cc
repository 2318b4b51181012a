#include "ps_server/replication/rejoiner.h"

#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace psrt {
namespace {

constexpr absl::Duration kAskTimeout = absl::Seconds(5);
constexpr absl::Duration kRejoinTimeout = absl::Minutes(30);
constexpr int kAttempts = 10;

}  // namespace

void Rejoiner::Start() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  if (running_) {
    again_ = true;
    return;
  }
  // A finished run's thread exits right after it cleared running_.
  if (thread_.joinable()) thread_.join();
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void Rejoiner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (call_ != nullptr) call_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void Rejoiner::Run() {
  while (true) {
    RunAttempts();
    absl::MutexLock lock(&mu_);
    if (!again_ || stopped_) {
      running_ = false;
      return;
    }
    again_ = false;
  }
}

void Rejoiner::RunAttempts() {
  absl::Duration backoff = absl::Seconds(1);
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    LOG(INFO) << "PS " << peers_->self() << " rejoin attempt " << attempt
              << " of " << kAttempts;
    const absl::Status s = RejoinOnce();
    if (s.ok()) return;
    LOG(ERROR) << "PS " << peers_->self() << " rejoin attempt " << attempt
               << " of " << kAttempts << " failed: " << s;
    if (clock_->WaitForNotification(stop_, backoff)) return;
    backoff = std::min(backoff * 2, absl::Seconds(30));
  }
  LOG(ERROR) << "PS " << peers_->self() << " gave up rejoining: its copies "
             << "are out of sync and it serves nothing; restart it";
}

absl::Status Rejoiner::RejoinOnce() {
  const int self = peers_->self();
  const int n = peers_->size();
  // The failovers, as every PS that answers knows them (this one is among
  // them if it was replaced).
  // (The newest term any PS knows of each: odd is failed over.)
  std::vector<int64_t> terms(n, 0);
  std::vector<int> answered;
  for (int t = 0; t < n; ++t) {
    if (t == self) continue;
    auto stats = peers_->Stats(t, kAskTimeout);
    if (!stats.ok()) continue;
    answered.push_back(t);
    for (const auto& [task, term] : stats->ps_terms()) {
      if (task >= 0 && task < n) terms[task] = std::max(terms[task], term);
    }
  }
  absl::flat_hash_set<int> failed;
  for (int t = 0; t < n; ++t) {
    if (terms[t] % 2 == 1) failed.insert(t);
  }
  if (answered.empty()) {
    return absl::UnavailableError("no other PS answers GetStats");
  }
  // The catalog: a restarted PS has none until a worker creates one, so
  // the longest one any PS has (a prefix of the others').
  absl::StatusOr<ListVariablesResponse> catalog;
  for (int t : answered) {
    auto listed = peers_->ListVariables(t, kAskTimeout);
    if (listed.ok() && (!catalog.ok() ||
                        listed->variables_size() > catalog->variables_size())) {
      catalog = std::move(listed);
    } else if (!catalog.ok()) {
      catalog = listed.status();
    }
  }
  if (!catalog.ok()) return catalog.status();
  const int known = static_cast<int>(store_->Variables().size());
  if (catalog->variables_size() > known) {
    std::vector<VariableSpec> specs;
    for (int i = known; i < catalog->variables_size(); ++i) {
      specs.push_back(catalog->variables(i).spec());
    }
    auto created = store_->CreateVariables(known, specs, store_->num_ps());
    if (!created.ok()) {
      return absl::Status(
          created.status().code(),
          absl::StrCat("creating the catalog's ", specs.size(),
                       " variable(s): ", created.status().message()));
    }
  }
  // Who serves each PS's shards now, and which of them this PS keeps.
  const ReplicaPlacement& placement = store_->replicas();
  auto serving = [&](int placed) {
    if (!failed.contains(placed)) return placed;
    for (int b : placement.BackupsOf(placed)) {
      if (!failed.contains(b)) return b;
    }
    return -1;
  };
  std::set<int> sources;
  const int own_serving = serving(self);
  if (store_->retired() && own_serving == self) {
    // Replaced (a PS said so), but none that answered knows yet: a rejoin
    // now would copy the others' shards and never take its own back.
    return absl::UnavailableError(absl::StrCat(
        "this PS was replaced, but none of PS ", absl::StrJoin(answered, ", "),
        " reports its failover yet"));
  }
  for (int placed = 0; placed < n; ++placed) {
    bool kept = placed == self;
    for (int b : placement.BackupsOf(placed)) kept |= b == self;
    if (!kept) continue;
    const int source = serving(placed);
    if (source < 0) {
      LOG(ERROR) << "no live copy of PS " << placed << "'s shards: they need "
                 << "a restore from a checkpoint";
      continue;
    }
    // Still its own primary (nobody took its shards over): nothing to copy.
    if (source != self) sources.insert(source);
  }
  if (sources.empty()) {
    LOG(INFO) << "PS " << self << " rejoin: every copy it keeps is served by "
              << "itself; nothing to copy";
    return absl::OkStatus();
  }
  LOG(INFO) << "PS " << self << " rejoins from PS "
            << absl::StrJoin(sources, ", ") << " (its own shards served by PS "
            << own_serving << ")";
  const absl::Time start = clock_->Now();
  // Rejoined: take this PS's own shards back from the PS serving them.
  auto reclaim = [&] {
    if (on_rejoined_ && own_serving >= 0 && own_serving != self) {
      on_rejoined_(own_serving);
    }
  };
  int64_t shards = 0, bytes = 0;
  for (int source : sources) {
    // The copies `source` serves the shards of (placed on it, or on a PS
    // whose shards it took over), which this PS keeps.
    std::vector<int> placed_served;
    for (int placed = 0; placed < n; ++placed) {
      if (serving(placed) == source) placed_served.push_back(placed);
    }
    store_->BeginRejoin(placed_served);
    applier_->BeginRejoin(source);
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::CancelledError("stopping");
      call_ = &context;
    }
    auto answer = peers_->Rejoin(source, kRejoinTimeout, &context);
    {
      absl::MutexLock lock(&mu_);
      call_ = nullptr;
    }
    if (!answer.ok()) {
      return absl::Status(answer.status().code(),
                          absl::StrCat(peers_->Describe(source), ": ",
                                       answer.status().message()));
    }
    if (absl::Status s = applier_->FinishRejoin(source, *answer); !s.ok()) {
      return s;
    }
    store_->Rejoined(placed_served);
    shards += answer->shards();
    bytes += answer->bytes();
    LOG(INFO) << "PS " << self << " holds " << answer->shards()
              << " shard copies from " << peers_->Describe(source)
              << " and follows its stream from update "
              << answer->stream_from();
  }
  LOG(INFO) << "PS " << self << " rejoined as a backup: " << shards
            << " shard(s), " << bytes << " bytes from PS "
            << absl::StrJoin(sources, ", ") << " in "
            << absl::FormatDuration(clock_->Now() - start);
  reclaim();
  return absl::OkStatus();
}

}  // namespace psrt
