#include "dataplane/data_plane_client.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psrt::dataplane {
namespace {

// A call's posted operation and where its outcome goes.
struct CallOp {
  Op op;
  int* pending = nullptr;
  absl::Status status;  // stays OK until the operation completes
  uint64_t bytes = 0;
  bool done = false;  // it completed
};

void Prepare(CallOp* call_op, int* pending) {
  call_op->op.user = call_op;
  call_op->pending = pending;
}

// Waits up to `timeout` for completions, which drives the provider's
// progress, and records each in its CallOp.
void RecordCompletions(FabricEndpoint* endpoint, absl::Duration timeout,
                       bool idle = false) {
  Completion completions[8];
  const size_t n = endpoint->Poll(completions, 8, timeout, idle);
  for (size_t i = 0; i < n; ++i) {
    auto* call_op = static_cast<CallOp*>(completions[i].op->user);
    call_op->status = completions[i].status;
    call_op->bytes = completions[i].bytes;
    call_op->done = true;
    --*call_op->pending;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlaneClient>> DataPlaneClient::Connect(
    const FabricOptions& fabric, absl::string_view server_address,
    const Challenge& challenge, absl::string_view token, absl::Time deadline,
    FrameLimits limits, PeerCheck peer_check) {
  FabricOptions with_doorbell = fabric;
  with_doorbell.doorbell = true;  // shm: the PS rings it with each answer
  // A call answered within 1 ms pays no wake-up (a 4 MiB pull lost a
  // quarter of its speed sleeping after 200 us); a longer wait (a SYNC
  // barrier, a slow PS) sleeps.
  with_doorbell.sleep_after = absl::Milliseconds(1);
  absl::StatusOr<std::unique_ptr<FabricEndpoint>> endpoint =
      FabricEndpoint::Open(with_doorbell);
  if (!endpoint.ok()) return endpoint.status();
  absl::StatusOr<fi_addr_t> server = (*endpoint)->InsertPeer(server_address);
  if (!server.ok()) return server.status();
  const std::string hello_body =
      EncodeHello((*endpoint)->address(),
                  HelloProof(token, challenge, (*endpoint)->address()));
  std::unique_ptr<DataPlaneClient> client(new DataPlaneClient(
      *std::move(endpoint), *server, challenge.connection_id, limits));
  client->peer_check_ = std::move(peer_check);
  absl::MutexLock lock(&client->mu_);
  absl::StatusOr<MemoryRegion> region =
      client->endpoint_->Register(client->answer_, sizeof(client->answer_));
  if (!region.ok()) return region.status();
  client->answer_region_ = *std::move(region);
  region = client->endpoint_->Register(client->ready_, sizeof(client->ready_));
  if (!region.ok()) return region.status();
  client->ready_region_ = *std::move(region);
  FrameHeader hello;
  hello.kind = FrameKind::kHello;
  hello.connection_id = challenge.connection_id;
  absl::StatusOr<FrameMessage> answer = client->Exchange(
      hello,
      {Segment(reinterpret_cast<const uint8_t*>(hello_body.data()),
               hello_body.size())},
      deadline);
  if (!answer.ok()) {
    return absl::Status(
        absl::IsDeadlineExceeded(answer.status())
            ? absl::StatusCode::kUnavailable
            : answer.status().code(),
        absl::StrCat("no welcome from the data plane at the PS: ",
                     answer.status().message()));
  }
  if (answer->header.kind == FrameKind::kResponse &&
      answer->header.status_code != absl::StatusCode::kOk) {
    return absl::Status(
        answer->header.status_code,
        absl::StrCat("the PS refused the data-plane connection: ",
                     absl::string_view(reinterpret_cast<const char*>(
                                           answer->inline_body.data()),
                                       answer->inline_body.size())));
  }
  if (answer->header.kind != FrameKind::kWelcome ||
      answer->inline_body.size() != 8) {
    return absl::UnavailableError(
        absl::StrCat("the PS answered a data-plane hello with a ",
                     FrameKindName(answer->header.kind), " frame of ",
                     answer->inline_body.size(), " bytes"));
  }
  for (int i = 7; i >= 0; --i) {
    client->key_ = (client->key_ << 8) | answer->inline_body[i];
  }
  return client;
}

DataPlaneClient::DataPlaneClient(std::unique_ptr<FabricEndpoint> endpoint,
                                 fi_addr_t server, uint32_t connection_id,
                                 FrameLimits limits)
    : provider_(endpoint->provider()),
      server_(server),
      connection_id_(connection_id),
      limits_(limits),
      endpoint_(std::move(endpoint)) {}

DataPlaneClient::~DataPlaneClient() {
  absl::MutexLock lock(&mu_);
  if (endpoint_ != nullptr) endpoint_->Close();
  answer_region_ = MemoryRegion();
  ready_region_ = MemoryRegion();
  endpoint_.reset();
}

bool DataPlaneClient::broken() const {
  absl::MutexLock lock(&mu_);
  return !broken_.ok();
}

absl::Status DataPlaneClient::Break(absl::Status why) {
  broken_ = why;
  // Closing ends every operation still posted: none can write into the
  // caller's memory after this call returns.
  endpoint_->Close();
  answer_region_ = MemoryRegion();
  ready_region_ = MemoryRegion();
  endpoint_.reset();
  return why;
}

// How often a waiting call asks peer_check_ whether the PS is gone.
constexpr absl::Duration kPeerCheckInterval = absl::Milliseconds(50);

absl::Status DataPlaneClient::Await(int* pending, absl::Time deadline,
                                    bool idle,
                                    const std::function<bool()>& stop) {
  // Checked once per interval of waiting, not per completion (a body's
  // messages complete one by one).
  absl::Time next_check = absl::Now() + kPeerCheckInterval;
  while (*pending > 0 && !(stop && stop())) {
    const absl::Time now = absl::Now();
    const absl::Duration left = deadline - now;
    if (left <= absl::ZeroDuration()) {
      return Break(absl::DeadlineExceededError(
          absl::StrCat("data-plane call on connection ", connection_id_,
                       " passed its deadline")));
    }
    if (now >= next_check) {
      if (absl::Status s = CheckPeer(); !s.ok()) return Break(s);
      next_check = absl::Now() + kPeerCheckInterval;
      continue;
    }
    RecordCompletions(endpoint_.get(), std::min(left, next_check - now), idle);
  }
  return absl::OkStatus();
}

absl::Status DataPlaneClient::Post(const std::function<absl::Status()>& post,
                                   int* pending, absl::Time deadline) {
  absl::Time next_check = absl::Now() + kPeerCheckInterval;
  while (true) {
    absl::Status s = post();
    if (s.ok()) {
      ++*pending;
      return s;
    }
    if (!absl::IsResourceExhausted(s)) return s;
    // A queue full until the deadline (tcp: a connection still being set
    // up, a PS too busy to take messages) is the call's deadline passing.
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("data-plane call on connection ", connection_id_,
                       " passed its deadline before its message could leave (",
                       s.message(), ")"));
    }
    RecordCompletions(endpoint_.get(), absl::Milliseconds(1));
    // A queue that stays full may be a PS that is gone.
    if (absl::Now() >= next_check) {
      if (absl::Status peer = CheckPeer(); !peer.ok()) return peer;
      next_check = absl::Now() + kPeerCheckInterval;
    }
  }
}

absl::StatusOr<FrameMessage> DataPlaneClient::Exchange(
    const FrameHeader& frame_header, absl::Span<const Segment> segments,
    absl::Time deadline) {
  const OutgoingBody body(segments, endpoint_->iov_limit());
  const bool body_follows = body.EncodeHeaderMessage(frame_header, &message_);
  const uint32_t id = frame_header.connection_id, seq = frame_header.sequence;
  absl::StatusOr<FrameMessage> answer =
      SendAndAwaitAnswer(id, seq, nullptr, deadline);
  // Without a ready the PS answered before taking the body (it refused
  // the request), and the body was never sent.
  if (!answer.ok() || !body_follows ||
      answer->header.kind != FrameKind::kReady) {
    return answer;
  }
  if (answer->header.connection_key != key_) {
    return Break(absl::InternalError(
        "data-plane ready frame without this connection's key"));
  }
  answer = SendAndAwaitAnswer(id, seq, &body, deadline);
  if (answer.ok() && answer->header.kind == FrameKind::kReady) {
    return Break(absl::InternalError(
        absl::StrCat("the PS said it was ready twice for call ", seq,
                     " on connection ", id)));
  }
  return answer;
}

absl::StatusOr<FrameMessage> DataPlaneClient::SendAndAwaitAnswer(
    uint32_t id, uint32_t seq, const OutgoingBody* body, absl::Time deadline) {
  int pending = 0;
  CallOp answer;
  Prepare(&answer, &pending);
  // The header message, or the body's messages.
  std::vector<CallOp> sends(body == nullptr ? 1 : body->sends().size());
  std::vector<std::array<void*, 4>> descs(sends.size());
  std::vector<MemoryRegion> regions;
  for (size_t i = 0; i < sends.size(); ++i) {
    Prepare(&sends[i], &pending);
    absl::Status s;
    if (body == nullptr) {
      absl::StatusOr<MemoryRegion> region =
          endpoint_->Register(message_.data(), message_.size());
      s = region.status();
      if (s.ok()) {
        descs[i][0] = region->desc();
        regions.push_back(*std::move(region));
      }
    } else {
      const OutgoingBody::Send& send = body->sends()[i];
      s = endpoint_->RegisterIov(send.iov, send.count, descs[i].data(),
                                 &regions);
    }
    if (!s.ok()) return Break(s);
  }
  auto post = [&](const std::function<absl::Status()>& fn)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                    return Post(fn, &pending, deadline);
                  };
  absl::Status s = post([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return endpoint_->PostRecv(server_, HeaderTag(id, seq), 0, answer_,
                               sizeof(answer_), answer_region_.desc(),
                               &answer.op);
  });
  for (size_t i = 0; s.ok() && i < sends.size(); ++i) {
    s = post([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (body == nullptr) {
        return endpoint_->PostSend(server_, HeaderTag(id, seq), message_.data(),
                                   message_.size(), descs[i][0], &sends[i].op);
      }
      const OutgoingBody::Send& send = body->sends()[i];
      return endpoint_->PostSendv(server_, BodyTag(id, seq), send.iov,
                                  descs[i].data(), send.count, &sends[i].op);
    });
  }
  if (!s.ok()) return Break(s);
  // Awaited: the answer's header message, which its sender rings for.
  if (absl::Status waited = Await(&pending, deadline, /*idle=*/true);
      !waited.ok()) {
    return waited;
  }
  for (const CallOp& op : sends) {
    if (!op.status.ok()) {
      return Break(absl::UnavailableError(absl::StrCat(
          "data-plane call on connection ", id, ": ", op.status.message())));
    }
  }
  if (!answer.status.ok()) {
    return Break(absl::UnavailableError(absl::StrCat(
        "data-plane call on connection ", id, ": ", answer.status.message())));
  }
  absl::StatusOr<FrameMessage> frame =
      ParseFrameMessage(absl::MakeConstSpan(answer_, answer.bytes), limits_);
  if (!frame.ok()) return Break(frame.status());
  if (frame->header.connection_id != id || frame->header.sequence != seq) {
    return Break(absl::InternalError(absl::StrCat(
        "data-plane answer for connection ", frame->header.connection_id,
        " call ", frame->header.sequence, ", expected ", id, " call ", seq)));
  }
  return frame;
}

absl::Status DataPlaneClient::SendReady(uint32_t sequence, Op* op, int* pending,
                                        absl::Time deadline) {
  EncodeFrameHeader(ReadyHeader(connection_id_, sequence, key_), ready_);
  return Post(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return endpoint_->PostSend(server_, HeaderTag(connection_id_, sequence),
                                   ready_, sizeof(ready_), ready_region_.desc(),
                                   op);
      },
      pending, deadline);
}

absl::Status DataPlaneClient::Call(absl::Span<const uint8_t> request,
                                   const BodySink& sink, absl::Time deadline) {
  const Segment whole = request;
  return Call(absl::MakeConstSpan(&whole, 1), sink, deadline);
}

absl::Status DataPlaneClient::Call(absl::Span<const Segment> request,
                                   const BodySink& sink, absl::Time deadline) {
  uint64_t request_bytes = 0;
  for (const Segment& s : request) request_bytes += s.size();
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) {
    return absl::UnavailableError(
        absl::StrCat("data-plane connection ", connection_id_,
                     " broke earlier (", broken_.message(), "); open another"));
  }
  if (request_bytes > limits_.max_body_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane request of ", request_bytes,
                     " bytes, over the limit ", limits_.max_body_bytes));
  }
  FrameHeader header;
  header.kind = FrameKind::kRequest;
  header.connection_id = connection_id_;
  header.connection_key = key_;
  if (((++sequence_) & 0x7fffffffu) == 0) ++sequence_;  // 0 is the hello's
  header.sequence = sequence_ & 0x7fffffffu;
  absl::StatusOr<FrameMessage> answer = Exchange(header, request, deadline);
  if (!answer.ok()) return answer.status();
  if (answer->header.kind != FrameKind::kResponse ||
      answer->header.connection_key != key_) {
    return Break(absl::InternalError(absl::StrCat(
        "data-plane call answered with a ", FrameKindName(answer->header.kind),
        " frame",
        answer->header.connection_key != key_ ? " without this connection's key"
                                              : "")));
  }
  if (answer->header.status_code != absl::StatusCode::kOk) {
    return absl::Status(answer->header.status_code,
                        absl::string_view(reinterpret_cast<const char*>(
                                              answer->inline_body.data()),
                                          answer->inline_body.size()));
  }
  const uint64_t bytes = answer->header.body_bytes;
  absl::StatusOr<absl::Span<uint8_t>> target = sink(bytes);
  if (target.ok() && target->size() != bytes) {
    target = absl::InternalError(absl::StrCat(
        "response sink gave ", target->size(), " bytes for ", bytes));
  }
  if (!target.ok()) {
    // A body sent apart waits at the PS for a ready that will not come
    // (it drops it after its stuck_send_timeout); the connection is not
    // used again.
    return answer->body_follows ? Break(target.status()) : target.status();
  }
  if (!answer->body_follows) {
    if (bytes > 0)
      std::memcpy(target->data(), answer->inline_body.data(), bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<MemoryRegion> region =
      endpoint_->Register(target->data(), target->size());
  if (!region.ok()) return Break(region.status());
  // One receive per message the body comes in, back to back.
  int pending = 0;
  std::vector<CallOp> pieces(answer->body_sends.size());
  uint64_t at = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    Prepare(&pieces[i], &pending);
    absl::Status s =
        endpoint_->PostRecv(server_, BodyTag(connection_id_, header.sequence),
                            0, target->data() + at, answer->body_sends[i],
                            region->desc(), &pieces[i].op);
    if (!s.ok()) return Break(s);
    ++pending;
    at += answer->body_sends[i];
  }
  // The PS sends the body once it hears that its receives are posted.
  CallOp ready_send;
  Prepare(&ready_send, &pending);
  if (absl::Status s =
          SendReady(header.sequence, &ready_send.op, &pending, deadline);
      !s.ok()) {
    return Break(s);
  }
  // The drop notice (frame.h) lands in the first receive.
  auto dropped = [&pieces] {
    return pieces[0].done && pieces[0].status.ok() && pieces[0].bytes == 0;
  };
  if (absl::Status waited = Await(&pending, deadline, /*idle=*/false, dropped);
      !waited.ok()) {
    return waited;
  }
  if (dropped()) {
    // The rest of the receives go with the connection.
    return Break(absl::UnavailableError(absl::StrCat(
        "the PS dropped its reply to call ", header.sequence,
        " on data-plane connection ", connection_id_,
        ": this client's ready frame came after the PS stopped waiting "
        "for it (was this process stopped or starved of CPU?)")));
  }
  if (!ready_send.status.ok()) {
    return Break(absl::UnavailableError(
        absl::StrCat("data-plane reply on connection ", connection_id_, ": ",
                     ready_send.status.message())));
  }
  uint64_t received = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    // A message the fabric failed (rxm cancels receives on a connection
    // the PS's end closed): the PS is gone or cut off, retryable.
    if (!pieces[i].status.ok()) {
      return Break(absl::UnavailableError(
          absl::StrCat("data-plane reply on connection ", connection_id_, ": ",
                       pieces[i].status.message())));
    }
    if (pieces[i].bytes != answer->body_sends[i]) {
      return Break(absl::InvalidArgumentError(absl::StrCat(
          "data-plane reply's message ", i, " of ", pieces[i].bytes,
          " bytes, its frame said ", answer->body_sends[i])));
    }
    received += pieces[i].bytes;
  }
  if (absl::Status checked = CheckFrameBody(answer->header, received);
      !checked.ok()) {
    return Break(checked);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DataPlaneClient::Call(
    absl::Span<const uint8_t> request, absl::Time deadline) {
  const Segment whole = request;
  return Call(absl::MakeConstSpan(&whole, 1), deadline);
}

absl::StatusOr<std::string> DataPlaneClient::Call(
    absl::Span<const Segment> request, absl::Time deadline) {
  std::string reply;
  absl::Status s = Call(
      request,
      [&reply](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
        reply.resize(bytes);
        return absl::MakeSpan(reinterpret_cast<uint8_t*>(reply.data()),
                              reply.size());
      },
      deadline);
  if (!s.ok()) return s;
  return reply;
}

}  // namespace psrt::dataplane
