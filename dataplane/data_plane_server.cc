#include "dataplane/data_plane_server.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psrt::dataplane {
namespace {

enum Purpose : int { kHeaderSlot = 1, kBody, kSend };

// What the provider reported in error stays allocated this long: rxm
// (1.17) reports a receive cancelled by a dead sender's connection
// several times, all at once (4 reports each, seen).
constexpr absl::Duration kRetiredFor = absl::Seconds(60);
// The progress loop's longest wait in Poll.
constexpr absl::Duration kProgressPoll = absl::Milliseconds(100);

}  // namespace

struct DataPlaneServer::HeaderSlot {
  Op op;
  uint8_t bytes[kHeaderMessageBytes];
  MemoryRegion region;
};

// A request's body being received: one receive per message it comes in.
struct DataPlaneServer::BodyReceive {
  explicit BodyReceive(size_t sends) : ops(sends), completed(sends, false) {}
  std::vector<Op> ops;
  std::vector<bool> completed;   // each op's first completion came
  bool provider_failed = false;  // one came in error: the provider's
  absl::Time posted;
  bool cancelled = false;  // past options_.body_receive_timeout
  std::vector<uint32_t> sizes;
  size_t outstanding = 0;
  absl::Status failure;  // the first message that did not check
  FrameHeader header;
  Caller caller = {FI_ADDR_NOTAVAIL, 0, 0, 0};
  std::shared_ptr<BodyBuffer> data;
  MemoryRegion region;
};

struct DataPlaneServer::PendingSend {
  Op header_op;
  std::vector<Op> body_ops;
  std::vector<uint8_t> message;  // header + inline body or body sizes
  OutgoingBody body;
  std::shared_ptr<const void> owner;
  MemoryRegion message_region;
  std::vector<MemoryRegion> body_regions;
  std::vector<std::array<void*, 4>> body_descs;
  Caller to = {FI_ADDR_NOTAVAIL, 0, 0, 0};  // the frame's peer and call
  int outstanding = 0;          // operations posted and not yet reported
  std::vector<bool> completed;  // header op, then body ops
  bool provider_failed = false;
  // The body waits for its client's ready frame until `ready_by`.
  bool awaiting_ready = false;
  absl::Time ready_by;
};

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(
    DataPlaneServerOptions options, CallHandler handler) {
  return Start(std::move(options), [handler = std::move(handler)](
                                       Request request, Respond respond) {
    respond(handler(request.connection_id, request.bytes));
  });
}

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(
    DataPlaneServerOptions options, AsyncCallHandler handler) {
  absl::StatusOr<std::unique_ptr<FabricEndpoint>> endpoint =
      FabricEndpoint::Open(options.fabric);
  if (!endpoint.ok()) return endpoint.status();
  std::unique_ptr<DataPlaneServer> server(new DataPlaneServer(
      std::move(options), std::move(handler), *std::move(endpoint)));
  for (int i = 0; i < std::max(1, server->options_.header_slots); ++i) {
    absl::StatusOr<std::unique_ptr<HeaderSlot>> slot = server->NewHeaderSlot();
    if (!slot.ok()) return slot.status();
    server->slots_.push_back(*std::move(slot));
  }
  server->progress_ = std::thread([s = server.get()] { s->ProgressLoop(); });
  for (int i = 0; i < std::max(1, server->options_.handler_threads); ++i) {
    server->handlers_.emplace_back([s = server.get()] { s->HandlerLoop(); });
  }
  return server;
}

DataPlaneServer::DataPlaneServer(DataPlaneServerOptions options,
                                 AsyncCallHandler handler,
                                 std::unique_ptr<FabricEndpoint> endpoint)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      liveness_(std::make_shared<Liveness>()),
      endpoint_(std::move(endpoint)),
      gate_(options_.token),
      body_pool_(std::make_shared<BodyBufferPool>()) {
  absl::MutexLock lock(&liveness_->mu);
  liveness_->server = this;
}

DataPlaneServer::~DataPlaneServer() {
  {
    // Answers from now on send nothing; one being sent finishes first.
    absl::MutexLock lock(&liveness_->mu);
    liveness_->server = nullptr;
  }
  stopping_ = true;
  if (progress_.joinable()) progress_.join();
  for (std::thread& t : handlers_) t.join();
  // Closing the endpoint ends every posted operation; then their memory
  // (and its registrations) can go, before the domain does.
  endpoint_->Close();
  slots_.clear();
  bodies_.clear();
  retired_.clear();
  {
    absl::MutexLock lock(&mu_);
    awaiting_ready_.clear();
    sends_.clear();
    work_.clear();
  }
  endpoint_.reset();
}

DataPlaneServerStats DataPlaneServer::stats() const {
  DataPlaneServerStats s;
  s.calls = calls_;
  s.refused_hellos = refused_hellos_;
  s.refused_frames = refused_frames_;
  s.refused_bodies = refused_bodies_;
  s.bytes_in = bytes_in_;
  s.bytes_out = bytes_out_;
  s.late_completions = late_completions_;
  s.bodies_posted = bodies_posted_;
  s.unclaimed_replies = unclaimed_replies_;
  s.late_readies = late_readies_;
  absl::MutexLock lock(&mu_);
  s.inflight_body_bytes = static_cast<int64_t>(inflight_body_bytes_);
  return s;
}

size_t DataPlaneServer::connections() const {
  absl::MutexLock lock(&mu_);
  return connections_.size();
}

absl::Status DataPlaneServer::Post(const std::function<absl::Status()>& post,
                                   absl::Duration give_up_after,
                                   bool peer_wait) {
  // The provider's queues fill under load; the progress thread drains them.
  auto now = [&] { return peer_wait ? awake_.Now() : absl::Now(); };
  const absl::Time give_up = now() + give_up_after;
  while (true) {
    absl::Status s = post();
    if (!absl::IsResourceExhausted(s) || stopping_ || now() > give_up) {
      return s;
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

absl::Status DataPlaneServer::PostHeaderSlot(HeaderSlot* slot) {
  return Post([&] {
    return endpoint_->PostRecv(FI_ADDR_UNSPEC, 0, kAnyHeaderIgnoreBits,
                               slot->bytes, sizeof(slot->bytes),
                               slot->region.desc(), &slot->op);
  });
}

absl::StatusOr<std::unique_ptr<DataPlaneServer::HeaderSlot>>
DataPlaneServer::NewHeaderSlot() {
  auto slot = std::make_unique<HeaderSlot>();
  slot->op.purpose = kHeaderSlot;
  slot->op.user = slot.get();
  absl::StatusOr<MemoryRegion> region =
      endpoint_->Register(slot->bytes, sizeof(slot->bytes));
  if (!region.ok()) return region.status();
  slot->region = *std::move(region);
  if (absl::Status s = PostHeaderSlot(slot.get()); !s.ok()) return s;
  return slot;
}

void DataPlaneServer::ReplaceHeaderSlot(HeaderSlot* slot) {
  for (std::unique_ptr<HeaderSlot>& held : slots_) {
    if (held.get() != slot) continue;
    Retired retired;
    retired.slot = std::move(held);
    Retire(std::move(retired));
    absl::StatusOr<std::unique_ptr<HeaderSlot>> fresh = NewHeaderSlot();
    if (fresh.ok()) {
      held = *std::move(fresh);
    } else if (!stopping_) {
      LOG(ERROR) << "data plane: could not post a header receive: "
                 << fresh.status();
    }
    break;
  }
  slots_.erase(std::remove(slots_.begin(), slots_.end(), nullptr),
               slots_.end());
}

void DataPlaneServer::Retire(Retired retired) {
  retired.until = awake_.Now() + kRetiredFor;
  retired.user = retired.slot   ? static_cast<const void*>(retired.slot.get())
                 : retired.body ? static_cast<const void*>(retired.body.get())
                                : static_cast<const void*>(retired.send.get());
  retired_users_.insert(retired.user);
  retired_.push_back(std::move(retired));
}

void DataPlaneServer::PruneRetired(absl::Time now) {
  while (!retired_.empty() && retired_.front().until <= now) {
    retired_users_.erase(retired_.front().user);
    retired_.pop_front();
  }
}

void DataPlaneServer::ProgressLoop() {
  progress_thread_id_ = std::this_thread::get_id();
  Completion completions[32];
  while (!stopping_) {
    // Idle with no body being received: only a new message (whose sender
    // rings) or this server's own sends (counted by the endpoint) need
    // the provider driven.
    const size_t n = endpoint_->Poll(completions, 32, kProgressPoll,
                                     /*idle=*/bodies_.empty());
    // Before judging any peer overdue: a stop that just ended does not
    // count (what came meanwhile is in `completions`, or still queued).
    const absl::Time now = awake_.Tick();
    PruneRetired(now);
    if (now >= next_sweep_) {
      next_sweep_ = now + absl::Milliseconds(250);
      CancelOverdueBodies(now);
      DropUnclaimedReplies(now);
    }
    for (size_t i = 0; i < n; ++i) {
      const Completion& c = completions[i];
      if (c.op == nullptr) continue;
      // A second report of an operation already ended in error: what it
      // belongs to is retired (still allocated), and done with.
      if (retired_users_.contains(c.op->user)) {
        ++late_completions_;
        continue;
      }
      switch (c.op->purpose) {
        case kHeaderSlot: {
          auto* slot = static_cast<HeaderSlot*>(c.op->user);
          OnHeader(slot, c);
          if (!c.status.ok() && !absl::IsInvalidArgument(c.status)) {
            // Cancelled or failed (not a stranger's message, truncated):
            // the provider may report it again, so it is not posted
            // again; a fresh slot takes its place.
            ReplaceHeaderSlot(slot);
          } else if (absl::Status s = PostHeaderSlot(slot);
                     !s.ok() && !stopping_) {
            LOG(ERROR) << "data plane: could not post a header receive: " << s;
          }
          break;
        }
        case kBody:
          OnBody(static_cast<BodyReceive*>(c.op->user), c);
          break;
        case kSend:
          OnSent(static_cast<PendingSend*>(c.op->user), c);
          break;
        default:
          break;
      }
    }
  }
}

bool DataPlaneServer::FirstReport(std::vector<bool>* completed, size_t index) {
  if ((*completed)[index]) {
    ++late_completions_;
    return false;
  }
  (*completed)[index] = true;
  return true;
}

void DataPlaneServer::CancelOverdueBodies(absl::Time now) {
  for (auto& [key, body] : bodies_) {
    if (body->cancelled || now - body->posted < options_.body_receive_timeout) {
      continue;
    }
    // Its sender stopped sending (died mid-body): the provider keeps a
    // receive posted for it for good. Cancelled, each completes
    // CANCELLED, which refuses the body and gives its budget back.
    body->cancelled = true;
    LOG(WARNING) << "data plane: a request body on connection "
                 << body->header.connection_id << " not whole after "
                 << absl::FormatDuration(options_.body_receive_timeout)
                 << "; its receives are cancelled";
    for (size_t i = 0; i < body->ops.size(); ++i) {
      if (!body->completed[i]) endpoint_->Cancel(&body->ops[i]);
    }
  }
}

void DataPlaneServer::OnSent(PendingSend* send, const Completion& c) {
  if (!c.status.ok()) {
    LOG_EVERY_N(WARNING, 100)
        << "data plane: a response could not be sent: " << c.status;
  }
  const size_t index =
      c.op == &send->header_op
          ? 0
          : 1 + static_cast<size_t>(c.op - send->body_ops.data());
  absl::MutexLock lock(&mu_);
  if (!FirstReport(&send->completed, index)) return;
  if (!c.status.ok()) send->provider_failed = true;
  if (--send->outstanding > 0 || send->awaiting_ready) return;
  auto it = sends_.find(send);
  Retired retired;
  retired.send = std::move(it->second);
  sends_.erase(it);
  if (retired.send->provider_failed) Retire(std::move(retired));
}

void DataPlaneServer::OnHeader(HeaderSlot* slot, const Completion& c) {
  if (!c.status.ok()) {  // longer than any header message: not ours
    ++refused_frames_;
    LOG_EVERY_N(WARNING, 100) << "data plane: dropped a message: " << c.status;
    return;
  }
  absl::StatusOr<FrameMessage> frame = ParseFrameMessage(
      absl::MakeConstSpan(slot->bytes, c.bytes), options_.limits);
  if (!frame.ok()) {
    ++refused_frames_;
    LOG_EVERY_N(WARNING, 100) << "data plane: " << frame.status();
    return;
  }
  switch (frame->header.kind) {
    case FrameKind::kHello:
      OnHello(*frame);
      return;
    case FrameKind::kRequest:
      OnRequest(*frame, c.source);
      return;
    case FrameKind::kReady:
      OnReady(*frame, c.source);
      return;
    default:
      ++refused_frames_;
      LOG_EVERY_N(WARNING, 100)
          << "data plane: a client sent a " << FrameKindName(frame->header.kind)
          << " frame";
  }
}

void DataPlaneServer::OnHello(const FrameMessage& frame) {
  const uint32_t id = frame.header.connection_id;
  if (frame.body_follows) {  // hellos are small (FrameLimits)
    ++refused_hellos_;
    return;
  }
  absl::StatusOr<Hello> hello = DecodeHello(
      absl::string_view(reinterpret_cast<const char*>(frame.inline_body.data()),
                        frame.inline_body.size()));
  bool outstanding = false;
  absl::Status s = hello.status();
  if (s.ok()) s = gate_.Redeem(id, *hello, &outstanding);
  if (!s.ok()) {
    ++refused_hellos_;
    LOG_EVERY_N(WARNING, 20) << "data plane: refused a hello: " << s;
    // Only a hello for a challenge this server issued (over gRPC, to a
    // caller gRPC let in) is answered: an answer to anything else would
    // let anyone aim this server's messages at any address.
    if (!outstanding || !hello.ok()) return;
  }
  absl::StatusOr<fi_addr_t> peer = endpoint_->InsertPeer(hello->client_address);
  if (!peer.ok()) {
    ++refused_hellos_;
    LOG_EVERY_N(WARNING, 20)
        << "data plane: refused a hello: " << peer.status();
    return;
  }
  if (!s.ok()) {
    SendError(Caller{*peer, id, 0, 0}, s);
    return;
  }
  const uint64_t key = NewConnectionKey();
  {
    absl::MutexLock lock(&mu_);
    if (connections_.size() >= options_.max_connections) {
      auto oldest = connections_.begin();
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        if (it->second.last_used < oldest->second.last_used) oldest = it;
      }
      LOG(INFO) << "data plane: " << connections_.size()
                << " connections open; closing the least recently used, "
                << oldest->first;
      connections_.erase(oldest);
    }
    connections_[id] = Connection{*peer, key, ++use_counter_};
    stuck_peers_.erase(*peer);
  }
  FrameHeader welcome;
  welcome.kind = FrameKind::kWelcome;
  welcome.connection_id = id;
  auto key_bytes = std::make_shared<std::array<uint8_t, 8>>();
  for (int i = 0; i < 8; ++i)
    (*key_bytes)[i] = static_cast<uint8_t>(key >> (8 * i));
  const Segment body = absl::MakeConstSpan(*key_bytes);
  SendFrame(*peer, welcome, {&body, 1}, key_bytes);
}

fi_addr_t DataPlaneServer::ConnectionPeer(const FrameHeader& header,
                                          fi_addr_t source) {
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(header.connection_id);
  // The connection's key, and its address where the provider says who
  // sent the message.
  if (it == connections_.end() || it->second.key != header.connection_key ||
      (source != FI_ADDR_NOTAVAIL && source != it->second.peer)) {
    ++refused_frames_;
    LOG_EVERY_N(WARNING, 100)
        << "data plane: a " << FrameKindName(header.kind) << " on connection "
        << header.connection_id
        << " without that connection's key or from another address, dropped";
    return FI_ADDR_NOTAVAIL;
  }
  it->second.last_used = ++use_counter_;
  return it->second.peer;
}

void DataPlaneServer::OnRequest(const FrameMessage& frame, fi_addr_t source) {
  const FrameHeader& header = frame.header;
  const Caller caller{ConnectionPeer(header, source), header.connection_id,
                      header.sequence, header.connection_key};
  // Its body, if separate, was not asked for: it is never sent.
  if (caller.peer == FI_ADDR_NOTAVAIL) return;
  if (!frame.body_follows) {
    std::shared_ptr<BodyBuffer> request;
    try {
      request = body_pool_->Take(frame.inline_body.size());
    } catch (const std::bad_alloc&) {
      SendError(caller,
                absl::ResourceExhaustedError("no memory for a request"));
      return;
    }
    if (!frame.inline_body.empty()) {
      std::memcpy(request->data(), frame.inline_body.data(),
                  frame.inline_body.size());
    }
    Dispatch(caller, std::move(request), 0);
    return;
  }
  bool over_budget = false;
  {
    absl::MutexLock lock(&mu_);
    if (inflight_body_bytes_ + header.body_bytes >
        options_.max_inflight_body_bytes) {
      over_budget = true;
    } else {
      inflight_body_bytes_ += header.body_bytes;
    }
  }
  if (over_budget) {
    SendError(caller,
              absl::ResourceExhaustedError(absl::StrCat(
                  "this PS is receiving ", options_.max_inflight_body_bytes,
                  " bytes of requests already; retry")));
    return;
  }
  auto body = std::make_unique<BodyReceive>(frame.body_sends.size());
  body->sizes = frame.body_sends;
  for (Op& op : body->ops) {
    op.purpose = kBody;
    op.user = body.get();
  }
  body->header = header;
  body->caller = caller;
  absl::Status s;
  try {
    body->data = body_pool_->Take(header.body_bytes);
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError(absl::StrCat("no memory for a request of ",
                                                  header.body_bytes, " bytes"));
  }
  if (s.ok()) {
    absl::StatusOr<MemoryRegion> region =
        endpoint_->Register(body->data->data(), body->data->size());
    s = region.status();
    if (s.ok()) body->region = *std::move(region);
  }
  // The messages land back to back, in the order they were sent.
  uint64_t at = 0;
  size_t posted = 0;
  for (size_t i = 0; s.ok() && i < body->ops.size(); ++i) {
    s = Post([&] {
      return endpoint_->PostRecv(caller.peer,
                                 BodyTag(header.connection_id, header.sequence),
                                 0, body->data->data() + at, body->sizes[i],
                                 body->region.desc(), &body->ops[i]);
    });
    if (s.ok()) ++posted;
    at += body->sizes[i];
  }
  if (!s.ok() && posted == 0) {
    {
      absl::MutexLock lock(&mu_);
      inflight_body_bytes_ -= header.body_bytes;
    }
    SendError(caller, s);
    return;
  }
  body->outstanding = posted;
  body->posted = awake_.Now();
  BodyReceive* key = body.get();
  bodies_[key] = std::move(body);
  if (!s.ok()) {
    // Posted in part: what was posted is cancelled, completes CANCELLED,
    // and the request is refused; its body is never asked for.
    key->failure = s;
    key->cancelled = true;
    for (size_t i = 0; i < posted; ++i) endpoint_->Cancel(&key->ops[i]);
    return;
  }
  ++bodies_posted_;
  // Every receive is posted: the body can come.
  SendFrame(
      caller.peer,
      ReadyHeader(header.connection_id, header.sequence, header.connection_key),
      {}, nullptr);
}

void DataPlaneServer::OnReady(const FrameMessage& frame, fi_addr_t source) {
  const FrameHeader& header = frame.header;
  const fi_addr_t peer = ConnectionPeer(header, source);
  if (peer == FI_ADDR_NOTAVAIL) return;
  PendingSend* send = nullptr;
  bool late = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = awaiting_ready_.find(header.connection_id);
    if (it != awaiting_ready_.end() &&
        it->second->to.sequence == header.sequence) {
      send = it->second;
      // Counted before they are posted, so that the send stays.
      send->outstanding += static_cast<int>(send->body_ops.size());
      Unpark(send);
    } else if (auto c = connections_.find(header.connection_id);
               c != connections_.end() && header.sequence != 0 &&
               c->second.dropped_reply == header.sequence) {
      // Its reply was dropped for want of this ready: its client learns
      // so at once (once: the notice is not sent again).
      c->second.dropped_reply = 0;
      late = true;
    }
  }
  if (late) {
    ++late_readies_;
    SendDropNotice(peer, header.connection_id, header.sequence);
    return;
  }
  if (send == nullptr) {
    ++refused_frames_;
    LOG_EVERY_N(WARNING, 100)
        << "data plane: a ready frame for call " << header.sequence
        << " on connection " << header.connection_id
        << ", which has no reply waiting, dropped";
    return;
  }
  // Posted from here while the provider's queue takes them (a handler
  // thread's wake-up would cost small replies a third of their speed);
  // what waits for room goes to a handler thread, as this thread drains
  // the queue.
  const size_t sends = send->body_ops.size();
  const size_t posted = PostSends(send, 1, sends, /*may_wait=*/false);
  if (posted == sends) return;
  absl::MutexLock lock(&mu_);
  work_.push_back([this, send, posted, sends] {
    PostSends(send, 1 + posted, sends - posted, /*may_wait=*/true);
  });
  work_ready_.Signal();
}

void DataPlaneServer::DropUnclaimedReplies(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<PendingSend*> overdue;
  for (const auto& [id, send] : awaiting_ready_) {
    if (send->ready_by <= now) overdue.push_back(send);
  }
  for (PendingSend* send : overdue) {
    ++unclaimed_replies_;
    if (auto c = connections_.find(send->to.connection_id);
        c != connections_.end() && c->second.peer == send->to.peer) {
      c->second.dropped_reply = send->to.sequence;
    }
    LOG_EVERY_N(WARNING, 20)
        << "data plane: no ready frame for the reply to call "
        << send->to.sequence << " on connection " << send->to.connection_id
        << " within " << absl::FormatDuration(options_.stuck_send_timeout)
        << "; its body is dropped";
    Unpark(send);
  }
}

void DataPlaneServer::SendDropNotice(fi_addr_t peer, uint32_t connection_id,
                                     uint32_t sequence) {
  auto send = std::make_unique<PendingSend>();
  PendingSend* p = send.get();
  p->to = Caller{peer, connection_id, sequence, 0};
  p->body_ops.resize(1);
  p->body_ops[0].purpose = kSend;
  p->body_ops[0].user = p;
  p->completed = {true, false};  // no header message: the body's only
  p->outstanding = 1;
  {
    absl::MutexLock lock(&mu_);
    sends_[p] = std::move(send);
  }
  // On the progress thread, which reports the send's completion: it
  // cannot come before this returns.
  absl::Status s = endpoint_->PostSend(peer, BodyTag(connection_id, sequence),
                                       nullptr, 0, nullptr, &p->body_ops[0]);
  if (!s.ok()) {
    // The client waits out its deadline, as without the notice.
    LOG_EVERY_N(WARNING, 20)
        << "data plane: could not tell connection " << connection_id
        << " that the reply to call " << sequence << " was dropped: " << s;
    absl::MutexLock lock(&mu_);
    sends_.erase(p);
  }
}

void DataPlaneServer::Unpark(PendingSend* send) {
  send->awaiting_ready = false;
  auto it = awaiting_ready_.find(send->to.connection_id);
  if (it != awaiting_ready_.end() && it->second == send) {
    awaiting_ready_.erase(it);
  }
  if (send->outstanding == 0) sends_.erase(send);
}

void DataPlaneServer::OnBody(BodyReceive* body, const Completion& c) {
  const size_t index = static_cast<size_t>(c.op - body->ops.data());
  if (!FirstReport(&body->completed, index)) return;
  if (!c.status.ok() && !absl::IsInvalidArgument(c.status)) {
    body->provider_failed = true;
  }
  if (body->failure.ok() && !c.status.ok()) body->failure = c.status;
  if (body->failure.ok() && c.bytes != body->sizes[index]) {
    body->failure = absl::InvalidArgumentError(
        absl::StrCat("message ", index, " of ", c.bytes,
                     " bytes, its frame said ", body->sizes[index]));
  }
  if (--body->outstanding > 0) return;
  auto it = bodies_.find(body);
  Retired done;
  done.body = std::move(it->second);
  bodies_.erase(it);
  absl::Cleanup retire = [this, &done] {
    if (done.body->provider_failed) Retire(std::move(done));
  };
  const FrameHeader& header = body->header;
  const absl::Status s = body->failure;
  if (!s.ok()) {
    ++refused_bodies_;
    {
      absl::MutexLock lock(&mu_);
      inflight_body_bytes_ -= header.body_bytes;
    }
    SendError(body->caller,
              absl::InvalidArgumentError(absl::StrCat(
                  "request body refused, nothing applied: ", s.message())));
    return;
  }
  Dispatch(body->caller, std::move(body->data), header.body_bytes);
}

void DataPlaneServer::Dispatch(const Caller& caller,
                               std::shared_ptr<BodyBuffer> request,
                               uint64_t charged_bytes) {
  absl::MutexLock lock(&mu_);
  work_.push_back([this, caller, request = std::move(request), charged_bytes] {
    ++calls_;
    bytes_in_ += static_cast<int64_t>(request->size());
    Request call;
    call.connection_id = caller.connection_id;
    call.bytes = absl::MakeConstSpan(request->data(), request->size());
    call.owner = request;
    handler_(std::move(call), [liveness = liveness_, caller,
                               charged_bytes](absl::StatusOr<Reply> reply) {
      absl::ReaderMutexLock lock(&liveness->mu);
      if (liveness->server != nullptr) {
        liveness->server->Answer(caller, std::move(reply), charged_bytes);
      }
    });
  });
  work_ready_.Signal();
}

void DataPlaneServer::Answer(const Caller& caller, absl::StatusOr<Reply> reply,
                             uint64_t charged_bytes) {
  {
    absl::MutexLock lock(&mu_);
    inflight_body_bytes_ -= charged_bytes;
  }
  if (!reply.ok()) {
    SendError(caller, reply.status());
    return;
  }
  for (const Segment& segment : reply->segments) {
    bytes_out_ += static_cast<int64_t>(segment.size());
  }
  FrameHeader header;
  header.kind = FrameKind::kResponse;
  header.connection_id = caller.connection_id;
  header.sequence = caller.sequence;
  header.connection_key = caller.key;
  SendFrame(caller.peer, header, reply->segments, std::move(reply->owner));
}

void DataPlaneServer::SendError(const Caller& caller,
                                const absl::Status& status) {
  FrameHeader header;
  header.kind = FrameKind::kResponse;
  header.connection_id = caller.connection_id;
  header.sequence = caller.sequence;
  header.connection_key = caller.key;
  header.status_code = status.code();
  absl::string_view message = status.message();
  auto text = std::make_shared<std::string>(
      message.substr(0, std::min(message.size(), kInlineBodyBytes)));
  const Segment body(reinterpret_cast<const uint8_t*>(text->data()),
                     text->size());
  SendFrame(caller.peer, header, {&body, 1}, std::move(text));
}

void DataPlaneServer::SendFrame(fi_addr_t peer, const FrameHeader& frame_header,
                                absl::Span<const Segment> body,
                                std::shared_ptr<const void> owner) {
  auto send = std::make_unique<PendingSend>();
  PendingSend* p = send.get();
  p->to = Caller{peer, frame_header.connection_id, frame_header.sequence,
                 frame_header.connection_key};
  p->body = OutgoingBody(body, endpoint_->iov_limit());
  p->header_op.purpose = kSend;
  p->header_op.user = p;
  const bool body_follows =
      p->body.EncodeHeaderMessage(frame_header, &p->message);
  const size_t sends = body_follows ? p->body.sends().size() : 0;
  p->body_ops.resize(sends);
  for (Op& op : p->body_ops) {
    op.purpose = kSend;
    op.user = p;
  }
  p->owner = std::move(owner);
  absl::Status s;
  if (absl::StatusOr<MemoryRegion> r =
          endpoint_->Register(p->message.data(), p->message.size());
      r.ok()) {
    p->message_region = *std::move(r);
  } else {
    s = r.status();
  }
  p->body_descs.resize(sends);
  for (size_t i = 0; s.ok() && i < sends; ++i) {
    const OutgoingBody::Send& piece = p->body.sends()[i];
    s = endpoint_->RegisterIov(piece.iov, piece.count, p->body_descs[i].data(),
                               &p->body_regions);
  }
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 100)
        << "data plane: could not answer connection " << p->to.connection_id
        << " call " << p->to.sequence << ": " << s;
    return;
  }
  p->completed.assign(1 + sends, false);
  {
    absl::MutexLock lock(&mu_);
    if (stuck_peers_.contains(peer)) {
      // Dropped: it took nothing for options_.stuck_send_timeout.
      return;
    }
    p->outstanding = 1;
    if (sends > 0) {
      // The body goes once the client says its receives are posted.
      p->awaiting_ready = true;
      p->ready_by = awake_.Now() + options_.stuck_send_timeout;
      // One waits already when its client gave up on the call before
      // (one call at a time on a connection).
      if (auto it = awaiting_ready_.find(p->to.connection_id);
          it != awaiting_ready_.end()) {
        Unpark(it->second);
      }
      awaiting_ready_[p->to.connection_id] = p;
    }
    sends_[p] = std::move(send);
  }
  // The progress thread drains the provider's queue: it does not wait
  // for room in it, a handler thread does.
  if (std::this_thread::get_id() != progress_thread_id_.load()) {
    PostSends(p, 0, 1, /*may_wait=*/true);
  } else if (PostSends(p, 0, 1, /*may_wait=*/false) == 0) {
    absl::MutexLock lock(&mu_);
    work_.push_back([this, p] { PostSends(p, 0, 1, /*may_wait=*/true); });
    work_ready_.Signal();
  }
}

size_t DataPlaneServer::PostSends(PendingSend* p, size_t first, size_t count,
                                  bool may_wait) {
  const uint32_t id = p->to.connection_id, seq = p->to.sequence;
  absl::Status s;
  size_t posted = 0;
  for (size_t i = first; s.ok() && i < first + count; ++i) {
    s = Post(
        [&] {
          if (i == 0) {
            return endpoint_->PostSend(p->to.peer, HeaderTag(id, seq),
                                       p->message.data(), p->message.size(),
                                       p->message_region.desc(), &p->header_op);
          }
          const OutgoingBody::Send& piece = p->body.sends()[i - 1];
          return endpoint_->PostSendv(p->to.peer, BodyTag(id, seq), piece.iov,
                                      p->body_descs[i - 1].data(), piece.count,
                                      &p->body_ops[i - 1]);
        },
        may_wait ? options_.stuck_send_timeout : absl::ZeroDuration(),
        /*peer_wait=*/may_wait);
    if (s.ok()) ++posted;
  }
  if (s.ok() || (!may_wait && absl::IsResourceExhausted(s))) return posted;
  LOG_EVERY_N(WARNING, 100) << "data plane: could not answer connection " << id
                            << " call " << seq << ": " << s;
  absl::MutexLock lock(&mu_);
  if (absl::IsResourceExhausted(s)) {
    // The peer takes nothing: its connection goes, and nothing more is
    // sent to it (a hello from it starts afresh).
    stuck_peers_.insert(p->to.peer);
    auto it = connections_.find(id);
    if (it != connections_.end() && it->second.peer == p->to.peer) {
      connections_.erase(it);
    }
    LOG(WARNING) << "data plane: connection " << id << " took no message for "
                 << absl::FormatDuration(options_.stuck_send_timeout)
                 << "; closed (its peer is gone or hung)";
  }
  p->outstanding -= static_cast<int>(count - posted);
  if (p->awaiting_ready) {
    Unpark(p);  // its header never went: no ready will come for the body
  } else if (p->outstanding == 0) {
    sends_.erase(p);
  }
  return count;  // none left to post
}

void DataPlaneServer::HandlerLoop() {
  while (true) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      if (work_.empty() && !stopping_) {
        work_ready_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
      }
      if (work_.empty()) {
        if (stopping_) return;
        continue;
      }
      work = std::move(work_.front());
      work_.pop_front();
    }
    work();
  }
}

}  // namespace psrt::dataplane
