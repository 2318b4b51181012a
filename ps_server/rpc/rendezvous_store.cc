#include "ps_server/rpc/rendezvous_store.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '/' || c == '-';
}

absl::Status CheckKey(const std::string& key) {
  if (key.empty() || key.size() > RendezvousStore::kMaxKeyBytes ||
      !std::all_of(key.begin(), key.end(), IsKeyChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rendezvous: key \"", absl::CHexEscape(key.substr(0, 64)),
                     key.size() > 64 ? "..." : "", "\" (", key.size(),
                     " bytes): a key is 1-", RendezvousStore::kMaxKeyBytes,
                     " bytes of [A-Za-z0-9_./-]"));
  }
  return absl::OkStatus();
}

}  // namespace

RendezvousStore::RendezvousStore(int num_workers)
    : num_workers_(std::max(num_workers, 1)),
      max_value_bytes_(4096 + size_t{512} * num_workers_),
      max_entries_(4 * num_workers_ + 16) {}

absl::Status RendezvousStore::Check(const RendezvousRequest& request) const {
  if (request.worker() < 0 || request.worker() >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rendezvous: worker ", request.worker(),
                     " is not a worker of this cluster (it has ", num_workers_,
                     ", indexes 0-", num_workers_ - 1, ")"));
  }
  if (request.generation() < 0 || request.generation() > kMaxGeneration) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rendezvous: generation ", request.generation(),
                     " is outside 0-", kMaxGeneration));
  }
  if (request.set_size() > max_entries_ || request.get_size() > max_entries_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rendezvous: ", request.set_size(), " keys to set and ",
                     request.get_size(), " to get; a generation holds at most ",
                     max_entries_, " keys with ", num_workers_, " workers"));
  }
  for (const RendezvousEntry& entry : request.set()) {
    if (absl::Status s = CheckKey(entry.key()); !s.ok()) return s;
    if (entry.value().size() > max_value_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("Rendezvous: the value of key ", entry.key(), " is ",
                       entry.value().size(), " bytes; at most ",
                       max_value_bytes_, " with ", num_workers_, " workers"));
    }
  }
  for (const std::string& key : request.get()) {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<RendezvousResponse> RendezvousStore::Serve(
    const RendezvousRequest& request) {
  if (absl::Status s = Check(request); !s.ok()) return s;
  const int64_t generation = request.generation();
  absl::MutexLock lock(&mu_);
  const int64_t newest =
      generations_.empty() ? -1 : generations_.rbegin()->first;
  if (request.set_size() > 0) {
    if (generation < newest - 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Rendezvous: generation ", generation,
          " of the ring is over: it formed again as generation ", newest,
          " (worker ", request.worker(), " should join that one)"));
    }
    // All or nothing: every key is checked against what is stored first.
    auto existing = generations_.find(generation);
    int added = 0;
    for (const RendezvousEntry& entry : request.set()) {
      const Entry* stored = nullptr;
      if (existing != generations_.end()) {
        auto it = existing->second.entries.find(entry.key());
        if (it != existing->second.entries.end()) stored = &it->second;
      }
      if (stored == nullptr) {
        ++added;
      } else if (stored->value != entry.value()) {
        return absl::AlreadyExistsError(
            absl::StrCat("Rendezvous: key ", entry.key(), " of generation ",
                         generation, " was set by worker ", stored->worker,
                         " to another value; a key is set once"));
      }
    }
    const int held = existing == generations_.end()
                         ? 0
                         : static_cast<int>(existing->second.entries.size());
    if (held + added > max_entries_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Rendezvous: generation ", generation, " holds ", held,
                       " keys; worker ", request.worker(), " would add ", added,
                       ", over the ", max_entries_, " a ring of ", num_workers_,
                       " workers needs"));
    }
    Generation& stored = generations_[generation];
    for (const RendezvousEntry& entry : request.set()) {
      stored.entries.try_emplace(entry.key(),
                                 Entry{entry.value(), request.worker()});
    }
    stored.workers.insert(request.worker());
    // The two newest generations stay.
    while (generations_.size() > 2) generations_.erase(generations_.begin());
  }
  RendezvousResponse response;
  auto read = generations_.find(generation);
  if (read != generations_.end()) {
    for (const std::string& key : request.get()) {
      auto it = read->second.entries.find(key);
      if (it == read->second.entries.end()) continue;
      RendezvousEntry* found = response.add_found();
      found->set_key(key);
      found->set_value(it->second.value);
    }
  }
  if (generations_.empty()) {
    response.set_newest_generation(-1);
  } else {
    response.set_newest_generation(generations_.rbegin()->first);
    for (int worker : generations_.rbegin()->second.workers) {
      response.add_newest_generation_workers(worker);
    }
  }
  return response;
}

}  // namespace psrt
