#include "ps_worker/allreduce/ring_rendezvous_store.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/common/error.h"

namespace psrt {
namespace {

constexpr char kGlooPrefix[] = "gloo/";

// "worker 2" for Gloo's key of rank 2 ("gloo/2"), else the key.
std::string Describe(const std::string& key) {
  if (absl::StartsWith(key, kGlooPrefix)) {
    return absl::StrCat("worker ", key.substr(sizeof(kGlooPrefix) - 1));
  }
  const size_t slash = key.rfind('/');
  return slash == std::string::npos
             ? key
             : absl::StrCat("worker ", key.substr(slash + 1));
}

std::vector<std::string> Prefixed(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& key : keys) out.push_back(kGlooPrefix + key);
  return out;
}

}  // namespace

RingRendezvousStore::RingRendezvousStore(int worker, int64_t generation,
                                         RendezvousCall call,
                                         absl::Duration timeout)
    : worker_(worker),
      generation_(generation),
      call_(std::move(call)),
      timeout_(timeout) {}

absl::Status RingRendezvousStore::Set(const std::string& key,
                                      const std::string& value) {
  RendezvousRequest request;
  request.set_worker(worker_);
  request.set_generation(generation_);
  RendezvousEntry* entry = request.add_set();
  entry->set_key(key);
  entry->set_value(value);
  return call_(request).status();
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>>
RingRendezvousStore::Read(const std::vector<std::string>& keys) {
  RendezvousRequest request;
  request.set_worker(worker_);
  request.set_generation(generation_);
  for (const std::string& key : keys) request.add_get(key);
  absl::StatusOr<RendezvousResponse> answer = call_(request);
  if (!answer.ok()) return answer.status();
  absl::flat_hash_map<std::string, std::string> found;
  for (const RendezvousEntry& entry : answer->found()) {
    found[entry.key()] = entry.value();
  }
  return found;
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>>
RingRendezvousStore::WaitFor(const std::vector<std::string>& keys,
                             absl::Duration timeout,
                             const std::string& missing_says) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration poll = absl::Milliseconds(1);
  while (true) {
    absl::StatusOr<absl::flat_hash_map<std::string, std::string>> found =
        Read(keys);
    if (!found.ok()) return found.status();
    if (found->size() == keys.size()) return found;
    if (absl::Now() >= deadline) {
      std::vector<std::string> missing;
      for (const std::string& key : keys) {
        if (!found->contains(key)) missing.push_back(Describe(key));
      }
      return absl::DeadlineExceededError(
          absl::StrCat(absl::StrJoin(missing, ", "), " ", missing_says,
                       " all-reduce ring generation ", generation_, " within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(poll, deadline - absl::Now()));
    poll = std::min(poll * 2, absl::Milliseconds(50));
  }
}

void RingRendezvousStore::set(const std::string& key,
                              const std::vector<char>& data) {
  absl::Status s =
      Set(kGlooPrefix + key, std::string(data.begin(), data.end()));
  if (!s.ok()) GLOO_THROW_IO_EXCEPTION(s.ToString());
}

std::vector<char> RingRendezvousStore::get(const std::string& key) {
  auto found = WaitFor({kGlooPrefix + key}, timeout_, "did not join");
  if (!found.ok()) GLOO_THROW_IO_EXCEPTION(found.status().ToString());
  const std::string& value = found->begin()->second;
  return std::vector<char>(value.begin(), value.end());
}

void RingRendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void RingRendezvousStore::wait(const std::vector<std::string>& keys,
                               const std::chrono::milliseconds& timeout) {
  // Gloo's kNoTimeout (0): the ring's own timeout; nothing waits forever.
  auto found =
      WaitFor(Prefixed(keys),
              timeout.count() > 0 ? absl::FromChrono(timeout) : timeout_,
              "did not join");
  if (!found.ok()) GLOO_THROW_IO_EXCEPTION(found.status().ToString());
}

}  // namespace psrt
