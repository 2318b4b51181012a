#include "ps_worker/allreduce/allreduce_ring.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"

namespace psrt {
namespace {

std::string MemberKey(int worker) { return absl::StrCat("member/", worker); }
std::string AliveKey(int worker) { return absl::StrCat("alive/", worker); }
std::string LeftKey(int worker) { return absl::StrCat("left/", worker); }

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that
// died raises SIGPIPE, whose default action ends this process silently
// (exit 141) before the write's error could name the dead worker. The
// process ignores it from its first ring on, unless someone installed a
// handler of their own.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

absl::StatusOr<int64_t> AllreduceRing::GenerationToJoin(
    const Options& options) {
  RendezvousRequest request;
  request.set_worker(options.worker);
  absl::StatusOr<RendezvousResponse> answer = options.rendezvous(request);
  if (!answer.ok()) return answer.status();
  const int64_t newest = answer->newest_generation();
  if (newest < 0) return 0;
  const auto& members = answer->newest_generation_workers();
  const bool joined_newest = std::find(members.begin(), members.end(),
                                       options.worker) != members.end();
  return joined_newest ? newest + 1 : newest;
}

AllreduceRing::AllreduceRing(const Options& options, int64_t generation,
                             absl::Duration join_timeout)
    : options_(options),
      store_(options.worker, generation, options.rendezvous, join_timeout) {}

AllreduceRing::~AllreduceRing() {
  Leave();
  Disconnect();
}

void AllreduceRing::Disconnect() {
  // A failed collective leaves Gloo's other connections open, still read
  // by the device's thread, which lands a message in the buffer its slot
  // named when the message began: freeing the algorithms while a peer
  // goes on sending would let that thread write into freed memory.
  // Closing every connection first takes each off the device's thread
  // (Gloo waits for the thread's next turn), so nothing lands after
  // this. (Read in Gloo's tcp transport; the crash the test saw came
  // from Sum's change of buffer, below, and this alone did not stop it.)
  if (context_ != nullptr) {
    for (int peer = 0; peer < context_->size; ++peer) {
      if (peer == context_->rank) continue;
      try {
        std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(peer);
        if (pair != nullptr) pair->close();
      } catch (const std::exception&) {
        // Closing what is already broken: its destruction below does
        // the rest.
      }
    }
  }
  sum_.reset();
  retired_sums_.clear();
  context_.reset();
  device_.reset();
}

void AllreduceRing::Leave() {
  // Gloo closes its connections abortively (SO_LINGER 0), and a
  // collective's last message to a peer is sent without waiting for it
  // (the chunked ring's final notification): a member that closed as soon
  // as its own call returned could fail a peer still finishing the same
  // call ("Connection closed by peer"). So a leaving member says how many
  // collectives it completed and waits, up to kLeaveWait, until every
  // peer has completed as many: then none is still inside one of them.
  // A peer that goes on training never says so; the wait then ends at
  // kLeaveWait, and its next call fails, as it would have.
  if (context_ == nullptr || options_.num_workers == 1 || collectives_ == 0) {
    return;
  }
  if (!store_.Set(LeftKey(options_.worker), absl::StrCat(collectives_)).ok()) {
    return;
  }
  std::vector<std::string> others;
  for (int w = 0; w < options_.num_workers; ++w) {
    if (w != options_.worker) others.push_back(LeftKey(w));
  }
  const absl::Time give_up = absl::Now() + kLeaveWait;
  while (absl::Now() < give_up) {
    auto left = store_.Read(others);
    if (!left.ok()) return;
    int done = 0;
    for (const auto& [key, value] : *left) {
      int64_t completed = 0;
      if (absl::SimpleAtoi(value, &completed) && completed >= collectives_) {
        ++done;
      }
    }
    if (done == static_cast<int>(others.size())) return;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

std::string AllreduceRing::Name(int worker) const {
  if (worker >= 0 &&
      worker < static_cast<int>(options_.worker_addresses.size())) {
    return absl::StrCat("worker ", worker, " (",
                        options_.worker_addresses[worker], ")");
  }
  return absl::StrCat("worker ", worker);
}

absl::StatusOr<std::unique_ptr<AllreduceRing>> AllreduceRing::Join(
    const Options& options, int64_t generation, bool holds_state,
    absl::Duration join_timeout) {
  if (join_timeout <= absl::ZeroDuration()) join_timeout = options.timeout;
  if (options.num_workers < 1 || options.worker < 0 ||
      options.worker >= options.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("all-reduce ring: worker ",
                                                   options.worker, " of ",
                                                   options.num_workers));
  }
  IgnoreSigpipe();
  std::unique_ptr<AllreduceRing> ring(
      new AllreduceRing(options, generation, join_timeout));
  if (absl::Status s =
          ring->store_.Set(MemberKey(options.worker), holds_state ? "1" : "0");
      !s.ok()) {
    return s;
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    ring->device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(
        options.worker, options.num_workers);
    // Gloo times the rendezvous by the context's timeout, then the
    // collectives.
    context->setTimeout(Millis(join_timeout));
    context->connectFullMesh(ring->store_, ring->device_);
    context->setTimeout(Millis(options.timeout));
    ring->context_ = std::move(context);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("worker ", options.worker,
                     " could not join all-reduce ring generation ", generation,
                     " (listening on ", options.hostname, "): ", e.what()));
  }
  // Every member set its member key before its Gloo one: all are there.
  std::vector<std::string> keys;
  for (int w = 0; w < options.num_workers; ++w) keys.push_back(MemberKey(w));
  auto members = ring->store_.WaitFor(keys, join_timeout, "did not join");
  if (!members.ok()) return members.status();
  for (int w = 0; w < options.num_workers; ++w) {
    if ((*members)[MemberKey(w)] == "1") {
      ring->state_holder_ = w;
      break;
    }
  }
  return ring;
}

absl::Status AllreduceRing::Sum(float* data, size_t n) {
  if (context_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all-reduce ring generation ", generation(), " is broken"));
  }
  if (n == 0 || options_.num_workers == 1) return absl::OkStatus();
  try {
    // Gloo's chunked ring over buffers registered once: 1.2 ms for
    // DeepFM's 412 KB of dense gradients between two ranks here, against
    // 3.5 ms for gloo::allreduce's unbound buffers, which it re-registers
    // every call (docs/benchmarks.md).
    if (sum_ == nullptr || sum_data_ != data || sum_floats_ != n) {
      // The last algorithms are kept, not freed: a peer's message for
      // one may still be landing in its buffers (the device's thread
      // reads a message in several turns into the buffer its slot named
      // when it began). Freeing the previous one here wrote into freed
      // memory in 1 run in 30-40 of allreduce_ring_test's dead-member
      // case, whose survivors sum a new vector ("malloc(): unaligned
      // tcache chunk detected": the chunk of that algorithm's 40-byte
      // inbox); kept, 0 in 160. A collective's messages all land before
      // its members finish the next: the last two are kept.
      if (sum_ != nullptr) retired_sums_.push_back(std::move(sum_));
      if (retired_sums_.size() > kRetiredSums) {
        retired_sums_.erase(retired_sums_.begin());
      }
      sum_ = std::make_unique<gloo::AllreduceRingChunked<float>>(
          context_, std::vector<float*>{data}, static_cast<int>(n));
      sum_data_ = data;
      sum_floats_ = n;
    }
    sum_->run();
  } catch (const std::exception& e) {
    return Broke("all-reduce", e.what());
  }
  ++collectives_;
  return absl::OkStatus();
}

absl::Status AllreduceRing::Broadcast(void* data, size_t bytes, int root) {
  if (context_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all-reduce ring generation ", generation(), " is broken"));
  }
  if (root < 0 || root >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast from worker ", root, " of ", options_.num_workers));
  }
  if (bytes == 0 || options_.num_workers == 1) return absl::OkStatus();
  try {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTag(static_cast<uint32_t>(collectives_));
    opts.setTimeout(Millis(options_.timeout));
    gloo::broadcast(opts);
  } catch (const std::exception& e) {
    return Broke("broadcast", e.what());
  }
  ++collectives_;
  return absl::OkStatus();
}

absl::Status AllreduceRing::Broke(const std::string& what,
                                  const std::string& cause) {
  // Closing this member's connections fails the calls of the peers that
  // wait on them; a peer waiting only on the dead one's fails at its
  // timeout.
  const absl::Time failed = absl::Now();
  Disconnect();
  std::vector<std::string> others;
  for (int w = 0; w < options_.num_workers; ++w) {
    if (w != options_.worker) others.push_back(AliveKey(w));
  }
  // Every survivor says it is alive with when its call failed. The first
  // failure bounds the wait: every survivor's call failed within the
  // timeout of it, so one that has not said so by then (and a margin for
  // the calls) is gone.
  std::string gone;
  absl::Status said = store_.Set(AliveKey(options_.worker),
                                 absl::StrCat(absl::ToUnixMillis(failed)));
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> present;
  absl::Time first_failure = failed;
  while (said.ok()) {
    present = store_.Read(others);
    if (!present.ok() || present->size() == others.size()) break;
    for (const auto& [key, value] : *present) {
      int64_t at_ms = 0;
      if (absl::SimpleAtoi(value, &at_ms)) {
        first_failure = std::min(first_failure, absl::FromUnixMillis(at_ms));
      }
    }
    const absl::Time deadline = first_failure + options_.timeout + kAliveMargin;
    if (absl::Now() >= deadline) break;
    absl::SleepFor(std::min(absl::Milliseconds(50), deadline - absl::Now()));
  }
  if (!said.ok() || !present.ok()) {
    gone = absl::StrCat("(could not ask who is alive: ",
                        (said.ok() ? present.status() : said).message(), ")");
  } else if (present->size() == others.size()) {
    gone = "every worker is alive (a connection failed)";
  } else {
    std::vector<std::string> names;
    for (int w = 0; w < options_.num_workers; ++w) {
      if (w != options_.worker && !present->contains(AliveKey(w))) {
        names.push_back(Name(w));
      }
    }
    gone = absl::StrCat(absl::StrJoin(names, ", "),
                        names.size() == 1 ? " is" : " are", " gone: not alive ",
                        absl::FormatDuration(absl::Now() - first_failure),
                        " after the ring broke (timeout ",
                        absl::FormatDuration(options_.timeout), ")");
  }
  return absl::UnavailableError(absl::StrCat(
      "the all-reduce ring (generation ", generation(), ", ",
      options_.num_workers, " workers) broke in its ", what, " number ",
      collectives_ + 1, ": ", gone, "; Gloo said: ", cause));
}

}  // namespace psrt
