#include "dataplane/fabric_endpoint.h"

#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "dataplane/libfabric.h"
#include "dataplane/shm_regions.h"
#include "glog/logging.h"

namespace psrt::dataplane {
namespace {

static_assert(std::is_standard_layout_v<Op>,
              "an Op is handed to libfabric as its own first member");

constexpr size_t kMaxAddressBytes = 256;

// Doorbells (Sleep, RingPeer): a sender rings unless its last send to
// that peer began less than kRingGapNanos before this one ended, and a
// sleeper sleeps only FabricOptions::sleep_after (at least
// kMinSleepAfterNanos) after its last completion.
constexpr int64_t kRingGapNanos = 100'000;
constexpr int64_t kMinSleepAfterNanos = 2 * kRingGapNanos;

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Before this process's first shm endpoint (in a forked child too):
// regions left under this pid by a process killed before it would make
// fi_enable fail (shm_regions.h).
void RemoveOwnStaleShmRegions() {
  static absl::Mutex mu(absl::kConstInit);
  static pid_t done_for ABSL_GUARDED_BY(mu) = 0;
  absl::MutexLock lock(&mu);
  if (done_for == getpid()) return;
  done_for = getpid();
  if (const int removed = RemoveStaleShmRegions(done_for); removed > 0) {
    LOG(INFO) << "data plane: removed " << removed
              << " shm region(s) a killed process left under this pid";
  }
}

}  // namespace

int AddressPort(absl::string_view address) {
  if (address.size() == sizeof(sockaddr_in)) {
    sockaddr_in in;
    std::memcpy(&in, address.data(), sizeof(in));
    if (in.sin_family == AF_INET) return ntohs(in.sin_port);
  } else if (address.size() == sizeof(sockaddr_in6)) {
    sockaddr_in6 in6;
    std::memcpy(&in6, address.data(), sizeof(in6));
    if (in6.sin6_family == AF_INET6) return ntohs(in6.sin6_port);
  }
  return 0;
}

MemoryRegion::~MemoryRegion() {
  if (mr_ != nullptr) fi_close(&mr_->fid);
}

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept
    : mr_(other.mr_), desc_(other.desc_) {
  other.mr_ = nullptr;
  other.desc_ = nullptr;
}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    if (mr_ != nullptr) fi_close(&mr_->fid);
    mr_ = other.mr_;
    desc_ = other.desc_;
    other.mr_ = nullptr;
    other.desc_ = nullptr;
  }
  return *this;
}

absl::Status FabricEndpoint::Fail(absl::string_view call, int rc) const {
  return absl::UnavailableError(absl::StrCat(
      "libfabric ", call, " (", provider_, "): ", Fabric().strerror(-rc)));
}

absl::StatusOr<std::unique_ptr<FabricEndpoint>> FabricEndpoint::Open(
    const FabricOptions& options) {
  if (absl::StatusOr<const LibFabric*> lib = LoadLibFabric(); !lib.ok()) {
    return lib.status();
  }
  std::unique_ptr<FabricEndpoint> endpoint(new FabricEndpoint());
  endpoint->provider_ = options.provider;
  // rxm (tcp) allocates its send and receive buffers 1,024 at a time per
  // endpoint, each of FI_OFI_RXM_BUFFER_SIZE bytes (16 KiB by default: 34
  // MiB an endpoint). Only messages up to that size are copied into them;
  // larger ones up to the eager limit leave from the caller's memory and
  // land in the posted receive (tcp's dynamic receive buffers). 1 KiB (a
  // ready frame fits; a header message does not, and moves as well from
  // its own buffer) holds 3.7 MiB an endpoint against 17.6 at 8 KiB, at
  // the same speed (docs/benchmarks.md, "rxm's buffers"); 16 per
  // connection queue rather than 128. Messages up to 4.25 MiB (a 4 MiB
  // tensor with its framing) go eager rather than by rendezvous: a body
  // moves only once its receives are posted (frame.h), so tcp lands it
  // in them directly, which saves the rendezvous' round trips (16 KiB-4
  // MiB calls 13-45% faster than by rendezvous; level at 8-16 MiB, and
  // the rendezvous is faster at 64 MiB: docs/benchmarks.md, "The eager
  // limit"). The environment still decides where it says. Set once,
  // before libfabric first reads it.
  static std::once_flag rxm_defaults;
  std::call_once(rxm_defaults, [] {
    setenv("FI_OFI_RXM_EAGER_LIMIT", "4456448", /*overwrite=*/0);
    setenv("FI_OFI_RXM_BUFFER_SIZE", "1024", /*overwrite=*/0);
    setenv("FI_OFI_RXM_MSG_RX_SIZE", "16", 0);
    setenv("FI_OFI_RXM_MSG_TX_SIZE", "16", 0);
  });
  if (options.provider == "shm") RemoveOwnStaleShmRegions();
  fi_info* hints = Fabric().dupinfo(nullptr);
  if (hints == nullptr) return absl::ResourceExhaustedError("fi_dupinfo");
  hints->caps = FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(options.provider.c_str());
  fi_info* info = nullptr;
  const bool bind_node = options.provider != "shm" && !options.node.empty();
  if (options.port < 0 || options.port > 65535) {
    Fabric().freeinfo(hints);
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane port ", options.port, " (0 to 65535)"));
  }
  const std::string service = absl::StrCat(options.port);
  int rc = Fabric().getinfo(FI_VERSION(1, 17),
                            bind_node ? options.node.c_str() : nullptr,
                            bind_node ? service.c_str() : nullptr,
                            bind_node ? FI_SOURCE : 0, hints, &info);
  Fabric().freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("libfabric has no provider \"", options.provider,
                     "\" for tagged reliable messages",
                     bind_node ? absl::StrCat(" on ", options.node) : "", ": ",
                     Fabric().strerror(-rc)));
  }
  std::unique_ptr<fi_info, decltype(&fi_freeinfo)> info_owner(
      info, Fabric().freeinfo);
  endpoint->provider_ = info->fabric_attr->prov_name;
  // Providers offer more than was asked (RMA, atomics); asking for those
  // too makes some (shm) want memory-registration modes this endpoint
  // never uses. Keep to what it uses.
  constexpr uint64_t kUsed =
      FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV | FI_SEND | FI_RECV;
  info->caps &= kUsed;

  if (info->tx_attr != nullptr) info->tx_attr->caps &= kUsed;
  if (info->rx_attr != nullptr) info->rx_attr->caps &= kUsed;
  switch (info->addr_format) {
    case FI_SOCKADDR_IN:
      endpoint->address_bytes_ = sizeof(sockaddr_in);
      break;
    case FI_SOCKADDR_IN6:
      endpoint->address_bytes_ = sizeof(sockaddr_in6);
      break;
    default:
      endpoint->address_bytes_ = 0;
  }
  FabricEndpoint* e = endpoint.get();
  if ((rc = Fabric().fabric(info->fabric_attr, &e->fabric_, nullptr)) != 0) {
    return e->Fail("fi_fabric", rc);
  }
  rc = fi_domain(e->fabric_, info, &e->domain_, nullptr);
  if (rc == -FI_ENODATA) {
    // shm 1.17 states its domain's registration mode in the old form
    // (FI_MR_BASIC | FI_MR_SCALABLE) and opens a domain only for a user
    // asking exactly FI_MR_BASIC: the same three bits (virtual addresses,
    // allocated memory, provider keys) in that form, no local
    // registration.
    info->domain_attr->mr_mode = FI_MR_BASIC;
    rc = fi_domain(e->fabric_, info, &e->domain_, nullptr);
  }
  if (rc != 0) return e->Fail("fi_domain", rc);
  e->needs_registration_ = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  e->iov_limit_ = std::clamp<size_t>(
      info->tx_attr != nullptr ? info->tx_attr->iov_limit : 1, 1, 4);
  fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = 4096;
  // A blocking read where the provider wakes it (tcp: its sockets); shm
  // has nothing to wake a waiter, so its completions are polled.
  e->can_wait_ = options.provider != "shm";
  cq_attr.wait_obj = e->can_wait_ ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
  if (fi_cq_open(e->domain_, &cq_attr, &e->cq_, nullptr) != 0) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    e->can_wait_ = false;
    if ((rc = fi_cq_open(e->domain_, &cq_attr, &e->cq_, nullptr)) != 0) {
      return e->Fail("fi_cq_open", rc);
    }
  }
  fi_av_attr av_attr = {};
  av_attr.type = FI_AV_UNSPEC;
  if ((rc = fi_av_open(e->domain_, &av_attr, &e->av_, nullptr)) != 0) {
    return e->Fail("fi_av_open", rc);
  }
  if ((rc = fi_endpoint(e->domain_, info, &e->ep_, nullptr)) != 0) {
    return e->Fail("fi_endpoint", rc);
  }
  if ((rc = fi_ep_bind(e->ep_, &e->av_->fid, 0)) != 0) {
    return e->Fail("fi_ep_bind(av)", rc);
  }
  if ((rc = fi_ep_bind(e->ep_, &e->cq_->fid, FI_TRANSMIT | FI_RECV)) != 0) {
    return e->Fail("fi_ep_bind(cq)", rc);
  }
  if ((rc = fi_enable(e->ep_)) != 0) return e->Fail("fi_enable", rc);
  char name[kMaxAddressBytes];
  size_t length = sizeof(name);
  if ((rc = fi_getname(&e->ep_->fid, name, &length)) != 0) {
    return e->Fail("fi_getname", rc);
  }
  e->address_.assign(name, length);
  e->sleep_after_ns_ = std::max(kMinSleepAfterNanos,
                                absl::ToInt64Nanoseconds(options.sleep_after));
  if (options.provider == "shm") e->region_hold_ = HoldShmRegion(e->address_);
  if (!e->can_wait_) {
    e->ringer_ = std::make_unique<DoorbellRinger>();
    if (options.doorbell) {
      e->doorbell_ = Doorbell::Bind(e->address_);
      if (e->doorbell_ == nullptr) {
        LOG(WARNING) << "data plane: " << e->provider_
                     << " endpoint has no doorbell (its name is taken or "
                        "sockets fail): it polls its completions every 50 us";
      }
    }
  }
  return endpoint;
}

void FabricEndpoint::Close() {
  if (ep_ != nullptr) fi_close(&ep_->fid);
  ep_ = nullptr;
}

FabricEndpoint::~FabricEndpoint() {
  Close();
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (region_hold_ >= 0) close(region_hold_);
}

absl::StatusOr<fi_addr_t> FabricEndpoint::InsertPeer(
    absl::string_view address) {
  if (address.empty() || address.size() > kMaxAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric address of ", address.size(), " bytes (1 to ",
                     kMaxAddressBytes, " expected)"));
  }
  if (address_bytes_ != 0 && address.size() != address_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric address of ", address.size(), " bytes; ",
                     provider_, " addresses have ", address_bytes_));
  }
  if (address_bytes_ == 0 &&
      address.find('\0') != address.size() - 1) {  // a C string, whole
    return absl::InvalidArgumentError(
        absl::StrCat(provider_, " address is not one terminated string"));
  }
  // libfabric reads the bytes; keep them in memory this call owns.
  std::string copy(address);
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
  const int inserted = fi_av_insert(av_, copy.data(), 1, &peer, 0, nullptr);
  if (inserted != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        provider_, " refused a peer address (fi_av_insert: ",
        inserted < 0 ? Fabric().strerror(-inserted) : "not inserted", ")"));
  }
  if (ringer_ != nullptr) {
    absl::MutexLock lock(&bells_mu_);
    bells_[peer] = PeerBell{DoorbellOf(address)};
  }
  return peer;
}

void FabricEndpoint::RemovePeer(fi_addr_t peer) {
  fi_av_remove(av_, &peer, 1, 0);
  absl::MutexLock lock(&bells_mu_);
  bells_.erase(peer);
}

void FabricEndpoint::SendPosting() {
  if (doorbell_ == nullptr) return;
  // Counted before the post and the sleeper's flag read after (both
  // sequentially consistent): either Sleep sees the send or this sees
  // the sleeper and wakes it.
  sends_in_flight_.fetch_add(1);
  if (sleeping_.load()) ringer_->Ring(doorbell_->address());
}

void FabricEndpoint::SendNotPosted() {
  if (doorbell_ != nullptr) sends_in_flight_.fetch_sub(1);
}

void FabricEndpoint::RingPeer(fi_addr_t peer, int64_t posting_at) {
  if (ringer_ == nullptr) return;
  absl::MutexLock lock(&bells_mu_);
  auto it = bells_.find(peer);
  if (it == bells_.end()) return;
  PeerBell& bell = it->second;
  // A send within kRingGapNanos of this one's end began is one the peer
  // took (or has queued) less than sleep_after before it could
  // decide to sleep: it reads its queue again before sleeping, after
  // this send is in it. A ring costs a system call (15% of a 4 KiB
  // call), so a stream of calls rings once.
  const bool recent = MonotonicNanos() - bell.last_posting_at < kRingGapNanos;
  bell.last_posting_at = posting_at;
  if (recent) return;
  // No bell there (a client's endpoint): it polls while it waits.
  if (!ringer_->Ring(bell.address)) bells_.erase(it);
}

void FabricEndpoint::SendEnded() {
  if (doorbell_ == nullptr) return;
  // Never below 0 (a provider reporting a send twice): a send counted
  // later must keep Sleep awake.
  int64_t n = sends_in_flight_.load();
  while (n > 0 && !sends_in_flight_.compare_exchange_weak(n, n - 1)) {
  }
}

void FabricEndpoint::Sleep(absl::Duration timeout) {
  sleeping_.store(true);
  if (sends_in_flight_.load() <= 0) doorbell_->Wait(timeout);
  sleeping_.store(false);
}

absl::StatusOr<MemoryRegion> FabricEndpoint::Register(void* data,
                                                      size_t bytes) {
  MemoryRegion region;
  if (!needs_registration_) return region;
  int rc = fi_mr_reg(domain_, data, bytes, FI_SEND | FI_RECV, 0, 0, 0,
                     &region.mr_, nullptr);
  if (rc != 0) return Fail("fi_mr_reg", rc);
  region.desc_ = fi_mr_desc(region.mr_);
  return region;
}

absl::Status FabricEndpoint::RegisterIov(const struct iovec* iov, size_t count,
                                         void** descs,
                                         std::vector<MemoryRegion>* keep) {
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<MemoryRegion> r = Register(iov[i].iov_base, iov[i].iov_len);
    if (!r.ok()) return r.status();
    descs[i] = r->desc();
    keep->push_back(*std::move(r));
  }
  return absl::OkStatus();
}

absl::Status FabricEndpoint::PostSend(fi_addr_t peer, uint64_t tag,
                                      const void* data, size_t bytes,
                                      void* desc, Op* op) {
  SendPosting();
  // Read only where a doorbell may be rung (not on tcp's path).
  const int64_t posting_at = ringer_ != nullptr ? MonotonicNanos() : 0;
  const ssize_t rc = fi_tsend(ep_, data, bytes, desc, peer, tag, op);
  if (rc == 0) {
    RingPeer(peer, posting_at);
    return absl::OkStatus();
  }
  SendNotPosted();
  if (rc == -FI_EAGAIN) return absl::ResourceExhaustedError("send queue full");
  return Fail("fi_tsend", static_cast<int>(rc));
}

absl::Status FabricEndpoint::PostSendv(fi_addr_t peer, uint64_t tag,
                                       const struct iovec* iov, void** descs,
                                       size_t count, Op* op) {
  SendPosting();
  // Read only where a doorbell may be rung (not on tcp's path).
  const int64_t posting_at = ringer_ != nullptr ? MonotonicNanos() : 0;
  const ssize_t rc = fi_tsendv(ep_, iov, descs, count, peer, tag, op);
  if (rc == 0) {
    RingPeer(peer, posting_at);
    return absl::OkStatus();
  }
  SendNotPosted();
  if (rc == -FI_EAGAIN) return absl::ResourceExhaustedError("send queue full");
  return Fail("fi_tsendv", static_cast<int>(rc));
}

absl::Status FabricEndpoint::PostRecv(fi_addr_t source, uint64_t tag,
                                      uint64_t ignore, void* data, size_t bytes,
                                      void* desc, Op* op) {
  const ssize_t rc = fi_trecv(ep_, data, bytes, desc, source, tag, ignore, op);
  if (rc == 0) return absl::OkStatus();
  if (rc == -FI_EAGAIN) {
    return absl::ResourceExhaustedError("receive queue full");
  }
  return Fail("fi_trecv", static_cast<int>(rc));
}

void FabricEndpoint::Cancel(Op* op) { fi_cancel(&ep_->fid, op); }

size_t FabricEndpoint::Poll(Completion* out, size_t max, absl::Duration timeout,
                            bool idle) {
  constexpr size_t kBatch = 32;
  fi_cq_tagged_entry entries[kBatch];
  fi_addr_t sources[kBatch];
  max = std::min(max, kBatch);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  ssize_t n;
  while (true) {
    // Read before the completion queue is (see Sleep).
    const int64_t read_at = doorbell_ != nullptr ? MonotonicNanos() : 0;
    if (can_wait_) {
      const int64_t ms = std::max<int64_t>(
          0, absl::ToInt64Milliseconds(deadline - absl::Now()));
      n = fi_cq_sreadfrom(cq_, entries, max, sources, nullptr,
                          static_cast<int>(std::min<int64_t>(ms, 1000)));
    } else {
      n = fi_cq_readfrom(cq_, entries, max, sources);
    }
    if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) return 0;
    if (!can_wait_) {
      // Polled: spin (yielding) for the first 50 us, then sleep on the
      // doorbell or nap, so that an idle endpoint costs little CPU and a
      // busy one little latency.
      if (now - start < absl::Microseconds(50)) {
        std::this_thread::yield();
      } else if (idle && doorbell_ != nullptr &&
                 read_at - last_completion_ns_.load() >= sleep_after_ns_) {
        Sleep(deadline - now);
      } else {
        absl::SleepFor(std::min(absl::Microseconds(50), deadline - now));
      }
    }
  }
  if (doorbell_ != nullptr) last_completion_ns_.store(MonotonicNanos());
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry error = {};
    if (fi_cq_readerr(cq_, &error, 0) != 1) return 0;
    Completion& c = out[0];
    c = Completion();
    c.op = static_cast<Op*>(error.op_context);
    c.tag = error.tag;
    c.bytes = error.len;
    if (error.flags & FI_SEND) SendEnded();
    if (error.err == FI_ETRUNC) {
      c.status = absl::InvalidArgumentError(
          absl::StrCat("message longer than the ", error.len,
                       " bytes posted for it (", error.olen, " over)"));
    } else if (error.err == FI_ECANCELED) {
      c.status = absl::CancelledError("operation cancelled");
    } else {
      c.status = absl::UnavailableError(absl::StrCat(
          "libfabric (", provider_, "): ", Fabric().strerror(error.err)));
    }
    return 1;
  }
  if (n < 0) return 0;
  for (ssize_t i = 0; i < n; ++i) {
    Completion& c = out[i];
    c = Completion();
    c.op = static_cast<Op*>(entries[i].op_context);
    c.bytes = entries[i].len;
    c.tag = entries[i].tag;
    c.source = sources[i];
    if (entries[i].flags & FI_SEND) SendEnded();
  }
  return static_cast<size_t>(n);
}

}  // namespace psrt::dataplane
