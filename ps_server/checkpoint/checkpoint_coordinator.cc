#include "ps_server/checkpoint/checkpoint_coordinator.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/checkpoint_saver.h"

namespace psrt {
namespace {

// call(t) for PS tasks t in [first, n), each on a thread of its own; returns
// when all have.
void OnEachPs(int first, int n, const std::function<void(int)>& call) {
  std::vector<std::thread> threads;
  for (int t = first; t < n; ++t) threads.emplace_back(call, t);
  for (std::thread& t : threads) t.join();
}

}  // namespace

CheckpointCoordinator::CheckpointCoordinator(ShardStore* store,
                                             const PsPeers* peers,
                                             CheckpointOptions options)
    : store_(store),
      peers_(peers),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {
  {
    absl::MutexLock lock(&mu_);
    last_time_ = clock_->Now();
  }
  for (int t = 0; t < peers_->size(); ++t) {
    ps_addresses_.push_back(peers_->address(t));
  }
}

absl::Status CheckpointCoordinator::CheckConfigured(
    absl::string_view method) const {
  if (options_.uri.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, ": this PS (", store_->ps_task(),
                     ") has no --checkpoint_uri, so it writes no checkpoints"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SaveShardsResponse> CheckpointCoordinator::SaveShards(
    const SaveShardsRequest& request) {
  if (absl::Status s = CheckConfigured("SaveShards"); !s.ok()) return s;
  // Only into a checkpoint directly under this PS's own root, whatever the
  // request says.
  auto name = CheckpointNameUnder(options_.uri, request.checkpoint_uri());
  if (!name.ok()) {
    return absl::Status(name.status().code(),
                        absl::StrCat("SaveShards on PS ", store_->ps_task(),
                                     ": ", name.status().message()));
  }
  absl::MutexLock lock(&save_mu_);
  auto saved = SaveLocalShards(*store_, JoinUri(options_.uri, *name),
                               options_.open_storage, options_.threads,
                               options_.max_bytes_per_sec, clock_);
  if (saved.ok()) {
    SavedShards record{*name, 0, saved->seconds(), clock_->Now()};
    for (const CheckpointFile& f : saved->files()) record.bytes += f.bytes();
    absl::MutexLock history_lock(&mu_);
    totals_.saved_bytes += record.bytes;
    totals_.last_save = record.finished;
    save_history_.insert(save_history_.begin(), std::move(record));
    if (save_history_.size() > kSaveHistory) save_history_.pop_back();
  }
  return saved;
}

std::vector<CheckpointCoordinator::SavedShards>
CheckpointCoordinator::SaveHistory() const {
  absl::MutexLock lock(&mu_);
  return save_history_;
}

absl::Time CheckpointCoordinator::last_time() const {
  absl::MutexLock lock(&mu_);
  return last_time_;
}

int64_t CheckpointCoordinator::last_step() const {
  absl::MutexLock lock(&mu_);
  return last_step_;
}

void CheckpointCoordinator::set_last(absl::Time time, int64_t step) {
  absl::MutexLock lock(&mu_);
  last_time_ = time;
  last_step_ = step;
}

absl::Status CheckpointCoordinator::DeleteCheckpoint(Storage& root,
                                                     const std::string& name) {
  auto objects = root.List(name + "/");
  if (!objects.ok()) return objects.status();
  // The manifest first: from then on the checkpoint does not exist.
  for (const StorageObject& o : *objects) {
    if (o.key == absl::StrCat(name, "/", kManifestName)) {
      if (absl::Status s = root.Delete(o.key); !s.ok()) return s;
    }
  }
  for (const StorageObject& o : *objects) {
    if (absl::Status s = root.Delete(o.key); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckpointCoordinator::Publish(Storage& root,
                                            const std::string& name,
                                            const std::string& manifest_json) {
  if (absl::Status s =
          root.Write(absl::StrCat(name, "/", kManifestName), manifest_json);
      !s.ok()) {
    (void)DeleteCheckpoint(root, name);
    return absl::Status(s.code(),
                        absl::StrCat("writing the manifest: ", s.message()));
  }
  if (absl::Status s = root.Write(kLatestName, name + "\n"); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("complete, but updating ", kLatestName,
                                     " failed: ", s.message()));
  }
  Retain(root);
  return absl::OkStatus();
}

absl::Status CheckpointCoordinator::CommitCheckpoint(
    const CommitCheckpointRequest& request) {
  if (absl::Status s = CheckConfigured("CommitCheckpoint"); !s.ok()) return s;
  if (!options_.storage_per_host) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CommitCheckpoint: PS ", store_->ps_task(),
        " shares its checkpoint storage with PS 0 (no "
        "--checkpoint_storage_per_host); PS 0 writes the manifest itself"));
  }
  if (!SameCheckpointRoot(request.root_uri(), options_.uri)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "CommitCheckpoint: root '",
        absl::CHexEscape(request.root_uri().substr(0, 200)),
        "' is not this PS's --checkpoint_uri '", options_.uri, "'"));
  }
  if (absl::Status s = CheckCheckpointName(request.name()); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommitCheckpoint: ", s.message()));
  }
  // Parsed and checked before a byte is written; what is written is the
  // parsed manifest, never the request's bytes.
  auto manifest = ParseManifest(request.manifest_json(),
                                absl::StrCat("from PS 0 for ", request.name()));
  if (!manifest.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommitCheckpoint: ", manifest.status().message()));
  }
  const int num_ps = static_cast<int>(ps_addresses_.size());
  if (manifest->name() != request.name() || manifest->num_ps() != num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommitCheckpoint: the manifest names checkpoint '",
                     absl::CHexEscape(manifest->name().substr(0, 100)), "' of ",
                     manifest->num_ps(), " PS; the request names '",
                     request.name(), "' and this cluster has ", num_ps, " PS"));
  }
  auto root = options_.open_storage(options_.uri);
  if (!root.ok()) return root.status();
  absl::MutexLock lock(&run_mu_);
  if (absl::Status s = Publish(**root, request.name(), ManifestJson(*manifest));
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("PS ", store_->ps_task(), ": checkpoint ",
                                     request.name(), ": ", s.message()));
  }
  LOG(INFO) << "checkpoint " << request.name() << ": manifest recorded in "
            << (*root)->Describe();
  return absl::OkStatus();
}

absl::Status CheckpointCoordinator::CommitOnOthers(
    const std::string& root_uri, const std::string& name,
    const std::string& manifest_json) {
  CommitCheckpointRequest request;
  request.set_root_uri(root_uri);
  request.set_name(name);
  request.set_manifest_json(manifest_json);
  const int n = static_cast<int>(ps_addresses_.size());
  std::vector<std::string> errors(n);
  OnEachPs(1, n, [&](int t) {
    const absl::Status s =
        peers_->CommitCheckpoint(t, request, absl::Minutes(5));
    if (!s.ok())
      errors[t] = absl::StrCat(peers_->Describe(t), ": ", s.message());
  });
  std::string joined;
  for (const std::string& e : errors) {
    if (!e.empty()) absl::StrAppend(&joined, joined.empty() ? "" : "; ", e);
  }
  return joined.empty() ? absl::OkStatus() : absl::UnavailableError(joined);
}

void CheckpointCoordinator::Retain(Storage& root) {
  auto listing = ListCheckpoints(root);
  if (!listing.ok()) {
    LOG(WARNING) << "checkpoint retention: cannot list " << root.Describe()
                 << ": " << listing.status();
    return;
  }
  int complete = 0;
  for (const CheckpointListing& l : *listing) complete += l.complete;
  int seen_complete = 0;
  for (const CheckpointListing& l : *listing) {
    // Older than the newest complete one: incomplete leftovers of failed
    // saves, and complete ones beyond `keep`.
    const bool drop = l.complete ? options_.keep > 0 &&
                                       complete - seen_complete > options_.keep
                                 : seen_complete < complete;
    if (l.complete) ++seen_complete;
    if (!drop) continue;
    if (absl::Status s = DeleteCheckpoint(root, l.name); !s.ok()) {
      LOG(WARNING) << "checkpoint retention: cannot delete " << l.name << ": "
                   << s;
    } else {
      LOG(INFO) << "checkpoint retention: deleted " << root.Describe(l.name);
    }
  }
}

absl::Status CheckpointCoordinator::CheckCheckpointRequest(
    absl::string_view uri_arg) const {
  if (options_.uri.empty()) {
    return absl::FailedPreconditionError(
        "no checkpoint location: start ps_server with --checkpoint_uri");
  }
  if (!uri_arg.empty() && !SameCheckpointRoot(uri_arg, options_.uri)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint requested under '",
        absl::CHexEscape(uri_arg.substr(0, 200)),
        "', but this PS writes checkpoints only under its --checkpoint_uri '",
        options_.uri, "'"));
  }
  if (store_->ps_task() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this is PS ", store_->ps_task(),
        "; checkpoints are coordinated by PS 0 (", ps_addresses_[0], ")"));
  }
  return absl::OkStatus();
}

std::vector<absl::StatusOr<SaveShardsResponse>>
CheckpointCoordinator::SaveEverywhere(const std::string& uri, bool final) {
  // Every PS at once; this one on its own thread too.
  const int n = peers_->size();
  std::vector<absl::StatusOr<SaveShardsResponse>> results(
      n, absl::UnknownError("not run"));
  SaveShardsRequest request;
  request.set_checkpoint_uri(uri);
  request.set_final(final);
  OnEachPs(0, n, [&](int t) {
    results[t] = t == peers_->self()
                     ? SaveShards(request)
                     : peers_->SaveShards(t, request, options_.save_timeout);
  });
  // --replicas: a PS that failed over has nothing to save; the PS that
  // took its shards over saved them as its own (BuildManifest still
  // checks that every shard is in the checkpoint).
  for (int t = 0; t < n; ++t) {
    if (results[t].ok() ||
        (results[t].status().code() != absl::StatusCode::kUnavailable &&
         results[t].status().code() != absl::StatusCode::kDeadlineExceeded)) {
      continue;
    }
    bool failed_over = failed_over_here_ && failed_over_here_(t);
    for (int other = 0; other < n && !failed_over; ++other) {
      if (other == t || other == peers_->self() || !results[other].ok()) {
        continue;
      }
      auto stats = peers_->Stats(other, absl::Seconds(5));
      if (!stats.ok()) continue;
      for (int f : stats->failed_ps()) failed_over |= f == t;
    }
    if (failed_over) {
      LOG(WARNING) << "checkpoint " << uri << ": " << peers_->Describe(t)
                   << " failed over (" << results[t].status()
                   << "); its shards were saved by the PS that took them over";
      results[t] = SaveShardsResponse();
    }
  }
  return results;
}

absl::StatusOr<CheckpointResponse> CheckpointCoordinator::Checkpoint(
    absl::string_view uri_arg, bool final) {
  if (absl::Status s = CheckCheckpointRequest(uri_arg); !s.ok()) return s;
  absl::MutexLock run_lock(&run_mu_);
  auto response = RunCheckpoint(final);
  absl::MutexLock lock(&mu_);
  if (!response.ok()) {
    ++totals_.failed;
    return response;
  }
  ++totals_.succeeded;
  totals_.last_success = clock_->Now();
  totals_.last_seconds = response->seconds();
  totals_.last_bytes = response->bytes();
  totals_.last_step = response->global_step();
  return response;
}

CheckpointCoordinator::Totals CheckpointCoordinator::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

absl::StatusOr<CheckpointResponse> CheckpointCoordinator::RunCheckpoint(
    bool final) {
  const std::string& root_uri = options_.uri;
  const absl::Time start = clock_->Now();
  auto root = options_.open_storage(root_uri);
  if (!root.ok()) return root.status();
  const int64_t step = store_->global_step();
  const std::string name = CheckpointName(step, start);
  const std::string uri = JoinUri(root_uri, name);
  LOG(INFO) << "checkpoint " << uri << ": saving on " << ps_addresses_.size()
            << " PS";

  const auto results = SaveEverywhere(uri, final);
  auto manifest = BuildManifest(uri, name, start, results, store_->Variables(),
                                ps_addresses_);
  if (!manifest.ok()) {
    LOG(ERROR) << manifest.status() << "; deleting what was written";
    if (absl::Status s = DeleteCheckpoint(**root, name); !s.ok()) {
      LOG(WARNING) << "cannot delete the partial checkpoint " << uri << ": "
                   << s << " (it has no manifest, so it is never restored)";
    }
    return manifest.status();
  }
  const std::string manifest_json = ManifestJson(*manifest);
  if (absl::Status s = Publish(**root, name, manifest_json); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("checkpoint ", uri, ": ", s.message()));
  }
  if (options_.storage_per_host) {
    // The checkpoint is complete (PS 0's manifest names every file); a PS
    // that misses its copy can still be restored from the synced whole.
    if (absl::Status s = CommitOnOthers(root_uri, name, manifest_json);
        !s.ok()) {
      LOG(WARNING) << "checkpoint " << uri
                   << " is complete, but not every PS could record it on its "
                      "host (a PS restarted alone there cannot restore it): "
                   << s;
    }
  }
  set_last(start, manifest->global_step());
  CheckpointResponse response;
  response.set_uri(uri);
  response.set_name(name);
  response.set_global_step(manifest->global_step());
  response.set_bytes(manifest->total_bytes());
  response.set_files(manifest->files_size());
  response.set_seconds(absl::ToDoubleSeconds(clock_->Now() - start));
  LOG(INFO) << "checkpoint " << uri << ": " << response.files() << " files, "
            << response.bytes() << " bytes, step " << response.global_step()
            << ", " << response.seconds() << " s";
  return response;
}

}  // namespace psrt
